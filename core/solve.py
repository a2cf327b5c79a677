"""The one entry point: ``dnnprov.solve(problem, method=...) -> Result``."""

from __future__ import annotations

import time
from typing import Callable

from dnnprov import _checks as check
from dnnprov.errors import InvalidInputError
from dnnprov.result import Result, Status
from dnnprov.serverless import ServerlessProblem
from dnnprov.spot import SpotProblem

METHODS = ("milp", "heuristic", "reference-heuristic", "enumerate")


def solve(problem: SpotProblem | ServerlessProblem, method: str = "milp", *,
          time_limit_s: float = 60.0, gap: float = 0.0,
          max_plans: int | None = None) -> Result:
    """Solve a spot or serverless problem.

    Parameters
    ----------
    problem
        A validated :class:`SpotProblem` or :class:`ServerlessProblem`.
    method
        ``"milp"`` (exact: HiGHS with a proven bound), ``"heuristic"`` (the paper's
        Algorithm 1), ``"reference-heuristic"`` (spot only: the authors' code) or
        ``"enumerate"`` (exhaustive search, refused beyond ``max_plans``).
    time_limit_s
        Wall-clock limit of ``milp``; on the limit the result is ``limit`` with the
        incumbent and the proven bound.
    gap
        Relative gap at which ``milp`` may stop; ``0`` proves optimality (status
        ``optimal``); a positive gap ends with ``feasible`` and the bound.
    max_plans
        Largest search space ``enumerate`` accepts (default 50 million plans).
    """
    from dnnprov.solvers import enumeration, heuristics, milp

    if method not in METHODS:
        raise InvalidInputError("method", f"must be one of {', '.join(METHODS)}; got {method!r}")
    time_limit_s = check.number("time_limit_s", time_limit_s, exclusive_minimum=0)
    gap = check.number("gap", gap, minimum=0)
    if gap >= 1:
        raise InvalidInputError("gap", f"must be below 1, got {gap!r}")
    limit = {} if max_plans is None else {"max_plans": check.integer("max_plans", max_plans, minimum=1)}
    runners: dict[str, Callable[[], Result]]
    if isinstance(problem, SpotProblem):
        runners = {
            "milp": lambda: milp.solve_spot(problem, time_limit_s=time_limit_s, gap=gap),
            "heuristic": lambda: heuristics.spot_heuristic(problem),
            "reference-heuristic": lambda: heuristics.reference_heuristic(problem),
            "enumerate": lambda: enumeration.enumerate_spot(problem, **limit),
        }
    elif isinstance(problem, ServerlessProblem):
        runners = {
            "milp": lambda: milp.solve_serverless(problem, time_limit_s=time_limit_s, gap=gap),
            "heuristic": lambda: heuristics.serverless_heuristic(problem),
            "enumerate": lambda: enumeration.enumerate_serverless(problem, **limit),
        }
        if method == "reference-heuristic":
            raise InvalidInputError("method", "reference-heuristic exists for spot problems only")
    else:
        raise InvalidInputError("problem", f"expected SpotProblem or ServerlessProblem, got {type(problem).__name__}")
    started = time.perf_counter()
    try:
        return runners[method]()
    except InvalidInputError:
        raise
    except Exception as exc:  # a solver failure is reported, not raised (batches go on)
        kind = "spot" if isinstance(problem, SpotProblem) else "serverless"
        model = problem.model if isinstance(problem, SpotProblem) else "lambda-dnn"
        return Result(status=Status.ERROR, method=method, kind=kind, model=model,
                      instance=problem.name, solve_seconds=time.perf_counter() - started,
                      message=f"{type(exc).__name__}: {exc}")
