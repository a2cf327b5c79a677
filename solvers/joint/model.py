"""Steps 2 and 3 of joint provisioning on highspy: the column model, its LP and its MILPs.

:class:`ColumnModel` holds all columns of all jobs in one sparse matrix and solves the LP
relaxation (by column generation or in full) and the MILPs over column subsets; the bound and
reduced costs it computes from any duals, and why they are valid, are step 2 of
:mod:`dnnprov.solvers.joint.provision`, which drives the fixing (step 3).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import highspy
import numpy as np
import scipy.sparse as sp
from dnnprov.formulations.joint import JobColumns
from dnnprov.solvers.highs_driver import (
    TINY,
    UNIT_ROUNDOFF,
    MilpSolution,
    MilpStatus,
    SparseRows,
    milp_status,
    new_highs,
    safe_dual_bound,
    solve_milp,
)

BIG_M = 1e4  # cost of one unit of artificial slack in the LP's column generation, x max |cost|
PRICING_TOLERANCE = 1e-9  # columns enter the restricted LP below -this x max |cost|


# ---------------------------------------------------------------------- the column model on highspy
@dataclass
class ColumnModel:
    """All columns of all jobs in one sparse matrix: J convexity rows, then the shared rows."""

    cost: np.ndarray  # (N,)
    job_of: np.ndarray  # (N,) job index of each column
    starts: np.ndarray  # (J + 1,) first column of each job (columns are grouped by job)
    matrix: sp.csc_matrix  # (J + R, N)
    row_names: list[str]  # the R shared rows
    limits: np.ndarray  # (R,)

    @property
    def jobs(self) -> int:
        return len(self.starts) - 1

    @classmethod
    def build(cls, columns: Sequence[JobColumns], shared: Mapping[str, float]) -> ColumnModel:
        """Stack the jobs' columns; rows no job touches are left out."""
        sizes = np.array([len(c) for c in columns], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)])
        n, j_count = int(starts[-1]), len(columns)
        used_rows = [r for r in shared if any(r in c.usage for c in columns)]
        row_index = {r: j_count + i for i, r in enumerate(used_rows)}
        job_of = np.repeat(np.arange(j_count), sizes)
        rows, cols, vals = [job_of], [np.arange(n)], [np.ones(n)]
        for j, c in enumerate(columns):
            for r, a in c.usage.items():
                if r in row_index:
                    nz = np.flatnonzero(a)
                    rows.append(np.full(len(nz), row_index[r]))
                    cols.append(starts[j] + nz)
                    vals.append(a[nz])
        matrix = sp.csc_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(j_count + len(used_rows), n)
        )
        cost = np.concatenate([c.cost for c in columns]) if columns else np.zeros(0)
        return cls(cost, job_of, starts, matrix, used_rows, np.array([shared[r] for r in used_rows], dtype=float))

    def solve(
        self, subset: np.ndarray | None = None, *, integer: bool, time_limit_s: float = math.inf, gap: float = 0.0
    ) -> MilpSolution:
        """Solve the LP (``integer=False``) or the MILP over the columns ``subset`` (default: all), unverified.

        The answer's ``status`` is HiGHS's word (:func:`milp_status`), ``x`` is full length
        (zeros outside ``subset``), ``objective`` is recomputed from ``x``, ``dual_bound`` is
        ``-inf`` (nothing here is verified: :meth:`verified_solve` and :meth:`lagrangian` are),
        and an optimal LP carries its ``row_dual``. No start solution is passed: with presolve
        on, HiGHS 1.16 returned the start vector while reporting a better objective (seen on a
        15-column instance), so the MILP runs cold.
        """
        idx = np.arange(len(self.cost)) if subset is None else np.asarray(subset, dtype=np.int64)
        a = self.matrix[:, idx]
        j_count, r_count = self.jobs, len(self.row_names)
        h = new_highs()
        lp = highspy.HighsLp()
        lp.num_col_ = len(idx)
        lp.num_row_ = j_count + r_count
        lp.col_cost_ = self.cost[idx]
        lp.col_lower_ = np.zeros(len(idx))
        lp.col_upper_ = np.ones(len(idx)) if integer else np.full(len(idx), highspy.kHighsInf)
        lp.row_lower_ = np.concatenate([np.ones(j_count), np.full(r_count, -highspy.kHighsInf)])
        lp.row_upper_ = np.concatenate([np.ones(j_count), self.limits])
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = a.indptr.astype(np.int32)
        lp.a_matrix_.index_ = a.indices.astype(np.int32)
        lp.a_matrix_.value_ = a.data.astype(float)
        if integer:
            lp.integrality_ = [highspy.HighsVarType.kInteger] * len(idx)
        h.passModel(lp)
        if not integer:
            # Interior point + crossover: dual simplex needed minutes on 10,000 one-of-k
            # convexity rows with a single shared row; IPM takes seconds and still returns
            # a basic solution (few fractional jobs) and its duals.
            h.setOptionValue("solver", "ipm")
        if math.isfinite(time_limit_s):
            h.setOptionValue("time_limit", max(float(time_limit_s), 0.01))
        if gap:
            h.setOptionValue("mip_rel_gap", float(gap))  # incumbents only; the final MILP keeps 0
        h.run()
        status = milp_status(h.getModelStatus())
        x = None
        if h.getInfo().primal_solution_status == 2:  # kSolutionStatusFeasible
            x = np.zeros(len(self.cost))
            x[idx] = np.array(h.getSolution().col_value)
        row_dual = np.array(h.getSolution().row_dual) if not integer and status is MilpStatus.OPTIMAL else None
        return MilpSolution(status, x, float(self.cost @ x) if x is not None else math.inf, -math.inf, row_dual)

    def solve_lp(
        self, stats: dict[str, Any], *, time_limit_s: float = math.inf, keep_duals: bool = False
    ) -> MilpSolution:
        """The LP relaxation over all columns by column generation (``solve`` with ``integer=False`` on big sets).

        A restricted LP holds each job's cheapest column and one artificial column per
        shared row (``A_r x - s_r <= b_r``, cost ``BIG_M`` per unit); every round prices all
        columns at once with numpy, ``d = c - y_job - A^T pi``, and adds each job's most
        negative one, until none is negative: then the restricted optimum is the full LP's
        (HiGHS re-solves from the previous basis after ``addCols``). If artificials stay
        positive (the LP may be infeasible, or ``BIG_M`` too small) or the limit strikes,
        the result has no ``row_dual`` and the caller solves the full LP instead (with
        ``keep_duals``, a status ``ERROR`` with the duals of the LP with its artificials: any
        duals give a Lagrangian bound, :mod:`dnnprov.solvers.joint.pricing.priced`). ``stats`` gets
        ``lp_rounds`` and ``lp_columns`` (the columns of the last restricted LP; ``None`` without one).
        One-of-k rows by the thousand made HiGHS's dual simplex slow on the full LP and
        interior point slow on jobs with a thousand columns each; the restricted LPs are
        small either way.
        """
        started = time.perf_counter()
        j_count, r_count, n = self.jobs, len(self.row_names), len(self.cost)
        scale = max(1.0, float(np.abs(self.cost).max()) if n else 1.0)
        base: Any = highspy.Highs.__mro__[1]  # the pybind class: plain array addRows/addCols (typed `type`)
        h = new_highs()
        h.setOptionValue("presolve", "off")
        none_i, none_f = np.empty(0, dtype=np.int32), np.empty(0)
        base.addRows(
            h,
            j_count + r_count,
            np.concatenate([np.ones(j_count), np.full(r_count, -highspy.kHighsInf)]),
            np.concatenate([np.ones(j_count), self.limits]),
            0,
            none_i,
            none_i,
            none_f,
        )
        base.addCols(
            h,
            r_count,
            np.full(r_count, BIG_M * scale),
            np.zeros(r_count),
            np.full(r_count, highspy.kHighsInf),
            r_count,
            np.arange(r_count, dtype=np.int32),
            (j_count + np.arange(r_count)).astype(np.int32),
            -np.ones(r_count),
        )
        shared_t = self.matrix[j_count:, :].T.tocsr()
        in_lp = np.zeros(n, dtype=bool)
        order: list[np.ndarray] = []

        def add(columns: np.ndarray) -> None:
            a = self.matrix[:, columns]
            base.addCols(
                h,
                len(columns),
                self.cost[columns],
                np.zeros(len(columns)),
                np.full(len(columns), highspy.kHighsInf),
                a.nnz,
                a.indptr[:-1].astype(np.int32),
                a.indices.astype(np.int32),
                a.data.astype(float),
            )
            in_lp[columns] = True
            order.append(columns)

        add(self.initial_columns())
        stats["lp_rounds"], stats["lp_columns"] = 0, None
        while True:
            stats["lp_rounds"] += 1
            remaining = time_limit_s - (time.perf_counter() - started)
            if remaining <= 0:
                return MilpSolution(MilpStatus.LIMIT, None, math.inf, -math.inf)
            h.setOptionValue("time_limit", max(remaining, 0.01) if math.isfinite(remaining) else highspy.kHighsInf)
            h.run()
            status = milp_status(h.getModelStatus())
            if status is not MilpStatus.OPTIMAL:
                return MilpSolution(status, None, math.inf, -math.inf)
            row_dual = np.array(h.getSolution().row_dual)
            reduced = self.cost - row_dual[:j_count][self.job_of] - shared_t @ row_dual[j_count:]
            reduced[in_lp] = np.inf
            best = np.minimum.reduceat(reduced, self.starts[:-1])
            entering = np.flatnonzero((reduced < -PRICING_TOLERANCE * scale) & (reduced <= best[self.job_of]))
            if not len(entering):
                break
            add(entering)
        values = np.array(h.getSolution().col_value)
        if values[:r_count].max(initial=0.0) > 1e-9:  # artificials in use: no answer for the full LP
            return MilpSolution(MilpStatus.ERROR, None, math.inf, -math.inf, row_dual if keep_duals else None)
        x = np.zeros(n)
        x[np.concatenate(order)] = values[r_count:]
        stats["lp_columns"] = int(in_lp.sum())
        return MilpSolution(MilpStatus.OPTIMAL, x, float(self.cost @ x), -math.inf, row_dual)

    def initial_columns(self) -> np.ndarray:
        """Each job's cheapest column and, per shared row, its cheapest column using the least of it.

        Starting the column generation from the least-use columns too keeps the first
        restricted LPs off the artificial slacks (whose huge duals would make every job
        swap columns round after round).
        """

        def cheapest_where(mask: np.ndarray) -> np.ndarray:
            cost = np.where(mask, self.cost, np.inf)
            best = np.minimum.reduceat(cost, self.starts[:-1])
            hit = np.flatnonzero(mask & (cost <= best[self.job_of]))
            return hit[np.concatenate([[True], self.job_of[hit][1:] != self.job_of[hit][:-1]])]

        picks = [cheapest_where(np.ones(len(self.cost), dtype=bool))]
        shared = self.matrix[self.jobs :, :].tocsr()
        for r in range(len(self.row_names)):
            use = shared.getrow(r).toarray().ravel()
            least = np.minimum.reduceat(use, self.starts[:-1])
            picks.append(cheapest_where(use <= least[self.job_of]))
        return np.unique(np.concatenate(picks))

    def sparse_rows(self, subset: np.ndarray | None = None) -> SparseRows:
        """The rows of the column model over ``subset`` (default: all) for the verified bounds.

        Convexity rows ``sum_k x_jk = 1``, then the shared rows ``A_r x <= b_r``; column
        indices are positions within ``subset``.
        """
        a = (self.matrix if subset is None else self.matrix[:, subset]).tocoo()
        r_count = len(self.row_names)
        return SparseRows(
            a.row.astype(np.int64),
            a.col.astype(np.int64),
            a.data.astype(float),
            np.concatenate([np.ones(self.jobs), np.full(r_count, -np.inf)]),
            np.concatenate([np.ones(self.jobs), self.limits]),
        )

    def lagrangian(self, row_dual: np.ndarray) -> tuple[float, np.ndarray]:
        """(L, delta): a *verified* Lagrangian bound and lower bounds on the reduced costs.

        For pi <= 0 (the shared-row duals, clipped; any such pi is valid, see step 2 of
        :mod:`dnnprov.solvers.joint.provision`) the exact values are c~_jk = c_jk - sum_r pi_r a_rjk,
        L* = sum_j min_k c~_jk + pi . b and delta*_jk = c~_jk - min_k' c~_jk'. In floats:

        * ``L`` is :func:`~dnnprov.solvers.highs_driver.safe_dual_bound` with multipliers
          y_j = m_j (the float minimum of job j's computed c~) on the convexity rows and pi
          on the shared rows, over the box 0 <= x <= 1. Its real-arithmetic value is
          sum_j (m_j + sum_k min(0, c~_jk - m_j)) + pi . b <= sum_j min_k c~_jk + pi . b = L*
          (for each j: m_j + min(0, min_k c~_jk - m_j) <= min_k c~_jk), and the function
          rounds that value down rigorously, so L <= L*.
        * each computed c~_jk (r_jk, a sum of k_jk + 1 products) is within
          e_jk = 2 (k_jk + 2) u (|c_jk| + sum_r |pi_r a_rjk|) + TINY of the exact one
          (Higham, Thm 3.1, as in ``safe_dual_bound``). With a = argmin_k (r_jk + e_jk),
          min_k' c~_jk' <= c~_ja <= r_ja + e_ja, so
          delta*_jk >= (r_jk - r_ja) - (e_jk + e_ja). The float difference s = fl(r_jk - r_ja)
          is within 2u|s| of the real one; the margin (e_jk + e_ja)(1 + 4u) + 4u|s| + TINY
          covers both, and the last subtraction is rounded down by one ulp (a rounding to
          nearest errs by at most half an ulp). So ``delta <= delta*`` for every column,
          and a column is dropped by fixing only when even its exact reduced cost is too
          large: no optimal column is ever lost to rounding.
        """
        pi = np.minimum(np.asarray(row_dual[self.jobs :], dtype=float), 0.0)
        pi[~np.isfinite(pi)] = 0.0
        shared = self.matrix[self.jobs :, :].tocsc()
        reduced = self.cost - shared.T @ pi
        magnitude = np.abs(self.cost) + abs(shared).T @ np.abs(pi)
        terms = np.diff(shared.indptr) + 1
        error = 2.0 * (terms + 2) * UNIT_ROUNDOFF * magnitude + TINY
        high = reduced + error
        order = np.lexsort((high, self.job_of))  # by job, then by r + e
        first = order[self.starts[:-1]]  # a = argmin_k (r_jk + e_jk)
        anchor = first[self.job_of]
        s = reduced - reduced[anchor]
        margin = (error + error[anchor]) * (1 + 4 * UNIT_ROUNDOFF) + 4 * UNIT_ROUNDOFF * np.abs(s) + TINY
        delta = np.nextafter(s - margin, -np.inf)
        mins = np.minimum.reduceat(reduced, self.starts[:-1])
        y = np.concatenate([mins, pi])
        n = len(self.cost)
        bound = safe_dual_bound(self.cost, 0.0, np.zeros(n), np.ones(n), self.sparse_rows(), y)
        return bound, delta

    def verified_solve(
        self,
        subset: np.ndarray | None = None,
        *,
        integer: bool = True,
        time_limit_s: float = math.inf,
        proof_target: float | None = None,
    ) -> MilpSolution:
        """The MILP (or LP) over ``subset`` by the HiGHS driver: its ``dual_bound`` is verified.

        ``x`` comes back full length (zeros outside ``subset``). An ``INFEASIBLE`` status is
        a proof (a Farkas certificate for the LP, a verified branch and bound for the MILP);
        ``dual_bound`` is a rigorous lower bound on the cost of every point of the model over
        ``subset`` (0 <= x <= 1, which every plan choice meets), re-derived up to
        ``proof_target`` when given (a point below it comes back unproven, bound ``-inf``).
        """
        idx = np.arange(len(self.cost)) if subset is None else np.asarray(subset, dtype=np.int64)
        a = self.matrix[:, idx].tocsr()
        low = np.concatenate([np.ones(self.jobs), np.full(len(self.row_names), -highspy.kHighsInf)])
        high = np.concatenate([np.ones(self.jobs), self.limits])
        rows = [
            (
                a.indices[a.indptr[i] : a.indptr[i + 1]].astype(np.int64),
                a.data[a.indptr[i] : a.indptr[i + 1]],
                float(low[i]),
                float(high[i]),
            )
            for i in range(a.shape[0])
        ]
        h = new_highs()
        limit = time_limit_s if math.isfinite(time_limit_s) else highspy.kHighsInf
        solved = solve_milp(
            h,
            self.cost[idx],
            np.zeros(len(idx)),
            np.ones(len(idx)),
            rows,
            integer=np.full(len(idx), integer),
            time_limit_s=max(limit, 0.01),
            proof_target=proof_target,
        )
        if solved.x is None:
            return solved
        x = np.zeros(len(self.cost))
        x[idx] = solved.x
        return MilpSolution(solved.status, x, solved.objective, solved.dual_bound)

    def choice(self, x: np.ndarray) -> np.ndarray:
        """The chosen column of every job from a MILP solution (checked: exactly one each)."""
        picked = np.flatnonzero(x > 0.5)
        if len(picked) != self.jobs or not np.array_equal(self.job_of[picked], np.arange(self.jobs)):
            raise AssertionError("the MILP solution does not pick exactly one column per job")
        return picked

    def usage(self, picked: np.ndarray) -> np.ndarray:
        """Total use of every shared row by the chosen columns."""
        return np.asarray(self.matrix[self.jobs :, picked].sum(axis=1)).ravel()
