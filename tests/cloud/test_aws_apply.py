"""From real data to EC2: shared-data catalog -> milp plan -> EC2 export -> apply on a moto server."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import boto3
import jsonschema
import pytest

import dnnprov
from dnnprov.cli import main
from dnnprov.cloud.export import LaunchOptions, load_plan, plan_document, run_instances_calls
from dnnprov.io.catalogs.catalog import SpotWorkloadProfile, build_spot_problem, embedded_path, load_catalog
from dnnprov.io.catalogs.importing import import_shared_data

pytest_plugins = ["conftest_aws"]

AMI = "ami-12c6146b"
# spec/spot.md section 6: ResNet-110 speeds (samples/s) and per-GPU batches, reference model
PROFILE = {
    "format": "dnnprov/spot-workload",
    "version": 1,
    "model": "reference",
    "workload": {
        "name": "resnet110-cifar100",
        "param_size_mb": 11.5,
        "bandwidth_req_mb_s": 142.0,
        "alpha_1": 0.8,
        "beta_1": -1.92,
        "gamma_1": 876.5,
        "gamma_2": -0.2,
        "gamma_3": 2507.6,
        "gamma_4": 0.0,
        "gamma_5": 0.5,
        "loss_variant": "no-cc",
    },
    "per_type": {
        "p3.2xlarge": {"batch_per_gpu": 1024, "speed_samples_per_s": 1885.0},
        "g3.8xlarge": {"batch_per_gpu": 512, "speed_samples_per_s": 1018.0},
        "g3.16xlarge": {"batch_per_gpu": 512, "speed_samples_per_s": 1995.0},
        "p2.8xlarge": {"batch_per_gpu": 1024, "speed_samples_per_s": 2115.0},
    },
}


def ec2(url: str):
    """A plain boto3 EC2 client on the moto server."""
    return boto3.client("ec2", region_name="us-east-1", endpoint_url=url)


@pytest.fixture
def real_plan(shared_data: Path, tmp_path: Path) -> Path:
    """Plan file: the shared-data catalog (us-east-1, 2022-05-31 prices) solved by milp."""
    catalog_path = tmp_path / "catalog.json"
    assert (
        main(["catalog", "import", "--snapshot", "2022", "--shared-data", str(shared_data), "--out", str(catalog_path)])
        == 0
    )
    catalog = load_catalog(catalog_path)
    assert catalog.entry("p3.2xlarge").spot_price_per_h == 0.918
    problem = build_spot_problem(
        catalog,
        SpotWorkloadProfile.from_dict(PROFILE),
        dnnprov.SpotSLO(loss=0.8, time_s=2400),
        quotas={name: 5 for name in PROFILE["per_type"]},
        name="resnet110-us-east-1-2022",
    )
    result = dnnprov.solve(problem, "milp")
    assert result.status is dnnprov.Status.OPTIMAL
    oracle = dnnprov.solve(problem, "enumerate")
    assert result.cost == pytest.approx(oracle.cost)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_document(result, problem, catalog).to_dict()))
    return path


def test_real_catalog_to_dry_run_apply(
    real_plan: Path, moto_url: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Catalog from ../shared/data feeds milp; its EC2 request validates and dry-runs on the server."""
    calls_path = tmp_path / "calls.json"
    assert (
        main(["export", str(real_plan), "--to", "ec2-run-instances", "--image-id", AMI, "--out", str(calls_path)]) == 0
    )
    calls = json.loads(calls_path.read_text())
    assert calls["region"] == "us-east-1" and calls["calls"][-1]["params"]["InstanceType"] == "m5.xlarge"
    capsys.readouterr()
    assert main(["apply", str(real_plan), "--dry-run", "--image-id", AMI, "--endpoint-url", moto_url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(calls["calls"]) and all(line.startswith("dry run ok:") for line in lines)
    assert ec2(moto_url).describe_instances()["Reservations"] == []  # nothing launched


def test_apply_launches_after_yes_only(
    real_plan: Path, moto_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Without --yes the prompt must be answered; with --yes the exact mix is launched."""
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    assert main(["apply", str(real_plan), "--image-id", AMI, "--endpoint-url", moto_url]) == 1
    assert "aborted: nothing launched" in capsys.readouterr().out
    assert main(["apply", str(real_plan), "--image-id", AMI, "--endpoint-url", moto_url, "--yes"]) == 0
    doc = json.loads(real_plan.read_text())
    launched: dict[str, int] = {}
    spot: dict[str, bool] = {}
    for reservation in ec2(moto_url).describe_instances()["Reservations"]:
        for instance in reservation["Instances"]:
            launched[instance["InstanceType"]] = launched.get(instance["InstanceType"], 0) + 1
            spot[instance["InstanceType"]] = instance.get("InstanceLifecycle") == "spot"
    assert launched == {**doc["result"]["plan"]["counts"], "m5.xlarge": 1}
    assert spot.pop("m5.xlarge") is False and all(spot.values())


def test_fleet_dry_run_and_launch(real_plan: Path, moto_url: str, capsys: pytest.CaptureFixture) -> None:
    """An instant CreateFleet with the plan's types dry-runs, then launches the target capacity."""
    ec2(moto_url).create_launch_template(LaunchTemplateName="dnnprov-workers", LaunchTemplateData={"ImageId": AMI})
    args = [
        "apply",
        str(real_plan),
        "--via",
        "fleet",
        "--launch-template",
        "dnnprov-workers",
        "--endpoint-url",
        moto_url,
    ]
    assert main(args + ["--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("dry run ok: spot fleet of 3 GPUs of p3.2xlarge")
    assert main(args + ["--yes"]) == 0
    assert (
        "launched: spot fleet of 3 GPUs of p3.2xlarge delivered 3 x p3.2xlarge (3 workers): i-"
        in capsys.readouterr().out
    )


def test_apply_needs_an_image_or_template(real_plan: Path, moto_url: str, capsys: pytest.CaptureFixture) -> None:
    """RunInstances without an AMI or launch template: one clear error, nothing sent."""
    assert main(["apply", str(real_plan), "--dry-run", "--endpoint-url", moto_url]) == 2
    assert "need an AMI (--image-id) or a launch template" in capsys.readouterr().err


def test_shared_data_import_is_sourced(shared_data: Path) -> None:
    """Every imported number names its source; spot prices name their AZ and time."""
    catalog = import_shared_data("us-east-1", shared_data, snapshot="2022", mix_dates=True)
    assert catalog.snapshot.startswith("2022-05-31T")
    jsonschema.validate(catalog.to_dict(), json.loads(embedded_path("schema", "catalog-v1.schema.json").read_text()))
    p3 = catalog.entry("p3.2xlarge")
    assert (p3.gpus, p3.vcpus, p3.gpu_memory_gb, p3.on_demand_price_per_h, p3.interruption_bucket) == (
        1,
        8,
        16.0,
        3.06,
        4,
    )
    assert "use1-az2" in p3.sources["spot_price_per_h"]
    assert catalog.entry("p4d.24xlarge").gpu_memory_gb == 40.0  # the list's 320 GB is the total of 8
    for entry in catalog.instance_types:
        assert set(entry.sources) >= {"gpus"} and (entry.spot_price_per_h is None) == (
            "spot_price_per_h" not in entry.sources
        )
    assert catalog.entry("g4dn.4xlarge").spot_price_per_h is None  # no row in the 5.5 h window
    estimated = import_shared_data(
        "us-east-1", shared_data, snapshot="2022", mix_dates=True, estimate_missing_spot=True
    ).entry("g4dn.4xlarge")
    assert estimated.spot_price_per_h == pytest.approx(1.204 * 0.32)
    assert estimated.sources["spot_price_per_h"].startswith("estimated:")


def test_malformed_history_row_fails_import(shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A malformed row in the price history: exit 2 naming file and line; no catalog file."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("aws-gpu-instances-ondemand-2026-01-21.json", "aws-spot-advisor-2025-06-28.json"):
        (data / name).symlink_to(shared_data / name)
    with gzip.open(data / "aws-spot-price-history-2022-05-31.tsv.gz", "wt") as handle:
        handle.write("use1-az2\tp3.2xlarge\tLinux/UNIX\t0.918000\t2022-05-31T21:18:00+00:00\n")
        handle.write("use1-az5\tp3.2xlarge\tLinux/UNIX\tcheap\t2022-05-31T21:18:00+00:00\n")
    out = tmp_path / "catalog.json"
    assert (
        main(["catalog", "import", "--snapshot", "2022", "--mix-dates", "--shared-data", str(data), "--out", str(out)])
        == 2
    )
    assert "aws-spot-price-history-2022-05-31.tsv.gz:2: price 'cheap' is not a number" in capsys.readouterr().err
    assert not out.exists()


def test_launch_options_reach_the_request(real_plan: Path) -> None:
    """Subnet and key pair go into every RunInstances call."""
    calls = run_instances_calls(
        load_plan(real_plan), LaunchOptions(image_id=AMI, subnet_id="subnet-11111111", key_name="k")
    )
    assert all(c.params["SubnetId"] == "subnet-11111111" and c.params["KeyName"] == "k" for c in calls)


def _gpu_catalog() -> dict:
    """A catalog whose first type has 4 GPUs: moto fills an instant fleet from the first override only."""
    return {
        "format": "dnnprov/catalog",
        "version": 1,
        "name": "fleet-test",
        "region": "us-east-1",
        "snapshot": "2026-11-01T00:00:00Z",
        "instance_types": {
            "g4dn.12xlarge": {"gpus": 4, "vcpus": 48, "memory_gb": 192.0},
            "g4dn.xlarge": {"gpus": 1, "vcpus": 4, "memory_gb": 16.0},
        },
    }


def _fleet_problem(time_s: float = 4500.0, budget: float | None = None) -> dnnprov.SpotProblem:
    """ResNet-110 (paper model) on the catalog's two types: 1 x g4dn.12xlarge + 4 x g4dn.xlarge takes
    3,835 s for $2.56; 2 x g4dn.12xlarge (what moto delivers for their 8 GPUs) 5,442 s for $4.84."""
    from conftest_aws import RESNET110_WORKLOAD

    types = (
        dnnprov.InstanceType(
            name="g4dn.12xlarge",
            gpus=4,
            vcpus=48,
            quota=4,
            spot_price_per_h=1.6,
            speed_samples_per_s=1400.0,
            batch_per_gpu=512,
        ),
        dnnprov.InstanceType(
            name="g4dn.xlarge",
            gpus=1,
            vcpus=4,
            quota=8,
            spot_price_per_h=0.2,
            speed_samples_per_s=750.0,
            batch_per_gpu=1024,
        ),
    )
    return dnnprov.SpotProblem(
        instance_types=types,
        workload=dnnprov.SpotWorkload(**dict(RESNET110_WORKLOAD, loss_variant="cc")),
        slo=dnnprov.SpotSLO(loss=0.8, time_s=time_s),
        model="paper",
        name="fleet-test",
        constraints=dnnprov.SpotConstraints(budget_usd=budget),
    )


def _fleet_plan(path: Path, counts: dict[str, int], problem: dnnprov.SpotProblem) -> Path:
    path.write_text(
        json.dumps(
            {
                "format": "dnnprov/plan",
                "version": 1,
                "catalog": _gpu_catalog(),
                "instance": problem.to_dict(),
                "result": {
                    "status": "feasible",
                    "kind": "spot",
                    "instance": problem.name,
                    "plan": {"counts": counts, "ps": 1},
                },
            }
        )
    )
    return path


def test_partial_fleet_exits_nonzero_and_launches_no_ps(
    moto_url: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A fleet short of its GPU target (4 of 5 GPUs: moto launches 1 x g4dn.12xlarge): exit 2, no PS instance."""
    plan = _fleet_plan(tmp_path / "plan.json", {"g4dn.12xlarge": 1, "g4dn.xlarge": 1}, _fleet_problem())
    client = ec2(moto_url)
    client.create_launch_template(LaunchTemplateName="dnnprov-fleet", LaunchTemplateData={"ImageId": AMI})
    before = {i["InstanceId"] for r in client.describe_instances()["Reservations"] for i in r["Instances"]}
    code = main(
        [
            "apply",
            str(plan),
            "--via",
            "fleet",
            "--launch-template",
            "dnnprov-fleet",
            "--yes",
            "--endpoint-url",
            moto_url,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "capacity of 4 of its target 5 (GPUs)" in err and "no PS" in err
    launched = [
        i for r in client.describe_instances()["Reservations"] for i in r["Instances"] if i["InstanceId"] not in before
    ]
    assert [i["InstanceType"] for i in launched] == ["g4dn.12xlarge"]  # the fleet's one instance, no m5.xlarge
    assert launched[0]["InstanceId"] in err  # named, so that it can be terminated


def test_takeover_keeping_no_worker_launches_no_second_ps(
    ref_resnet110, moto_url: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Every worker revoked: `replan` keeps the running PS (new PS 0), so neither the EC2 export nor
    `apply --dry-run` launches a PS (issue 28: both launched one m5.xlarge beside the running one)."""
    from dnnprov.revocation.replan import predicted_loss

    problem = ref_resnet110()
    instance = tmp_path / "table1.json"
    dnnprov.write_instance(problem, instance)
    running = {"g3.8xlarge": 5, "g3.16xlarge": 3}
    plan = tmp_path / "running.json"
    plan.write_text(
        json.dumps(
            {"status": "feasible", "kind": "spot", "instance": problem.name, "plan": {"counts": running, "ps": 1}}
        )
    )
    loss = predicted_loss(problem, running, 600.0)
    assert (
        main(
            [
                "replan",
                str(instance),
                "--plan",
                str(plan),
                "--revoked",
                "g3.8xlarge=5",
                "--revoked",
                "g3.16xlarge=3",
                "--elapsed",
                "600",
                "--loss-reached",
                str(loss),
                "--json",
            ]
        )
        == 0
    )
    takeover = tmp_path / "takeover.json"
    takeover.write_text(capsys.readouterr().out)
    doc = json.loads(takeover.read_text())
    assert doc["instance"]["constraints"]["existing"] == {} and doc["result"]["details"]["new_ps"] == 0
    assert main(["export", str(takeover), "--to", "ec2-run-instances", "--image-id", AMI]) == 0
    calls = json.loads(capsys.readouterr().out)["calls"]
    assert {c["params"]["InstanceType"]: c["params"]["MinCount"] for c in calls} == doc["result"]["plan"]["counts"]
    assert main(["export", str(takeover), "--to", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["launch"]["ps"]["count"] == 0
    assert (
        main(
            [
                "apply",
                str(takeover),
                "--dry-run",
                "--image-id",
                AMI,
                "--region",
                "us-east-1",
                "--endpoint-url",
                moto_url,
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert len([line for line in lines if line.startswith("dry run ok:")]) == len(calls)
    assert not any("m5.xlarge" in line for line in lines)


def test_a_takeover_asking_for_more_ps_than_it_runs_is_refused() -> None:
    """``details.new_ps`` above the plan's PS count is no takeover dnnprov made: one error naming it."""
    from dnnprov.cloud.export import PlanDocument
    from dnnprov.errors import InvalidInputError

    result = {
        "status": "optimal",
        "kind": "spot",
        "plan": {"counts": {"p3.2xlarge": 1}, "ps": 1},
        "details": {"new_ps": 2},
    }
    with pytest.raises(InvalidInputError, match="^result.details.new_ps: must be <= 1"):
        PlanDocument.from_dict(result)


def _instances(url: str, run: str | None = None) -> list[dict]:
    filters = [{"Name": "tag:dnnprov:run", "Values": [run]}] if run else []
    return [i for r in ec2(url).describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]


def test_each_apply_is_its_own_run(real_plan: Path, moto_url: str, capsys: pytest.CaptureFixture) -> None:
    """Two applies of one plan: each instance carries its launch call's ClientToken and its run's
    ``dnnprov:run`` tag, a fresh run per apply, or the one given with --run-id (issue 28)."""
    args = ["apply", str(real_plan), "--image-id", AMI, "--endpoint-url", moto_url, "--yes"]
    assert main(args) == 0
    first = capsys.readouterr().out.splitlines()[-1].split()[1].rstrip(":")
    assert main(args + ["--run-id", "team-a.run-7"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("run team-a.run-7: every instance is tagged")
    mine, theirs, every = _instances(moto_url, first), _instances(moto_url, "team-a.run-7"), _instances(moto_url)
    assert mine and theirs and len(mine) + len(theirs) == len(every)
    assert len(mine) == len(theirs) == sum(json.loads(real_plan.read_text())["result"]["plan"]["counts"].values()) + 1
    tokens = {i["ClientToken"] for i in mine}, {i["ClientToken"] for i in theirs}
    assert all(t.startswith("dnnprov-") for t in tokens[0] | tokens[1]) and not tokens[0] & tokens[1]
    # one token per launch call: the calls of the run (one per type, and the PS)
    assert len(tokens[0]) == len({i["InstanceType"] for i in mine})


def test_launch_calls_without_a_client_token_are_refused(real_plan: Path, moto_url: str) -> None:
    """issue_calls sends no launch without a ClientToken (a retried launch could launch twice)."""
    from dnnprov.cloud.aws import AwsClients
    from dnnprov.cloud.launch import issue_calls
    from dnnprov.errors import InvalidInputError

    calls = run_instances_calls(load_plan(real_plan), LaunchOptions(image_id=AMI))
    with pytest.raises(InvalidInputError, match="^calls: RunInstances carries no ClientToken"):
        issue_calls(calls, AwsClients("us-east-1", endpoint_url=moto_url), dry_run=False)
    assert _instances(moto_url) == []


def test_bad_run_id_is_one_error_line(real_plan: Path, moto_url: str, capsys: pytest.CaptureFixture) -> None:
    """A run id that cannot be a tag value and label value: exit 2 naming it, nothing sent."""
    assert (
        main(["apply", str(real_plan), "--image-id", AMI, "--endpoint-url", moto_url, "--yes", "--run-id", "-bad id"])
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run_id: '-bad id' is not a valid name here" in err
    assert _instances(moto_url) == []


def _fleet_apply(plan: Path, url: str, *extra: str) -> list[str]:
    """The `apply --via fleet --yes` arguments, with the launch template made on the server."""
    if not ec2(url).describe_launch_templates()["LaunchTemplates"]:
        ec2(url).create_launch_template(LaunchTemplateName="dnnprov-fleet", LaunchTemplateData={"ImageId": AMI})
    return [
        "apply",
        str(plan),
        "--via",
        "fleet",
        "--launch-template",
        "dnnprov-fleet",
        "--region",
        "us-east-1",
        "--endpoint-url",
        url,
        "--yes",
        *extra,
    ]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (
            "quota",
            "delivered.counts.p3.2xlarge: 6 instances exceed the quota 2: EC2 Fleet delivered 6 x p3.2xlarge, not the plan",
        ),
        (
            "deadline",
            "delivered.time_s: the spot model predicts 5,442 s for this cluster, beyond the deadline of 4,500 s",
        ),
        ("budget", "delivered.cost: the spot model predicts $4.84 for this cluster, over the budget of $3.00"),
    ],
)
def test_fleet_delivery_is_checked_against_the_plan(
    case: str, message: str, ref_resnet110, moto_url: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """moto fills an instant fleet with its first override only, as EC2 may: 6 x p3.2xlarge for a plan of
    2 x p3.2xlarge + 1 x g3.16xlarge (quota 2), or 2 x g4dn.12xlarge for 1 x g4dn.12xlarge + 4 x g4dn.xlarge
    (legal, but late or dear). One error line naming the field; what was launched is terminated, no PS."""
    if case == "quota":
        problem, counts = ref_resnet110((2, 5, 5, 5, 5)), {"p3.2xlarge": 2, "g3.16xlarge": 1}
    else:
        problem = _fleet_problem() if case == "deadline" else _fleet_problem(6000.0, budget=3.0)
        counts = {"g4dn.12xlarge": 1, "g4dn.xlarge": 4}
    plan = _fleet_plan(tmp_path / "plan.json", counts, problem)
    assert main(_fleet_apply(plan, moto_url)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "nothing more was launched (no PS)" in err
    launched = _instances(moto_url)
    assert launched and "m5.xlarge" not in {i["InstanceType"] for i in launched}
    assert all(i["State"]["Name"] in ("shutting-down", "terminated") and i["InstanceId"] in err for i in launched)
    assert f"terminated the {len(launched)} instances launched" in err


def test_fleet_delivery_reports_workers(moto_url: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A delivery the plan allows is kept: its line says the fleet's target in GPUs and the workers delivered."""
    plan = _fleet_plan(tmp_path / "plan.json", {"g4dn.12xlarge": 1, "g4dn.xlarge": 4}, _fleet_problem(6000.0))
    assert main(_fleet_apply(plan, moto_url)) == 0
    out = capsys.readouterr().out
    assert "launched: spot fleet of 8 GPUs of g4dn.12xlarge, g4dn.xlarge delivered 2 x g4dn.12xlarge (2 workers)" in out
    assert sorted(i["InstanceType"] for i in _instances(moto_url)) == ["g4dn.12xlarge"] * 2 + ["m5.xlarge"]


def test_fleet_launch_needs_the_instance(moto_url: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Without the instance nothing can check what the fleet delivers: refused before any call (a dry run is not)."""
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "format": "dnnprov/plan",
                "version": 1,
                "catalog": _gpu_catalog(),
                "result": {
                    "status": "optimal",
                    "kind": "spot",
                    "instance": "fleet-test",
                    "plan": {"counts": {"g4dn.12xlarge": 1, "g4dn.xlarge": 1}, "ps": 1},
                },
            }
        )
    )
    assert main(_fleet_apply(plan, moto_url)) == 2
    assert capsys.readouterr().err.startswith("dnnprov: error: --instance: an instant fleet chooses its own mix")
    assert _instances(moto_url) == []
    assert main(_fleet_apply(plan, moto_url, "--dry-run")) == 0
