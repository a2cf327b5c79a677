"""A controller that stops (or dies) and is resumed goes on as if it had not: `dnnprov run`,
`run resume` and `run status` against the EC2 twin on its stepped clock (nothing moves while no
controller runs unless the test moves it), over moto on loopback.

Checked against an uninterrupted run of the same window: the same launches, refusals, notices,
reclaims and terminations at the same times, the same outcome and bill; and always: the bill
the controller keeps is the one the twin's instance lifetimes say, every step launched once.
"""

from __future__ import annotations

import itertools
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from control.test_loop import problem

import dnnprov
from dnnprov.cli import main
from dnnprov.control.cloud import LaunchRequest
from dnnprov.control.clouds.ec2 import Ec2Cloud, RemoteTwinClock
from dnnprov.control.loop import RunSettings
from dnnprov.control.record import RunRecord
from dnnprov.control.replay import run_once, trace_pools
from dnnprov.control.twin.server import Twin
from dnnprov.io.instances import write_instance
from dnnprov.problems.interruption import Trace
from dnnprov.revocation.availability import fit_availability
from dnnprov.revocation.policies import make_policy
from dnnprov.revocation.replay.pool_replay import takeover_table

pytest_plugins = ["conftest_aws"]
REGION = "us-west-2"
#: zone a loses a worker at 300 s and the other at 900 s; zone c has room from 600 s on
ZONE_A = [2, 1, 1, 0, 0, 0, 2] + [2] * 20
ZONE_C = [0, 0, 1, 1, 0, 2, 2] + [2] * 20


def hand(zone: str, alive: list[int]) -> Trace:
    return Trace(f"{zone}_v100_1.json", 300.0, np.array(alive, dtype=np.int64))


PROBLEM = problem(hours=0.25)  # 2 workers train 900 s; deadline 1,350 s
TRACES = {"p3.2xlarge": [hand("us-west-2a", ZONE_A), hand("us-west-2c", ZONE_C)]}
POOLS = trace_pools(PROBLEM, TRACES, 0)
PRICES = {p.name: p.price_per_h for p in POOLS}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("resume")
    instance, plan = folder / "p3.json", folder / "plan.json"
    write_instance(PROBLEM, instance)
    result = dnnprov.solve(PROBLEM, "milp")
    assert result.plan is not None and result.plan.counts == {"p3.2xlarge": 2}
    plan.write_text(json.dumps(result.to_dict()))
    return instance, plan


@pytest.fixture
def twins(moto_url: str) -> Iterator[Any]:
    """Fresh stepped twins over the test's moto server (one per run: each has its own capacity)."""
    made: list[Twin] = []

    def make() -> Twin:
        made.append(Twin(POOLS, upstream=moto_url, mode="stepped", region=REGION).start())
        return made[-1]

    yield make
    for twin in made:
        twin.stop()
    reset_moto(moto_url)


def reset_moto(url: str) -> None:
    """Leave moto empty: its state is the process's, shared with any in-process moto after this test."""
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"), timeout=30).close()


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip().startswith("{") else out


def start(
    capsys: pytest.CaptureFixture[str],
    files: tuple[Path, Path],
    twin: Twin,
    state: Path,
    run_id: str,
    policy: str,
    *more: str,
) -> tuple[int, Any]:
    return cli(
        capsys,
        "run",
        str(files[0]),
        "--plan",
        str(files[1]),
        "--policy",
        policy,
        "--endpoint-url",
        twin.url,
        "--region",
        REGION,
        "--state",
        str(state),
        "--run-id",
        run_id,
        "--json",
        *more,
    )


def story(state: Path, run_id: str) -> list[tuple[Any, ...]]:
    """The run's launches, refusals, notices, reclaims and terminations with times and pools."""
    record = RunRecord(state)
    try:
        out = []
        for e in record.events(run_id):
            if e["kind"] in ("launch", "refused"):
                out.append((e["kind"], round(e["time_s"], 3), e["pool"], e["role"], e["asked"], e.get("got")))
            elif e["kind"] in ("notice", "reclaim"):
                out.append((e["kind"], round(e["time_s"], 3), e["pool"]))
            elif e["kind"] == "terminate":
                out.append((e["kind"], round(e["time_s"], 3), e["instances"], e["why"]))
        return sorted(out, key=repr)
    finally:
        record.close()


def twin_bill(twin: Twin, run_id: str) -> float:
    """Dollars of the run's instances by the twin's lifetimes (stepped: the run's clock is the twin's)."""
    total = 0.0
    for i in twin.instances():
        if i.tags.get("dnnprov:run") != run_id:
            continue
        if i.tags.get("dnnprov:role") == "ps":
            price = PROBLEM.platform.ps_price_per_h
        elif i.market == "spot":
            price = PRICES[str(i.pool)]
        else:
            price = float(PROBLEM.instance_types[0].on_demand_price_per_h or 0.0)
        assert i.ended_s is not None, f"{i.instance_id} of {run_id} is still running"
        total += price * (i.ended_s - i.launched_s) / 3600
    return total


def launched_once(twin: Twin, state: Path, run_id: str) -> None:
    """Every instance of the run belongs to one launch step of the record, which names exactly
    the instances the twin launched for it."""
    by_step: dict[int, set[str]] = {}
    for i in twin.instances():
        if i.tags.get("dnnprov:run") == run_id:
            by_step.setdefault(int(i.tags["dnnprov:step"]), set()).add(i.instance_id)
    record = RunRecord(state)
    try:
        steps = {s["step"]: s for s in record.steps(run_id) if s["kind"] == "launch"}
        for step, ids in by_step.items():
            assert steps[step]["status"] == "done"
            assert {i["instance_id"] for i in steps[step]["result"]["instances"]} == ids
        got = [(e["step"], e["got"]) for e in record.events(run_id) if e["kind"] == "launch"]
        assert sorted(got) == sorted((step, len(ids)) for step, ids in by_step.items())
    finally:
        record.close()


def finished(
    capsys: pytest.CaptureFixture[str], twin: Twin, state: Path, run_id: str, code: int, out: Any
) -> dict[str, Any]:
    assert code in (0, 1) and out["state"] != "running", out
    launched_once(twin, state, run_id)
    assert out["cost"] == pytest.approx(twin_bill(twin, run_id), rel=1e-9)
    return dict(out)


@pytest.mark.parametrize(
    "policy, stops",
    [
        ("failover", (22,)),  # on-demand since 300 s (fallback's commitment), a notice pending
        ("uniform-progress", (24, 53)),  # both pools refused and backing off, behind the uniform line; then
        # on-demand held with hysteresis and a spot worker in zone c
        ("replan", (22, 40)),  # after the 300 s notice's takeover (its workers remembered), and later
    ],
)
def test_stopped_and_resumed_at_once_tells_the_same_story(
    policy: str,
    stops: tuple[int, ...],
    files: tuple[Path, Path],
    twins: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The controller stops after each of ``stops`` polls and another takes over at the same
    twin time: it must remember the policy's state (on-demand commitment, hysteresis) and the
    pools' back-offs, and date every instance's end as the first one did."""
    twin, state = twins(), tmp_path / "whole"
    code, out = start(capsys, files, twin, state, "whole", policy)
    whole = finished(capsys, twin, state, "whole", code, out)
    twin, state = twins(), tmp_path / "stopped"
    code, out = start(capsys, files, twin, state, "r", policy, "--max-polls", str(stops[0]))
    for polls in [b - a for a, b in itertools.pairwise(stops)]:
        assert code == 0 and out["state"] == "running"
        code, out = cli(capsys, "run", "resume", "r", "--state", str(state), "--json", "--max-polls", str(polls))
    assert code == 0 and out["state"] == "running"
    code, out = cli(capsys, "run", "resume", "r", "--state", str(state), "--json")
    resumed = finished(capsys, twin, state, "r", code, out)
    assert story(state, "r") == story(tmp_path / "whole", "whole")
    assert resumed["state"] == whole["state"] and resumed["finish_s"] == pytest.approx(whole["finish_s"])
    assert resumed["cost"] == pytest.approx(whole["cost"], rel=1e-9)
    assert (resumed["revocations"], resumed["launches"], resumed["refusals"]) == (
        whole["revocations"],
        whole["launches"],
        whole["refusals"],
    )


def test_capacity_events_while_no_controller_runs(
    files: tuple[Path, Path], twins: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A notice (300 s) and its reclaim (420 s) happen while no controller runs: the one that
    takes over at 585 s dates them as the twin does (not the reclaim as the notice), `run status`
    no longer holds the reclaimed worker, and the bill is the twin's."""
    twin, state = twins(), tmp_path / "down"
    assert start(capsys, files, twin, state, "r", "failover", "--max-polls", "10")[0] == 0  # to 135 s
    twin.advance(450.0)
    code, out = cli(capsys, "run", "resume", "r", "--state", str(state), "--json", "--max-polls", "1")
    assert code == 0 and out["state"] == "running"
    lost = [i for i in twin.instances() if i.notice_s is not None]
    assert [(i.notice_s, i.ended_s) for i in lost] == [(300.0, 420.0)]
    record = RunRecord(state)
    events = [(e["kind"], e["time_s"]) for e in record.events("r") if e.get("instance") == lost[0].instance_id]
    assert events == [("notice", 300.0), ("reclaim", 420.0)]
    record.close()
    _, status = cli(capsys, "run", "status", "r", "--state", str(state), "--json")
    assert sum(n for key, n in status["held"].items() if key.startswith("worker")) == 2
    assert status["held"].get("worker p3.2xlarge@us-west-2a spot") == 1
    code, out = cli(capsys, "run", "resume", "r", "--state", str(state), "--json")
    finished(capsys, twin, state, "r", code, out)


def test_a_launch_sent_but_not_recorded_is_adopted_with_its_launch_time(
    files: tuple[Path, Path], twins: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The worst moment: a launch written and sent, its outcome never recorded, and 200 s pass.
    The controller that takes over re-sends it with its token: the twin answers with the same
    instance, which keeps its launch time (135 s, not 335 s) in the record and the bill."""
    twin, state = twins(), tmp_path / "sent"
    assert start(capsys, files, twin, state, "r", "failover", "--max-polls", "10")[0] == 0  # to 135 s
    record = RunRecord(state)
    spec, step = record.get("r")["spec"], max(s["step"] for s in record.steps("r")) + 1
    ps = next(i for s in record.steps("r") for i in (s["result"] or {}).get("instances", []) if i["role"] == "ps")
    request = LaunchRequest(
        "r", step, "worker", "p3.2xlarge", None, "on-demand", 1, f"r-{step}", ps_address=ps["ps_address"]
    )
    record.intend("r", step, "launch", request.to_dict())
    clock = RemoteTwinClock(twin.url)
    sent = Ec2Cloud(REGION, start_epoch=spec["start_epoch"], endpoint_url=twin.url, clock=clock).launch(request)
    record.close()
    assert len(sent.instances) == 1 and sent.instances[0].launched_s == 135.0
    twin.advance(200.0)
    code, out = cli(capsys, "run", "resume", "r", "--state", str(state), "--json")
    finished(capsys, twin, state, "r", code, out)
    record = RunRecord(state)
    again = next(s for s in record.steps("r") if s["step"] == step)
    assert again["status"] == "done" and [i["instance_id"] for i in again["result"]["instances"]] == [
        sent.instances[0].instance_id
    ]
    assert again["result"]["instances"][0]["launched_s"] == 135.0
    events = [(e["kind"], e["time_s"]) for e in record.events("r") if e.get("step") == step]
    assert [e for e in events if e[0] != "resumed"] == [("resent", 335.0), ("launch", 135.0)]
    record.close()


def test_mpc_runs_on_the_twin_from_a_model_and_resumes(
    files: tuple[Path, Path], twins: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run --policy mpc --model M` (M as `risk fit --zones --out` writes it) against the twin
    tells the story `simulate` tells of the same window with the same table, also when the
    controller stops mid-run and another resumes (mpc's tick and its progress are remembered)."""
    model = fit_availability(TRACES["p3.2xlarge"], cap=2)
    path = tmp_path / "model.json"
    path.write_text(json.dumps(model.to_dict()))
    plan = dnnprov.SpotPlan(counts={"p3.2xlarge": 2}, ps=1)
    replay = run_once(PROBLEM, plan, TRACES, make_policy("mpc", takeover_table(PROBLEM, plan, model)), 0, RunSettings())
    assert replay.outcome.revocations > 0  # the window loses capacity
    twin, state = twins(), tmp_path / "whole"
    code, out = start(capsys, files, twin, state, "whole", "mpc", "--model", str(path))
    whole = finished(capsys, twin, state, "whole", code, out)
    assert whole["state"] == replay.outcome.state and whole["cost"] == pytest.approx(replay.outcome.cost, rel=1e-9)
    assert (whole["revocations"], whole["launches"], whole["refusals"]) == (
        replay.outcome.revocations,
        replay.outcome.launches,
        replay.outcome.refusals,
    )
    twin, state = twins(), tmp_path / "stopped"
    code, out = start(capsys, files, twin, state, "r", "mpc", "--model", str(path), "--max-polls", "27")
    assert code == 0 and out["state"] == "running"
    code, out = cli(capsys, "run", "resume", "r", "--state", str(state), "--json")
    resumed = finished(capsys, twin, state, "r", code, out)
    assert story(state, "r") == story(tmp_path / "whole", "whole")
    assert resumed["cost"] == pytest.approx(whole["cost"], rel=1e-9)


@pytest.mark.parametrize(
    "more, field",
    [
        ((), "--policy"),
        (("--model", "MODEL"), "--model: fitted for up to 1"),
        (("--model", "MODEL", "--policy", "failover"), "--model"),
    ],
)
def test_mpc_model_refusals_are_one_line(
    more: tuple[str, ...], field: str, files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """mpc without a model, a model that does not cover the plan (fitted for 1 instance, the
    plan has 2), a model with another policy: one error line naming the option."""
    small = tmp_path / "small.json"
    small.write_text(json.dumps(fit_availability(TRACES["p3.2xlarge"], cap=1).to_dict()))
    argv = ["run", str(files[0]), "--plan", str(files[1]), "--policy", "mpc", "--state", str(tmp_path / "s")]
    argv += ["--endpoint-url", "http://127.0.0.1:9", *[str(small) if m == "MODEL" else m for m in more]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0], err
