"""The least training time within a budget, ties by least cost, searched inside the spot decomposition.

Why it is exact. The decomposition (:class:`~dnnprov.solvers.spot.exact.SpotDecomposition`)
closes a cell only when it proves that none of the cell's plans costs less than its
threshold while meeting its cells' deadline T_obj, or after evaluating the plans that might
(see its module doc). Here the threshold is the budget (with the decomposition's margin
for rounding) and never falls, and T_obj only falls: it starts at the problem's deadline and
becomes the time of the best plan so far by (time, cost) among the plans the model has
evaluated within the budget (a judge records it; it sees every nominally feasible plan:
the budget, the deadline and every side row checked). A smaller T_obj only removes plans
from a cell, so every range tightened and every cell closed under an earlier T_obj holds
for the later ones. The judge admits no plan as the decomposition's incumbent, so the
threshold stays the budget.

When the search ends with no open cell, every plan within the budget whose time is at most
the recorded time T* (ties included: the deadline admits T*) was either in a cell closed
without it (impossible: it would have been a plan below the threshold meeting T_obj) or
evaluated, and then recorded unless the recorded plan is at least as good by (time, cost).
So the recorded plan is the least by (time, cost) within the budget: one pass, no second
solve for the ties.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from dnnprov.solvers.objectives.front import Problem
from dnnprov.solvers.outcome import spot_result
from dnnprov.solvers.side_vars import attach
from dnnprov.solvers.spot.exact import SpotDecomposition

from dnnprov.models.spot import SideRows, SpotEvaluation
from dnnprov.problems.spot import SpotProblem
from dnnprov.progress import Clock
from dnnprov.result import Result, Status

SPLIT_TOLERANCE = 2e-6  # a cell is bisected when a relaxation is this much loose at a plan it returned


@dataclass
class FastestTime:
    """What the one-pass search found: the least time within the budget when ``proven``."""

    time_s: float | None  # the fastest plan's time within the budget (None: none found)
    proven: bool  # the search closed every cell: no plan within the budget is faster
    infeasible: bool  # proven, and no plan meets the budget and the deadline at all
    message: str
    #: when proven: the min-cost solve at deadline ``time_s``, warm-started from the fastest plan
    answer: Result | None = None


def fastest_within_budget(problem: SpotProblem, *, side: SideRows | None, clock: Clock) -> FastestTime:
    """The plan of least time, then least cost, within the problem's budget and deadline (module doc)."""
    best = [(math.inf, math.inf)]  # (time, cost) of the best plan so far
    deadline = [problem.slo.time_s]
    plan: list[tuple[np.ndarray, int]] = []

    def judge(counts: np.ndarray, ps: np.ndarray, nominal: SpotEvaluation) -> tuple[np.ndarray, np.ndarray]:
        """Record the best plan by (time, cost) (each is nominally feasible); admit none as the incumbent."""
        times, costs = np.asarray(nominal.time_s, dtype=float), np.asarray(nominal.cost, dtype=float)
        if len(times):
            i = int(np.lexsort((costs, times))[0])
            if (float(times[i]), float(costs[i])) < best[0]:
                best[0] = (float(times[i]), float(costs[i]))
                plan[:] = [(counts[i].copy(), int(ps[i]))]
                deadline[0] = min(deadline[0], best[0][0])
        return np.zeros(len(counts), dtype=bool), costs

    search = SpotDecomposition(
        problem,
        side=attach(side),
        clock=clock,
        deadline=lambda cell: deadline[0],
        judge=judge,
        split_tolerance=SPLIT_TOLERANCE,
    )
    result = search.run(None)
    found = best[0][0] if plan else None
    if result.status is not Status.INFEASIBLE:  # stopped early (no incumbent is ever admitted)
        return FastestTime(found, False, False, result.message)
    if not plan:
        return FastestTime(None, True, True, "every cell closed")
    counts, ps = plan[0]
    answer = spot_result(
        search.terms.model,
        counts,
        ps,
        status=Status.OPTIMAL,
        method="milp",
        started=clock.started,
        stats=dict(search.stats),
    )
    return FastestTime(found, True, False, "every cell closed", answer)


def searcher(side: SideRows | None = None) -> Callable[[Problem, Clock], FastestTime | None]:
    """:func:`fastest_within_budget` with these side rows for spot problems (``None`` for the others)."""

    def run(problem: Problem, clock: Clock) -> FastestTime | None:
        if not isinstance(problem, SpotProblem):
            return None
        return fastest_within_budget(problem, side=side, clock=clock)

    return run
