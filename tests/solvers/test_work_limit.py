"""Stopping like a MIP solver (issue 29): a deterministic work limit, progress callbacks with
a bound that never goes down, and a warm start."""

from __future__ import annotations

from pathlib import Path

import pytest

import dnnprov
from dnnprov.progress import Progress

LARGE = Path(__file__).resolve().parents[2] / "data" / "benchmarks" / "large" / "large-003.json"


@pytest.fixture(scope="module")
def large() -> dnnprov.SpotProblem:
    return dnnprov.read_instance(LARGE)


def test_work_limit_is_deterministic_and_its_bound_is_proven(large):
    first = dnnprov.solve(large, work_limit=40)
    again = dnnprov.solve(large, work_limit=40, time_limit_s=600)
    assert first.status is dnnprov.Status.LIMIT and "work limit of 40 nodes" in first.message
    assert (first.plan, first.cost, first.bound) == (again.plan, again.cost, again.bound)
    assert first.stats["nodes"] == 40
    optimum = dnnprov.solve(large)
    assert optimum.status is dnnprov.Status.OPTIMAL
    assert first.bound <= optimum.cost <= first.cost


def test_callback_bound_never_goes_down(large):
    events: list[Progress] = []
    result = dnnprov.solve(large, work_limit=60, callback=events.append)
    bounds = [e.value for e in events if e.kind == "bound"]
    incumbents = [e.value for e in events if e.kind == "incumbent"]
    assert len(bounds) > 3 and bounds == sorted(bounds)
    assert incumbents == sorted(incumbents, reverse=True) and incumbents[-1] == pytest.approx(result.cost)
    assert result.bound >= bounds[-1] - 1e-12 * abs(bounds[-1])
    assert all(e.work <= 60 for e in events)


def test_warm_start_is_checked_and_used(large):
    optimum = dnnprov.solve(large)
    warm = dnnprov.solve(large, warm_start=optimum.plan, work_limit=1)
    assert warm.cost == optimum.cost  # the given plan is the incumbent at once
    table1 = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    bad = dnnprov.SpotPlan(counts={"p3.2xlarge": 99}, ps=1)  # beyond its quota: not taken
    assert dnnprov.solve(table1, warm_start=bad).status is dnnprov.Status.OPTIMAL
    with pytest.raises(dnnprov.InvalidInputError, match="warm_start"):
        dnnprov.solve(table1, "enumerate", warm_start=bad)
    with pytest.raises(dnnprov.InvalidInputError, match="work_limit"):
        dnnprov.solve(table1, work_limit=0)


def test_work_limit_spans_the_solves_of_an_objective():
    table1 = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    budget = table1.replace(
        constraints=table1.constraints.__class__(**{**table1.constraints.__dict__, "budget_usd": 6.0})
    )
    full = dnnprov.solve(budget, objective="time")
    cut = dnnprov.solve(budget, objective="time", work_limit=5)
    assert full.status is dnnprov.Status.OPTIMAL
    assert cut.status is dnnprov.Status.LIMIT and cut.bound <= full.time_s


@pytest.fixture(scope="module")
def resnet50() -> dnnprov.ServerlessProblem:
    return dnnprov.read_instance(dnnprov.embedded_instance("serverless/paper-table3-resnet50.json"))


def test_serverless_milp_work_limit_counts_plans_and_keeps_a_proven_bound(resnet50):
    optimum = dnnprov.solve(resnet50)
    first = dnnprov.solve(resnet50, work_limit=50)
    again = dnnprov.solve(resnet50, work_limit=50, time_limit_s=600)
    assert optimum.status is dnnprov.Status.OPTIMAL
    assert first.status is dnnprov.Status.LIMIT and "work limit of 50 plans" in first.message
    assert (first.plan, first.cost, first.bound) == (again.plan, again.cost, again.bound)
    assert first.bound <= optimum.cost <= first.cost


@pytest.mark.parametrize("instance", ["spot/paper-table1.json", "serverless/paper-table3-resnet50.json"])
def test_enumerate_work_limit_sees_exactly_the_first_plans(instance):
    problem = dnnprov.read_instance(dnnprov.embedded_instance(instance))
    whole = dnnprov.solve(problem, "enumerate")
    size = whole.stats["plans_evaluated"]
    first = dnnprov.solve(problem, "enumerate", work_limit=size - 7)
    again = dnnprov.solve(problem, "enumerate", work_limit=size - 7, time_limit_s=600)
    assert first.status is dnnprov.Status.LIMIT and f"work limit of {size - 7:,} plans" in first.message
    assert first.stats["plans_evaluated"] == size - 7
    assert (first.plan, first.cost, first.bound) == (again.plan, again.cost, again.bound)
    assert first.bound == 0.0 and (first.cost is None or first.cost >= whole.cost)
    enough = dnnprov.solve(problem, "enumerate", work_limit=size)
    assert enough.status is dnnprov.Status.OPTIMAL and enough.plan == whole.plan
