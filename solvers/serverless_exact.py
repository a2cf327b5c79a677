"""Exact serverless provisioning: bound-ordered evaluation and a column MILP in HiGHS.

Why it is exact. For fixed memory m and PS count s, ``n * T_train(n)`` is nondecreasing in
the function count n: ``n t_load = d_t / B_f^s`` and ``n k t_comp = n_t e / R`` do not depend
on n, and ``n k t_comm`` grows with n because B_f^p = min(B_f^max, s B_p / n) only falls
(eqs. 1-9, in both local-batch regimes of eq. 9). The memory-time cost is
``n m/1024 T p`` with ``T >= T_train``, and requests cost at least ``n p_req``, so

    cost(n, m, s) >= LB(m, s) = m/1024 p n_lo T_train(n_lo, m, s) + n_lo p_req

for every n >= n_lo. (m, s) pairs are evaluated exactly over their whole n range, in order
of LB, until the next LB reaches the best cost U: nothing unevaluated can be cheaper.

The evaluated feasible plans become columns of a choice MILP (one binary per plan, the
Pareto front in (functions, cost)); HiGHS returns the optimum and its dual bound. The same
column model, with rows shared by many jobs, is the joint provisioning model.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from dnnprov.progress import Clock, SolverLog
from dnnprov.result import Result, Status
from dnnprov.serverless import ServerlessProblem
from dnnprov.serverless_model import ServerlessModel, ServerlessSideRows
from dnnprov.solvers.highs_driver import MilpStatus, new_highs, solve_milp
from dnnprov.solvers.outcome import serverless_result

PAIRS_PER_BATCH = 8


@dataclass(frozen=True)
class ServerlessColumns:
    """Feasible plans of one job, as arrays: functions, memory, PS count, cost."""

    functions: np.ndarray
    memory_mb: np.ndarray
    ps: np.ndarray
    cost: np.ndarray

    def __len__(self) -> int:
        return len(self.cost)

    def pareto(self) -> "ServerlessColumns":
        """Keep plans no other plan beats in both cost and function count (ties: first)."""
        order = np.lexsort((self.cost, self.functions))
        cost = self.cost[order]
        cheapest_before = np.concatenate([[math.inf], np.minimum.accumulate(cost)[:-1]])
        idx = order[cost < cheapest_before]
        return ServerlessColumns(self.functions[idx], self.memory_mb[idx], self.ps[idx], self.cost[idx])


def pair_bounds(model: ServerlessModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(memory, PS count, LB) for every (m, s) pair, see the module doc."""
    problem = model.problem
    p = problem.platform
    n_lo, _ = problem.function_range()
    memory = np.array(problem.memory_grid(), dtype=np.int64)
    ps = np.arange(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1)
    mm, ss = (a.ravel() for a in np.meshgrid(memory, ps, indexing="ij"))
    train, _, _, _ = model.training_time(np.full(mm.shape, n_lo), mm, ss)
    bound = mm / 1024.0 * p.price_per_gb_s * n_lo * train + n_lo * p.price_per_request
    return mm, ss, np.where(np.isfinite(bound), bound, np.inf)


def feasible_columns(model: ServerlessModel, *, upper: float = math.inf,
                     deadline: float = math.inf) -> tuple[ServerlessColumns, float]:
    """Every feasible plan that may cost less than ``upper`` (all of them with ``inf``).

    With a finite ``upper`` the pairs are visited in bound order and the search stops as
    soon as the bound reaches the best cost found. Returns the columns and the smallest
    bound LB(m, s) of the pairs not evaluated (``inf`` when the search finished before
    ``deadline``, a ``time.perf_counter()`` value): every plan not among the columns
    costs at least the best column or that bound.
    """
    problem = model.problem
    low, high = problem.function_range()
    n = np.arange(low, high + 1)
    mm, ss, bound = pair_bounds(model)
    order = np.argsort(bound, kind="stable")
    parts: list[tuple[np.ndarray, ...]] = []
    best = upper
    for start in range(0, len(order), PAIRS_PER_BATCH):
        batch = order[start:start + PAIRS_PER_BATCH]
        if time.perf_counter() > deadline:
            return _concat(parts), float(bound[batch[0]])
        batch = batch[bound[batch] < best]
        if not batch.size:
            break
        nn = np.tile(n, len(batch))
        m = np.repeat(mm[batch], len(n))
        s = np.repeat(ss[batch], len(n))
        ev = model.evaluate(nn, m, s)
        ok = ev.feasible & (ev.cost < best if math.isfinite(upper) else True)
        if ok.any():
            parts.append((nn[ok], m[ok], s[ok], ev.cost[ok]))
            if math.isfinite(upper):
                best = min(best, float(ev.cost[ok].min()))
    return _concat(parts), math.inf


def _concat(parts: list[tuple[np.ndarray, ...]]) -> ServerlessColumns:
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return ServerlessColumns(empty, empty, empty, np.zeros(0))
    return ServerlessColumns(*(np.concatenate([p[i] for p in parts]) for i in range(4)))


def choose_column(columns: ServerlessColumns) -> tuple[int, float]:
    """The column MILP for one job: one binary per plan, pick exactly one, minimize cost."""
    h = new_highs()
    k = len(columns)
    solution = solve_milp(h, columns.cost, np.zeros(k), np.ones(k),
                          [(np.arange(k), np.ones(k), 1.0, 1.0)])
    if solution.status is not MilpStatus.OPTIMAL:
        raise RuntimeError(f"column MILP ended {solution.status.value}")
    return int(np.argmax(solution.x)), float(solution.dual_bound)


def solve_serverless_exact(problem: ServerlessProblem, *, side: ServerlessSideRows | None = None,
                           time_limit_s: float = 60.0, gap: float = 0.0, clock: Clock | None = None,
                           log: SolverLog | None = None) -> Result:
    """Proven-optimal (functions, memory, PS count) plan.

    ``gap`` is accepted for a uniform interface; this method always proves optimality
    unless the clock runs out (then ``limit`` with the bound of the pairs not evaluated).
    """
    clock = clock or Clock(time_limit_s)
    log = log or SolverLog(clock)
    started = clock.started
    low, high = problem.function_range()
    log.header(f"dnnprov milp: {problem.name} (serverless)",
               [f"{len(problem.memory_grid())} memory sizes x functions {low}..{high} x PS "
                f"{problem.constraints.ps_count[0]}..{problem.constraints.ps_count[1]}, "
                f"time limit {clock.limit_s:g} s"])
    model = ServerlessModel(problem, side)
    budget = problem.constraints.budget_usd
    upper = budget * (1 + 1e-12) if budget is not None else math.inf
    if not math.isfinite(upper):
        upper = 1e300  # finite: enables bound-ordered pruning from the first plan found
    columns, unvisited = feasible_columns(model, upper=upper, deadline=clock.deadline)
    finished = not math.isfinite(unvisited)
    stats = {"feasible_plans_kept": len(columns)}
    if not len(columns):
        status = Status.INFEASIBLE if finished else Status.LIMIT
        result = serverless_result(model, None, status=status, method="milp", started=started,
                                   bound=math.inf if finished else max(0.0, unvisited),
                                   message="proven: no plan meets every constraint" if finished
                                   else f"time limit of {clock.limit_s:g} s reached before any feasible plan",
                                   stats=stats)
        log.final(result.status.value, result.message)
        return result
    front = columns.pareto()
    pick, dual = choose_column(front)
    stats["columns"] = len(front)
    plan = (front.functions[pick], front.memory_mb[pick], front.ps[pick])
    best = float(front.cost[pick])
    log.progress(best, best if finished else min(best, unvisited), f"{len(front)} columns", force=True)
    if not finished:
        result = serverless_result(model, plan, status=Status.LIMIT, method="milp", started=started,
                                   bound=max(0.0, min(best, unvisited)),
                                   message=f"time limit of {clock.limit_s:g} s: memory sizes with a bound "
                                           f"from ${unvisited:.6g} up were not evaluated", stats=stats)
    else:
        result = serverless_result(model, plan, status=Status.OPTIMAL, method="milp", started=started,
                                   bound=min(dual, best), stats=stats)
    log.final(result.status.value, result.message)
    return result
