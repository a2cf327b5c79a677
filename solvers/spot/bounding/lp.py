"""The LP relaxations of a spot cell, in Charnes-Cooper variables (a part of ``CellBounds``).

A cell's plans satisfy linear rows in the counts n (``CellBounds.cell_rows``, handed to each
LP here); dividing by
X = r n turns min (P + c0) / X into an LP in y = n / X and t = 1 / X. These LPs give the
min price per rate over a cell's relaxation and the McCormick bound on (P + c0) j / X;
their points, rounded to plans, are tried as incumbents. No LP value HiGHS reports is used
as a bound: the bound is the safe dual bound the driver verifies in unscaled terms
(:func:`dnnprov.solvers.highs_driver.safe_dual_bound`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import highspy
import numpy as np
from dnnprov.solvers.highs_driver import MilpStatus, SparseRows, solve_milp
from dnnprov.solvers.spot.cells import Cell, greedy, up
from dnnprov.solvers.spot.terms import SpotTerms

from dnnprov.progress import Clock

#: A cell's linear rows ``low <= a @ n <= high`` (``CellBounds.cell_rows``).
Rows = list[tuple[np.ndarray, float, float]]


class LpBounds:
    """LP bounds of a cell, solved on ``highs`` within ``clock``; rounded LP points go to ``try_plan``.

    ``stats["lps"]`` counts the LPs; ``try_plan(counts, ps)`` is the incumbent search's
    (:meth:`~dnnprov.solvers.spot.incumbents.IncumbentSearch.consider`).
    """

    def __init__(
        self,
        terms: SpotTerms,
        highs: highspy.Highs,
        clock: Clock,
        stats: dict[str, int],
        try_plan: Callable[[np.ndarray, int], None],
    ) -> None:
        self.problem = terms.problem
        self.cols = terms.cols
        self.c0_per_ps = terms.c0_per_ps
        self.gamma_1 = terms.gamma_1
        self.gamma_3 = terms.gamma_3
        self.shape = terms.shape
        self.box = terms.box
        self.highs = highs
        self.clock = clock
        self.stats = stats
        self.try_plan = try_plan
        self.lp_bases: dict = {}  # warm starts of the cell LPs (solve_milp's ``bases``)

    def charnes_cooper_rows(
        self, cell: Cell, lo: np.ndarray, hi: np.ndarray, rows: Rows
    ) -> tuple[np.ndarray, SparseRows]:
        """The cell's LP relaxation in y = n / X (the allowed columns, first) and t = 1 / X.

        Rows: r y = 1, sum y = K t, lo t <= y <= hi t and every cell row (``rows``) scaled by t;
        callers may add variables after t. A box row is left out where the rest implies it:
        y >= 0 t (every variable is nonnegative) and y <= hi t with hi >= K (y <= sum y = K t).
        Built as arrays (row after row: the two rows of each column, then each cell row's
        finite sides), since a cell LP is built for every cell that reaches the LP stage.
        """
        shape = self.shape(cell.workers, cell.ps)
        allowed = np.flatnonzero(cell.allowed)
        m, k = len(allowed), float(cell.workers)
        # lo_c t <= y_c (where lo_c > 0) and y_c <= hi_c t (where hi_c < K), column by column
        ends = np.empty((m, 2))
        ends[:, 0], ends[:, 1] = lo[allowed], hi[allowed]
        box: np.ndarray = np.empty((m, 2), dtype=bool)
        box[:, 0], box[:, 1] = ends[:, 0] > 0, ends[:, 1] < k
        box = box.ravel()
        pair = np.arange(2 * m)
        box_col, box_lower, box_end = pair[box] // 2, pair[box] % 2 == 0, ends.ravel()[box]
        n_box = len(box_col)
        a = np.array([row[0] for row in rows], dtype=float).reshape(len(rows), -1)[:, allowed]
        sides = np.array([row[1:] for row in rows], dtype=float).reshape(len(rows), 2)
        finite = np.isfinite(sides).ravel()
        which = np.flatnonzero(finite)
        n_scaled = len(which)
        scaled = np.empty((n_scaled, m + 1))
        scaled[:, :m], scaled[:, m] = a[which // 2], -sides.ravel()[which]
        scaled_lower = which % 2 == 0
        box_pair = np.empty((n_box, 2))
        box_pair[:, 0], box_pair[:, 1] = 1.0, -box_end
        box_cols = np.empty((n_box, 2), dtype=np.int64)
        box_cols[:, 0], box_cols[:, 1] = box_col, m
        everything = np.arange(m + 1)
        lengths = np.concatenate([[m, m + 1], np.full(n_box, 2), np.full(n_scaled, m + 1)])
        return allowed, SparseRows(
            np.repeat(np.arange(len(lengths)), lengths),
            np.concatenate(
                [everything[:m], everything, box_cols.ravel(), np.broadcast_to(everything, (n_scaled, m + 1)).ravel()]
            ),
            np.concatenate([shape.rate[allowed], np.ones(m), [-k], box_pair.ravel(), scaled.ravel()]),
            np.concatenate([[1.0, 0.0], np.where(box_lower, 0.0, -math.inf), np.where(scaled_lower, 0.0, -math.inf)]),
            np.concatenate([[1.0, 0.0], np.where(box_lower, math.inf, 0.0), np.where(scaled_lower, math.inf, 0.0)]),
        )

    def charnes_cooper_box(self, cell: Cell) -> tuple[np.ndarray, np.ndarray]:
        """Finite ends for (y, t) that every point of the Charnes-Cooper rows meets.

        Proof: y >= 0 and r y = 1 with every r_c > 0 give r_c y_c <= 1, so y_c <= 1 / r_c, and
        sum y <= sum (r_c / r_min) y_c = 1 / r_min with sum y = K t, so t <= 1 / (K r_min). The
        rows imply these ends, so the LP is unchanged; they save the driver's bound
        propagation (its safe dual bound needs finite ends where a reduced cost may have
        either sign). The divisions are rounded up by 1e-9 relative (:func:`up`), far above
        their rounding error. A column of rate 0 (none in a valid problem) keeps an infinite end.
        """
        rate = self.shape(cell.workers, cell.ps).rate[cell.allowed]
        positive = rate > 0
        with np.errstate(divide="ignore"):
            y_hi = np.where(positive, up(1.0 / np.where(positive, rate, 1.0)), math.inf)
        t_hi = up(1.0 / (cell.workers * float(rate.min()))) if positive.all() else math.inf
        return np.zeros(len(rate) + 1), np.append(y_hi, t_hi)

    def solve_lp(
        self, cost: np.ndarray, lower: np.ndarray, upper: np.ndarray, rows: list | SparseRows, cell: Cell | None = None
    ) -> float | None:
        """An LP's verified lower bound; ``None``: proven infeasible; ``-inf``: no answer.

        The bound is the driver's safe dual bound (``MilpSolution.dual_bound``), never
        HiGHS's reported optimum: at large magnitudes that has been above the true one.

        With ``cell``, the LP point (y, t) is rounded to a plan of the cell and tried as an
        incumbent (a heuristic: it proves nothing).
        """
        solution = solve_milp(
            self.highs,
            cost,
            lower,
            upper,
            rows,
            integer=np.zeros(len(cost), dtype=bool),
            time_limit_s=max(self.clock.remaining(), 1e-3),
            bases=self.lp_bases,
        )
        self.stats["lps"] = self.stats.get("lps", 0) + 1
        if solution.status is MilpStatus.INFEASIBLE:  # verified by a Farkas ray
            return None
        if solution.status is not MilpStatus.OPTIMAL:
            return -math.inf
        if cell is not None and solution.x is not None:
            self.round_lp_point(cell, solution.x)
        return solution.dual_bound  # verified in unscaled terms (highs_driver.safe_dual_bound)

    def round_lp_point(self, cell: Cell, x: np.ndarray) -> None:
        """Round the Charnes-Cooper point n = y / t to K workers inside the box; try it."""
        allowed = np.flatnonzero(cell.allowed)
        t = x[len(allowed)]
        if not t > 0:
            return
        lo, hi = self.box(cell)
        target = np.clip(x[: len(allowed)] / t, lo[allowed], hi[allowed])
        counts = np.zeros(len(self.cols), dtype=np.int64)
        counts[allowed] = np.floor(target + 1e-9).astype(np.int64)
        left = cell.workers - int(counts.sum())
        for i in np.argsort(-(target - np.floor(target + 1e-9)), kind="stable"):  # largest remainders
            if left <= 0:
                break
            c = allowed[i]
            if counts[c] < hi[c]:
                counts[c] += 1
                left -= 1
        if left == 0:
            self.try_plan(counts, cell.ps)

    def lp_ratio(self, cell: Cell, lo: np.ndarray, hi: np.ndarray, rows: Rows) -> float | None:
        """min (P + c0) / X over the LP relaxation of the cell's ``rows`` (Charnes-Cooper); ``None``: empty."""
        allowed, cc_rows = self.charnes_cooper_rows(cell, lo, hi, rows)
        cost = np.concatenate([self.cols.price[allowed], [cell.ps * self.c0_per_ps]])
        value = self.solve_lp(cost, *self.charnes_cooper_box(cell), cc_rows, cell=cell)
        return None if value is None else max(value, 0.0)

    def max_ratio(self, cell: Cell, lo: np.ndarray, hi: np.ndarray) -> float:
        """An upper bound on (P + c0) / X over the box: Dinkelbach for the maximum.

        As in :meth:`min_ratio`, with the greedy maximizing P + c0 - lambda X; without
        convergence, max_c p_c / r_c + c0 / X_lo (a ratio of sums is at most the largest).
        """
        r = self.shape(cell.workers, cell.ps).rate
        p = self.cols.price
        c0 = cell.ps * self.c0_per_ps
        used = cell.allowed & (hi > 0)
        safe = float((p[used] / r[used]).max()) + (c0 / cell.x_lo if cell.x_lo > 0 else math.inf)
        n = greedy(r, lo, hi, cell.workers)
        ratio = (n @ p + c0) / (n @ r)
        for _ in range(100):
            n = greedy(ratio * r - p, lo, hi, cell.workers)
            new = (n @ p + c0) / (n @ r)
            if new <= ratio * (1 + 1e-14):
                return min(safe, up(float(ratio) * (1 + 1e-12)))
            ratio = new
        return safe

    def lp_product_bound(self, cell: Cell, lo: np.ndarray, hi: np.ndarray, rows: Rows, spread: float) -> float | None:
        """A lower bound on (P + c0) j / X over the cell's ``rows``, keeping how rho and b_w move together.

        With rho = (P + c0) / X and b = b_w, j >= c A(b) - g1 (c = ``spread``, the cell's CC factor bound,
        A(b) = g2 b + g3' >= 0 for every plan with a root of eq. 3), so
        rho j >= (c g3' - g1) rho + c g2 rho b. For g2 <= 0 the product rho b is replaced by
        its concave McCormick envelope over [rho_lo, rho_hi] x [b_lo, b_hi] (an upper bound
        on rho b, hence a lower bound on c g2 rho b). In Charnes-Cooper variables rho = p y +
        c0 t and b = v y are linear, so one LP gives the bound. ``None``: the LP is
        infeasible (the cell is empty); ``-inf``: no bound (g2 > 0 or no LP answer).
        """
        w = self.problem.workload
        if w.gamma_2 > 0:
            return -math.inf
        shape = self.shape(cell.workers, cell.ps)
        allowed = np.flatnonzero(cell.allowed)
        m = len(allowed)
        _, cc_rows = self.charnes_cooper_rows(cell, lo, hi, rows)
        c = spread
        rho_lo, rho_hi = cell.rho_min, self.max_ratio(cell, lo, hi)
        if not math.isfinite(rho_hi):
            return -math.inf
        c0 = cell.ps * self.c0_per_ps
        price, speed = self.cols.price[allowed], shape.speed[allowed]
        both = np.arange(m + 2)  # y..., t, w
        envelope = [
            (both, np.concatenate([-rho_c * speed - b_c * price, [-b_c * c0, 1.0]]), -math.inf, -rho_c * b_c)
            for rho_c, b_c in ((rho_lo, cell.b_hi), (rho_hi, cell.b_lo))
        ]  # w <= rho_c b + b_c rho - rho_c b_c
        stacked = SparseRows.stack([cc_rows, SparseRows.of(envelope)])
        lin = c * self.gamma_3 - self.gamma_1
        cost = np.concatenate([lin * price, [lin * c0, c * w.gamma_2]])
        # 0 <= w <= rho_hi b_hi: every plan's point has w = rho b with rho <= rho_hi and b <= b_hi
        # (so the LP still holds every plan), and the safe dual bound needs finite ends where
        # w's reduced cost may have either sign; y and t as in charnes_cooper_box
        lower, upper = self.charnes_cooper_box(cell)
        lower, upper = np.append(lower, 0.0), np.append(upper, up(rho_hi * max(cell.b_hi, 0.0)) + 1e-300)
        return self.solve_lp(cost, lower, upper, stacked)
