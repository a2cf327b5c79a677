"""Exports of a multi-region plan (TYPE@REGION): each type launched in its region as its AWS type."""

from __future__ import annotations

import json
from pathlib import Path

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
from dnnprov.cloud.export.kueue import kueue_documents
from dnnprov.cloud.export.skypilot import skypilot_tasks
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import Catalog
from dnnprov.io.catalogs.importing import write_catalog
from dnnprov.io.catalogs.regions import merge_regions

AMI = LaunchOptions(image_id="ami-0123456789abcdef0")


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
    calls = run_instances_calls(split_doc, AMI)
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


def test_export_cli_and_apply_refusal(
    split_doc: PlanDocument, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(split_doc.to_dict()))
    assert main(["export", str(plan), "--to", "ec2-run-instances", "--image-id", AMI.image_id or ""]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["region"] == "us-east-1"
    assert [c["region"] for c in out["calls"]] == ["eu-west-1", "us-east-1", "us-east-1"]
    argv = ["apply", str(plan), "--image-id", AMI.image_id or "", "--dry-run"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "launches in 2 regions (eu-west-1, us-east-1)" in err and "dnnprov build --region" in err


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
