"""Method ``milp``: exact solves with HiGHS and a proven optimality certificate."""

from __future__ import annotations

from dnnprov.result import Result
from dnnprov.serverless import ServerlessProblem
from dnnprov.serverless_model import ServerlessSideRows
from dnnprov.solvers.serverless_exact import solve_serverless_exact
from dnnprov.solvers.spot_exact import solve_spot_exact
from dnnprov.spot import SpotProblem
from dnnprov.spot_model import SideRows


def solve_spot(problem: SpotProblem, *, side: SideRows | None = None,
               time_limit_s: float = 60.0, gap: float = 0.0) -> Result:
    """Proven-optimal spot plan by the cell decomposition (:mod:`spot_exact`)."""
    return solve_spot_exact(problem, side=side, time_limit_s=time_limit_s, gap=gap)


def solve_serverless(problem: ServerlessProblem, *, side: ServerlessSideRows | None = None,
                     time_limit_s: float = 60.0, gap: float = 0.0) -> Result:
    """Proven-optimal serverless plan by bound-ordered evaluation and a column MILP."""
    return solve_serverless_exact(problem, side=side, time_limit_s=time_limit_s, gap=gap)
