"""Exports of a multi-region plan (TYPE@REGION): each type launched in its region as its AWS type."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import botocore.session
import pytest
from botocore.validate import validate_parameters

import dnnprov
from dnnprov.cli import main
from dnnprov.cloud.export import (
    LaunchOptions,
    PlanDocument,
    SkyPilotOptions,
    ec2_fleet_calls,
    plan_document,
    run_instances_calls,
)
from dnnprov.cloud.export.consumers.kueue import kueue_documents
from dnnprov.cloud.export.consumers.skypilot import skypilot_tasks
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import Catalog
from dnnprov.io.catalogs.importing import write_catalog
from dnnprov.io.catalogs.regions import merge_regions

pytest_plugins = ["conftest_aws"]

AMI = LaunchOptions(image_id="ami-0123456789abcdef0")
#: AMIs are per region: a plan launching in two regions names one for each.
AMIS = LaunchOptions(image_id="us-east-1=ami-0123456789abcdef0,eu-west-1=ami-0fedcba9876543210")
#: An AMI of moto's default images (moto registers them in every region).
MOTO_AMI = "ami-12c6146b"


#: spot prices of the two regions: p3.2xlarge cheapest in eu-west-1, g3.16xlarge in us-east-1
US_EAST = {"p3.2xlarge": 3.0, "g3.16xlarge": 1.0}
EU_WEST = {"p3.2xlarge": 0.5, "g3.16xlarge": 9.0}


@pytest.fixture
def two_regions(make_region_catalog) -> Catalog:
    """us-east-1 and eu-west-1 merged: TYPE@REGION pools at the prices above."""
    return merge_regions([make_region_catalog("us-east-1", US_EAST), make_region_catalog("eu-west-1", EU_WEST)], "two")


@pytest.fixture
def split_doc(two_regions: Catalog, make_region_problem) -> PlanDocument:
    """A plan whose p3.2xlarge is cheapest in eu-west-1 and g3.16xlarge in us-east-1 (quotas make it use both)."""
    catalog = two_regions
    problem = make_region_problem(
        catalog, {"p3.2xlarge@eu-west-1": 1, "g3.16xlarge@us-east-1": 2, "p3.2xlarge@us-east-1": 0}
    )
    result = dnnprov.solve(problem, "milp")
    assert result.status == "optimal"
    doc = plan_document(result, problem, catalog)
    assert {k: n for k, n in doc.counts().items() if n} == {"p3.2xlarge@eu-west-1": 1, "g3.16xlarge@us-east-1": 1}
    return doc


def test_run_instances_calls_go_to_each_types_region(split_doc: PlanDocument) -> None:
    calls = run_instances_calls(split_doc, AMIS)
    assert {c.region: c.params["ImageId"] for c in calls} == {
        "us-east-1": "ami-0123456789abcdef0",
        "eu-west-1": "ami-0fedcba9876543210",
    }
    where = {(c.params["InstanceType"], c.region) for c in calls}
    # Workers in their own regions; the PS in us-east-1, which holds 4 of the plan's 5 worker GPUs.
    assert where == {("p3.2xlarge", "eu-west-1"), ("g3.16xlarge", "us-east-1"), ("m5.xlarge", "us-east-1")}
    model = botocore.session.get_session().get_service_model("ec2")
    for c in calls:
        validate_parameters(c.params, model.operation_model(c.operation).input_shape)
        assert c.to_dict()["region"] == c.region


def test_fleet_calls_are_one_per_market_and_region(split_doc: PlanDocument) -> None:
    calls = ec2_fleet_calls(split_doc, LaunchOptions(launch_template="dnnprov-workers"))
    fleets = [c for c in calls if c.operation == "CreateFleet"]
    assert {(c.region, c.params["TargetCapacitySpecification"]["TotalTargetCapacity"]) for c in fleets} == {
        ("eu-west-1", 1),
        ("us-east-1", 4),
    }
    for c in fleets:
        overrides = c.params["LaunchTemplateConfigs"][0]["Overrides"]
        assert all("@" not in o["InstanceType"] for o in overrides)


def test_skypilot_tasks_pin_each_cluster_to_its_region(split_doc: PlanDocument) -> None:
    tasks = skypilot_tasks(split_doc, SkyPilotOptions(check_catalog=False))
    placed = {(t["resources"]["instance_type"], t["resources"]["infra"]) for t in tasks.values()}
    assert placed == {
        ("m5.xlarge", "aws/us-east-1"),
        ("p3.2xlarge", "aws/eu-west-1"),
        ("g3.16xlarge", "aws/us-east-1"),
    }


def test_ps_region_can_be_chosen(split_doc: PlanDocument) -> None:
    tasks = skypilot_tasks(split_doc, SkyPilotOptions(check_catalog=False, region="eu-west-1"))
    ps = [t for t in tasks.values() if t["envs"]["DNNPROV_ROLE"] == "ps"]
    assert [t["resources"]["infra"] for t in ps] == ["aws/eu-west-1"]


def test_one_ami_or_subnet_for_several_regions_is_refused(split_doc: PlanDocument) -> None:
    """An AMI and a subnet belong to one region (zone): one error naming the option."""
    for options, field in (
        (AMI, "image_id"),
        (LaunchOptions(image_id=AMIS.image_id, subnet_id="subnet-11111111"), "subnet_id"),
        (LaunchOptions(image_id="us-east-1=ami-11111111"), "image_id"),
    ):
        with pytest.raises(InvalidInputError) as err:
            run_instances_calls(split_doc, options)
        assert err.value.field == field
    with pytest.raises(InvalidInputError) as err:
        LaunchOptions(image_id="us-east-1=ami-11111111,nowhere=ami-22222222")
    assert err.value.field == "image_id"


def test_export_cli_names_each_calls_region(
    split_doc: PlanDocument, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(split_doc.to_dict()))
    assert main(["export", str(plan), "--to", "ec2-run-instances", "--image-id", AMIS.image_id or ""]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["region"] == "us-east-1"
    assert [c["region"] for c in out["calls"]] == ["eu-west-1", "us-east-1", "us-east-1"]
    assert main(["export", str(plan), "--to", "ec2-run-instances", "--image-id", AMI.image_id or ""]) == 2
    assert "an AMI belongs to one region and the plan launches in eu-west-1, us-east-1" in capsys.readouterr().err


def _run_instances(url: str, region: str, run: str) -> dict[str, list[str]]:
    """Instance types by role of one run in one region of the moto server."""
    ec2 = boto3.client("ec2", region_name=region, endpoint_url=url)
    found: dict[str, list[str]] = {}
    pages = ec2.describe_instances(Filters=[{"Name": "tag:dnnprov:run", "Values": [run]}])["Reservations"]
    for instance in (i for r in pages for i in r["Instances"]):
        role = next(t["Value"] for t in instance["Tags"] if t["Key"] == "dnnprov:role")
        found.setdefault(role, []).append(instance["InstanceType"])
    return {role: sorted(types) for role, types in found.items()}


def test_apply_launches_each_region_on_its_endpoint(
    split_doc: PlanDocument, moto_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plan in two regions: a dry run, then a launch; each region's instances are in that region only."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(split_doc.to_dict()))
    amis = f"us-east-1={MOTO_AMI},eu-west-1={MOTO_AMI}"
    base = ["apply", str(plan), "--image-id", amis, "--endpoint-url", moto_url]
    assert main([*base, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "1 x p3.2xlarge (spot) in eu-west-1 (DryRunOperation)" in out
    assert main([*base, "--yes", "--run-id", "two-regions"]) == 0
    out = capsys.readouterr().out
    assert "launched: 1 x g3.16xlarge (spot) in us-east-1" in out
    assert _run_instances(moto_url, "eu-west-1", "two-regions") == {"worker": ["p3.2xlarge"]}
    assert _run_instances(moto_url, "us-east-1", "two-regions") == {"ps": ["m5.xlarge"], "worker": ["g3.16xlarge"]}
    assert main([*base, "--yes", "--region", "us-east-1"]) == 2
    assert "--region is for plans without" in capsys.readouterr().err


def test_fleet_apply_reads_deliveries_back_as_region_columns(
    split_doc: PlanDocument, moto_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One fleet per region; what each delivers is checked as TYPE@REGION columns of the instance."""
    for region in ("us-east-1", "eu-west-1"):
        boto3.client("ec2", region_name=region, endpoint_url=moto_url).create_launch_template(
            LaunchTemplateName="dnnprov-workers", LaunchTemplateData={"ImageId": MOTO_AMI}
        )
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(split_doc.to_dict()))
    argv = ["apply", str(plan), "--via", "fleet", "--launch-template", "dnnprov-workers", "--endpoint-url", moto_url]
    assert main([*argv, "--yes", "--run-id", "fleets"]) == 0
    out = capsys.readouterr().out
    assert "spot fleet of 1 GPUs of p3.2xlarge in eu-west-1 delivered 1 x p3.2xlarge" in out
    assert _run_instances(moto_url, "eu-west-1", "fleets") == {"worker": ["p3.2xlarge"]}
    assert _run_instances(moto_url, "us-east-1", "fleets") == {"ps": ["m5.xlarge"], "worker": ["g3.16xlarge"]}


def test_delivered_workers_are_labelled_with_the_calls_region(split_doc: PlanDocument) -> None:
    from dnnprov.cloud.launch import CallOutcome

    call = run_instances_calls(split_doc, AMIS)[0]
    outcome = CallOutcome(call, dry_run=False, instance_ids=("i-1",), types=(("p3.2xlarge", 1),))
    assert outcome.workers() == {"p3.2xlarge@eu-west-1": 1}


def test_a_single_region_catalog_plan_is_unchanged(tmp_path: Path, make_region_catalog, make_region_problem) -> None:
    """Plans of a single-region catalog carry no call regions (the document's region stands)."""
    catalog = make_region_catalog("us-east-1", US_EAST)
    write_catalog(catalog, tmp_path / "c.json")
    problem = make_region_problem(catalog, {"p3.2xlarge": 1, "g3.16xlarge": 1})
    doc = plan_document(dnnprov.solve(problem, "milp"), problem, catalog)
    calls = run_instances_calls(doc, AMI)
    assert calls and all(c.region is None and "region" not in c.to_dict() for c in calls)
    assert doc.region == "us-east-1"


def test_kueue_refuses_a_split_plan(split_doc: PlanDocument) -> None:
    with pytest.raises(InvalidInputError) as err:
        kueue_documents(split_doc)
    assert err.value.field == "result.plan" and "2 regions (eu-west-1, us-east-1)" in err.value.problem


def test_kueue_labels_a_one_region_plan_with_aws_types(two_regions: Catalog, make_region_problem) -> None:
    catalog = two_regions
    problem = make_region_problem(catalog, {"p3.2xlarge@eu-west-1": 4, "g3.16xlarge@eu-west-1": 1})
    result = dnnprov.solve(problem, "milp")
    assert result.status == "optimal"
    docs = kueue_documents(plan_document(result, problem, catalog))
    labels = [d["spec"]["nodeLabels"] for d in docs if d["kind"] == "ResourceFlavor"]
    types = {lab["node.kubernetes.io/instance-type"] for lab in labels}
    assert "p3.2xlarge" in types and not any("@" in t for t in types)
