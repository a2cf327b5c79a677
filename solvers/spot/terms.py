"""The terms every part of the spot decomposition reads: the problem, its model and the bound constants.

:class:`SpotTerms` is built once per solve and handed to each part (:class:`~.bounds.CellBounds`,
:class:`~.cc.CcBounds`, :class:`~.lp.LpBounds`, :class:`~.incumbents.IncumbentSearch`) in its
constructor: the model's columns, the constants of the bounds on time and cost (the reference
model's rounding folded in) and the cluster shapes, computed once per (K, s) and shared.
"""

from __future__ import annotations

import numpy as np
from dnnprov.solvers.spot.cells import Cell, ClusterShape

from dnnprov.models.spot import SpotModel

REF_BATCH_ROUNDING = 0.05  # reference model: b_w rounded to 1 decimal
REF_TIME_ROUNDING = 0.005  # reference model: T rounded to 2 decimals
REF_COST_ROUNDING = 5e-7  # reference model: cost rounded to 6 decimals
REF_ITER_ROUNDING = 0.5  # reference model: j rounded to an integer


class SpotTerms:
    """The model of one spot problem as the decomposition's bounds use it.

    With the reference model's rounding folded in: j >= c (gamma_2 b + gamma_3') - gamma_1',
    T >= tau j / X + a0 and cost >= ... + ac (``gamma_3``, ``gamma_1``, ``a0``, ``ac`` here).
    """

    def __init__(self, model: SpotModel) -> None:
        problem = model.problem
        self.problem = problem
        self.model = model
        self.cols = model.columns
        self.reference = problem.model == "reference"
        self.uses_cc = problem.workload.loss_variant == "cc"
        w = problem.workload
        overhead = problem.slo.takeover_overhead_s
        self.c0_per_ps = problem.platform.ps_price_per_h
        if self.reference:
            self.gamma_3 = w.gamma_3 - abs(w.gamma_2) * REF_BATCH_ROUNDING
            self.gamma_1 = w.gamma_1 + REF_ITER_ROUNDING
            self.a0, self.ac = overhead - REF_TIME_ROUNDING, -REF_COST_ROUNDING
        else:
            self.gamma_3, self.gamma_1 = w.gamma_3, w.gamma_1
            self.a0, self.ac = overhead, 0.0
        self.shapes: dict[tuple[int, int], ClusterShape] = {}

    def shape(self, workers: int, ps: int) -> ClusterShape:
        """Rates of every column in a cluster of ``workers`` workers and ``ps`` PS nodes."""
        key = (workers, ps)
        if key not in self.shapes:
            self.prefetch_shapes([key])
        return self.shapes[key]

    def prefetch_shapes(self, pairs: list[tuple[int, int]]) -> None:
        """Compute the shapes of many (K, s) at once (one vectorized model call)."""
        missing = sorted({pair for pair in pairs if pair not in self.shapes})
        if not missing:
            return
        workers, ps = np.array(missing).T
        times = self.model.iteration_times(workers, ps)
        for pair, row in zip(missing, times):
            self.shapes[pair] = ClusterShape(1.0 / row, self.cols.batch / row)

    def a_min(self, b_lo: float, b_hi: float) -> float:
        """min A(b) = gamma_2 b + gamma_3' over [b_lo, b_hi] (A is linear)."""
        g2 = self.problem.workload.gamma_2
        return min(g2 * b_lo, g2 * b_hi) + self.gamma_3

    def time_factor(self, cell: Cell) -> float:
        """tau in T >= tau j / X + a0: 1, or (1 - 0.05 / b_lo) for the reference rounding."""
        return 1 - REF_BATCH_ROUNDING / cell.b_lo if self.reference else 1.0

    def box(self, cell: Cell) -> tuple[np.ndarray, np.ndarray]:
        """Count bounds of the cell's columns (disallowed columns fixed at 0; n_t >= 1)."""
        lo = np.where(cell.allowed, self.cols.lower, 0)
        hi = np.where(cell.allowed, self.cols.upper, 0)
        if cell.top is not None:
            lo[cell.top] = max(lo[cell.top], 1)
        for column, low, high in cell.pinned:
            lo[column], hi[column] = max(lo[column], low), min(hi[column], high)
        return lo, hi
