"""AWS through boto3: refresh a catalog from the live APIs (launches: :mod:`dnnprov.cloud.launch`).

Credentials come from boto3's standard chain only (environment, shared files, SSO,
instance or container role); no message, log line or file written here contains them:
every error is redacted by value (each credential the clients hold: access key id, secret
key, session token, also URL-encoded) and by the shape of an access key id.
Throttling and transient failures are retried with exponential backoff and jitter; after
that one :class:`CloudError` says what failed, and no catalog file is written.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import boto3
import botocore.session
from botocore import xform_name
from botocore.client import BaseClient
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError as BotoConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.parsers import ResponseParserError

from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import Catalog, CatalogEntry
from dnnprov.io.catalogs.importing import (
    cheapest_zone,
    dated_catalog_name,
    iso,
    parse_price,
    parse_time,
    quota_family,
    write_catalog,
)
from dnnprov.io.catalogs.regions import merge_regions
from dnnprov.problems.spot import VcpuQuota

#: vCPU quota codes of Service Quotas (service ``ec2``) per (family, market).
QUOTA_CODES: dict[tuple[str, str], tuple[str, str]] = {
    ("G", "spot"): ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    ("P", "spot"): ("L-7212CCBC", "All P Spot Instance Requests"),
    ("G", "on-demand"): ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("P", "on-demand"): ("L-417A185B", "Running On-Demand P instances"),
}
PRICING_REGION = "us-east-1"
GPU_TYPE_PATTERNS = ("g*", "p*")
LINUX = "Linux/UNIX"
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "EC2ThrottledException",
        "SlowDown",
        "PriorRequestNotComplete",
    }
)
TRANSIENT_CODES = frozenset(
    {
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "Unavailable",
    }
)
CREDENTIAL_CODES = frozenset(
    {
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "AuthFailure",
        "InvalidToken",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
        "InvalidSignatureException",
        "MissingAuthenticationToken",
    }
)
_ACCESS_KEY = re.compile(r"\b(?:AKIA|ASIA|AIDA|AROA|AGPA|AIPA|ANPA|ANVA|A3T[A-Z0-9])[A-Z0-9]{12,}\b")


class CloudError(InvalidInputError):
    """A cloud API call failed (credentials, region, throttling, malformed data).

    ``code`` is the AWS error code when there is one (e.g. ``"DryRunOperation"``).
    """

    def __init__(self, field: str, problem: str, code: str | None = None, *, secrets: Iterable[str] = ()) -> None:
        super().__init__(field, redact(problem, secrets))
        self.code = code


#: Shortest credential value redacted by value (shorter ones would garble every message).
MIN_SECRET_CHARS = 4


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every value in ``secrets`` (as is and URL-encoded) and anything shaped
    like an AWS access key id replaced by ``<redacted>``."""
    forms = {
        form
        for secret in secrets
        if isinstance(secret, str) and len(secret) >= MIN_SECRET_CHARS
        for form in (secret, quote(secret, safe=""), quote(secret))
    }
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, "<redacted>")
    return _ACCESS_KEY.sub("<redacted>", text)


def held_credentials(client: BaseClient) -> set[str]:
    """The credential values (access key id, secret key, session token) ``client`` signs
    with, read without refreshing them (no call leaves the machine)."""
    creds = getattr(getattr(client, "_request_signer", None), "_credentials", None)
    if creds is None:
        return set()
    fields = vars(creds)
    values = {fields.get(name) or fields.get(f"_{name}") for name in ("access_key", "secret_key", "token")}
    return {v for v in values if isinstance(v, str) and v}


@dataclass(frozen=True)
class RetryPolicy:
    """Attempts per API call and the exponential backoff between them (full jitter)."""

    attempts: int = 5
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.base_delay_s < 0 or self.max_delay_s < 0:
            raise InvalidInputError("retry", f"needs attempts >= 1 and non-negative delays, got {self!r}")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (0-based)."""
        return random.uniform(0, min(self.max_delay_s, self.base_delay_s * 2**attempt))


def known_regions() -> set[str]:
    """Every region botocore's endpoint data names for EC2, in every partition."""
    session = boto3.Session()
    return {r for p in session.get_available_partitions() for r in session.get_available_regions("ec2", p)}


def check_region(region: object) -> str:
    """``region`` if botocore knows it (an offline check: no call leaves the machine)."""
    if not isinstance(region, str) or region not in known_regions():
        raise InvalidInputError(
            "region",
            f"unknown AWS region {region!r} (botocore knows e.g. us-east-1, eu-west-1; "
            "a brand-new region needs a newer botocore)",
        )
    return region


def check_endpoint_url(field: str, url: object) -> str | None:
    """``url`` if boto3 can send calls to it: http(s), a host, a port in 1-65535 (``None`` passes).

    boto3 takes any string as ``endpoint_url`` and fails with a ``ValueError`` only at the
    first call, after a run has been recorded (and its PS launched); this refuses it first.
    """
    if url is None:
        return None
    try:  # urlsplit's port raises ValueError past 65535 (and on a port that is no number)
        parts = urlsplit(url) if isinstance(url, str) else None
        fine = parts is not None and parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:
        fine = False
    if not fine:
        raise InvalidInputError(field, f"{url!r} is not an endpoint URL (http:// or https://, a host, a port 1-65535)")
    return str(url)


def check_member(field: str, value: str, service: str, operation: str, *path: str) -> str:
    """``value`` if it fits the length and pattern botocore's service model gives the member
    ``path`` of ``operation``'s input (``"Code", "S3Bucket"``); else one error naming ``field``:
    the service would refuse the call. (botocore itself checks lengths only, and no patterns.)"""
    shape = botocore.session.get_session().get_service_model(service).operation_model(operation).input_shape
    for name in path:
        shape = shape.members[name]
    rule = shape.metadata
    low, high, pattern = rule.get("min", 0), rule.get("max", math.inf), rule.get("pattern")
    if not low <= len(value) <= high or (pattern and re.fullmatch(pattern, value) is None):
        raise InvalidInputError(
            field, f"{value[:80]!r} is not one {operation} takes: {low}-{high} characters of {pattern or 'any'}"
        )
    return value


class AwsClients:
    """boto3 clients for one region, and every call made through :meth:`call`.

    Parameters
    ----------
    region
        The region the catalog describes (the Pricing API is always asked in us-east-1).
    endpoint_url
        Send every call to this endpoint instead of AWS (a local test server).
    retry
        Attempts and backoff for throttling and transient failures.
    clients
        Ready-made clients by service name (e.g. with botocore's ``Stubber`` attached);
        other services get a client from boto3's default session.
    """

    def __init__(
        self,
        region: str,
        *,
        endpoint_url: str | None = None,
        retry: RetryPolicy = RetryPolicy(),
        clients: Mapping[str, BaseClient] | None = None,
    ) -> None:
        self.region = check_region(region)
        self.endpoint_url = endpoint_url
        self.retry = retry
        self._clients: dict[str, BaseClient] = dict(clients or {})
        self._session: boto3.Session | None = None

    def client(self, service: str) -> BaseClient:
        """The client of ``service`` (botocore's own retries off: :meth:`call` retries)."""
        if service not in self._clients:
            region = PRICING_REGION if service == "pricing" else self.region
            config = Config(retries={"total_max_attempts": 1}, connect_timeout=5, read_timeout=30)
            self._session = self._session or boto3.Session()
            self._clients[service] = self._session.client(
                service, region_name=region, endpoint_url=self.endpoint_url, config=config
            )
        return self._clients[service]

    def secrets(self) -> set[str]:
        """Every credential value the clients made so far hold (for redaction by value)."""
        return {v for client in self._clients.values() for v in held_credentials(client)}

    def call(self, service: str, operation: str, **params: Any) -> dict[str, Any]:
        """Call ``operation`` (API name, e.g. ``"DescribeSpotPriceHistory"``) with retries.

        Every :class:`CloudError` it raises is redacted by value with :meth:`secrets`.
        """
        try:
            return self._call(service, operation, **params)
        except CloudError as exc:
            raise CloudError(exc.field, exc.problem, exc.code, secrets=self.secrets()) from None

    def _call(self, service: str, operation: str, **params: Any) -> dict[str, Any]:
        where = f"aws {service}:{operation}"
        method = getattr(self.client(service), xform_name(operation))
        for attempt in range(self.retry.attempts):
            last = attempt == self.retry.attempts - 1
            try:
                return method(**params)
            except (NoCredentialsError, PartialCredentialsError):
                raise CloudError(
                    "aws credentials",
                    "no usable AWS credentials found; boto3 looks in the "
                    "environment, ~/.aws/credentials and config, SSO and instance roles",
                ) from None
            except ClientError as exc:
                error = exc.response.get("Error", {})
                code, message = str(error.get("Code", "")), str(error.get("Message", ""))
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                if code in CREDENTIAL_CODES:
                    raise CloudError(
                        "aws credentials",
                        f"{service}:{operation} refused the credentials "
                        f"({code}: {message}); they are expired or invalid: refresh them "
                        "(e.g. aws sso login) and retry",
                        code,
                    ) from None
                if code in THROTTLING_CODES or code in TRANSIENT_CODES or status >= 500:
                    if last:
                        raise CloudError(
                            where,
                            f"still failing ({code or status}: {message}) after "
                            f"{self.retry.attempts} attempts with backoff; try again later",
                            code,
                        ) from None
                    time.sleep(self.retry.delay(attempt))
                    continue
                raise CloudError(where, f"{code}: {message}", code) from None
            except BotoConnectionError as exc:
                if last:
                    raise CloudError(
                        where, f"cannot reach the endpoint after {self.retry.attempts} attempts: {exc}"
                    ) from None
                time.sleep(self.retry.delay(attempt))
            except BotoCoreError as exc:
                raise CloudError(where, str(exc)) from None
            except ResponseParserError as exc:  # an endpoint that is not the service (a web page, a wrong path)
                answer = " ".join(str(exc).split())
                raise CloudError(
                    where, f"the endpoint's answer is not an AWS API answer ({answer[:160]}...): check the endpoint URL"
                ) from None
        raise AssertionError("unreachable: the last attempt returns or raises")

    def pages(self, service: str, operation: str, key: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every item of list ``key`` over all pages (``NextToken`` pagination)."""
        token: str | None = None
        while True:
            page = self.call(service, operation, **params, **({"NextToken": token} if token else {}))
            yield from page.get(key, [])
            token = page.get("NextToken")
            if not token:
                return


# --------------------------------------------------------------------- catalog refresh
def fetch_catalog(
    region: str,
    instance_types: Sequence[str] | None = None,
    *,
    clients: AwsClients | None = None,
    window_hours: float | None = None,
    now: datetime | None = None,
) -> Catalog:
    """A catalog of ``region`` read from the AWS APIs.

    Parameters
    ----------
    region
        AWS region (checked offline against botocore's region list first).
    instance_types
        Types to describe; default every GPU type (``g*``, ``p*`` with GPUs).
    clients
        Client factory and retry policy (default: boto3's standard chain, this region).
    window_hours
        ``None``: the latest spot price per AZ. Otherwise the highest price per AZ over
        the last ``window_hours`` (a conservative planning price). Either way the catalog
        keeps the cheapest AZ and names it in ``sources``.
    now
        The snapshot time (default: the current UTC time).
    """
    clients = clients or AwsClients(region)
    if clients.region != region:
        raise InvalidInputError("region", f"clients are for {clients.region!r}, not {region!r}")
    now = (now or datetime.now(UTC)).astimezone(UTC)
    facts = _instance_facts(clients, instance_types)
    names = sorted(facts)
    spot = _spot_prices(clients, names, now, window_hours)
    entries = []
    for name in names:
        entry, sources = facts[name]
        quote = spot.get(name)
        if quote is not None:
            entry["spot_price_per_h"] = quote[0]
            sources["spot_price_per_h"] = quote[1]
        price = _on_demand_price(clients, name)
        if price is not None:
            entry["on_demand_price_per_h"] = price[0]
            sources["on_demand_price_per_h"] = price[1]
        entries.append(CatalogEntry(name=name, sources=sources, **entry))
    quotas, quota_notes = _quotas(clients, sorted({e.family for e in entries if e.family}))
    settings = clients.call("lambda", "GetAccountSettings")
    concurrency = settings.get("AccountLimit", {}).get("ConcurrentExecutions")
    return Catalog(
        name=f"aws-{region}",
        region=region,
        snapshot=iso(now),
        instance_types=tuple(entries),
        vcpu_quotas=tuple(quotas),
        lambda_concurrency=concurrency,
        notes="Fetched with boto3. Spot: ec2:DescribeSpotPriceHistory (Linux/UNIX); on-demand: "
        "pricing:GetProducts (us-east-1 endpoint, Linux, shared tenancy); hardware: "
        "ec2:DescribeInstanceTypes (GPU memory per GPU); "
        + "; ".join(quota_notes)
        + "; lambda_concurrency: lambda:GetAccountSettings AccountLimit.ConcurrentExecutions.",
    )


def fetch_catalog_file(
    region: str,
    instance_types: Sequence[str] | None = None,
    *,
    out: str | Path | None = None,
    clients: AwsClients | None = None,
    window_hours: float | None = None,
    now: datetime | None = None,
) -> Path:
    """Fetch (:func:`fetch_catalog`) and write the catalog atomically; nothing is written on failure.

    ``out`` defaults to ``./aws-<region>-<snapshot>.json``.
    """
    catalog = fetch_catalog(region, instance_types, clients=clients, window_hours=window_hours, now=now)
    return write_catalog(catalog, out if out is not None else Path.cwd() / dated_catalog_name(catalog))


def fetch_regions_file(
    regions: Sequence[str],
    instance_types: Sequence[str] | None = None,
    *,
    out: str | Path | None = None,
    endpoint_url: str | None = None,
    window_hours: float | None = None,
    now: datetime | None = None,
) -> Path:
    """Fetch each of ``regions`` (:func:`fetch_catalog`, one client set per region), join them
    into one multi-region catalog (:func:`dnnprov.io.catalogs.regions.merge_regions`) and write it
    atomically; one region: the single-region catalog. Nothing is written on any failure."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    catalogs = [
        fetch_catalog(
            region,
            instance_types,
            clients=AwsClients(region, endpoint_url=endpoint_url),
            window_hours=window_hours,
            now=now,
        )
        for region in regions
    ]
    catalog = catalogs[0] if len(catalogs) == 1 else merge_regions(catalogs, f"aws-{len(catalogs)}-regions")
    return write_catalog(catalog, out if out is not None else Path.cwd() / dated_catalog_name(catalog))


def _instance_facts(
    clients: AwsClients, names: Sequence[str] | None
) -> dict[str, tuple[dict[str, Any], dict[str, str]]]:
    """Hardware facts per type from DescribeInstanceTypes (only types with GPUs when not named)."""
    batches: list[dict[str, Any]]
    if names:
        batches = [{"InstanceTypes": list(names[i : i + 100])} for i in range(0, len(names), 100)]
    else:
        batches = [{"Filters": [{"Name": "instance-type", "Values": list(GPU_TYPE_PATTERNS)}]}]
    facts = {}
    for params in batches:
        for info in clients.pages("ec2", "DescribeInstanceTypes", "InstanceTypes", **params):
            name = info.get("InstanceType")
            gpus = info.get("GpuInfo", {}).get("Gpus", [])
            if not isinstance(name, str) or (not names and not gpus):
                continue
            count = sum(int(g.get("Count", 0)) for g in gpus)
            per_gpu = [g.get("MemoryInfo", {}).get("SizeInMiB") for g in gpus]
            entry = {
                "gpus": count,
                "vcpus": info.get("VCpuInfo", {}).get("DefaultVCpus"),
                "memory_gb": _gib(info.get("MemoryInfo", {}).get("SizeInMiB")),
                "gpu_model": " ".join(filter(None, (gpus[0].get("Manufacturer"), gpus[0].get("Name"))))
                if gpus
                else None,
                "gpu_memory_gb": _gib(per_gpu[0]) if per_gpu and per_gpu[0] else None,
                "family": quota_family(name),
            }
            source = "ec2:DescribeInstanceTypes"
            facts[name] = (
                {k: v for k, v in entry.items() if v is not None},
                {k: source for k in entry if entry[k] is not None and k != "family"},
            )
    missing = sorted(set(names or ()) - set(facts))
    if missing:
        raise CloudError("aws ec2:DescribeInstanceTypes", f"no facts returned for {', '.join(missing)}")
    if not facts:
        raise CloudError("aws ec2:DescribeInstanceTypes", f"no GPU instance type found in {clients.region}")
    return facts


def _gib(mib: object) -> float | None:
    return None if not isinstance(mib, (int, float)) or mib <= 0 else round(mib / 1024, 3)


def _spot_prices(
    clients: AwsClients, names: Sequence[str], now: datetime, window_hours: float | None
) -> dict[str, tuple[float, str]]:
    """Per type: the cheapest AZ's price and its source text."""
    start = now if window_hours is None else now - timedelta(hours=window_hours)
    where = "aws ec2:DescribeSpotPriceHistory"
    rows: dict[str, dict[str, list[tuple[float, datetime]]]] = {}
    history = clients.pages(
        "ec2",
        "DescribeSpotPriceHistory",
        "SpotPriceHistory",
        InstanceTypes=list(names),
        ProductDescriptions=[LINUX],
        StartTime=start,
        EndTime=now,
    )
    for i, row in enumerate(history):
        name, product = row.get("InstanceType"), str(row.get("ProductDescription", ""))
        zone = row.get("AvailabilityZone") or row.get("AvailabilityZoneId")
        if not name or not zone or "Timestamp" not in row:
            raise CloudError(where, f"malformed price row {i}: needs InstanceType, an availability zone and Timestamp")
        try:
            price = parse_price(f"row {i} SpotPrice", row.get("SpotPrice"))
            moment = parse_time(f"row {i} Timestamp", row["Timestamp"])
        except InvalidInputError as exc:
            raise CloudError(where, f"malformed price row: {exc}") from None
        if product.startswith(LINUX) and name in names:
            rows.setdefault(name, {}).setdefault(zone, []).append((price, moment))
    result = {}
    for name, zones in rows.items():
        if window_hours is None:
            quote = cheapest_zone((z, p, m) for z, obs in zones.items() for p, m in obs)
            assert quote is not None  # every zone listed has an observation
            result[name] = (quote.price_per_h, quote.source("ec2:DescribeSpotPriceHistory latest"))
        else:
            peak = {z: max(p for p, _ in obs) for z, obs in zones.items()}
            zone = min(peak, key=lambda z: (peak[z], z))
            result[name] = (
                peak[zone],
                (
                    f"ec2:DescribeSpotPriceHistory: {zone}, highest price over "
                    f"{window_hours:g} h to {iso(now)} (cheapest of {len(peak)} AZ)"
                ),
            )
    return result


def _on_demand_price(clients: AwsClients, name: str) -> tuple[float, str] | None:
    """Linux shared-tenancy on-demand $/h of ``name`` in the clients' region, from GetProducts."""
    filters = {
        "instanceType": name,
        "regionCode": clients.region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }
    products = clients.pages(
        "pricing",
        "GetProducts",
        "PriceList",
        ServiceCode="AmazonEC2",
        FormatVersion="aws_v1",
        Filters=[{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in filters.items()],
    )
    for item in products:
        found = _price_list_item(name, item)
        if found is not None:
            return found[0], f"pricing:GetProducts AmazonEC2 sku {found[1]} ({clients.region}, Linux, shared)"
    return None


def _price_list_item(name: str, item: str | Mapping[str, Any]) -> tuple[float, str] | None:
    """The first positive on-demand $/h of one PriceList entry (a JSON string) and its SKU."""
    try:
        product: Any = json.loads(item) if isinstance(item, str) else item
        for term in product["terms"]["OnDemand"].values():
            for dimension in term["priceDimensions"].values():
                price = parse_price(f"{name} on-demand", dimension["pricePerUnit"]["USD"])
                if price > 0:
                    return price, str(product["product"].get("sku", "?"))
    except (ValueError, KeyError, TypeError, AttributeError, InvalidInputError) as exc:
        raise CloudError("aws pricing:GetProducts", f"malformed price list entry for {name}: {exc}") from None
    return None


def _quotas(clients: AwsClients, families: Sequence[str]) -> tuple[list[VcpuQuota], list[str]]:
    """vCPU quotas of the families present (applied value, else the AWS default)."""
    quotas, notes = [], []
    for (family, market), (code, title) in QUOTA_CODES.items():
        if family not in families:
            continue
        try:
            quota = clients.call("service-quotas", "GetServiceQuota", ServiceCode="ec2", QuotaCode=code)
            how = "GetServiceQuota"
        except CloudError as exc:
            if exc.code != "NoSuchResourceException":
                raise
            quota = clients.call("service-quotas", "GetAWSDefaultServiceQuota", ServiceCode="ec2", QuotaCode=code)
            how = "GetAWSDefaultServiceQuota (no applied value)"
        value = quota.get("Quota", {}).get("Value")
        if not isinstance(value, (int, float)) or value < 0:
            raise CloudError("aws service-quotas:GetServiceQuota", f"quota {code} has no usable value: {value!r}")
        quotas.append(VcpuQuota(family=family, market=market, vcpus=int(value)))
        notes.append(f"{family}/{market} vCPU quota: service-quotas:{how} ec2/{code} ({title})")
    return quotas, notes
