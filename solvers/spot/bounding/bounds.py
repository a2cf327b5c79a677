"""The bounding half of the spot decomposition: what a cell's plans can cost at least.

:class:`CellBounds` builds cells (:mod:`.cells`) with their ranges and lower bounds:
closed forms (the bounds on R and j of its :class:`~.cc.CcBounds`, Dinkelbach's min (P + c0) / X
over a box and over its fast plans, the vertex bound on price per rate and batch together), each
row's exact range over a box, the LP relaxations of a cell's rows (its :class:`~.lp.LpBounds`),
the rows the cell MILPs and LPs share (with the side rows of its :class:`~.side.SideColumns`),
and the tail bound for worker counts not generated yet. Each bound carries its proof next to
it; :mod:`.exact` holds the search and the argument for exactness.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import TypeVar

import highspy
import numpy as np
from dnnprov.solvers.spot.bounding.cc import CcBounds
from dnnprov.solvers.spot.bounding.lp import LpBounds
from dnnprov.solvers.spot.cells import (
    BoxStats,
    Cell,
    down,
    greedy,
    greedy_many,
    propagate_v,
    row_ranges,
    up,
)
from dnnprov.solvers.spot.side import STATISTICS_PARTS, SideColumns
from dnnprov.solvers.spot.terms import REF_BATCH_ROUNDING, SpotTerms

from dnnprov.models.spot import SideRows
from dnnprov.problems.validation.domain import TOLERANCE as DOMAIN_TOLERANCE
from dnnprov.progress import Clock

DEADLINE_RELAXATION = 1e-9  # the model accepts T <= T_obj (1 + 1e-12): never cut such plans
FAST_RATIO_GRID = np.geomspace(1.0, 4.0, 16)  # theta / rho_min tried by fast_ratio
Num = TypeVar("Num", float, np.ndarray)  # a scalar or an array of them, kept as given


class CellBounds:
    """Cells and their bounds for one spot problem (the search lives in :class:`SpotDecomposition`).

    Built from the problem's ``terms``, its ``side`` rows and the solve's ``clock``; the LPs run
    on ``highs`` and count in ``stats``, and their rounded points go to ``try_plan`` (the
    incumbent search's ``consider``). ``deadline(cell)``, when given, is the T_obj of a cell's
    rows (:mod:`dnnprov.solvers.revocation.robust_exact` lowers it where its criterion proves
    more); else the problem's. ``threshold`` is the cost a plan must beat (set by the search).
    """

    def __init__(
        self,
        terms: SpotTerms,
        side: SideRows | None,
        clock: Clock,
        highs: highspy.Highs,
        stats: dict[str, int],
        try_plan: Callable[[np.ndarray, int], None],
        deadline: Callable[[Cell], float] | None = None,
    ) -> None:
        self.terms = terms
        self.problem = terms.problem
        self.model = terms.model
        self.cols = terms.cols
        self.reference = terms.reference
        self.uses_cc = terms.uses_cc
        self.c0_per_ps = terms.c0_per_ps
        self.gamma_1, self.gamma_3 = terms.gamma_1, terms.gamma_3
        self.a0, self.ac = terms.a0, terms.ac
        self.shape = terms.shape
        self.box = terms.box
        self.a_min = terms.a_min
        self.time_factor = terms.time_factor
        self.side = side
        self.cc = CcBounds(terms)
        self.lp = LpBounds(terms, highs, clock, stats, try_plan)
        self.sides = SideColumns(side, terms.cols)
        self.cell_deadline = deadline
        self.fast_values: dict = {}  # F(theta) of fast_ratio by box and rho_min
        self.seq = itertools.count()
        self.threshold = math.inf

    def deadline(self, cell: Cell) -> float:
        """The T_obj of the cell's rows: the constructor's ``deadline(cell)``, else the problem's."""
        return self.problem.slo.time_s if self.cell_deadline is None else self.cell_deadline(cell)

    # ------------------------------------------------------------------ closed-form bounds
    def rows_infeasible(self, cell: Cell) -> bool:
        """Whether one of the cell's rows alone excludes every count vector of its box.

        Proof: one row ``low <= a @ n <= high`` with the box and sum n = K is totally
        unimodular, so :meth:`row_ranges` gives the exact range of ``a @ n`` over the box;
        if it misses [low, high] no plan of the cell satisfies that row (the rows are valid
        for every plan of the cell, see :meth:`cell_rows`). The ranges are computed in
        floats: a row is only declared violated beyond 1e-9 of its magnitude (the sums
        have at most a few hundred terms of relative error 1e-16 each).
        """
        rows = self.cell_rows(cell)
        if not rows:
            return False
        lo, hi = self.box(cell)
        allowed = cell.allowed
        a = np.array([row[0] for row in rows], dtype=float)[:, allowed]
        low, high = np.array([row[1:] for row in rows], dtype=float).T
        least, most = row_ranges(a, lo[allowed], hi[allowed], cell.workers)
        slack = (
            1e-9
            * (
                np.abs(a) @ hi[allowed].astype(float)
                + np.abs(np.where(np.isfinite(low), low, 0.0))
                + np.abs(np.where(np.isfinite(high), high, 0.0))
            )
            + 1e-12
        )
        return bool(((least > high + slack) | (most < low - slack)).any())

    def box_statistics(self, pairs: list[tuple[int, int]], lo: np.ndarray, hi: np.ndarray) -> list[BoxStats]:
        """What the greedy steps give for each (K, s) of ``pairs`` over its box (rows of ``lo``, ``hi``, or one for all).

        Without cardinality side rows ("at most k columns used") these are
        :meth:`greedy_statistics`. With them, each box is first cut into the support boxes of
        :meth:`SideColumns.support_boxes`, whose union holds every plan of the box that meets
        the rows (the proof is there; plans breaking a side row are infeasible, so no bound
        needs them), and each statistic is its extreme over the parts: min X, the rho bound and
        min P + c0 (max when a0 < 0) are the least of the parts' values (a bound valid on each
        part of a union is valid on the union), max X the greatest. A box without parts holds
        no such plan: X_lo = inf > X_hi = -inf, which every caller takes as empty.
        """
        if not self.sides.cardinality:
            return self.greedy_statistics(pairs, lo, hi)
        m = len(self.cols)
        lo2, hi2 = np.broadcast_to(lo, (len(pairs), m)), np.broadcast_to(hi, (len(pairs), m))
        owner, part_pairs, parts = [], [], []
        for i, pair in enumerate(pairs):
            for box in self.sides.support_boxes(lo2[i], hi2[i], pair[1], STATISTICS_PARTS):
                if not int(box[0].sum()) <= pair[0] <= int(box[1].sum()):
                    continue  # no count vector of K workers in this part
                owner.append(i)
                part_pairs.append(pair)
                parts.append(box)
        found = (
            self.greedy_statistics(part_pairs, np.array([b[0] for b in parts]), np.array([b[1] for b in parts]))
            if parts
            else []
        )
        by_pair: list[list[BoxStats]] = [[] for _ in pairs]
        for st, i in zip(found, owner):
            by_pair[i].append(st)
        merged = []
        for mine in by_pair:
            if not mine:
                merged.append(BoxStats(math.inf, -math.inf, 0.0, 0.0))
                continue
            prices = [st.price_bound for st in mine]
            merged.append(
                BoxStats(
                    min(st.x_lo for st in mine),
                    max(st.x_hi for st in mine),
                    min(st.rho_min for st in mine),
                    min(prices) if self.a0 >= 0 else max(prices),
                )
            )
        return merged

    def greedy_statistics(self, pairs: list[tuple[int, int]], lo: np.ndarray, hi: np.ndarray) -> list[BoxStats]:
        """What the greedy steps give for each (K, s) of ``pairs`` over its box, side rows aside.

        X and P + c0 are linear, so their extremes over a box are greedy plans (exact). The
        lower bound on min (P + c0) / X is Dinkelbach's method with a greedy step. Proof:
        for a ratio lambda of some plan, F(lambda) = min_n (P + c0 - lambda X) over the box
        is attained by the greedy (one cardinality row and a box are totally unimodular).
        When the greedy's plan has ratio >= lambda, F(lambda) >= 0, so every plan has ratio
        >= lambda: lambda is the minimum. A box whose iteration has not converged after 100
        steps only gets min_c p_c / r_c (a ratio of sums is at least the smallest ratio).
        All boxes are iterated together.
        """
        self.terms.prefetch_shapes(pairs)
        r = np.array([self.terms.shapes[pair].rate for pair in pairs])
        k = np.array([[pair[0]] for pair in pairs])
        c0 = np.array([pair[1] * self.c0_per_ps for pair in pairs])
        p = self.cols.price
        slowest = (greedy_many(r, lo, hi, k) * r).sum(axis=1)
        fastest = greedy_many(-r, lo, hi, k)
        price = greedy_many(p if self.a0 >= 0 else -p, lo, hi, k) @ p + c0
        safe = np.where(np.broadcast_to(hi, r.shape) > 0, p / r, np.inf).min(axis=1)
        safe = np.where(np.isfinite(safe), safe, 0.0)
        rho = safe.copy()
        ratio = (fastest @ p + c0) / (fastest * r).sum(axis=1)
        pending = np.arange(len(pairs))
        lo, hi = np.broadcast_to(lo, r.shape), np.broadcast_to(hi, r.shape)
        for _ in range(100):
            n = greedy_many(p - ratio[:, None] * r[pending], lo[pending], hi[pending], k[pending])
            new = (n @ p + c0[pending]) / (n * r[pending]).sum(axis=1)
            done = new >= ratio * (1 - 1e-14)
            rho[pending[done]] = np.maximum(safe[pending[done]], down(ratio[done] * (1 - 1e-12)))
            pending, ratio = pending[~done], new[~done]
            if not len(pending):
                break
        x_hi = (fastest * r).sum(axis=1)
        return [
            BoxStats(*values) for values in zip(down(slowest).tolist(), up(x_hi).tolist(), rho.tolist(), price.tolist())
        ]

    def tighten(self, cell: Cell, price_bound: float) -> bool:
        """Shrink the b_w and V ranges to where a plan can beat U and meet T_obj (see module doc).

        Returns ``False`` when the cell holds no such plan.
        """
        g2 = self.problem.workload.gamma_2
        j_fixed = None  # j_lower at a fixed point of the ranges (it depends on nothing else)
        for _ in range(3):
            deadline = self.deadline(cell)
            before = (cell.b_lo, cell.b_hi, cell.v_lo, cell.v_hi, cell.x_lo, cell.x_hi)
            tau = self.time_factor(cell)
            # eq. (13): tau j / X + a0 <= T_obj  =>  j <= (T_obj - a0) X_hi / tau
            j_max = (deadline - self.a0) * cell.x_hi / tau * (1 + DEADLINE_RELAXATION)
            if math.isfinite(self.threshold) and cell.rho_min > 0:
                # cost < U  =>  rho_min tau j + a0 (P + c0) < 3600 (U - ac), with P + c0 on the
                # side of price_bound that makes a0 (P + c0) smallest (see finalize)
                j_max = min(j_max, (3600 * (self.threshold - self.ac) - self.a0 * price_bound) / (cell.rho_min * tau))
            # an enforced loss axis admits no plan needing more than the domain's iteration cap
            j_max = up(min(j_max, self.model.iteration_cap()))
            c = self.cc.spread_factor(cell)
            if g2 < 0 and c > 0:  # A(b) < (j_max + g1) / c  =>  b > b_cut
                cell.b_lo = max(cell.b_lo, down((self.gamma_3 - (j_max + self.gamma_1) / c) / -g2))
            a_hi = self.a_min(cell.b_lo, cell.b_hi)
            if self.uses_cc and cell.top is not None and cell.workers > 1 and a_hi > 0 and j_max + self.gamma_1 > 0:
                # sqrt((R + g4) K) A_min / (L - g5) - g1 <= j <= j_max bounds R from above
                r_max = up(
                    ((j_max + self.gamma_1) * self.model.loss_gap / a_hi) ** 2 / cell.workers
                    - self.problem.workload.gamma_4
                )
                if r_max < 0:  # even R = 0 needs more iterations
                    return False
                share = r_max * math.sqrt((cell.workers - 1) / cell.workers)
                if share < 1:  # R_lb(V) < r_max  =>  V < v_t / (1 - share)
                    v_t = self.shape(cell.workers, cell.ps).speed[cell.top]
                    cell.v_hi = min(cell.v_hi, up(v_t / (1 - share)))
            # eq. (13): X >= tau j_lb / (T - a0)
            slope = (deadline - self.a0) * (1 + DEADLINE_RELAXATION)
            j_round = self.cc.j_lower(cell) if slope > 0 else None
            if j_round is not None:
                cell.x_lo = max(cell.x_lo, down(tau * j_round / slope))
            propagate_v(cell)
            if cell.b_lo > cell.b_hi or cell.v_lo > cell.v_hi or cell.x_lo > cell.x_hi:
                return False
            if before == (cell.b_lo, cell.b_hi, cell.v_lo, cell.v_hi, cell.x_lo, cell.x_hi):
                j_fixed = j_round  # no range moved this round: j_round saw the final ranges
                break  # a fixed point: more rounds change nothing
        cell.j_lb = self.cc.j_lower(cell) if j_fixed is None else j_fixed
        tau = self.time_factor(cell)
        deadline = self.deadline(cell)
        return not (cell.j_lb > 0 and cell.x_hi * (deadline - self.a0) * (1 + DEADLINE_RELAXATION) < tau * cell.j_lb)

    def finalize(self, cell: Cell, known: BoxStats | None = None) -> Cell | None:
        """Compute the cell's bound and tighten its ranges; ``None`` if it holds no useful plan.

        The min price per iteration rate rho is first bounded by the greedy Dinkelbach over
        the cell's box (:meth:`box_statistics`); a cell that may still beat U gets the
        stronger bound of the LP relaxation of all its linear rows (Charnes-Cooper) when it
        is first popped (:meth:`strengthen`). ``known``: the box statistics when they are
        known already (computed for many tops at once, or those of a cell with the same
        box holding all of this one's plans, whose tightened X range and rho bound hold
        here too).
        """
        if known is None:
            if (self.cols.lower[~cell.allowed] > 0).any():
                return None
            lo, hi = self.box(cell)
            if (lo > hi).any() or int(lo.sum()) > cell.workers or int(hi.sum()) < cell.workers:
                return None
            known = self.box_statistics([(cell.workers, cell.ps)], lo, hi)[0]
        cell.x_lo, cell.x_hi = max(cell.x_lo, known.x_lo), min(cell.x_hi, known.x_hi)
        if cell.x_lo > cell.x_hi:
            return None
        cell.rho_min, cell.price_bound = known.rho_min, known.price_bound
        if not self.tighten(cell, cell.price_bound):
            return None
        # A cell whose bound reaches the threshold is never processed (the search stops
        # there and the threshold only falls): the fast plans' ratio, the row ranges and the
        # vertex bound are paid for only when it is popped (complete), so never for the many
        # cells whose cheap bound the threshold overtakes first.
        cell.bound = self.closed_bound(cell, cell.price_bound)
        cell.complete = False
        return cell if cell.bound < self.threshold else None

    def complete(self, cell: Cell) -> Cell | None:
        """Add the bounds :meth:`finalize` left for later; ``None`` if they close the cell.

        The fast plans' ratio (:meth:`fast_ratio`) and the vertex bound hold for every plan
        of the cell, and a row outside its exact range over the box leaves none
        (:meth:`rows_infeasible`); the bound only rises (the old one holds too).
        """
        cell.complete = True
        cell.rho_min = max(cell.rho_min, self.fast_ratio(cell))
        if self.closed_bound(cell, cell.price_bound) >= self.threshold or (
            cell.top is not None and self.rows_infeasible(cell)
        ):
            return None
        cell.pj_lb = max(cell.pj_lb, self.vertex_bound(cell))
        cell.bound = max(cell.bound, self.closed_bound(cell, cell.price_bound))
        return cell if cell.bound < self.threshold else None

    def strengthen(self, cell: Cell) -> Cell | None:
        """Bound the cell by the LP relaxation of its rows (done once, when first popped)."""
        lo, hi = self.box(cell)
        cell.lp_done = True
        rho = self.lp.lp_ratio(cell, lo, hi, self.cell_rows(cell))
        if rho is None:
            return None
        cell.rho_min = max(cell.rho_min, rho)
        p = self.cols.price
        price_bound = float(greedy(p if self.a0 >= 0 else -p, lo, hi, cell.workers) @ p) + cell.ps * self.c0_per_ps
        if not self.tighten(cell, price_bound):
            return None
        cell.bound = self.closed_bound(cell, price_bound)
        if cell.bound >= self.threshold:
            return cell  # closed anyway: the product LP would add nothing
        lo, hi = self.box(cell)
        product = self.lp.lp_product_bound(cell, lo, hi, self.cell_rows(cell), self.cc.spread_factor(cell))
        if product is None:
            return None
        cell.pj_lb = max(cell.pj_lb, product)
        cell.bound = self.closed_bound(cell, price_bound)
        return cell

    def fast_ratio(self, cell: Cell) -> float:
        """A lower bound on (P + c0) / X over the plans of the cell's box with X >= X_lo (0: none).

        Proof: for any theta, F(theta) = min over the box of P + c0 - theta X is attained by
        the greedy (one cardinality row and a box are totally unimodular), so every plan has
        P + c0 >= F(theta) + theta X, i.e. (P + c0) / X >= theta + F(theta) / X, which is at
        least theta + F / X_hi when F >= 0 and theta + F / X_lo when F < 0 (X_lo <= X <= X_hi).
        The best theta lies where the greedy's plan reaches X_lo: a grid above rho_min is
        tried at once, and each value is lowered by 1e-9 of its terms for rounding. The cell's
        deadline row X >= tau j_lb / (T - a0) makes X_lo large where slow cheap plans miss T_obj.
        """
        if not (cell.x_lo > 0 and cell.rho_min > 0 and math.isfinite(cell.x_hi)):
            return 0.0
        theta = cell.rho_min * FAST_RATIO_GRID
        # F(theta) depends on the box and rho_min only, which the V pieces and halves of a cell
        # share (their X ranges differ): computed once per (K, s, top, pins, rho_min)
        key = (cell.workers, cell.ps, cell.top, cell.pinned, cell.rho_min)
        value = self.fast_values.get(key)
        if value is None:
            lo, hi = self.box(cell)
            rate, price = self.shape(cell.workers, cell.ps).rate, self.cols.price
            plans = greedy_many(price[None, :] - theta[:, None] * rate[None, :], lo, hi, cell.workers)
            value = self.fast_values[key] = plans @ price + cell.ps * self.c0_per_ps - theta * (plans @ rate)
        ratio = theta + value / np.where(value >= 0, cell.x_hi, cell.x_lo)
        return max(0.0, float((ratio - 1e-9 * (theta + np.abs(value) / cell.x_lo)).max()))

    def price_range(self, cell: Cell) -> tuple[float, float]:
        """Greedy min and max of P + c0 over the cell's box (exact for the box)."""
        lo, hi = self.box(cell)
        p = self.cols.price
        c0 = cell.ps * self.c0_per_ps
        return (float(greedy(p, lo, hi, cell.workers) @ p) + c0, float(greedy(-p, lo, hi, cell.workers) @ p) + c0)

    def vertex_bound(self, cell: Cell) -> float:
        """A lower bound on (P + c0) j / X over the cell from its columns and b_w range (0: none).

        Proof: with rate shares w_c = n_c r_c / X (w lies in the simplex over the columns
        the box lets the cell use), (P + c0) / X = sum w_c p_c / r_c + c0 / X >= rho(w) =
        sum w_c rho_c with rho_c = p_c / r_c + c0 / X_hi, and b_w = V / X = sum w_c b_c, so
        j >= j(b_w) = c_lb A(b_w) - g1 (A is affine, c_lb the cell's bound on the spread
        factor). Over the plans with b_w = b, rho(w) >= env(b), the lower convex envelope of
        the points (b_c, rho_c) (an LP over the simplex with one more row: attained on a
        pair of columns). So (P + c0) j / X >= min over b in [b_lo, b_hi] of env(b) j(b).
        With j >= 0 at both ends (j is affine), on each linear piece of env the product of
        two nonnegative affine functions is smallest at an end of the piece; the ends are
        b_lo, b_hi and batches b_c where env(b_c) = rho_c. Taking rho_c >= env(b_c) at every
        column inside the range keeps the minimum: min(env(b_lo) j(b_lo), env(b_hi) j(b_hi),
        min over b_c in range of rho_c j(b_c)).
        """
        _, hi = self.box(cell)
        used = hi > 0
        if not used.any() or not cell.x_hi > 0:
            return 0.0
        batch = self.cols.batch[used].astype(float)
        b_lo, b_hi = max(cell.b_lo, float(batch.min())), min(cell.b_hi, float(batch.max()))
        if b_lo > b_hi:
            return 0.0
        rho = (
            self.cols.price[used] / self.shape(cell.workers, cell.ps).rate[used] + cell.ps * self.c0_per_ps / cell.x_hi
        )
        c = self.cc.spread_factor(cell)
        g2 = self.problem.workload.gamma_2

        def j(b: Num) -> Num:
            return c * (g2 * b + self.gamma_3) - self.gamma_1

        if min(j(b_lo), j(b_hi)) < 0:
            return 0.0

        def envelope(b: float) -> float:  # min over pairs b_c <= b <= b_d of the chord at b
            left, right = batch <= b, batch >= b
            bc, rc = batch[left][:, None], rho[left][:, None]
            bd, rd = batch[right][None, :], rho[right][None, :]
            width = bd - bc
            with np.errstate(invalid="ignore", divide="ignore"):
                chord = np.where(width > 0, rc + (b - bc) / width * (rd - rc), np.minimum(rc, rd))
            return float(chord.min())

        inside = (batch >= b_lo) & (batch <= b_hi)
        values = [envelope(b_lo) * j(b_lo), envelope(b_hi) * j(b_hi)]
        if inside.any():
            values.append(float((rho[inside] * j(batch[inside])).min()))
        return max(0.0, down(min(values) * (1 - 1e-12)))

    def closed_bound(self, cell: Cell, price_bound: float) -> float:
        """cost >= (tau (P + c0) j / X + a0 (P + c0)) / 3600 + ac over the cell (never below 0)."""
        per_rate = max(cell.rho_min * cell.j_lb, cell.pj_lb)  # both bound (P + c0) j / X
        value = (per_rate * self.time_factor(cell) + self.a0 * price_bound) / 3600 + self.ac
        return max(0.0, down(value))

    def cell_rows(self, cell: Cell) -> list[tuple[np.ndarray, float, float]]:
        """The cell's linear rows ``low <= a @ n <= high`` (besides sum n = K and the box)."""
        shape = self.shape(cell.workers, cell.ps)
        w = self.problem.workload
        tau = self.time_factor(cell)
        slope = (self.deadline(cell) - self.a0) * (1 + DEADLINE_RELAXATION)
        a_rate = w.gamma_2 * shape.speed + self.gamma_3 * shape.rate  # A(b_w) X
        c = self.cc.spread_factor(cell)
        rows = [
            (a_rate, 0.0, math.inf),  # eq. (3) has a root
            # eq. (13) with j >= j_lb:  X >= tau j_lb / (T - a0)
            (shape.rate, tau * cell.j_lb / slope, math.inf),
            # eq. (13) keeping b_w: tau (c A X - g1 X) <= (T - a0) X^2 <= (T - a0)((X_lo + X_hi) X - X_lo X_hi)
            (
                tau * (c * a_rate - self.gamma_1 * shape.rate) - slope * (cell.x_lo + cell.x_hi) * shape.rate,
                -math.inf,
                -slope * cell.x_lo * cell.x_hi,
            ),
            (shape.speed - cell.b_lo * shape.rate, 0.0, math.inf),  # b_w >= b_lo
            (shape.speed - cell.b_hi * shape.rate, -math.inf, 0.0),  # b_w <= b_hi
            (shape.rate, cell.x_lo, cell.x_hi),  # X range
        ]
        if self.uses_cc and cell.top is not None:
            rows.append((shape.speed, cell.v_lo, cell.v_hi))  # V range
            if cell.q_lo > 0 or math.isfinite(cell.q_hi):
                rows.append((shape.speed**2, cell.q_lo, cell.q_hi))  # Q range
        secant = self.cc.cc_secant(cell)
        a_min = self.a_min(cell.b_lo, cell.b_hi)
        if secant is not None and a_min > 0:
            # eq. (13) keeping R's growth with V: tau ((k0 + k1 V) A_min - g1) <= (T - a0) X
            k0, k1 = secant
            rows.append(
                (tau * k1 * a_min * shape.speed - slope * shape.rate, -math.inf, -tau * (k0 * a_min - self.gamma_1))
            )
            square = self.cc.cc_square_secant(cell)
            if square is not None:
                # eq. (13) keeping R's growth with Q = sum n v^2: tau ((q0 + q1 Q) A_min - g1) <= (T - a0) X
                q0, q1 = square
                rows.append(
                    (
                        tau * q1 * a_min * shape.speed**2 - slope * shape.rate,
                        -math.inf,
                        -tau * (q0 * a_min - self.gamma_1),
                    )
                )
            # eq. (13) keeping both: tau ((k0 + k1 V)(g2 V + g3 X) - g1 X) <= (T - a0) X^2, with
            # V^2 and X^2 over-estimated by secants and V X under-estimated by either McCormick plane.
            # Valid only where k1 g2 <= 0 (then over-estimating V^2 under-estimates k1 g2 V^2)
            # and k1 g3 >= 0 (then under-estimating V X under-estimates k1 g3 V X).
            g2, g3 = w.gamma_2, self.gamma_3
            v_lo, v_hi, x_lo, x_hi = cell.v_lo, cell.v_hi, cell.x_lo, cell.x_hi
            mccormick = [] if (k1 < 0 or g2 > 0 or g3 < 0) else [(v_lo, x_lo), (v_hi, x_hi)]
            for v_c, x_c in mccormick:  # V X >= v_c X + x_c V - v_c x_c
                coef_v = tau * (k0 * g2 + k1 * g2 * (v_lo + v_hi) + k1 * g3 * x_c)
                coef_x = tau * (k0 * g3 - self.gamma_1 + k1 * g3 * v_c) - slope * (x_lo + x_hi)
                const = tau * (-k1 * g2 * v_lo * v_hi - k1 * g3 * v_c * x_c) + slope * x_lo * x_hi
                rows.append((coef_v * shape.speed + coef_x * shape.rate, -math.inf, -const))
        for per_column, limit in self.model.vcpu_rows:
            rows.append((per_column.astype(float), -math.inf, float(limit)))
        if self.side is not None:
            # Rows that use the indicators used[c] or the user's own variables are not rows in
            # the counts alone: they are left out here (the LP bounds then hold over a superset
            # of the cell's plans, so they stay valid) and enter the cell MILP with their
            # variables (solvers/spot/side.py).
            for i in np.flatnonzero(self.side.count_only()):
                shift = self.side.a_s[i] * cell.ps
                rows.append((self.side.a_n[i], self.side.low[i] - shift, self.side.high[i] - shift))
            rows += self.sides.implied_rows(cell)
        return rows

    # ------------------------------------------------------------------ cells
    def new_cell(
        self,
        k: int,
        s: int,
        top: int | None,
        *,
        b_range: tuple[float, float] | None = None,
        v_range: tuple[float, float] | None = None,
        x_range: tuple[float, float] = (0.0, math.inf),
        q_range: tuple[float, float] = (0.0, math.inf),
        nogoods: list[tuple[int, ...]] | None = None,
        known: BoxStats | None = None,
        pinned: tuple[tuple[int, int, int], ...] = (),
    ) -> Cell | None:
        """A cell with default ranges from its allowed columns (narrowed by the given ones).

        ``known``: its box statistics, when known already (see :meth:`finalize`); ``pinned``:
        count bounds of the cell (:attr:`Cell.pinned`).
        """
        shape = self.shape(k, s)
        allowed = self.cols.upper > 0
        if top is not None:
            v = shape.speed
            allowed &= (v < v[top]) | ((v == v[top]) & (np.arange(len(v)) <= top))
        if not allowed.any():
            return None
        batch, v = self.cols.batch[allowed], shape.speed[allowed]
        if b_range is None:
            # b_w is a weighted mean of the used batches, and the validity domain bounds it
            # (plans outside it are infeasible; the model's own tolerance is kept).
            # Proof that the domain's b_w cap is honoured and no bound assumes more: domain_bounds()
            # is the interval SpotModel.inside_domain checks (extrapolated, then capped where
            # eq. 3's numerator keeps its share, problems/domain.py), so every feasible plan's
            # b_w lies in it and narrowing a cell to it loses no feasible plan. Every other bound
            # here (tail_bound over all column batches, vertex_bound and a_min over a cell's
            # range, the LP and MILP rows) is a minimum over a set that contains the feasible
            # plans; a tighter cap only removes plans, so each stays a valid lower bound. No
            # incumbent is built at a range's end: incumbents are count vectors evaluated by
            # SpotModel.evaluate, which applies the same cap (and the enforced loss axis).
            (dom_lo, dom_hi), _ = self.model.domain_bounds()
            b_range = (
                down(max(float(batch.min()), dom_lo * (1 - DOMAIN_TOLERANCE))),
                up(min(float(batch.max()), dom_hi * (1 + DOMAIN_TOLERANCE))),
            )
            if b_range[0] > b_range[1]:
                return None
        b_lo, b_hi = b_range
        if v_range is None:
            # For a group (top None) V_lo is not a bound on V: it serves cc_lower only, since
            # v_max / (v_max + (K-1) v_min) bounds every plan's largest share. Groups are
            # split by top column before any MILP uses V rows.
            v_top = shape.speed[top] if top is not None else float(v.max())
            v_range = (down(float(v_top + (k - 1) * v.min())), up(float(v_top * k)))
        cell = Cell(
            0.0,
            next(self.seq),
            k,
            s,
            top,
            b_lo,
            b_hi,
            v_range[0],
            v_range[1],
            allowed,
            x_lo=x_range[0],
            x_hi=x_range[1],
            nogoods=list(nogoods or []),
            q_lo=q_range[0],
            q_hi=q_range[1],
            pinned=pinned,
        )
        return self.finalize(cell, known)

    def top_cells(self, k: int, s: int) -> list[Cell]:
        """The cells of the (K, s) group, one per possible top column t, built together.

        Cell t allows the columns no faster than t (ties by index) and needs n_t >= 1. The
        box statistics of every top come from one vectorized pass. A top gets no cell when
        a quick bound already shows its plans cannot beat the threshold or meet T_obj.
        Proof: with the cell's default ranges (b_w between its columns' batches, inside the
        domain; V >= v_t + (K - 1) v_min), R >= s_K (1 - v_t / V_lo) (eq. 5), so
        j >= j_q = c(R_lb) A_min - g1, the bound of :meth:`j_lower` without the b_w-V
        coupling (never above it). Then cost >= (rho_min tau j_q + a0 P_b) / 3600 + ac as in
        :meth:`closed_bound`, and T_obj needs (T_obj - a0) X_hi >= tau j_q as in
        :meth:`tighten`. A cell whose bound reaches the threshold is never processed (the
        search stops there and the threshold only falls), so not building it loses nothing.
        """
        cols, w = self.cols, self.problem.workload
        v = self.shape(k, s).speed
        index = np.arange(len(v))
        allowed = (cols.upper > 0)[None, :] & (
            (v[None, :] < v[:, None]) | ((v[None, :] == v[:, None]) & (index[None, :] <= index[:, None]))
        )
        lo = np.where(allowed, cols.lower, 0)
        hi = np.where(allowed, cols.upper, 0)
        lo[index, index] = np.maximum(lo[index, index], 1)
        (dom_lo, dom_hi), _ = self.model.domain_bounds()
        with np.errstate(invalid="ignore"):
            b_lo = down(np.maximum(np.where(allowed, cols.batch, np.inf).min(axis=1), dom_lo * (1 - DOMAIN_TOLERANCE)))
            b_hi = up(np.minimum(np.where(allowed, cols.batch, -np.inf).max(axis=1), dom_hi * (1 + DOMAIN_TOLERANCE)))
        ok = (
            ~((cols.lower > 0)[None, :] & ~allowed).any(axis=1)
            & (lo <= hi).all(axis=1)
            & (lo.sum(axis=1) <= k)
            & (hi.sum(axis=1) >= k)
            & (b_lo <= b_hi)
        )
        tops = np.flatnonzero(ok)
        if not len(tops):
            return []
        stats = self.box_statistics([(k, s)] * len(tops), lo[tops], hi[tops])
        b_lo, b_hi, v_t = b_lo[tops], b_hi[tops], v[tops]
        v_lo = down(v_t + (k - 1) * np.where(allowed[tops], v, np.inf).min(axis=1))
        x_hi = np.array([st.x_hi for st in stats])
        rho = np.array([st.rho_min for st in stats])
        price = np.array([st.price_bound for st in stats])
        share = np.maximum(0.0, 1 - v_t / v_lo) * math.sqrt(k / (k - 1)) if self.uses_cc and k > 1 else 0.0
        spread = np.sqrt(((share + w.gamma_4) if self.uses_cc else 1.0) * k) / self.model.loss_gap
        a = np.minimum(w.gamma_2 * b_lo, w.gamma_2 * b_hi) + self.gamma_3
        floor = max(1.0 if self.reference else 0.0, self.model.iteration_floor())  # as in j_lower
        j_q = np.where(a > 0, np.maximum(spread * a - self.gamma_1, floor), floor)
        tau = 1 - REF_BATCH_ROUNDING / b_lo if self.reference else 1.0
        bound = np.maximum(0.0, down((rho * j_q * tau + self.a0 * price) / 3600 + self.ac))
        slope = (self.problem.slo.time_s - self.a0) * (1 + DEADLINE_RELAXATION)
        keep = (bound < self.threshold) & ~((j_q > 0) & (x_hi * slope < tau * j_q))
        cells = []
        for i in np.flatnonzero(keep):
            t = int(tops[i])
            cell = Cell(
                0.0,
                next(self.seq),
                k,
                s,
                t,
                float(b_lo[i]),
                float(b_hi[i]),
                float(v_lo[i]),
                float(up(v[t] * k)),
                allowed[t],
                x_lo=0.0,
                x_hi=math.inf,
            )
            final = self.finalize(cell, stats[i])
            if final is not None:
                cells.append(final)
        return cells

    def tail_bound(self, k0: int) -> float:
        """A lower bound on the cost of every plan with K >= k0 workers.

        Proof: the rate of a column is at most 1 / (T_comp + PCIe term) (eq. 6-7: the
        network term is positive), so (P + c0) / X >= min_c p_c (T_comp,c + pcie_c) = rho_1.
        b_w lies between the smallest and largest batch, so A(b_w) >= A_min; with
        A_min > 0, j >= sqrt(g K) A_min / (L - g5) - g1 (g = 1 without CC, g = gamma_4
        <= R + gamma_4 with it), which grows with K. The paper model's time is
        j / X + overhead >= j / X. The reference model's core time is rounded to 0.01 s
        and must be >= 0.01 s: T_core >= max(0.01, tau j / X - 0.005) >= (2/3) tau j / X.
        So cost >= rho_1 f tau j_lb(k0) / 3600 + ac with f = 1 (paper) or 2/3, and j_lb(k0)
        may be raised to the validity domain's iteration floor, which every feasible plan meets
        (:meth:`SpotModel.admits_iterations`). Keeping price and batch per column as
        :meth:`vertex_bound` does (p_c / r_c >= p_c (T_comp,c + pcie_c), j >= sum_c w_c j_c(k0),
        every j_c(k0) >= 0), min_c p_c (T_comp,c + pcie_c) j_c(k0) bounds (P + c0) j / X too;
        the larger of the two is used.
        """
        w = self.problem.workload
        cols = self.cols
        used = cols.upper > 0
        if not used.any():
            return math.inf
        pcie = 0.0 if self.reference else 2 * cols.gpus * w.param_size_mb / self.problem.platform.pcie_bandwidth_mb_s
        rho_1 = float((cols.price * (cols.compute_time + pcie))[used].min())
        b_min, b_max = float(cols.batch[used].min()), float(cols.batch[used].max())
        a_min = self.a_min(b_min, b_max)
        spread = 1.0 if not self.uses_cc else w.gamma_4
        # every feasible plan also needs the domain's iteration floor (SpotModel.admits_iterations)
        j_lb = self.model.iteration_floor()
        if a_min > 0 and spread > 0:
            j_lb = max(j_lb, math.sqrt(spread * k0) * a_min / self.model.loss_gap - self.gamma_1)
        if j_lb <= 0 or rho_1 <= 0:
            return 0.0
        per_rate = rho_1 * j_lb
        j_c = (
            math.sqrt(spread * k0) * (w.gamma_2 * cols.batch[used] + self.gamma_3) / self.model.loss_gap - self.gamma_1
        )
        if a_min > 0 and spread > 0 and (j_c >= 0).all():
            per_rate = max(per_rate, float(((cols.price * (cols.compute_time + pcie))[used] * j_c).min()))
        tau = 1 - REF_BATCH_ROUNDING / b_min if self.reference else 1.0
        factor = 2 / 3 if self.reference else 1.0
        return max(0.0, down(per_rate * (1 - 1e-12) * factor * tau / 3600 + self.ac))
