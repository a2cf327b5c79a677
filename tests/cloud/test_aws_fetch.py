"""Catalog refresh with boto3: moto (server mode) for EC2, botocore Stubber for the rest."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest
from botocore.stub import ANY

from dnnprov.cli import main
from dnnprov.cloud.aws import AwsClients, CloudError, RetryPolicy, fetch_catalog, fetch_catalog_file
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import embedded_path, load_catalog
from dnnprov.problems.spot import VcpuQuota

pytest_plugins = ["conftest_aws"]

NOW = datetime(2022, 5, 31, 23, 59, 59, tzinfo=UTC)
NO_WAIT = RetryPolicy(attempts=3, base_delay_s=0.0)
# On-demand us-east-1 $/h of aws-gpu-instances-ondemand-2026-01-21.json
ON_DEMAND = {
    "g4dn.xlarge": 0.526,
    "g4dn.2xlarge": 0.752,
    "g4dn.4xlarge": 1.204,
    "g4dn.8xlarge": 2.176,
    "g4dn.12xlarge": 3.912,
}


def price_list_item(type_name: str, usd: float, region: str = "us-east-1") -> str:
    """One GetProducts PriceList entry, shaped like AWS's (a JSON string per product)."""
    sku = "SKU" + type_name.replace(".", "").upper()
    return json.dumps(
        {
            "product": {
                "productFamily": "Compute Instance",
                "sku": sku,
                "attributes": {
                    "instanceType": type_name,
                    "regionCode": region,
                    "location": "US East (N. Virginia)",
                    "operatingSystem": "Linux",
                    "tenancy": "Shared",
                    "preInstalledSw": "NA",
                    "capacitystatus": "Used",
                    "servicecode": "AmazonEC2",
                },
            },
            "serviceCode": "AmazonEC2",
            "version": "20260121000000",
            "publicationDate": "2026-01-21T00:00:00Z",
            "terms": {
                "OnDemand": {
                    f"{sku}.JRTCKXETXF": {
                        "offerTermCode": "JRTCKXETXF",
                        "sku": sku,
                        "effectiveDate": "2026-01-01T00:00:00Z",
                        "termAttributes": {},
                        "priceDimensions": {
                            f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                                "rateCode": f"{sku}.JRTCKXETXF.6YS6EN2CT7",
                                "unit": "Hrs",
                                "beginRange": "0",
                                "endRange": "Inf",
                                "appliesTo": [],
                                "description": f"${usd} per On Demand Linux {type_name} Instance Hour",
                                "pricePerUnit": {"USD": f"{usd:.10f}"},
                            }
                        },
                    }
                }
            },
        }
    )


def pricing_params(type_name: str) -> dict:
    """The GetProducts request the fetch must send for one type."""
    fields = {
        "instanceType": type_name,
        "regionCode": "us-east-1",
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }
    return {
        "ServiceCode": "AmazonEC2",
        "FormatVersion": "aws_v1",
        "Filters": [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in fields.items()],
    }


def quota(code: str, name: str, value: float) -> dict:
    """A GetServiceQuota response."""
    return {
        "Quota": {
            "ServiceCode": "ec2",
            "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaArn": f"arn:aws:servicequotas:us-east-1:123456789012:ec2/{code}",
            "QuotaCode": code,
            "QuotaName": name,
            "Value": value,
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
        }
    }


ACCOUNT_SETTINGS = {
    "AccountLimit": {
        "TotalCodeSize": 80530636800,
        "CodeSizeUnzipped": 262144000,
        "CodeSizeZipped": 52428800,
        "ConcurrentExecutions": 1000,
        "UnreservedConcurrentExecutions": 1000,
    },
    "AccountUsage": {"TotalCodeSize": 0, "FunctionCount": 0},
}


def stub_rest(stubbed: dict, types: list[str]) -> None:
    """Queue pricing (sorted types), the G-family quotas (on-demand via the default) and Lambda."""
    pricing = stubbed["pricing"][1]
    for name in sorted(types):
        pricing.add_response(
            "get_products",
            {"FormatVersion": "aws_v1", "PriceList": [price_list_item(name, ON_DEMAND[name])]},
            pricing_params(name),
        )
    quotas = stubbed["service-quotas"][1]
    quotas.add_response(
        "get_service_quota",
        quota("L-3819A6DF", "All G and VT Spot Instance Requests", 64.0),
        {"ServiceCode": "ec2", "QuotaCode": "L-3819A6DF"},
    )
    quotas.add_client_error(
        "get_service_quota",
        "NoSuchResourceException",
        "The request failed because the specified service quota does not exist.",
        expected_params={"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA"},
    )
    quotas.add_response(
        "get_aws_default_service_quota",
        quota("L-DB2E81BA", "Running On-Demand G and VT instances", 96.0),
        {"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA"},
    )
    stubbed["lambda"][1].add_response("get_account_settings", ACCOUNT_SETTINGS, {})


def clients_for(stubbed: dict, endpoint_url: str | None = None, *services: str) -> AwsClients:
    """Clients: the stubbed ones of ``services``; the others (EC2) from boto3 at ``endpoint_url``."""
    return AwsClients(
        "us-east-1", endpoint_url=endpoint_url, retry=NO_WAIT, clients={s: stubbed[s][0] for s in services}
    )


def test_fetch_catalog_ec2_from_moto_server(
    moto_url: str, stubbed: dict, tmp_path: Path, fake_credentials: tuple[str, str]
) -> None:
    """EC2 facts and spot prices over HTTP from moto, the rest stubbed: a dated, valid catalog file."""
    types = ["g4dn.xlarge", "g4dn.4xlarge"]
    stub_rest(stubbed, types)
    clients = clients_for(stubbed, moto_url, "pricing", "service-quotas", "lambda")
    path = fetch_catalog_file("us-east-1", types, out=tmp_path / "aws.json", clients=clients, now=NOW)
    catalog = load_catalog(path)
    assert (catalog.region, catalog.snapshot, catalog.name) == ("us-east-1", "2022-05-31T23:59:59Z", "aws-us-east-1")
    g4 = catalog.entry("g4dn.4xlarge")
    assert (g4.gpus, g4.vcpus, g4.memory_gb, g4.gpu_memory_gb, g4.gpu_model) == (1, 16, 64.0, 16.0, "NVIDIA T4")
    assert g4.on_demand_price_per_h == 1.204
    assert g4.spot_price_per_h == pytest.approx(1e-5)  # moto's fixed spot price
    assert "us-east-1" in g4.sources["spot_price_per_h"] and "AZ" in g4.sources["spot_price_per_h"]
    assert g4.sources["on_demand_price_per_h"].startswith("pricing:GetProducts")
    assert g4.family == "G"
    assert set(catalog.vcpu_quotas) == {VcpuQuota("G", "spot", 64), VcpuQuota("G", "on-demand", 96)}
    assert catalog.lambda_concurrency == 1000
    assert "GetAWSDefaultServiceQuota" in catalog.notes
    text = path.read_text()
    assert all(secret not in text for secret in fake_credentials)
    schema = json.loads(embedded_path("schema", "catalog-v1.schema.json").read_text())
    jsonschema.validate(json.loads(text), schema)
    assert [p.name for p in tmp_path.iterdir()] == ["aws.json"]  # no temporary file left


def real_rows(shared_data: Path, types: set[str]) -> list[dict]:
    """The 2022-05-31 us-east-1 Linux/UNIX rows of ``types`` as DescribeSpotPriceHistory items."""
    rows = []
    with gzip.open(shared_data / "aws-spot-price-history-2022-05-31.tsv.gz", "rt") as handle:
        for line in handle:
            zone, name, product, price, stamp = line.rstrip("\n").split("\t")
            if zone.startswith("use1-") and name in types and product == "Linux/UNIX":
                rows.append(
                    {
                        "AvailabilityZoneId": zone,
                        "InstanceType": name,
                        "ProductDescription": product,
                        "SpotPrice": price,
                        "Timestamp": datetime.fromisoformat(stamp),
                    }
                )
    return rows


def g4dn_facts(name: str, gpus: int, vcpus: int, memory_mib: int) -> dict:
    """A DescribeInstanceTypes item with the fields the catalog reads (real g4dn numbers)."""
    return {
        "InstanceType": name,
        "VCpuInfo": {"DefaultVCpus": vcpus},
        "MemoryInfo": {"SizeInMiB": memory_mib},
        "GpuInfo": {
            "Gpus": [{"Name": "T4", "Manufacturer": "NVIDIA", "Count": gpus, "MemoryInfo": {"SizeInMiB": 16384}}],
            "TotalGpuMemoryInMiB": 16384 * gpus,
        },
    }


def test_fetch_catalog_keeps_cheapest_zone_of_real_prices(stubbed: dict, shared_data: Path) -> None:
    """Real 2022-05-31 spot rows: per AZ the latest price, then the cheapest AZ, which is named."""
    types = ["g4dn.2xlarge", "g4dn.8xlarge", "g4dn.12xlarge"]
    ec2 = stubbed["ec2"][1]
    ec2.add_response(
        "describe_instance_types",
        {
            "InstanceTypes": [
                g4dn_facts("g4dn.2xlarge", 1, 8, 32768),
                g4dn_facts("g4dn.8xlarge", 1, 32, 131072),
                g4dn_facts("g4dn.12xlarge", 4, 48, 196608),
            ]
        },
        {"InstanceTypes": types},
    )
    ec2.add_response(
        "describe_spot_price_history",
        {"SpotPriceHistory": real_rows(shared_data, set(types))},
        {"InstanceTypes": sorted(types), "ProductDescriptions": ["Linux/UNIX"], "StartTime": ANY, "EndTime": ANY},
    )
    stub_rest(stubbed, types)
    catalog = fetch_catalog(
        "us-east-1", types, now=NOW, clients=clients_for(stubbed, None, "ec2", "pricing", "service-quotas", "lambda")
    )
    big = catalog.entry("g4dn.12xlarge")
    assert big.spot_price_per_h == 1.275 and big.gpus == 4
    assert "use1-az5" in big.sources["spot_price_per_h"] and "cheapest of 5 AZ" in big.sources["spot_price_per_h"]
    assert catalog.entry("g4dn.8xlarge").spot_price_per_h == 0.6528
    assert catalog.entry("g4dn.2xlarge").spot_price_per_h == 0.2256


def test_window_keeps_highest_price_per_zone(stubbed: dict) -> None:
    """With a window, each AZ counts with its highest price; the cheapest AZ is still kept."""
    ec2 = stubbed["ec2"][1]
    ec2.add_response("describe_instance_types", {"InstanceTypes": [g4dn_facts("g4dn.4xlarge", 1, 16, 65536)]})
    rows = [("us-east-1a", "0.40", 18), ("us-east-1a", "0.30", 22), ("us-east-1b", "0.35", 20)]
    ec2.add_response(
        "describe_spot_price_history",
        {
            "SpotPriceHistory": [
                {
                    "AvailabilityZone": z,
                    "InstanceType": "g4dn.4xlarge",
                    "ProductDescription": "Linux/UNIX",
                    "SpotPrice": p,
                    "Timestamp": NOW.replace(hour=h),
                }
                for z, p, h in rows
            ]
        },
    )
    stub_rest(stubbed, ["g4dn.4xlarge"])
    catalog = fetch_catalog(
        "us-east-1",
        ["g4dn.4xlarge"],
        now=NOW,
        window_hours=6,
        clients=clients_for(stubbed, None, "ec2", "pricing", "service-quotas", "lambda"),
    )
    entry = catalog.entry("g4dn.4xlarge")
    assert entry.spot_price_per_h == 0.35 and "us-east-1b, highest price over 6 h" in entry.sources["spot_price_per_h"]


# ----------------------------------------------------------------------------- errors
def test_missing_credentials_one_message_no_file(
    moto_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """No credentials anywhere in the chain: exit 2, one line naming the problem, no file."""
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    out = tmp_path / "catalog.json"
    code = main(
        [
            "catalog",
            "fetch",
            "--region",
            "us-east-1",
            "--types",
            "g4dn.xlarge",
            "--endpoint-url",
            moto_url,
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "no usable AWS credentials" in err
    assert not out.exists()


def test_expired_credentials_are_named_and_redacted(
    stubbed: dict, tmp_path: Path, fake_credentials: tuple[str, str]
) -> None:
    """An expired token: a credentials error, with no access key id in the message; no file."""
    key_id = fake_credentials[0]
    stubbed["ec2"][1].add_client_error(
        "describe_instance_types",
        "RequestExpired",
        f"Request has expired. Credential={key_id}/20220531/us-east-1/ec2/aws4_request",
    )
    clients = clients_for(stubbed, None, "ec2", "pricing", "service-quotas", "lambda")
    with pytest.raises(CloudError) as info:
        fetch_catalog_file("us-east-1", ["g4dn.xlarge"], out=tmp_path / "c.json", clients=clients)
    assert info.value.field == "aws credentials" and "expired or invalid" in str(info.value)
    assert key_id not in str(info.value) and "<redacted>" in str(info.value)
    assert not (tmp_path / "c.json").exists()


def test_unknown_region_is_refused_offline(aws_env: None, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A region botocore does not know is refused before any call; no file."""
    with pytest.raises(InvalidInputError, match="unknown AWS region 'mars-north-1'"):
        AwsClients("mars-north-1")
    code = main(["catalog", "fetch", "--region", "mars-north-1", "--out", str(tmp_path / "c.json")])
    assert code == 2 and "unknown AWS region" in capsys.readouterr().err
    assert not (tmp_path / "c.json").exists()


def test_throttling_is_retried_then_fails_clearly(stubbed: dict, moto_url: str, tmp_path: Path) -> None:
    """Throttling on every attempt: all attempts are made, then one message; no partial file."""
    pricing = stubbed["pricing"][1]
    for _ in range(NO_WAIT.attempts):
        pricing.add_client_error("get_products", "ThrottlingException", "Rate exceeded", http_status_code=400)
    clients = clients_for(stubbed, moto_url, "pricing", "service-quotas", "lambda")
    with pytest.raises(CloudError) as info:
        fetch_catalog_file("us-east-1", ["g4dn.xlarge"], out=tmp_path / "c.json", clients=clients)
    assert str(info.value) == (
        "aws pricing:GetProducts: still failing (ThrottlingException: Rate exceeded) "
        "after 3 attempts with backoff; try again later"
    )
    assert list(tmp_path.glob("*.json")) == [] and list(tmp_path.glob(".*")) == []


def test_throttling_then_success_is_retried(stubbed: dict, moto_url: str) -> None:
    """Two throttled attempts, then an answer: the fetch succeeds."""
    pricing = stubbed["pricing"][1]
    for _ in range(2):
        pricing.add_client_error("get_products", "ThrottlingException", "Rate exceeded", http_status_code=400)
    stub_rest(stubbed, ["g4dn.xlarge"])
    catalog = fetch_catalog(
        "us-east-1",
        ["g4dn.xlarge"],
        now=NOW,
        clients=clients_for(stubbed, moto_url, "pricing", "service-quotas", "lambda"),
    )
    assert catalog.entry("g4dn.xlarge").on_demand_price_per_h == 0.526


def test_malformed_price_row_fails_clearly(stubbed: dict, tmp_path: Path) -> None:
    """A spot price that is not a number: one message naming the row; no file."""
    ec2 = stubbed["ec2"][1]
    ec2.add_response("describe_instance_types", {"InstanceTypes": [g4dn_facts("g4dn.4xlarge", 1, 16, 65536)]})
    ec2.add_response(
        "describe_spot_price_history",
        {
            "SpotPriceHistory": [
                {
                    "AvailabilityZoneId": "use1-az1",
                    "InstanceType": "g4dn.4xlarge",
                    "ProductDescription": "Linux/UNIX",
                    "SpotPrice": "n/a",
                    "Timestamp": NOW,
                }
            ]
        },
    )
    clients = clients_for(stubbed, None, "ec2", "pricing", "service-quotas", "lambda")
    with pytest.raises(CloudError) as info:
        fetch_catalog_file("us-east-1", ["g4dn.4xlarge"], out=tmp_path / "c.json", clients=clients)
    assert str(info.value) == (
        "aws ec2:DescribeSpotPriceHistory: malformed price row: row 0 SpotPrice: price 'n/a' is not a number"
    )
    assert not (tmp_path / "c.json").exists()
