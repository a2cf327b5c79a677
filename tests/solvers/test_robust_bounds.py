"""The revocation-aware cell bound of ``--robust K`` (:func:`dnnprov.solvers.revocation.robust_exact.drop_bound`).

The oracle is the model itself, plan by plan: D_t = 1 - sigma(n - e_t) / sigma(n) with
sigma = x / ((j + g1)(L - g5)) from :meth:`SpotModel.evaluate` (eqs. 2-5), for every plan
of small quota boxes. The bound must never exceed it over a cell, and on a cell shrunk to
one plan it must be within 1e-4 relative (and 3e-6) of it, so a bound inflated by 0.1 %
fails (D > 0.01).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import random_spot_problem
from dnnprov.solvers.revocation.robust import robust_check
from dnnprov.solvers.revocation.robust_exact import RevocationDecomposition, decompose, drop_bound, robust_outage
from dnnprov.solvers.spot.cells import Cell, compositions, down, up

import dnnprov
from dnnprov.models.spot import SpotModel
from dnnprov.models.training_progress import JOIN_OVERHEAD_S
from dnnprov.progress import Clock, SolverLog


def uncontended_problem(seed: int, *, max_quota: int = 3, n_types: int = 4) -> dnnprov.SpotProblem:
    """A small paper-model CC problem whose PS link is never contended (the rates do not change
    with the worker count, where the bound applies)."""
    rng = np.random.default_rng(seed)
    problem = random_spot_problem(
        rng,
        model="paper",
        loss_variant="cc",
        n_types=n_types,
        max_quota=max_quota,
        max_ps=1,
        on_demand=bool(seed % 4 == 0),
        existing=False,
        budget=False,
        vcpu_quota=False,
    )
    platform = problem.platform
    return problem.replace(
        platform=dnnprov.SpotPlatform(
            ps_bandwidth_mb_s=1e5,
            pcie_bandwidth_mb_s=platform.pcie_bandwidth_mb_s,
            ps_price_per_h=platform.ps_price_per_h,
        )
    )


def search_of(problem: dnnprov.SpotProblem) -> RevocationDecomposition:
    clock = Clock(60.0)
    return RevocationDecomposition(problem, clock=clock, log=SolverLog(clock), outage_s=JOIN_OVERHEAD_S)


def every_plan(model: SpotModel) -> np.ndarray:
    cols = model.columns
    plans = [compositions(cols.lower, cols.upper, k) for k in range(2, int(cols.upper.sum()) + 1)]
    return np.concatenate([p for p in plans if len(p)] or [np.zeros((0, len(cols)), dtype=np.int64)])


def sigma(model: SpotModel, counts: np.ndarray, ps: int) -> tuple[np.ndarray, object]:
    ev = model.evaluate(counts, ps)
    g1 = model.problem.workload.gamma_1
    return ev.iteration_rate / ((ev.iterations + g1) * model.loss_gap), ev


def tops(model: SpotModel, counts: np.ndarray, ps: int) -> tuple[np.ndarray, np.ndarray]:
    """Each plan's top column and next column (fastest used, ties: the highest index; -1: none)."""
    k = counts.sum(axis=1)
    speed = model.columns.batch / model.iteration_times(k, np.full(len(k), ps))

    def fastest(row: np.ndarray, s: np.ndarray) -> int:
        used = np.flatnonzero(row)
        return int(max(used, key=lambda c: (s[c], c))) if len(used) else -1

    top = np.array([fastest(row, s) for row, s in zip(counts, speed)])
    rest = counts.copy()
    rest[np.arange(len(counts)), top] = 0
    return top, np.array([fastest(row, s) for row, s in zip(rest, speed)])


def drops(model: SpotModel, counts: np.ndarray, ps: int, top: np.ndarray) -> np.ndarray:
    """The oracle: D of revoking one top worker, plan by plan."""
    full, _ = sigma(model, counts, ps)
    fewer = counts.copy()
    fewer[np.arange(len(counts)), top] -= 1
    rest, _ = sigma(model, fewer, ps)
    return 1 - rest / full


def point_cell(search: RevocationDecomposition, plan: np.ndarray, ps: int, top: int, nxt: int) -> Cell:
    """The cell of the split part holding ``plan``, its ranges shrunk to the plan's values."""
    shape = search.shape(int(plan.sum()), ps)
    v = shape.speed
    index = np.arange(len(v))
    allowed = (search.cols.upper > 0) & ((v < v[top]) | ((v == v[top]) & (index <= top)))
    hi = search.cols.upper
    if plan[top] >= 2:
        pinned = ((top, 2, int(hi[top])),)
    else:
        faster = [c for c in np.flatnonzero(allowed) if c not in (top, nxt) and (v[c], c) > (v[nxt], nxt)]
        pinned = ((top, 1, 1), (nxt, 1, int(hi[nxt])), *((int(c), 0, 0) for c in faster))
    x, speed_sum, q = float(plan @ shape.rate), float(plan @ v), float(plan @ v**2)
    b = speed_sum / x
    return Cell(
        0.0,
        0,
        int(plan.sum()),
        ps,
        top,
        down(b),
        up(b),
        down(speed_sum),
        up(speed_sum),
        allowed,
        x_lo=down(x),
        x_hi=up(x),
        q_lo=down(q),
        q_hi=up(q),
        pinned=pinned,
    )


@pytest.mark.parametrize("seed", range(8))
def test_drop_bound_is_exact_on_one_plan_cells(seed: int) -> None:
    """On a cell shrunk to one plan the bound is the plan's D+ to 1e-4 relative (so 1.001 x it fails
    where D > 0.01) and never above it."""
    problem = uncontended_problem(seed)
    search = search_of(problem)
    model = SpotModel(problem)
    plans = every_plan(model)
    top, nxt = tops(model, plans, 1)
    spot = np.array([search.revocable[t] for t in top])
    plans, top, nxt = plans[spot], top[spot], nxt[spot]
    exact = drops(model, plans, 1, top)
    ok = np.isfinite(exact)
    assert ok.sum() >= 3
    bounds = np.array(
        [drop_bound(search, point_cell(search, p, 1, int(t), int(n))) for p, t, n in zip(plans, top, nxt)]
    )
    exact = np.maximum(exact, 0.0)  # the criterion uses D+ (no delay when D <= 0)
    assert (bounds[ok] <= exact[ok]).all()
    # the cell's ends are widened by 1e-9 relative, which Q' = Q - v_t^2 amplifies by Q / Q'
    # where the top worker dominates: 1e-4 relative and 3e-6 absolute, still 10 x below 0.1 %
    assert (bounds[ok] >= exact[ok] * (1 - 1e-4) - 3e-6).all()
    sensitive = ok & (exact > 1e-2)
    assert sensitive.any() and (bounds[sensitive] * 1.001 > exact[sensitive]).all()


def test_drop_bound_holds_over_the_cells_the_search_builds() -> None:
    """Over each top cell and each part of its split, no plan inside the cell's ranges has a
    smaller D+ (eight random problems; some of the bounds must be positive)."""
    positive = 0
    for seed in range(8):
        problem = uncontended_problem(seed, max_quota=4)
        search = search_of(problem)
        model = SpotModel(problem)
        k_lo, k_hi = search.worker_range()
        for k in range(max(k_lo, 2), k_hi + 1):
            for cell in search.bounds.top_cells(k, 1):
                for part in [cell, *(search.split_by_top_count(cell) if search.splits(cell) else [])]:
                    positive += check_cell(search, model, part)
    assert positive >= 10


def check_cell(search: RevocationDecomposition, model: SpotModel, cell: Cell) -> bool:
    """Assert the bound over every plan of the cell's box inside its ranges; whether it is positive."""
    bound = drop_bound(search, cell)
    lo, hi = search.box(cell)
    plans = compositions(lo[cell.allowed], hi[cell.allowed], cell.workers)
    if not len(plans):
        return False
    counts = np.zeros((len(plans), len(lo)), dtype=np.int64)
    counts[:, cell.allowed] = plans
    shape = search.shape(cell.workers, cell.ps)
    x, v, q = counts @ shape.rate, counts @ shape.speed, counts @ shape.speed**2
    inside = (
        (x >= cell.x_lo)
        & (x <= cell.x_hi)
        & (v >= cell.v_lo)
        & (v <= cell.v_hi)
        & (v / x >= cell.b_lo)
        & (v / x <= cell.b_hi)
        & (q >= cell.q_lo)
        & (q <= cell.q_hi)
    )
    if not inside.any():
        return False
    exact = drops(model, counts[inside], cell.ps, np.full(int(inside.sum()), cell.top))
    assert bound <= max(float(np.nanmin(exact)), 0.0)
    return bound > 0


def test_drop_bound_claims_nothing_where_the_ps_link_is_contended() -> None:
    """Rates that change from K to K - 1 workers get no bound (0 is always valid)."""
    problem = uncontended_problem(3)
    problem = problem.replace(
        platform=dnnprov.SpotPlatform(ps_bandwidth_mb_s=1.0, pcie_bandwidth_mb_s=10000.0, ps_price_per_h=0.0)
    )
    search = search_of(problem)
    cells = [c for k in range(2, 6) for c in search.bounds.top_cells(k, 1)]
    assert cells and all(drop_bound(search, c) == 0.0 for c in cells)


def test_outage_of_the_criterion() -> None:
    """O = min(K o, T_obj - h) with replacement, T_obj - h without, 0 for K = 0."""
    problem = uncontended_problem(1)
    limit = problem.slo.time_s - problem.slo.takeover_overhead_s
    assert robust_outage(problem, 1, 10.0, True) == pytest.approx(min(10.0, limit))
    assert robust_outage(problem, 3, 1e9, True) == pytest.approx(limit)
    assert robust_outage(problem, 2, 10.0, False) == pytest.approx(limit)
    assert robust_outage(problem, 0, 10.0, True) == 0.0


def tight_problem(seed: int) -> dnnprov.SpotProblem:
    """An uncontended problem whose T_obj is within 3 % of its nominal optimum's time, so that
    the robust optimum differs from the nominal one."""
    problem = uncontended_problem(seed, max_quota=5)
    nominal = dnnprov.solve(problem, method="enumerate")
    if nominal.plan is None:
        return problem
    rng = np.random.default_rng(seed + 100)
    return problem.replace(slo=dnnprov.SpotSLO(problem.slo.loss, nominal.time_s * float(rng.uniform(1.0, 1.03))))


@pytest.mark.parametrize("seed", range(10))
def test_decomposition_with_cell_milps_matches_enumeration(seed: int) -> None:
    """With every cell decided by MILPs (no outright enumeration), the bounded search finds the
    enumeration's robust optimum, K = 1 and 2, with and without replacement."""
    problem = tight_problem(seed)
    model = SpotModel(problem)
    for k, replaced in ((1, True), (2, True), (1, False)):
        expected = dnnprov.solvers.revocation.robust.solve_robust(problem, k, replaced=replaced, method="enumerate")
        delays = robust_check(model, k, JOIN_OVERHEAD_S, replaced)
        limit = problem.slo.time_s * (1 + 1e-12)

        def judge(counts, ps, nominal, delays=delays, limit=limit):
            delay, _ = delays(counts, ps)
            return nominal.time_s + delay <= limit, nominal.cost

        result, _ = decompose(
            problem, judge, Clock(600.0), robust_outage(problem, k, JOIN_OVERHEAD_S, replaced), cell_enumeration=0
        )
        assert result.status is expected.status
        if expected.status is dnnprov.Status.OPTIMAL:
            assert result.cost == pytest.approx(expected.cost, rel=1e-9)
        assert not math.isnan(result.bound)
