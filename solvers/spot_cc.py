"""Bounds on the CC term: how R (eq. 5) and with it the iteration count j grow over a cell (mixed into ``CellBounds``).

R depends on the plan through its shares w_i = v_i / V, so over a cell of fixed (K, s, top
column t) it is bounded from below by closed forms in V (Cauchy-Schwarz), by a secant in V
and by a secant in Q = sum n v^2, which the cell rows turn into deadline rows (see
``CellBounds.cell_rows``); j's bound couples R with b_w through V = b_w X. The host provides
the shapes, the workload and ``a_min``.
"""

from __future__ import annotations

import math

import numpy as np

from dnnprov.solvers.spot_cells import Cell

COUPLING_INTERVALS = 16        # b_w intervals of the coupled j bound (see j_lower)
COUPLING_GRID = np.linspace(0.0, 1.0, COUPLING_INTERVALS + 1)


class CcBounds:
    """Lower bounds on R, on the CC factor sqrt((R + gamma_4) K) / (L - gamma_5) and on j over a cell."""

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

    def cc_square_secant(self, cell: Cell) -> tuple[float, float] | None:
        """(q0, q1) with sqrt((R + gamma_4) K) / (L - gamma_5) >= q0 + q1 Q on the cell, Q = sum n v^2.

        Proof: R^2 = 1 - 2 v_t / V + Q / V^2 (eq. 5 with w_i = v_i / V). Cauchy-Schwarz on
        the K - 1 workers other than one of type t gives Q >= Q_cs(V) = v_t^2 + (V - v_t)^2
        / (K - 1), and 1 - 2 v_t / V + Q_cs(V) / V^2 = s_K^2 (1 - v_t / V)^2. So with
        E = Q - Q_cs(V) >= 0 and V <= V_hi, R^2 >= s_K^2 (1 - v_t / V)^2 + E / V_hi^2, and on
        [V_lo, V_hi] (V >= v_t: n_t >= 1) the first term is at least its value at V_lo and
        -(V - v_t)^2 / ((K - 1) V_hi^2) at least its value at V_hi, so R^2 >= a + Q / V_hi^2
        with a constant a. R >= r0 = s_K (1 - v_t / V_lo) holds too (:meth:`cc_lower`). Let
        Q* solve a + Q* / V_hi^2 = r0^2; every plan has Q <= v_t V <= v_t V_hi = Q_hi (no
        allowed column is faster than t). The line through (Q*, c(r0)) and
        (Q_hi, c(sqrt(a + Q_hi / V_hi^2))) is a valid lower bound: for Q <= Q* it is at most
        c(r0) (its slope is >= 0); on [Q*, Q_hi], c(sqrt(a + Q / V_hi^2)) is concave in Q (c
        concave increasing, the root of an affine function concave) and lies above its chord.
        ``None`` where it adds nothing (no CC, K = 1, a group, Q* >= Q_hi).
        """
        k = cell.workers
        if not self.uses_cc or cell.top is None or k == 1 or not cell.v_hi > 0:
            return None
        v_t = float(self.shape(cell.workers, cell.ps).speed[cell.top])
        v_lo, v_hi = max(cell.v_lo, v_t), cell.v_hi
        if v_lo > v_hi:
            return None
        s2 = k / (k - 1)
        g4 = self.problem.workload.gamma_4
        inv = 1.0 / (v_hi * v_hi)
        a = s2 * (1 - v_t / v_lo) ** 2 - ((v_hi - v_t) ** 2 / (k - 1) + v_t * v_t) * inv
        r0_sq = s2 * (1 - v_t / v_lo) ** 2
        q_star, q_hi = (r0_sq - a) / inv, v_t * v_hi
        if not q_star < q_hi:
            return None

        def c(r: float) -> float:
            return math.sqrt((r + g4) * k) / self.model.loss_gap

        c_star, c_hi = c(math.sqrt(r0_sq)), c(math.sqrt(max(a + q_hi * inv, r0_sq)))
        q1 = max(0.0, (c_hi - c_star) / (q_hi - q_star))
        q0 = c_star - q1 * q_star
        return q0 - 1e-9 * (abs(q0) + q1 * q_hi), q1

    def j_lower(self, cell: Cell) -> float:
        """Lower bound of j over the cell (never below the domain's iteration floor, 0, or 1 for the reference).

        With the CC term, b_w and R are coupled: V = b_w X >= b_w X_lo, and R's bound grows
        with V. So j >= min over b of c(max(V_lo, b X_lo)) A(b) - g1, where c(.) is
        nondecreasing in b; on each of a few intervals [b_i, b_i+1] that is at least
        c(V(b_i)) min(A(b_i), A(b_i+1)).
        """
        # a feasible plan has j > 0 (the reference model: rounded j >= 1) and j at least the
        # validity domain's iteration floor (SpotModel.admits_iterations)
        floor = max(1.0 if self.reference else 0.0, self.model.iteration_floor())
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
