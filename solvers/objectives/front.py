"""Exact (time, cost) Pareto fronts: epsilon-constraint steps over the exact min-cost method.

Why it is exact. The exact method (``milp``) with a deadline d is a black box that proves
"no plan meeting every constraint and the deadline d costs less than c" and returns a plan
of cost c meeting d (status ``optimal``), or proves that no plan meets d (``infeasible``).
The plans are finite, so the nondominated (time, cost) points are finite too, and they
are reached one by one:

* step i solves at deadline d_i and gets a plan (t_i, c_i) with t_i <= d_i;
* step i + 1 solves at the largest deadline d_{i+1} that admits exactly the plans with
  T < t_i (:func:`faster_than`: the model's deadline test ``T <= d (1 + 1e-12)`` is
  inverted in floating point, so a plan whose time equals t_i is neither admitted again
  nor skipped);
* point i is nondominated when step i proved every plan with T <= d_i (t_i included)
  costs at least c_i, and step i + 1 proved every plan with T < t_i costs more than c_i
  (its optimal cost above c_i, an infeasible answer, or a bound above c_i at a limit).
  If step i + 1 finds a plan as cheap as c_i, point i is dominated and dropped (ties in
  cost keep the faster plan); every plan with T in [t_i, d_i] either is point i or is
  dominated by it, so no point between two steps is missed.

Times are compared exactly as the model computes them (no tolerance beyond the model's
own deadline test); costs inherit the tolerance with which ``optimal`` is proven
(docs/solvers.md). The same steps serve the objectives of :mod:`objectives`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.progress import Clock
from dnnprov.result import Result, ServerlessPlan, SpotPlan, Status, finite_or_none

Problem = SpotProblem | ServerlessProblem
#: An exact min-cost solve of a problem under a clock (``milp``).
Exact = Callable[[Problem, Clock], Result]
#: "No upper deadline": the largest number the instance format accepts (about 31.7 million years).
NO_DEADLINE_S = 1e15


def deadline_of(problem: Problem) -> float:
    """The problem's deadline T_obj (spot ``slo.time_s``, serverless ``time_s``)."""
    return problem.slo.time_s if isinstance(problem, SpotProblem) else problem.time_s


def at_deadline(problem: Problem, deadline_s: float) -> Problem:
    """The problem with its deadline replaced (every other constraint kept)."""
    if isinstance(problem, SpotProblem):
        return problem.replace(slo=dataclasses.replace(problem.slo, time_s=deadline_s))
    return problem.replace(time_s=deadline_s)


def deadline_floor(problem: Problem) -> float:
    """Deadlines must lie above this (spot: the takeover overhead, which every plan's T exceeds)."""
    return problem.slo.takeover_overhead_s if isinstance(problem, SpotProblem) else 0.0


def _factor(problem: Problem) -> float:
    """The model's deadline test is ``T <= d * factor`` (the reference model's has no tolerance)."""
    return 1.0 if isinstance(problem, SpotProblem) and problem.model == "reference" else 1 + 1e-12


def faster_than(problem: Problem, time_s: float) -> float | None:
    """The largest deadline d whose test ``T <= d * factor`` admits exactly the times below ``time_s``.

    ``fl(d * factor)`` is nondecreasing in d, and near 1 the factor maps consecutive floats
    to consecutive floats, so this d admits every float T < time_s and none >= it.
    ``None`` when that deadline is not above :func:`deadline_floor` (no such deadline can be posed).
    """
    factor = _factor(problem)
    d = time_s / factor
    while d * factor >= time_s:
        d = float(np.nextafter(d, 0.0))
    while float(np.nextafter(d, math.inf)) * factor < time_s:
        d = float(np.nextafter(d, math.inf))
    return d if d > deadline_floor(problem) and d >= 1e-9 else None


@dataclass(frozen=True)
class Step:
    """One exact solve of the walk: its deadline and the result."""

    deadline_s: float
    result: Result


def steps(problem: Problem, exact: Exact, deadline_s: float, clock: Clock) -> Iterator[Step]:
    """Exact solves at ``deadline_s``, then each just below the time of the last plan found.

    Ends after a step without an ``optimal`` plan (infeasible: no faster plan; limit or
    error: the walk stops), or when no faster deadline can be posed.
    """
    deadline: float | None = deadline_s
    while deadline is not None:
        result = exact(at_deadline(problem, deadline), clock)
        yield Step(deadline, result)
        if result.status is not Status.OPTIMAL or result.time_s is None:
            return
        deadline = faster_than(problem, result.time_s)


@dataclass(frozen=True)
class FrontPoint:
    """A nondominated plan; ``proven``: the exact method showed no plan dominates it."""

    plan: SpotPlan | ServerlessPlan
    time_s: float
    cost: float
    proven: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON form ``{plan, time_s, cost_usd, proven}``."""
        return {"plan": self.plan.to_dict(), "time_s": self.time_s, "cost_usd": self.cost, "proven": self.proven}


@dataclass(frozen=True)
class Front:
    """The (time, cost) front of one instance between two deadlines, fastest point first.

    ``complete``: every plan with a time in ``deadlines`` was accounted for (each is a point
    or dominated by one). ``stats``: ``exact_solves`` (milp) or ``plans_evaluated`` (enumerate). ``status``: ``optimal`` when complete with every point proven,
    ``infeasible`` when complete without points, else ``limit`` (or ``feasible`` when
    complete but a point could not be proven, see ``message``).
    """

    instance: str
    kind: str
    model: str
    method: str
    deadlines: tuple[float, float]
    budget_usd: float | None
    points: tuple[FrontPoint, ...]
    complete: bool
    stats: dict[str, int]
    solve_seconds: float
    time_limit_s: float
    message: str = ""
    warnings: tuple[tuple[str, str], ...] = ()

    @property
    def status(self) -> Status:
        """How the front ended (see the class doc)."""
        if not self.complete:
            return Status.LIMIT
        if not self.points:
            return Status.INFEASIBLE
        return Status.OPTIMAL if all(p.proven for p in self.points) else Status.FEASIBLE

    def to_dict(self) -> dict[str, Any]:
        """Stable JSON: the settings, the outcome and ``points`` (a list of :meth:`FrontPoint.to_dict`)."""
        low, high = self.deadlines
        return {
            "instance": self.instance,
            "kind": self.kind,
            "model": self.model,
            "method": self.method,
            "deadlines": {"from_s": low, "to_s": None if high >= NO_DEADLINE_S else high},
            "budget_usd": self.budget_usd,
            "time_limit_s": finite_or_none(self.time_limit_s),
            "status": self.status.value,
            "complete": self.complete,
            "stats": dict(self.stats),
            "solve_seconds": self.solve_seconds,
            "message": self.message,
            "warnings": [{"field": f, "message": m} for f, m in self.warnings],
            "points": [p.to_dict() for p in self.points],
        }

    def summary(self) -> str:
        """A readable table, fastest point first."""
        low, high = self.deadlines
        to = "no upper deadline" if high >= NO_DEADLINE_S else f"{high:,.2f} s"
        proven = sum(p.proven for p in self.points)
        lines = [
            f"{self.instance} [{self.kind}, model {self.model}] front by {self.method}: {self.status.value}, "
            f"{len(self.points)} points ({proven} proven), deadlines {low:,.2f} s to {to}"
            + ("" if self.budget_usd is None else f", budget ${self.budget_usd:g}"),
            f"  {'time (s)':>14} {'cost ($)':>14}  proven  plan",
        ]
        lines += [
            f"  {p.time_s:>14.2f} {p.cost:>14.6f}  {'yes' if p.proven else 'no':<6}  {p.plan}" for p in self.points
        ]
        work = ", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in self.stats.items())
        lines.append(f"  solve: {self.solve_seconds:.3f} s, {work}")
        if self.message:
            lines.append(f"  note : {self.message}")
        return "\n".join(lines)

    __str__ = summary


@dataclass
class _Pending:
    """A point of the walk whose proof waits for the next step."""

    plan: SpotPlan | ServerlessPlan
    time_s: float
    cost: float
    minimal: bool  # its step proved it the cheapest plan within its deadline
    proven: bool = False


def walk_front(
    problem: Problem, exact: Exact, low: float, high: float, clock: Clock
) -> tuple[list[FrontPoint], bool, int, str]:
    """The front between deadlines ``low`` and ``high`` by :func:`steps` (module doc).

    Returns the points (fastest first), whether the walk covered the range, the number of
    exact solves and a message (why it stopped early, or why a point is not proven).
    """
    points: list[_Pending] = []
    complete, message, solves = False, "", 0
    for step in steps(problem, exact, high, clock):
        solves += 1
        result = step.result
        last = points[-1] if points else None
        if result.status is Status.INFEASIBLE:
            if last is not None:
                last.proven = last.minimal
            complete = True
            break
        cheaper = result.cost if result.plan is not None else None
        if last is not None and cheaper is not None and cheaper <= last.cost:
            points.pop()  # a faster plan as cheap: the last point is dominated
        elif last is not None and result.bound is not None and result.bound > last.cost:
            last.proven = last.minimal  # every faster plan costs more
        if result.status is Status.OPTIMAL and result.time_s is not None and result.time_s < low:
            complete = True  # the rest of the front lies below the range
            break
        if result.plan is not None and result.time_s is not None and result.cost is not None and result.time_s >= low:
            points.append(_Pending(result.plan, result.time_s, result.cost, result.status is Status.OPTIMAL))
        if result.status is not Status.OPTIMAL:
            message = f"the walk stopped at a deadline of {step.deadline_s:,.6g} s: {result.message}"
            break
    else:
        if points:  # the walk could not go on: faster plans were not ruled out
            message = (
                f"no deadline just below {points[-1].time_s:g} s can be stated (it would not "
                "exceed the takeover overhead): faster plans were not looked for"
            )
    front = [FrontPoint(p.plan, float(p.time_s), float(p.cost), p.proven) for p in reversed(points)]
    return front, complete, solves, message


def nondominated(times: np.ndarray, costs: np.ndarray) -> np.ndarray:
    """Indices of the nondominated (time, cost) pairs, fastest first.

    A pair is kept when it costs less than every pair at least as fast sorted before it
    (time, then cost; stable): equal pairs keep the first, ties in cost keep the faster.
    """
    order = np.lexsort((costs, times))
    ordered = costs[order]
    cheapest_before = np.concatenate([[math.inf], np.minimum.accumulate(ordered)[:-1]])
    return order[ordered < cheapest_before]


def enumerate_front(
    problem: Problem, low: float, high: float, clock: Clock, max_plans: int
) -> tuple[list[FrontPoint], bool, int, str]:
    """The front between ``low`` and ``high`` by evaluating every plan (the oracle of the walk).

    Returns what :func:`walk_front` returns (with the plans evaluated in place of the solves).
    Plans faster than ``low`` take part in the dominance test and are left out afterwards.
    """
    from dnnprov.solvers.search.enumeration import (
        serverless_chunks,
        serverless_space_size,
        spot_chunks,
        spot_space_size,
    )

    from dnnprov.models.serverless import ServerlessModel
    from dnnprov.models.spot import SpotModel

    problem = at_deadline(problem, high)
    spot = isinstance(problem, SpotProblem)
    size = spot_space_size(problem) if isinstance(problem, SpotProblem) else serverless_space_size(problem)
    if size > max_plans:
        return [], False, 0, f"search space of {size:,} plans exceeds max_plans={max_plans:,}; use method 'milp'"
    # each chunk: (times, costs, plan columns): spot (counts..., ps), serverless (n, m, s, local batch)
    if isinstance(problem, SpotProblem):
        model = SpotModel(problem)
        chunks = (
            (ev.feasible, ev.time_s, ev.cost, np.column_stack([counts, np.full(len(counts), ps)]))
            for counts, ps, ev in spot_chunks(problem, model, clock)
        )
    else:
        chunks = (
            (ev.feasible, ev.time_s, ev.cost, np.column_stack([n, np.full(len(n), m), s, ev.local_batch]))
            for n, m, s, ev in serverless_chunks(problem, ServerlessModel(problem), clock)
        )
    times, costs, rows = np.zeros(0), np.zeros(0), None
    seen = 0
    for feasible, time_s, cost, plan_rows in chunks:
        seen += len(cost)
        ok = np.flatnonzero(feasible)
        ok = ok[nondominated(time_s[ok], cost[ok])]
        times, costs = np.concatenate([times, time_s[ok]]), np.concatenate([costs, cost[ok]])
        rows = plan_rows[ok] if rows is None else np.concatenate([rows, plan_rows[ok]])
        kept = nondominated(times, costs)
        times, costs, rows = times[kept], costs[kept], rows[kept]
    if seen < size:
        return [], False, seen, f"{clock.stop_reason()} after {seen:,} of {size:,} plans"
    front = []
    for t, c, row in zip(times, costs, rows if rows is not None else []):
        if t < low:
            continue
        if spot:
            plan: SpotPlan | ServerlessPlan = SpotPlan(
                {k: int(n) for k, n in zip(model.columns.labels, row[:-1])}, int(row[-1])
            )
        else:
            plan = ServerlessPlan(int(row[0]), int(row[1]), float(row[3]), int(row[2]))
        front.append(FrontPoint(plan, float(t), float(c), True))
    return front, True, seen, ""
