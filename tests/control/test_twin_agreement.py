"""The loop through boto3 against the EC2 twin tells the same story as the loop on the trace
cloud: same launches, refusals, notices, reclaims and terminations at the same times, the
same outcome and the same bill."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import boto3
import numpy as np
import pytest
from control.test_loop import PLAN, problem

from dnnprov.control.loop import RunSettings
from dnnprov.control.replay import run_once
from dnnprov.control.twin.replay import run_on_twin, story
from dnnprov.problems.interruption import Trace, load_trace
from dnnprov.problems.spot import SpotProblem
from dnnprov.revocation.policies import make_policy
from dnnprov.revocation.policy_view import Policy

pytest_plugins = ["conftest_aws"]
REAL = Path(__file__).resolve().parents[2].parent / "shared/data/spot-traces/availability/16-node/aws-08-27-2023"


def hand(zone: str, alive: list[int]) -> Trace:
    return Trace(f"{zone}_v100_1.json", 300.0, np.array(alive, dtype=np.int64))


def setup(policy: str) -> tuple[SpotProblem, Callable[[], Policy]]:
    """The test problem (both markets for ``replan``: its takeovers may buy on-demand workers) and the policy's maker."""
    p = problem()
    if policy == "replan":
        p = p.replace(constraints=replace(p.constraints, markets=("spot", "on-demand")))

    def make() -> Policy:
        return make_policy(policy, None, problem=p, plan=PLAN) if policy == "replan" else make_policy(policy)

    return p, make


def both(traces: dict[str, list[Trace]], policy: str, offset: int, moto_url: str) -> tuple:
    settings = RunSettings(horizon=1.0)
    p, make = setup(policy)
    replay = run_once(p, PLAN, traces, make(), offset, settings)
    twin = run_on_twin(p, PLAN, traces, make, offset, settings, upstream=moto_url, region="us-west-2")
    return replay, twin


@pytest.mark.parametrize("policy", ["none", "failover", "uniform-progress", "replan"])
def test_twin_and_replay_agree_on_a_hand_made_window(policy: str, moto_url: str) -> None:
    traces = {
        "p3.2xlarge": [
            hand("us-west-2a", [2, 2, 1, 0, 0, 2] + [2] * 20),
            hand("us-west-2c", [0, 1, 1, 3, 0, 0] + [4] * 20),
        ]
    }
    replay, twin = both(traces, policy, 0, moto_url)
    assert story(twin) == story(replay)
    assert twin.outcome.state == replay.outcome.state
    assert twin.outcome.revocations == replay.outcome.revocations > 0
    assert twin.outcome.cost == pytest.approx(replay.outcome.cost, rel=1e-6)


@pytest.mark.skipif(not REAL.is_dir(), reason="../shared/data/spot-traces is absent (the real 16-node traces)")
@pytest.mark.parametrize("policy", ["failover", "replan"])
def test_twin_and_replay_agree_on_a_real_window(policy: str, moto_url: str) -> None:
    traces = {"p3.2xlarge": [load_trace(REAL / f"{zone}_v100_1.json") for zone in ("us-west-2a", "us-west-2c")]}
    replay, twin = both(traces, policy, 1073, moto_url)  # a window with notices and refusals
    assert replay.outcome.revocations == 2 and replay.outcome.refusals >= 3  # replan probes the pools more
    assert story(twin) == story(replay)
    assert twin.outcome.state == replay.outcome.state == "met"
    assert twin.outcome.cost == pytest.approx(replay.outcome.cost, rel=1e-6)


def launched_zones(moto_url: str, run_id: str, region: str) -> set[str]:
    """The zones of the run's instances that EC2 (moto) holds in ``region``."""
    ec2 = boto3.client("ec2", region_name=region, endpoint_url=moto_url)
    found = ec2.describe_instances(Filters=[{"Name": "tag:dnnprov:run", "Values": [run_id]}])
    return {i["Placement"]["AvailabilityZone"] for r in found["Reservations"] for i in r["Instances"]}


@pytest.mark.parametrize("policy", ["failover", "replan"])
def test_pools_of_one_type_in_two_regions_launch_in_their_zones_regions(policy: str, moto_url: str) -> None:
    """A plain type whose pools lie in us-west-2 and us-east-2 (as the real traces' do): each
    spot launch goes through its zone's region, as EC2 requires (a zone of another region is
    ``InvalidParameterValue``: the run failed there before), and the twin tells the replay's story."""
    traces = {
        "p3.2xlarge": [
            hand("us-west-2a", [1, 1, 0, 0, 0, 2] + [2] * 20),
            hand("us-east-2b", [0, 3, 3, 3, 0, 0] + [4] * 20),
        ]
    }
    p, make = setup(policy)
    settings, run_id = RunSettings(horizon=1.0), f"two-regions-{policy}"
    replay = run_once(p, PLAN, traces, make(), 0, settings)
    twin = run_on_twin(p, PLAN, traces, make, 0, settings, upstream=moto_url, region="us-west-2", run_id=run_id)
    assert {e.detail["pool"] for e in replay.events if e.kind == "launch"} >= {
        "p3.2xlarge@us-west-2a",
        "p3.2xlarge@us-east-2b",
    }
    assert story(twin) == story(replay)
    assert twin.outcome.state == replay.outcome.state == "met"
    assert twin.outcome.cost == pytest.approx(replay.outcome.cost, rel=1e-6)
    assert launched_zones(moto_url, run_id, "us-east-2") == {"us-east-2b"}
    assert "us-west-2a" in launched_zones(moto_url, run_id, "us-west-2")


@pytest.mark.skipif(not REAL.is_dir(), reason="../shared/data/spot-traces is absent (the real 16-node traces)")
def test_twin_and_replay_agree_on_a_real_window_over_two_regions(moto_url: str) -> None:
    traces = {"p3.2xlarge": [load_trace(REAL / f"{zone}_v100_1.json") for zone in ("us-west-2a", "us-east-2b")]}
    replay, twin = both(traces, "failover", 1406, moto_url)  # both regions' pools launched, two notices
    assert replay.outcome.revocations == 2
    assert story(twin) == story(replay)
    assert twin.outcome.state == replay.outcome.state == "met"
    assert twin.outcome.cost == pytest.approx(replay.outcome.cost, rel=1e-6)
