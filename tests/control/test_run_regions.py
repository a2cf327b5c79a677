"""`dnnprov run` of a multi-region plan (TYPE@REGION, issue 33 item 2) against moto on loopback:
each pool launched in its region as its AWS type, the record and status naming pools by
TYPE@REGION, and a controller killed with SIGKILL resumed across both regions."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import boto3
import pytest
from control.test_kill_resume import WAIT_S, controller, kill, rows, wait_for
from control.test_loop import PLAN as LOOP_PLAN, problem as loop_problem

import dnnprov
from dnnprov.control.api import cancel_run, create_run, resume_run, run_plan, run_status
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import Catalog
from dnnprov.io.catalogs.regions import merge_regions
from dnnprov.problems.spot import SpotPool

pytest_plugins = ["conftest_aws"]

#: p3.2xlarge is cheapest in eu-west-1, g3.16xlarge in us-east-1; the quotas make the plan use both.
US_EAST = {"p3.2xlarge": 3.0, "g3.16xlarge": 1.0}
EU_WEST = {"p3.2xlarge": 0.5, "g3.16xlarge": 9.0}
QUOTAS = {"p3.2xlarge@eu-west-1": 1, "g3.16xlarge@us-east-1": 2, "p3.2xlarge@us-east-1": 0}
PLAN = {"p3.2xlarge@eu-west-1": 1, "g3.16xlarge@us-east-1": 1}


@pytest.fixture
def problem(make_region_catalog, make_region_problem) -> dnnprov.SpotProblem:
    catalog: Catalog = merge_regions(
        [make_region_catalog("us-east-1", US_EAST), make_region_catalog("eu-west-1", EU_WEST)], "two"
    )
    built = make_region_problem(catalog, QUOTAS)
    assert {k: n for k, n in dnnprov.solve(built, "milp").plan.counts.items() if n} == PLAN
    return built


def in_region(moto_url: str, region: str, run_id: str) -> list[dict[str, Any]]:
    """The run's instances moto holds in ``region``."""
    ec2 = boto3.client("ec2", endpoint_url=moto_url, region_name=region)
    return [
        i
        for r in ec2.describe_instances(Filters=[{"Name": "tag:dnnprov:run", "Values": [run_id]}])["Reservations"]
        for i in r["Instances"]
    ]


def held(moto_url: str, run_id: str) -> dict[str, list[str]]:
    """AWS types of the run's live instances per region."""
    return {
        region: sorted(
            i["InstanceType"]
            for i in in_region(moto_url, region, run_id)
            if i["State"]["Name"] in ("pending", "running")
        )
        for region in ("us-east-1", "eu-west-1")
    }


def test_each_pool_launches_in_its_region(problem: dnnprov.SpotProblem, moto_url: str, tmp_path: Path) -> None:
    state = tmp_path / "runs"
    run_id, outcome = run_plan(
        problem, {"counts": PLAN, "ps": 1}, "failover", endpoint_url=moto_url, state=state, max_polls=1
    )
    assert outcome is None
    # the PS in us-east-1, which holds 4 of the plan's 5 worker GPUs; AWS type names sent
    assert held(moto_url, run_id) == {"us-east-1": ["g3.16xlarge", "m5.xlarge"], "eu-west-1": ["p3.2xlarge"]}
    spot = {
        i["InstanceType"]: i.get("InstanceLifecycle")
        for region in ("us-east-1", "eu-west-1")
        for i in in_region(moto_url, region, run_id)
    }
    assert spot == {"g3.16xlarge": "spot", "p3.2xlarge": "spot", "m5.xlarge": None}
    status = run_status(run_id, state=state)
    assert status["held"] == {
        "ps m5.xlarge@us-east-1@on-demand on-demand": 1,
        "worker g3.16xlarge@us-east-1 spot": 1,
        "worker p3.2xlarge@eu-west-1 spot": 1,
    }
    launches = sorted(e["pool"] for e in status["events"] if e["kind"] == "launch")
    assert launches == ["g3.16xlarge@us-east-1", "m5.xlarge@us-east-1@on-demand", "p3.2xlarge@eu-west-1"]
    # a second controller (resume) sees both regions' instances: it launches nothing more
    assert resume_run(run_id, state=state, max_polls=1) is None
    assert held(moto_url, run_id) == {"us-east-1": ["g3.16xlarge", "m5.xlarge"], "eu-west-1": ["p3.2xlarge"]}
    done = cancel_run(run_id, state=state)
    assert done["state"] == "cancelled" and done["torn_down"]
    assert held(moto_url, run_id) == {"us-east-1": [], "eu-west-1": []}


def test_run_region_option_places_the_ps(problem: dnnprov.SpotProblem, moto_url: str, tmp_path: Path) -> None:
    state = tmp_path / "runs"
    run_id, _ = run_plan(
        problem,
        {"counts": PLAN, "ps": 1},
        "none",
        endpoint_url=moto_url,
        region="eu-west-1",
        state=state,
        max_polls=1,
    )
    assert held(moto_url, run_id) == {"us-east-1": ["g3.16xlarge"], "eu-west-1": ["m5.xlarge", "p3.2xlarge"]}
    assert "ps m5.xlarge@eu-west-1@on-demand on-demand" in run_status(run_id, state=state)["held"]
    cancel_run(run_id, state=state)
    assert held(moto_url, run_id) == {"us-east-1": [], "eu-west-1": []}


def test_killed_controller_resumes_across_regions(problem: dnnprov.SpotProblem, moto_url: str, tmp_path: Path) -> None:
    """SIGKILL right after the last worker launch (us-east-1) is written, a worker of the run
    terminated in eu-west-1 while no controller runs; `resume` adopts what each region holds,
    launches every step once and replaces the lost worker in its own region."""
    instance, plan = tmp_path / "instance.json", tmp_path / "plan.json"
    instance.write_text(json.dumps(problem.to_dict()))
    plan.write_text(json.dumps({"kind": "spot", "status": "feasible", "plan": {"counts": PLAN, "ps": 1}}))
    state, log = tmp_path / "runs", tmp_path / "controller.log"
    argv = [str(instance), "--plan", str(plan), "--policy", "failover", "--endpoint-url", moto_url]
    proc = controller(*argv, "--state", str(state), "--run-id", "mr", "--json", log=log)
    try:
        # steps: 1 the PS, 2 the eu-west-1 worker, 3 the us-east-1 worker (the pools' order)
        wait_for("the last launch step", lambda: bool(rows(state, "SELECT step FROM steps WHERE step >= 3")), proc)
        kill(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=WAIT_S)
    (lost,) = [i["InstanceId"] for i in in_region(moto_url, "eu-west-1", "mr")]
    boto3.client("ec2", endpoint_url=moto_url, region_name="eu-west-1").terminate_instances(InstanceIds=[lost])

    assert resume_run("mr", state=state, max_polls=1) is None
    assert held(moto_url, "mr") == {"us-east-1": ["g3.16xlarge", "m5.xlarge"], "eu-west-1": ["p3.2xlarge"]}
    launched = {
        region: sorted(i["InstanceType"] for i in in_region(moto_url, region, "mr"))
        for region in ("us-east-1", "eu-west-1")
    }
    # each step launched once: one PS and one g3.16xlarge in us-east-1, the lost p3.2xlarge and its replacement
    assert launched == {"us-east-1": ["g3.16xlarge", "m5.xlarge"], "eu-west-1": ["p3.2xlarge", "p3.2xlarge"]}
    steps = [
        {t["Key"]: t["Value"] for t in i["Tags"]}["dnnprov:step"]
        for region in ("us-east-1", "eu-west-1")
        for i in in_region(moto_url, region, "mr")
    ]
    assert len(steps) == len(set(steps)) == 4
    kinds = [e["kind"] for e in run_status("mr", state=state)["events"]]
    assert "resumed" in kinds
    replaced = [
        e
        for e in run_status("mr", state=state)["events"]
        if e["kind"] == "launch" and e["time_s"] > 0 and e["step"] > 3
    ]
    assert [e["pool"] for e in replaced] == ["p3.2xlarge@eu-west-1"]
    done = subprocess.run(
        [sys.executable, "-m", "dnnprov", "run", "cancel", "mr", "--state", str(state)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert done.returncode == 0 and "cancelled" in done.stdout, done.stderr
    assert held(moto_url, "mr") == {"us-east-1": [], "eu-west-1": []}


def test_a_plain_type_with_pools_in_two_regions_launches_in_its_zones_region(moto_url: str, tmp_path: Path) -> None:
    """A plain type name whose pools lie in two regions (us-east-1a, eu-west-1a): failover puts
    one worker in each pool, each launched through its zone's region, the PS in the run's; a
    second controller finds them there (it launches nothing more) and cancel ends both regions'.
    Before, the eu-west-1a launch went through us-east-1: InvalidParameterValue, the run failed."""
    base = loop_problem()
    p3 = next(t for t in base.instance_types if t.name == "p3.2xlarge")
    pools = (SpotPool("us-east-1a", spot_price_per_h=3.0), SpotPool("eu-west-1a", spot_price_per_h=0.5))
    problem = base.replace(instance_types=tuple(replace(t, zones=pools) if t is p3 else t for t in base.instance_types))
    state = tmp_path / "runs"
    run_id, outcome = run_plan(
        problem, LOOP_PLAN.to_dict(), "failover", endpoint_url=moto_url, state=state, max_polls=1
    )
    assert outcome is None
    live = {"us-east-1": ["m5.xlarge", "p3.2xlarge"], "eu-west-1": ["p3.2xlarge"]}
    assert held(moto_url, run_id) == live
    assert {i["Placement"]["AvailabilityZone"] for i in in_region(moto_url, "eu-west-1", run_id)} == {"eu-west-1a"}
    assert "us-east-1a" in {i["Placement"]["AvailabilityZone"] for i in in_region(moto_url, "us-east-1", run_id)}
    assert resume_run(run_id, state=state, max_polls=1) is None
    assert held(moto_url, run_id) == live
    assert cancel_run(run_id, state=state)["torn_down"]
    assert held(moto_url, run_id) == {"us-east-1": [], "eu-west-1": []}


def test_a_pool_outside_aws_is_refused_before_the_run_is_recorded(tmp_path: Path) -> None:
    """A zone that names no AWS region (a GCP zone) cannot be launched: one error naming the
    pool, and no run written (it used to be recorded, then fail at its first launch)."""
    base = loop_problem()
    problem = base.replace(
        instance_types=tuple(
            replace(t, zones=(SpotPool("us-west-2a"), SpotPool("us-central1-a"))) if t.name == "p3.2xlarge" else t
            for t in base.instance_types
        )
    )
    with pytest.raises(InvalidInputError) as err:
        create_run(problem, LOOP_PLAN.to_dict(), "failover", endpoint_url="http://127.0.0.1:9", state=tmp_path / "runs")
    assert err.value.field == "instance.instance_types.p3.2xlarge.zones[1].zone"
    assert "us-central1-a" in err.value.problem
    assert not (tmp_path / "runs").exists()
