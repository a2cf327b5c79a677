"""Bounds on the CC term: how R (eq. 5) and with it the iteration count j grow over a cell (a part of ``CellBounds``).

R depends on the plan through its shares w_i = v_i / V, so over a cell of fixed (K, s, top
column t) it is bounded from below by closed forms in V (Cauchy-Schwarz), by a secant in V
and by a secant in Q = sum n v^2, which the cell rows turn into deadline rows (see
``CellBounds.cell_rows``); j's bound couples R with b_w through V = b_w X. It reads the
problem's terms (:class:`~dnnprov.solvers.spot.terms.SpotTerms`: shapes, workload, ``a_min``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from dnnprov.solvers.spot.cells import Cell
from dnnprov.solvers.spot.terms import SpotTerms


class CcBounds:
    """Lower bounds on R, on the CC factor sqrt((R + gamma_4) K) / (L - gamma_5) and on j over a cell."""

    def __init__(self, terms: SpotTerms) -> None:
        self.problem = terms.problem
        self.model = terms.model
        self.uses_cc = terms.uses_cc
        self.reference = terms.reference
        self.gamma_1 = terms.gamma_1
        self.gamma_3 = terms.gamma_3
        self.shape = terms.shape
        self.a_min = terms.a_min

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

    def cc_square_curve(self, cell: Cell) -> tuple[Callable[[float], float], float, float] | None:
        """(f, Q_a, Q_b): sqrt((R + gamma_4) K) / (L - gamma_5) >= f(Q) on the cell, f concave on [Q_a, Q_b].

        Proof: R^2 = g(V) = 1 - 2 v_t / V + Q / V^2 (eq. 5 with w_i = v_i / V). Every plan
        has Q <= v_t V (no allowed column is faster than t), and g'(V) = 2 (v_t V - Q) / V^3
        >= 0 for V >= Q / v_t, so with V >= V_lo, R^2 >= h(Q) = g(max(V_lo, Q / v_t)), i.e.
        h(Q) = 1 - 2 v_t / V_lo + Q / V_lo^2 for Q <= v_t V_lo and 1 - v_t^2 / Q beyond: linear,
        then concave, with the same slope 1 / V_lo^2 where they meet, so h is concave and
        nondecreasing. R >= r0 = s_K (1 - v_t / V_lo) holds too (:meth:`cc_lower`), so
        f(Q) = c(sqrt(max(h(Q), r0^2))) bounds the CC factor (c(r) = sqrt((r + gamma_4) K) /
        (L - gamma_5)); f is nondecreasing, constant c(r0) up to Q* (where h(Q*) = r0^2) and
        concave beyond it (c concave increasing, the root of a nonnegative concave function
        concave). Every plan has Q <= v_t V <= v_t V_hi and Q inside the cell's [q_lo, q_hi]:
        Q_a = max(Q*, q_lo), Q_b = min(v_t V_hi, q_hi). (h is exact at V = V_lo: narrow V
        ranges make it tight.) ``None`` where it adds nothing (no CC, K = 1, a group, Q_a >= Q_b).
        """
        k = cell.workers
        if not self.uses_cc or cell.top is None or k == 1 or not cell.v_hi > 0:
            return None
        v_t = float(self.shape(cell.workers, cell.ps).speed[cell.top])
        v_lo, v_hi = max(cell.v_lo, v_t), cell.v_hi
        if v_lo > v_hi:
            return None
        g4 = self.problem.workload.gamma_4
        r0_sq = k / (k - 1) * (1 - v_t / v_lo) ** 2
        base, knee = 1 - 2 * v_t / v_lo, v_t * v_lo  # h = base + Q / v_lo^2 up to the knee

        def h(q: float) -> float:
            return base + q / (v_lo * v_lo) if q <= knee else 1 - v_t * v_t / q

        # h(Q*) = r0^2, on the linear piece if it reaches r0^2 there (h is increasing)
        q_star = (r0_sq - base) * v_lo * v_lo if h(knee) >= r0_sq else v_t * v_t / max(1 - r0_sq, 1e-300)
        q_a, q_b = max(q_star, cell.q_lo), min(v_t * v_hi, cell.q_hi)
        if not q_a < q_b:
            return None
        gap = self.model.loss_gap

        def f(q: float) -> float:
            return math.sqrt((math.sqrt(max(h(q), r0_sq)) + g4) * k) / gap

        return f, q_a, q_b

    def cc_square_secant(self, cell: Cell) -> tuple[float, float] | None:
        """(q0, q1) with sqrt((R + gamma_4) K) / (L - gamma_5) >= q0 + q1 Q on the cell, Q = sum n v^2.

        The chord of :meth:`cc_square_curve`'s f over [Q_a, Q_b]: for Q in [Q_a, Q_b] f is
        concave there and lies above its chord; a plan with Q < Q_a (only when Q_a = Q*) has
        f(Q) = c(r0) = f(Q_a) >= the chord's value at Q, since its slope is >= 0 (f
        nondecreasing). Lowered by 1e-9 of its terms for rounding.
        """
        curve = self.cc_square_curve(cell)
        if curve is None:
            return None
        f, q_a, q_b = curve
        c_a, c_b = f(q_a), f(q_b)
        q1 = max(0.0, (c_b - c_a) / (q_b - q_a))
        q0 = c_a - q1 * q_a
        return q0 - 1e-9 * (abs(q0) + q1 * q_b), q1

    def j_lower(self, cell: Cell) -> float:
        """Lower bound of j over the cell (never below the domain's iteration floor, 0, or 1 for the reference).

        With the CC term, b_w and R are coupled: a plan with b_w = b has V = b X >= b X_lo and
        V >= V_lo, and R's bound s_K max(0, 1 - v_t / V) grows with V, so
        j >= min over b in [b_lo, b_hi] of f(b) - g1 with f(b) = c(max(V_lo, b X_lo)) A(b)
        (c the CC factor, nondecreasing in V; A(b) = g2 b + g3' >= A_min > 0 on the range).
        That minimum is found exactly:

        * g2 >= 0: both factors are nonnegative and nondecreasing in b: f(b_lo).
        * g2 < 0: below the knee b* = max(V_lo, v_t) / X_lo, V(b) = max(V_lo, b X_lo) stays
          where R's bound is constant (V = V_lo, or V <= v_t where it is 0), so f >= c(V_lo)
          A(b*) there (A decreases). Above it, c(b X_lo) is concave and nondecreasing in b
          (1 - v_t / (b X_lo) is concave increasing, and the root of a nonnegative concave
          function is concave) and A is affine, nonnegative and decreasing, so
          f'' = c'' A + 2 c' A' <= 0: f is concave and its minimum over [max(b*, b_lo), b_hi]
          lies at an end.

        The float evaluation at those points is lowered by 1e-12 relative, far above its
        rounding error (a few operations of 1e-16 each).
        """
        # a feasible plan has j > 0 (the reference model: rounded j >= 1) and j at least the
        # validity domain's iteration floor (SpotModel.admits_iterations)
        floor = max(1.0 if self.reference else 0.0, self.model.iteration_floor())
        a = self.a_min(cell.b_lo, cell.b_hi)
        if not (self.uses_cc and cell.top is not None and cell.workers > 1):
            j = self.spread_factor(cell) * a - self.gamma_1 if a > 0 else -math.inf
            return max(j, floor)
        if a <= 0:
            return floor
        k = cell.workers
        g2, g3, g4 = self.problem.workload.gamma_2, self.gamma_3, self.problem.workload.gamma_4
        v_t = float(self.shape(cell.workers, cell.ps).speed[cell.top])
        s_k, gap = math.sqrt(k / (k - 1)), self.model.loss_gap
        b_lo, b_hi, v_lo, x_lo = cell.b_lo, cell.b_hi, cell.v_lo, cell.x_lo

        def spread(v: float) -> float:  # c(V) with R >= s_K max(0, 1 - v_t / V)
            share = 1 - v_t / v if v > 0 else 0.0
            return math.sqrt(((share * s_k if share > 0 else 0.0) + g4) * k) / gap

        def f(b: float) -> float:
            return spread(max(v_lo, b * x_lo)) * (g2 * b + g3)

        if g2 >= 0:
            least = f(b_lo)
        else:
            knee = max(v_lo, v_t) / x_lo if x_lo > 0 else math.inf
            if knee <= b_lo:
                least = min(f(b_lo), f(b_hi))
            elif knee >= b_hi:
                least = spread(v_lo) * (g2 * b_hi + g3)
            else:
                least = min(spread(v_lo) * (g2 * knee + g3), f(b_hi))
        return max(least * (1 - 1e-12) - self.gamma_1, floor)
