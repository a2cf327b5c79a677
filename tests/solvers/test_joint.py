"""Tests for joint provisioning of many jobs sharing quotas (solvers/joint/provision.py, formulations/joint.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from dnnprov.formulations.joint import chosen_columns, create_joint_model
from dnnprov.solvers.highs_driver import MilpStatus
from dnnprov.solvers.joint.provision import (
    ColumnModel,
    SharedLimits,
    generate_columns,
    pareto_grid,
    serverless_columns,
    solve_columns,
    solve_many,
    spot_columns,
)
from dnnprov.solvers.search.enumeration import decode_counts
from dnnprov.solvers.serverless_exact import feasible_columns

import dnnprov
from dnnprov.cli import main
from dnnprov.models.serverless import ServerlessModel
from dnnprov.models.spot import SpotModel

REL = 1e-9


# ---------------------------------------------------------------- the oracle
def row_usage(problem, counts_or_functions, shared: SharedLimits) -> tuple[float, ...]:
    """Use of every shared row (in ``shared.rows()`` order) by one plan, from the problem data."""
    out = []
    for row in shared.rows():
        if isinstance(problem, dnnprov.ServerlessProblem):
            out.append(float(counts_or_functions) if row == "concurrency" else 0.0)
            continue
        cols = problem.columns()
        counts = counts_or_functions
        if row.startswith("quota:"):
            label = row.removeprefix("quota:")
            out.append(float(sum(n for lab, n in zip(cols.labels, counts) if lab == label)))
        elif row.startswith("vcpu:"):
            family, market = row.removeprefix("vcpu:").split("/")
            out.append(
                float(
                    sum(
                        n * v
                        for n, v, f, m in zip(counts, cols.vcpus, cols.families, cols.markets)
                        if (f, m) == (family, market)
                    )
                )
            )
        else:
            out.append(0.0)
    return tuple(out)


def every_plan(problem, shared: SharedLimits) -> dict[tuple[float, ...], float]:
    """Every feasible plan of one job, merged by shared-row use (cheapest kept): usage -> cost."""
    options: dict[tuple[float, ...], float] = {}
    if isinstance(problem, dnnprov.SpotProblem):
        model = SpotModel(problem)
        cols = model.columns
        radix = (cols.upper - cols.lower + 1).astype(np.int64)
        counts = decode_counts(np.arange(int(np.prod(radix)), dtype=np.int64), cols.lower, radix)
        for ps in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
            ev = model.evaluate(counts, ps)
            for i in np.flatnonzero(ev.feasible):
                u = row_usage(problem, counts[i], shared)
                options[u] = min(options.get(u, math.inf), float(ev.cost[i]))
    else:
        model = ServerlessModel(problem)
        low, high = problem.function_range()
        for n in range(low, high + 1):
            for m in problem.memory_grid():
                for s in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
                    ev = model.evaluate(n, m, s)
                    if ev.feasible:
                        u = row_usage(problem, n, shared)
                        options[u] = min(options.get(u, math.inf), float(ev.cost))
    return options


def brute_force(problems, shared: SharedLimits) -> float:
    """The joint optimum over the product of every job's feasible plans (inf if none).

    Partial combinations with equal use are merged (keeping the cheapest) and those over a
    limit dropped, which changes nothing about the minimum: uses are nonnegative.
    """
    limits = np.array(list(shared.rows().values()))
    states = {tuple(0.0 for _ in limits): 0.0}
    for p in problems:
        new: dict[tuple[float, ...], float] = {}
        for u, c in states.items():
            for v, d in every_plan(p, shared).items():
                w = tuple(a + b for a, b in zip(u, v))
                if any(x > lim + 1e-9 for x, lim in zip(w, limits)):
                    continue
                if c + d < new.get(w, math.inf):
                    new[w] = c + d
        states = new
    return min(states.values(), default=math.inf)


def check_plans(problems, result, shared: SharedLimits) -> None:
    """Every plan is feasible for its job's model and together they respect every shared limit."""
    assert len(result.results) == len(problems)
    total = np.zeros(len(shared.rows()))
    cost = 0.0
    for p, r in zip(problems, result.results):
        assert r.plan is not None
        if isinstance(p, dnnprov.SpotProblem):
            model = SpotModel(p)
            counts = np.array([r.plan.counts[label] for label in model.columns.labels])
            ev = model.evaluate(counts[None, :], r.plan.ps)
            assert ev.feasible[0]
            assert ev.time_s[0] <= p.slo.time_s * (1 + 1e-12)
            np.testing.assert_allclose(ev.cost[0], r.cost, rtol=1e-12)
            total += row_usage(p, counts, shared)
        else:
            ev = ServerlessModel(p).evaluate(r.plan.functions, r.plan.memory_mb, r.plan.ps)
            assert ev.feasible
            assert ev.time_s <= p.time_s * (1 + 1e-12)
            np.testing.assert_allclose(ev.cost, r.cost, rtol=1e-12)
            total += row_usage(p, r.plan.functions, shared)
        cost += r.cost
    assert (total <= np.array(list(shared.rows().values())) + 1e-9).all()
    np.testing.assert_allclose(cost, result.cost, rtol=1e-12)


def random_shared(rng, problems, *, vcpu: bool = True, concurrency: bool = True) -> SharedLimits:
    """Shared limits on a random subset of the offered labels, often binding."""
    labels: dict[str, int] = {}
    families = set()
    for p in problems:
        if isinstance(p, dnnprov.SpotProblem):
            cols = p.columns()
            for label, up in zip(cols.labels, cols.upper):
                labels[label] = labels.get(label, 0) + int(up)
            families.update((f, m) for f, m, v in zip(cols.families, cols.markets, cols.vcpus) if v)
    chosen = [label for label in sorted(labels) if rng.random() < 0.6]
    quotas = {label: int(rng.integers(labels[label] // 3, labels[label] + 1)) for label in chosen}
    vcpus = ()
    if vcpu and families and rng.random() < 0.5:
        family, market = sorted(families)[int(rng.integers(0, len(families)))]
        vcpus = (dnnprov.VcpuQuota(family=family, market=market, vcpus=int(rng.integers(4, 80))),)
    n_serverless = sum(isinstance(p, dnnprov.ServerlessProblem) for p in problems)
    conc = int(rng.integers(3 * n_serverless, 12 * n_serverless + 2)) if concurrency and n_serverless else None
    return SharedLimits(quotas=quotas, vcpu_quotas=vcpus, concurrency=conc)


def feasible(make, rng, **options):
    """A random job (``make(rng, **options)``) that has a feasible plan on its own."""
    while True:
        p = make(rng, **options)
        if dnnprov.solve(p, "enumerate").status is dnnprov.Status.OPTIMAL:
            return p


def small_spot(rng, make_random_spot):
    """A feasible random spot job whose quota box is small enough for the product oracle."""
    return feasible(make_random_spot, rng, n_types=3, max_quota=2, max_ps=2, on_demand=False)


def scaled_prices(rng, problem: dnnprov.SpotProblem, decades: float) -> dnnprov.SpotProblem:
    """``problem`` with each type's spot price scaled by 10^U(-decades, decades) and a PS price
    of 10^U(-decades, decades): prices over 2 x ``decades`` decades."""
    data = problem.to_dict()
    for spec in data["instance_types"].values():
        spec["spot_price_per_h"] *= 10.0 ** rng.uniform(-decades, decades)
    data["platform"]["ps_price_per_h"] = 10.0 ** rng.uniform(-decades, decades)
    return dnnprov.problem_from_dict(data)


def small_serverless(rng, make_random_serverless):
    """A feasible random serverless job with at most 10 functions (few distinct uses)."""
    return feasible(make_random_serverless, rng, max_functions=10)


# ---------------------------------------------------------------- tests
def test_brute_force_spot_sets(make_random_spot):
    """On random sets of 3-5 small spot jobs, the joint optimum equals the product brute force."""
    rng = np.random.default_rng(41)
    statuses = set()
    for _ in range(25):
        problems = [small_spot(rng, make_random_spot) for _ in range(int(rng.integers(3, 6)))]
        shared = random_shared(rng, problems)
        expected = brute_force(problems, shared)
        result = solve_many(problems, shared=shared)
        statuses.add(result.status)
        if math.isinf(expected):
            assert result.status is dnnprov.Status.INFEASIBLE
            continue
        assert result.status is dnnprov.Status.OPTIMAL
        np.testing.assert_allclose(result.cost, expected, rtol=REL)
        assert result.bound == result.cost
        check_plans(problems, result, shared)
    assert dnnprov.Status.OPTIMAL in statuses


def test_brute_force_mixed_sets(make_random_spot, make_random_serverless):
    """Spot and serverless jobs together (quotas and concurrency): equal to brute force."""
    rng = np.random.default_rng(42)
    optimal = 0
    for _ in range(12):
        problems = [small_spot(rng, make_random_spot) for _ in range(int(rng.integers(1, 3)))] + [
            small_serverless(rng, make_random_serverless) for _ in range(int(rng.integers(2, 4)))
        ]
        shared = random_shared(rng, problems)
        expected = brute_force(problems, shared)
        result = solve_many(problems, shared=shared)
        if math.isinf(expected):
            assert result.status is dnnprov.Status.INFEASIBLE
            continue
        optimal += 1
        assert result.status is dnnprov.Status.OPTIMAL
        np.testing.assert_allclose(result.cost, expected, rtol=REL)
        check_plans(problems, result, shared)
    assert optimal >= 4


def test_loose_limits_equal_sum_of_single_solves(make_random_spot, make_random_serverless):
    """With limits nobody reaches, the joint cost is the sum of each job's own milp optimum."""
    rng = np.random.default_rng(43)
    problems = [
        feasible(make_random_spot, rng, max_quota=4) if i % 2 else feasible(make_random_serverless, rng)
        for i in range(8)
    ]
    labels = {label for p in problems if isinstance(p, dnnprov.SpotProblem) for label in p.columns().labels}
    shared = SharedLimits(quotas={label: 10**6 for label in labels}, concurrency=10**6)
    result = solve_many(problems, shared=shared)
    assert result.status is dnnprov.Status.OPTIMAL
    singles = [dnnprov.solve(p, "milp") for p in problems]
    assert all(s.status is dnnprov.Status.OPTIMAL for s in singles)
    np.testing.assert_allclose(result.cost, sum(s.cost for s in singles), rtol=REL)
    for r, s in zip(result.results, singles):
        assert r.status is dnnprov.Status.OPTIMAL
        np.testing.assert_allclose(r.cost, s.cost, rtol=REL)
    # with nothing shared at all each job keeps one column: its cheapest plan
    unshared = solve_many(problems)
    assert unshared.stats["columns"] == len(problems)
    np.testing.assert_allclose(unshared.cost, result.cost, rtol=REL)


def test_tightening_a_quota_never_lowers_cost(make_resnet110):
    """Lowering a shared quota step by step: the total cost never falls, infeasible stays so."""
    problems = [
        make_resnet110(loss=loss, time_s=t)
        for loss, t in [(0.9, 1900), (0.8, 2400), (0.7, 3700), (0.8, 2600), (0.85, 2200)]
    ]
    previous = 0.0
    seen_infeasible = False
    for quota in range(12, -1, -1):
        shared = SharedLimits(quotas={"p3.2xlarge": quota, "g3.8xlarge": 14})
        result = solve_many(problems, shared=shared)
        if result.status is dnnprov.Status.INFEASIBLE:
            seen_infeasible = True
            continue
        assert not seen_infeasible
        assert result.status is dnnprov.Status.OPTIMAL
        assert result.cost >= previous * (1 - REL)
        check_plans(problems, result, shared)
        previous = result.cost
    assert previous > 0


@pytest.mark.parametrize("pricing", [False, True])
def test_a_set_of_free_plans_is_proven_optimal_at_zero(make_random_spot, pricing: bool):
    """Every price 0, so every plan costs $0: the joint optimum is 0, and 0 bounds it. The
    verified bound came out a hair below 0 (-6e-300), which no relative tolerance closes at a
    cost of 0: the set ended `limit` (audit a7)."""
    rng = np.random.default_rng(7)
    problems = []
    for _ in range(2):
        data = small_spot(rng, make_random_spot).to_dict()
        for spec in data["instance_types"].values():
            spec["spot_price_per_h"] = 0.0
        data["platform"]["ps_price_per_h"] = 0.0
        problems.append(dnnprov.problem_from_dict(data))
    labels = sorted({label for p in problems for label in p.columns().labels})
    shared = SharedLimits(quotas={labels[0]: 1})
    result = solve_many(problems, shared=shared, pricing=pricing)
    assert result.status is dnnprov.Status.OPTIMAL and result.cost == 0.0 and result.bound == 0.0
    assert brute_force(problems, shared) == 0.0


def test_tightening_concurrency_never_lowers_cost(make_random_serverless):
    """The same for the shared concurrency limit of serverless jobs."""
    rng = np.random.default_rng(44)
    problems = [make_random_serverless(rng, max_functions=30) for _ in range(6)]
    loose = solve_many(problems, shared=SharedLimits(concurrency=10**6))
    assert loose.status is dnnprov.Status.OPTIMAL
    used = int(loose.usage["concurrency"])
    previous = loose.cost
    for limit in range(used, max(used - 40, -1), -3):
        shared = SharedLimits(concurrency=limit)
        result = solve_many(problems, shared=shared)
        if result.status is dnnprov.Status.INFEASIBLE:
            break
        assert result.cost >= previous * (1 - REL)
        check_plans(problems, result, shared)
        previous = result.cost


def test_fixing_never_removes_the_optimal_column(make_random_spot, make_random_serverless):
    """On random sets: MILP with and without reduced-cost fixing agree, and the unfixed optimum survives fixing."""
    rng = np.random.default_rng(45)
    compared = 0
    for _ in range(10):
        problems = [feasible(make_random_spot, rng, max_quota=4) for _ in range(6)] + [
            feasible(make_random_serverless, rng) for _ in range(4)
        ]
        shared = random_shared(rng, problems)
        fixed = solve_many(problems, shared=shared)
        full = solve_many(problems, shared=shared, fixing=False)
        assert fixed.status is full.status
        if fixed.status is not dnnprov.Status.OPTIMAL:
            continue
        compared += 1
        np.testing.assert_allclose(fixed.cost, full.cost, rtol=REL)
        check_plans(problems, fixed, shared)
        # the test itself: every column of the unfixed optimum lies in the set the last MILP saw
        generated = generate_columns(problems, shared)
        columns = [g.columns for g in generated]
        solved = solve_columns(columns, shared.rows())
        assert solved.status is dnnprov.Status.OPTIMAL
        model = ColumnModel.build(columns, shared.rows())
        milp = model.solve(integer=True)
        assert milp.status is MilpStatus.OPTIMAL and milp.x is not None
        optimum = model.choice(milp.x)
        assert set(optimum.tolist()) <= set(solved.kept.tolist())
        np.testing.assert_allclose(model.cost[optimum].sum(), solved.cost, rtol=REL)
        # the LP by column generation equals the full LP; the Lagrangian bound equals both
        lp = model.solve(integer=False)
        stats: dict = {}
        by_pricing = model.solve_lp(stats)
        assert stats["lp_rounds"] >= 1 and stats["lp_columns"] >= len(columns)
        np.testing.assert_allclose(by_pricing.objective, lp.objective, rtol=1e-7)
        for duals in (lp.row_dual, by_pricing.row_dual):
            assert duals is not None
            bound, delta = model.lagrangian(duals)
            np.testing.assert_allclose(bound, lp.objective, rtol=1e-6)
            # delta is a rigorous lower bound of a nonnegative reduced cost: below 0 by rounding only
            assert (delta >= -1e-12 * np.abs(model.cost).max()).all()
            assert (bound + delta[optimum] <= solved.cost * (1 + REL)).all()
    assert compared >= 5


def test_spot_columns_are_the_exact_front(make_random_spot):
    """The grid filter keeps exactly the plans no cheaper-or-equal, no-larger plan dominates."""
    rng = np.random.default_rng(46)
    for _ in range(15):
        p = make_random_spot(rng, max_quota=3)
        labels = p.columns().labels
        shared = SharedLimits(quotas={label: 100 for label in labels if rng.random() < 0.7})
        if not shared.quotas:
            continue
        options = every_plan(p, shared)  # cheapest plan of every shared-row use
        front = {
            u: c
            for u, c in options.items()
            if not any(v != u and all(a <= b for a, b in zip(v, u)) and d <= c for v, d in options.items())
        }
        g = spot_columns(p, shared)
        got = {
            tuple(float(g.columns.usage[r][k]) for r in shared.rows()): float(g.columns.cost[k])
            for k in range(len(g.columns))
        }
        assert got.keys() == front.keys()
        for u, expected in front.items():
            np.testing.assert_allclose(got[u], expected, rtol=1e-12)
        assert g.alone == pytest.approx(min(options.values(), default=math.inf), rel=1e-12)


def test_pareto_grid_small_cases():
    """Prefix-minimum dominance on hand-made grids (ties go to the smaller plan)."""
    inf = np.inf
    grid = np.array([[inf, 3.0, 2.0], [4.0, 3.0, 1.0]])
    np.testing.assert_array_equal(pareto_grid(grid), [[False, True, True], [True, False, True]])
    np.testing.assert_array_equal(pareto_grid(np.array([5.0, 5.0, 4.0])), [True, False, True])
    assert bool(pareto_grid(np.array(2.0)))


def test_serverless_columns_match_feasible_columns_pareto(make_random_serverless):
    """The broadcast generation gives the front of ``feasible_columns(...).pareto()``."""
    rng = np.random.default_rng(47)
    for _ in range(30):
        p = make_random_serverless(rng)
        reference, _ = feasible_columns(ServerlessModel(p), upper=math.inf)
        g = serverless_columns(p, SharedLimits(concurrency=10**6))
        front = reference.pareto()
        assert sorted(g.columns.usage["concurrency"].astype(int).tolist()) == sorted(front.functions.tolist())
        np.testing.assert_allclose(np.sort(g.columns.cost), np.sort(front.cost), rtol=1e-12)
        assert g.feasible_plans == len(reference)


def test_vcpu_and_on_demand_rows(make_random_spot):
    """Shared vCPU quotas and on-demand labels are rows like any other (brute force agrees)."""
    rng = np.random.default_rng(48)
    done = 0
    for _ in range(15):
        problems = [feasible(make_random_spot, rng, n_types=2, max_quota=2, on_demand=True, max_ps=1) for _ in range(3)]
        cols = problems[0].columns()
        shared = SharedLimits(
            quotas={cols.labels[-1]: int(rng.integers(0, 4))},
            vcpu_quotas=(dnnprov.VcpuQuota(family=cols.families[0], market="spot", vcpus=int(rng.integers(4, 60))),),
        )
        expected = brute_force(problems, shared)
        result = solve_many(problems, shared=shared)
        if math.isinf(expected):
            assert result.status is dnnprov.Status.INFEASIBLE
            continue
        done += 1
        np.testing.assert_allclose(result.cost, expected, rtol=REL)
        check_plans(problems, result, shared)
    assert done >= 3


def test_pyomo_model_gives_the_same_optimum(make_random_spot, make_random_serverless):
    """The Pyomo column model solved by appsi_highs matches solve_many (binding limits)."""
    pyo = pytest.importorskip("pyomo.environ")
    rng = np.random.default_rng(49)
    problems = [feasible(make_random_spot, rng, max_quota=3) for _ in range(4)] + [
        feasible(make_random_serverless, rng) for _ in range(3)
    ]
    labels = sorted({label for p in problems[:4] for label in p.columns().labels})
    loose = solve_many(problems, shared=SharedLimits(quotas={label: 10**6 for label in labels}, concurrency=10**6))
    busiest = max(labels, key=lambda label: loose.usage[f"quota:{label}"])
    shared = SharedLimits(
        quotas={busiest: int(loose.usage[f"quota:{busiest}"]) - 1}, concurrency=int(loose.usage["concurrency"]) - 2
    )
    result = solve_many(problems, shared=shared)
    assert result.status is dnnprov.Status.OPTIMAL
    assert result.cost > loose.cost
    generated = generate_columns(problems, shared)
    model = create_joint_model([g.columns for g in generated], shared.rows())
    solver = pyo.SolverFactory("appsi_highs")
    solver.config.mip_gap = 0.0
    pyo.assert_optimal_termination(solver.solve(model))
    np.testing.assert_allclose(pyo.value(model.total_cost), result.cost, rtol=1e-7)
    picks = chosen_columns(model)
    np.testing.assert_allclose(sum(g.columns.cost[k] for g, k in zip(generated, picks)), result.cost, rtol=1e-7)


def test_infeasible_sets_are_proven():
    """A limit no job can meet, or that all jobs together cannot meet, gives status infeasible."""
    from conftest import resnet50_problem, resnet110_problem

    problems = [resnet110_problem(), resnet50_problem()]
    result = solve_many(problems, shared=SharedLimits(concurrency=0))
    assert result.status is dnnprov.Status.INFEASIBLE
    assert "resnet50" in result.message
    assert result.results[0].status is dnnprov.Status.UNKNOWN
    two = [resnet110_problem(), resnet110_problem(loss=0.9, time_s=1900)]
    limits = SharedLimits(quotas={name: 1 for name in two[0].columns().labels})
    result = solve_many(two, shared=limits)
    assert result.status is dnnprov.Status.INFEASIBLE
    assert result.cost is None and result.bound == math.inf


def test_refuses_a_box_too_large(make_resnet110):
    """Without pricing, a spot job whose quota box exceeds max_plans_per_job is refused before any evaluation."""
    big = make_resnet110(quotas=[30, 30, 30, 30, 30])
    with pytest.raises(dnnprov.InvalidInputError, match="max_plans_per_job"):
        solve_many([make_resnet110(), big], pricing=False)
    with pytest.raises(dnnprov.InvalidInputError, match="max_plans_per_job"):
        solve_many([make_resnet110()], max_plans_per_job=100, pricing=False)


def test_bad_shared_limits_are_refused(make_resnet110):
    """Unknown labels and families, negative limits and empty sets are input errors."""
    p = make_resnet110()
    with pytest.raises(dnnprov.InvalidInputError, match="no spot job offers"):
        solve_many([p], shared=SharedLimits(quotas={"x9.huge": 3}))
    with pytest.raises(dnnprov.InvalidInputError, match="shared.quotas"):
        SharedLimits(quotas={"p3.2xlarge": -1})
    with pytest.raises(dnnprov.InvalidInputError, match="vcpus"):
        solve_many([p], shared=SharedLimits(vcpu_quotas=(dnnprov.VcpuQuota(family="G", market="spot", vcpus=64),)))
    with pytest.raises(dnnprov.InvalidInputError, match="at least one job"):
        solve_many([])


def test_huge_shared_limits_are_refused(tmp_path, capsys, make_resnet110, make_resnet50):
    """A shared quota or concurrency beyond 2^53 is an input error naming it, as a job's own vCPU
    quota is (before: an OverflowError from float(), exit 3 'internal error', past 1e308)."""
    for quotas, concurrency in (({"p3.2xlarge": 10**400}, None), ({}, 10**400), ({"p3.2xlarge": 2**53 + 1}, None)):
        with pytest.raises(dnnprov.InvalidInputError, match="shared.(quotas.p3.2xlarge|concurrency).*2\\^53"):
            SharedLimits(quotas=quotas, concurrency=concurrency)
    assert SharedLimits(quotas={"p3.2xlarge": 2**53}).rows() == {"quota:p3.2xlarge": float(2**53)}
    files = []
    for i, p in enumerate([make_resnet110(), make_resnet50()]):
        dnnprov.write_instance(p, tmp_path / f"job{i}.json")
        files.append(str(tmp_path / f"job{i}.json"))
    assert main(["solve-many", *files, "--shared-quota", f"p3.2xlarge={10**400}"]) == 2
    assert main(["solve-many", *files, "--concurrency", str(10**400)]) == 2
    assert "2^53" in capsys.readouterr().err


def test_a_concurrency_limit_without_a_serverless_job_is_refused(make_resnet110):
    """It bounded nothing and was ignored without a word (audit a7), as a quota naming no offered type would be."""
    with pytest.raises(dnnprov.InvalidInputError, match="^shared.concurrency: no job is serverless"):
        solve_many([make_resnet110(), make_resnet110(loss=0.9, time_s=1900)], shared=SharedLimits(concurrency=5))


def test_a_negative_max_plans_per_job_is_refused(tmp_path, capsys, make_resnet110):
    """-1 was taken as 0 (every spot job priced) without a word."""
    with pytest.raises(dnnprov.InvalidInputError, match="^max_plans_per_job: "):
        solve_many([make_resnet110()], max_plans_per_job=-1)
    dnnprov.write_instance(make_resnet110(), tmp_path / "job.json")
    assert main(["solve-many", str(tmp_path / "job.json"), "--max-plans-per-job", "-1"]) == 2
    assert capsys.readouterr().err.startswith("dnnprov: error: --max-plans-per-job: must be >= 0")


def test_identical_jobs_share_columns_and_time_limit(make_resnet110):
    """Jobs equal up to their name reuse one column generation; a tiny time limit reports limit."""
    jobs = [make_resnet110().replace(name=f"job-{i}") for i in range(5)]
    shared = SharedLimits(quotas={"p3.2xlarge": 4})
    result = solve_many(jobs, shared=shared)
    assert result.stats["cached_jobs"] == 4
    assert [r.instance for r in result.results] == [f"job-{i}" for i in range(5)]
    np.testing.assert_allclose(result.cost, solve_many(jobs, shared=shared, cache=False).cost, rtol=REL)
    limited = solve_many(jobs, shared=shared, time_limit_s=1e-9)
    assert limited.status is dnnprov.Status.LIMIT


def test_result_reports_per_job_status(make_resnet110):
    """Jobs pushed off their cheapest plan are 'feasible' with their stand-alone optimum as bound."""
    problems = [make_resnet110(loss=0.9, time_s=1900), make_resnet110(loss=0.8, time_s=2400)]
    result = solve_many(problems, shared=SharedLimits(quotas={"p3.2xlarge": 2}))
    assert result.status is dnnprov.Status.OPTIMAL
    pushed = [r for r in result.results if r.status is dnnprov.Status.FEASIBLE]
    assert pushed
    for r in pushed:
        assert r.bound < r.cost
        assert "alone" in r.message
    data = json.loads(result.to_json())
    assert data["shared"]["quota:p3.2xlarge"] == {"limit": 2.0, "used": 2.0}
    assert len(data["jobs"]) == 2
    assert "total cost" in result.summary()


def test_cli_solve_many(tmp_path, capsys, make_resnet110, make_resnet50):
    """``dnnprov solve-many`` reads files, applies --shared-quota/--concurrency and prints JSON."""
    files = []
    for i, p in enumerate([make_resnet110(loss=0.9, time_s=1900), make_resnet110(), make_resnet50()]):
        path = tmp_path / f"job{i}.json"
        dnnprov.write_instance(p, path)
        files.append(str(path))
    code = main(["solve-many", *files, "--shared-quota", "p3.2xlarge=2", "--concurrency", "20", "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "optimal"
    assert data["shared"]["quota:p3.2xlarge"]["used"] <= 2
    assert data["shared"]["concurrency"]["used"] <= 20
    assert main(["solve-many", *files, "--shared-quota", "p3.2xlarge"]) == 2
    assert main(["solve-many", files[0], "--shared-vcpu", "G/moon=3"]) == 2
    assert main(["solve-many", *files, "--shared-quota", "p3.2xlarge=2"]) == 0
    assert "jobs solved jointly" in capsys.readouterr().out


def test_full_lp_path_agrees(monkeypatch, make_random_spot, make_random_serverless):
    """Above PRICING_MAX_JOBS the LP is solved in full (interior point): same optimum."""
    from dnnprov.solvers.joint import master as joint

    rng = np.random.default_rng(50)
    problems = [feasible(make_random_spot, rng, max_quota=4) for _ in range(5)] + [
        feasible(make_random_serverless, rng) for _ in range(5)
    ]
    loose = solve_many(problems, shared=SharedLimits(concurrency=10**6))
    shared = SharedLimits(concurrency=int(loose.usage["concurrency"]) - 3)
    by_pricing = solve_many(problems, shared=shared)
    monkeypatch.setattr(joint, "PRICING_MAX_JOBS", 0)
    full = solve_many(problems, shared=shared)
    assert full.stats.get("lp_full") and "lp_rounds" not in full.stats
    assert by_pricing.status is full.status is dnnprov.Status.OPTIMAL
    np.testing.assert_allclose(by_pricing.cost, full.cost, rtol=REL)
    np.testing.assert_allclose(by_pricing.stats["lp_bound"], full.stats["lp_bound"], rtol=1e-7)


def test_shared_limits_that_cannot_hold_are_named(make_random_spot, make_random_serverless):
    """Jobs feasible alone but not together: a reason per shared row whose removal admits a joint
    plan (the product brute force decides each), its ``needed`` the least limit of that row the
    brute force finds feasible (proven), and "combination" exactly when no single row does."""
    from dnnprov.solvers.explain.joint import row_field, with_row_limit, without_row

    rng = np.random.default_rng(97)
    explained = 0
    for _ in range(60):
        problems = [small_spot(rng, make_random_spot) for _ in range(int(rng.integers(2, 4)))]
        if rng.random() < 0.4:
            problems.append(small_serverless(rng, make_random_serverless))
        shared = random_shared(rng, problems)
        shared = SharedLimits(
            quotas={k: max(v // 2, 0) for k, v in shared.quotas.items()},
            vcpu_quotas=shared.vcpu_quotas,
            concurrency=None if shared.concurrency is None else shared.concurrency // 3,
        )
        if not shared.rows() or math.isfinite(brute_force(problems, shared)):
            continue
        result = solve_many(problems, shared=shared)
        assert result.status is dnnprov.Status.INFEASIBLE and result.infeasibility
        causes = {
            row_field(row) for row in shared.rows() if math.isfinite(brute_force(problems, without_row(shared, row)))
        }
        named = {r.field for r in result.infeasibility if r.kind in ("quota", "vcpu_quota")}
        assert named == causes
        rows_by_field = {row_field(row): row for row in shared.rows()}
        for r in result.infeasibility:
            if r.kind in ("quota", "vcpu_quota"):
                row = rows_by_field[r.field]
                least = next(
                    limit
                    for limit in range(int(r.current) + 1, 10**6)
                    if math.isfinite(brute_force(problems, with_row_limit(shared, row, limit)))
                )
                assert r.needed == least and r.proven, (r, least)
        kinds = {r.kind for r in result.infeasibility}
        assert ("combination" in kinds) == (not causes and len(shared.rows()) > 1)
        explained += 1
    assert explained >= 10


def test_shared_limit_reasons_reach_the_json():
    """solve-many --json carries the joint reasons; the relaxed solves leave them off."""
    from conftest import resnet110_problem

    two = [resnet110_problem(), resnet110_problem(loss=0.9, time_s=1900)]
    limits = SharedLimits(quotas={name: 1 for name in two[0].columns().labels})
    result = solve_many(two, shared=limits)
    data = json.loads(result.to_json())
    assert data["status"] == "infeasible" and data["infeasibility"]
    assert all(
        set(r) == {"kind", "field", "current", "needed", "proven", "text", "plan"} for r in data["infeasibility"]
    )
    assert solve_many(two, shared=limits, explain=False).infeasibility == ()
