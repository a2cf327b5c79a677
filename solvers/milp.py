"""Method ``milp``: exact solves with HiGHS and a proven optimality certificate."""

from __future__ import annotations

from dnnprov.solvers.serverless_exact import solve_serverless_exact
from dnnprov.solvers.spot.exact import solve_spot_exact

from dnnprov.models.serverless import ServerlessSideRows
from dnnprov.models.spot import SideRows
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.progress import Clock, SolverLog
from dnnprov.result import Result, SpotPlan


def solve_spot(
    problem: SpotProblem,
    *,
    side: SideRows | None = None,
    time_limit_s: float = 60.0,
    gap: float = 0.0,
    clock: Clock | None = None,
    log: SolverLog | None = None,
    start: SpotPlan | None = None,
) -> Result:
    """Proven-optimal spot plan by the cell decomposition (:mod:`dnnprov.solvers.spot.exact`).

    ``clock`` (default: ``time_limit_s`` from now) bounds the whole solve; ``start`` is a warm start.
    """
    return solve_spot_exact(problem, side=side, gap=gap, clock=clock or Clock(time_limit_s), log=log, start=start)


def solve_serverless(
    problem: ServerlessProblem,
    *,
    side: ServerlessSideRows | None = None,
    time_limit_s: float = 60.0,
    gap: float = 0.0,
    clock: Clock | None = None,
    log: SolverLog | None = None,
) -> Result:
    """Proven-optimal serverless plan by bound-ordered evaluation and a column MILP."""
    return solve_serverless_exact(problem, side=side, gap=gap, clock=clock or Clock(time_limit_s), log=log)
