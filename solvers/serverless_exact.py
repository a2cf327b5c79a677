"""Exact serverless provisioning: bound-ordered evaluation and a column MILP in HiGHS.

Why it is exact. For fixed memory m and PS count s, ``n * T_train(n)`` is nondecreasing in
the function count n: ``n t_load = d_t / B_f^s`` and ``n k t_comp = n_t e / R`` do not depend
on n, and ``n k t_comm`` grows with n because B_f^p = min(B_f^max, s B_p / n) only falls
(eqs. 1-9, in both local-batch regimes of eq. 9). The memory-time cost is
``n m/1024 T p`` with ``T >= T_train``, and requests cost at least ``n p_req``, so

    cost(n, m, s) >= LB_n(m, s) = m/1024 p n T_train(n, m, s) + n p_req,

which is itself nondecreasing in n. Two consequences:

* a plan meeting the deadline T_o needs T_train(n) <= T_o; for n >= n_1,
  n T_o >= n T_train(n) >= n_1 T_train(n_1), so n >= n_1 T_train(n_1) / T_o. Iterating
  from the smallest allowed n gives the smallest n that can meet T_o (the *start* of the
  pair), and LB(m, s) = LB_start bounds every feasible plan of the pair;
* once LB_n reaches the best cost U, no larger n of the pair can beat U.

And T_train itself is convex in n: with b_l n = min(b_local n, b_g^max) (eq. 9) and
1 / B_f^p = max(1 / B_f^max, n / (s B_p)),

    T_train(n) = (d_t / B_f^s + n_t e / R) / n + 2 M n_t e max(1 / B_f^max, n / (s B_p)) / min(b_local n, b_g^max),

a sum of c / n and a maximum of the convex max(1 / (b_local n), 1 / b_g^max) / B_f^max and
max(1 / b_local, n / b_g^max) / (s B_p). A plan's time is at least T_train, so once
T_train has started to grow past T_o at some n, no larger n of the pair meets T_o.

Pairs are evaluated in order of LB, each from its start up to the n where LB_n reaches U,
until the next pair's LB reaches U: nothing unevaluated can be cheaper.

The evaluated feasible plans, reduced to the Pareto front in (functions, cost), are the
columns of the choice model: for one job the cheapest column; for many jobs sharing
quotas, the column MILP that HiGHS solves (joint provisioning, solvers/joint/provision.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from dnnprov.solvers.outcome import serverless_result
from dnnprov.solvers.side_vars import attach

from dnnprov.models.serverless import ServerlessModel, ServerlessSideRows
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.progress import Clock, SolverLog, stop_requested
from dnnprov.result import Result, Status


@dataclass(frozen=True)
class ServerlessColumns:
    """Feasible plans of one job, as arrays: functions, memory, PS count, cost."""

    functions: np.ndarray
    memory_mb: np.ndarray
    ps: np.ndarray
    cost: np.ndarray

    def __len__(self) -> int:
        return len(self.cost)

    def pareto(self) -> ServerlessColumns:
        """Keep plans no other plan beats in both cost and function count (ties: first)."""
        order = np.lexsort((self.cost, self.functions))
        cost = self.cost[order]
        cheapest_before = np.concatenate([[math.inf], np.minimum.accumulate(cost)[:-1]])
        idx = order[cost < cheapest_before]
        return ServerlessColumns(self.functions[idx], self.memory_mb[idx], self.ps[idx], self.cost[idx])


FIRST_CHUNK = 64  # function counts evaluated at once per pair (doubling)
START_ITERATIONS = 60  # rounds of the smallest-n fixed point (it converges in a few)


def lower_cost(model: ServerlessModel, n: np.ndarray, m: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(LB_n, T_train(n)) of the module doc, for arrays of plans."""
    p = model.problem.platform
    train, _, _, _ = model.training_time(n, m, s)
    with np.errstate(invalid="ignore"):  # a zero price times an invalid pair's inf time
        bound = m / 1024.0 * p.price_per_gb_s * n * train + n * p.price_per_request
    return np.where(np.isfinite(train) & np.isfinite(bound), bound, np.inf), train


def pair_bounds(model: ServerlessModel) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(memory, PS count, first and last n that can meet T_o, LB) for every (m, s) pair.

    The first n is the fixed point of the module doc; the last comes from T_train's
    convexity: a ternary search finds its minimum over [first, n_hi] and a binary search
    the last n of the growing side with T_train <= T_o. The searches compare floats: T_o is
    raised by 1e-9 (far above their rounding), and a wrong step of the ternary search on a
    nearly flat stretch moves its result by no more than that rounding (convexity). A pair
    with no n that can meet T_o gets first ``n_hi + 1`` and bound ``inf``.
    """
    problem = model.problem
    n_lo, n_hi = problem.function_range()
    memory = np.array(problem.memory_grid(), dtype=np.int64)
    ps = np.arange(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1)
    mm, ss = (a.ravel() for a in np.meshgrid(memory, ps, indexing="ij"))
    deadline = problem.time_s * (1 + 1e-12)
    start = np.full(mm.shape, n_lo, dtype=np.int64)
    for _ in range(START_ITERATIONS):
        _, train = lower_cost(model, start, mm, ss)
        with np.errstate(invalid="ignore", over="ignore"):
            need = start * train / deadline
        # ceil of a value lowered by 1e-9: rounding never pushes the start past a feasible n
        nxt = np.where(np.isfinite(need), np.ceil(need * (1 - 1e-9)), n_hi + 1)
        nxt = np.clip(np.maximum(nxt, start), n_lo, n_hi + 1).astype(np.int64)
        if np.array_equal(nxt, start):
            break
        start = nxt

    def train_at(n: np.ndarray) -> np.ndarray:
        return lower_cost(model, n, mm, ss)[1]

    reachable = problem.time_s * (1 + 1e-9)
    lo, hi = np.minimum(start, n_hi), np.full(mm.shape, n_hi, dtype=np.int64)
    while (hi - lo > 2).any():  # ternary search for the minimum of T_train
        third = (hi - lo) // 3
        left, right = lo + third, hi - third
        falling = train_at(left) > train_at(right)
        lo, hi = np.where(falling, left, lo), np.where(falling, hi, right)
    candidates = np.stack([lo, np.minimum(lo + 1, n_hi), hi])
    lowest = np.stack([train_at(c) for c in candidates])
    bottom = candidates[np.argmin(lowest, axis=0), np.arange(len(mm))]
    meets = lowest.min(axis=0) <= reachable
    lo, hi = bottom, np.full(mm.shape, n_hi, dtype=np.int64)  # last n with T_train <= T_o
    while (lo < hi).any():
        mid = (lo + hi + 1) // 2
        ok = train_at(mid) <= reachable
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid - 1)
    start = np.where(meets & (start <= n_hi), start, n_hi + 1)
    end = np.where(start <= n_hi, lo, n_lo - 1)
    bound, _ = lower_cost(model, np.minimum(start, n_hi), mm, ss)
    return mm, ss, start, end, np.where(start > n_hi, np.inf, bound)


def feasible_columns(
    model: ServerlessModel, *, upper: float = math.inf, clock: Clock | None = None
) -> tuple[ServerlessColumns, float]:
    """Every feasible plan that may cost less than ``upper`` (all of them with ``inf``).

    With a finite ``upper`` the pairs are visited in bound order, each from its first
    n that can meet T_o up to the n whose LB_n reaches the best cost, and the search stops
    when the next pair's bound reaches it. With ``upper = inf`` every plan is evaluated. Either
    way a pair ends at the last n whose T_train can meet T_o (module doc).
    Returns the columns and the smallest bound of the pairs not evaluated (``inf`` when
    the search finished before ``clock`` expired): every plan not among the columns costs
    at least the best column or that bound. The clock is read between pairs, and each plan
    evaluated is one unit of its work limit; as the pairs and their chunks come in a fixed
    order, a search stopped by the work limit stops at the same pair on any machine.
    """
    problem = model.problem
    low, _ = problem.function_range()
    mm, ss, start, end, bound = pair_bounds(model)
    pruning = math.isfinite(upper)
    if not pruning:
        start = np.where(end >= start, low, start)
    order = np.argsort(bound, kind="stable")
    parts: list[tuple[np.ndarray, ...]] = []
    best = upper
    for i in order:
        if stop_requested() or (clock is not None and clock.expired()):
            return _concat(parts), float(bound[i])
        if pruning and bound[i] >= best:
            break
        if not np.isfinite(bound[i]) and pruning:
            break
        n0, size = int(start[i]), FIRST_CHUNK
        while n0 <= end[i]:
            n = np.arange(n0, min(int(end[i]), n0 + size - 1) + 1)
            ev = model.evaluate(n, mm[i], ss[i])
            if clock is not None:
                clock.spend(len(n))
            ok = ev.feasible & (ev.cost < best) if pruning else ev.feasible
            if ok.any():
                parts.append((n[ok], np.full(int(ok.sum()), mm[i]), np.full(int(ok.sum()), ss[i]), ev.cost[ok]))
                if pruning:
                    best = min(best, float(ev.cost[ok].min()))
            if pruning:
                last, _ = lower_cost(model, n[-1:], mm[i : i + 1], ss[i : i + 1])
                if last[0] >= best:
                    break  # LB_n only grows with n
            n0, size = int(n[-1]) + 1, size * 2
    return _concat(parts), math.inf


def _concat(parts: list[tuple[np.ndarray, ...]]) -> ServerlessColumns:
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return ServerlessColumns(empty, empty, empty, np.zeros(0))
    return ServerlessColumns(*(np.concatenate([p[i] for p in parts]) for i in range(4)))


def solve_serverless_exact(
    problem: ServerlessProblem,
    *,
    side: ServerlessSideRows | None = None,
    time_limit_s: float = 60.0,
    gap: float = 0.0,
    clock: Clock | None = None,
    log: SolverLog | None = None,
) -> Result:
    """Proven-optimal (functions, memory, PS count) plan.

    ``gap`` is accepted for a uniform interface; this method always proves optimality
    unless the clock runs out (then ``limit`` with the bound of the pairs not evaluated).
    """
    clock = clock or Clock(time_limit_s)
    log = log or SolverLog(clock)
    started = clock.started
    low, high = problem.function_range()
    clock.work_unit = "plans"
    log.header(
        f"dnnprov milp: {problem.name} (serverless)",
        [
            (
                f"{len(problem.memory_grid())} memory sizes x functions {low}..{high} x PS "
                f"{problem.constraints.ps_count[0]}..{problem.constraints.ps_count[1]}, "
                f"{clock.limits()}"
            )
        ],
    )
    model = ServerlessModel(problem, attach(side))
    budget = problem.constraints.budget_usd
    upper = budget * (1 + 1e-12) if budget is not None else math.inf
    if not math.isfinite(upper):
        upper = 1e300  # finite: enables bound-ordered pruning from the first plan found
    columns, unvisited = feasible_columns(model, upper=upper, clock=clock)
    finished = not math.isfinite(unvisited)
    stats = {"feasible_plans_kept": len(columns)}
    if not len(columns):
        status = Status.INFEASIBLE if finished else Status.LIMIT
        result = serverless_result(
            model,
            None,
            status=status,
            method="milp",
            started=started,
            bound=math.inf if finished else max(0.0, unvisited),
            message="proven: no plan meets every constraint"
            if finished
            else f"{clock.stop_reason()} before any feasible plan",
            stats=stats,
        )
        log.final(result.status.value, result.message)
        return result
    front = columns.pareto()
    # One job picks the cheapest column (exact, and checkable at a glance); the column
    # MILP in HiGHS is for many jobs sharing quotas (solvers/joint/provision.py). Ties: fewest functions.
    pick = int(np.argmin(front.cost))
    stats["columns"] = len(front)
    plan = (front.functions[pick], front.memory_mb[pick], front.ps[pick])
    best = float(front.cost[pick])
    log.progress(best, best if finished else min(best, unvisited), f"{len(front)} columns", force=True)
    if not finished:
        result = serverless_result(
            model,
            plan,
            status=Status.LIMIT,
            method="milp",
            started=started,
            bound=max(0.0, min(best, unvisited)),
            message=f"{clock.stop_reason()}: memory sizes with a bound from ${unvisited:.6g} up were not evaluated",
            stats=stats,
        )
    else:
        result = serverless_result(
            model, plan, status=Status.OPTIMAL, method="milp", started=started, bound=best, stats=stats
        )
    log.final(result.status.value, result.message)
    return result
