"""`dnnprov run` survives its own `kill -9` (issue 28): real controller subprocesses, real
SIGKILL, the EC2 twin over moto on loopback.

The twin runs on its stepped clock, so no twin time passes while no controller runs: a run
killed and resumed must tell exactly the story of the same window replayed on the trace cloud
(launches, notices, reclaims, terminations, outcome and bill), launch every step once, and
leave nothing running. (The accelerated version, where downtime costs, is
benchmarks/kill_controller.py.)
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from control.test_resume import POOLS, PROBLEM, REGION, TRACES, files, launched_once, reset_moto, story, twin_bill  # noqa: F401

from dnnprov.control.loop import RunSettings
from dnnprov.control.replay import run_once
from dnnprov.control.twin.replay import story as replay_story
from dnnprov.control.twin.server import Twin
from dnnprov.result import SpotPlan
from dnnprov.revocation.policies import make_policy

pytest_plugins = ["conftest_aws"]
WAIT_S = 300.0  # generous bound of every wait (a loaded machine)


@pytest.fixture
def twin(moto_url: str) -> Iterator[Twin]:
    with Twin(POOLS, upstream=moto_url, mode="stepped", region=REGION) as started:
        yield started
    reset_moto(moto_url)


def controller(*argv: str, log: Path) -> subprocess.Popen:
    """``dnnprov run ...`` as a subprocess (its output in ``log``)."""
    with log.open("a") as out:
        return subprocess.Popen([sys.executable, "-m", "dnnprov", "run", *argv], stdout=out, stderr=out)


def wait_for(what: str, ready: Callable[[], bool], proc: subprocess.Popen | None = None) -> None:
    """Poll ``ready`` until it holds (bounded); fails when ``proc`` ended first."""
    deadline = time.monotonic() + WAIT_S
    while not ready():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the controller exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {WAIT_S:.0f} s")
        time.sleep(0.005)


def rows(state: Path, sql: str) -> list[tuple[Any, ...]]:
    """Rows of the run record, read-only ([] while it does not exist)."""
    path = state / "runs.db"
    if not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute(sql).fetchall()
    except sqlite3.OperationalError:  # the tables are not made yet
        return []
    finally:
        db.close()


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=WAIT_S) == -signal.SIGKILL


def left_in_ec2(twin: Twin, run_id: str) -> list[str]:
    ec2 = boto3.client("ec2", endpoint_url=twin.url, region_name=REGION)
    return [
        i["InstanceId"]
        for r in ec2.describe_instances(Filters=[{"Name": "tag:dnnprov:run", "Values": [run_id]}])["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] in ("pending", "running")
    ]


def test_killed_twice_and_resumed_tells_the_uninterrupted_story(
    files: tuple[Path, Path],  # noqa: F811 - test_resume's fixture
    twin: Twin,
    tmp_path: Path,
) -> None:
    """SIGKILL right after the first launch step is written, and again right after the first
    notice is journaled (while the controller reacts to it); `run resume` each time."""
    instance, plan = files
    state, log = tmp_path / "runs", tmp_path / "controller.log"
    proc = controller(
        str(instance),
        "--plan",
        str(plan),
        "--policy",
        "failover",
        "--endpoint-url",
        twin.url,
        "--region",
        REGION,
        "--state",
        str(state),
        "--run-id",
        "k",
        "--json",
        log=log,
    )
    try:
        wait_for("first launch step", lambda: bool(rows(state, "SELECT step FROM steps")), proc)
        kill(proc)
        assert "pid" in (state / "k.lock").read_text()  # the dead owner's lock file is still there
        proc = controller("resume", "k", "--state", str(state), "--json", log=log)
        wait_for("notice", lambda: bool(rows(state, "SELECT seq FROM events WHERE kind = 'notice'")), proc)
        kill(proc)
        proc = controller("resume", "k", "--state", str(state), "--json", log=log)
        assert proc.wait(timeout=WAIT_S) == 0, log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=WAIT_S)
    out = json.loads(log.read_text()[log.read_text().rindex('{\n  "run"') :])
    replay = run_once(
        PROBLEM, SpotPlan(counts={"p3.2xlarge": 2}, ps=1), TRACES, make_policy("failover"), 0, RunSettings()
    )
    launched_once(twin, state, "k")
    assert left_in_ec2(twin, "k") == [] and all(i.ended_s is not None for i in twin.instances())
    # a kill between a refusal and the controller keeping its back-off may add a refusal on resume
    assert [e for e in story(state, "k") if e[0] != "refused"] == [e for e in replay_story(replay) if e[0] != "refused"]
    assert out["state"] == replay.outcome.state == "met"
    assert out["finish_s"] == pytest.approx(replay.outcome.finish_s)
    assert out["cost"] == pytest.approx(replay.outcome.cost, rel=1e-9)
    assert out["cost"] == pytest.approx(twin_bill(twin, "k"), rel=1e-9)
    kinds = [e[0] for e in rows(state, "SELECT kind FROM events ORDER BY seq")]
    assert kinds.count("resumed") == 2 and kinds[-1] == "end"


def test_cancel_after_a_kill_tears_the_run_down(files: tuple[Path, Path], twin: Twin, tmp_path: Path) -> None:  # noqa: F811 - test_resume's fixture
    """`run cancel` while no controller runs (killed right after its first worker launch is
    written): the lock is free, the cancel tears everything down, nothing is left."""
    instance, plan = files
    state, log = tmp_path / "runs", tmp_path / "controller.log"
    proc = controller(
        str(instance),
        "--plan",
        str(plan),
        "--policy",
        "failover",
        "--endpoint-url",
        twin.url,
        "--region",
        REGION,
        "--state",
        str(state),
        "--run-id",
        "c",
        "--json",
        log=log,
    )
    try:
        wait_for("a worker launch step", lambda: bool(rows(state, "SELECT step FROM steps WHERE step >= 2")), proc)
        kill(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=WAIT_S)
    done = subprocess.run(
        [sys.executable, "-m", "dnnprov", "run", "cancel", "c", "--state", str(state)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert done.returncode == 0 and "cancelled" in done.stdout, done.stderr
    status = json.loads(
        subprocess.run(
            [sys.executable, "-m", "dnnprov", "run", "status", "c", "--state", str(state), "--json"],
            capture_output=True,
            text=True,
            timeout=WAIT_S,
        ).stdout
    )
    assert status["state"] == "cancelled" and status["held"] == {}
    launched_once(twin, state, "c")
    assert left_in_ec2(twin, "c") == [] and all(i.ended_s is not None for i in twin.instances())
