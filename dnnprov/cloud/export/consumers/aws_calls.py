"""EC2 launch calls (RunInstances, CreateFleet) and Lambda settings of a plan, as boto3 parameters."""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
import time
from dataclasses import dataclass, field, replace
from typing import Any

from dnnprov.cloud.export.names import (
    LAMBDA_FUNCTION_NAME,
    LAMBDA_NAME_MAX,
    RUN_ID,
    RUN_ID_MAX,
    lambda_function_name,
    require,
    tag_value,
)
from dnnprov.cloud.export.placement import (
    check_region,
    ec2_type,
    plan_region,
    region_pools,
    split,
    type_region,
    worker_regions,
)
from dnnprov.cloud.export.plan import PlanDocument, hardware, split_label
from dnnprov.errors import InvalidInputError
from dnnprov.problems.serverless import ServerlessPlatform, ServerlessProblem
from dnnprov.problems.spot import column_label

CALLS_FORMAT = "dnnprov/aws-calls"


#: EC2's forms of the launch options (RunInstances, CreateFleet; botocore's model and EC2's docs):
#: an AMI id or an SSM parameter resolving to one, a launch template's name or id, its version,
#: a subnet id, a key pair's name. A value outside them is refused here, not by EC2.
AMI = re.compile(r"ami-[0-9a-f]{8,17}|resolve:ssm:\S{1,1011}")
LAUNCH_TEMPLATE = re.compile(r"[a-zA-Z0-9().\-/_]{3,128}")
TEMPLATE_VERSION = re.compile(r"\$Latest|\$Default|[1-9][0-9]{0,17}")
SUBNET = re.compile(r"subnet-[0-9a-f]{8,17}")
KEY_NAME = re.compile(r"[\x20-\x7e]{1,255}")


@dataclass(frozen=True)
class ApiCall:
    """One AWS API call: service, operation (API name) and its parameters (boto3 / CLI JSON).

    ``region``: where the call goes, set on every call of a plan whose types name their
    regions (``TYPE@REGION``); ``None``: the plan's one region (the document's ``region``).
    """

    service: str
    operation: str
    params: dict[str, Any] = field(default_factory=dict)
    region: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``region`` only when the call names one)."""
        out = {"service": self.service, "operation": self.operation, "params": self.params}
        return out if self.region is None else {**out, "region": self.region}


#: The EC2 calls that launch instances: each carries a ClientToken when the launch has a run id.
LAUNCH_OPERATIONS = ("RunInstances", "CreateFleet")


def new_run_id() -> str:
    """A fresh run id: the UTC time and 8 random hex digits, e.g. ``20260121T101500Z-3f9c2a1b``."""
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class LaunchOptions:
    """What an EC2 launch needs beyond the plan: an AMI or a launch template, and placement.

    ``run_id`` names one deployment: every instance is tagged ``dnnprov:run`` with it and every
    launch call carries a ClientToken derived from it and the call, so that the same call of
    the same run, sent again, launches nothing new (EC2's idempotency). ``dnnprov apply`` makes
    a fresh one unless given ``--run-id``; without one an export carries neither.

    ``image_id`` is an AMI (``ami-...``), or, since an AMI belongs to one region, one AMI per
    region for a plan that launches in several: ``us-east-1=ami-...,eu-west-1=ami-...``
    (:meth:`image_for`). A ``subnet_id`` is of one zone: a plan launching in several regions
    cannot take one.
    """

    image_id: str | None = None
    launch_template: str | None = None
    launch_template_version: str = "$Default"
    subnet_id: str | None = None
    key_name: str | None = None
    run_id: str | None = None

    def __post_init__(self) -> None:
        for ami in self.images().values():  # checks the per-region form
            if not AMI.fullmatch(ami):
                raise InvalidInputError("image_id", f"{ami[:80]!r} is not an AMI id (ami- and hex) or resolve:ssm:NAME")
        for option, value, pattern, what in (
            ("launch_template", self.launch_template, LAUNCH_TEMPLATE, "3-128 of A-Z a-z 0-9 ( ) . - / _"),
            (
                "launch_template_version",
                self.launch_template_version,
                TEMPLATE_VERSION,
                "a number, $Latest or $Default",
            ),
            ("subnet_id", self.subnet_id, SUBNET, "subnet- and hex"),
            ("key_name", self.key_name, KEY_NAME, "1-255 printable ASCII characters"),
        ):
            if value is not None and not pattern.fullmatch(value):  # EC2 would refuse the call
                raise InvalidInputError(option, f"{value[:80]!r} is not valid: {what}")
        if self.run_id is not None:
            require(
                "run_id",
                self.run_id,
                RUN_ID,
                RUN_ID_MAX,
                "a run id has letters, digits, '-', '_' and '.', alphanumeric at both ends",
            )

    def images(self) -> dict[str | None, str]:
        """The AMIs by region (``None``: the one AMI of every region) of ``image_id``."""
        if not self.image_id or "=" not in self.image_id:
            return {None: self.image_id} if self.image_id else {}
        images: dict[str | None, str] = {}
        for part in self.image_id.split(","):
            region, sep, ami = (x.strip() for x in part.partition("="))
            if not sep or not region or not ami or region in images:
                raise InvalidInputError(
                    "image_id", f"{self.image_id!r}: give an AMI, or REGION=AMI pairs separated by commas (once each)"
                )
            images[check_region("image_id", region)] = ami
        return images

    def image_for(self, region: str | None) -> str | None:
        """The AMI of a launch in ``region`` (``None``: the plan's one region)."""
        images = self.images()
        if None in images:
            return images[None]
        if region is None or region not in images:
            listed = ", ".join(r for r in images if r)
            raise InvalidInputError(
                "image_id", f"no AMI for {region or 'the plan region'} (AMIs are per region; given for {listed})"
            )
        return images[region]


def _tags(doc: PlanDocument, role: str, run_id: str | None) -> list[dict[str, Any]]:
    tags = [{"Key": "dnnprov:plan", "Value": tag_value(doc.name)}, {"Key": "dnnprov:role", "Value": role}]
    if run_id is not None:
        tags.append({"Key": "dnnprov:run", "Value": run_id})
    return [{"ResourceType": "instance", "Tags": tags}]


def client_token(run_id: str, index: int, call: ApiCall) -> str:
    """The ClientToken of launch call number ``index`` of run ``run_id`` (64 ASCII characters at most).

    A hash of the run id, the call's position and its parameters: the same call of the same
    run always gets the same token (a retry is idempotent), another run or call another one.
    """
    params = {k: v for k, v in call.params.items() if k != "ClientToken"}
    text = json.dumps([run_id, index, call.operation, params], sort_keys=True, default=str)
    return f"dnnprov-{hashlib.sha256(text.encode()).hexdigest()[:48]}"


def with_client_tokens(calls: list[ApiCall], run_id: str | None) -> list[ApiCall]:
    """``calls`` with a ClientToken on every launch call (none without a run id)."""
    if run_id is None:
        return calls
    return [
        replace(c, params={**c.params, "ClientToken": client_token(run_id, i, c)})
        if c.operation in LAUNCH_OPERATIONS
        else c
        for i, c in enumerate(calls)
    ]


def _run_instances(
    doc: PlanDocument,
    options: LaunchOptions,
    type_name: str,
    count: int,
    market: str,
    role: str,
    zone: str | None = None,
    region: str | None = None,
) -> ApiCall:
    field = "instance.platform.ps_type" if role == "ps" else f"result.plan.counts.{column_label(type_name, market)}"
    instance_type = ec2_type(field, type_name, qualified=role != "ps")
    params: dict[str, Any] = {"InstanceType": instance_type, "MinCount": count, "MaxCount": count}
    if zone is not None and not options.subnet_id:
        params["Placement"] = {"AvailabilityZone": zone}
    if options.launch_template:
        params["LaunchTemplate"] = {
            "LaunchTemplateName": options.launch_template,
            "Version": options.launch_template_version,
        }
    if options.image_id:
        params["ImageId"] = options.image_for(region or doc.region)
    if not options.image_id and not options.launch_template:
        raise InvalidInputError(
            "image_id", "EC2 launches need an AMI (--image-id) or a launch template (--launch-template)"
        )
    if options.subnet_id:
        params["SubnetId"] = options.subnet_id
    if options.key_name:
        params["KeyName"] = options.key_name
    if market == "spot":
        params["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
        }
    params["TagSpecifications"] = _tags(doc, role, options.run_id)
    return ApiCall("ec2", "RunInstances", params, region)


def _ps_calls(doc: PlanDocument, options: LaunchOptions) -> list[ApiCall]:
    if not doc.launches_ps():
        return []
    region = plan_region(doc) if worker_regions(doc) else None
    return [_run_instances(doc, options, doc.ps_type, doc.ps_to_launch(), "on-demand", "ps", region=region)]


def _one_region_options(doc: PlanDocument, options: LaunchOptions) -> None:
    """Refuse options of one region for a plan that launches in several: one AMI, a subnet."""
    regions = sorted(worker_regions(doc))
    if len(regions) < 2:
        return
    where = ", ".join(regions)
    if options.subnet_id:
        raise InvalidInputError("subnet_id", f"a subnet is in one zone; the plan launches in {where}")
    if options.image_id and None in options.images():
        raise InvalidInputError(
            "image_id",
            f"an AMI belongs to one region and the plan launches in {where}: give one per region, "
            f"REGION=AMI,REGION=AMI (copy the image with aws ec2 copy-image)",
        )


def run_instances_calls(doc: PlanDocument, options: LaunchOptions) -> list[ApiCall]:
    """One RunInstances per (type, market) with exactly the planned count (MinCount = MaxCount), plus the PS.

    A spot type with pools (zones) in the plan's region is placed on them (``Placement``):
    all in the cheapest pool that holds them, else split cheapest first, one call per pool.
    A ``subnet_id`` fixes the zone itself, so no ``Placement`` goes with it. A type of a
    multi-region plan (``TYPE@REGION``) is launched as ``TYPE`` by a call to ``REGION``
    (``ApiCall.region``), the PS in :func:`~.placement.plan_region`'s region.
    """
    region = plan_region(doc)
    _one_region_options(doc, options)
    calls = []
    for label, count in doc.launch_counts().items():
        type_name, market = split_label(label)
        pools = region_pools(doc, label, region)
        for zone, n in split(pools, count, label) if pools else [(None, count)]:
            calls.append(_run_instances(doc, options, type_name, n, market, "worker", zone, type_region(type_name)))
    return with_client_tokens(calls + _ps_calls(doc, options), options.run_id)


def fleet_gpus(doc: PlanDocument, type_name: str) -> int:
    """GPUs of a type (the fleet's weighted capacity); one clear error when neither catalog nor instance has it."""
    gpus = hardware(doc, type_name)[0]
    if not gpus:
        raise InvalidInputError(
            "catalog",
            f"the ec2-fleet export weighs each type by its GPUs and needs the GPU "
            f"count of {type_name}: wrap the plan with its instance or catalog",
        )
    return gpus


def ec2_fleet_calls(doc: PlanDocument, options: LaunchOptions) -> list[ApiCall]:
    """One ``instant`` CreateFleet per market (spot, on-demand) for the workers, then the PS
    (per market and region for a multi-region plan, each call to its region).

    Each fleet's overrides are the plan's types of that market, each weighted by its GPUs
    (``WeightedCapacity``), one per pool (``AvailabilityZone``) of a spot type with pools in
    the plan's region, and its target capacity is the plan's GPUs of that market: EC2
    Fleet may choose another mix of the same types, but never fewer GPUs, and never moves
    a type from one market to the other. ``ec2-run-instances`` launches the exact mix.
    """
    if not options.launch_template:
        raise InvalidInputError("launch_template", "CreateFleet needs a launch template (--launch-template)")
    launch = doc.launch_counts()
    if not launch:
        raise InvalidInputError("result.plan", "no worker to launch: every planned worker is already running")
    region = plan_region(doc)
    _one_region_options(doc, options)
    groups: dict[tuple[str, str | None], dict[str, int]] = {}
    for label, n in launch.items():
        t, m = split_label(label)
        groups.setdefault((m, type_region(t)), {})[t] = n
    calls = []
    for (market, where), types in sorted(groups.items(), key=lambda g: (g[0][0] != "spot", g[0][1] or "")):
        weights = {t: fleet_gpus(doc, t) for t in types}
        target = sum(weights[t] * n for t, n in types.items())
        overrides = []
        for t in types:
            field = f"result.plan.counts.{column_label(t, market)}"
            base = {"InstanceType": ec2_type(field, t), "WeightedCapacity": float(weights[t])}
            zones = [p.zone for p in region_pools(doc, t, region)] if market == "spot" else []
            if options.subnet_id:
                overrides.append({**base, "SubnetId": options.subnet_id})
            else:
                overrides += [{**base, "AvailabilityZone": z} for z in zones] or [base]
        params: dict[str, Any] = {
            "Type": "instant",
            "LaunchTemplateConfigs": [
                {
                    "LaunchTemplateSpecification": {
                        "LaunchTemplateName": options.launch_template,
                        "Version": options.launch_template_version,
                    },
                    "Overrides": overrides,
                }
            ],
            "TargetCapacitySpecification": {
                "TotalTargetCapacity": target,
                "SpotTargetCapacity": target if market == "spot" else 0,
                "OnDemandTargetCapacity": target if market == "on-demand" else 0,
                "DefaultTargetCapacityType": market,
            },
            "TagSpecifications": _tags(doc, "worker", options.run_id),
        }
        if market == "spot":
            params["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
        else:
            params["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
        calls.append(ApiCall("ec2", "CreateFleet", params, where))
    return with_client_tokens(calls + _ps_calls(doc, options), options.run_id)


@dataclass(frozen=True)
class FunctionCode:
    """What Lambda CreateFunction needs beyond the plan: the execution role and the code.

    Either ``image_uri`` (a container image) or ``s3_bucket`` + ``s3_key`` with ``runtime``
    and ``handler`` (a .zip package).
    """

    role: str
    image_uri: str | None = None
    s3_bucket: str | None = None
    s3_key: str | None = None
    runtime: str | None = None
    handler: str | None = None

    def __post_init__(self) -> None:
        if not self.role:
            raise InvalidInputError("role", "CreateFunction needs the execution role ARN (--role)")
        if bool(self.image_uri) == bool(self.s3_bucket or self.s3_key):
            raise InvalidInputError(
                "code", "give either a container image (--image-uri) or a .zip package (--s3-bucket and --s3-key)"
            )
        if not self.image_uri and not (self.s3_bucket and self.s3_key and self.runtime and self.handler):
            raise InvalidInputError("code", "a .zip package needs --s3-bucket, --s3-key, --runtime and --handler")
        self._check_against_lambdas_model()

    def _check_against_lambdas_model(self) -> None:
        """Role, handler, bucket and key within CreateFunction's lengths and patterns (botocore's
        Lambda model): Lambda would refuse the call. The runtime is not held to the model's list,
        which a botocore older than Lambda's newest runtime lacks."""
        from dnnprov.cloud.aws import check_member

        for option, value, path in (
            ("role", self.role, ("Role",)),
            ("handler", self.handler, ("Handler",)),
            ("s3_bucket", self.s3_bucket, ("Code", "S3Bucket")),
            ("s3_key", self.s3_key, ("Code", "S3Key")),
        ):
            if value is not None:
                check_member(option, value, "lambda", "CreateFunction", *path)

    def params(self) -> dict[str, Any]:
        """The CreateFunction parameters for the code."""
        if self.image_uri:
            return {"Role": self.role, "PackageType": "Image", "Code": {"ImageUri": self.image_uri}}
        return {
            "Role": self.role,
            "PackageType": "Zip",
            "Runtime": self.runtime,
            "Handler": self.handler,
            "Code": {"S3Bucket": self.s3_bucket, "S3Key": self.s3_key},
        }


#: Memory a Lambda function may have, MB (AWS's documented limits; the EC2/Lambda twin's too).
LAMBDA_MEMORY_MB = (128, 10_240)


def lambda_calls(
    doc: PlanDocument, function_name: str | None = None, code: FunctionCode | None = None
) -> list[ApiCall]:
    """Lambda settings of a serverless plan: memory and timeout, reserved concurrency = functions.

    Without ``code`` the function exists and gets UpdateFunctionConfiguration; with it,
    CreateFunction makes the function with the plan's memory and timeout. A chosen
    ``function_name`` must be a valid bare name; the default is made from the instance name.
    """
    if doc.kind != "serverless":
        raise InvalidInputError("result.kind", "the lambda export needs a serverless plan")
    plan = doc.result["plan"]
    platform = doc.problem.platform if isinstance(doc.problem, ServerlessProblem) else ServerlessPlatform()
    if function_name is None:
        name = lambda_function_name(doc.name)
    else:
        name = require(
            "function_name",
            function_name,
            LAMBDA_FUNCTION_NAME,
            LAMBDA_NAME_MAX,
            "a Lambda function name has letters, digits, '-' and '_' only",
        )
    memory = int(plan["memory_mb"])
    low, high = LAMBDA_MEMORY_MB
    if not low <= memory <= high:  # botocore and Lambda refuse it: say so here, not at the call
        raise InvalidInputError("result.plan.memory_mb", f"Lambda takes {low}-{high:,} MB per function, got {memory:,}")
    settings = {
        "FunctionName": name,
        "MemorySize": memory,
        "Timeout": min(900, math.ceil(platform.timeout_s)),
    }
    if code is None:
        configure = ApiCall("lambda", "UpdateFunctionConfiguration", settings)
    else:
        configure = ApiCall(
            "lambda",
            "CreateFunction",
            {**settings, **code.params(), "Tags": {"dnnprov:plan": tag_value(doc.name), "dnnprov:role": "worker"}},
        )
    return [
        configure,
        ApiCall(
            "lambda",
            "PutFunctionConcurrency",
            {"FunctionName": name, "ReservedConcurrentExecutions": int(plan["functions"])},
        ),
    ]


def calls_json(doc: PlanDocument, calls: list[ApiCall]) -> str:
    """The ``dnnprov/aws-calls`` v1 JSON text of ``calls``."""
    return (
        json.dumps(
            {
                "format": CALLS_FORMAT,
                "version": 1,
                "plan": doc.name,
                "region": doc.region or (plan_region(doc) if worker_regions(doc) else None),
                "calls": [c.to_dict() for c in calls],
            },
            indent=2,
        )
        + "\n"
    )
