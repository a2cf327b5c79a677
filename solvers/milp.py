"""Method ``milp``: exact solves with HiGHS and a proven optimality certificate."""

from __future__ import annotations

from dnnprov.result import Result
from dnnprov.serverless import ServerlessProblem
from dnnprov.solvers.spot_exact import solve_spot_exact
from dnnprov.spot import SpotProblem


def solve_spot(problem: SpotProblem, *, time_limit_s: float = 60.0, gap: float = 0.0) -> Result:
    """Proven-optimal spot plan by the cell decomposition (see :mod:`spot_exact`)."""
    return solve_spot_exact(problem, time_limit_s=time_limit_s, gap=gap)


def solve_serverless(problem: ServerlessProblem, *, time_limit_s: float = 60.0, gap: float = 0.0) -> Result:
    raise NotImplementedError
