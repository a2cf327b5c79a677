"""``--robust K`` and ``--risk`` beyond enumeration: the spot decomposition with a revocation-aware evaluation.

Why it is exact. :class:`~dnnprov.solvers.spot.exact.SpotDecomposition` proves the nominal
optimum by cells whose bounds are lower bounds on the nominal cost C (eq. 11) of every
nominally feasible plan in them, and by evaluating exactly every plan its MILPs or
enumerations produce (each then cut off by a no-good). Both planners here keep that
search and change only the exact evaluation, through a judge
(:class:`~dnnprov.solvers.spot.incumbents.JudgedModel`):

* ``--robust K``: a plan counts as feasible only when it is nominally feasible *and*
  K-robust (:mod:`dnnprov.solvers.revocation.robust`); its cost stays C. K-robust plans are a subset
  of the nominally feasible ones with the same cost, so every cell bound still bounds them.
* ``--risk``: a plan counts as feasible when it is nominally feasible and meets the
  deadline form, and its cost is the expected cost E[C] (:mod:`dnnprov.solvers.revocation.risk`).
  ``E[C] >= C`` and both deadline forms imply T <= T_obj, so a bound on C over the
  nominally feasible plans of a cell bounds E[C] over its admissible ones.

The incumbent U is then the best robust plan (or least E[C]); a cell is closed when its
bound reaches U, which is valid because the bound is below every admissible plan's
objective. Plans whose nominal cost is already at least U cannot become the incumbent
whatever the revocation check says (the objective is at least C), so the check runs only
on the others: that is the one shortcut, and it changes no decision of the search.
The status (``optimal``, ``infeasible``: no plan survives, ``limit`` with the bound) and
the bound come from the decomposition's own proof obligations.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
from dnnprov.solvers.spot.cells import Cell, down, row_ranges, up
from dnnprov.solvers.spot.exact import CELL_ENUMERATION, SpotDecomposition
from dnnprov.solvers.spot.incumbents import Judge

from dnnprov.models.spot import SpotEvaluation, SpotModel
from dnnprov.problems.spot import SpotProblem
from dnnprov.progress import Clock, SolverLog
from dnnprov.result import Result

#: sqrt(1e-14): how far the model's R = sqrt(1 - 2 v_top / V + Q / V^2) may be from the
#: exact one (three terms of magnitude <= 2, a few roundings of 1.1e-16 each: an error below
#: 1e-15, ten times less than 1e-14; sqrt(a + e) - sqrt(a) <= sqrt(e))
ROOT_SLACK = 1e-7


class RevocationDecomposition(SpotDecomposition):
    """The spot decomposition whose cells know what revoking their top worker costs.

    With ``outage_s`` = 0 it is :class:`SpotDecomposition` unchanged. With ``outage_s`` = O > 0,
    every plan the search still wants from a cell (judged admissible) must finish in
    ``T_c <= T_obj - h - O D_t``, D_t the share of progress speed a revocation of one worker
    of the cell's top column t takes away (:func:`drop_bound` proves a lower bound on it over
    the cell): the cell's deadline rows (:meth:`deadline`) use that. Why ``--robust K``
    needs it, with O = min(K o, T_obj - h) (with replacement after o) or O = T_obj - h
    (without): see :func:`robust_outage`. A top cell of a spot column whose MILP returns a
    plan the criterion refuses is split once more (:meth:`split_by_top_count`): n_t >= 2,
    or n_t = 1 with each possible next column t2, since removing the only top worker makes
    the next column the cluster's top (eq. 5's w_1), which is what makes D large.
    """

    def __init__(
        self,
        problem: SpotProblem,
        *,
        clock: Clock,
        log: SolverLog,
        outage_s: float = 0.0,
        cell_enumeration: int = CELL_ENUMERATION,
        judge: Judge | None = None,
    ) -> None:
        self.outage_s = outage_s
        super().__init__(
            problem,
            clock=clock,
            log=log,
            cell_enumeration=cell_enumeration,
            deadline=self.deadline if outage_s > 0 else None,
            judge=judge,
        )
        self.revocable = np.array([market == "spot" for market in self.cols.markets])

    def deadline(self, cell: Cell) -> float:
        """T_obj - O D_lb (module docstring of :func:`drop_bound`); T_obj where nothing is known.

        The judge accepts ``T + delay <= T_obj (1 + 1e-12)``, so the value starts there; a
        cell that provably holds no admissible plan gets ``h + 1e-9 T_obj`` (its rows then
        ask T_c <= 1e-9 T_obj, which such plans would have to beat anyway).
        """
        nominal = self.problem.slo.time_s
        if self.outage_s <= 0:
            return nominal
        drop = drop_bound(self, cell)
        if drop <= 0:
            return nominal
        return max(nominal * (1 + 1e-12) - self.outage_s * drop, self.problem.slo.takeover_overhead_s + 1e-9 * nominal)

    def splits(self, cell: Cell) -> bool:
        """Whether a top cell of a revocable column is still to be split by its top count
        (only where :func:`drop_bound` can use the parts: rates equal at K and K - 1)."""
        return (
            self.outage_s > 0
            and cell.top is not None
            and not cell.pinned
            and cell.workers >= 2
            and bool(self.revocable[cell.top])
            and not cell.tail
            and self.same_rates(cell)
        )

    def same_rates(self, cell: Cell) -> bool:
        """Whether every column's rate is the same with K and K - 1 workers (the PS link uncontended)."""
        return np.array_equal(self.shape(cell.workers, cell.ps).rate, self.shape(cell.workers - 1, cell.ps).rate)

    def refine(self, cell: Cell, counts: np.ndarray) -> list[Cell]:
        """Cut the MILP's plan off; a top cell whose plan the criterion refused is split by top count.

        Splitting only there (lazily) keeps the cells of instances whose nominal optimum is
        robust as many as the plain decomposition has; the split cell's parts carry its
        no-goods and the new one.
        """
        if self.incumbents.refused(counts, cell.ps) and self.splits(cell):
            cell.nogoods = cell.nogoods + [tuple(int(v) for v in counts)]
            return self.split_by_top_count(cell)
        return super().refine(cell, counts)

    def split_by_top_count(self, cell: Cell) -> list[Cell]:
        """The parts n_t >= 2, and n_t = 1 with next column t2 (one part per t2), of a top cell.

        Proof that no plan is lost: a plan of the cell has n_t >= 1 (t is its top column).
        With n_t >= 2 it is in the first part. With n_t = 1 it uses another column (K >= 2);
        t2, its fastest other used column (ties: the highest index, as for tops), is unique,
        and the part of t2 pins n_t to 1, n_t2 >= 1 and every other column faster than t2
        (or as fast with a higher index) to 0, all of which the plan meets. Each part keeps
        the cell's ranges, bounds and no-goods (claims about every plan of the cell, so of a
        part), its V and Q ranges narrowed to their exact ranges over the part's box.
        """
        lo, hi = self.box(cell)
        t = cell.top
        assert t is not None  # a top cell names its top column
        shape = self.shape(cell.workers, cell.ps)
        speed = shape.speed
        parts: list[tuple[tuple[int, int, int], ...]] = []
        if hi[t] >= 2:
            parts.append(((t, 2, int(hi[t])),))
        if lo[t] <= 1:
            others = [int(c) for c in np.flatnonzero(cell.allowed & (hi > 0)) if c != t]
            for t2 in others:
                faster = [c for c in others if speed[c] > speed[t2] or (speed[c] == speed[t2] and c > t2)]
                parts.append(((t, 1, 1), (t2, 1, int(hi[t2])), *((c, 0, 0) for c in faster)))
        children = []
        for pinned in parts:
            part = dataclasses.replace(cell, pinned=pinned)
            lo, hi = self.box(part)
            if (lo > hi).any() or int(lo.sum()) > cell.workers or int(hi.sum()) < cell.workers:
                continue
            # V and Q over the part's box (exact for the box: row_ranges), within the cell's ranges
            least, most = row_ranges(np.array([shape.speed, shape.speed**2]), lo, hi, cell.workers)
            child = self.bounds.new_cell(
                cell.workers,
                cell.ps,
                t,
                pinned=pinned,
                nogoods=cell.nogoods,
                b_range=(cell.b_lo, cell.b_hi),
                x_range=(cell.x_lo, cell.x_hi),
                v_range=(max(cell.v_lo, down(float(least[0]))), min(cell.v_hi, up(float(most[0])))),
                q_range=(max(cell.q_lo, down(float(least[1]))), min(cell.q_hi, up(float(most[1])))),
            )
            if child is not None:
                # a part holds a subset of the cell's plans: the cell's bounds hold too
                child.pj_lb = max(child.pj_lb, cell.pj_lb)
                child.bound = max(child.bound, cell.bound)
                children.append(child)
        return children


def drop_bound(search: RevocationDecomposition, cell: Cell) -> float:
    """A lower bound on max(D_t, 0), D_t = 1 - sigma(n - e_t) / sigma(n), over the cell's plans (t its top).

    0 claims nothing (the criterion asks for nothing beyond eq. 13 where D_t <= 0).

    sigma = X / (A(b_w) sqrt((R + g4) K)) (docs/revocation.md; without CC no R), so for the
    cluster n' = n - e_t (K - 1 workers, same PS):

        sigma' / sigma = (X' / X) (A(b) / A(b')) sqrt(K / (K - 1)) sqrt((R + g4) / (R' + g4)),

    a product of positive factors, each bounded above over the cell, jointly in the
    aggregates it depends on (bounding X, V, R and X', V', R' apart would lose the whole
    few-per-cent drop). Only where the column rates do not change between K and K - 1
    workers (the PS link uncontended at both: then X' = X - r_t, V' = V - v_t,
    Q' = Q - v_t^2 exactly); elsewhere 0 is returned (always valid). The ranges used are the
    cell's claims (b, X, V, Q; a part of a split gets V and Q over its pinned box).

    * ``X'/X = 1 - r_t / X <= 1 - r_t / X_hi``.
    * ``b' = (V - v_t) / (X - r_t) = b + r_t (b - b_t) / (X - r_t)``, so
      ``A(b)/A(b') = 1 / (1 + h)`` with ``h = g2 r_t (b - b_t) / ((X - r_t) A(b))``. For fixed X,
      h is monotone in b (d/db (b - b_t)/A(b) = A(b_t)/A(b)^2, one sign), for fixed b monotone
      in X > r_t, so its least value over the b-X rectangle is at a corner. Needs A > 0 on
      the b range and 1 + h_min > 0, else 0 is returned.
    * R^2 = S = 1 - 2 v_t/V + Q/V^2 (eq. 5); R'^2 >= S' = 1 - 2u/V' + Q'/V'^2 with u >= the
      speed of n''s top: u = v_t when n_t >= 2 may hold, else the fastest other column of the
      box (the part of a pinned next column t2: u = v_t2, exact). Then
      ``(R + g4)/(R' + g4) - 1 <= (S - S'+)/((sqrt S + sqrt S'+)(sqrt S'+ + g4))`` (S'+ = max(S', 0)),
      ``S - S' = g(V) + Q/V^2 - Q'/V'^2``, ``g(V) = -2 v_t/V + 2u/(V - v_t)``: g has at most one
      critical point on V > v_t and it is a minimum (g' < 0 near v_t), so its maximum over
      [V_lo, V_hi] is at an end. The Q part is linear in Q with slope 1/V^2 - 1/V'^2 < 0, so
      Q = Q_lo (>= v_t^2) maximizes it; then either write it ``Q_lo (1/V^2 - 1/V'^2) +
      v_t^2/V'^2`` (a coefficient rising with V, a term falling with it) or bound
      ``Q_lo/V^2`` and ``-(Q_lo - v_t^2)/V'^2`` apart (falling, rising); both hold. The numerator's
      maximum over the rectangle divides the largest denominator when it is <= 0 (R, R' <=
      sqrt(1 - w_1), w_1 >= 1/K), else the smallest.

    The result is lowered by 1e-9 (the few floating operations err by ~1e-15 relative), and
    the R factor allows for the model's own rounding of R and R' (a square root near 0
    turns an error of 1e-16 in S into 1e-8: :data:`ROOT_SLACK`).
    """
    k, t = cell.workers, cell.top
    if t is None or k < 2 or not search.revocable[t]:
        return 0.0
    if not search.same_rates(cell):
        return 0.0
    here = search.shape(k, cell.ps)
    lo, hi = search.box(cell)
    rate, speed = here.rate, here.speed
    r_t, v_t, b_t = float(rate[t]), float(speed[t]), float(search.cols.batch[t])
    x_lo, x_hi, v_lo, v_hi = cell.x_lo, cell.x_hi, cell.v_lo, cell.v_hi
    q_lo, q_hi = max(cell.q_lo, v_t**2), cell.q_hi
    if not (r_t < x_lo <= x_hi < math.inf and v_t < v_lo <= v_hi < math.inf):
        return 0.0
    w = search.problem.workload
    a_lo, a_hi = w.gamma_2 * cell.b_lo + w.gamma_3, w.gamma_2 * cell.b_hi + w.gamma_3
    if min(a_lo, a_hi) <= 0:
        return 0.0
    h_min = min(
        w.gamma_2 * r_t * (b - b_t) / ((x - r_t) * a)
        for b, a in ((cell.b_lo, a_lo), (cell.b_hi, a_hi))
        for x in (x_lo, x_hi)
    )
    if 1 + h_min <= 0:
        return 0.0
    ratio = (1 - r_t / x_hi) / (1 + h_min) * math.sqrt(k / (k - 1))
    if search.uses_cc:
        others = np.flatnonzero((hi > 0) & (np.arange(len(hi)) != t))
        u = v_t if hi[t] >= 2 or not len(others) else 0.0
        if lo[t] <= 1 and len(others):
            u = max(u, float(speed[others].max()))
        g = max(-2 * v_t / v + 2 * u / (v - v_t) for v in (v_lo, v_hi))
        # the Q part, Q/V^2 - Q'/V'^2, falls with Q (so Q = Q_lo); two bounds over V, the first
        # tight when V >> v_t, the second free of the cancellation of large terms when v_t dominates V
        q_part = min(
            q_lo * (1 / v_hi**2 - 1 / (v_hi - v_t) ** 2) + v_t**2 / (v_lo - v_t) ** 2,
            q_lo / v_lo**2 - (q_lo - v_t**2) / (v_hi - v_t) ** 2,
        )
        numerator = g + q_part
        g4 = w.gamma_4
        if numerator <= 0:
            s_hi = min(1 - max(v_t / v_hi, 1 / k), 1 - 2 * v_t / v_hi + q_hi / v_lo**2)
            s2_hi = min(1 - 1 / (k - 1), 1 - 2 * u / (v_hi - v_t) + (q_hi - v_t**2) / (v_lo - v_t) ** 2)
            s_hi, s2_hi = max(s_hi, 0.0), max(s2_hi, 0.0)
            denominator = (math.sqrt(s_hi) + math.sqrt(s2_hi)) * (math.sqrt(s2_hi) + g4)
        else:
            s_lo = max(0.0, 1 - 2 * v_t / v_lo + q_lo / v_hi**2)
            s2_lo = max(0.0, 1 - 2 * u / (v_lo - v_t) + (q_lo - v_t**2) / (v_hi - v_t) ** 2)
            denominator = (math.sqrt(s_lo) + math.sqrt(s2_lo)) * (math.sqrt(s2_lo) + g4)
        # R and R' as the model computes them: sqrt of S and S' with an absolute error of at most
        # ~1e-15 each, so R is at most sqrt(S) + ROOT_SLACK and R' at least sqrt(S'+) - ROOT_SLACK
        if not (denominator > 0 and g4 > 2 * ROOT_SLACK):
            return 0.0
        slack = (1 + ROOT_SLACK / g4) / (1 - ROOT_SLACK / g4)
        ratio *= math.sqrt(max(1 + numerator / denominator, 0.0) * slack)
    return max(0.0, 1 - ratio - 1e-9)


def decompose(
    problem: SpotProblem, judge: Judge, clock: Clock, outage_s: float = 0.0, cell_enumeration: int = CELL_ENUMERATION
) -> tuple[Result, dict]:
    """Run the spot decomposition with ``judge`` in its exact evaluation; the result and stats.

    ``outage_s``: the O of :class:`RevocationDecomposition` (0: the plain decomposition);
    ``cell_enumeration``: as for :class:`SpotDecomposition` (0: every cell by MILPs, for tests).
    """
    search = RevocationDecomposition(
        problem, clock=clock, log=SolverLog(clock), outage_s=outage_s, cell_enumeration=cell_enumeration, judge=judge
    )
    result = search.run(None)
    judged = search.incumbents.judged
    assert judged is not None  # a judge was given
    return result, {**search.stats, "plans_judged": judged.judged, "method": "decompose"}


def robust_outage(problem: SpotProblem, k: int, overhead_s: float, replaced: bool) -> float:
    """O such that every K-robust plan meets ``T_c <= T_lim - O D_t`` for each revocable used column t.

    T_c = T - h, T_lim = T_obj - h, D_t = D(e_t) (:mod:`dnnprov.solvers.revocation.robust`). Proof: the
    worst-case delay the planner checks is at least ``min(K o D, T_c D / (1 - D))`` for D > 0:
    with replacement o F_K >= K o D (K events revoking one t-worker each, allowed since a
    column may recur in different events) and T_c (sigma_n / sigma_min - 1) >= T_c D / (1 - D)
    (sigma_min <= sigma(n - e_t)), so both branches of ``replaced_delay`` are at least the min
    (K = 1: it is exactly min(o D, T_c D / (1 - D))); without replacement the delay is
    T_c (sigma_n / sigma_min - 1) >= T_c D / (1 - D). Now T_c + min(P D, T_c D / (1 - D)) <=
    T_lim implies T_c <= T_lim - min(P, T_lim) D: if the first term is the min, T_c <=
    T_lim - P D; else T_c <= T_lim (1 - D) = T_lim - T_lim D. Either is <= T_lim -
    min(P, T_lim) D. (D = 1: the delay is at least P, the same conclusion.) So O = min(K o,
    T_lim) with replacement and T_lim (P infinite) without; D <= 0 asks nothing more than
    eq. 13.
    """
    limit = problem.slo.time_s - problem.slo.takeover_overhead_s
    if k < 1 or limit <= 0:
        return 0.0
    return limit if not replaced else min(k * overhead_s, limit)


def decompose_risk(
    problem: SpotProblem,
    model: SpotModel,
    outcome: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
    clock: Clock,
) -> tuple[Result, dict]:
    """``--risk`` by the decomposition; ``outcome(counts, ps) -> (admissible, expected cost)``."""

    def judge(counts: np.ndarray, ps: np.ndarray, nominal: SpotEvaluation) -> tuple[np.ndarray, np.ndarray]:
        admissible, cost = outcome(counts, ps)
        return admissible & np.isfinite(cost), np.where(np.isfinite(cost), cost, np.inf)

    return decompose(problem, judge, clock)
