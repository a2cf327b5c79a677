"""The issue 19 speed-ups of the spot decomposition keep every bound a bound (against brute force).

Each claim is checked on small random problems whose plans are all enumerated and evaluated
with :class:`SpotModel`, or on small integer programs solved by listing every point: the
threshold MILPs decided by the driver's own branch and bound first (and by HiGHS's MILP when it
gives up), the finite box of the Charnes-Cooper LPs, and the bounds a cell gets only when it is
popped (``CellBounds.complete``). Each test also requires its bound to come near the brute-force
value, so an inflated bound fails and a vacuous one does too.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from dnnprov.solvers import highs_driver
from dnnprov.solvers.highs_driver import new_highs, solve_milp
from dnnprov.solvers.spot.cells import compositions, nogoods_inside
from dnnprov.solvers.spot.exact import SpotDecomposition

SEEDS = range(30)


def small_integer_program(rng: np.random.Generator, n: int = 4):
    """Rows through a known integer point, box [0, 3], costs over 12 decades; every point listed."""
    a = rng.normal(size=(3, n))
    point = rng.integers(0, 4, n)
    rows = [
        (np.arange(n), a[i], float(a[i] @ point) - rng.uniform(0, 2), float(a[i] @ point) + rng.uniform(0, 2))
        for i in range(3)
    ]
    cost = rng.normal(size=n) * 10.0 ** rng.uniform(-6, 6, n)
    points = np.array(list(itertools.product(range(4), repeat=n)), dtype=float)
    meets = np.all([(points @ r[1] >= r[2]) & (points @ r[1] <= r[3]) for r in rows], axis=0)
    return cost, rows, points[meets] @ cost


@pytest.mark.parametrize(
    ("first_nodes", "search_first"), [(highs_driver.FIRST_NODES, True), (0, True), (highs_driver.FIRST_NODES, False)]
)
def test_threshold_milps_answer_like_brute_force(monkeypatch, first_nodes, search_first):
    """ "Is there a point below t?": a point returned is one (integer, within the rows, below t), a
    verified bound never exceeds the least point's value, and either the point or the proof comes
    (t never equal to a point's value: a tie cannot be proven in floating point).

    ``first_nodes = 0`` sends every question on to HiGHS's MILP (the fallback path), and
    ``search_first = False`` asks HiGHS's MILP first.
    """
    monkeypatch.setattr(highs_driver, "FIRST_NODES", first_nodes)
    rng = np.random.default_rng(19)
    h = new_highs()
    found = proved = 0
    for _ in range(60):
        cost, rows, values = small_integer_program(rng)
        best = float(values.min())
        spread = float(np.abs(cost).sum()) * 3
        distinct = np.unique(values)
        middle = [float(distinct[len(distinct) // 2 - 1 : len(distinct) // 2 + 1].mean())] * (len(distinct) > 1)
        for target in [best - 1e-3 * spread, best + 1e-3 * spread] + middle:  # between two values
            got = solve_milp(
                h,
                cost,
                np.zeros(4),
                np.full(4, 3.0),
                rows,
                proof_target=target,
                first_below_target=True,
                search_first=search_first,
            )
            assert got.dual_bound <= best + 1e-12 * spread
            if got.x is not None and got.objective < target:
                x = got.x
                assert np.allclose(x, np.round(x), atol=1e-9) and (x >= -1e-9).all() and (x <= 3 + 1e-9).all()
                assert all(r[2] - 1e-9 * spread <= r[1] @ x <= r[3] + 1e-9 * spread for r in rows)
                assert float(cost @ np.round(x)) < target + 1e-9 * spread
                found += 1
            else:
                assert best >= target - 1e-9 * spread  # no point claimed: none below t
                assert got.dual_bound >= target  # ... and proven
                proved += 1
    assert found >= 60 and proved >= 60  # both answers exercised


def cells_with_plans(make_random_spot, seed: int, max_quota: int = 3):
    """(decomposition, cell, the cell's plans, their evaluation, which lie in the cell's ranges) per top cell."""
    problem = make_random_spot(np.random.default_rng([19, seed]), max_quota=max_quota)
    d = SpotDecomposition(problem)
    k_lo, k_hi = d.worker_range()
    for k in range(max(k_lo, 2), min(k_hi, 7) + 1):
        for s in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
            for cell in d.bounds.top_cells(k, s):
                lo, hi = d.box(cell)
                plans = compositions(lo, hi, k)
                if not len(plans):
                    continue
                ev = d.model.evaluate(plans, s)
                mine = (
                    (ev.batch_wa >= cell.b_lo)
                    & (ev.batch_wa <= cell.b_hi)
                    & (ev.speed >= cell.v_lo)
                    & (ev.speed <= cell.v_hi)
                    & (ev.iteration_rate >= cell.x_lo)
                    & (ev.iteration_rate <= cell.x_hi)
                )
                if mine.any():
                    yield d, cell, plans[mine], ev, mine


def test_charnes_cooper_box_holds_every_plan_and_keeps_the_lp_bounds(make_random_spot):
    """Every plan's point (n / X, 1 / X) lies in the finite box, and the LP bounds over it stay
    below every feasible plan's (P + c0) / X and (P + c0) j / X, and near the least of them."""
    checked, near = 0, 0
    for seed in SEEDS:
        for d, cell, plans, ev, mine in cells_with_plans(make_random_spot, seed):
            s = cell.ps
            feasible = ev.feasible[mine]  # the cell's rows hold for every feasible plan of it
            if not feasible.any():
                continue
            plans, mine = plans[feasible], np.flatnonzero(mine)[feasible]
            x = ev.iteration_rate[mine]
            lower, upper = d.bounds.lp.charnes_cooper_box(cell)
            allowed = np.flatnonzero(cell.allowed)
            points = np.column_stack([plans[:, allowed] / x[:, None], 1 / x])
            assert (points >= lower).all() and (points <= upper).all()
            ratio = (plans @ d.cols.price + s * d.c0_per_ps) / x
            lo, hi = d.box(cell)
            rho = d.bounds.lp.lp_ratio(cell, lo, hi, d.bounds.cell_rows(cell))
            assert rho is not None and rho <= ratio.min() * (1 + 1e-9)
            cell.rho_min = rho
            product = d.bounds.lp.lp_product_bound(
                cell, lo, hi, d.bounds.cell_rows(cell), d.bounds.cc.spread_factor(cell)
            )
            per_rate = ratio * ev.iterations[mine]
            assert product is not None and product <= per_rate.min() * (1 + 1e-9)
            checked += 1
            near += rho >= ratio.min() * 0.98
    assert checked >= 100 and near >= checked // 4


def test_bounds_added_when_popped_stay_below_every_plan(make_random_spot):
    """A top cell's bound, before and after ``complete``, stays below every feasible plan in it;
    ``complete`` never lowers it, drops only cells without a plan below the threshold, and raises
    some bounds (not vacuous)."""
    checked, raised = 0, 0
    for seed in SEEDS:
        for d, cell, plans, ev, mine in cells_with_plans(make_random_spot, seed):
            feasible = ev.feasible[mine]
            cheapest = float(ev.cost[mine][feasible].min()) if feasible.any() else np.inf
            before = cell.bound
            assert before <= cheapest * (1 + 1e-9) + 1e-12
            done = d.bounds.complete(cell)
            if done is None:
                assert cheapest >= d.bounds.threshold * (1 - 1e-9)
                continue
            assert before <= done.bound <= cheapest * (1 + 1e-9) + 1e-12
            checked += 1
            raised += done.bound > before * (1 + 1e-6)
    assert checked >= 100 and raised >= 10


def test_children_keep_the_nogoods_of_every_plan_in_their_ranges(make_random_spot):
    """``nogoods_inside`` drops only plans outside a cell's b_w, X, V or Q range (whose range rows
    already exclude them), unless such a plan came back once; it does drop some (not vacuous)."""
    kept_all, dropped = 0, 0
    for seed in SEEDS:
        for d, cell, plans, ev, mine in cells_with_plans(make_random_spot, seed):
            box_lo, box_hi = d.box(cell)
            everything = compositions(box_lo, box_hi, cell.workers)
            cell.nogoods = [tuple(int(v) for v in p) for p in everything]
            v_mid = (cell.v_lo + cell.v_hi) / 2
            cell.v_lo = v_mid  # half of the V range: some plans leave
            shape = d.shape(cell.workers, cell.ps)
            x, v = everything @ shape.rate, everything @ shape.speed
            q = everything @ shape.speed**2
            inside = (
                (v / x >= cell.b_lo)
                & (v / x <= cell.b_hi)
                & (x >= cell.x_lo)
                & (x <= cell.x_hi)
                & (v >= cell.v_lo)
                & (v <= cell.v_hi)
                & (q >= cell.q_lo)
                & (q <= cell.q_hi)
            )
            back = cell.nogoods[int(np.argmin(v))]  # the slowest plan came back once
            d.returned_again.add(back)
            kept = set(nogoods_inside(cell, d.shape(cell.workers, cell.ps), d.returned_again))
            assert {p for p, i in zip(cell.nogoods, inside) if i} <= kept and back in kept
            kept_all += 1
            dropped += len(kept) < len(cell.nogoods)
    assert kept_all >= 100 and dropped >= kept_all // 4
