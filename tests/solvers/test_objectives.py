"""Objectives (least time under a budget, weighted) and exact Pareto fronts (issue 29, items 2-3).

Oracles: brute force over every plan (:mod:`dnnprov.fuzz.fronts`, independent of the walk
and of ``enumerate``), the issue's Table I figures (37 nondominated plans; 2,514.09 s under
$6), and exhaustive search through ``enumerate``. The 1,000+-instance run is
benchmarks/fuzz_objectives.py (docs/benchmarks.md); this is its CI slice.
"""

from __future__ import annotations

import dataclasses
import math
import zlib

import numpy as np
import pytest
from dnnprov.solvers.objectives.front import NO_DEADLINE_S, at_deadline, faster_than

import dnnprov
from dnnprov import Objective, Status, fuzz
from dnnprov.fuzz.fronts import CASES, brute_front, check_front, check_instance, check_objective, feasible_plans

pytestmark = pytest.mark.filterwarnings("ignore::dnnprov.errors.PlausibilityWarning")

#: The nastiest families first: ties in time and cost, deadlines and budgets at a plan,
#: the reference model's rounded times and costs, zero prices, prices over 24 decades.
NASTY = (
    "tied-types",
    "slo-at-plan",
    "budget-at-plan",
    "reference-model",
    "price-decades",
    "price-magnitudes",
    "all-magnitudes",
    "ps-ranges",
    "existing",
    "no-cc-j-nonpositive",
    "serverless-deadline",
    "serverless-magnitudes",
    "mixed",
    "embedded",
)
SEEDS = 3


@pytest.fixture(scope="module")
def table1():
    return dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))


def with_budget(problem, budget):
    return problem.replace(constraints=dataclasses.replace(problem.constraints, budget_usd=budget))


# ------------------------------------------------------------------ Table I
def test_table1_whole_front_has_37_proven_points(table1):
    """The issue's figure: 37 nondominated plans, every one proven, equal to brute force."""
    front = dnnprov.pareto(table1)
    assert front.status is Status.OPTIMAL and front.complete and len(front.points) == 37
    assert all(p.proven for p in front.points)
    truth = brute_front(*feasible_plans(at_deadline(table1, NO_DEADLINE_S)))
    assert [(p.time_s, p.cost) for p in front.points] == truth
    assert front.stats["exact_solves"] == 38  # one per point and the infeasible end
    assert (2381.24, 7.233149) in truth  # the point the sweep grid missed


def test_table1_front_between_deadlines(table1):
    """[2400, 2600]: five points, the instance's own optimum ($5.448374 at 2,567.70 s) the slowest."""
    front = dnnprov.pareto(table1, (2400, 2600))
    assert [(p.time_s, p.cost) for p in front.points][-1] == (2567.70, 5.448374)
    assert len(front.points) == 5 and front.status is Status.OPTIMAL
    same = dnnprov.pareto(table1, (2400, 2600), method="enumerate")
    assert [(p.time_s, p.cost, p.proven) for p in same.points] == [(p.time_s, p.cost, p.proven) for p in front.points]


def test_table1_least_time_under_six_dollars(table1):
    """The issue's figure: 2,514.09 s under $6, proven; enumerate agrees."""
    problem = with_budget(table1, 6.0)
    result = dnnprov.solve(problem, objective="time")
    assert result.status is Status.OPTIMAL and (result.time_s, result.cost) == (2514.09, 5.924872)
    assert result.bound == result.time_s and result.gap == 0 and result.objective == Objective("time")
    d = result.to_dict()
    assert d["objective"] == "time" and d["objective_value"] == 2514.09 and d["bound"] == 2514.09
    oracle = dnnprov.solve(problem, "enumerate", objective="time")
    assert (oracle.time_s, oracle.cost) == (result.time_s, result.cost)


def test_table1_budget_exactly_at_a_front_point(table1):
    """A budget equal to a front point's cost admits that point: its time is the answer."""
    front = dnnprov.pareto(table1, (None, table1.slo.time_s))
    for point in front.points:
        result = dnnprov.solve(with_budget(table1, point.cost), objective="time")
        assert (result.status, result.time_s, result.cost) == (Status.OPTIMAL, point.time_s, point.cost)


def test_weighted_ties_between_two_front_points(table1):
    """With W the slope between two neighbouring front points both have the same value (a tie
    unless another point does better); milp's least value equals enumerate's."""
    points = dnnprov.pareto(table1, (None, table1.slo.time_s)).points
    slow, fast = points[-1], points[-2]
    weight = (fast.cost - slow.cost) / (slow.time_s - fast.time_s)
    result = dnnprov.solve(table1, objective=f"weighted:{weight!r}")
    oracle = dnnprov.solve(table1, "enumerate", objective=f"weighted:{weight!r}")
    assert result.status is Status.OPTIMAL and result.value == oracle.value
    assert result.value <= min(p.cost + weight * p.time_s for p in points)
    zero = dnnprov.solve(table1, objective="weighted:0")
    assert zero.cost == dnnprov.solve(table1).cost


# ------------------------------------------------------------------ generated instances
@pytest.mark.parametrize("family", NASTY)
def test_fronts_and_objectives_match_brute_force(family):
    """Every case of check_instance (three fronts, time under a budget, weighted) on the nasty families."""
    findings = []
    for seed in range(SEEDS):
        rng = np.random.default_rng([zlib.crc32(family.encode()), seed, 29])
        out = check_instance(fuzz.instance(family, seed), rng, family=family, seed=seed)
        assert set(out) == set(CASES)
        findings += [f for found in out.values() for f in found]
    assert not findings, "\n".join(map(str, findings))


def test_faster_than_admits_exactly_the_faster_times(table1):
    """The next deadline admits every float below t and none at or above it (both tests of the model)."""
    paper = table1.replace(model="paper")
    rng = np.random.default_rng(29)
    for problem, factor in ((table1, 1.0), (paper, 1 + 1e-12)):
        for t in [*rng.uniform(1, 1e6, 200), 2600.0, 1.0000000000000002, 4503599627370496.0 / 4096]:
            d = faster_than(problem, float(t))
            assert d * factor < t <= float(np.nextafter(d, math.inf)) * factor
            assert float(np.nextafter(t, 0)) <= d * factor  # the next float down is admitted


def test_zero_prices_give_one_point():
    """All plans free: the front is the fastest plan alone (ties in cost keep the faster)."""
    problem = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    free = problem.replace(
        instance_types=tuple(dataclasses.replace(t, spot_price_per_h=0.0) for t in problem.instance_types)
    )
    front = dnnprov.pareto(free)
    truth = brute_front(*feasible_plans(at_deadline(free, NO_DEADLINE_S)))
    assert len(truth) == 1 and [(p.time_s, p.cost) for p in front.points] == truth and front.points[0].proven


def stopping_after(calls: int):
    """The exact black box, whose solves after the first ``calls`` meet an expired clock (a
    deterministic stand-in for a time limit reached in the middle of a walk)."""
    from dnnprov.dispatch import exact_min_cost
    from dnnprov.progress import Clock

    made = []

    def exact(problem, clock):
        made.append(problem)
        return exact_min_cost(problem, clock if len(made) <= calls else Clock(1e-9))

    return exact


@pytest.mark.parametrize("calls", [0, 1, 3, 6])
def test_a_stopped_front_claims_only_true_points(table1, calls):
    """Stopped after a few solves, the walk is incomplete and every point it marks proven is on the front."""
    from dnnprov.solvers.objectives.front import walk_front

    from dnnprov.progress import Clock

    points, complete, solves, message = walk_front(table1, stopping_after(calls), 0.0, NO_DEADLINE_S, Clock(60))
    truth = brute_front(*feasible_plans(at_deadline(table1, NO_DEADLINE_S)))
    assert not complete and solves == calls + 1 and "time limit" in message
    assert sum(p.proven for p in points) == max(calls - 1, 0)
    assert all((p.time_s, p.cost) in truth for p in points if p.proven)
    assert dnnprov.pareto(table1, time_limit_s=1e-9).status is Status.LIMIT


@pytest.mark.parametrize("calls", [0, 1, 2, 4])
def test_a_stopped_objective_keeps_a_true_bound(table1, calls):
    """Stopped after a few solves, least time and weighted end at limit with bounds no plan beats."""
    from dnnprov.solvers.objectives.beyond_cost import least_time, least_weighted

    from dnnprov.progress import Clock, SolverLog

    problem = with_budget(table1, 6.0)
    result = least_time(problem, stopping_after(calls), Clock(60), SolverLog(Clock(60)))
    assert result.status is Status.LIMIT and result.bound <= 2514.09
    assert result.plan is None or result.cost <= 6.0
    weighted = Objective("weighted", 0.002)
    result = least_weighted(table1, stopping_after(calls), weighted, Clock(60), SolverLog(Clock(60)))
    best = dnnprov.solve(table1, "enumerate", objective=weighted).value
    assert result.status is Status.LIMIT and result.bound <= best


# ------------------------------------------------------------------ the checker can fail
def test_the_checker_sees_a_wrong_front(monkeypatch):
    """A walk that loses a point, or calls a dominated plan proven, is reported."""
    import dnnprov.solvers.objectives.front as front_module

    problem = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    real = front_module.walk_front

    def lossy(*args):
        points, complete, solves, message = real(*args)
        return points[1:], complete, solves, message

    monkeypatch.setattr(front_module, "walk_front", lossy)
    assert [f.kind for f in check_front(problem, (None, None))] == ["wrong-front"]

    def dominated(*args):
        points, complete, solves, message = real(*args)
        worse = dataclasses.replace(points[0], cost=points[0].cost * 2)
        return [worse, *points[1:]], complete, solves, message

    monkeypatch.setattr(front_module, "walk_front", dominated)
    kinds = {f.kind for f in check_front(problem, (None, None))}
    assert {"false-proven", "wrong-front", "wrong-plan"} <= kinds


def test_least_time_is_one_search_by_time(table1):
    """Table I under $6: 2,514.09 s (and its cost) proven by one search by time."""
    result = dnnprov.solve(with_budget(table1, 6.0), objective="time")
    assert result.status is Status.OPTIMAL and result.time_s == pytest.approx(2514.09, abs=1e-9)
    assert result.cost == pytest.approx(5.924872, abs=1e-6) and result.stats["exact_solves"] == 1
    assert result.bound == result.time_s


def test_the_checker_sees_a_wrong_objective(monkeypatch):
    """An answer that skipped the faster plans is a false optimum (seen with the steps alone)."""
    from dnnprov.solvers.objectives import beyond_cost as objectives, fastest

    problem = with_budget(dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json")), 6.0)
    assert check_objective(problem, Objective("time")) == []
    with monkeypatch.context() as patch:  # the steps alone (the one-pass search proves nothing)
        patch.setattr(fastest, "fastest_within_budget", lambda *a, **k: fastest.FastestTime(None, False, False, ""))
        patch.setattr(objectives, "FIRST_ALPHA", 0.2)  # a poor model of the front: still right
        assert check_objective(problem, Objective("time")) == []
        patch.setattr(objectives, "faster_than", lambda problem, t: 0.0)  # "no faster deadline above lo"
        assert [f.kind for f in check_objective(problem, Objective("time"))] == ["false-optimal", "bound-above-optimum"]


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda p: dnnprov.solve(p, objective="time"), "constraints.budget_usd"),
        (lambda p: dnnprov.solve(p, objective="fastest"), "objective"),
        (lambda p: dnnprov.solve(p, objective="weighted:-1"), "objective"),
        (lambda p: dnnprov.solve(p, objective="weighted:nan"), "objective"),
        (lambda p: dnnprov.solve(p, "heuristic", objective="weighted:1"), "objective"),
        (lambda p: dnnprov.solve(p, objective="weighted:1", gap=0.1), "gap"),
        (lambda p: dnnprov.solve(p, objective="weighted:1", robust=1), "objective"),
        (lambda p: dnnprov.pareto(p, (3000, 2000)), "deadlines"),
        (lambda p: dnnprov.pareto(p, (-1, None)), "deadlines"),
        (lambda p: dnnprov.pareto(p, (None, math.inf)), "deadlines"),
        (lambda p: dnnprov.pareto(p, (1,)), "deadlines"),
        (lambda p: dnnprov.pareto(p, method="heuristic"), "method"),
        (lambda p: dnnprov.pareto(p, time_limit_s=0), "time_limit_s"),
    ],
)
def test_bad_input_is_one_error_naming_the_field(table1, call, field):
    with pytest.raises(dnnprov.InvalidInputError) as caught:
        call(table1)
    assert caught.value.field == field


def test_serverless_objectives_and_front():
    """The serverless exact method is the same black box: front and objectives equal brute force."""
    problem = dnnprov.read_instance(dnnprov.embedded_instance("serverless/paper-table3-resnet50.json"))
    front = dnnprov.pareto(problem)
    assert front.status is Status.OPTIMAL
    assert [(p.time_s, p.cost) for p in front.points] == brute_front(
        *feasible_plans(at_deadline(problem, NO_DEADLINE_S))
    )
    for objective in (Objective("time"), Objective("weighted", 1e-3)):
        budgeted = with_budget(problem, 0.3) if objective.kind == "time" else problem
        assert check_objective(budgeted, objective) == []
