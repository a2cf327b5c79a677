"""The verifying branch and bound's reduced-cost tightening (issue 19): it never cuts a point below the aim.

Oracle: every integer point of small random programs listed, its cost and rows evaluated in
exact rational arithmetic (``Fraction``), with costs and row coefficients drawn over 1e-8..1e8.
The tightening is checked on its own (:func:`reduced_cost_box` over HiGHS's duals and over
random duals, in random sub-boxes) and through :func:`verified_milp_bound`; a last test
requires it to save nodes (fewer than without it) on a program where it should.
"""

from __future__ import annotations

import itertools
import math
import time
from fractions import Fraction

import highspy
import numpy as np
import pytest
from dnnprov.solvers.highs_driver import (
    DualBounds,
    SparseRows,
    implied_box,
    new_highs,
    reduced_cost_box,
    verified_milp_bound,
)

N, TOP = 4, 3  # columns, each an integer in [0, TOP]


def magnitudes(rng: np.random.Generator, size: int) -> np.ndarray:
    """Signed values whose magnitudes span 1e-8..1e8."""
    return rng.choice([-1.0, 1.0], size) * 10.0 ** rng.uniform(-8, 8, size)


def random_program(rng: np.random.Generator):
    """Rows through a known integer point (slack of their own size), costs and coefficients over 16 decades."""
    a = rng.normal(size=(3, N)) * np.where(rng.random((3, N)) < 0.5, 1.0, 10.0 ** rng.uniform(-8, 8, (3, N)))
    point = rng.integers(0, TOP + 1, N)
    size = np.abs(a) @ np.full(N, TOP) + 1e-300
    rows = [
        (
            np.arange(N),
            a[i],
            float(a[i] @ point - rng.uniform(0, 0.3) * size[i]),
            float(a[i] @ point + rng.uniform(0, 0.3) * size[i]),
        )
        for i in range(3)
    ]
    cost = magnitudes(rng, N)
    return cost, float(magnitudes(rng, 1)[0]), SparseRows.of(rows), rows


def exact_points(cost: np.ndarray, offset: float, rows) -> list[tuple[tuple[int, ...], Fraction]]:
    """Every integer point of the box [0, TOP]^N meeting the rows exactly, with its exact cost."""
    out = []
    for x in itertools.product(range(TOP + 1), repeat=N):
        if all(
            Fraction(low) <= sum(Fraction(float(v)) * x[k] for k, v in zip(idx, a)) <= Fraction(high)
            for idx, a, low, high in rows
        ):
            out.append((x, Fraction(offset) + sum(Fraction(float(c)) * v for c, v in zip(cost, x))))
    return out


def relaxation(cost: np.ndarray, offset: float, sparse: SparseRows, scale: float) -> highspy.Highs:
    """A HiGHS object holding the LP relaxation over the box [0, TOP] (objective divided by ``scale``)."""
    h = new_highs()
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = N, len(sparse.low)
    lp.offset_, lp.col_cost_ = offset / scale, cost / scale
    lp.col_lower_, lp.col_upper_ = np.zeros(N), np.full(N, float(TOP))
    lp.row_lower_, lp.row_upper_ = sparse.low, sparse.high
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = (
        sparse.starts(),
        sparse.col.astype(np.int32),
        sparse.value,
    )
    h.setOptionValue("presolve", "off")
    h.passModel(lp)
    return h


def test_tightened_boxes_keep_every_point_below_the_aim():
    """Over random sub-boxes, HiGHS's duals and random ones, and aims between the bound and the costliest
    point: every integer point of the sub-box that meets the rows and costs less than the aim stays."""
    rng = np.random.default_rng(19)
    integer = np.ones(N, dtype=bool)
    checks = cuts = 0
    for _ in range(120):
        cost, offset, sparse, rows = random_program(rng)
        points = exact_points(cost, offset, rows)
        scale = float(np.abs(cost).max())
        h = relaxation(cost, offset, sparse, scale)
        duals = DualBounds(cost, offset, sparse)
        for _ in range(4):
            lo = rng.integers(0, 2, N).astype(float)
            hi = np.maximum(lo, rng.integers(1, TOP + 1, N)).astype(float)
            h.changeColsBounds(N, np.arange(N, dtype=np.int32), lo, hi)
            h.run()
            if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
                continue
            box_lo, box_hi = implied_box(lo, hi, sparse)
            for y in (np.asarray(h.getSolution().row_dual) * scale, magnitudes(rng, len(rows))):
                bound, r_low, r_high = duals.terms(box_lo, box_hi, y)
                inside = [(x, v) for x, v in points if all(lo[k] <= x[k] <= hi[k] for k in range(N))]
                if not math.isfinite(bound):
                    continue
                values = sorted(float(v) for _, v in inside)
                for aim in [bound + abs(bound) * 1e-9 + 1e-300] + values[:3] + [float(rng.uniform(bound, bound + 1))]:
                    if aim <= bound:
                        continue
                    new_lo, new_hi = reduced_cost_box(lo, hi, box_lo, box_hi, r_low, r_high, bound, aim, integer)
                    cuts += int(((new_lo > lo) | (new_hi < hi)).any())
                    for x, value in inside:
                        checks += 1
                        if value < Fraction(aim):
                            assert all(new_lo[k] <= x[k] <= new_hi[k] for k in range(N)), (x, value, aim)
    assert checks > 5000 and cuts > 200  # the cuts happen, and never take a point below the aim


@pytest.mark.parametrize("tighten", [True, False])
def test_search_proves_only_what_brute_force_confirms(tighten):
    """The bound is at most the least point's exact cost; a closed search (bound >= aim) leaves no point
    below the aim; a point returned meets the rows and costs less than the aim."""
    rng = np.random.default_rng(23)
    closed = found = 0
    for _ in range(80):
        cost, offset, sparse, rows = random_program(rng)
        points = exact_points(cost, offset, rows)
        values = sorted(v for _, v in points)
        scale = float(np.abs(cost).max())
        spread = float(np.abs(cost).sum()) * TOP + abs(offset)
        for aim in (
            float(values[0]) - 1e-3 * spread,
            float(values[0]) + 1e-3 * spread,
            float(values[len(values) // 2]),
        ):
            h = relaxation(cost, offset, sparse, scale)
            got = verified_milp_bound(
                h,
                cost,
                offset,
                scale,
                np.zeros(N),
                np.full(N, float(TOP)),
                sparse,
                np.ones(N, dtype=bool),
                aim,
                time.perf_counter() + 30,
                tighten=tighten,
            )
            assert got.bound <= values[0]
            if got.point is not None:
                found += 1
                x = tuple(int(v) for v in got.point)
                assert x in dict(points) and dict(points)[x] < Fraction(aim)
            elif got.bound >= aim:
                closed += 1
                assert values[0] >= Fraction(aim)
    assert closed > 40 and found > 40


def covering_program(n: int = 8):
    """min sum c_j x_j with sum w_j x_j >= b, x_j integer in [0, 4], and its optimum by listing all 5^n points:
    many fractional LP optima, and half the columns far costlier per unit of cover (large reduced costs)."""
    rng = np.random.default_rng(6)
    weight = rng.uniform(1, 3, n)
    cost = weight * np.where(np.arange(n) < n // 2, rng.uniform(1.0, 1.2, n), rng.uniform(2, 4, n))
    points = np.array(list(itertools.product(range(5), repeat=n)), dtype=float)
    best = float((points @ cost)[points @ weight >= 30.5].min())
    return cost, SparseRows.of([(np.arange(n), weight, 30.5, math.inf)]), best


def test_tightening_saves_nodes():
    """Proving "no point below the optimum less 1e-6" takes fewer nodes with the tightening than
    without it (the same search otherwise), and both prove it."""
    cost, rows, best = covering_program()
    n = len(cost)
    upper = np.full(n, 4.0)
    nodes = {}
    for tighten in (True, False):
        h = new_highs()
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = n, 1
        lp.col_cost_, lp.col_lower_, lp.col_upper_ = cost / cost.max(), np.zeros(n), upper
        lp.row_lower_, lp.row_upper_ = rows.low, rows.high
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = (
            rows.starts(),
            rows.col.astype(np.int32),
            rows.value,
        )
        h.passModel(lp)
        got = verified_milp_bound(
            h,
            cost,
            0.0,
            float(cost.max()),
            np.zeros(n),
            upper,
            rows,
            np.ones(n, dtype=bool),
            best - 1e-6,
            time.perf_counter() + 60,
            node_limit=20000,
            tighten=tighten,
        )
        assert got.point is None and got.bound >= best - 1e-6
        nodes[tighten] = got.nodes
    assert 3 * nodes[True] < nodes[False], nodes  # seen: 7 and 33
