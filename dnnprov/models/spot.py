"""The spot performance and cost model, vectorized over many plans (spec/spot.md).

A plan is a count vector ``n`` over :class:`~dnnprov.problems.spot.SpotColumns` plus a PS count
``s``. :class:`SpotModel` evaluates arrays of plans at once; every solver (heuristics,
exhaustive search, the exact decomposition) is built on it, so they all agree on what a
plan costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dnnprov.errors import InvalidInputError
from dnnprov.models.side import OwnVariables
from dnnprov.problems.spot import SpotColumns, SpotProblem
from dnnprov.problems.validation.domain import EDGE_SHARE, NUMERATOR_SHARE, TOLERANCE, widen

#: The relative tolerance of the deadline T_obj and of the budget: a time or cost within it
#: counts as meeting the limit (a cost computed to the last bit differently, say 95 ulps
#: above a budget set at a plan's exact cost, is not refused; docs/solvers.md).
RELATIVE_TOLERANCE = 1e-12


def within_budget(cost: np.ndarray, budget: float) -> np.ndarray:
    """Which costs meet ``budget`` (with :data:`RELATIVE_TOLERANCE`)."""
    return np.asarray(np.asarray(cost) <= budget * (1 + RELATIVE_TOLERANCE))


def row_dot(counts: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``counts @ vector`` row by row, summed in the same order whatever the number of rows.

    A BLAS product sums in an order that depends on the batch (one plan alone and the same
    plan among others could differ in the last bit), and a cost on a budget's edge would
    then be feasible in one call and not in another; a per-row reduction is batch-independent.
    """
    return (np.asarray(counts, dtype=float) * vector).sum(axis=-1)


@dataclass(frozen=True)
class SideRows:
    """Extra linear constraints ``low <= a_n . n + a_s s + a_u . used + a_y . y <= high`` on plans.

    These come from constraints users add to the Pyomo model
    (:func:`dnnprov.formulations.spot.side_rows`); every method enforces them. ``a_u``
    (rows x columns, ``None``: all zero) weighs the indicators ``used[c]`` (1 exactly when
    ``n_c >= 1``); ``own`` holds the user's own variables y (:mod:`dnnprov.models.side`),
    which a plan meets when some y does.
    """

    a_n: np.ndarray
    a_s: np.ndarray
    low: np.ndarray
    high: np.ndarray
    names: tuple[str, ...] = ()
    a_u: np.ndarray | None = None
    own: OwnVariables | None = None

    def __len__(self) -> int:
        return len(self.low)

    def count_only(self) -> np.ndarray:
        """Which rows are linear in the counts and s alone (no ``used``, no own variable)."""
        plain = np.ones(len(self), dtype=bool)
        if self.a_u is not None:
            plain &= ~(self.a_u != 0).any(axis=1)
        if self.own is not None:
            plain &= ~self.own.rows
        return plain

    def without(self, i: int) -> SideRows | None:
        """The rows less row ``i`` (``None`` when none is left)."""
        keep = np.arange(len(self)) != i
        if not keep.any():
            return None
        return SideRows(
            self.a_n[keep],
            self.a_s[keep],
            self.low[keep],
            self.high[keep],
            tuple(n for j, n in enumerate(self.names) if j != i) if self.names else (),
            None if self.a_u is None else self.a_u[keep],
            None if self.own is None else self.own.keep(keep),
        )

    def fixed_part(self, counts: np.ndarray, ps: np.ndarray | int) -> np.ndarray:
        """Each plan's row values without the own variables, shape (plans, rows)."""
        counts = np.asarray(counts, dtype=float)
        lhs = (counts[:, None, :] * self.a_n).sum(axis=-1) + np.broadcast_to(
            np.asarray(ps, dtype=float), (len(counts),)
        )[:, None] * self.a_s  # batch-independent
        if self.a_u is not None:
            lhs = lhs + ((counts > 0).astype(float)[:, None, :] * self.a_u).sum(axis=-1)
        return lhs

    def row_ok(self, counts: np.ndarray, ps: np.ndarray | int, tol: float = 1e-9) -> np.ndarray:
        """Which plans meet which row, shape (plans, rows); the rows that use own variables
        share one answer (whether some y meets them all)."""
        lhs = self.fixed_part(counts, ps)
        ok = (lhs >= self.low - tol) & (lhs <= self.high + tol)
        if self.own is not None and len(self.own) and self.own.rows.any():
            ok[:, self.own.rows] = self.own.feasible(lhs, self.low, self.high, tol)[:, None]
        return ok

    def satisfied(self, counts: np.ndarray, ps: np.ndarray | int, tol: float = 1e-9) -> np.ndarray:
        """Which plans satisfy every row (with an absolute tolerance)."""
        if not len(self):
            return np.ones(len(counts), dtype=bool)
        if self.own is None or not self.own.rows.any():
            return np.asarray(self.row_ok(counts, ps, tol).all(axis=1))
        lhs = self.fixed_part(counts, ps)
        plain = ~self.own.rows
        ok = ((lhs[:, plain] >= self.low[plain] - tol) & (lhs[:, plain] <= self.high[plain] + tol)).all(axis=1)
        live = np.flatnonzero(ok)  # the own variables are asked about the rest only
        ok[live] = self.own.feasible(lhs[live], self.low, self.high, tol)
        return ok


@dataclass(frozen=True)
class SpotEvaluation:
    """Model outputs for N plans (arrays of length N).

    ``feasible`` checks every constraint: SLOs (12)-(13), quotas (14), kept instances,
    vCPU-family quotas, worker and PS ranges, the budget and the workload's validity
    domain; ``inside_domain`` is the domain check alone (all true without a domain): b_w,
    |N|, the iteration floor, and the loss/iteration axis when the domain enforces it.
    """

    workers: np.ndarray
    ps: np.ndarray
    iteration_rate: np.ndarray
    speed: np.ndarray
    batch_wa: np.ndarray
    cc: np.ndarray
    iterations: np.ndarray
    time_s: np.ndarray
    cost: np.ndarray
    feasible: np.ndarray
    inside_domain: np.ndarray


class SpotModel:
    """Evaluates plans of one :class:`SpotProblem` under its model variant.

    ``side`` adds user constraints (from the Pyomo model) to the feasibility check.
    """

    def __init__(self, problem: SpotProblem, side: SideRows | None = None) -> None:
        self.problem = problem
        self.side = side
        self.columns: SpotColumns = problem.columns()
        self.reference = problem.model == "reference"
        w = problem.workload
        self.loss_gap = problem.slo.loss - w.gamma_5
        cols = self.columns
        #: one row per vCPU-family quota: (vCPUs each column adds to it, the limit)
        self.vcpu_rows = [
            (
                np.array(
                    [
                        cols.vcpus[i] if (cols.families[i], cols.markets[i]) == (q.family, q.market) else 0
                        for i in range(len(cols))
                    ],
                    dtype=np.int64,
                ),
                q.vcpus,
            )
            for q in problem.constraints.vcpu_quotas
        ]

    # ----------------------------------------------------------------- eqs (6)-(9)
    def worker_bandwidth(self, workers: np.ndarray, ps: np.ndarray) -> np.ndarray:
        """B_wk for clusters of ``workers`` workers and ``ps`` PS nodes, eqs. (8)-(9)."""
        w, pf = self.problem.workload, self.problem.platform
        k = np.maximum(np.asarray(workers, dtype=float), 1.0)
        total_ps = np.asarray(ps, dtype=float) * pf.ps_bandwidth_mb_s
        p = w.alpha_1 * np.sqrt(k) + w.beta_1
        # The paper clamps P to [0, 1]; the authors' code only caps it at 1.
        p = np.minimum(p, 1.0) if self.reference else np.clip(p, 0.0, 1.0)
        contended = w.bandwidth_req_mb_s * k > total_ps
        return np.where(contended, p * total_ps / k + (1 - p) * w.bandwidth_req_mb_s, w.bandwidth_req_mb_s)

    def iteration_times(self, workers: np.ndarray, ps: np.ndarray) -> np.ndarray:
        """T^i per column for each cluster size, shape ``(len(workers), columns)``, eqs. (6)-(7)."""
        w, pf = self.problem.workload, self.problem.platform
        bw = self.worker_bandwidth(workers, ps)[..., None]
        comm = 2 * w.param_size_mb / bw
        if not self.reference:  # the authors' code drops the PCIe term
            comm = comm + 2 * self.columns.gpus * w.param_size_mb / pf.pcie_bandwidth_mb_s
        return self.columns.compute_time + comm

    def iterations_needed(self, batch_wa: np.ndarray, cc: np.ndarray, workers: np.ndarray) -> np.ndarray:
        """Normalized iterations j solving f_loss = L_obj, eq. (3) (or the no-CC variant)."""
        w = self.problem.workload
        numerator = w.gamma_2 * batch_wa + w.gamma_3
        spread = workers if w.loss_variant == "no-cc" else (cc + w.gamma_4) * workers
        j = numerator * np.sqrt(spread) / self.loss_gap - w.gamma_1
        # A non-positive numerator means the SLO loss is unreachable (eq. 3 has no root).
        return np.where(numerator > 0, j, np.nan)

    # ----------------------------------------------------------------- evaluation
    def evaluate(self, counts: npt.ArrayLike, ps: npt.ArrayLike = 1) -> SpotEvaluation:
        """Evaluate plans ``counts`` (shape ``(N, columns)``) with ``ps`` PS nodes each.

        A counts array of another width than the problem's columns (or more than two axes)
        is refused: its rows would be read against the wrong columns.
        """
        counts = np.atleast_2d(np.asarray(counts, dtype=np.int64))
        cols = self.columns
        if counts.ndim != 2 or counts.shape[1] != len(cols):
            raise InvalidInputError(
                "counts",
                f"an array of shape {counts.shape} is not plans of the problem's "
                f"{len(cols)} columns ({', '.join(cols.labels)}): give shape (N, {len(cols)})",
            )
        n_plans = counts.shape[0]
        try:
            ps = np.broadcast_to(np.asarray(ps, dtype=np.int64), (n_plans,))
        except ValueError:
            raise InvalidInputError(
                "ps", f"needs one PS count, or one per plan ({n_plans}); got shape {np.shape(ps)}"
            ) from None
        workers = counts.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            times = self.iteration_times(workers, ps)  # (N, C)
            rates = counts / times  # n_m / T_m
            x = rates.sum(axis=1)  # 1 / T_exp, eq. (2)
            v = (rates * cols.batch).sum(axis=1)  # v, eq. (4)
            if self.reference:
                batch_wa = np.round(v / x, 1)
                cc = np.zeros(n_plans)
                j = np.round(self.iterations_needed(batch_wa, cc, workers))
                core_time = np.round(batch_wa * j / v, 2)
                time = core_time + self.problem.slo.takeover_overhead_s
                price = row_dot(counts, cols.price) + ps * self.problem.platform.ps_price_per_h
                cost = np.round(price * time / 3600, 6)
                time_ok = (core_time > 0) & (time <= self.problem.slo.time_s)
            else:
                batch_wa = v / x
                speeds = cols.batch / times  # v^i per column
                v_top = np.where(counts > 0, speeds, 0.0).max(axis=1)
                q = (counts * speeds**2).sum(axis=1)
                cc = np.sqrt(np.maximum(1 - 2 * v_top / v + q / v**2, 0.0))  # eq. (5)
                j = self.iterations_needed(batch_wa, cc, workers)
                time = j / x + self.problem.slo.takeover_overhead_s  # eq. (1)
                price = row_dot(counts, cols.price) + ps * self.problem.platform.ps_price_per_h
                cost = price * time / 3600  # eq. (11)
                time_ok = (j > 0) & (time <= self.problem.slo.time_s * (1 + RELATIVE_TOLERANCE))
        inside = self.inside_domain(batch_wa, workers) & self.admits_iterations(j)
        feasible = time_ok & inside
        budget = self.problem.constraints.budget_usd
        if budget is not None:
            feasible &= within_budget(cost, budget)
        feasible &= self.admissible(counts, ps, among=feasible)
        return SpotEvaluation(
            workers=workers,
            ps=ps,
            iteration_rate=x,
            speed=v,
            batch_wa=batch_wa,
            cc=cc,
            iterations=j,
            time_s=time,
            cost=np.where(workers > 0, cost, np.nan),
            feasible=feasible,
            inside_domain=inside,
        )

    # ----------------------------------------------------------------- validity domain
    def domain_bounds(self) -> tuple[tuple[float, float], tuple[int, int | None]]:
        """The b_w interval and the |N| interval plans may use, after extrapolation.

        The b_w interval is capped where eq. (3)'s numerator keeps half its value at the
        fitted edge (:func:`dnnprov.problems.validation.domain.numerator_range`). Without a domain:
        ``((0.0, inf), (1, None))``. The worker interval is also part of
        :meth:`admissible`; the b_w interval is checked by :meth:`evaluate`.
        """
        domain = self.problem.workload.domain
        if domain is None:
            return (0.0, math.inf), (1, None)
        w = self.problem.workload
        return domain.batch_bounds(w.gamma_2, w.gamma_3), domain.worker_bounds()

    def inside_domain(self, batch_wa: np.ndarray, workers: np.ndarray) -> np.ndarray:
        """Which (b_w, |N|) pairs lie inside the domain (after extrapolation)."""
        (b_low, b_high), (k_low, k_high) = self.domain_bounds()
        b = np.asarray(batch_wa, dtype=float)
        k = np.asarray(workers)
        ok = (b >= b_low * (1 - TOLERANCE)) & (b <= b_high * (1 + TOLERANCE)) & (k >= k_low)
        return ok & (k <= k_high) if k_high is not None else ok

    def slo_refused(self) -> bool:
        """Whether the domain enforces its loss axis and the SLO loss lies below the logged
        losses: then no plan is admissible."""
        domain = self.problem.workload.domain
        return domain is not None and domain.loss_axis == "enforce" and domain.loss_below_logs(self.problem.slo.loss)

    def iteration_cap(self) -> float:
        """The most iterations j an admissible plan may need: the domain's iteration limit
        when it enforces its loss axis (with the domain's tolerance), else infinity."""
        domain = self.problem.workload.domain
        limit = domain.iteration_limit() if domain is not None and domain.loss_axis == "enforce" else None
        return math.inf if limit is None else limit * (1 + TOLERANCE)

    def iteration_floor(self) -> float:
        """The fewest iterations j a plan inside the domain may need (the domain's
        ``min_iterations``, less the domain's tolerance; 0 without a domain)."""
        domain = self.problem.workload.domain
        return 0.0 if domain is None else domain.min_iterations * (1 - TOLERANCE)

    def admits_iterations(self, iterations: np.ndarray) -> np.ndarray:
        """Which plans the domain admits by their iterations j: at least :meth:`iteration_floor`
        and, when the loss axis is enforced, at most :meth:`iteration_cap` and none when
        :meth:`slo_refused`. A NaN j (eq. 3 has no root) is left to the SLO check."""
        j = np.asarray(iterations, dtype=float)
        return np.full(j.shape, not self.slo_refused()) & ~(j > self.iteration_cap()) & ~(j < self.iteration_floor())

    def loss_axis_notes(self, iterations: float | None) -> list[str]:
        """What lies beyond the logs: an SLO loss below the logged losses, a plan needing
        more than the iteration limit (empty without logged ranges)."""
        domain = self.problem.workload.domain
        if domain is None:
            return []
        notes = []
        loss = self.problem.slo.loss
        if domain.loss is not None and domain.loss_below_logs(loss):
            notes.append(f"target loss {loss:g} below the logged losses ({domain.loss[0]:g}-{domain.loss[1]:g})")
        if iterations is not None and domain.iterations is not None and self._beyond_iteration_limit(iterations):
            most = domain.iterations[1]
            times = (
                f", {iterations / most:.3g}x the most logged ({most:g})" if most > 0 else f" (the logs reach {most:g})"
            )
            notes.append(
                f"{iterations:,.0f} iterations{times}"
                + (f"; the domain allows x{domain.iterations_factor:g}" if domain.iterations_factor != 1 else "")
            )
        return notes

    def extrapolated_axes(self, batch_wa: float, workers: int, iterations: float | None = None) -> list[str]:
        """The axes on which a plan lies beyond the data: ``batch_wa`` and ``workers`` beyond
        the fitted ranges, ``loss`` (the SLO below the logged losses), ``iterations`` (beyond
        the iteration limit)."""
        domain = self.problem.workload.domain
        if domain is None:
            return []
        axes = []
        if not domain.batch_wa[0] * (1 - TOLERANCE) <= batch_wa <= domain.batch_wa[1] * (1 + TOLERANCE):
            axes.append("batch_wa")
        if not domain.workers[0] <= workers <= domain.workers[1]:
            axes.append("workers")
        if domain.loss_below_logs(self.problem.slo.loss):
            axes.append("loss")
        if iterations is not None and domain.iterations is not None and self._beyond_iteration_limit(iterations):
            axes.append("iterations")
        return axes

    def _beyond_iteration_limit(self, iterations: float | None) -> bool:
        domain = self.problem.workload.domain
        limit = domain.iteration_limit() if domain is not None else None
        return limit is not None and iterations is not None and iterations > limit * (1 + TOLERANCE)

    def domain_note(
        self, batch_wa: float, workers: int, cc: float | None = None, iterations: float | None = None
    ) -> str | None:
        """What a result should say about a plan and the domain; ``None``: well inside.

        A plan is *at the edge* when |N| equals an end of the worker interval or b_w lies
        within 1 % of an end of the b_w interval (the capped one); *extrapolated* when it
        lies beyond the fitted ranges but inside the extrapolation the workload allows, or
        beyond the logged losses or steps (``iterations``, optional, is the plan's j);
        *outside* beyond that. ``cc`` (optional) is compared with the fitted R range.
        """
        domain = self.problem.workload.domain
        if domain is None:
            return None
        (b_low, b_high), (k_low, k_high) = self.domain_bounds()
        where = f"b_w {batch_wa:.6g}, |N| {workers}"
        fitted = (
            f"the fit covers b_w {domain.batch_wa[0]:g}-{domain.batch_wa[1]:g} and |N| "
            f"{domain.workers[0]}-{domain.workers[1]}"
        )
        if domain.extrapolates():
            factors = (
                f"x{domain.batch_factor:g}"
                if domain.batch_factor == domain.workers_factor
                else f"x{domain.batch_factor:g} b_w, x{domain.workers_factor:g} |N|"
            )
            fitted += f" ({factors} extrapolation allowed: b_w {b_low:.6g}-{b_high:.6g}, |N| {k_low}-{k_high})"
        if b_high < widen(*domain.batch_wa, domain.batch_factor)[1] * (1 - TOLERANCE):
            fitted += (
                f"; b_w capped at {b_high:.6g}, where eq. (3)'s numerator falls to "
                f"{NUMERATOR_SHARE:.0%} of its value at b_w {domain.batch_wa[1]:g}"
            )
        beyond_logs = self.loss_axis_notes(iterations)
        if not bool(self.inside_domain(np.array([batch_wa]), np.array([workers]))[0]):
            return f"outside the validity domain: {where}; {fitted}"
        if iterations is not None and iterations < self.iteration_floor():
            return (
                f"outside the validity domain: {iterations:.1f} iterations, below the domain's floor of "
                f"{domain.min_iterations:g} (eq. 3 at the very start of its curve); {where}; {fitted}"
            )
        if beyond_logs and domain.loss_axis == "enforce":
            return f"outside the validity domain (loss axis enforced): {'; '.join(beyond_logs)}; {where}; {fitted}"
        notes = []
        if not (
            domain.batch_wa[0] * (1 - TOLERANCE) <= batch_wa <= domain.batch_wa[1] * (1 + TOLERANCE)
            and domain.workers[0] <= workers <= domain.workers[1]
        ):
            notes.append("extrapolated beyond the fitted ranges")
        if beyond_logs:
            notes.append(f"extrapolated beyond the logs ({'; '.join(beyond_logs)})")
        if workers in (k_low, k_high) or batch_wa <= b_low * (1 + EDGE_SHARE) or batch_wa >= b_high * (1 - EDGE_SHARE):
            notes.append("at the validity domain's edge")
        if cc is not None and domain.cc is not None and not domain.cc[0] - 1e-9 <= cc <= domain.cc[1] + 1e-9:
            notes.append(f"R {cc:.3f} outside the fitted R range {domain.cc[0]:g}-{domain.cc[1]:g}")
        return f"{' and '.join(notes)}: {where}; {fitted}" if notes else None

    def admissible(self, counts: np.ndarray, ps: np.ndarray, among: np.ndarray | None = None) -> np.ndarray:
        """Which plans satisfy the linear side constraints (quotas, E, vCPU, ranges, user rows).

        The ranges include the domain's worker interval (:meth:`domain_bounds`). With
        ``among``, only those plans are checked (the others come back ``False``): the
        user's own variables are then asked about fewer plans.
        """
        cols, cons = self.columns, self.problem.constraints
        ok = ((counts >= cols.lower) & (counts <= cols.upper)).all(axis=1)
        workers = counts.sum(axis=1)
        low, high = cons.workers
        ok &= workers >= max(low, 1)
        if high is not None:
            ok &= workers <= high
        _, (k_low, k_high) = self.domain_bounds()
        ok &= workers >= k_low
        if k_high is not None:
            ok &= workers <= k_high
        ok &= (ps >= cons.ps_count[0]) & (ps <= cons.ps_count[1])
        for per_column, limit in self.vcpu_rows:
            ok &= counts @ per_column <= limit
        if among is not None:
            ok &= among
        if self.side is not None:
            live = np.flatnonzero(ok)
            ok[live] = self.side.satisfied(counts[live], np.broadcast_to(np.asarray(ps), (len(ok),))[live])
        return ok
