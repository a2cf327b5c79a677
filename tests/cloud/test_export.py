"""Plan exports: EC2 calls (checked against AWS's API model), Lambda, SkyPilot, Kueue, JSON."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import botocore.session
import pytest
from botocore.validate import validate_parameters

import dnnprov
from dnnprov.cli import main
from dnnprov.cloud.export import (
    KUEUE_APIS,
    ExportOptions,
    FunctionCode,
    LaunchOptions,
    PlanDocument,
    SkyPilotOptions,
    dump_yaml,
    ec2_fleet_calls,
    export,
    export_files,
    lambda_calls,
    load_plan,
    plan_document,
    run_instances_calls,
)
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import Catalog, CatalogEntry
from dnnprov.revocation.replan import replanned_problem

pytest_plugins = ["conftest_aws"]
yaml = pytest.importorskip("yaml", reason="PyYAML comes with moto[server], a test dependency")

AMI = LaunchOptions(image_id="ami-0123456789abcdef0", subnet_id="subnet-12345678", key_name="dnnprov")
TEMPLATE = LaunchOptions(launch_template="dnnprov-workers")
CATALOG = Catalog(
    name="aws-us-east-1",
    region="us-east-1",
    snapshot="2022-05-31T23:52:09Z",
    instance_types=(
        CatalogEntry(name="g4dn.4xlarge", gpus=1, vcpus=16, memory_gb=64.0),
        CatalogEntry(name="g3.8xlarge", gpus=2, vcpus=32, memory_gb=244.0),
        CatalogEntry(name="g3.16xlarge", gpus=4, vcpus=64, memory_gb=488.0),
        CatalogEntry(name="m5.xlarge", gpus=0, vcpus=4, memory_gb=16.0),
    ),
)
#: A name crafted to end the header comment and add a document and keys if written unescaped.
CRAFTED = "evil\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: x}\n# \"quoted\" 'x': y"


def check_against_model(call) -> None:
    """The call's parameters are valid input of the AWS operation (botocore's own model)."""
    model = botocore.session.get_session().get_service_model(call.service)
    validate_parameters(call.params, model.operation_model(call.operation).input_shape)


REPRO = Path(__file__).resolve().parents[2].parent / "shared" / "repro" / "turn3" / "exports"
UNCHECKED = ExportOptions(skypilot=SkyPilotOptions(check_catalog=False))


@pytest.fixture
def mixed_doc() -> PlanDocument:
    """The issue's mixed-market instance (spot g3.8xlarge and on-demand p3.2xlarge workers) solved exactly."""
    path = REPRO / "mixed.json"
    if not path.exists():
        pytest.skip(f"the reproductions of issue 21 are not at {REPRO}")
    problem = dnnprov.read_instance(path)
    catalog = Catalog(
        name="c",
        region="us-east-1",
        snapshot="2022-05-31T23:52:09Z",
        instance_types=(CatalogEntry(name="p3.2xlarge", gpus=1, vcpus=8, memory_gb=61.0), *CATALOG.instance_types),
    )
    return plan_document(dnnprov.solve(problem, "milp"), problem, catalog)


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


def test_fleet_request_weighted_by_gpus_per_market(table1: PlanDocument, mixed_doc: PlanDocument) -> None:
    """Instant CreateFleets: overrides weighted by GPUs, target = the plan's GPUs, one fleet per market."""
    fleet, ps = ec2_fleet_calls(table1, TEMPLATE)
    check_against_model(fleet)
    check_against_model(ps)
    p = fleet.params
    assert p["Type"] == "instant"
    overrides = p["LaunchTemplateConfigs"][0]["Overrides"]
    # spotDNN Table I's plan 3 x g4dn.4xlarge + 5 x g3.8xlarge + 2 x g3.16xlarge: 1, 2 and 4 GPUs each
    assert {o["InstanceType"]: o["WeightedCapacity"] for o in overrides} == {
        "g4dn.4xlarge": 1,
        "g3.8xlarge": 2,
        "g3.16xlarge": 4,
    }
    assert p["TargetCapacitySpecification"] == {
        "TotalTargetCapacity": 3 + 10 + 8,
        "SpotTargetCapacity": 21,
        "OnDemandTargetCapacity": 0,
        "DefaultTargetCapacityType": "spot",
    }
    assert ps.params["InstanceType"] == "m5.xlarge"
    with pytest.raises(InvalidInputError, match="launch template"):
        ec2_fleet_calls(table1, AMI)
    calls = ec2_fleet_calls(mixed_doc, TEMPLATE)
    for call in calls:
        check_against_model(call)
    fleets = {
        c.params["TargetCapacitySpecification"]["DefaultTargetCapacityType"]: c.params
        for c in calls
        if c.operation == "CreateFleet"
    }
    counts = mixed_doc.counts()
    for market, params in fleets.items():
        types = {o["InstanceType"] for o in params["LaunchTemplateConfigs"][0]["Overrides"]}
        assert types == {
            label.split(":")[0] for label in counts if label.endswith(":on-demand") == (market == "on-demand")
        }
    assert set(fleets) == {"spot", "on-demand"} and calls[-1].operation == "RunInstances"


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


def test_lambda_configuration_of_serverless_plan(make_resnet50) -> None:
    """MemorySize and Timeout, and reserved concurrency = number of functions."""
    problem = make_resnet50()
    doc = plan_document(dnnprov.solve(problem, "enumerate"), problem)
    config, concurrency = lambda_calls(doc, "train-resnet50")
    check_against_model(config)
    check_against_model(concurrency)
    plan = doc.result["plan"]
    assert config.params == {"FunctionName": "train-resnet50", "MemorySize": plan["memory_mb"], "Timeout": 900}
    assert concurrency.params["ReservedConcurrentExecutions"] == plan["functions"]
    with pytest.raises(InvalidInputError, match="needs a spot plan"):
        export_files(doc, "skypilot")


@pytest.mark.parametrize("memory", [64, 127, 10_241, 20_000])
def test_lambda_memory_outside_lambdas_limits_is_refused(make_resnet50, memory: int) -> None:
    """A plan whose memory Lambda does not offer (128-10,240 MB) was exported as is; botocore
    (and Lambda) would refuse the call: the export names the field instead."""
    problem = make_resnet50()
    doc = plan_document(dnnprov.solve(problem, "enumerate"), problem)
    bad = PlanDocument(result={**doc.result, "plan": {**doc.result["plan"], "memory_mb": memory}})
    with pytest.raises(InvalidInputError, match="^result.plan.memory_mb: Lambda takes 128-10,240 MB"):
        lambda_calls(bad, "train-resnet50")


def test_lambda_create_function(make_resnet50) -> None:
    """With a role and code the function is created (CreateFunction), valid for AWS's API model."""
    problem = make_resnet50()
    doc = plan_document(dnnprov.solve(problem, "enumerate"), problem)
    role = "arn:aws:iam::123456789012:role/dnnprov-train"
    for code in (
        FunctionCode(role=role, image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1"),
        FunctionCode(
            role=role, s3_bucket="dnnprov-code", s3_key="train.zip", runtime="python3.12", handler="train.handler"
        ),
    ):
        create, concurrency = lambda_calls(doc, "train", code)
        check_against_model(create)
        assert create.operation == "CreateFunction" and create.params["MemorySize"] == doc.result["plan"]["memory_mb"]
        assert concurrency.params["ReservedConcurrentExecutions"] == doc.result["plan"]["functions"]
    with pytest.raises(InvalidInputError, match="^code: "):
        FunctionCode(role=role, s3_bucket="b")
    with pytest.raises(InvalidInputError, match="^role: "):
        FunctionCode(role="", image_uri="x")


def test_skypilot_one_task_file_per_cluster(table1: PlanDocument) -> None:
    """One single-document task file per (type, market) and the PS (first), and launch.sh for all."""
    files = export_files(table1, "skypilot", UNCHECKED)
    names = [n for n in files if n.endswith(".yaml")]
    tasks = {}
    for name in names:
        (task,) = list(yaml.safe_load_all(files[name]))
        tasks[name] = task
        assert task["name"] + ".yaml" == name
    assert [(t["resources"]["instance_type"], t["num_nodes"], t["resources"]["use_spot"]) for t in tasks.values()] == [
        ("m5.xlarge", 1, False),
        ("g4dn.4xlarge", 3, True),
        ("g3.8xlarge", 5, True),
        ("g3.16xlarge", 2, True),
    ]
    assert {t["resources"]["infra"] for t in tasks.values()} == {"aws/us-east-1"}
    assert names[0] == "resnet110-table1-reference-ps.yaml"
    assert names[1] == "resnet110-table1-reference-g4dn-4xlarge-spot.yaml"
    launches = [line for line in files["launch.sh"].splitlines() if line.startswith("sky launch")]
    assert [line.split()[5] for line in launches] == names
    with pytest.raises(InvalidInputError, match="one task file per cluster"):
        export(table1, "skypilot")


@pytest.mark.skipif(
    not os.environ.get("DNNPROV_SKYPILOT_PYTHON"),
    reason="set DNNPROV_SKYPILOT_PYTHON to a Python with skypilot installed (too many "
    "dependencies for the test extra) to load the tasks with SkyPilot's own loader",
)
def test_skypilot_loader_accepts_the_tasks(table1: PlanDocument, tmp_path: Path) -> None:
    """SkyPilot's task loader reads every task file (the PS address given) with its type, spot flag and nodes."""
    for name, text in export_files(table1, "skypilot", UNCHECKED).items():
        (tmp_path / name).write_text(text)
    script = (
        "import sys, sky, yaml\nfor f in sys.argv[1:]:\n"
        "    t = sky.Task.from_yaml_config(yaml.safe_load(open(f)), [('DNNPROV_PS_ADDR', '10.0.0.1')])\n"
        "    (r,) = t.resources\n    print(t.name, t.num_nodes, r.instance_type, r.use_spot)\n"
    )
    files = sorted(str(p) for p in tmp_path.glob("*.yaml"))
    out = subprocess.run(
        [os.environ["DNNPROV_SKYPILOT_PYTHON"], "-c", script, *files],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split("\n")
    assert "resnet110-table1-reference-g3-8xlarge-spot 5 g3.8xlarge True" in out
    assert "resnet110-table1-reference-ps 1 m5.xlarge False" in out


def test_kueue_yaml(table1: PlanDocument) -> None:
    """Flavors (most GPUs first, the PS its own), a ClusterQueue covering cpu/memory, a LocalQueue, Service, Jobs."""
    docs = list(yaml.safe_load_all(export(table1, "kueue", ExportOptions(namespace="ml"))))
    assert {d["apiVersion"] for d in docs if d["kind"] not in ("Job", "Service")} == {"kueue.x-k8s.io/v1beta2"}
    assert [d["kind"] for d in docs] == ["ResourceFlavor"] * 4 + ["ClusterQueue", "LocalQueue", "Service"] + ["Job"] * 4
    flavors, queue, local, service, jobs = docs[:4], docs[4], docs[5], docs[6], docs[7:]
    labels = [f["spec"]["nodeLabels"] for f in flavors]
    assert [x["node.kubernetes.io/instance-type"] for x in labels] == [
        "g3.16xlarge",
        "g3.8xlarge",
        "g4dn.4xlarge",
        "m5.xlarge",
    ]
    assert [x["karpenter.sh/capacity-type"] for x in labels] == ["spot"] * 3 + ["on-demand"]
    assert [x["dnnprov.io/role"] for x in labels] == ["worker"] * 3 + ["ps"]
    assert flavors[3]["spec"]["nodeTaints"] == [{"key": "dnnprov.io/role", "value": "ps", "effect": "NoSchedule"}]
    assert all("nodeTaints" not in f["spec"] for f in flavors[:3])
    group = queue["spec"]["resourceGroups"][0]
    assert group["coveredResources"] == ["pods", "cpu", "memory", "nvidia.com/gpu"]
    quotas = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in group["flavors"]}
    # 90 % of 32 vCPUs and 244 GiB per g3.8xlarge pod, 5 pods
    assert quotas["worker-g3-8xlarge-spot"] == {
        "pods": 5,
        "cpu": f"{5 * 28800}m",
        "memory": f"{5 * 224870}Mi",
        "nvidia.com/gpu": 10,
    }
    assert quotas["worker-g3-16xlarge-spot"]["nvidia.com/gpu"] == 8
    assert quotas["ps-m5-xlarge-on-demand"] == {"pods": 1, "cpu": "3600m", "memory": "14745Mi", "nvidia.com/gpu": 0}
    assert local["metadata"] == {"name": queue["metadata"]["name"], "namespace": "ml"}
    assert local["spec"] == {"clusterQueue": queue["metadata"]["name"]}
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"]["dnnprov.io/role"] == "ps"
    assert jobs[0]["metadata"]["labels"]["dnnprov.io/role"] == "ps"
    for job, flavor in zip(jobs, [flavors[3], *flavors[:3]]):
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == queue["metadata"]["name"]
        pod = job["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == flavor["spec"]["nodeLabels"]
        (container,) = pod["containers"]
        assert "replace-me" in container["image"]
        quota = quotas[flavor["metadata"]["name"]]
        assert job["spec"]["parallelism"] == quota["pods"]
        assert container["resources"]["requests"].get("nvidia.com/gpu", 0) * quota["pods"] == quota["nvidia.com/gpu"]
    assert jobs[0]["spec"]["template"]["spec"]["tolerations"][0]["value"] == "ps"
    old = list(yaml.safe_load_all(export(table1, "kueue", ExportOptions(kueue_api=KUEUE_APIS[1]))))
    assert {d["apiVersion"] for d in old[:6]} == {"kueue.x-k8s.io/v1beta1"} and len(old) == 11
    with pytest.raises(InvalidInputError, match="^kueue_api: "):
        export(table1, "kueue", ExportOptions(kueue_api="kueue.x-k8s.io/v2"))


@pytest.mark.parametrize("target", ["skypilot", "kueue"])
def test_crafted_name_adds_no_document_or_key(table1: PlanDocument, target: str) -> None:
    """A name with newlines, '---', '#' and quotes stays one string value: same documents, same keys."""
    crafted = PlanDocument(result={**table1.result, "instance": CRAFTED}, catalog=CATALOG)
    plain = PlanDocument(result=table1.result, catalog=CATALOG)
    options = UNCHECKED

    def documents(doc: PlanDocument) -> list:
        texts = [t for n, t in sorted(export_files(doc, target, options).items()) if n.endswith(".yaml")]
        return [d for t in texts for d in yaml.safe_load_all(t)]

    evil, good = documents(crafted), documents(plain)
    assert len(evil) == len(good) and "Secret" not in [d.get("kind") for d in evil]

    def shape(value):
        return (
            {k: shape(v) for k, v in value.items()}
            if isinstance(value, dict)
            else [shape(v) for v in value]
            if isinstance(value, list)
            else None
        )

    assert [shape(d) for d in evil] == [shape(d) for d in good]
    if target == "skypilot":
        assert {d["envs"]["DNNPROV_PLAN"] for d in evil} == {CRAFTED}
    else:
        assert all(set(d["metadata"]["name"]) <= set("abcdefghijklmnopqrstuvwxyz0123456789.-") for d in evil)


def test_json_export_stamped_with_snapshot(table1: PlanDocument) -> None:
    """The JSON plan names the catalog snapshot it was priced from and what to launch."""
    out = json.loads(export(table1, "json"))
    assert out["catalog"] == {"name": "aws-us-east-1", "region": "us-east-1", "snapshot": "2022-05-31T23:52:09Z"}
    assert out["launch"]["workers"] == {"g4dn.4xlarge": 3, "g3.8xlarge": 5, "g3.16xlarge": 2}
    assert out["cost"] == pytest.approx(5.448374) and "cost_usd" not in out


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
    assert (
        main(
            [
                "export",
                str(plan),
                "--to",
                "kueue",
                "--instance",
                str(instance),
                "--catalog",
                str(catalog),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert len(list(yaml.safe_load_all(out.read_text()))) == 11  # 4 flavors, 2 queues, the PS Service, 4 Jobs
    assert main(["export", str(plan), "--to", "kueue"]) == 2  # no GPU counts without instance or catalog
    assert "needs the GPU count" in capsys.readouterr().err
    assert main(["export", str(plan), "--to", "skypilot"]) == 2
    assert capsys.readouterr().err.startswith("dnnprov: error: --out: the skypilot export is one task file")
    assert main(["export", str(plan), "--to", "skypilot", "--out", str(tmp_path / "sky")]) == 2
    assert capsys.readouterr().err.startswith("dnnprov: error: region: the plan names no region")
    assert (
        main(
            [
                "export",
                str(plan),
                "--to",
                "skypilot",
                "--out",
                str(tmp_path / "sky"),
                "--catalog",
                str(catalog),
                "--no-catalog-check",
            ]
        )
        == 0
    )
    written = capsys.readouterr().out.split()
    assert len(written) == 5 and written[-1].endswith("launch.sh") and os.access(written[-1], os.X_OK)
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


def test_yaml_dumper_round_trip() -> None:
    """dump_yaml writes data PyYAML reads back as the same documents, under a comment header."""
    data = [
        {
            "a": [{"b": 1, "c": ["x", "y: z"]}, []],
            "d": {},
            "e": True,
            "f": None,
            "g": "#not a comment",
            "h.i/j": [[1, 2], {"k": 2.5}],
            "l": "---\nkind: Secret",
        },
        {"m": "é"},
    ]
    text = dump_yaml(data, "two lines\nof comment")
    assert text.startswith("# two lines\n# of comment\n") and list(yaml.safe_load_all(text)) == data


def test_skypilot_ps_task_declares_its_port(table1: PlanDocument) -> None:
    """The PS task opens the port its workers are told (``DNNPROV_PS_PORT``); workers open none (issue 28)."""
    tasks = [
        yaml.safe_load(text)
        for name, text in export_files(table1, "skypilot", UNCHECKED).items()
        if name.endswith(".yaml")
    ]
    ps = [t for t in tasks if t["envs"]["DNNPROV_ROLE"] == "ps"]
    assert len(ps) == 1 and ps[0]["resources"]["ports"] == int(ps[0]["envs"]["DNNPROV_PS_PORT"]) == 2222
    assert all("ports" not in t["resources"] for t in tasks if t["envs"]["DNNPROV_ROLE"] == "worker")


def test_launch_calls_carry_run_tag_and_client_token(table1: PlanDocument) -> None:
    """With a run id every launch call has a ClientToken made of the run and the call (the same again
    for the same run, another for another run or call) and tags its instances ``dnnprov:run``."""
    from dataclasses import replace

    run = replace(AMI, run_id="20260121T101500Z-3f9c2a1b")
    fleet = replace(TEMPLATE, run_id=run.run_id)
    for build, options in ((run_instances_calls, run), (ec2_fleet_calls, fleet)):
        calls = build(table1, options)
        tokens = [c.params["ClientToken"] for c in calls]
        for call in calls:
            check_against_model(call)
            assert {"Key": "dnnprov:run", "Value": run.run_id} in call.params["TagSpecifications"][0]["Tags"]
        assert len(set(tokens)) == len(calls) and all(len(t) <= 64 and t.isascii() for t in tokens)
        assert [c.params["ClientToken"] for c in build(table1, options)] == tokens
        other = [c.params["ClientToken"] for c in build(table1, replace(options, run_id="another-run"))]
        assert not set(other) & set(tokens)
        assert all("ClientToken" not in c.params for c in build(table1, replace(options, run_id=None)))
    with pytest.raises(InvalidInputError, match="^run_id: 'my run' is not a valid name here"):
        LaunchOptions(image_id="ami-11111111", run_id="my run")
