"""Solving the Pyomo models users see (:mod:`dnnprov.formulations`), user constraints included.

:func:`solve_model` finds the problem a model was built from, turns the linear constraints
the user added into side rows, and runs one of dnnprov's methods on the problem with those
rows; the plan is loaded back into the model's variables. The MINLP statement itself is
only handed to a general solver by :func:`solve_model_scip`, an independent cross-check
that certifies nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial

import numpy as np
import pyomo.environ as pyo

from dnnprov.dispatch import METHODS
from dnnprov.errors import InvalidInputError
from dnnprov.formulations import serverless as serverless_form, spot as spot_form
from dnnprov.models.spot import SideRows, SpotModel
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import Objective, Result, ServerlessPlan, SpotPlan, Status
from dnnprov.solvers.outcome import spot_result


def _problem(model: pyo.ConcreteModel) -> SpotProblem | ServerlessProblem:
    problem = getattr(model, spot_form.PROBLEM_ATTR, None)
    if not isinstance(problem, (SpotProblem, ServerlessProblem)):
        raise InvalidInputError(
            "model", "was not built by dnnprov.formulations (create_spot_model or create_serverless_model)"
        )
    return problem


def solve_model(
    model: pyo.ConcreteModel,
    method: str = "milp",
    *,
    time_limit_s: float = 60.0,
    gap: float = 0.0,
    max_plans: int | None = None,
) -> Result:
    """Solve a model built by :func:`~dnnprov.formulations.spot.create_spot_model` or
    :func:`~dnnprov.formulations.serverless.create_serverless_model`.

    Parameters
    ----------
    model
        The Pyomo model, possibly with linear constraints added on the plan variables
        (``m.n``, ``m.s``, ``m.workers``, the indicators ``m.performance.used[c]``;
        serverless ``m.n``, ``m.s``, ``m.memory_mb``) and on variables of your own
        (integer, binary, continuous) anywhere outside ``m.performance``. Its one active
        objective is ``m.performance.cost`` (the default), ``m.performance.T`` (least
        time within the budget) or ``m.performance.cost + W * m.performance.T``, minimized
        (:func:`dnnprov.formulations.spot.model_objective`); any other is refused by name.
    method
        ``"milp"`` (exact, with a proven bound), ``"enumerate"`` (exhaustive search),
        ``"heuristic"`` or ``"reference-heuristic"``; the heuristics do not know user
        constraints and are refused when there are any.
    time_limit_s, gap, max_plans
        As in :func:`dnnprov.solve`.

    Returns
    -------
    Result
        The method's result; a plan it returns is also loaded into the model's variables
        (``m.n``, ``m.s``, ... and every performance variable). Ctrl-C stops it as in
        :func:`dnnprov.solve`: ``limit`` with the best plan so far, ``details["stopped"]``
        ``== "interrupted"``.
    """
    problem = _problem(model)
    if method not in METHODS:
        raise InvalidInputError("method", f"must be one of {', '.join(METHODS)}; got {method!r}")
    if time_limit_s <= 0:
        raise InvalidInputError("time_limit_s", f"must be > 0, got {time_limit_s!r}")
    if not 0 <= gap < 1:
        raise InvalidInputError("gap", f"must be in [0, 1), got {gap!r}")
    spot = isinstance(problem, SpotProblem)
    form = spot_form if spot else serverless_form
    from dnnprov.solvers.side_vars import attach

    user = attach(form.side_rows(model, builtin=False))  # also validates the model
    if method in ("heuristic", "reference-heuristic") and user is not None:
        raise InvalidInputError(
            "method",
            f"{method} does not know user constraints (here: {', '.join(user.names)}); use 'milp' or 'enumerate'",
        )
    side = attach(form.side_rows(model)) if user is not None else None
    objective = Objective.parse(spot_form.model_objective(model))
    limit = {} if max_plans is None else {"max_plans": max_plans}
    from dnnprov.dispatch import checked_objective, marked_interrupted, solve
    from dnnprov.progress import Clock, SolverLog, stop_on_signals, stop_requested
    from dnnprov.solvers.objectives import beyond_cost as objectives
    from dnnprov.solvers.objectives.fastest import searcher
    from dnnprov.solvers.search.enumeration import enumerate_serverless, enumerate_spot
    from dnnprov.solvers.serverless_exact import solve_serverless_exact
    from dnnprov.solvers.spot.exact import solve_spot_exact

    checked_objective(objective, problem, method, gap=gap, robust=None, risk=False)
    clock = Clock(time_limit_s)

    def exact(prob: SpotProblem | ServerlessProblem, clock: Clock) -> Result:
        """The exact min-cost solve with the side rows (the black box of the objectives)."""
        if isinstance(prob, SpotProblem):
            return solve_spot_exact(prob, side=side, gap=gap, clock=clock)
        return solve_serverless_exact(prob, side=side, gap=gap, clock=clock)

    def by_objective() -> Result:
        quiet = SolverLog(clock)
        quiet.enabled = False
        if objective.kind == "time":
            return objectives.least_time(problem, exact, clock, quiet, searcher(side))
        return objectives.least_weighted(problem, exact, objective, clock, quiet)

    enumerate_ = enumerate_spot if spot else enumerate_serverless
    runners: dict[str, Callable[[], Result]]
    if side is None:
        runners = {
            name: partial(
                solve, problem, name, time_limit_s=time_limit_s, gap=gap, max_plans=max_plans, objective=objective
            )
            for name in METHODS
        }
    else:
        runners = {
            "milp": (lambda: exact(problem, clock)) if objective.kind == "cost" else by_objective,
            "enumerate": lambda: enumerate_(
                problem,  # type: ignore[arg-type]  # the enumerator of this problem's kind (spot or serverless)
                side=side,
                clock=clock,
                objective=objective,
                **limit,
            ),
        }
    started = time.perf_counter()
    try:
        with stop_on_signals(only_default=True):
            result = runners[method]()
        if stop_requested():
            result = marked_interrupted(result, time_limit_s)
        if method in ("milp", "enumerate"):  # the reasons name the user's constraints
            from dnnprov.solvers.explain.infeasibility import explain

            result = explain(result, problem, clock=Clock(time_limit_s, started=started), side=user)
    except InvalidInputError:
        raise
    except Exception as exc:  # noqa: BLE001 (reported like dnnprov.solve does, not raised)
        return Result(
            status=Status.ERROR,
            method=method,
            kind="spot" if spot else "serverless",
            model=problem.model if isinstance(problem, SpotProblem) else "lambda-dnn",
            instance=problem.name,
            solve_seconds=time.perf_counter() - started,
            message=f"{type(exc).__name__}: {exc}",
        )
    if result.plan is not None:
        if isinstance(result.plan, SpotPlan):
            spot_form.load_plan(model, result.plan.counts, result.plan.ps)
        else:
            serverless_form.load_plan(model, result.plan.functions, result.plan.memory_mb, result.plan.ps)
        _load_own(model, side, result)
    return result


def _load_own(model: pyo.ConcreteModel, side, result: Result) -> None:
    """Give the user's own variables values that fit the plan (one of possibly many)."""
    from dnnprov.solvers.side_vars import own_values

    if side is None or side.own is None or result.plan is None:
        return
    plan = result.plan
    if isinstance(side, SideRows) and isinstance(plan, SpotPlan):
        counts = np.array([[plan.counts[c] for c in model.C]])
        fixed = side.fixed_part(counts, plan.ps)[0]
    elif isinstance(plan, ServerlessPlan):
        fixed = side.a_n * plan.functions + side.a_m * plan.memory_mb + side.a_s * plan.ps
    else:
        return
    values = own_values(side, fixed)
    for name, value in (values or {}).items():
        var = model.find_component(name)
        if var is not None and not var.fixed:
            var.set_value(value, skip_validation=True)


# ---------------------------------------------------------------------- SCIP cross-check
def scip_available() -> bool:
    """Whether PySCIPOpt (the optional ``scip`` extra) is installed and usable."""
    try:
        from pyomo.contrib.solver.common.factory import SolverFactory

        return bool(SolverFactory("scip_direct").available())
    except Exception:  # noqa: BLE001 - any failure means "not available"
        return False


def solve_model_scip(
    model: pyo.ConcreteModel, *, time_limit_s: float = 30.0, gap: float = 1e-7, options: dict | None = None
) -> Result:
    """Solve the spot MINLP statement directly with SCIP (PySCIPOpt) -- a second opinion.

    SCIP gets the model exactly as stated (bilinear terms, divisions, square roots, user
    constraints included). Its answer is re-evaluated with :class:`~dnnprov.SpotModel`
    and the user's side rows; the result is never ``optimal`` (SCIP's spatial
    branch-and-bound has been seen to stop at plans 6-15 % above the optimum with tight
    feasibility tolerances, see solver-notes), and ``bound`` is SCIP's dual bound only
    as information in ``stats``. The ``reference`` model's rounding is not in the MINLP,
    so only ``paper`` models are accepted.

    ``gap`` is SCIP's relative gap limit: with the default 0 SCIP keeps branching on the
    continuous variables long after its bounds agree to 8 digits. ``options`` are passed
    to SCIP as parameters (e.g. ``{"numerics/feastol": 1e-8}``). SCIP's log is off by
    default (``display/verblevel`` 0): Pyomo captures it through a pipe that a thread
    drains, and PySCIPOpt holds the GIL while solving, so a log longer than the pipe
    buffer (~64 KB, a solve of some seconds) blocks SCIP for good.
    """
    problem = _problem(model)
    if not isinstance(problem, SpotProblem):
        raise InvalidInputError("model", "the SCIP cross-check states the spot MINLP only")
    if problem.model != "paper":
        raise InvalidInputError(
            "model", "the reference model's rounding is not part of the MINLP; cross-check 'paper' models only"
        )
    from dnnprov.solvers.side_vars import attach

    side = attach(spot_form.side_rows(model))
    started = time.perf_counter()
    from pyomo.contrib.solver.common.factory import SolverFactory

    solver = SolverFactory("scip_direct")
    if not solver.available():
        raise InvalidInputError("solver", "PySCIPOpt is not installed (pip install 'dnnprov[scip]')")
    results = solver.solve(
        model,
        time_limit=time_limit_s,
        rel_gap=gap,
        load_solutions=False,
        raise_exception_on_nonoptimal_result=False,
        solver_options={"display/verblevel": 0, **(options or {})},
    )
    seconds = time.perf_counter() - started
    stats = {
        "scip_termination": str(results.termination_condition),
        "scip_objective": results.incumbent_objective,
        "scip_bound": results.objective_bound,
    }
    sm = SpotModel(problem, side)
    has_solution = results.incumbent_objective is not None and math.isfinite(results.incumbent_objective)
    if not has_solution:
        infeasible = "infeasible" in str(results.termination_condition).lower()
        return Result(
            status=Status.UNKNOWN,
            method="scip-minlp",
            kind="spot",
            model=problem.model,
            instance=problem.name,
            solve_seconds=seconds,
            stats=stats,
            message="SCIP reports the MINLP infeasible (not a certificate)"
            if infeasible
            else "SCIP found no plan within its limits",
        )
    results.solution_loader.load_vars()
    counts, ps = spot_form.plan_of(model)
    ev = sm.evaluate(counts[None, :], ps)
    if not ev.feasible[0]:
        return Result(
            status=Status.UNKNOWN,
            method="scip-minlp",
            kind="spot",
            model=problem.model,
            instance=problem.name,
            solve_seconds=seconds,
            stats=stats,
            message=f"SCIP's plan {counts.tolist()} (ps={ps}) fails the exact model (tolerances)",
        )
    spot_form.load_plan(model, counts, ps)
    return spot_result(
        sm,
        counts,
        ps,
        status=Status.FEASIBLE,
        method="scip-minlp",
        started=started,
        message="independent MINLP solve by SCIP; not a certificate",
        stats=stats,
    )
