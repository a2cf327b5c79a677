"""The Python API of runs (dnnprov.control.api, also exported by ``dnnprov.control``): a run against the
EC2 twin on its stepped clock tells the trace-cloud replay's story; status while it runs; cancel
and resume from another caller."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from control.test_resume import (
    POOLS,
    PROBLEM,
    REGION,
    TRACES,
    launched_once,
    reset_moto,
    story,
    twin_bill,
)

from dnnprov.control.api import cancel_run, resume_run, run_plan, run_status
from dnnprov.control.loop import RunSettings
from dnnprov.control.replay import run_once
from dnnprov.control.twin.replay import story as replay_story
from dnnprov.control.twin.server import Twin
from dnnprov.errors import InvalidInputError
from dnnprov.result import SpotPlan
from dnnprov.revocation.policies import make_policy

pytest_plugins = ["conftest_aws"]
PLAN = SpotPlan(counts={"p3.2xlarge": 2}, ps=1)


@pytest.fixture
def twin(moto_url: str) -> Iterator[Twin]:
    """A stepped twin of test_resume's hand-made window (notices at 300 s and 900 s) over moto."""
    with Twin(POOLS, upstream=moto_url, mode="stepped", region=REGION) as made:
        yield made
    reset_moto(moto_url)


def test_run_plan_tells_the_replays_story(twin: Twin, tmp_path: Path) -> None:
    run_id, outcome = run_plan(
        PROBLEM, PLAN, "failover", endpoint_url=twin.url, region=REGION, state=tmp_path, run_id="api"
    )
    replay = run_once(PROBLEM, PLAN, TRACES, make_policy("failover"), 0, RunSettings())
    assert run_id == "api" and outcome is not None
    assert outcome.to_dict() == pytest.approx(replay.outcome.to_dict())
    assert story(tmp_path, "api") == replay_story(replay)
    assert outcome.cost == pytest.approx(twin_bill(twin, "api"), rel=1e-9)
    launched_once(twin, tmp_path, "api")
    status = run_status("api", state=tmp_path)
    assert status["state"] == outcome.state and status["held"] == {}
    assert status["cost_so_far"] == outcome.cost and status["counters"]["revocations"] == outcome.revocations
    assert status["progress"]["finish_s"] == outcome.finish_s


def test_status_while_running_then_cancel_and_resume(twin: Twin, tmp_path: Path) -> None:
    run_id, outcome = run_plan(
        PROBLEM,
        {"counts": {"p3.2xlarge": 2}, "ps": 1},
        "uniform-progress",
        endpoint_url=twin.url,
        region=REGION,
        state=tmp_path,
        max_polls=30,
    )
    assert outcome is None
    status = run_status(run_id, state=tmp_path)
    assert status["state"] == "running" and sum(status["held"].values()) >= 2
    assert 0 < status["progress"]["time_s"] <= 30 * 15 and status["progress"]["finish_s"] is None
    assert 0 < status["cost_so_far"] < PROBLEM.slo.time_s / 3600 * 10
    assert status["counters"]["launches"] >= 3
    assert resume_run(run_id, state=tmp_path, max_polls=2) is None  # another caller goes on
    done = cancel_run(run_id, state=tmp_path)
    assert (
        done["state"] == "cancelled"
        and done["torn_down"]
        and done["cost"] == pytest.approx(twin_bill(twin, run_id), rel=1e-9)
    )
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=twin.url)
    live = [
        i
        for r in ec2.describe_instances(Filters=[{"Name": "tag:dnnprov:run", "Values": [run_id]}])["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] not in ("terminated", "shutting-down")
    ]
    assert live == []
    assert run_status(run_id, state=tmp_path)["state"] == "cancelled"
    assert cancel_run(run_id, state=tmp_path)["torn_down"] is False  # ended already


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"policy": "mpc"}, "--policy"),
        ({"policy": "sideways"}, "--policy"),
        ({"plan": {"counts": {"p3.2xlarge": 9}, "ps": 1}}, "plan"),
        ({"plan": {"status": "optimal"}}, "plan"),
        ({"progress": "model", "endpoint_url": None}, "--progress"),
    ],
)
def test_bad_runs_are_refused_before_anything_is_recorded(kwargs: dict[str, Any], field: str, tmp_path: Path) -> None:
    args = {"policy": "failover", "plan": PLAN, "endpoint_url": "http://127.0.0.1:9", **kwargs}
    with pytest.raises(InvalidInputError) as caught:
        run_plan(PROBLEM, args.pop("plan"), args.pop("policy"), state=tmp_path, **args)
    assert field in caught.value.field
    assert not (tmp_path / "runs.db").exists()  # nothing was recorded


def test_the_docs_example_prints_what_the_page_shows(
    aws_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "control.md").read_text()
    section = page[page.index("### The Python API") :]
    example = section[section.index("```python\n") + 10 :]
    example, rest = example[: example.index("```\n")], example[example.index("```\n") + 4 :]
    shown = rest[rest.index("```text\n") + 8 :]
    shown = shown[: shown.index("```\n")]
    exec(compile(example.replace('"/tmp/api-runs"', repr(str(tmp_path / "runs"))), "control.md", "exec"), {})  # noqa: S102
    assert capsys.readouterr().out == shown
