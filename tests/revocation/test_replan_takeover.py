"""The ``replan`` policy's takeover: under the quotas (the loop trains every worker it holds up to
them), from the progress the run is sure to have when its launches join (the notified workers'
two minutes included)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from control.test_loop import problem

import dnnprov
from dnnprov.control.replay import RunSettings, Simulation, run_many
from dnnprov.control.trainer import ProgressModel
from dnnprov.problems.interruption import Trace, load_trace
from dnnprov.result import SpotPlan
from dnnprov.revocation.policies import make_policy
from dnnprov.revocation.policy_view import Policy, most_workers
from dnnprov.revocation.replay.hindsight import Hindsight

V100 = Path(__file__).resolve().parents[3] / "shared" / "data" / "spot-traces" / "availability" / "16-node"


PLAN = SpotPlan(counts={"p3.2xlarge": 2}, ps=1)


def both_markets(p: dnnprov.SpotProblem) -> dnnprov.SpotProblem:
    return p.replace(constraints=replace(p.constraints, markets=("spot", "on-demand")))


def zone_lost_after(ticks: int) -> dict[str, list[Trace]]:
    """Zone a holds the plan's 2 workers for ``ticks`` ticks of 300 s, then nothing; zone c never has room."""
    return {
        "p3.2xlarge": [
            Trace("t/us-west-2a_v100_1.json", 300.0, np.array([2] * ticks + [0] * (45 - ticks))),
            Trace("t/us-west-2c_v100_1.json", 300.0, np.array([0] * 45)),
        ]
    }


def one_window(p: dnnprov.SpotProblem, traces: dict[str, list[Trace]], make: Callable[[], Policy]) -> dict:
    """The run of :data:`PLAN` from the traces' start (offset 0), as ``simulate --per-run`` reports it."""
    (run,) = run_many(p, PLAN, traces, make, runs=1, seed=0, settings=RunSettings(horizon=3.0), offsets=[0])
    return run.to_dict()


def test_a_takeover_may_hold_more_workers_than_the_plan_up_to_the_quota() -> None:
    """Both workers of a plan with no slack are warned at 600 s and no spot capacity is left:
    two on-demand workers joining at 726 s finish 6 s late, so the takeover (under the quota of
    8, as spotDNN re-provisions) buys three, and all three train."""
    p = both_markets(problem(slack=1.0))
    policy = make_policy("replan", None, problem=p, plan=PLAN)
    assert policy.up_to_quota and list(most_workers(p, PLAN, policy.up_to_quota)) == [16]  # 8 spot + 8 on demand
    assert list(most_workers(p, PLAN, False)) == [2]
    out = one_window(p, zone_lost_after(2), lambda: policy)
    od = [e for e in out["events"] if e["kind"] == "launch" and e["pool"] == "p3.2xlarge@on-demand"]
    assert [(e["time_s"], e["got"]) for e in od] == [(600.0, 3)]
    assert out["met_deadline"] and out["finish_s"] <= p.slo.time_s
    # the same window with the plan's two workers at most (the trainer's cap for other policies)
    capped = ProgressModel(p, PLAN, 126.0, up_to_quota=False)
    three = np.array([3])
    assert capped.speed(np.minimum(three, capped.most), 1) < ProgressModel(p, PLAN, 126.0, True).speed(three, 1)


def test_notified_workers_train_until_reclaimed_in_the_takeover() -> None:
    """Both workers are warned at 1,500 s and no spot capacity is left anywhere. Counting their
    two minutes of notice, two on-demand workers joining at 1,626 s finish by the deadline; a
    takeover that counts nothing until its launches join (the join as overhead) buys four and
    more (within the plan's two workers it found none, relaunched spot and missed)."""
    p = both_markets(problem(slack=1.03))
    out = one_window(p, zone_lost_after(5), lambda: make_policy("replan", None, problem=p, plan=PLAN))
    notices = [e["time_s"] for e in out["events"] if e["kind"] == "notice"]
    od = [e for e in out["events"] if e["kind"] == "launch" and e["pool"] == "p3.2xlarge@on-demand"]
    assert notices == [1500.0, 1500.0]
    assert od and od[0]["time_s"] == 1500.0 and od[0]["got"] == 2  # replaced during the notice
    assert out["met_deadline"] and out["finish_s"] <= p.slo.time_s


@pytest.mark.skipif(not V100.is_dir(), reason="../shared/data/spot-traces (real traces) is absent")
def test_replan_meets_every_deadline_that_no_revocation_threatens() -> None:
    """milp + replan on the real V100 traces (both markets): a run without a revocation meets
    its deadline (a launch refused at the start once cost such runs theirs: the takeover was
    cut to the plan's workers after it was solved, and the join counted against workers that
    were already training)."""
    p = both_markets(problem(hours=0.5, slack=1.0))
    zones = [z for z in sorted((V100 / "aws-08-27-2023").glob("us-west-2*_v100_1.json"))]
    assert len(zones) >= 2
    p = p.replace(
        instance_types=tuple(
            replace(t, zones=tuple(replace(t.zones[0], zone=f.name.split("_")[0]) for f in zones))
            for t in p.instance_types
        )
    )
    plan = dnnprov.solve(p, "milp").plan
    assert plan is not None
    traces = {"p3.2xlarge": [load_trace(f) for f in zones]}
    out = Simulation(p, plan, traces, policy="replan", runs=30, seed=0).to_dict(per_run=True)
    calm = [r for r in out["per_run"] if r["revocations"] == 0]
    assert calm and all(r["met_deadline"] for r in calm)


def test_replan_hindsight_ranges_over_the_quotas() -> None:
    """A bound for ``replan`` must cover clusters up to the quotas (its takeovers hold more than
    the plan): ``simulate --hindsight`` says so in ``hindsight_scope`` and the bound stays below
    every run that met T_obj; other policies keep the plan's scope."""
    p = both_markets(problem(slack=1.0))
    plan = SpotPlan(counts={"p3.2xlarge": 2}, ps=1)
    traces = {
        "p3.2xlarge": [
            Trace("t/us-west-2a_v100_1.json", 300.0, np.array([2, 2, 0, 1, 0, 2] * 30)),
            Trace("t/us-west-2c_v100_1.json", 300.0, np.array([1, 0, 0, 2, 2, 1, 0] * 26)),
        ]
    }
    assert Hindsight(p, plan).workers.max() == 2
    # up to the quotas (16), less the clusters outside the loss model's domain (|N| <= 10 here)
    assert Hindsight(p, plan, up_to_quota=True).workers.max() == 10
    out = Simulation(p, plan, traces, policy="replan", runs=6, seed=1, hindsight=True).to_dict(per_run=True)
    assert out["settings"]["hindsight_scope"] == "quotas"
    met = [r for r in out["per_run"] if r["met_deadline"]]
    assert met and all(r["hindsight_cost"] <= r["cost"] for r in met)
    plain = Simulation(p, plan, traces, policy="failover", runs=1, seed=1, hindsight=True).to_dict()
    assert plain["settings"]["hindsight_scope"] == "plan"


@pytest.mark.parametrize("method", ["exact", "heuristic"])
def test_an_exact_takeover_falls_back_to_on_demand_on_a_spot_only_instance(method: str) -> None:
    """The instance offers spot only, both workers are warned at 1,500 s and no spot capacity is
    left: no takeover on spot meets T_obj, so dnnprov's exact takeover is solved again with
    on-demand workers (every type has an on-demand price) and meets it; spotDNN's heuristic
    stays on spot and misses."""
    p = problem(slack=1.03)
    assert p.constraints.markets == ("spot",)
    assert list(most_workers(p, PLAN, True)) == [16]  # the on-demand quota counts: a takeover may fall back to it
    out = one_window(
        p, zone_lost_after(5), lambda: make_policy("replan", None, problem=p, plan=PLAN, replan_method=method)
    )
    od = [
        (e["time_s"], e["got"])
        for e in out["events"]
        if e["kind"] == "launch" and e["pool"].endswith("on-demand") and e["role"] == "worker"
    ]
    if method == "exact":
        assert od == [(1500.0, 2)] and out["met_deadline"]
    else:
        assert od == [] and not out["met_deadline"]
