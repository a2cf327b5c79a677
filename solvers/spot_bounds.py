"""The bounding half of the spot decomposition: what a cell's plans can cost at least.

:class:`CellBounds` builds cells (:mod:`spot_cells`) with their ranges and lower bounds:
closed forms (Cauchy-Schwarz on R, the b_w-V coupling, Dinkelbach's min (P + c0) / X over
a box), the LP relaxations of a cell's rows in Charnes-Cooper variables (min price per
iteration rate, and the McCormick bound on (P + c0) j / X), the rows the cell MILPs and LPs
share, and the tail bound for worker counts not generated yet. Each bound carries its
proof next to it; :mod:`spot_exact` holds the search that uses them and the overall
argument for exactness.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from dnnprov.problems.domain import TOLERANCE as DOMAIN_TOLERANCE
from dnnprov.progress import Clock
from dnnprov.solvers.highs_driver import MilpStatus, new_highs, solve_milp
from dnnprov.solvers.spot_cells import Cell, ClusterShape, down, up
from dnnprov.problems.spot import SpotProblem
from dnnprov.models.spot import SideRows, SpotModel

COUPLING_INTERVALS = 16        # b_w intervals of the coupled j bound (see j_lower)
COUPLING_GRID = np.linspace(0.0, 1.0, COUPLING_INTERVALS + 1)
DEADLINE_RELAXATION = 1e-9      # the model accepts T <= T_obj (1 + 1e-12): never cut such plans
REF_BATCH_ROUNDING = 0.05       # reference model: b_w rounded to 1 decimal
REF_TIME_ROUNDING = 0.005       # reference model: T rounded to 2 decimals
REF_COST_ROUNDING = 5e-7        # reference model: cost rounded to 6 decimals
REF_ITER_ROUNDING = 0.5         # reference model: j rounded to an integer


class CellBounds:
    """Cells and their bounds for one spot problem (the search lives in :class:`SpotDecomposition`).

    ``threshold`` is the cost a plan must beat (set by the search); rounded LP points are
    handed to :meth:`consider`, which the search defines.
    """

    def __init__(self, problem: SpotProblem, side: SideRows | None, clock: Clock) -> None:
        self.problem = problem
        self.model = SpotModel(problem, side)
        self.side = side
        self.cols = self.model.columns
        self.clock = clock
        self.reference = problem.model == "reference"
        self.uses_cc = problem.workload.loss_variant == "cc"
        w = problem.workload
        # j >= c * (gamma_2 b + gamma_3') - gamma_1', T >= tau * j / X + a0, cost >= ... + ac
        overhead = problem.slo.takeover_overhead_s
        self.c0_per_ps = problem.platform.ps_price_per_h
        if self.reference:
            self.gamma_3 = w.gamma_3 - abs(w.gamma_2) * REF_BATCH_ROUNDING
            self.gamma_1 = w.gamma_1 + REF_ITER_ROUNDING
            self.a0, self.ac = overhead - REF_TIME_ROUNDING, -REF_COST_ROUNDING
        else:
            self.gamma_3, self.gamma_1 = w.gamma_3, w.gamma_1
            self.a0, self.ac = overhead, 0.0
        self.highs = new_highs()
        self.seq = itertools.count()
        self.shapes: dict[tuple[int, int], ClusterShape] = {}
        self.stats = {"cells": 0, "milps": 0, "evaluations": 0, "splits": 0, "enumerated_cells": 0}
        self.threshold = math.inf

    def consider(self, counts: np.ndarray, ps: int) -> None:
        """Try a plan as an incumbent (defined by the search)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ model pieces
    def shape(self, workers: int, ps: int) -> ClusterShape:
        """Rates of every column in a cluster of ``workers`` workers and ``ps`` PS nodes."""
        key = (workers, ps)
        if key not in self.shapes:
            times = self.model.iteration_times(np.array([workers]), np.array([ps]))[0]
            self.shapes[key] = ClusterShape(1.0 / times, self.cols.batch / times)
        return self.shapes[key]

    def a_min(self, b_lo: float, b_hi: float) -> float:
        """min A(b) = gamma_2 b + gamma_3' over [b_lo, b_hi] (A is linear)."""
        g2 = self.problem.workload.gamma_2
        return min(g2 * b_lo, g2 * b_hi) + self.gamma_3

    def spread_factor(self, cell: Cell) -> float:
        """c_lb = sqrt((R_lb + gamma_4) K) / (L - gamma_5), or sqrt(K) / (L - gamma_5) without CC."""
        k = cell.workers
        if not self.uses_cc:
            return math.sqrt(k) / self.model.loss_gap
        return math.sqrt((self.cc_lower(cell) + self.problem.workload.gamma_4) * k) / self.model.loss_gap

    def cc_lower(self, cell: Cell) -> float:
        """R >= (1 - w_max) sqrt(K / (K - 1)) with w_max <= v_top / V_lo (eq. 5)."""
        k = cell.workers
        if k == 1 or cell.v_lo <= 0:
            return 0.0
        v = self.shape(cell.workers, cell.ps).speed
        v_top = v[cell.top] if cell.top is not None else float(v[cell.allowed].max())
        return max(0.0, 1 - v_top / cell.v_lo) * math.sqrt(k / (k - 1))

    def cc_secant(self, cell: Cell) -> tuple[float, float] | None:
        """(k0, k1) with sqrt((R + gamma_4) K) / (L - gamma_5) >= k0 + k1 V on the cell.

        R >= s_K (1 - v_t / V) is concave increasing in V and the square root is concave
        increasing, so their composition lies above its secant over [V_lo, V_hi].
        ``None`` where it adds nothing (no CC, K = 1, a group, or an empty V range).
        """
        k = cell.workers
        if not self.uses_cc or cell.top is None or k == 1 or cell.v_hi <= cell.v_lo:
            return None
        v_t = self.shape(cell.workers, cell.ps).speed[cell.top]
        s_k = math.sqrt(k / (k - 1))
        g4 = self.problem.workload.gamma_4

        def c(v: float) -> float:
            return math.sqrt((max(0.0, 1 - v_t / v) * s_k + g4) * k) / self.model.loss_gap

        k1 = (c(cell.v_hi) - c(cell.v_lo)) / (cell.v_hi - cell.v_lo)
        return c(cell.v_lo) - k1 * cell.v_lo, k1

    def time_factor(self, cell: Cell) -> float:
        """tau in T >= tau j / X + a0: 1, or (1 - 0.05 / b_lo) for the reference rounding."""
        return 1 - REF_BATCH_ROUNDING / cell.b_lo if self.reference else 1.0

    def j_lower(self, cell: Cell) -> float:
        """Lower bound of j over the cell (0 when the bound is vacuous; 1 for the reference).

        With the CC term, b_w and R are coupled: V = b_w X >= b_w X_lo, and R's bound grows
        with V. So j >= min over b of c(max(V_lo, b X_lo)) A(b) - g1, where c(.) is
        nondecreasing in b; on each of a few intervals [b_i, b_i+1] that is at least
        c(V(b_i)) min(A(b_i), A(b_i+1)).
        """
        floor = 1.0 if self.reference else 0.0
        a = self.a_min(cell.b_lo, cell.b_hi)
        if not (self.uses_cc and cell.top is not None and cell.workers > 1):
            j = self.spread_factor(cell) * a - self.gamma_1 if a > 0 else -math.inf
            return max(j, floor)
        k = cell.workers
        g2, g4 = self.problem.workload.gamma_2, self.problem.workload.gamma_4
        v_t = self.shape(cell.workers, cell.ps).speed[cell.top]
        b = cell.b_lo + (cell.b_hi - cell.b_lo) * COUPLING_GRID
        b[-1] = cell.b_hi
        v = np.maximum(cell.v_lo, b[:-1] * cell.x_lo)
        cc = np.maximum(0.0, 1 - v_t / v) * math.sqrt(k / (k - 1))
        spread = np.sqrt((cc + g4) * k) / self.model.loss_gap
        a_lo = np.minimum(g2 * b[:-1], g2 * b[1:]) + self.gamma_3
        if (a_lo <= 0).any():
            return floor
        return max(float((spread * a_lo).min()) - self.gamma_1, floor)

    # ------------------------------------------------------------------ closed-form bounds
    def box(self, cell: Cell) -> tuple[np.ndarray, np.ndarray]:
        """Count bounds of the cell's columns (disallowed columns fixed at 0; n_t >= 1)."""
        lo = np.where(cell.allowed, self.cols.lower, 0)
        hi = np.where(cell.allowed, self.cols.upper, 0)
        if cell.top is not None:
            lo[cell.top] = max(lo[cell.top], 1)
        return lo, hi

    @staticmethod
    def greedy(weight: np.ndarray, lo: np.ndarray, hi: np.ndarray, total: int) -> np.ndarray:
        """Counts minimizing ``weight @ n`` over lo <= n <= hi, sum n = total (exact: TU)."""
        n = lo.copy()
        left = total - int(lo.sum())
        for c in np.argsort(weight, kind="stable"):
            if left <= 0:
                break
            add = min(left, int(hi[c] - lo[c]))
            n[c] += add
            left -= add
        return n

    def min_ratio(self, cell: Cell, lo: np.ndarray, hi: np.ndarray) -> float:
        """A lower bound on min (P + c0) / X over the box: Dinkelbach's method, greedy step.

        Proof: for a ratio lambda of some plan, F(lambda) = min_n (P + c0 - lambda X) over
        the box is attained by the greedy (one cardinality row and a box are totally
        unimodular). When the greedy's plan has ratio >= lambda, F(lambda) >= 0, so every
        plan has ratio >= lambda: lambda is the minimum. Without convergence only
        min_c p_c / r_c (a ratio of sums is at least the smallest ratio) is claimed.
        """
        r = self.shape(cell.workers, cell.ps).rate
        p = self.cols.price
        c0 = cell.ps * self.c0_per_ps
        used = cell.allowed & (hi > 0)
        safe = float((p[used] / r[used]).min()) if used.any() else 0.0
        n = self.greedy(-r, lo, hi, cell.workers)
        ratio = (n @ p + c0) / (n @ r)
        for _ in range(100):
            n = self.greedy(p - ratio * r, lo, hi, cell.workers)
            new = (n @ p + c0) / (n @ r)
            if new >= ratio * (1 - 1e-14):
                return max(safe, down(float(ratio) * (1 - 1e-12)))
            ratio = new
        return safe

    def tighten(self, cell: Cell, price_bound: float) -> bool:
        """Shrink the b_w and V ranges to where a plan can beat U and meet T_obj (see module doc).

        Returns ``False`` when the cell holds no such plan.
        """
        deadline = self.problem.slo.time_s
        g2 = self.problem.workload.gamma_2
        for _ in range(3):
            before = (cell.b_lo, cell.b_hi, cell.v_lo, cell.v_hi, cell.x_lo, cell.x_hi)
            tau = self.time_factor(cell)
            # eq. (13): tau j / X + a0 <= T_obj  =>  j <= (T_obj - a0) X_hi / tau
            j_max = (deadline - self.a0) * cell.x_hi / tau * (1 + DEADLINE_RELAXATION)
            if math.isfinite(self.threshold) and cell.rho_min > 0:
                # cost < U  =>  rho_min tau j + a0 (P + c0) < 3600 (U - ac), with P + c0 on the
                # side of price_bound that makes a0 (P + c0) smallest (see finalize)
                j_max = min(j_max, (3600 * (self.threshold - self.ac) - self.a0 * price_bound)
                            / (cell.rho_min * tau))
            j_max = up(j_max)
            c = self.spread_factor(cell)
            if g2 < 0 and c > 0:                         # A(b) < (j_max + g1) / c  =>  b > b_cut
                cell.b_lo = max(cell.b_lo, down((self.gamma_3 - (j_max + self.gamma_1) / c) / -g2))
            a_hi = self.a_min(cell.b_lo, cell.b_hi)
            if self.uses_cc and cell.top is not None and cell.workers > 1 and a_hi > 0 \
                    and j_max + self.gamma_1 > 0:
                # sqrt((R + g4) K) A_min / (L - g5) - g1 <= j <= j_max bounds R from above
                r_max = up(((j_max + self.gamma_1) * self.model.loss_gap / a_hi) ** 2 / cell.workers
                           - self.problem.workload.gamma_4)
                if r_max < 0:                            # even R = 0 needs more iterations
                    return False
                share = r_max * math.sqrt((cell.workers - 1) / cell.workers)
                if share < 1:                            # R_lb(V) < r_max  =>  V < v_t / (1 - share)
                    v_t = self.shape(cell.workers, cell.ps).speed[cell.top]
                    cell.v_hi = min(cell.v_hi, up(v_t / (1 - share)))
            # eq. (13): X >= tau j_lb / (T - a0)
            slope = (deadline - self.a0) * (1 + DEADLINE_RELAXATION)
            if slope > 0:
                cell.x_lo = max(cell.x_lo, down(tau * self.j_lower(cell) / slope))
            self.propagate(cell)
            if cell.b_lo > cell.b_hi or cell.v_lo > cell.v_hi or cell.x_lo > cell.x_hi:
                return False
            if before == (cell.b_lo, cell.b_hi, cell.v_lo, cell.v_hi, cell.x_lo, cell.x_hi):
                break                                    # a fixed point: more rounds change nothing
        cell.j_lb = self.j_lower(cell)
        tau = self.time_factor(cell)
        return not (cell.j_lb > 0 and cell.x_hi * (deadline - self.a0) * (1 + DEADLINE_RELAXATION) < tau * cell.j_lb)

    @staticmethod
    def propagate(cell: Cell) -> None:
        """Interval propagation through V = b_w X on the cell's three ranges.

        A group's V_lo (top column not fixed) is not a bound on V: it only serves the CC
        bound, where raising it to b_lo X_lo stays valid; nothing else is tightened there.
        """
        cell.v_lo = max(cell.v_lo, down(cell.b_lo * cell.x_lo))
        if cell.top is None:
            return
        cell.v_hi = min(cell.v_hi, up(cell.b_hi * cell.x_hi))
        if cell.b_hi > 0:
            cell.x_lo = max(cell.x_lo, down(cell.v_lo / cell.b_hi))
        if cell.b_lo > 0:
            cell.x_hi = min(cell.x_hi, up(cell.v_hi / cell.b_lo))
        if cell.x_hi > 0:
            cell.b_lo = max(cell.b_lo, down(cell.v_lo / cell.x_hi))
        if cell.x_lo > 0:
            cell.b_hi = min(cell.b_hi, up(cell.v_hi / cell.x_lo))

    def finalize(self, cell: Cell, within: Cell | None = None) -> Cell | None:
        """Compute the cell's bound and tighten its ranges; ``None`` if it holds no useful plan.

        The min price per iteration rate rho is first bounded by the greedy Dinkelbach over
        the cell's box; a cell that may still beat U gets the stronger bound of the LP
        relaxation of all its linear rows (Charnes-Cooper), and is tightened again.
        ``within``: a cell with the same box whose plans include this one's (a V range of it,
        a bisection of it); its X range, rho bound and price bound hold here too, so the
        greedy steps are not repeated.
        """
        cols = self.cols
        if within is not None:
            cell.x_lo, cell.x_hi = max(cell.x_lo, within.x_lo), min(cell.x_hi, within.x_hi)
            if cell.x_lo > cell.x_hi:
                return None
            cell.rho_min, cell.price_bound = within.rho_min, within.price_bound
            if not self.tighten(cell, cell.price_bound):
                return None
            cell.bound = self.closed_bound(cell, cell.price_bound)
            return cell
        if (cols.lower[~cell.allowed] > 0).any():
            return None
        lo, hi = self.box(cell)
        if (lo > hi).any() or int(lo.sum()) > cell.workers or int(hi.sum()) < cell.workers:
            return None
        r = self.shape(cell.workers, cell.ps).rate
        p = cols.price
        c0 = cell.ps * self.c0_per_ps
        cell.x_lo = max(cell.x_lo, down(float(self.greedy(r, lo, hi, cell.workers) @ r)))
        cell.x_hi = min(cell.x_hi, up(float(self.greedy(-r, lo, hi, cell.workers) @ r)))
        if cell.x_lo > cell.x_hi:
            return None
        cell.rho_min = self.min_ratio(cell, lo, hi)
        price_bound = float(self.greedy(p if self.a0 >= 0 else -p, lo, hi, cell.workers) @ p) + c0
        cell.price_bound = price_bound
        if not self.tighten(cell, price_bound):
            return None
        cell.bound = self.closed_bound(cell, price_bound)
        return cell

    def strengthen(self, cell: Cell) -> Cell | None:
        """Bound the cell by the LP relaxation of its rows (done once, when first popped)."""
        lo, hi = self.box(cell)
        cell.lp_done = True
        rho = self.lp_ratio(cell, lo, hi)
        if rho is None:
            return None
        cell.rho_min = max(cell.rho_min, rho)
        p = self.cols.price
        price_bound = float(self.greedy(p if self.a0 >= 0 else -p, lo, hi, cell.workers) @ p) \
            + cell.ps * self.c0_per_ps
        if not self.tighten(cell, price_bound):
            return None
        cell.bound = self.closed_bound(cell, price_bound)
        if cell.bound >= self.threshold:
            return cell                        # closed anyway: the product LP would add nothing
        product = self.lp_product_bound(cell, *self.box(cell))
        if product is None:
            return None
        cell.pj_lb = max(cell.pj_lb, product)
        cell.bound = self.closed_bound(cell, price_bound)
        return cell

    def price_range(self, cell: Cell) -> tuple[float, float]:
        """Greedy min and max of P + c0 over the cell's box (exact for the box)."""
        lo, hi = self.box(cell)
        p = self.cols.price
        c0 = cell.ps * self.c0_per_ps
        return (float(self.greedy(p, lo, hi, cell.workers) @ p) + c0,
                float(self.greedy(-p, lo, hi, cell.workers) @ p) + c0)

    def closed_bound(self, cell: Cell, price_bound: float) -> float:
        """cost >= (tau (P + c0) j / X + a0 (P + c0)) / 3600 + ac over the cell (never below 0)."""
        per_rate = max(cell.rho_min * cell.j_lb, cell.pj_lb)      # both bound (P + c0) j / X
        value = (per_rate * self.time_factor(cell) + self.a0 * price_bound) / 3600 + self.ac
        return max(0.0, down(value))

    def cell_rows(self, cell: Cell) -> list[tuple[np.ndarray, float, float]]:
        """The cell's linear rows ``low <= a @ n <= high`` (besides sum n = K and the box)."""
        shape = self.shape(cell.workers, cell.ps)
        w = self.problem.workload
        tau = self.time_factor(cell)
        slope = (self.problem.slo.time_s - self.a0) * (1 + DEADLINE_RELAXATION)
        a_rate = w.gamma_2 * shape.speed + self.gamma_3 * shape.rate                 # A(b_w) X
        c = self.spread_factor(cell)
        rows = [
            (a_rate, 0.0, math.inf),                                                 # eq. (3) has a root
            # eq. (13) with j >= j_lb:  X >= tau j_lb / (T - a0)
            (shape.rate, tau * cell.j_lb / slope, math.inf),
            # eq. (13) keeping b_w: tau (c A X - g1 X) <= (T - a0) X^2 <= (T - a0)((X_lo + X_hi) X - X_lo X_hi)
            (tau * (c * a_rate - self.gamma_1 * shape.rate) - slope * (cell.x_lo + cell.x_hi) * shape.rate,
             -math.inf, -slope * cell.x_lo * cell.x_hi),
            (shape.speed - cell.b_lo * shape.rate, 0.0, math.inf),                  # b_w >= b_lo
            (shape.speed - cell.b_hi * shape.rate, -math.inf, 0.0),                 # b_w <= b_hi
            (shape.rate, cell.x_lo, cell.x_hi),                                      # X range
        ]
        if self.uses_cc and cell.top is not None:
            rows.append((shape.speed, cell.v_lo, cell.v_hi))                         # V range
        secant = self.cc_secant(cell)
        a_min = self.a_min(cell.b_lo, cell.b_hi)
        if secant is not None and a_min > 0:
            # eq. (13) keeping R's growth with V: tau ((k0 + k1 V) A_min - g1) <= (T - a0) X
            k0, k1 = secant
            rows.append((tau * k1 * a_min * shape.speed - slope * shape.rate,
                         -math.inf, -tau * (k0 * a_min - self.gamma_1)))
            # eq. (13) keeping both: tau ((k0 + k1 V)(g2 V + g3 X) - g1 X) <= (T - a0) X^2, with
            # V^2 and X^2 over-estimated by secants and V X under-estimated by either McCormick plane.
            # Valid only where k1 g2 <= 0 (then over-estimating V^2 under-estimates k1 g2 V^2)
            # and k1 g3 >= 0 (then under-estimating V X under-estimates k1 g3 V X).
            g2, g3 = w.gamma_2, self.gamma_3
            v_lo, v_hi, x_lo, x_hi = cell.v_lo, cell.v_hi, cell.x_lo, cell.x_hi
            mccormick = [] if (k1 < 0 or g2 > 0 or g3 < 0) else [(v_lo, x_lo), (v_hi, x_hi)]
            for v_c, x_c in mccormick:                         # V X >= v_c X + x_c V - v_c x_c
                coef_v = tau * (k0 * g2 + k1 * g2 * (v_lo + v_hi) + k1 * g3 * x_c)
                coef_x = tau * (k0 * g3 - self.gamma_1 + k1 * g3 * v_c) - slope * (x_lo + x_hi)
                const = tau * (-k1 * g2 * v_lo * v_hi - k1 * g3 * v_c * x_c) + slope * x_lo * x_hi
                rows.append((coef_v * shape.speed + coef_x * shape.rate, -math.inf, -const))
        for per_column, limit in self.model.vcpu_rows:
            rows.append((per_column.astype(float), -math.inf, float(limit)))
        if self.side is not None:
            for i in range(len(self.side)):
                shift = self.side.a_s[i] * cell.ps
                rows.append((self.side.a_n[i], self.side.low[i] - shift, self.side.high[i] - shift))
        return rows

    def charnes_cooper_rows(self, cell: Cell, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, list]:
        """The cell's LP relaxation in y = n / X (the allowed columns, first) and t = 1 / X.

        Rows: r y = 1, sum y = K t, lo t <= y <= hi t and every cell row scaled by t;
        callers may add variables after t.
        """
        shape = self.shape(cell.workers, cell.ps)
        allowed = np.flatnonzero(cell.allowed)
        m = len(allowed)
        t = m                                           # index of t
        everything = np.arange(m + 1)
        rows = [(everything[:m], shape.rate[allowed], 1.0, 1.0),
                (everything, np.concatenate([np.ones(m), [-float(cell.workers)]]), 0.0, 0.0)]
        for i, c in enumerate(allowed):
            rows.append((np.array([i, t]), np.array([1.0, -float(lo[c])]), 0.0, math.inf))
            rows.append((np.array([i, t]), np.array([1.0, -float(hi[c])]), -math.inf, 0.0))
        for a, low, high in self.cell_rows(cell):
            if math.isfinite(low):
                rows.append((everything, np.concatenate([a[allowed], [-low]]), 0.0, math.inf))
            if math.isfinite(high):
                rows.append((everything, np.concatenate([a[allowed], [-high]]), -math.inf, 0.0))
        return allowed, rows

    def solve_lp(self, cost: np.ndarray, lower: np.ndarray, upper: np.ndarray, rows: list,
                 cell: Cell | None = None) -> float | None:
        """An LP's optimum lowered by its tolerance; ``None``: infeasible; ``-inf``: no answer.

        With ``cell``, the LP point (y, t) is rounded to a plan of the cell and tried as an
        incumbent (a heuristic: it proves nothing).
        """
        solution = solve_milp(self.highs, cost, lower, upper, rows,
                              integer=np.zeros(len(cost), dtype=bool),
                              time_limit_s=max(self.clock.remaining(), 1e-3))
        self.stats["lps"] = self.stats.get("lps", 0) + 1
        if solution.status is MilpStatus.INFEASIBLE:
            return None
        if solution.status is not MilpStatus.OPTIMAL:
            return -math.inf
        if cell is not None and solution.x is not None:
            self.round_lp_point(cell, solution.x)
        value = solution.objective
        return value - 1e-6 * abs(value) - 1e-12            # LP tolerances: keep it a lower bound

    def round_lp_point(self, cell: Cell, x: np.ndarray) -> None:
        """Round the Charnes-Cooper point n = y / t to K workers inside the box; try it."""
        allowed = np.flatnonzero(cell.allowed)
        t = x[len(allowed)]
        if not t > 0:
            return
        lo, hi = self.box(cell)
        target = np.clip(x[:len(allowed)] / t, lo[allowed], hi[allowed])
        counts = np.zeros(len(self.cols), dtype=np.int64)
        counts[allowed] = np.floor(target + 1e-9).astype(np.int64)
        left = cell.workers - int(counts.sum())
        for i in np.argsort(-(target - np.floor(target + 1e-9)), kind="stable"):   # largest remainders
            if left <= 0:
                break
            c = allowed[i]
            if counts[c] < hi[c]:
                counts[c] += 1
                left -= 1
        if left == 0:
            self.consider(counts, cell.ps)

    def lp_ratio(self, cell: Cell, lo: np.ndarray, hi: np.ndarray) -> float | None:
        """min (P + c0) / X over the LP relaxation of the cell (Charnes-Cooper); ``None``: empty."""
        allowed, rows = self.charnes_cooper_rows(cell, lo, hi)
        m = len(allowed)
        cost = np.concatenate([self.cols.price[allowed], [cell.ps * self.c0_per_ps]])
        value = self.solve_lp(cost, np.zeros(m + 1), np.full(m + 1, math.inf), rows, cell=cell)
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
        n = self.greedy(r, lo, hi, cell.workers)
        ratio = (n @ p + c0) / (n @ r)
        for _ in range(100):
            n = self.greedy(ratio * r - p, lo, hi, cell.workers)
            new = (n @ p + c0) / (n @ r)
            if new <= ratio * (1 + 1e-14):
                return min(safe, up(float(ratio) * (1 + 1e-12)))
            ratio = new
        return safe

    def lp_product_bound(self, cell: Cell, lo: np.ndarray, hi: np.ndarray) -> float | None:
        """A lower bound on (P + c0) j / X over the cell, keeping how rho and b_w move together.

        With rho = (P + c0) / X and b = b_w, j >= c A(b) - g1 (c the cell's CC factor bound,
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
        _, rows = self.charnes_cooper_rows(cell, lo, hi)
        c = self.spread_factor(cell)
        rho_lo, rho_hi = cell.rho_min, self.max_ratio(cell, lo, hi)
        if not math.isfinite(rho_hi):
            return -math.inf
        c0 = cell.ps * self.c0_per_ps
        price, speed = self.cols.price[allowed], shape.speed[allowed]
        both = np.arange(m + 2)                          # y..., t, w
        for rho_c, b_c in ((rho_lo, cell.b_hi), (rho_hi, cell.b_lo)):
            # w <= rho_c b + b_c rho - rho_c b_c
            rows.append((both, np.concatenate([-rho_c * speed - b_c * price, [-b_c * c0, 1.0]]),
                         -math.inf, -rho_c * b_c))
        lin = c * self.gamma_3 - self.gamma_1
        cost = np.concatenate([lin * price, [lin * c0, c * w.gamma_2]])
        lower = np.concatenate([np.zeros(m + 1), [-math.inf]])
        upper = np.full(m + 2, math.inf)
        return self.solve_lp(cost, lower, upper, rows)

    # ------------------------------------------------------------------ cells
    def new_cell(self, k: int, s: int, top: int | None, *,
                 b_range: tuple[float, float] | None = None,
                 v_range: tuple[float, float] | None = None,
                 x_range: tuple[float, float] = (0.0, math.inf),
                 nogoods: list[tuple[int, ...]] | None = None, within: Cell | None = None) -> Cell | None:
        """A cell with default ranges from its allowed columns (narrowed by the given ones).

        ``within``: a cell of the same (K, s, top) and box holding all of this one's plans
        (see :meth:`finalize`).
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
            # (plans outside it are infeasible; the model's own tolerance is kept)
            (dom_lo, dom_hi), _ = self.model.domain_bounds()
            b_range = (down(max(float(batch.min()), dom_lo * (1 - DOMAIN_TOLERANCE))),
                       up(min(float(batch.max()), dom_hi * (1 + DOMAIN_TOLERANCE))))
            if b_range[0] > b_range[1]:
                return None
        b_lo, b_hi = b_range
        if v_range is None:
            # For a group (top None) V_lo is not a bound on V: it serves cc_lower only, since
            # v_max / (v_max + (K-1) v_min) bounds every plan's largest share. Groups are
            # split by top column before any MILP uses V rows.
            v_top = shape.speed[top] if top is not None else float(v.max())
            v_range = (down(float(v_top + (k - 1) * v.min())), up(float(v_top * k)))
        cell = Cell(0.0, next(self.seq), k, s, top, b_lo, b_hi, v_range[0], v_range[1],
                    allowed, x_lo=x_range[0], x_hi=x_range[1], nogoods=list(nogoods or []))
        return self.finalize(cell, within)


    def tail_bound(self, k0: int) -> float:
        """A lower bound on the cost of every plan with K >= k0 workers.

        Proof: the rate of a column is at most 1 / (T_comp + PCIe term) (eq. 6-7: the
        network term is positive), so (P + c0) / X >= min_c p_c (T_comp,c + pcie_c) = rho_1.
        b_w lies between the smallest and largest batch, so A(b_w) >= A_min; with
        A_min > 0, j >= sqrt(g K) A_min / (L - g5) - g1 (g = 1 without CC, g = gamma_4
        <= R + gamma_4 with it), which grows with K. The paper model's time is
        j / X + overhead >= j / X. The reference model's core time is rounded to 0.01 s
        and must be >= 0.01 s: T_core >= max(0.01, tau j / X - 0.005) >= (2/3) tau j / X.
        So cost >= rho_1 f tau j_lb(k0) / 3600 + ac with f = 1 (paper) or 2/3.
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
        if a_min <= 0 or spread <= 0 or rho_1 <= 0:
            return 0.0
        j_lb = math.sqrt(spread * k0) * a_min / self.model.loss_gap - self.gamma_1
        if j_lb <= 0:
            return 0.0
        tau = 1 - REF_BATCH_ROUNDING / b_min if self.reference else 1.0
        factor = 2 / 3 if self.reference else 1.0
        return max(0.0, down(rho_1 * factor * tau * j_lb / 3600 + self.ac))

