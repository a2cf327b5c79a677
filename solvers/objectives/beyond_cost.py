"""Objectives other than cost, solved exactly with the min-cost method as a black box.

``time``: the least training time within the budget (and the deadline), ties broken by
least cost: the lexicographic (time, cost) objective. It is the front point
(:mod:`front`) of the largest cost within the budget. A spot problem first gets one search
by time inside the decomposition (:mod:`.fastest`), which proves the answer, ties
included; the steps below run when that search stops at a limit (or for serverless
problems). With the budget in the problem, an
exact solve at deadline d either returns a plan (of time t <= d, the cheapest meeting d)
or proves that no plan meets d within the budget. The search keeps ``hi``, the time of
the fastest plan found, and ``lo``, the largest deadline proven to admit no plan:

* each step's deadline is a guess at the time where the least cost reaches the budget
  B (:func:`_guess`): the front's cost is modelled as ``c(T) = a T^-alpha`` through the two
  fastest plans found (alpha = 1.5 while only one is known), aimed 0.2 % above the
  crossing so that the step tends to find a plan just above the answer; the guess is kept
  at least halfway from the floor to ``hi`` until a step finds no plan, then at least 5 %
  of the bracket below ``hi``, and replaced by bisection when it falls within 5 % of ``lo``
  or after two steps in a row that found no plan; once ``lo`` and ``hi`` are within 0.1 %,
  or the guess is within that of ``hi``, the step is just below ``hi``
  (:func:`front.faster_than`), and any step ends the search when ``faster_than(hi) <= lo``.
  The guess only chooses where to look: the proofs below hold for any deadline;
* the answer is proven when the solve just below ``hi`` is infeasible (no faster plan
  within the budget); its plan came from an ``optimal`` solve at a deadline >= ``hi``,
  so no plan of the same time costs less;
* every solve lowers ``hi`` to a plan's time or raises ``lo``, so the search ends; a
  limit ends it with ``lo`` as the proven bound (no plan is that fast).

``weighted:W``: the least ``cost + W time``. Every plan is dominated by or equal to a
front point, and the value grows with both, so the least value is a front point. The
walk of :func:`front.steps` visits the front from the deadline down; a step whose cost
reaches the best value so far ends it (every faster plan costs at least that).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from dnnprov.solvers.objectives.fastest import FastestTime
from dnnprov.solvers.objectives.front import (
    Exact,
    Problem,
    at_deadline,
    deadline_floor,
    deadline_of,
    faster_than,
    steps,
)

from dnnprov.progress import Clock, SolverLog
from dnnprov.result import Objective, Result, Status

#: A one-pass search for the least time within the budget (``None``: not for this problem).
Fastest = Callable[[Problem, Clock], FastestTime | None]

FIRST_ALPHA = 1.5  # the cost's elasticity to time assumed while one plan is known
AIM_ABOVE = 2e-3  # a guess aims this much (relative) above the modelled crossing
KEEP_INSIDE = 0.05  # a guess stays this share of the bracket away from either end
WINDOW = 1e-3  # within this relative window, step just below hi


def _guess(
    points: list[tuple[float, float]], budget: float, lo: float, hi: float, misses: int, bracketed: bool
) -> float:
    """The next deadline to try between ``lo`` and ``hi`` (module doc); ``points`` are the
    (time, cost) of the plans found, each the cheapest meeting its step's deadline;
    ``bracketed``: ``lo`` comes from a step that found no plan (not from the floor)."""
    mid = (lo + hi) / 2
    if misses >= 2:
        return mid
    (t_b, c_b), *rest = sorted(points)
    alpha = FIRST_ALPHA
    if rest:
        t_a, c_a = rest[0]
        if c_b > c_a > 0 and t_a > t_b:
            alpha = math.log(c_b / c_a) / math.log(t_a / t_b)
    if not (c_b > 0 and budget > c_b and alpha > 0):
        return mid
    guess = t_b * (c_b / budget) ** (1 / alpha) * (1 + AIM_ABOVE)
    if not bracketed:  # no step found "no plan" yet: at most halve the distance to the floor
        return max(guess, mid)
    margin = KEEP_INSIDE * (hi - lo)
    if guess <= lo + margin:  # the model aims below a deadline proven to admit no plan: bisect
        return mid
    return min(guess, hi - margin)


def _packaged(
    result: Result,
    objective: Objective,
    *,
    status: Status,
    bound: float | None,
    message: str,
    solves: int,
    clock: Clock,
) -> Result:
    """``result`` (a plan's solve, or a solve without one) as the objective's answer (its domain note kept)."""
    note = result.details.get("domain")
    if note and note not in message:
        message = f"{message}; {note}" if message else note
    return dataclasses.replace(
        result,
        status=status,
        bound=bound,
        message=message,
        objective=objective,
        solve_seconds=clock.elapsed(),
        stats={**result.stats, "exact_solves": solves},
    )


def least_time(problem: Problem, exact: Exact, clock: Clock, log: SolverLog, fastest: Fastest | None = None) -> Result:
    """The plan of least time within the problem's budget and deadline, ties by least cost (module doc).

    ``fastest``: a one-pass search for the least time (:func:`.fastest.searcher`: spot
    problems only); when
    it proves its plan (least time, then least cost), that is the answer, else the steps below run.
    """
    objective = Objective("time")
    log.header(
        f"dnnprov milp, objective time: {problem.name}",
        [
            (
                f"budget ${problem.constraints.budget_usd:g}, deadline {deadline_of(problem):g} s, "
                f"time limit {clock.limit_s:g} s"
            )
        ],
    )
    quick = fastest(problem, clock) if fastest is not None else None
    if quick is not None and quick.answer is not None and quick.time_s is not None:
        answer = quick.answer
        log.progress(quick.time_s, quick.time_s, f"least time {quick.time_s:.6g} s: {answer.status.value}", force=True)
        if answer.status is Status.OPTIMAL and answer.time_s == quick.time_s:
            return _packaged(
                answer,
                objective,
                status=Status.OPTIMAL,
                bound=quick.time_s,
                solves=1,
                clock=clock,
                message="proven: no plan within the budget is faster (exact solves: 1, a search by time)",
            )
    best = exact(problem, clock)
    solves = 1
    # no plan meets a deadline lo: every plan's time exceeds the overhead, and lo * (1 + 1e-12) <= it
    lo = floor = deadline_floor(problem) * (1 - 1e-9)
    if best.plan is None or best.time_s is None or best.status is not Status.OPTIMAL:
        bound = {Status.INFEASIBLE: math.inf, Status.ERROR: None}.get(best.status, lo)
        return _packaged(
            best, objective, status=best.status, bound=bound, message=best.message, solves=solves, clock=clock
        )
    hi = best.time_s
    budget = problem.constraints.budget_usd
    assert budget is not None  # (dispatch refuses objective "time" without a budget)
    points = [(best.time_s, best.cost if best.cost is not None else 0.0)]
    misses = 0  # steps in a row that found no plan

    def proven() -> Result:
        """The current best, proven fastest: no plan within the budget meets a deadline below its time."""
        return _packaged(
            best,
            objective,
            status=Status.OPTIMAL,
            bound=hi,
            solves=solves,
            clock=clock,
            message=f"proven: no plan within the budget is faster (exact solves: {solves})",
        )

    while True:
        below = faster_than(problem, hi)
        if below is None:
            return _packaged(
                best,
                objective,
                status=Status.FEASIBLE,
                bound=lo,
                solves=solves,
                clock=clock,
                message=f"no deadline just below {hi:g} s can be stated (it would not exceed "
                "the takeover overhead): faster plans were not looked for",
            )
        if below <= lo:
            return proven()
        deadline = below
        if hi - lo > WINDOW * hi:
            guess = _guess(points, budget, lo, hi, misses, lo > floor)
            if guess < hi * (1 - WINDOW) and guess > deadline_floor(problem):
                deadline = min(guess, below)
        answer = exact(at_deadline(problem, deadline), clock)
        solves += 1
        log.progress(hi, lo, f"step {solves}: deadline {deadline:.6g} s: {answer.status.value}", force=True)
        if answer.plan is not None and answer.time_s is not None and answer.time_s < hi:
            if answer.status is not Status.OPTIMAL:  # a limit: a faster plan, not the cheapest
                best, hi = answer, answer.time_s
                break
            best, hi, misses = answer, answer.time_s, 0
            points.append((answer.time_s, answer.cost if answer.cost is not None else 0.0))
        elif answer.status is Status.INFEASIBLE:
            if deadline == below:
                return proven()
            lo, misses = deadline, misses + 1
        else:
            break
    return _packaged(
        best,
        objective,
        status=Status.LIMIT,
        bound=lo,
        solves=solves,
        clock=clock,
        message=f"{answer.message or clock.stop_reason()}; proven: no plan within the budget takes {lo:,.6g} s or less",
    )


def least_weighted(problem: Problem, exact: Exact, objective: Objective, clock: Clock, log: SolverLog) -> Result:
    """The plan of least ``cost + W time`` (module doc)."""
    log.header(
        f"dnnprov milp, objective {objective}: {problem.name}",
        [f"deadline {deadline_of(problem):g} s, time limit {clock.limit_s:g} s"],
    )
    best: Result | None = None
    best_value, solves, last, ended = math.inf, 0, None, False
    for step in steps(problem, exact, deadline_of(problem), clock):
        solves += 1
        last = step.result
        if last.plan is None or last.cost is None or last.time_s is None:
            break
        value = objective.value(last.time_s, last.cost)
        assert value is not None  # (both the time and the cost are known here)
        if value < best_value:
            best, best_value = last, value
        log.progress(best_value, min(best_value, last.cost), f"step {solves}: deadline {step.deadline_s:.6g} s")
        if last.status is Status.OPTIMAL and last.cost >= best_value:
            ended = True  # every faster plan costs at least this: none has a smaller value
            break
    assert last is not None
    ended = ended or last.status is Status.INFEASIBLE
    if best is None:
        bound = math.inf if last.status is Status.INFEASIBLE else last.bound
        return _packaged(
            last, objective, status=last.status, bound=bound, message=last.message, solves=solves, clock=clock
        )
    if ended:
        return _packaged(
            best,
            objective,
            status=Status.OPTIMAL,
            bound=best_value,
            solves=solves,
            clock=clock,
            message=f"proven: the front was walked until no faster plan could do better (exact solves: {solves})",
        )
    if last.status is Status.OPTIMAL:  # the walk could not go on (a deadline at the takeover overhead)
        bound = best_value if last.cost is None else min(best_value, last.cost)
        return _packaged(
            best,
            objective,
            status=Status.FEASIBLE,
            bound=bound,
            solves=solves,
            clock=clock,
            message=f"no deadline just below {last.time_s:g} s can be stated (it would "
            "not exceed the takeover overhead): faster plans were bounded by cost alone",
        )
    # faster plans than those walked cost at least the limit's bound, so their value does too
    bound = min(best_value, max(last.bound or 0.0, 0.0))
    return _packaged(
        best,
        objective,
        status=Status.LIMIT,
        bound=bound,
        solves=solves,
        clock=clock,
        message=f"{last.message}; plans faster than the walk reached were bounded by cost alone",
    )
