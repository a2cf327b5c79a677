"""One region per plan through :func:`dnnprov.solve`: the API of the one-region rule.

:func:`solve_one_region` solves a multi-region instance (``TYPE@REGION`` columns) under the
rule that every worker of a plan, and its PS, lie in one region, exactly: one
:func:`dnnprov.solve` per region's subproblem, combined with the bound proven over every
region (:mod:`dnnprov.solvers.regions` says why that bound is valid). ``dnnprov solve
--one-region`` calls it; docs/cloud.md says when the rule applies by default.
"""

from __future__ import annotations

from typing import Any

import dnnprov
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import Result
from dnnprov.solvers.regions import problem_regions, solve_one_region as decompose


def solve_one_region(
    problem: SpotProblem | ServerlessProblem, method: str = "milp", *, time_limit_s: float = 60.0, **options: Any
) -> Result:
    """The best plan whose workers lie in one region (``options``: :func:`dnnprov.solve`'s).

    A serverless problem, or a spot problem of one region, is solved as it is.
    """
    if isinstance(problem, ServerlessProblem):
        return dnnprov.solve(problem, method, time_limit_s=time_limit_s, **options)

    def solve(sub: SpotProblem, seconds: float) -> Result:
        return dnnprov.solve(sub, method, time_limit_s=seconds, **options)

    return decompose(
        problem, solve, method=method, objective=options.get("objective", "cost"), time_limit_s=time_limit_s
    )


def spans_regions(problem: SpotProblem | ServerlessProblem) -> bool:
    """Whether a spot instance has columns in two regions or more (where the rule matters)."""
    return isinstance(problem, SpotProblem) and len(problem_regions(problem)) > 1
