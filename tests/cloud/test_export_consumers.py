"""Exports as their consumers take them: names by each consumer's own rule, SkyPilot's catalog, launch.sh.

The oracles are the consumers' rules written out here independently of dnnprov's
sanitizers: SkyPilot's cluster regex (sky/clouds/cloud.py) and task-name regex
(sky/task.py), Kubernetes' DNS-1123/1035 and label-value rules (k8s.io/apimachinery
validation), botocore's own model patterns for Lambda (read from botocore's data here, with
the ``regex`` module for its ``\\p{..}`` classes).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import botocore.session
import pytest
from botocore.validate import validate_parameters
from hypothesis import HealthCheck, given, settings, strategies as st

import dnnprov
from dnnprov.cli import main
from dnnprov.cloud.export import (
    ExportOptions,
    FunctionCode,
    LaunchOptions,
    PlanDocument,
    SkyPilotOptions,
    ec2_fleet_calls,
    export_files,
    plan_document,
    run_instances_calls,
)
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import Catalog, CatalogEntry
from dnnprov.io.instances import problem_from_dict, read_instance

yaml = pytest.importorskip("yaml")
regex = pytest.importorskip("regex", reason="the AWS model's \\p{L} patterns need the regex module")

FIXTURES = Path(__file__).parent / "fixtures"
SKY_CATALOG = FIXTURES / "skypilot-aws-vms-extract.csv"
SKY = SkyPilotOptions(catalog=SKY_CATALOG)
REPRO = Path(__file__).resolve().parents[2].parent / "shared" / "repro" / "turn3" / "exports"
# The consumers' rules, written from their sources (not from dnnprov's names module)
SKY_CLUSTER = r"[a-z]([-a-z0-9]*[a-z0-9])?"  # sky/clouds/cloud.py check_cluster_name_is_valid
SKY_TASK = r"[a-zA-Z0-9]+(?:[._-]{1,2}[a-zA-Z0-9]+)*"  # sky/task.py _VALID_NAME_REGEX
K8S_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"  # IsDNS1123Label, at most 63
K8S_1035 = r"[a-z]([-a-z0-9]*[a-z0-9])?"  # IsDNS1035Label (Service), at most 63
K8S_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"  # at most 253
K8S_VALUE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"  # IsValidLabelValue, at most 63
CATALOG = Catalog(
    name="aws-us-east-1",
    region="us-east-1",
    snapshot="2026-11-01T00:00:00Z",
    instance_types=(
        CatalogEntry(name="g5.2xlarge", gpus=1, vcpus=8, memory_gb=32.0),
        CatalogEntry(name="g6.xlarge", gpus=1, vcpus=4, memory_gb=16.0),
        CatalogEntry(name="g5.48xlarge", gpus=8, vcpus=192, memory_gb=768.0),
        CatalogEntry(name="g6e.12xlarge", gpus=4, vcpus=48, memory_gb=384.0),
        CatalogEntry(name="m6i.12xlarge", gpus=0, vcpus=48, memory_gb=192.0),
    ),
)
#: Table I's types renamed to types SkyPilot's catalog has (same GPUs per node), PS m6i.12xlarge
RENAME = {
    "p3.2xlarge": "g5.2xlarge",
    "g4dn.4xlarge": "g6.xlarge",
    "g3.8xlarge": "g6e.12xlarge",
    "g3.16xlarge": "g5.48xlarge",
}


def launchable(name: str = "resnet110", markets=("spot", "on-demand"), types=RENAME) -> dnnprov.SpotProblem:
    """spotDNN Table I with its types renamed to types of SkyPilot's catalog (p2.8xlarge dropped)."""
    d = read_instance("embedded:spot/paper-table1.json").to_dict()
    d["instance_types"] = {types[k]: {**v, "on_demand_quota": 3} for k, v in d["instance_types"].items() if k in types}
    d["name"], d["platform"]["ps_type"] = name, "m6i.12xlarge"
    d["constraints"]["markets"] = list(markets)
    return problem_from_dict(d)


@pytest.fixture(scope="module")
def sky_doc() -> PlanDocument:
    problem = launchable()
    result = dnnprov.solve(problem, "milp")
    assert result.status is dnnprov.Status.OPTIMAL
    return plan_document(result, problem, CATALOG)


def full(pattern: str, text: str, limit: int) -> bool:
    return len(text) <= limit and regex.fullmatch(pattern, text) is not None


def test_table1_g3_types_are_refused_with_the_nearest() -> None:
    """spotDNN Table I's plan (5 x g3.8xlarge + 3 x g3.16xlarge): refused naming g3, nearest types, no swap."""
    problem = read_instance("embedded:spot/paper-table1.json")
    result = dnnprov.solve(problem, "milp")
    assert {k for k, v in result.plan.counts.items() if v} >= {"g3.8xlarge"}
    catalog = Catalog(
        name="c",
        region="us-east-1",
        snapshot="2022-05-31T23:52:09Z",
        instance_types=(
            CatalogEntry(name="g3.8xlarge", gpus=2, vcpus=32, memory_gb=244.0),
            CatalogEntry(name="g3.16xlarge", gpus=4, vcpus=64, memory_gb=488.0),
        ),
    )
    doc = plan_document(result, problem, catalog)
    doc = PlanDocument(
        result={**doc.result, "plan": {**doc.result["plan"], "counts": {"g3.16xlarge": 3, "g3.8xlarge": 5}}},
        problem=None,
        catalog=catalog,
    )
    with pytest.raises(InvalidInputError) as info:
        export_files(doc, "skypilot", ExportOptions(skypilot=SKY))
    text = str(info.value)
    assert info.value.field == "result.plan.counts.g3.16xlarge" and "cannot launch g3.16xlarge in us-east-1" in text
    assert (
        f"its catalog {SKY_CATALOG} has no row of it in any region" in text
        and "re-solve with the quota of g3.16xlarge set to 0" in text
    )
    assert "Nearest types it has there: g6e.12xlarge (4 x L40S, 48 vCPUs)" in text


def test_skypilot_region_pinned_ps_first_and_autostop(sky_doc: PlanDocument) -> None:
    """Every task names the plan's region; the PS task comes first; workers need the PS address."""
    files = export_files(sky_doc, "skypilot", ExportOptions(skypilot=SKY))
    tasks = {n: yaml.safe_load(t) for n, t in files.items() if n.endswith(".yaml")}
    assert all(t["resources"]["infra"] == "aws/us-east-1" for t in tasks.values())
    assert all(t["resources"]["autostop"] == {"idle_minutes": 10, "down": True} for t in tasks.values())
    first = next(iter(tasks.values()))
    assert first["envs"]["DNNPROV_ROLE"] == "ps" and first["resources"]["instance_type"] == "m6i.12xlarge"
    workers = {
        (t["resources"]["instance_type"], t["resources"]["use_spot"]): t["num_nodes"]
        for t in tasks.values()
        if t["envs"]["DNNPROV_ROLE"] == "worker"
    }
    expected = {(label.split(":")[0], not label.endswith(":on-demand")): n for label, n in sky_doc.counts().items()}
    assert workers == expected
    assert all(t["envs"]["DNNPROV_PS_ADDR"] is None for t in tasks.values() if t["envs"]["DNNPROV_ROLE"] == "worker")
    assert all(t["setup"] and t["run"] for t in tasks.values())
    launches = [line for line in files["launch.sh"].splitlines() if line.startswith("sky ")]
    assert launches[0].startswith("sky launch -y -c") and "-ps " in launches[0]
    assert all('--env DNNPROV_PS_ADDR="$PS_ADDR"' in line for line in launches[1:])


def test_skypilot_without_region_is_refused(sky_doc: PlanDocument) -> None:
    """A plan without a catalog region: refused (SkyPilot would split PS and workers across regions)."""
    bare = PlanDocument(result=sky_doc.result, problem=sky_doc.problem)
    with pytest.raises(InvalidInputError, match="^region: "):
        export_files(bare, "skypilot", ExportOptions(skypilot=SKY))
    files = export_files(
        bare, "skypilot", ExportOptions(skypilot=SkyPilotOptions(catalog=SKY_CATALOG, region="us-east-1"))
    )
    assert all(
        yaml.safe_load(t)["resources"]["infra"] == "aws/us-east-1" for n, t in files.items() if n.endswith(".yaml")
    )
    with pytest.raises(
        InvalidInputError, match=r"cannot launch \S+ in us-west-2: its catalog \S+ offers it in us-east-1 only"
    ):
        export_files(bare, "skypilot", ExportOptions(skypilot=SkyPilotOptions(catalog=SKY_CATALOG, region="us-west-2")))


def test_bad_region_and_catalog_are_one_error(
    sky_doc: PlanDocument, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """--region that is no AWS region, a catalog row with a field over csv's limit or an infinite count: exit 2."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(PlanDocument(result=sky_doc.result, problem=sky_doc.problem).to_dict()))
    long_field = tmp_path / "long.csv"
    long_field.write_text("InstanceType,Region\n" + "g" * 200_000 + ",us-east-1\n")
    infinite = tmp_path / "inf.csv"
    infinite.write_text("InstanceType,AcceleratorCount,Region\ng5.2xlarge,inf,us-east-1\n")
    for flags, field in (
        (["--region", "us-east-1; rm -rf /"], "region"),
        (["--region", "us-east-١"], "region"),
        (["--region", "us-east-1", "--skypilot-catalog", str(long_field)], "skypilot_catalog"),
        (["--region", "us-east-1", "--skypilot-catalog", str(infinite)], "skypilot_catalog"),
    ):
        out = tmp_path / "sky"
        assert main(["export", str(plan), "--to", "skypilot", "--out", str(out), *flags]) == 2, flags
        assert capsys.readouterr().err.startswith(f"dnnprov: error: {field}: "), flags
        assert not out.exists()


def test_managed_spot_workers_run_as_jobs(sky_doc: PlanDocument) -> None:
    """--managed-spot: spot workers through `sky jobs launch` (recovered after preemption), cancelled on failure."""
    files = export_files(
        sky_doc, "skypilot", ExportOptions(skypilot=SkyPilotOptions(catalog=SKY_CATALOG, managed_spot=True))
    )
    script = files["launch.sh"]
    spot = [n for n, t in files.items() if n.endswith(".yaml") and yaml.safe_load(t)["resources"]["use_spot"]]
    assert spot and all(f"sky jobs launch -y -n {n.removesuffix('.yaml')} {n}" in script for n in spot)
    assert "sky jobs cancel -y -n" in script


def _fake_sky(tmp_path: Path, fail_on: str) -> Path:
    """A `sky` stand-in on PATH that logs its arguments and fails when launching ``fail_on``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sky = bin_dir / "sky"
    sky.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{tmp_path}/sky.log"\n'
        'case "$*" in *status*) echo 10.0.0.7;; esac\n'
        f'case "$*" in *"launch -y -c {fail_on} "*) exit 1;; esac\nexit 0\n'
    )
    sky.chmod(0o755)
    return bin_dir


def test_launch_script_tears_down_on_failure(sky_doc: PlanDocument, tmp_path: Path) -> None:
    """launch.sh: the PS first, its address to the workers; a failed launch downs every launched cluster."""
    files = export_files(sky_doc, "skypilot", ExportOptions(skypilot=SKY))
    out = tmp_path / "export"
    out.mkdir()
    for name, text in files.items():
        (out / name).write_text(text)
    clusters = [n.removesuffix(".yaml") for n in files if n.endswith(".yaml")]
    failing = clusters[-1]
    env = {"PATH": f"{_fake_sky(tmp_path, failing)}:/usr/bin:/bin"}
    done = subprocess.run(["sh", str(out / "launch.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    log = (tmp_path / "sky.log").read_text().splitlines()
    assert log[0].startswith(f"launch -y -c {clusters[0]} ") and log[1] == f"status --ip {clusters[0]}"
    assert all("--env DNNPROV_PS_ADDR=10.0.0.7" in line for line in log[2:] if line.startswith("launch"))
    assert sorted(line.split()[-1] for line in log if line.startswith("down -y")) == sorted(clusters)
    if shutil.which("shellcheck"):
        lint = subprocess.run(["shellcheck", "-s", "sh", str(out / "launch.sh")], capture_output=True, text=True)
        assert lint.returncode == 0, lint.stdout


names_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=90)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(instance=names_text, worker_type=names_text)
def test_every_name_of_every_export_is_valid(sky_doc: PlanDocument, instance: str, worker_type: str) -> None:
    """Random unicode instance and type names: each export's names pass the consumer's rule, or one clear refusal."""
    result = {
        **sky_doc.result,
        "instance": instance,
        "details": {},
        "plan": {**sky_doc.result["plan"], "counts": {worker_type: 2, "g5.2xlarge": 1}},
    }
    catalog = Catalog(
        name="c",
        region="us-east-1",
        snapshot="2026-11-01T00:00:00Z",
        instance_types=(*CATALOG.instance_types, CatalogEntry(name=worker_type, gpus=2, vcpus=8, memory_gb=32.0)),
    )
    doc = PlanDocument(result=result, catalog=catalog)
    if "@" in worker_type and not full(r"[^@]*@[a-z]{2}(-[a-z]+)+-[0-9]+", worker_type, 200):
        with pytest.raises(InvalidInputError, match=f"^instance_types.{re.escape(worker_type)}: "):
            _skypilot_names(doc)  # TYPE@REGION of no AWS region: one error naming the type
        return
    for names in (_skypilot_names(doc), _kueue_names(doc, worker_type)):
        for kind, name, pattern, limit in names:
            assert full(pattern, name, limit), (kind, name)
    ec2 = ExportOptions(launch=LaunchOptions(image_id="ami-11111111"))
    if not full(r"[a-z][a-z0-9]*(-[a-z0-9]+)*\.[a-z0-9]+(-[a-z0-9]+)*", worker_type.split("@")[0], 200):
        with pytest.raises(InvalidInputError, match=f"^result.plan.counts.{re.escape(worker_type)}: "):
            export_files(doc, "ec2-run-instances", ec2)  # no EC2 instance type: EC2 would refuse the call
        return
    calls = json.loads(export_files(doc, "ec2-run-instances", ec2)["ec2-run-instances.json"])["calls"]
    for call in calls:
        for tag in call["params"]["TagSpecifications"][0]["Tags"]:
            assert len(tag["Value"]) <= 256


def _skypilot_names(doc: PlanDocument) -> list[tuple[str, str, str, int]]:
    files = export_files(doc, "skypilot", ExportOptions(skypilot=SkyPilotOptions(check_catalog=False)))
    out = []
    for name, text in files.items():
        if name.endswith(".yaml"):
            task = yaml.safe_load(text)
            out += [("cluster", task["name"], SKY_CLUSTER, 63), ("task", task["name"], SKY_TASK, 63)]
            assert name == f"{task['name']}.yaml"
    return out


def _kueue_names(doc: PlanDocument, worker_type: str) -> list[tuple[str, str, str, int]]:
    try:
        text = export_files(doc, "kueue")["kueue.yaml"]
    except InvalidInputError as exc:  # only a type no node can carry as a label value
        assert not full(K8S_VALUE, worker_type, 63) and exc.field.startswith("result.plan.counts.")
        return []
    out = []
    for d in yaml.safe_load_all(text):
        meta = d["metadata"]
        out.append(("name", meta["name"], K8S_1035, 63))
        if d["kind"] == "Job":  # pod hostnames <job>-<index> stay DNS labels for up to 999,999 pods
            out.append(("job", f"{meta['name']}-{d['spec']['completions'] - 1}", K8S_1035, 63))
        if "namespace" in meta:
            out.append(("namespace", meta["namespace"], K8S_LABEL, 63))
        for labels in (
            meta.get("labels", {}),
            d.get("spec", {}).get("nodeLabels", {}),
            d.get("spec", {}).get("template", {}).get("metadata", {}).get("labels", {}),
            d.get("spec", {}).get("template", {}).get("spec", {}).get("nodeSelector", {}),
            d.get("spec", {}).get("selector", {}) if d["kind"] == "Service" else {},
        ):
            out += [("label value", v, K8S_VALUE, 63) for v in labels.values()]
        for f in d.get("spec", {}).get("resourceGroups", [{}])[0].get("flavors", []):
            out.append(("flavor", f["name"], K8S_SUBDOMAIN, 253))
    return out


@settings(max_examples=60, deadline=None)
@given(instance=names_text)
def test_lambda_names_match_the_aws_model(instance: str) -> None:
    """FunctionName and tags from any instance name match botocore's own patterns and lengths."""
    model = botocore.session.get_session().get_service_model("lambda")
    create = model.operation_model("CreateFunction").input_shape
    name_rule = create.members["FunctionName"].metadata
    tag_rule = create.members["Tags"].value.metadata
    doc = PlanDocument(
        result={
            "status": "optimal",
            "kind": "serverless",
            "instance": instance,
            "plan": {"functions": 8, "memory_mb": 2560, "ps": 1},
        }
    )
    code = FunctionCode(role="arn:aws:iam::123456789012:role/r", image_uri="1.dkr.ecr.us-east-1.amazonaws.com/t:1")
    calls = json.loads(export_files(doc, "lambda", ExportOptions(code=code))["lambda.json"])["calls"]
    for call in calls:
        name = call["params"]["FunctionName"]
        assert len(name) <= 64 and regex.fullmatch(name_rule["pattern"], name)  # 64: the model's doc for bare names
    for value in calls[0]["params"]["Tags"].values():
        assert len(value) <= tag_rule["max"] and regex.fullmatch(tag_rule["pattern"], value)


@pytest.mark.skipif(not REPRO.is_dir(), reason=f"the reproductions of issue 21 are not at {REPRO}")
@pytest.mark.parametrize(
    "case", ["digit-name", "digit2", "odd-name", "inj-name", "inj-type", "dup-flavor", "mixed", "multips", "multips2"]
)
def test_reproductions_export_valid_names(case: str) -> None:
    """The issue's instances: every export's names valid, or (a '/' in a type) one refusal naming the type."""
    problem = read_instance(REPRO / f"{case}.json")
    result = dnnprov.solve(problem, "milp")
    if result.plan is None:
        pytest.skip(f"{case} has no plan ({result.status.value})")
    doc = plan_document(
        result, problem, Catalog(name="c", region="us-east-1", snapshot="2022-05-31T23:52:09Z", instance_types=())
    )
    for kind, name, pattern, limit in _skypilot_names(doc):
        assert full(pattern, name, limit), (kind, name)
    for kind, name, pattern, limit in (
        _kueue_names(doc, next(iter(doc.counts())).split(":")[0])
        if all(full(K8S_VALUE, label.split(":")[0], 63) for label in doc.counts())
        else []
    ):
        assert full(pattern, name, limit), (kind, name)
    if case == "dup-flavor":
        flavors = [
            d["metadata"]["name"]
            for d in yaml.safe_load_all(export_files(doc, "kueue")["kueue.yaml"])
            if d["kind"] == "ResourceFlavor"
        ]
        assert len(flavors) == len(set(flavors)) == len(doc.counts()) + 1


def test_chosen_k8s_names_are_refused_not_rewritten(
    sky_doc: PlanDocument, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """--namespace 'My Team/NS ü' and 'team.a', --queue-name 'Q!': one error each, nothing written."""
    for options, field in (
        (ExportOptions(namespace="My Team/NS ü"), "namespace"),
        (ExportOptions(namespace="team.a"), "namespace"),
        (ExportOptions(queue_name="Q!"), "queue_name"),
    ):
        with pytest.raises(InvalidInputError, match=f"^{field}: "):
            export_files(sky_doc, "kueue", options)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(sky_doc.to_dict()))
    out = tmp_path / "k.yaml"
    assert main(["export", str(plan), "--to", "kueue", "--namespace", "team.a", "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("dnnprov: error: namespace: 'team.a' is not a valid name")
    assert not out.exists()
    with pytest.raises(InvalidInputError, match="^function_name: "):
        export_files(
            PlanDocument(
                result={
                    "status": "optimal",
                    "kind": "serverless",
                    "instance": "x",
                    "plan": {"functions": 2, "memory_mb": 1024},
                }
            ),
            "lambda",
            ExportOptions(function_name="ResNet50 on CIFAR-10"),
        )


def test_type_with_slash_writes_nothing(sky_doc: PlanDocument, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A '/' in a type name: the skypilot export is refused whole (not in the catalog); no file, no launch.sh."""
    label = next(iter(sky_doc.counts()))
    counts = {f"evil/{label}" if i == 0 else k: v for i, (k, v) in enumerate(sky_doc.counts().items())}
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({**sky_doc.result, "details": {}, "plan": {**sky_doc.result["plan"], "counts": counts}}))
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps(CATALOG.to_dict()))
    out = tmp_path / "sky"
    assert (
        main(
            [
                "export",
                str(plan),
                "--to",
                "skypilot",
                "--out",
                str(out),
                "--catalog",
                str(catalog),
                "--skypilot-catalog",
                str(SKY_CATALOG),
            ]
        )
        == 2
    )
    assert "SkyPilot cannot launch evil/" in capsys.readouterr().err and not out.exists()


@pytest.fixture(scope="module")
def pools_doc() -> PlanDocument:
    """Spot pools (issue 18): g6.xlarge in two us-east-1 zones and one of us-west-2; g6e.12xlarge in two small ones."""
    d = launchable(markets=("spot",)).to_dict()
    d["instance_types"]["g6.xlarge"]["zones"] = [
        {"zone": "us-east-1b"},
        {"zone": "us-east-1d", "spot_price_per_h": 9.0},
        {"zone": "us-west-2a"},
    ]
    d["instance_types"]["g6e.12xlarge"]["zones"] = [
        {"zone": "us-east-1a", "capacity": 2},
        {"zone": "us-east-1c", "capacity": 4},
    ]
    problem = problem_from_dict(d)
    result = dnnprov.solve(problem, "milp")
    assert result.plan.counts.get("g6e.12xlarge", 0) > 4 and result.plan.counts.get("g6.xlarge", 0) > 0
    return plan_document(result, problem, CATALOG)


def _zone(resources: dict) -> list[str]:
    candidates = resources.get("any_of", [resources])
    return [c["infra"] for c in candidates]


def test_pools_pin_skypilot_zones(pools_doc: PlanDocument) -> None:
    """A type whose pools hold it: any_of over them (in-region only); else one cluster per pool, capacities kept."""
    files = export_files(pools_doc, "skypilot", ExportOptions(skypilot=SKY))
    tasks = [yaml.safe_load(t) for n, t in files.items() if n.endswith(".yaml")]
    by_type: dict[str, list[tuple[list[str], int]]] = {}
    for t in tasks:
        by_type.setdefault(t["resources"]["instance_type"], []).append((_zone(t["resources"]), t["num_nodes"]))
    counts = pools_doc.counts()
    assert by_type["g6.xlarge"] == [(["aws/us-east-1/us-east-1b", "aws/us-east-1/us-east-1d"], counts["g6.xlarge"])]
    g6e = {tuple(z): n for z, n in by_type["g6e.12xlarge"]}
    assert sum(g6e.values()) == counts["g6e.12xlarge"]
    assert g6e[("aws/us-east-1/us-east-1a",)] <= 2 and g6e[("aws/us-east-1/us-east-1c",)] <= 4
    assert by_type["g5.48xlarge"] == [(["aws/us-east-1"], counts["g5.48xlarge"])]
    assert len({t["name"] for t in tasks}) == len(tasks)


def test_pools_place_ec2_calls(pools_doc: PlanDocument) -> None:
    """RunInstances per pool (Placement), cheapest pool that holds the type first; fleet overrides per AZ."""
    model = botocore.session.get_session().get_service_model("ec2")
    calls = run_instances_calls(pools_doc, LaunchOptions(image_id="ami-11111111"))
    fleet = ec2_fleet_calls(pools_doc, LaunchOptions(launch_template="dnnprov-workers"))
    for call in calls + fleet:
        validate_parameters(call.params, model.operation_model(call.operation).input_shape)
    placed = [
        (c.params["InstanceType"], c.params["MinCount"], c.params.get("Placement", {}).get("AvailabilityZone"))
        for c in calls
    ]
    counts = pools_doc.counts()
    assert ("g6.xlarge", counts["g6.xlarge"], "us-east-1b") in placed  # 1d is dearer (9 $/h)
    g6e = {z: n for t, n, z in placed if t == "g6e.12xlarge"}
    assert sum(g6e.values()) == counts["g6e.12xlarge"] and set(g6e) == {"us-east-1a", "us-east-1c"}
    overrides = fleet[0].params["LaunchTemplateConfigs"][0]["Overrides"]
    assert {(o["InstanceType"], o.get("AvailabilityZone")) for o in overrides} == {
        ("g6.xlarge", "us-east-1b"),
        ("g6.xlarge", "us-east-1d"),
        ("g6e.12xlarge", "us-east-1a"),
        ("g6e.12xlarge", "us-east-1c"),
        ("g5.48xlarge", None),
    }
    with_subnet = run_instances_calls(pools_doc, LaunchOptions(image_id="ami-11111111", subnet_id="subnet-11111111"))
    assert all("Placement" not in c.params for c in with_subnet)  # a subnet fixes its zone itself


def test_pools_across_regions_need_a_region(pools_doc: PlanDocument) -> None:
    """Without a catalog region, pools of two regions are refused; one region of pools is the plan's region."""
    bare = PlanDocument(result=pools_doc.result, problem=pools_doc.problem)
    with pytest.raises(InvalidInputError, match="^region: the plan's spot pools lie in 2 regions.* or pass --region$"):
        export_files(bare, "skypilot", ExportOptions(skypilot=SKY))
    for target in ("kueue", "ec2-run-instances"):  # exports without a region option: the catalog gives it
        with pytest.raises(InvalidInputError, match=r"^region: the plan's spot pools lie in 2 regions.*\(--catalog\)$"):
            export_files(bare, target, ExportOptions(launch=LaunchOptions(image_id="ami-11111111")))
    west = PlanDocument(
        result=pools_doc.result,
        problem=pools_doc.problem,
        catalog=Catalog(
            name="w", region="us-west-2", snapshot="2026-11-01T00:00:00Z", instance_types=CATALOG.instance_types
        ),
    )
    with pytest.raises(InvalidInputError, match="none of the pools of g6e.12xlarge"):
        export_files(west, "ec2-run-instances", ExportOptions(launch=LaunchOptions(image_id="ami-11111111")))


def test_takeover_launch_script_takes_the_running_ps(sky_doc: PlanDocument) -> None:
    """A takeover launches no PS: launch.sh needs DNNPROV_PS_ADDR of the running one, and stays shellcheck-clean."""
    first, n = next(iter(sky_doc.counts().items()))
    takeover = PlanDocument(result={**sky_doc.result, "details": {"new_instances": {first: n}}}, catalog=CATALOG)
    files = export_files(takeover, "skypilot", ExportOptions(skypilot=SKY))
    assert [name for name in files if name.endswith(".yaml")] == [f"{sky_doc.name}-{first.replace('.', '-')}-spot.yaml"]
    script = files["launch.sh"]
    assert 'PS_ADDR="${DNNPROV_PS_ADDR:?' in script and "sky status --ip" not in script
    if shutil.which("shellcheck"):
        lint = subprocess.run(["shellcheck", "-s", "sh", "-"], input=script, capture_output=True, text=True)
        assert lint.returncode == 0, lint.stdout


def _kueue(doc: PlanDocument, **options) -> list[dict]:
    return list(yaml.safe_load_all(export_files(doc, "kueue", ExportOptions(**options))["kueue.yaml"]))


def test_pools_give_kueue_a_flavor_per_zone(pools_doc: PlanDocument) -> None:
    """A type with pools: a flavor per (type, zone) it is placed on, zone-labelled, within each pool's capacity;
    the ClusterQueue lists flavors most GPUs first and a type's pools cheapest first; Jobs pinned to type and zone."""
    documents = _kueue(pools_doc)
    flavors = [d for d in documents if d["kind"] == "ResourceFlavor"]
    (queue,) = [d for d in documents if d["kind"] == "ClusterQueue"]
    jobs = [d for d in documents if d["kind"] == "Job"]
    zone_of = {"us-east-1a": 2, "us-east-1c": 4}  # g6e.12xlarge's pools and capacities (pools_doc)
    placed: dict[tuple[str, str | None], int] = {}
    for flavor, listed in zip(flavors, queue["spec"]["resourceGroups"][0]["flavors"]):
        assert listed["name"] == flavor["metadata"]["name"]  # the queue lists the flavors in their order
        labels = flavor["spec"]["nodeLabels"]
        pods = next(r["nominalQuota"] for r in listed["resources"] if r["name"] == "pods")
        if labels["dnnprov.io/role"] == "worker":
            placed[(labels["node.kubernetes.io/instance-type"], labels.get("topology.kubernetes.io/zone"))] = pods
    counts = pools_doc.counts()
    g6e = {zone: n for (t, zone), n in placed.items() if t == "g6e.12xlarge"}
    # 2 in the pool of capacity 2 (listed first: same price, us-east-1a < us-east-1c), the rest in the other
    assert list(g6e) == ["us-east-1a", "us-east-1c"] and g6e == {
        "us-east-1a": 2,
        "us-east-1c": counts["g6e.12xlarge"] - 2,
    }
    assert all(n <= zone_of[z] for z, n in g6e.items())
    assert placed[("g6.xlarge", "us-east-1b")] == counts["g6.xlarge"]  # us-east-1d is dearer, us-west-2a elsewhere
    assert placed[("g5.48xlarge", None)] == counts["g5.48xlarge"]  # no pools: placed by region
    gpus = {"g5.48xlarge": 8, "g6e.12xlarge": 4, "g5.2xlarge": 1, "g6.xlarge": 1}
    order = [t for t, _ in placed]
    assert [gpus[t] for t in order] == sorted((gpus[t] for t in order), reverse=True)
    assert (
        flavors[-1]["spec"]["nodeLabels"]["dnnprov.io/role"] == "ps"
        and "topology.kubernetes.io/zone" not in flavors[-1]["spec"]["nodeLabels"]
    )
    by_flavor = {
        f["spec"]["nodeLabels"]["topology.kubernetes.io/zone"]: f
        for f in flavors
        if "topology.kubernetes.io/zone" in f["spec"]["nodeLabels"]
    }
    pinned = {job["spec"]["template"]["spec"]["nodeSelector"].get("topology.kubernetes.io/zone"): job for job in jobs}
    for zone, flavor in by_flavor.items():
        assert pinned[zone]["spec"]["template"]["spec"]["nodeSelector"] == flavor["spec"]["nodeLabels"]
    assert sum(j["spec"]["parallelism"] for j in jobs if j["metadata"]["labels"]["dnnprov.io/role"] == "worker") == sum(
        counts.values()
    )
    *workers, _ = run_instances_calls(pools_doc, LaunchOptions(image_id="ami-11111111"))  # the PS's call is last
    assert placed == {
        (c.params["InstanceType"], c.params.get("Placement", {}).get("AvailabilityZone")): c.params["MinCount"]
        for c in workers
    }  # the same placement as the EC2 export's


def test_kueue_refuses_a_zone_no_node_can_carry() -> None:
    """A zone name of 64 characters (the instance format's limit) is no label value: one error naming the pools."""
    d = launchable(markets=("spot",)).to_dict()
    zone = "us-east-1-" + "a" * 51 + "-1a"
    assert len(zone) == 64
    d["instance_types"]["g6.xlarge"]["zones"] = [{"zone": zone}]
    d["instance_types"] = {"g6.xlarge": d["instance_types"]["g6.xlarge"]}
    problem = problem_from_dict(d)
    doc = PlanDocument(
        result={"status": "feasible", "kind": "spot", "instance": "z", "plan": {"counts": {"g6.xlarge": 2}, "ps": 1}},
        problem=problem,
        catalog=CATALOG,
    )
    with pytest.raises(InvalidInputError, match="^instance_types.g6.xlarge.zones: .* cannot be a Kubernetes label"):
        _kueue(doc)


zone_text = st.from_regex(r"us-east-1-[a-z0-9]{1,48}-1[a-z]", fullmatch=True)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    instance=names_text,
    zones=st.lists(zone_text, min_size=1, max_size=4, unique=True),
    capacity=st.integers(min_value=1, max_value=4),
)
def test_every_kueue_name_of_a_pool_plan_is_valid(
    pools_doc: PlanDocument, instance: str, zones: list[str], capacity: int
) -> None:
    """Random instance names and long zone names (the instance format's): every name and label by Kubernetes'
    rules, flavors distinct, each zone flavor within its pool; or, past the pools' capacity, one refusal."""
    d = pools_doc.problem.to_dict()
    d["instance_types"]["g6e.12xlarge"]["zones"] = [{"zone": z, "capacity": capacity} for z in zones]
    problem = problem_from_dict(d)
    counts = pools_doc.counts()
    doc = PlanDocument(result={**pools_doc.result, "instance": instance}, problem=problem, catalog=CATALOG)
    if counts["g6e.12xlarge"] > capacity * len(zones):
        with pytest.raises(InvalidInputError, match="^result.plan.counts.g6e.12xlarge: .* exceed the capacity"):
            _kueue(doc)
        return
    for kind, name, pattern, limit in _kueue_names(doc, "g6e.12xlarge"):
        assert full(pattern, name, limit), (kind, name)
    flavors = [f for f in _kueue(doc) if f["kind"] == "ResourceFlavor"]
    assert len({f["metadata"]["name"] for f in flavors}) == len(flavors)
    (queue,) = [d for d in _kueue(doc) if d["kind"] == "ClusterQueue"]
    for listed in queue["spec"]["resourceGroups"][0]["flavors"]:
        flavor = next(f for f in flavors if f["metadata"]["name"] == listed["name"])
        if flavor["spec"]["nodeLabels"].get("topology.kubernetes.io/zone") in zones:
            assert 1 <= {r["name"]: r["nominalQuota"] for r in listed["resources"]}["pods"] <= capacity
