"""Exhaustive search: published optimum, agreement with brute force, never beaten by heuristics."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
from dnnprov.solvers.search import enumeration
from numpy.testing import assert_allclose

import dnnprov
from dnnprov import ServerlessModel, SpotModel, Status

TYPE_NAMES = ("p3.2xlarge", "g4dn.4xlarge", "g3.8xlarge", "g3.16xlarge", "p2.8xlarge")
N_RANDOM = 60
BRUTE_FORCE_MAX_SPACE = 1500

# (model, loss variant, gamma_4) cycled over the random spot instances
SPOT_VARIANTS = [("paper", "cc", 0.1), ("paper", "cc", 1.0), ("paper", "no-cc", 1.0), ("reference", "no-cc", 0.1)]


def plan_counts(result: dnnprov.Result, labels) -> np.ndarray:
    """The spot plan's counts in column order."""
    return np.array([result.plan.counts[label] for label in labels], dtype=np.int64)


# ---------------------------------------------------------------- published results
def test_enumerate_finds_table1_optimum(resnet110_table1):
    """Quotas [0,5,5,5,5], (0.8, 2600): 3 g4dn.4xl + 5 g3.8xl + 2 g3.16xl, 2567.70 s, $5.448374."""
    result = dnnprov.solve(resnet110_table1, "enumerate")
    assert result.status is Status.OPTIMAL
    assert plan_counts(result, TYPE_NAMES).tolist() == [0, 3, 5, 2, 0]
    assert_allclose(result.time_s, 2567.70, rtol=0, atol=1e-9)
    assert_allclose(result.cost, 5.448374, rtol=0, atol=1e-12)
    assert result.bound == result.cost and result.gap == 0.0
    assert result.stats["plans_evaluated"] == 1 * 6 * 6 * 6 * 6


def test_enumerate_is_5_9_percent_cheaper_than_reference_heuristic(resnet110_table1):
    """The exhaustive plan saves 5.9 % over the reference heuristic's plan (spec section 6)."""
    best = dnnprov.solve(resnet110_table1, "enumerate").cost
    heuristic = dnnprov.solve(resnet110_table1, "reference-heuristic").cost
    assert round(100 * (heuristic - best) / heuristic, 1) == 5.9


@pytest.mark.parametrize(("loss", "time_s", "plan"), [(0.9, 1900.0, [2, 0, 2, 0, 0]), (0.8, 2400.0, [2, 0, 4, 0, 0])])
def test_enumerate_matches_table5_exhaustive_column(make_resnet110, loss, time_s, plan):
    """ResNet-110 rows of Table V: exhaustive search (Srifty+) gives the same plans."""
    result = dnnprov.solve(make_resnet110(loss=loss, time_s=time_s), "enumerate")
    assert plan_counts(result, TYPE_NAMES).tolist() == plan


def test_enumerate_breaks_ties_by_lowest_index(make_resnet110):
    """Of two identical types the first column is chosen, deterministically."""
    base = make_resnet110(model="paper", gamma_4=1.0, time_s=4000.0)
    p3 = base.instance_types[0]
    twin = dnnprov.InstanceType(**{**p3.__dict__, "name": "p3.twin"})
    problem = base.replace(instance_types=(p3, twin))
    results = [dnnprov.solve(problem, "enumerate") for _ in range(2)]
    assert results[0].plan.counts == results[1].plan.counts == {"p3.2xlarge": 1, "p3.twin": 0}


# ---------------------------------------------------------------- random spot instances
def brute_force_spot(problem: dnnprov.SpotProblem):
    """Every plan in the box, one scalar model evaluation at a time: (cost, counts, ps) or None."""
    model = SpotModel(problem)
    cols = model.columns
    best = None
    for ps in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
        for counts in itertools.product(*(range(int(lo), int(up) + 1) for lo, up in zip(cols.lower, cols.upper))):
            ev = model.evaluate(np.array([counts]), ps)
            if ev.feasible[0] and (best is None or ev.cost[0] < best[0]):
                best = (float(ev.cost[0]), counts, ps)
    return best


@pytest.fixture(scope="module")
def spot_runs(make_random_spot):
    """60 seeded random spot instances with their enumerate and heuristic results."""
    runs = []
    for i in range(N_RANDOM):
        rng = np.random.default_rng(7000 + i)
        model, variant, gamma_4 = SPOT_VARIANTS[i % len(SPOT_VARIANTS)]
        problem = make_random_spot(
            rng,
            model=model,
            loss_variant=variant,
            gamma_4=gamma_4,
            n_types=None,
            vcpu_quota=True if i % 5 == 0 else None,
            on_demand=True if i % 6 == 1 else None,
            budget=True if i % 7 == 2 else None,
            existing=True if i % 3 == 0 else None,
        )
        runs.append(
            {
                "problem": problem,
                "enumerate": dnnprov.solve(problem, "enumerate"),
                "heuristic": dnnprov.solve(problem, "heuristic"),
                "reference-heuristic": dnnprov.solve(problem, "reference-heuristic"),
            }
        )
    return runs


def test_random_spot_set_covers_the_features(spot_runs):
    """The random spot set mixes models, loss variants, gamma_4, PS ranges and side constraints."""
    problems = [r["problem"] for r in spot_runs]
    assert {p.model for p in problems} == {"paper", "reference"}
    assert {p.workload.loss_variant for p in problems} == {"cc", "no-cc"}
    assert {p.workload.gamma_4 for p in problems if p.workload.loss_variant == "cc"} == {0.1, 1.0}
    assert all(3 <= len(p.instance_types) <= 5 for p in problems)
    assert all(0 <= t.quota <= 4 for p in problems for t in p.instance_types)
    assert any(p.constraints.ps_count[1] > p.constraints.ps_count[0] for p in problems)
    assert sum(bool(p.constraints.vcpu_quotas) for p in problems) >= 10
    assert sum(p.constraints.budget_usd is not None for p in problems) >= 8
    assert sum(bool(p.constraints.existing) for p in problems) >= 15
    assert sum("on-demand" in p.constraints.markets for p in problems) >= 8
    statuses = [r["enumerate"].status for r in spot_runs]
    assert statuses.count(Status.OPTIMAL) >= 30 and statuses.count(Status.INFEASIBLE) >= 1
    assert Status.ERROR not in statuses


@pytest.mark.parametrize("method", ["heuristic", "reference-heuristic"])
def test_enumerate_never_beaten_by_heuristics_spot(spot_runs, method):
    """Whenever a heuristic finds a spot plan, enumerate finds one no more costly."""
    compared = 0
    for run in spot_runs:
        found = run[method]
        assert found.status in (Status.FEASIBLE, Status.UNKNOWN), found.message
        if found.plan is None:
            continue
        best = run["enumerate"]
        assert best.status is Status.OPTIMAL
        assert best.cost <= found.cost * (1 + 1e-12), (run["problem"].name, best.cost, found.cost)
        compared += 1
    assert compared >= 25


def test_spot_plans_are_feasible_when_reevaluated(spot_runs):
    """Every plan any method returns is feasible and costs what it says under the model."""
    checked = 0
    for run in spot_runs:
        model = SpotModel(run["problem"])
        for method in ("enumerate", "heuristic", "reference-heuristic"):
            result = run[method]
            if result.plan is None:
                continue
            ev = model.evaluate(plan_counts(result, model.columns.labels)[None, :], result.plan.ps)
            assert ev.feasible[0], (method, result.plan)
            assert_allclose(ev.cost[0], result.cost, rtol=1e-12)
            assert_allclose(ev.time_s[0], result.time_s, rtol=1e-12)
            checked += 1
    assert checked >= 75


def test_spot_brute_force_agrees_with_enumerate(spot_runs):
    """A plain itertools loop over every plan finds enumerate's cost (and infeasibility)."""
    agreed = 0
    for run in spot_runs:
        problem, result = run["problem"], run["enumerate"]
        if enumeration.spot_space_size(problem) > BRUTE_FORCE_MAX_SPACE:
            continue
        best = brute_force_spot(problem)
        if best is None:
            assert result.status is Status.INFEASIBLE and result.plan is None
        else:
            assert result.status is Status.OPTIMAL
            assert_allclose(result.cost, best[0], rtol=1e-12)
            assert result.plan.ps == best[2]
        agreed += 1
    assert agreed >= 10


def test_spot_space_size_counts_the_box(spot_runs):
    """The reported search space is the product of (quota - kept + 1) times the PS choices."""
    for run in spot_runs:
        problem = run["problem"]
        cols = problem.columns()
        low, high = problem.constraints.ps_count
        expected = math.prod(int(up - lo + 1) for lo, up in zip(cols.lower, cols.upper)) * (high - low + 1)
        assert run["enumerate"].stats["plans_evaluated"] == expected


# ---------------------------------------------------------------- random serverless instances
def brute_force_serverless(problem: dnnprov.ServerlessProblem):
    """Every (n, m, s) on the grid, one scalar evaluation at a time: (cost, plan) or None."""
    model = ServerlessModel(problem)
    low, high = problem.function_range()
    best = None
    for s in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
        for m in problem.memory_grid():
            for n in range(low, high + 1):
                ev = model.evaluate(n, m, s)
                if ev.feasible and (best is None or ev.cost < best[0]):
                    best = (float(ev.cost), (n, m, s))
    return best


@pytest.fixture(scope="module")
def serverless_runs(make_random_serverless):
    """60 seeded random serverless instances with their enumerate and heuristic results."""
    runs = []
    for i in range(N_RANDOM):
        problem = make_random_serverless(np.random.default_rng(8000 + i), budget=True if i % 6 == 0 else None)
        runs.append(
            {
                "problem": problem,
                "enumerate": dnnprov.solve(problem, "enumerate"),
                "heuristic": dnnprov.solve(problem, "heuristic"),
            }
        )
    return runs


def test_random_serverless_set_has_content(serverless_runs):
    """The random serverless set has feasible and infeasible instances, PS ranges and budgets."""
    statuses = [r["enumerate"].status for r in serverless_runs]
    assert statuses.count(Status.OPTIMAL) >= 30 and statuses.count(Status.INFEASIBLE) >= 1
    assert Status.ERROR not in statuses
    problems = [r["problem"] for r in serverless_runs]
    assert any(p.constraints.ps_count[1] > 1 for p in problems)
    assert sum(p.constraints.budget_usd is not None for p in problems) >= 10


def test_enumerate_never_beaten_by_heuristic_serverless(serverless_runs):
    """Whenever λDNN's heuristic finds a plan, enumerate finds one no more costly."""
    compared = strictly = 0
    for run in serverless_runs:
        found, best = run["heuristic"], run["enumerate"]
        if found.plan is None:
            continue
        assert best.status is Status.OPTIMAL
        assert best.cost <= found.cost * (1 + 1e-12)
        compared += 1
        strictly += best.cost < found.cost * (1 - 1e-9)
    assert compared >= 25
    assert strictly >= 1  # the heuristic is not exact under the real tariff


def test_serverless_plans_are_feasible_when_reevaluated(serverless_runs):
    """Every serverless plan returned is feasible and costs what it says under the model."""
    for run in serverless_runs:
        model = ServerlessModel(run["problem"])
        for method in ("enumerate", "heuristic"):
            result = run[method]
            if result.plan is None:
                continue
            plan = result.plan
            ev = model.evaluate(plan.functions, plan.memory_mb, plan.ps)
            assert ev.feasible, (method, plan)
            assert_allclose(float(ev.cost), result.cost, rtol=1e-12)
            assert_allclose(float(ev.local_batch), plan.local_batch, rtol=1e-12)


def test_serverless_brute_force_agrees_with_enumerate(serverless_runs):
    """A plain loop over every (n, m, s) finds enumerate's cost (and infeasibility)."""
    agreed = 0
    for run in serverless_runs:
        problem, result = run["problem"], run["enumerate"]
        low, high = problem.function_range()
        size = (
            (high - low + 1)
            * len(problem.memory_grid())
            * (problem.constraints.ps_count[1] - problem.constraints.ps_count[0] + 1)
        )
        if size > BRUTE_FORCE_MAX_SPACE:
            continue
        best = brute_force_serverless(problem)
        if best is None:
            assert result.status is Status.INFEASIBLE
        else:
            assert_allclose(result.cost, best[0], rtol=1e-12)
        agreed += 1
    assert agreed >= 10


# ---------------------------------------------------------------- refusing large spaces
def test_enumerate_refuses_huge_spot_space_quickly():
    """A 10^20-plan space is refused at once: status limit, no plan, max_plans in the message."""
    types = tuple(
        dnnprov.InstanceType(
            name=f"g{i}.xlarge",
            gpus=1,
            spot_price_per_h=0.5 + i / 10,
            quota=99,
            batch_per_gpu=256,
            speed_samples_per_s=300.0 + 50 * i,
        )
        for i in range(10)
    )
    workload = dnnprov.SpotWorkload(
        name="w",
        param_size_mb=10.0,
        bandwidth_req_mb_s=100.0,
        alpha_1=0.5,
        beta_1=-1.0,
        gamma_1=100.0,
        gamma_2=-0.1,
        gamma_3=2000.0,
        gamma_4=1.0,
        gamma_5=0.5,
    )
    problem = dnnprov.SpotProblem(instance_types=types, workload=workload, slo=dnnprov.SpotSLO(loss=0.8, time_s=3600.0))
    started = time.process_time()  # CPU seconds: refused without enumerating
    direct = enumeration.enumerate_spot(problem)
    assert time.process_time() - started < 1.0
    assert direct.status is Status.LIMIT
    result = dnnprov.solve(problem, "enumerate")
    assert result.status is Status.LIMIT
    assert result.plan is None and result.cost is None
    assert "max_plans" in result.message
    assert result.stats["space"] == 100**10


def test_enumerate_limit_is_inclusive(make_resnet110):
    """max_plans equal to the space size is accepted; one less is refused."""
    problem = make_resnet110()
    size = enumeration.spot_space_size(problem)
    assert size == 3 * 6 * 6 * 9 * 6
    assert dnnprov.solve(problem, "enumerate", max_plans=size).status is Status.OPTIMAL
    refused = dnnprov.solve(problem, "enumerate", max_plans=size - 1)
    assert refused.status is Status.LIMIT and refused.plan is None
    assert "max_plans" in refused.message


def test_enumerate_refuses_large_serverless_space(make_resnet50):
    """The serverless grid (1000 functions x 10 memory sizes) is refused below its size."""
    problem = make_resnet50()
    started = time.process_time()  # CPU seconds: refused without enumerating
    direct = enumeration.enumerate_serverless(problem, max_plans=9999)
    assert time.process_time() - started < 1.0
    assert direct.status is Status.LIMIT
    refused = dnnprov.solve(problem, "enumerate", max_plans=9999)
    assert refused.status is Status.LIMIT and refused.plan is None
    assert "max_plans" in refused.message
    assert dnnprov.solve(problem, "enumerate", max_plans=10000).status is Status.OPTIMAL


def test_enumerate_reports_infeasible_with_infinite_bound(make_resnet110):
    """An unreachable deadline is proven infeasible: no plan, bound +inf (null in JSON)."""
    result = dnnprov.solve(make_resnet110(time_s=100.0), "enumerate")
    assert result.status is Status.INFEASIBLE
    assert result.plan is None and result.bound == math.inf
    assert result.to_dict()["bound"] is None


def test_enumerate_serverless_with_empty_function_range(make_resnet50):
    """A function range that the concurrency limit empties is refused or proven infeasible."""
    problem = make_resnet50(constraints=dnnprov.ServerlessConstraints(functions=(50, None)))
    try:
        problem = problem.replace(platform=dnnprov.ServerlessPlatform(concurrency_limit=20))
    except dnnprov.InvalidInputError as err:
        assert "functions" in err.field or "concurrency" in err.field
        return
    result = dnnprov.solve(problem, "enumerate")
    assert result.status is Status.INFEASIBLE, result.message
