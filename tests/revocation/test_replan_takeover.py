"""The ``replan`` policy's takeover: within the workers the loop trains, and from the progress
the run is sure to have when its launches join (the notified workers' two minutes included)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from control.test_loop import problem
from dnnprov.solvers.milp import solve_spot

import dnnprov
from dnnprov.control.replay import RunSettings, Simulation, run_many
from dnnprov.models.spot import SpotModel
from dnnprov.problems.interruption import Trace, load_trace
from dnnprov.result import SpotPlan
from dnnprov.revocation.policies import make_policy
from dnnprov.revocation.replan import predicted_loss, replanned_problem
from dnnprov.revocation.replan_policy import within_workers

V100 = Path(__file__).resolve().parents[3] / "shared" / "data" / "spot-traces" / "availability" / "16-node"


def both_markets(p: dnnprov.SpotProblem) -> dnnprov.SpotProblem:
    return p.replace(constraints=replace(p.constraints, markets=("spot", "on-demand")))


@pytest.mark.parametrize("want", [2, 3])
def test_takeover_rows_keep_both_markets_within_the_workers_and_stay_exact(want: int) -> None:
    """The plan's 2 spot workers after 10 min, the join counted as overhead (as the policy once
    solved it): 2 workers are then too slow, and the cheapest takeover adds an on-demand worker
    to the 2 spot ones. Within ``want`` workers of the type (both markets) the side rows leave
    no plan for 2 and 3 spot workers for 3; the exact solve equals exhaustive search over the
    plans that meet the rows either way."""
    p = both_markets(problem(slack=1.0))
    base = p.replace(instance_types=tuple(replace(t, quota=want, on_demand_quota=want) for t in p.instance_types))
    loss = predicted_loss(base, {"p3.2xlarge": 2}, 600.0)
    takeover = replanned_problem(base, {"p3.2xlarge": 2}, {}, 600.0, loss, takeover_overhead_s=126.0, ps=1)
    rows = within_workers(takeover, np.array([want]))
    assert rows is not None and rows.names == ("workers of p3.2xlarge",)
    held = solve_spot(takeover, side=rows)
    model = SpotModel(takeover)
    box = [c for c in itertools.product(range(want + 1), repeat=len(model.columns.labels)) if sum(c) <= want]
    ev = model.evaluate(np.array(box), 1)
    if want == 2:
        free = solve_spot(takeover)
        assert free.plan is not None and sum(free.plan.counts.values()) == 3  # beyond the workers
        assert not ev.feasible.any() and held.status is dnnprov.Status.INFEASIBLE
    else:
        best = int(np.argmin(np.where(ev.feasible, ev.cost, np.inf)))
        assert ev.feasible[best] and held.status is dnnprov.Status.OPTIMAL and held.plan is not None
        assert held.cost == pytest.approx(float(ev.cost[best]), rel=1e-9)
        assert held.plan.counts == {"p3.2xlarge": 3, "p3.2xlarge:on-demand": 0}


def test_within_workers_has_no_row_for_one_market() -> None:
    assert within_workers(problem(), np.array([2])) is None  # spot only: the quota caps it


def test_notified_workers_train_until_reclaimed_in_the_takeover() -> None:
    """Both workers are warned at 1,500 s and no spot capacity is left anywhere. Counting their
    two minutes of notice, two on-demand workers joining at 1,626 s finish by the deadline; a
    takeover that counts nothing until its launches join (the join as overhead) finds no plan
    within the plan's workers, relaunches spot and misses."""
    p = both_markets(problem(slack=1.03))
    plan = SpotPlan(counts={"p3.2xlarge": 2}, ps=1)
    traces = {
        "p3.2xlarge": [
            Trace("t/us-west-2a_v100_1.json", 300.0, np.array([2] * 5 + [0] * 40)),
            Trace("t/us-west-2c_v100_1.json", 300.0, np.array([0] * 45)),
        ]
    }
    (run,) = run_many(
        p,
        plan,
        traces,
        lambda: make_policy("replan", None, problem=p, plan=plan),
        runs=1,
        seed=0,
        settings=RunSettings(horizon=3.0),
        offsets=[0],
    )
    out = run.to_dict()
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
