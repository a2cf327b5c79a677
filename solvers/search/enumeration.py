"""Exhaustive search: the test oracle. Evaluates every plan, in bounded-memory chunks."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np
from dnnprov.solvers.outcome import serverless_result, spot_result
from dnnprov.solvers.side_vars import attach

from dnnprov.models.serverless import ServerlessEvaluation, ServerlessModel, ServerlessSideRows
from dnnprov.models.spot import SideRows, SpotEvaluation, SpotModel
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.progress import Clock
from dnnprov.result import Objective, Result, Status

DEFAULT_MAX_PLANS = 50_000_000
CHUNK = 1 << 18  # most plans evaluated at once (bounded memory)
FIRST_CHUNK = 1 << 10  # plans of the first chunk, before the speed is known
CHUNK_SECONDS = 0.02  # a chunk is sized to take about this long (the clock is read between chunks)
#: Why a stopped search's bound is 0: costs, times and ``cost + W time`` (W >= 0) are never
#: negative, and the plans not evaluated are in no order that would bound them better.
UNORDERED = "bound 0: the plans not evaluated are not bounded by the search"


class ChunkSizer:
    """Chunk sizes that keep each evaluation short, so that a time limit is seen in time.

    Evaluating a plan costs from ~0.25 us (few columns) to tens of us (many columns on a
    loaded machine): a fixed chunk of 262,144 plans took 3-5 s on 24 columns (issue 19).
    The first chunk is small; each next one is sized from the measured speed to take
    about :data:`CHUNK_SECONDS`, and never more than a quarter of the time left.

    Under a work limit (:attr:`Clock.work_limit`, one unit per plan evaluated) a chunk
    never goes past the plans left, so a search it stops has seen exactly the first
    ``work_limit`` plans of the fixed order, whatever the chunks' sizes: the answer (ties
    go to the lowest index) is the same on a loaded machine and an idle one.
    """

    def __init__(self, clock: Clock | None) -> None:
        self.clock = clock
        self.size = FIRST_CHUNK if clock is not None else CHUNK
        self.started = time.perf_counter()
        if clock is not None:
            clock.work_unit = "plans"

    def next(self, done: int) -> int:
        """The size of the next chunk, after ``done`` plans of the last one were evaluated."""
        now = time.perf_counter()
        if self.clock is not None and done:
            per_plan = max(now - self.started, 1e-9) / done
            budget = min(CHUNK_SECONDS, self.clock.remaining() / 4)
            self.size = int(min(CHUNK, max(64, budget / per_plan)))
        self.started = now
        if self.clock is not None:
            return int(min(self.size, max(self.clock.work_left(), 1)))
        return self.size


def spot_space_size(problem: SpotProblem) -> int:
    """Number of (count vector, PS count) plans exhaustive search would evaluate."""
    cols = problem.columns()
    low, high = problem.constraints.ps_count
    return math.prod(int(up - lo + 1) for lo, up in zip(cols.lower, cols.upper)) * (high - low + 1)


def decode_counts(index: np.ndarray, lower: np.ndarray, radix: np.ndarray) -> np.ndarray:
    """Mixed-radix decoding of plan indices into count vectors (first column fastest)."""
    counts = np.empty((len(index), len(radix)), dtype=np.int64)
    rest = index.copy()
    for c, base in enumerate(radix):
        rest, counts[:, c] = np.divmod(rest, base)
    return counts + lower


def spot_chunks(
    problem: SpotProblem, model: SpotModel, clock: Clock | None
) -> Iterator[tuple[np.ndarray, int, SpotEvaluation]]:
    """Every plan of the quota box, as ``(counts, ps, evaluation)`` chunks (PS count outermost).

    Stops early, without a word, when ``clock`` expires: callers count the plans they saw.
    """
    cols = model.columns
    radix = (cols.upper - cols.lower + 1).astype(np.int64)
    per_ps = int(np.prod(radix))
    sizer = ChunkSizer(clock)
    for ps in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
        start, done = 0, 0
        while start < per_ps:
            chunk = sizer.next(done)
            if clock is not None and clock.expired():
                return
            index = np.arange(start, min(start + chunk, per_ps), dtype=np.int64)
            counts = decode_counts(index, cols.lower, radix)
            yield counts, ps, model.evaluate(counts, ps)
            if clock is not None:
                clock.spend(len(index))
            start, done = start + len(index), len(index)


def serverless_chunks(
    problem: ServerlessProblem, model: ServerlessModel, clock: Clock | None
) -> Iterator[tuple[np.ndarray, int, np.ndarray, ServerlessEvaluation]]:
    """Every (n, m, s) of the grid, as ``(functions, memory_mb, ps, evaluation)`` chunks (memory outermost).

    Stops early, without a word, when ``clock`` expires.
    """
    low, high = problem.function_range()
    ps_low, ps_high = problem.constraints.ps_count
    n_all, s_all = (a.ravel() for a in np.meshgrid(np.arange(low, high + 1), np.arange(ps_low, ps_high + 1)))
    sizer = ChunkSizer(clock)
    for m in problem.memory_grid():  # one memory size at a time keeps memory bounded
        start, done = 0, 0
        while start < len(n_all):
            chunk = sizer.next(done)
            if clock is not None and clock.expired():
                return
            n, s = n_all[start : start + chunk], s_all[start : start + chunk]
            yield n, m, s, model.evaluate(n, m, s)
            if clock is not None:
                clock.spend(len(n))
            start, done = start + len(n), len(n)


def serverless_space_size(problem: ServerlessProblem) -> int:
    """Number of (n, m, s) plans exhaustive search would evaluate."""
    low, high = problem.function_range()
    ps_low, ps_high = problem.constraints.ps_count
    return (high - low + 1) * len(problem.memory_grid()) * (ps_high - ps_low + 1)


def ranked(
    objective: Objective, feasible: np.ndarray, time_s: np.ndarray, cost: np.ndarray
) -> tuple[int, tuple[float, float]]:
    """The index of the best feasible plan of a chunk for ``objective`` and its key (``(inf, inf)``: none).

    Keys compare as tuples: ``cost``: (cost, 0); ``time``: (time, cost), the lexicographic
    objective; ``weighted``: (cost + W time, 0). Ties go to the lowest index.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        primary = np.where(feasible, objective.value(time_s, cost), np.inf)
    if objective.kind == "time":
        i = int(np.lexsort((np.where(feasible, cost, np.inf), primary))[0])
        key = (float(primary[i]), float(cost[i]))
    else:
        i = int(np.argmin(primary))
        key = (float(primary[i]), 0.0)
    return i, key if feasible[i] else (math.inf, math.inf)


def enumerate_spot(
    problem: SpotProblem,
    *,
    max_plans: int = DEFAULT_MAX_PLANS,
    side: SideRows | None = None,
    clock: Clock | None = None,
    objective: Objective = Objective(),
) -> Result:
    """The best feasible plan for ``objective`` (default: the cheapest) over every count vector
    in the quota box and PS count.

    Refuses (status ``limit``, no plan) when the space exceeds ``max_plans``. Ties are
    broken by the lowest plan index, so the answer is deterministic. ``side`` adds user
    constraints from the Pyomo model. With a ``clock`` the search stops at its limit
    (status ``limit`` with the best plan so far and the bound 0, :data:`UNORDERED`).
    """
    started = time.perf_counter() if clock is None else clock.started
    model = SpotModel(problem, attach(side))
    size = spot_space_size(problem)

    def package(plan: tuple[np.ndarray, int] | None, **outcome: Any) -> Result:
        counts, ps = (None, 1) if plan is None else plan
        return spot_result(model, counts, ps, method="enumerate", started=started, objective=objective, **outcome)

    if size > max_plans:
        message = (
            f"search space of {size:,} plans exceeds max_plans={max_plans:,}; use method 'milp' or raise max_plans"
        )
        return package(None, status=Status.LIMIT, message=message, stats={"space": size})
    best_key, best = (math.inf, math.inf), None
    evaluated = 0
    for counts, ps, ev in spot_chunks(problem, model, clock):
        evaluated += len(counts)
        i, key = ranked(objective, ev.feasible, ev.time_s, ev.cost)
        if key < best_key:
            best_key, best = key, (counts[i], ps)
    return searched(package, best, size, evaluated, clock, nothing="in the search space", stop_stats={})


def enumerate_serverless(
    problem: ServerlessProblem,
    *,
    max_plans: int = DEFAULT_MAX_PLANS,
    side: ServerlessSideRows | None = None,
    clock: Clock | None = None,
    objective: Objective = Objective(),
) -> Result:
    """The best feasible (n, m, s) for ``objective`` (default: the cheapest) over the whole grid
    (local batch by eq. 9).

    With a ``clock`` the search stops at its limit (status ``limit``, best plan so far, bound 0).
    """
    started = time.perf_counter() if clock is None else clock.started
    model = ServerlessModel(problem, attach(side))
    size = serverless_space_size(problem)
    package = partial(serverless_result, model, method="enumerate", started=started, objective=objective)
    if size > max_plans:
        message = f"search space of {size:,} plans exceeds max_plans={max_plans:,}"
        return package(None, status=Status.LIMIT, message=message, stats={"space": size})
    best_key, best = (math.inf, math.inf), None
    evaluated = 0
    for n, m, s, ev in serverless_chunks(problem, model, clock):
        evaluated += len(n)
        i, key = ranked(objective, ev.feasible, ev.time_s, ev.cost)
        if key < best_key:
            best_key, best = key, (n[i], m, s[i])
    return searched(package, best, size, evaluated, clock, nothing="on the grid", stop_stats={"space": size})


def searched(
    package: Callable[..., Result],
    best: Any,
    size: int,
    evaluated: int,
    clock: Clock | None,
    *,
    nothing: str,
    stop_stats: dict[str, int],
) -> Result:
    """The outcome of a search over ``size`` plans that evaluated ``evaluated`` and kept ``best``
    (a plan as ``package`` takes it, ``None``: none).

    ``package(plan, status=..., ...)`` turns a plan (``None``: none) into the result:
    stopped by the clock (``limit``, the best plan so far, bound 0), ``infeasible`` (no plan
    ``nothing`` meets every constraint) or ``optimal``. ``stop_stats`` join a stopped
    search's stats.
    """
    if evaluated < size:
        assert clock is not None  # only a clock stops a search early
        return package(
            best,
            status=Status.LIMIT,
            bound=0.0,
            message=f"{clock.stop_reason()} after {evaluated:,} of {size:,} plans; {UNORDERED}",
            stats={**stop_stats, "plans_evaluated": evaluated},
        )
    stats = {"plans_evaluated": size}
    if best is None:
        message = f"no plan {nothing} meets every constraint"
        return package(None, status=Status.INFEASIBLE, bound=math.inf, message=message, stats=stats)
    return package(best, status=Status.OPTIMAL, stats=stats)
