"""Plan exports: EC2 calls (checked against AWS's API model), Lambda, SkyPilot, Kueue, JSON."""

from __future__ import annotations

import json
from pathlib import Path

import botocore.session
import pytest
from botocore.validate import validate_parameters

import dnnprov
from dnnprov.catalog import Catalog, CatalogEntry
from dnnprov.cli import main
from dnnprov.errors import InvalidInputError
from dnnprov.export import (LaunchOptions, PlanDocument, ec2_fleet_calls, export, lambda_calls,
                            load_plan, plan_document, run_instances_calls, to_yaml)
from dnnprov.replan import replanned_problem

pytest_plugins = ["conftest_aws"]
yaml = pytest.importorskip("yaml", reason="PyYAML comes with moto[server], a test dependency")

AMI = LaunchOptions(image_id="ami-0123456789abcdef0", subnet_id="subnet-12345678", key_name="dnnprov")
TEMPLATE = LaunchOptions(launch_template="dnnprov-workers")
CATALOG = Catalog(name="aws-us-east-1", region="us-east-1", snapshot="2022-05-31T23:52:09Z", instance_types=(
    CatalogEntry(name="g4dn.4xlarge", gpus=1, vcpus=16, memory_gb=64.0),
    CatalogEntry(name="g3.8xlarge", gpus=2, vcpus=32, memory_gb=244.0),
    CatalogEntry(name="g3.16xlarge", gpus=4, vcpus=64, memory_gb=488.0)))


def check_against_model(call) -> None:
    """The call's parameters are valid input of the AWS operation (botocore's own model)."""
    model = botocore.session.get_session().get_service_model(call.service)
    validate_parameters(call.params, model.operation_model(call.operation).input_shape)


@pytest.fixture
def table1(ref_resnet110) -> PlanDocument:
    """The Table I instance solved exactly, wrapped with its instance and a catalog."""
    problem = ref_resnet110()
    return plan_document(dnnprov.solve(problem, "milp"), problem, CATALOG)


def test_run_instances_exact_mix_and_ps(table1: PlanDocument) -> None:
    """One spot RunInstances per type with MinCount = MaxCount = count, and the on-demand PS."""
    calls = run_instances_calls(table1, AMI)
    for call in calls:
        check_against_model(call)
    workers = {c.params["InstanceType"]: c.params["MinCount"] for c in calls[:-1]}
    assert workers == {"g4dn.4xlarge": 3, "g3.8xlarge": 5, "g3.16xlarge": 2}
    assert all(c.params["MaxCount"] == c.params["MinCount"] for c in calls)
    assert all(c.params["InstanceMarketOptions"]["MarketType"] == "spot" for c in calls[:-1])
    ps = calls[-1].params
    assert (ps["InstanceType"], ps["MinCount"], "InstanceMarketOptions" in ps) == ("m5.xlarge", 1, False)


def test_fleet_request_one_override_per_type(table1: PlanDocument) -> None:
    """An instant CreateFleet: spot, one override per type, target capacity = workers."""
    fleet, ps = ec2_fleet_calls(table1, TEMPLATE)
    check_against_model(fleet)
    check_against_model(ps)
    p = fleet.params
    assert p["Type"] == "instant"
    overrides = p["LaunchTemplateConfigs"][0]["Overrides"]
    assert [o["InstanceType"] for o in overrides] == ["g4dn.4xlarge", "g3.8xlarge", "g3.16xlarge"]
    assert p["TargetCapacitySpecification"] == {"TotalTargetCapacity": 10, "SpotTargetCapacity": 10,
                                                "OnDemandTargetCapacity": 0, "DefaultTargetCapacityType": "spot"}
    with pytest.raises(InvalidInputError, match="launch template"):
        ec2_fleet_calls(table1, AMI)


def test_takeover_plan_launches_only_new_workers(ref_resnet110, table1: PlanDocument) -> None:
    """Kept workers (constraints.existing) are not launched again, nor is the PS."""
    problem = ref_resnet110()
    takeover = replanned_problem(problem, {"g3.8xlarge": 5, "g3.16xlarge": 3}, {"g3.8xlarge": 5}, 1788, 0.92)
    doc = plan_document(dnnprov.solve(takeover, "enumerate"), takeover)
    calls = run_instances_calls(doc, AMI)
    launched = {c.params["InstanceType"]: c.params["MinCount"] for c in calls}
    assert "m5.xlarge" not in launched and doc.kept() == {"g3.16xlarge": 3}
    assert launched == {k: v - doc.kept().get(k, 0) for k, v in doc.counts().items() if v > doc.kept().get(k, 0)}
    bare = PlanDocument(result=doc.result)  # without the instance: from details.new_instances
    assert bare.launch_counts() == doc.launch_counts() and not bare.launches_ps()


def test_lambda_configuration_of_serverless_plan() -> None:
    """MemorySize and Timeout, and reserved concurrency = number of functions."""
    workload = dnnprov.ServerlessWorkload(
        name="resnet50-cifar10", dataset_mb=148.0, samples=50000, epochs=1, model_mb=98.0,
        local_batch=128, max_global_batch=1024, rate_alpha=0.003, rate_beta=11.3,
        storage_alpha=0.0, storage_beta=8.0, min_memory_mb=2432)
    problem = dnnprov.ServerlessProblem(workload=workload, time_s=600.0, name="resnet50")
    doc = plan_document(dnnprov.solve(problem, "enumerate"), problem)
    config, concurrency = lambda_calls(doc, "train-resnet50")
    check_against_model(config)
    check_against_model(concurrency)
    plan = doc.result["plan"]
    assert config.params == {"FunctionName": "train-resnet50", "MemorySize": plan["memory_mb"], "Timeout": 900}
    assert concurrency.params["ReservedConcurrentExecutions"] == plan["functions"]
    with pytest.raises(InvalidInputError, match="needs a spot plan"):
        export(doc, "skypilot")


def test_skypilot_yaml(table1: PlanDocument) -> None:
    """One SkyPilot task per type (spot) plus the PS, in the catalog's region."""
    tasks = list(yaml.safe_load_all(export(table1, "skypilot")))
    assert [(t["resources"]["instance_type"], t["num_nodes"], t["resources"]["use_spot"]) for t in tasks] == [
        ("g4dn.4xlarge", 3, True), ("g3.8xlarge", 5, True), ("g3.16xlarge", 2, True), ("m5.xlarge", 1, False)]
    assert {t["resources"]["infra"] for t in tasks} == {"aws/us-east-1"}
    assert tasks[0]["name"] == "resnet110-table1-reference-g4dn-4xlarge-spot"


def test_kueue_yaml(table1: PlanDocument) -> None:
    """A ResourceFlavor per type and a ClusterQueue whose quotas are the plan's totals."""
    docs = list(yaml.safe_load_all(export(table1, "kueue")))
    flavors, queue = docs[:-1], docs[-1]
    labels = [f["spec"]["nodeLabels"] for f in flavors]
    assert [x["node.kubernetes.io/instance-type"] for x in labels] == ["g4dn.4xlarge", "g3.8xlarge", "g3.16xlarge"]
    assert {x["karpenter.sh/capacity-type"] for x in labels} == {"spot"}
    group = queue["spec"]["resourceGroups"][0]
    assert queue["kind"] == "ClusterQueue" and group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    quotas = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in group["flavors"]}
    assert quotas["g3.8xlarge-spot"] == {"cpu": 160, "memory": "1220Gi", "nvidia.com/gpu": 10}
    assert quotas["g3.16xlarge-spot"]["nvidia.com/gpu"] == 8


def test_json_export_stamped_with_snapshot(table1: PlanDocument) -> None:
    """The JSON plan names the catalog snapshot it was priced from and what to launch."""
    out = json.loads(export(table1, "json"))
    assert out["catalog"] == {"name": "aws-us-east-1", "region": "us-east-1", "snapshot": "2022-05-31T23:52:09Z"}
    assert out["launch"]["workers"] == {"g4dn.4xlarge": 3, "g3.8xlarge": 5, "g3.16xlarge": 2}
    assert out["cost_usd"] == pytest.approx(5.448374)


def test_cli_export_bare_solve_output(ref_resnet110, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`dnnprov solve --json` output exports as is; --instance and --catalog add context."""
    problem = ref_resnet110()
    instance = tmp_path / "table1.json"
    dnnprov.write_instance(problem, instance)
    assert main(["solve", str(instance), "--json"]) == 0
    plan = tmp_path / "plan.json"
    plan.write_text(capsys.readouterr().out)
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps(CATALOG.to_dict()))
    assert main(["export", str(plan), "--to", "ec2-run-instances", "--image-id", "ami-0123456789abcdef0"]) == 0
    calls = json.loads(capsys.readouterr().out)
    assert calls["format"] == "dnnprov/aws-calls" and len(calls["calls"]) == 4
    out = tmp_path / "kueue.yaml"
    assert main(["export", str(plan), "--to", "kueue", "--instance", str(instance), "--catalog", str(catalog),
                 "--out", str(out)]) == 0
    assert len(list(yaml.safe_load_all(out.read_text()))) == 4
    assert main(["export", str(plan), "--to", "kueue"]) == 2  # no GPU counts without instance or catalog
    assert "needs the GPU count" in capsys.readouterr().err
    assert load_plan(plan).counts() == {"g4dn.4xlarge": 3, "g3.8xlarge": 5, "g3.16xlarge": 2}


def test_plan_without_solution_is_refused(ref_resnet110) -> None:
    """An infeasible result has nothing to deploy: one clear error."""
    problem = ref_resnet110(time_s=100.0)
    result = dnnprov.solve(problem, "enumerate")
    with pytest.raises(InvalidInputError, match="status 'infeasible' and no plan"):
        plan_document(result, problem)


def test_plan_document_round_trip(table1: PlanDocument) -> None:
    """to_dict / from_dict keep the result, the instance and the catalog."""
    again = PlanDocument.from_dict(json.loads(json.dumps(table1.to_dict())))
    assert again.problem == table1.problem and again.catalog == table1.catalog
    assert again.result == table1.result


def test_yaml_emitter_shapes() -> None:
    """The hand-written YAML reads back as the same data (nested maps, lists, empties, quoting)."""
    data = {"a": [{"b": 1, "c": ["x", "y: z"]}, []], "d": {}, "e": True, "f": None, "g": "#not a comment",
            "h.i/j": [[1, 2], {"k": 2.5}]}
    assert yaml.safe_load(to_yaml(data)) == data
