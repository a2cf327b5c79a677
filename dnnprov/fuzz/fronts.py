"""Fronts and objectives checked against brute force (issue 29): :func:`dnnprov.pareto` and
``dnnprov.solve(..., objective=...)`` with ``milp`` on instances small enough to evaluate every plan.

The oracle here is independent of :mod:`dnnprov.solvers.objectives.front` and of ``enumerate``: every
plan of the box (grid) is evaluated at once with the model, the nondominated set is taken
by a plain sweep, and the objectives by sorting. :func:`check_instance` draws, for one
fuzz instance, the cases that stress the method where it can go wrong: the front up to the
instance's deadline, the whole front, a range whose ends are two front points' times, the
least time under a budget (the instance's, or one set exactly at a plan's cost, or at a
front point's cost) and a weighted objective whose weight is the slope between two front
points (a tie in value). Times and costs must match exactly (the same model evaluates the
same plans); a point may differ only in its plan when two plans tie in both.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import dnnprov
from dnnprov.errors import InvalidInputError
from dnnprov.fuzz import Finding, evaluate_plan
from dnnprov.fuzz.families.spot import Problem
from dnnprov.models.serverless import ServerlessModel
from dnnprov.models.spot import SpotModel
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import Objective, Status
from dnnprov.solvers.objectives.front import NO_DEADLINE_S, at_deadline, deadline_of

#: Finding kinds that are wrong answers (the others are give-ups).
WRONG = {
    "wrong-front": "the front's points differ from the brute-force nondominated set",
    "false-proven": "a point marked proven is not nondominated",
    "wrong-plan": "a returned plan is infeasible, or its time or cost is not the model's",
    "false-optimal": "an objective's optimal answer differs from the brute-force optimum",
    "false-infeasible": "infeasible, but brute force found a plan",
    "bound-above-optimum": "a proven bound lies above the brute-force optimum",
    "error": "the method failed or refused a valid instance",
}
#: Kinds reported but not wrong.
OTHER = {"gave-up": "the front or objective ended without a proof on a tiny instance"}
#: The capabilities :func:`check_instance` exercises, in its order.
CASES = ("front-deadline", "front-whole", "front-range", "time", "weighted")


def feasible_plans(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """(times, costs) of every plan meeting every constraint, by evaluating the whole box (grid).

    Spot boxes are decoded with :func:`numpy.unravel_index` in slices of 2**17 plans.
    """
    if isinstance(problem, SpotProblem):
        model = SpotModel(problem)
        cols = model.columns
        shape = tuple(int(hi - lo + 1) for lo, hi in zip(cols.lower, cols.upper))
        size = math.prod(shape)
        times, costs = [], []
        for ps in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
            for start in range(0, size, 1 << 17):
                index = np.arange(start, min(size, start + (1 << 17)))
                counts = np.stack(np.unravel_index(index, shape), axis=-1) + cols.lower
                ev = model.evaluate(counts, ps)
                times.append(ev.time_s[ev.feasible])
                costs.append(ev.cost[ev.feasible])
        return np.concatenate(times), np.concatenate(costs)
    low, high = problem.function_range()
    n, m, s = (
        a.ravel()
        for a in np.meshgrid(
            np.arange(low, high + 1),
            problem.memory_grid(),
            np.arange(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1),
            indexing="ij",
        )
    )
    grid = ServerlessModel(problem).evaluate(n, m, s)
    return grid.time_s[grid.feasible], grid.cost[grid.feasible]


def brute_front(times: np.ndarray, costs: np.ndarray) -> list[tuple[float, float]]:
    """The nondominated (time, cost) pairs, fastest first, by a plain sweep."""
    front: list[tuple[float, float]] = []
    for i in np.lexsort((costs, times)):
        if not front or costs[i] < front[-1][1]:
            front.append((float(times[i]), float(costs[i])))
    return front


def _found(family: str, seed: int | None, kind: str, case: str, message: str) -> Finding:
    return Finding(kind, family, seed, f"{case}: {message}")


def check_front(
    problem: Problem,
    deadlines: tuple[float | None, float | None],
    *,
    family: str = "",
    seed: int | None = None,
    case: str = "front",
    time_limit_s: float = 20.0,
) -> list[Finding]:
    """:func:`dnnprov.pareto` (milp) against the brute-force nondominated set of ``deadlines``."""
    high = NO_DEADLINE_S if deadlines[1] is None else deadlines[1]
    low = 0.0 if deadlines[0] is None else deadlines[0]
    truth = [p for p in brute_front(*feasible_plans(at_deadline(problem, high))) if p[0] >= low]
    try:
        front = dnnprov.pareto(problem, deadlines, time_limit_s=time_limit_s)
    except InvalidInputError as exc:
        return [_found(family, seed, "error", case, f"refused: {exc}")]
    found: list[Finding] = []
    got = [(p.time_s, p.cost) for p in front.points]
    ranged = at_deadline(problem, high)
    for point in front.points:
        feasible, cost, why = evaluate_plan(ranged, point.plan)
        if not feasible or cost != point.cost:
            found.append(
                _found(
                    family,
                    seed,
                    "wrong-plan",
                    case,
                    f"{point.plan} at ({point.time_s!r}, "
                    f"{point.cost!r}): feasible {feasible}, model cost {cost!r}, {why}",
                )
            )
        if point.proven and (point.time_s, point.cost) not in truth:
            found.append(
                _found(
                    family,
                    seed,
                    "false-proven",
                    case,
                    f"({point.time_s!r}, {point.cost!r}) {point.plan} is dominated or outside [{low:g}, {high:g}]",
                )
            )
    if front.complete and got != truth:
        missing, extra = sorted(set(truth) - set(got)), sorted(set(got) - set(truth))
        found.append(
            _found(
                family,
                seed,
                "wrong-front",
                case,
                f"{len(got)} points, brute force {len(truth)}; missing {missing[:3]}, extra {extra[:3]}",
            )
        )
    if not front.complete or (front.status is not Status.OPTIMAL and truth):
        found.append(_found(family, seed, "gave-up", case, f"{front.status.value}: {front.message}"))
    return found


def best_of(objective: Objective, times: np.ndarray, costs: np.ndarray) -> tuple[float, float] | None:
    """The brute-force optimum (time, cost) of ``objective`` (time: lexicographic), ``None`` without plans."""
    if not len(times):
        return None
    if objective.kind == "time":
        i = np.lexsort((costs, times))[0]
    else:
        i = int(np.argmin(objective.value(times, costs)))
    return float(times[i]), float(costs[i])


def check_objective(
    problem: Problem, objective: Objective, *, family: str = "", seed: int | None = None, time_limit_s: float = 20.0
) -> list[Finding]:
    """``dnnprov.solve(problem, "milp", objective=...)`` against the brute-force optimum."""
    case = str(objective)
    truth = best_of(objective, *feasible_plans(problem))
    result = dnnprov.solve(problem, "milp", objective=objective, time_limit_s=time_limit_s)
    said = f"{result.status.value} ({result.time_s!r} s, ${result.cost!r}, bound {result.bound!r}, {result.plan})"
    if result.status is Status.ERROR:
        return [_found(family, seed, "error", case, f"{said}: {result.message}")]
    found: list[Finding] = []
    if result.plan is not None:
        feasible, cost, _ = evaluate_plan(problem, result.plan)
        if not feasible or cost != result.cost:
            found.append(_found(family, seed, "wrong-plan", case, f"{said}: feasible {feasible}, model cost {cost!r}"))
    if truth is None:
        if result.plan is not None or result.status is not Status.INFEASIBLE:
            found.append(
                _found(
                    family,
                    seed,
                    "gave-up" if result.plan is None else "wrong-plan",
                    case,
                    f"{said}; brute force: no plan",
                )
            )
        return found
    optimum = objective.value(*truth)
    assert optimum is not None  # brute force gives both the time and the cost
    if result.status is Status.INFEASIBLE:
        found.append(_found(family, seed, "false-infeasible", case, f"{said}; brute force {truth}"))
    elif result.status is Status.OPTIMAL:
        exact = (result.time_s, result.cost) == truth if objective.kind == "time" else result.value == optimum
        if not exact:
            found.append(_found(family, seed, "false-optimal", case, f"{said}; brute force {truth}, value {optimum!r}"))
    else:
        found.append(_found(family, seed, "gave-up", case, f"{said}: {result.message}"))
    if result.bound is not None and result.status is not Status.INFEASIBLE and result.bound > optimum:
        found.append(_found(family, seed, "bound-above-optimum", case, f"{said}; brute force value {optimum!r}"))
    return found


def _with_budget(problem: Problem, budget: float) -> Problem:
    from dataclasses import replace

    return problem.replace(constraints=replace(problem.constraints, budget_usd=budget))


def check_instance(
    problem: Problem, rng: np.random.Generator, *, family: str = "", seed: int | None = None, time_limit_s: float = 20.0
) -> dict[str, list[Finding]]:
    """Every case of :data:`CASES` on one instance; the findings of each (empty: all right)."""
    common: dict[str, Any] = dict(family=family, seed=seed, time_limit_s=time_limit_s)
    out: dict[str, list[Finding]] = {}
    out["front-deadline"] = check_front(problem, (None, deadline_of(problem)), case="front-deadline", **common)
    out["front-whole"] = check_front(problem, (None, None), case="front-whole", **common)
    whole = brute_front(*feasible_plans(at_deadline(problem, NO_DEADLINE_S)))
    if len(whole) >= 2:  # both ends at front points' times: ties with the range's ends
        a, b = sorted(rng.choice(len(whole), size=2, replace=False))
        deadlines: tuple[float | None, float | None] = (whole[a][0], whole[b][0])
    else:  # the lone point's time as the lower end
        deadlines = (whole[0][0], None) if whole else (None, deadline_of(problem))
    out["front-range"] = check_front(problem, deadlines, case=f"front-range {deadlines}", **common)
    times, costs = feasible_plans(problem)
    front = brute_front(times, costs)
    timed = problem
    if problem.constraints.budget_usd is None or rng.random() < 0.5:
        if front and rng.random() < 0.5:
            budget = front[int(rng.integers(0, len(front)))][1]  # exactly a front point's cost
        elif len(costs):
            budget = float(costs[int(rng.integers(0, len(costs)))]) * float(rng.choice([1.0, rng.uniform(0.7, 1.3)]))
        else:
            budget = float(rng.uniform(1, 100))
        if budget > 0 and math.isfinite(budget):  # within the instance format's range
            timed = _with_budget(problem, min(max(budget, 1e-9), 1e15))
    out["time"] = (
        check_objective(timed, Objective("time"), **common) if timed.constraints.budget_usd is not None else []
    )
    if len(front) >= 2 and rng.random() < 0.7:  # the slope between two front points: a tie in value
        i = int(rng.integers(0, len(front) - 1))
        (t0, c0), (t1, c1) = front[i], front[i + 1]
        weight = (c0 - c1) / (t1 - t0)
    else:
        weight = float(rng.choice([0.0, 10 ** rng.uniform(-9, 3)]))
    weight = weight if math.isfinite(weight) and 0 <= weight <= 1e15 else 0.0
    out["weighted"] = check_objective(problem, Objective("weighted", weight), **common)
    return out
