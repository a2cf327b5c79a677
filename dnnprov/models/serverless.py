"""The serverless performance and cost model, vectorized over (n, m, s) (spec/serverless.md).

Time is eq. (1) plus the timeout rule of section 5: a function may run for
``timeout_s``; the state is checkpointed ``checkpoint_margin_s`` before expiry and a fresh
set of functions restores it, each restart costing ``checkpoint_overhead_s``.

Cost is eq. (10) with Lambda's real tariff: memory-time ``n * m/1024 GB * T * price_per_gb_s``,
plus one request per function per launch, plus the PS VMs for the training time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dnnprov.models.side import OwnVariables
from dnnprov.models.spot import within_budget
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.validation.domain import EDGE_SHARE, TOLERANCE


@dataclass(frozen=True)
class ServerlessEvaluation:
    """Model outputs for N plans (arrays of length N).

    ``inside_domain`` says which plans lie in the workload's validity domain (all true
    without one); ``feasible`` includes it.
    """

    functions: np.ndarray
    memory_mb: np.ndarray
    ps: np.ndarray
    local_batch: np.ndarray
    iterations: np.ndarray
    time_s: np.ndarray
    launches: np.ndarray
    cost: np.ndarray
    feasible: np.ndarray
    inside_domain: np.ndarray


@dataclass(frozen=True)
class ServerlessSideRows:
    """Extra linear constraints ``low <= a_n n + a_m m + a_s s <= high`` on plans.

    They come from constraints users add to the Pyomo model
    (:func:`dnnprov.formulations.serverless.side_rows`); every method enforces them.
    """

    a_n: np.ndarray
    a_m: np.ndarray
    a_s: np.ndarray
    low: np.ndarray
    high: np.ndarray
    names: tuple[str, ...] = ()
    own: OwnVariables | None = None  # the user's own variables y (dnnprov.models.side)

    def __len__(self) -> int:
        return len(self.low)

    def without(self, i: int) -> ServerlessSideRows | None:
        """The rows less row ``i`` (``None`` when none is left)."""
        keep = np.arange(len(self)) != i
        if not keep.any():
            return None
        return ServerlessSideRows(
            self.a_n[keep],
            self.a_m[keep],
            self.a_s[keep],
            self.low[keep],
            self.high[keep],
            tuple(n for j, n in enumerate(self.names) if j != i) if self.names else (),
            None if self.own is None else self.own.keep(keep),
        )

    def row_ok(self, n: np.ndarray, m: np.ndarray, s: np.ndarray, tol: float = 1e-9) -> np.ndarray:
        """Which plans meet which row, shape (plans, rows); rows using own variables share one answer."""
        n, m, s = np.broadcast_arrays(np.atleast_1d(n), np.atleast_1d(m), np.atleast_1d(s))
        lhs = np.outer(n, self.a_n) + np.outer(m, self.a_m) + np.outer(s, self.a_s)
        ok = (lhs >= self.low - tol) & (lhs <= self.high + tol)
        if self.own is not None and self.own.rows.any():
            live = np.flatnonzero(ok[:, ~self.own.rows].all(axis=1))
            answer = np.zeros(len(lhs), dtype=bool)
            answer[live] = self.own.feasible(lhs[live], self.low, self.high, tol)
            ok[:, self.own.rows] = answer[:, None]
        return ok

    def satisfied(self, n: np.ndarray, m: np.ndarray, s: np.ndarray, tol: float = 1e-9) -> np.ndarray:
        """Which plans satisfy every row (with an absolute tolerance)."""
        if self.own is not None and self.own.rows.any():
            return np.asarray(self.row_ok(n, m, s, tol).all(axis=1)).reshape(np.shape(n))
        ok = np.ones(np.shape(n), dtype=bool)
        for i in range(len(self.low)):
            lhs = self.a_n[i] * n + self.a_m[i] * m + self.a_s[i] * s
            ok &= (lhs >= self.low[i] - tol) & (lhs <= self.high[i] + tol)
        return ok


class ServerlessModel:
    """Evaluates (functions, memory, PS count) plans of one :class:`ServerlessProblem`.

    ``side`` adds user constraints (from the Pyomo model) to the feasibility check.
    """

    def __init__(self, problem: ServerlessProblem, side: ServerlessSideRows | None = None) -> None:
        self.problem = problem
        self.side = side

    def local_batch(self, functions: np.ndarray) -> np.ndarray:
        """b_l by eq. (9): the CPU-efficient batch unless the global batch would exceed b_g^max."""
        w = self.problem.workload
        n = np.asarray(functions, dtype=float)
        return np.where(w.local_batch * n <= w.max_global_batch, float(w.local_batch), w.max_global_batch / n)

    def training_time(
        self, functions: np.ndarray, memory_mb: np.ndarray, ps: np.ndarray, local_batch: float | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Eq. (1) without restarts: returns (T, iterations k, t_load, seconds per iteration).

        ``local_batch`` replaces eq. (9)'s b_l (a plan that does not follow it, such as the
        papers' naive and Siren plans); ``None``: eq. (9).
        """
        w, p = self.problem.workload, self.problem.platform
        n = np.asarray(functions, dtype=float)
        m = np.asarray(memory_mb, dtype=float)
        rate = w.rate_alpha * m + w.rate_beta  # eq. (6)
        storage_bw = np.minimum(w.storage_alpha * m + w.storage_beta, p.storage_bandwidth_mb_s)  # eq. (8)
        ps_bw = np.minimum(p.function_bandwidth_mb_s, ps * p.ps_bandwidth_mb_s / n)  # eq. (7)
        b_l = self.local_batch(n) if local_batch is None else np.full(n.shape, float(local_batch))  # eq. (9)
        k = w.samples * w.epochs / (b_l * n)  # eq. (2)
        with np.errstate(divide="ignore", invalid="ignore"):
            t_load = w.dataset_mb / (n * storage_bw)  # eq. (3)
            per_iteration = b_l / rate + 2 * w.model_mb / ps_bw  # eqs. (4)-(5)
            valid = (rate > 0) & (storage_bw > 0)
            time = np.where(valid, t_load + k * per_iteration, np.inf)  # eq. (1)
        return time, k, t_load, np.where(valid, per_iteration, np.inf)

    def evaluate(
        self,
        functions: npt.ArrayLike,
        memory_mb: npt.ArrayLike,
        ps: npt.ArrayLike = 1,
        local_batch: float | None = None,
    ) -> ServerlessEvaluation:
        """Evaluate arrays of plans (broadcast together); ``local_batch`` overrides eq. (9)."""
        prob, p = self.problem, self.problem.platform
        n, m, s = np.broadcast_arrays(
            np.asarray(functions, dtype=np.int64), np.asarray(memory_mb, dtype=np.int64), np.asarray(ps, dtype=np.int64)
        )
        train, k, t_load, per_iteration = self.training_time(n, m, s, local_batch)
        b_l = self.local_batch(n) if local_batch is None else np.full(n.shape, float(local_batch))
        usable = p.timeout_s - p.checkpoint_margin_s
        with np.errstate(invalid="ignore"):
            segments = np.maximum(np.ceil(train / usable), 1.0)
            time = train + (segments - 1) * p.checkpoint_overhead_s
            cost = (
                n * m / 1024.0 * time * p.price_per_gb_s
                + n * segments * p.price_per_request
                + s * p.ps_price_per_h * time / 3600.0
            )
        c = prob.constraints
        low, high = prob.function_range()
        grid_ok = (m % p.memory_step_mb == 0) & (m >= prob.workload.min_memory_mb) & (m <= p.max_memory_mb) & (m > 0)
        # A function must finish loading and at least one iteration before its first checkpoint.
        fits = np.isfinite(train) & (t_load + per_iteration <= usable)
        # eq. (9) can give b_g^max / n < 1 sample per function: no such plan is trainable
        whole = b_l >= 1
        feasible = (
            grid_ok
            & fits
            & whole
            & (n >= low)
            & (n <= high)
            & (s >= c.ps_count[0])
            & (s <= c.ps_count[1])
            & (time <= prob.time_s * (1 + 1e-12))
        )
        if c.budget_usd is not None:
            feasible &= within_budget(cost, c.budget_usd)
        inside = self.inside_domain(n, m)
        if self.side is not None:  # asked about the otherwise feasible plans only (own variables)
            live = feasible & inside
            flat = np.flatnonzero(live)
            answer = np.zeros(live.size, dtype=bool)
            answer[flat] = self.side.satisfied(n.ravel()[flat], m.ravel()[flat], s.ravel()[flat])
            feasible = feasible & answer.reshape(live.shape)
        return ServerlessEvaluation(
            functions=n,
            memory_mb=m,
            ps=s,
            local_batch=b_l,
            iterations=k,
            time_s=time,
            launches=segments,
            cost=np.where(np.isfinite(time), cost, np.nan),
            feasible=feasible & inside,
            inside_domain=inside,
        )

    def domain_bounds(self) -> tuple[tuple[float, float], tuple[int, int | None]]:
        """The memory interval (MB) and function-count interval plans may use, after extrapolation.

        Without a domain: ``((0.0, inf), (1, None))``.
        """
        domain = self.problem.workload.domain
        if domain is None:
            return (0.0, math.inf), (1, None)
        return domain.memory_bounds(), domain.function_bounds()

    def domain_note(self, functions: int, memory_mb: float) -> str | None:
        """What a result should say about a plan and the domain; ``None``: well inside.

        Same wording as :meth:`dnnprov.SpotModel.domain_note`: *outside*, *extrapolated*
        (inside only thanks to the extrapolation factor) or *at the edge* (memory within
        1 % of an end, or the function count at an end of its interval).
        """
        domain = self.problem.workload.domain
        if domain is None:
            return None
        (m_low, m_high), (n_low, n_high) = self.domain_bounds()
        where = f"{memory_mb:g} MB, {functions} functions"
        fitted = f"the profile covers {domain.memory_mb[0]:g}-{domain.memory_mb[1]:g} MB"
        if domain.functions is not None:
            fitted += f" and {domain.functions[0]}-{domain.functions[1]} functions"
        if domain.extrapolation != 1:
            fitted += f" (x{domain.extrapolation:g} extrapolation allowed: {m_low:.6g}-{m_high:.6g} MB)"
        if not bool(self.inside_domain(np.array([functions]), np.array([memory_mb]))[0]):
            return f"outside the validity domain: {where}; {fitted}"
        notes = []
        fits_n = domain.functions is None or domain.functions[0] <= functions <= domain.functions[1]
        if not (domain.memory_mb[0] * (1 - TOLERANCE) <= memory_mb <= domain.memory_mb[1] * (1 + TOLERANCE) and fits_n):
            notes.append("extrapolated beyond the fitted ranges")
        if (
            memory_mb <= m_low * (1 + EDGE_SHARE)
            or memory_mb >= m_high * (1 - EDGE_SHARE)
            or (n_high is not None and functions in (n_low, n_high))
        ):
            notes.append("at the validity domain's edge")
        return f"{' and '.join(notes)}: {where}; {fitted}" if notes else None

    def inside_domain(self, functions: np.ndarray, memory_mb: np.ndarray) -> np.ndarray:
        """Which (n, m) plans lie inside the workload's validity domain."""
        (m_low, m_high), (n_low, n_high) = self.domain_bounds()
        m = np.asarray(memory_mb, dtype=float)
        n = np.asarray(functions)
        ok = (m >= m_low * (1 - TOLERANCE)) & (m <= m_high * (1 + TOLERANCE)) & (n >= n_low)
        return ok & (n <= n_high) if n_high is not None else ok
