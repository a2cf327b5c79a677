"""The least training time within a budget, searched inside the spot decomposition (one pass).

Why it is exact. The decomposition (:class:`~dnnprov.solvers.spot.exact.SpotDecomposition`)
closes a cell only when it proves that none of the cell's plans costs less than its
threshold while meeting its cells' deadline T_obj, or after evaluating the plans that might
(see its module doc). Here the threshold is the budget (with the decomposition's margin
for rounding) and never falls, and T_obj is a deadline that only falls: it starts at the
problem's and becomes, whenever an evaluated plan within the budget is faster than every
one before, the largest deadline admitting exactly the times below that plan's
(:func:`~.front.faster_than`). A smaller T_obj only removes plans from a cell, so every
range tightened and every cell closed under an earlier T_obj holds for the later ones. The
plans are kept from becoming the decomposition's incumbent (a judge that admits none), so
the threshold stays the budget; the judge records the fastest plan within the budget among
all plans the model evaluates (the judge sees every nominally feasible plan: the budget,
the deadline and every side row checked).

When the search ends with no open cell, every plan within the budget that is faster than
the recorded one would have been in an open cell or evaluated: none exists, so the recorded
time T* is the least time within the budget. The plan of least cost among those of time T*
is then the min-cost optimum at deadline T* (no plan within the budget is faster): one more
exact solve, warm-started from the fastest plan found (it only sets the first incumbent).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from dnnprov.solvers.objectives.front import Problem, faster_than
from dnnprov.solvers.side_vars import attach
from dnnprov.solvers.spot.exact import SpotDecomposition, solve_spot_exact

from dnnprov.models.spot import SideRows, SpotEvaluation
from dnnprov.problems.spot import SpotProblem
from dnnprov.progress import Clock, SolverLog
from dnnprov.result import Result, SpotPlan, Status


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
    """The least time of a spot plan within the problem's budget and deadline (module doc)."""
    best = [math.inf]
    deadline = [problem.slo.time_s]
    plan: list[SpotPlan] = []

    def judge(counts: np.ndarray, ps: np.ndarray, nominal: SpotEvaluation) -> tuple[np.ndarray, np.ndarray]:
        """Record the fastest plan (each is nominally feasible); admit none as the incumbent."""
        times = np.asarray(nominal.time_s, dtype=float)
        if len(times) and float(times.min()) < best[0]:
            i = int(np.argmin(times))
            best[0] = float(times[i])
            plan[:] = [SpotPlan(dict(zip(problem.columns().labels, map(int, counts[i]))), int(ps[i]))]
            below = faster_than(problem, best[0])
            # None: no deadline below it can be posed (it would not exceed the takeover
            # overhead), and then no plan is faster: every plan's time exceeds the overhead
            deadline[0] = min(deadline[0], below if below is not None else problem.slo.takeover_overhead_s)
        return np.zeros(len(counts), dtype=bool), np.asarray(nominal.cost, dtype=float)

    search = SpotDecomposition(problem, side=attach(side), clock=clock, deadline=lambda cell: deadline[0], judge=judge)
    result = search.run(None)
    found = best[0] if math.isfinite(best[0]) else None
    if result.status is Status.INFEASIBLE:  # every cell closed (no incumbent was ever admitted)
        if found is None:
            return FastestTime(None, True, True, "every cell closed")
        quiet = SolverLog(clock)
        quiet.enabled = False
        at_found = problem.replace(slo=dataclasses.replace(problem.slo, time_s=found))
        answer = solve_spot_exact(at_found, side=side, clock=clock, log=quiet, start=plan[0])
        return FastestTime(found, True, False, "every cell closed", answer)
    return FastestTime(found, False, False, result.message)


def searcher(side: SideRows | None = None) -> Callable[[Problem, Clock], FastestTime | None]:
    """:func:`fastest_within_budget` with these side rows for spot problems (``None`` for the others)."""

    def run(problem: Problem, clock: Clock) -> FastestTime | None:
        if not isinstance(problem, SpotProblem):
            return None
        return fastest_within_budget(problem, side=side, clock=clock)

    return run
