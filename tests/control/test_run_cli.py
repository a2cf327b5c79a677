"""``dnnprov run`` against moto's EC2 on loopback (``simulate``'s loop: tests/control/test_loop_simulate.py)."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from control.test_loop import problem

import dnnprov
from dnnprov.cli import main
from dnnprov.control.record import open_record
from dnnprov.io.instances import write_instance

pytest_plugins = ["conftest_aws"]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    instance = tmp_path / "p3.json"
    write_instance(problem(), instance)
    plan = tmp_path / "plan.json"
    result = dnnprov.solve(problem(), "milp")
    assert result.plan is not None and result.plan.counts == {"p3.2xlarge": 2}
    plan.write_text(json.dumps(result.to_dict()))
    return instance, plan


def test_run_status_cancel_against_moto(
    moto_server: str, aws_env: None, files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    instance, plan = files
    state = tmp_path / "runs"
    code = main(
        [
            "run",
            str(instance),
            "--plan",
            str(plan),
            "--policy",
            "failover",
            "--endpoint-url",
            moto_server,
            "--region",
            "us-west-2",
            "--state",
            str(state),
            "--run-id",
            "job-1",
            "--poll",
            "0.01",
            "--max-polls",
            "2",
            "--json",
        ]
    )
    assert code == 0
    assert json.loads(capsys.readouterr().out)["state"] == "running"
    ec2 = boto3.client("ec2", region_name="us-west-2", endpoint_url=moto_server)
    tagged = [
        i
        for r in ec2.describe_instances(Filters=[{"Name": "tag:dnnprov:run", "Values": ["job-1"]}])["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] == "running"
    ]
    roles = sorted({t["Value"] for i in tagged for t in i["Tags"] if t["Key"] == "dnnprov:role"})
    assert roles == ["ps", "worker"] and len(tagged) == 3
    workers = [i for i in tagged if i.get("InstanceLifecycle") == "spot"]
    assert len(workers) == 2 and all(any(t["Key"] == "dnnprov:ps" for t in i["Tags"]) for i in workers)

    assert main(["run", "status", "job-1", "--state", str(state), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["state"] == "running" and sum(status["held"].values()) == 3
    assert [e["kind"] for e in status["events"]].count("launch") >= 2

    assert main(["run", "cancel", "job-1", "--state", str(state)]) == 0
    capsys.readouterr()
    left = [
        i
        for r in ec2.describe_instances(Filters=[{"Name": "tag:dnnprov:run", "Values": ["job-1"]}])["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] not in ("terminated", "shutting-down")
    ]
    assert left == []
    assert main(["run", "status", "job-1", "--state", str(state), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "cancelled"


@pytest.mark.parametrize(
    "argv, field",
    [
        (["run", "status"], "RUN"),
        (["run", "status", "nope"], "RUN"),
        (["run", "X.json", "--plan", "p.json", "--policy", "sideways"], "--policy"),
    ],
)
def test_run_bad_input_is_one_line(
    argv: list[str], field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--state", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0]


@pytest.mark.parametrize("url", ["notaurl", "http://127.0.0.1:99999", "http://[::1"])
def test_run_refuses_an_endpoint_url_boto3_cannot_use(
    url: str, files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not an internal error after the run was recorded: one line naming --endpoint-url, no run."""
    instance, plan = files
    state = tmp_path / "runs"
    argv = ["run", str(instance), "--plan", str(plan), "--policy", "none", "--endpoint-url", url, "--state", str(state)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--endpoint-url" in err[0] and "internal error" not in err[0], err
    with open_record(state) as record:
        assert record.runs() == []
