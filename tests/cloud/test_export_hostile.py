"""Hostile plan, instance and option values: each export is a file its consumer takes, or one clear error.

The consumers' own rules: EC2's InstanceType values (botocore's model, read here) and the launch
template, Lambda CreateFunction's members (botocore's model), SkyPilot's instance types (a
region-qualified name is no type), and AWS's reserved ``aws:`` tag prefix.
"""

from __future__ import annotations

import json
import re

import botocore.session
import pytest
from botocore.validate import validate_parameters

import dnnprov
from dnnprov.cloud.export import (
    ExportOptions,
    LaunchOptions,
    PlanDocument,
    SkyPilotOptions,
    export_files,
    plan_document,
)
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import Catalog, CatalogEntry
from dnnprov.io.instances import problem_from_dict, read_instance

EC2 = botocore.session.get_session().get_service_model("ec2")
CATALOG = Catalog(
    name="c",
    region="us-east-1",
    snapshot="2022-05-31T23:52:09Z",
    instance_types=(
        CatalogEntry(name="g4dn.4xlarge", gpus=1, vcpus=16, memory_gb=64.0),
        CatalogEntry(name="g3.8xlarge", gpus=2, vcpus=32, memory_gb=244.0),
        CatalogEntry(name="g3.16xlarge", gpus=4, vcpus=64, memory_gb=488.0),
    ),
)
AMI, TEMPLATE = LaunchOptions(image_id="ami-0123456789abcdef0"), LaunchOptions(launch_template="dnnprov-workers")


def table1(rename: str | None = None, ps_type: str | None = None) -> PlanDocument:
    """spotDNN Table I solved, its g4dn.4xlarge renamed to ``rename`` and its PS type ``ps_type``."""
    d = read_instance("embedded:spot/paper-table1.json").to_dict()
    if rename is not None:
        d["instance_types"] = {(rename if k == "g4dn.4xlarge" else k): v for k, v in d["instance_types"].items()}
    if ps_type is not None:
        d["platform"]["ps_type"] = ps_type
    problem = problem_from_dict(d)
    return plan_document(dnnprov.solve(problem, "milp"), problem, CATALOG)


def test_every_botocore_instance_type_passes_the_ec2_export() -> None:
    """The EC2 type rule holds every InstanceType value of botocore's model (no real type is refused)."""
    from dnnprov.cloud.export.placement import EC2_TYPE

    types = EC2.shape_for("InstanceType").enum
    assert len(types) > 500 and [t for t in types if not EC2_TYPE.fullmatch(t)] == []


@pytest.mark.parametrize("name", ["GPU type ü", "g4dn 4xlarge", "G4DN.4XLARGE", "-g4dn.4xlarge", "a/b", "g" * 200])
@pytest.mark.parametrize("target,options", [("ec2-run-instances", AMI), ("ec2-fleet", TEMPLATE)])
def test_a_type_ec2_cannot_launch_is_refused(name: str, target: str, options: LaunchOptions) -> None:
    """An instance type name that is no EC2 type: one error naming the plan's count, no call EC2 refuses."""
    doc = table1(rename=name)
    assert doc.counts().get(name)
    with pytest.raises(InvalidInputError, match=f"^result.plan.counts.{re.escape(name)}: .* is no EC2 instance type"):
        export_files(doc, target, ExportOptions(launch=options))


@pytest.mark.parametrize("ps_type", ["m5 xlarge", "ü", "M5.XLARGE", "m5.xlarge@eu-west-1"])
def test_a_ps_type_ec2_cannot_launch_is_refused(ps_type: str) -> None:
    """The PS's RunInstances: a PS type that is no EC2 type, or that names a region, is refused by name."""
    doc = table1(ps_type=ps_type)
    for target, options in (("ec2-run-instances", AMI), ("ec2-fleet", TEMPLATE)):
        with pytest.raises(InvalidInputError, match="^instance.platform.ps_type: "):
            export_files(doc, target, ExportOptions(launch=options))


def test_valid_types_still_export_and_pass_botocore() -> None:
    """Table I's real types: every call is valid input of its operation, every InstanceType in botocore's list."""
    doc = table1()
    types = set(EC2.shape_for("InstanceType").enum)
    for target, options in (("ec2-run-instances", AMI), ("ec2-fleet", TEMPLATE)):
        (text,) = export_files(doc, target, ExportOptions(launch=options)).values()
        for call in json.loads(text)["calls"]:
            validate_parameters(call["params"], EC2.operation_model(call["operation"]).input_shape)
            for override in call["params"].get("LaunchTemplateConfigs", [{}])[0].get("Overrides", [call["params"]]):
                assert override["InstanceType"] in types


def test_a_region_qualified_ps_type_is_no_skypilot_type() -> None:
    """A PS type TYPE@REGION passed the catalog check as TYPE but was written as TYPE@REGION, which
    SkyPilot cannot launch (sky.catalog.instance_type_exists is False): refused, naming the PS type."""
    doc = table1(ps_type="m5.xlarge@us-east-1")
    with pytest.raises(InvalidInputError, match="^instance.platform.ps_type: 'm5.xlarge@us-east-1' names a region"):
        export_files(doc, "skypilot", ExportOptions(skypilot=SkyPilotOptions(check_catalog=False)))


@pytest.mark.parametrize("name", ["aws:evil", "AWS:lambda", "Aws:x"])
def test_a_plan_named_with_awss_reserved_prefix_gets_no_aws_tag(name: str) -> None:
    """AWS reserves the ``aws:`` prefix (any case) in tag keys and values: a plan so named became
    the ``dnnprov:plan`` tag value as it was (audit a6)."""
    d = read_instance("embedded:spot/paper-table1.json").to_dict()
    d["name"] = name
    problem = problem_from_dict(d)
    doc = plan_document(dnnprov.solve(problem, "milp"), problem, CATALOG)
    text = "".join(export_files(doc, "ec2-run-instances", ExportOptions(launch=AMI)).values())
    values = re.findall(r'"Key": "dnnprov:plan",\s*"Value": "([^"]*)"', text)
    assert values and all(not v.lower().startswith("aws:") and v[4:] == name[4:] for v in values), values


@pytest.mark.parametrize("counts", [{}, {"g4dn.4xlarge": 0, "g3.8xlarge": 0}])
@pytest.mark.parametrize("target", ["ec2-run-instances", "ec2-fleet", "skypilot", "kueue"])
def test_a_plan_without_workers_is_refused(counts: dict[str, int], target: str) -> None:
    """A bare result with no worker exported a cluster of the PS alone (ec2-fleet said every
    worker was already running): one error naming the counts."""
    doc = table1()
    bare = PlanDocument(result={**doc.result, "plan": {**doc.result["plan"], "counts": counts}}, catalog=CATALOG)
    options = ExportOptions(launch=TEMPLATE if target == "ec2-fleet" else AMI)
    with pytest.raises(InvalidInputError, match="^result.plan.counts: the plan has no workers"):
        export_files(bare, target, options)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        (dict(image_id="not an ami"), "image_id"),
        (dict(image_id=" "), "image_id"),
        (dict(image_id="us-east-1=ami-1x"), "image_id"),
        (dict(launch_template="ab"), "launch_template"),
        (dict(launch_template="my template"), "launch_template"),
        (dict(launch_template="t" * 129), "launch_template"),
        (dict(launch_template="lt", launch_template_version="banana"), "launch_template"),
        (dict(launch_template="dnnprov-workers", launch_template_version="banana"), "launch_template_version"),
        (dict(image_id="ami-0123456789abcdef0", subnet_id="subnet 1"), "subnet_id"),
        (dict(image_id="ami-0123456789abcdef0", key_name="ü key"), "key_name"),
    ],
)
def test_launch_options_ec2_would_refuse_are_refused(options: dict[str, str], field: str) -> None:
    """Launch options EC2 (or botocore's model: a template name of 3-128 characters) would refuse
    were passed through into the calls (exports audit): one error naming the option."""
    with pytest.raises(InvalidInputError, match=f"^{field}: "):
        LaunchOptions(**options)


def test_launch_options_ec2_takes_still_pass() -> None:
    for options in (
        dict(image_id="ami-12c6146b"),
        dict(image_id="resolve:ssm:/aws/service/deeplearning/ami/x86_64/base/latest/ami-id"),
        dict(image_id="us-east-1=ami-0123456789abcdef0,eu-west-1=ami-12c6146b"),
        dict(launch_template="lt-0abcd1234ef567890", launch_template_version="$Latest"),
        dict(launch_template="dnnprov-workers", launch_template_version="12"),
        dict(image_id="ami-12c6146b", subnet_id="subnet-0bb1c79de30a1b2c3"),
        dict(image_id="ami-12c6146b", key_name="my key-pair_1"),
    ):
        LaunchOptions(**options)


ROLE = "arn:aws:iam::123456789012:role/dnnprov-worker"


@pytest.mark.parametrize(
    ("code", "field"),
    [
        (dict(role="not an arn", image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/w:1"), "role"),
        (dict(role=ROLE, s3_bucket="b", s3_key="w.zip", runtime="python3.11", handler="app.main"), "s3_bucket"),
        (dict(role=ROLE, s3_bucket="bucket.", s3_key="w.zip", runtime="python3.11", handler="app.main"), "s3_bucket"),
        (dict(role=ROLE, s3_bucket="bucket", s3_key="w.zip", runtime="python3.11", handler="a b"), "handler"),
        (dict(role=ROLE, s3_bucket="bucket", s3_key="w.zip", runtime="python3.11", handler="h" * 129), "handler"),
    ],
)
def test_function_code_lambda_would_refuse_is_refused(code: dict[str, str], field: str) -> None:
    """CreateFunction's members were passed through: a 1-character bucket fails botocore's own
    validation, a role that is no ARN and a handler with a space fail Lambda's (exports audit)."""
    from dnnprov.cloud.export.consumers.aws_calls import FunctionCode

    with pytest.raises(InvalidInputError, match=f"^{field}: .* is not one CreateFunction takes"):
        FunctionCode(**code)
    good = {**code, field: {"role": ROLE, "s3_bucket": "bucket", "handler": "app.main"}[field]}
    FunctionCode(**good)
