"""The spot performance and cost model, vectorized over many plans (spec/spot.md).

A plan is a count vector ``n`` over :class:`~dnnprov.spot.SpotColumns` plus a PS count
``s``. :class:`SpotModel` evaluates arrays of plans at once; every solver (heuristics,
exhaustive search, the exact decomposition) is built on it, so they all agree on what a
plan costs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dnnprov.spot import SpotColumns, SpotProblem


@dataclass(frozen=True)
class SideRows:
    """Extra linear constraints ``low <= counts @ a_n.T + ps * a_s <= high`` on plans.

    These come from constraints users add to the Pyomo model
    (:func:`dnnprov.formulations.spot.side_rows`); every method enforces them.
    """

    a_n: np.ndarray
    a_s: np.ndarray
    low: np.ndarray
    high: np.ndarray
    names: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.low)

    def satisfied(self, counts: np.ndarray, ps: np.ndarray, tol: float = 1e-9) -> np.ndarray:
        """Which plans satisfy every row (with an absolute tolerance)."""
        if not len(self):
            return np.ones(len(counts), dtype=bool)
        lhs = counts @ self.a_n.T + np.asarray(ps, dtype=float)[:, None] * self.a_s
        return ((lhs >= self.low - tol) & (lhs <= self.high + tol)).all(axis=1)


@dataclass(frozen=True)
class SpotEvaluation:
    """Model outputs for N plans (arrays of length N).

    ``feasible`` checks every constraint: SLOs (12)-(13), quotas (14), kept instances,
    vCPU-family quotas, worker and PS ranges and the budget.
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
            (np.array([cols.vcpus[i] if (cols.families[i], cols.markets[i]) == (q.family, q.market)
                       else 0 for i in range(len(cols))], dtype=np.int64), q.vcpus)
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
        return np.where(contended, p * total_ps / k + (1 - p) * w.bandwidth_req_mb_s,
                        w.bandwidth_req_mb_s)

    def iteration_times(self, workers: np.ndarray, ps: np.ndarray) -> np.ndarray:
        """T^i per column for each cluster size, shape ``(len(workers), columns)``, eqs. (6)-(7)."""
        w, pf = self.problem.workload, self.problem.platform
        bw = self.worker_bandwidth(workers, ps)[..., None]
        comm = 2 * w.param_size_mb / bw
        if not self.reference:  # the authors' code drops the PCIe term
            comm = comm + 2 * self.columns.gpus * w.param_size_mb / pf.pcie_bandwidth_mb_s
        return self.columns.compute_time + comm

    def iterations_needed(self, batch_wa: np.ndarray, cc: np.ndarray,
                          workers: np.ndarray) -> np.ndarray:
        """Normalized iterations j solving f_loss = L_obj, eq. (3) (or the no-CC variant)."""
        w = self.problem.workload
        numerator = w.gamma_2 * batch_wa + w.gamma_3
        spread = workers if w.loss_variant == "no-cc" else (cc + w.gamma_4) * workers
        j = numerator * np.sqrt(spread) / self.loss_gap - w.gamma_1
        # A non-positive numerator means the SLO loss is unreachable (eq. 3 has no root).
        return np.where(numerator > 0, j, np.nan)

    # ----------------------------------------------------------------- evaluation
    def evaluate(self, counts: np.ndarray, ps: np.ndarray | int = 1) -> SpotEvaluation:
        """Evaluate plans ``counts`` (shape ``(N, columns)``) with ``ps`` PS nodes each."""
        counts = np.atleast_2d(np.asarray(counts, dtype=np.int64))
        n_plans = counts.shape[0]
        ps = np.broadcast_to(np.asarray(ps, dtype=np.int64), (n_plans,))
        cols = self.columns
        workers = counts.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            times = self.iteration_times(workers, ps)                   # (N, C)
            rates = counts / times                                      # n_m / T_m
            x = rates.sum(axis=1)                                       # 1 / T_exp, eq. (2)
            v = (rates * cols.batch).sum(axis=1)                        # v, eq. (4)
            if self.reference:
                batch_wa = np.round(v / x, 1)
                cc = np.zeros(n_plans)
                j = np.round(self.iterations_needed(batch_wa, cc, workers))
                core_time = np.round(batch_wa * j / v, 2)
                time = core_time + self.problem.slo.takeover_overhead_s
                price = counts @ cols.price + ps * self.problem.platform.ps_price_per_h
                cost = np.round(price * time / 3600, 6)
                time_ok = (core_time > 0) & (time <= self.problem.slo.time_s)
            else:
                batch_wa = v / x
                speeds = cols.batch / times                              # v^i per column
                v_top = np.where(counts > 0, speeds, 0.0).max(axis=1)
                q = (counts * speeds**2).sum(axis=1)
                cc = np.sqrt(np.maximum(1 - 2 * v_top / v + q / v**2, 0.0))   # eq. (5)
                j = self.iterations_needed(batch_wa, cc, workers)
                time = j / x + self.problem.slo.takeover_overhead_s           # eq. (1)
                price = counts @ cols.price + ps * self.problem.platform.ps_price_per_h
                cost = price * time / 3600                                    # eq. (11)
                time_ok = (j > 0) & (time <= self.problem.slo.time_s * (1 + 1e-12))
        feasible = time_ok & self.admissible(counts, ps)
        budget = self.problem.constraints.budget_usd
        if budget is not None:
            feasible &= cost <= budget
        return SpotEvaluation(workers=workers, ps=ps, iteration_rate=x, speed=v,
                              batch_wa=batch_wa, cc=cc, iterations=j, time_s=time,
                              cost=np.where(workers > 0, cost, np.nan), feasible=feasible)

    def admissible(self, counts: np.ndarray, ps: np.ndarray) -> np.ndarray:
        """Which plans satisfy the linear side constraints (quotas, E, vCPU, ranges)."""
        cols, cons = self.columns, self.problem.constraints
        ok = ((counts >= cols.lower) & (counts <= cols.upper)).all(axis=1)
        workers = counts.sum(axis=1)
        low, high = cons.workers
        ok &= workers >= max(low, 1)
        if high is not None:
            ok &= workers <= high
        ok &= (ps >= cons.ps_count[0]) & (ps <= cons.ps_count[1])
        for per_column, limit in self.vcpu_rows:
            ok &= counts @ per_column <= limit
        if self.side is not None:
            ok &= self.side.satisfied(counts, ps)
        return ok
