"""The one entry point, ``dnnprov.solve(problem, method=...) -> Result`` (re-exported by the package;
this module is named for its role so that ``dnnprov.solve`` is only ever the function)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dnnprov.errors import InvalidInputError
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.problems.validation import checks as check, plausibility
from dnnprov.progress import INTERRUPTED, Clock, Progress, SolverLog, log_to_stderr, stop_on_signals, stop_requested
from dnnprov.result import Objective, Result, SpotPlan, Status

if TYPE_CHECKING:
    from dnnprov.solvers.objectives.front import Front

METHODS = ("milp", "heuristic", "reference-heuristic", "enumerate")
#: The methods that prove their answers, the only ones for objectives other than cost and for fronts.
EXACT_METHODS = ("milp", "enumerate")


def solve(
    problem: SpotProblem | ServerlessProblem,
    method: str = "milp",
    *,
    time_limit_s: float = 60.0,
    gap: float = 0.0,
    max_plans: int | None = None,
    log: bool | logging.Logger = False,
    robust: int | None = None,
    risk: bool = False,
    deadline_probability: float | None = None,
    takeover_overhead_s: float | None = None,
    replaced: bool = True,
    objective: str | Objective = "cost",
    work_limit: int | None = None,
    callback: Callable[[Progress], None] | None = None,
    warm_start: SpotPlan | None = None,
) -> Result:
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
        Wall-clock limit of every method, counted from this call (set-up and the
        heuristic seed of ``milp`` included). On the limit the result is ``limit`` with
        the best plan found and, for ``milp``, a proven bound.
    gap
        Relative gap at which ``milp`` may stop; ``0`` proves optimality (status
        ``optimal``); a positive gap ends with ``feasible`` and the bound.
    max_plans
        Largest search space ``enumerate`` accepts (default 50 million plans).
    log
        ``True`` prints a solver log (header, incumbent / bound / gap over time, final
        status) to stderr; a :class:`logging.Logger` receives it instead (level INFO).
    robust, risk
        Revocation-aware spot plans (method ``milp`` only, one of the two;
        docs/revocation.md): ``robust=K`` is the cheapest plan meeting T_obj even if any K
        of its spot workers are revoked at the worst moment (replaced after
        ``takeover_overhead_s``, default the paper's 2.1 min, unless ``replaced=False``);
        ``risk=True`` the plan of least expected cost under the instance's interruption
        models, with the deadline met in expectation or, with ``deadline_probability``, at
        that probability. Both are proven exactly (exhaustive search of small quota boxes,
        the spot decomposition beyond) and honour ``time_limit_s`` (status ``limit`` with
        the proven bound). ``deadline_probability``, ``replaced=False`` and
        ``takeover_overhead_s`` without the planner they belong to are refused.
    objective
        ``"cost"`` (least cost under the deadline), ``"time"`` (least training time within
        ``constraints.budget_usd``, which it needs, and the deadline; ties by least cost) or
        ``"weighted:W"`` (least cost + W time, W in $/s). Other than cost: methods ``milp``
        and ``enumerate`` only, ``gap`` 0; ``bound`` and ``gap`` are in the objective's unit
        (docs/solvers.md, "Objectives").
    work_limit
        A deterministic limit beside ``time_limit_s``: the most nodes (cells of the spot
        decomposition, each at most one LP or threshold MILP) ``milp`` processes, summed
        over the exact solves of an objective; reached, the result is ``limit`` with the
        plan and proven bound it had, the same on any machine. The serverless method and
        ``enumerate`` count plans evaluated instead (one unit each).
    callback
        Called with a :class:`~dnnprov.progress.Progress` on every new incumbent and every
        better proven bound of ``milp`` (cost objective); the bound never goes down.
    warm_start
        A spot plan (``dnnprov.SpotPlan``) ``milp`` checks and takes as its first incumbent.

    Ctrl-C (SIGINT, in the main thread, unless the program handles it itself) stops the
    method as its time limit would: the result is ``limit`` with the best plan so far and
    its proven bound, ``details["stopped"] == "interrupted"`` and a message saying so. A
    second Ctrl-C raises :class:`KeyboardInterrupt`.
    """
    started = time.perf_counter()  # the limit counts from here
    with stop_on_signals(only_default=True):
        result = _solve(
            problem,
            method,
            started=started,
            time_limit_s=time_limit_s,
            gap=gap,
            max_plans=max_plans,
            log=log,
            robust=robust,
            risk=risk,
            deadline_probability=deadline_probability,
            takeover_overhead_s=takeover_overhead_s,
            replaced=replaced,
            objective=objective,
            work_limit=work_limit,
            callback=callback,
            warm_start=warm_start,
        )
    return marked_interrupted(result, time_limit_s) if stop_requested() else result


def marked_interrupted(result: Result, time_limit_s: float) -> Result:
    """``result`` of a method stopped by a signal: says so (``details["stopped"]``, message).

    A method that finished its proof before it saw the signal keeps its answer unmarked.
    """
    if result.status in (Status.OPTIMAL, Status.FEASIBLE, Status.INFEASIBLE):
        return result
    message = result.message.replace(f"time limit of {float(time_limit_s):g} s reached", INTERRUPTED)
    message = message.replace(f"time limit of {float(time_limit_s):g} s", INTERRUPTED)
    if INTERRUPTED not in message:
        message = f"{INTERRUPTED}; {message}" if message else INTERRUPTED
    status = Status.LIMIT if result.status is Status.UNKNOWN else result.status
    return dataclasses.replace(
        result, status=status, message=message, details={**result.details, "stopped": INTERRUPTED}
    )


def _solve(
    problem: SpotProblem | ServerlessProblem,
    method: str,
    *,
    started: float,
    time_limit_s: float,
    gap: float,
    max_plans: int | None,
    log: bool | logging.Logger,
    robust: int | None,
    risk: bool,
    deadline_probability: float | None,
    takeover_overhead_s: float | None,
    replaced: bool,
    objective: str | Objective,
    work_limit: int | None = None,
    callback: Callable[[Progress], None] | None = None,
    warm_start: SpotPlan | None = None,
) -> Result:
    """:func:`solve` without the signal handling."""
    from dnnprov.solvers import milp
    from dnnprov.solvers.explain.infeasibility import explain
    from dnnprov.solvers.objectives import beyond_cost as objectives
    from dnnprov.solvers.objectives.fastest import searcher
    from dnnprov.solvers.search import enumeration, heuristics

    if method not in METHODS:
        raise InvalidInputError("method", f"must be one of {', '.join(METHODS)}; got {method!r}")
    time_limit_s = check.number("time_limit_s", time_limit_s, exclusive_minimum=0)
    if work_limit is not None:
        work_limit = check.integer("work_limit", work_limit, minimum=1)
    clock = Clock(time_limit_s, started=started, work_limit=work_limit)
    if warm_start is not None and not (
        isinstance(warm_start, SpotPlan) and isinstance(problem, SpotProblem) and method == "milp"
    ):
        raise InvalidInputError("warm_start", "is a dnnprov.SpotPlan for a spot problem solved by 'milp'")
    gap = check.number("gap", gap, minimum=0)
    if gap >= 1:
        raise InvalidInputError("gap", f"must be below 1, got {gap!r}")
    plans = enumeration.DEFAULT_MAX_PLANS if max_plans is None else check.integer("max_plans", max_plans, minimum=1)
    if not isinstance(problem, (SpotProblem, ServerlessProblem)):
        raise InvalidInputError("problem", f"expected SpotProblem or ServerlessProblem, got {type(problem).__name__}")
    if isinstance(problem, ServerlessProblem) and method == "reference-heuristic":
        raise InvalidInputError("method", "reference-heuristic exists for spot problems only")
    objective = checked_objective(objective, problem, method, gap=gap, robust=robust, risk=risk)
    if robust is None and not risk:
        misplaced = [
            (field, owner)
            for field, owner, given in (
                ("deadline_probability", "risk=True", deadline_probability is not None),
                ("replaced", "robust=K", replaced is not True),
                ("takeover_overhead_s", "robust=K or risk=True", takeover_overhead_s is not None),
            )
            if given
        ]
        if misplaced:
            raise InvalidInputError(misplaced[0][0], f"goes with {misplaced[0][1]}")
    if robust is not None or risk:
        return _with_warnings(
            problem,
            _solve_revocation_aware(
                problem,
                method,
                robust=robust,
                risk=risk,
                deadline_probability=deadline_probability,
                takeover_overhead_s=takeover_overhead_s,
                replaced=replaced,
                max_plans=max_plans,
                clock=clock,
            ),
        )
    with contextlib.ExitStack() as stack:
        logger = log if isinstance(log, logging.Logger) else (stack.enter_context(log_to_stderr()) if log else None)
        solver_log = SolverLog(clock, logger, callback)
        runners: dict[str, Callable[[], Result]]
        if objective.kind != "cost":
            runners = {
                "milp": lambda: (
                    objectives.least_time(problem, exact_min_cost, clock, solver_log, searcher())
                    if objective.kind == "time"
                    else objectives.least_weighted(problem, exact_min_cost, objective, clock, solver_log)
                ),
                "enumerate": lambda: (
                    enumeration.enumerate_spot(problem, clock=clock, objective=objective, max_plans=plans)
                    if isinstance(problem, SpotProblem)
                    else enumeration.enumerate_serverless(problem, clock=clock, objective=objective, max_plans=plans)
                ),
            }
        elif isinstance(problem, SpotProblem):
            runners = {
                "milp": lambda: milp.solve_spot(problem, gap=gap, clock=clock, log=solver_log, start=warm_start),
                "heuristic": lambda: heuristics.spot_heuristic(problem, clock=clock),
                "reference-heuristic": lambda: heuristics.reference_heuristic(problem, clock=clock),
                "enumerate": lambda: enumeration.enumerate_spot(problem, clock=clock, max_plans=plans),
            }
        else:
            runners = {
                "milp": lambda: milp.solve_serverless(problem, gap=gap, clock=clock, log=solver_log),
                "heuristic": lambda: heuristics.serverless_heuristic(problem, clock=clock),
                "enumerate": lambda: enumeration.enumerate_serverless(problem, clock=clock, max_plans=plans),
            }
        try:
            result = runners[method]()
            if method in ("milp", "enumerate"):  # proofs of infeasibility get their reasons
                result = explain(result, problem, clock=clock)
        except InvalidInputError:
            raise
        except Exception as exc:  # noqa: BLE001 (a solver failure is reported, not raised (batches go on))
            kind = "spot" if isinstance(problem, SpotProblem) else "serverless"
            model = problem.model if isinstance(problem, SpotProblem) else "lambda-dnn"
            result = Result(
                status=Status.ERROR,
                method=method,
                kind=kind,
                model=model,
                instance=problem.name,
                solve_seconds=clock.elapsed(),
                message=f"{type(exc).__name__}: {exc}",
                objective=objective,
            )
        if method != "milp" or objective.kind != "cost":
            solver_log.final(result.status.value, result.message)
        if (
            isinstance(problem, SpotProblem)
            and isinstance(result.plan, SpotPlan)
            and problem.plan_zones(result.plan.counts)
        ):
            result = dataclasses.replace(
                result, details={**result.details, "zones": problem.plan_zones(result.plan.counts)}
            )
        return _with_warnings(problem, result)


def checked_objective(
    objective: str | Objective,
    problem: SpotProblem | ServerlessProblem,
    method: str,
    *,
    gap: float,
    robust: int | None,
    risk: bool,
) -> Objective:
    """The parsed objective, refused with one error where it does not apply."""
    parsed = Objective.parse(objective)
    if parsed.kind == "cost":
        return parsed
    if robust is not None or risk:
        raise InvalidInputError("objective", f"robust and risk plans minimize cost; {parsed} is for plain solves")
    if method not in EXACT_METHODS:
        raise InvalidInputError("objective", f"{parsed} is solved by method 'milp' or 'enumerate', not {method!r}")
    if gap:
        raise InvalidInputError("gap", f"objective {parsed} is proven exactly: give gap 0")
    if parsed.kind == "time" and problem.constraints.budget_usd is None:
        raise InvalidInputError(
            "constraints.budget_usd",
            "objective 'time' needs a budget: set constraints.budget_usd in the instance (or dnnprov solve --budget B)",
        )
    return parsed


def exact_min_cost(problem: SpotProblem | ServerlessProblem, clock: Clock) -> Result:
    """The exact min-cost method (``milp``, its solver log silent): the black box of objectives and fronts."""
    from dnnprov.solvers import milp

    quiet = SolverLog(clock)
    quiet.enabled = False
    if isinstance(problem, SpotProblem):
        return milp.solve_spot(problem, clock=clock, log=quiet)
    return milp.solve_serverless(problem, clock=clock, log=quiet)


def pareto(
    problem: SpotProblem | ServerlessProblem,
    deadlines: tuple[float | None, float | None] = (0.0, None),
    *,
    method: str = "milp",
    time_limit_s: float = 60.0,
    max_plans: int | None = None,
) -> Front:
    """Every nondominated (time, cost) plan with its time between two deadlines.

    ``deadlines = (A, B)``: the front of the plans meeting every constraint of ``problem``
    (its budget included) with its deadline replaced by B (``None``: no upper deadline,
    :data:`dnnprov.solvers.objectives.front.NO_DEADLINE_S`), keeping the points of time >= A
    (``None``: 0). ``method``: ``"milp"`` walks the front by exact solves (epsilon-constraint
    steps, docs/solvers.md, "Pareto fronts"); ``"enumerate"`` evaluates every plan (up to
    ``max_plans``, default 50 million). ``time_limit_s`` bounds the whole front; a front
    stopped by it (or by Ctrl-C) has ``complete == False`` and status ``limit``.
    Returns a :class:`dnnprov.solvers.objectives.front.Front`: points fastest first, each with its plan,
    time, cost and ``proven`` (the exact method showed no plan dominates it).
    """
    started = time.perf_counter()
    with stop_on_signals(only_default=True):
        return _pareto(
            problem, deadlines, method=method, started=started, time_limit_s=time_limit_s, max_plans=max_plans
        )


def _pareto(
    problem: SpotProblem | ServerlessProblem,
    deadlines: tuple[float | None, float | None],
    *,
    method: str,
    started: float,
    time_limit_s: float,
    max_plans: int | None,
) -> Front:
    """:func:`pareto` without the signal handling."""
    from dnnprov.solvers.objectives.front import NO_DEADLINE_S, Front, deadline_floor, enumerate_front, walk_front
    from dnnprov.solvers.search.enumeration import DEFAULT_MAX_PLANS

    if not isinstance(problem, (SpotProblem, ServerlessProblem)):
        raise InvalidInputError("problem", f"expected SpotProblem or ServerlessProblem, got {type(problem).__name__}")
    if method not in EXACT_METHODS:
        raise InvalidInputError("method", f"fronts are proven by method 'milp' or 'enumerate', not {method!r}")
    clock = Clock(check.number("time_limit_s", time_limit_s, exclusive_minimum=0), started=started)
    plans = DEFAULT_MAX_PLANS if max_plans is None else check.integer("max_plans", max_plans, minimum=1)
    if not isinstance(deadlines, (tuple, list)) or len(deadlines) != 2:
        raise InvalidInputError("deadlines", f"must be a pair (A, B) of seconds, got {str(deadlines)[:40]}")
    low = 0.0 if deadlines[0] is None else check.number("deadlines", deadlines[0], minimum=0)
    high = NO_DEADLINE_S if deadlines[1] is None else check.number("deadlines", deadlines[1], exclusive_minimum=0)
    floor = deadline_floor(problem)
    if high <= max(low, floor):
        what = f"the takeover overhead {floor:g} s" if floor > low else f"A = {low:g} s"
        raise InvalidInputError("deadlines", f"the upper deadline B = {high:g} s must lie above {what}")
    if method == "milp":
        points, complete, work, message = walk_front(problem, exact_min_cost, low, high, clock)
        stats = {"exact_solves": work}
    else:
        points, complete, work, message = enumerate_front(problem, low, high, clock, plans)
        stats = {"plans_evaluated": work}
    kind = "spot" if isinstance(problem, SpotProblem) else "serverless"
    found = plausibility.findings(problem)
    return Front(
        instance=problem.name,
        kind=kind,
        model=problem.model if isinstance(problem, SpotProblem) else "lambda-dnn",
        method=method,
        deadlines=(low, high),
        budget_usd=problem.constraints.budget_usd,
        points=tuple(points),
        complete=complete,
        stats=stats,
        solve_seconds=clock.elapsed(),
        time_limit_s=float(time_limit_s),
        message=message,
        warnings=tuple((w.field, w.problem) for w in found),
    )


def _with_warnings(problem: SpotProblem | ServerlessProblem, result: Result) -> Result:
    """``result`` carrying the problem's plausibility warnings (``Result.warnings``)."""
    found = plausibility.findings(problem)
    return dataclasses.replace(result, warnings=tuple((w.field, w.problem) for w in found)) if found else result


def _solve_revocation_aware(
    problem: SpotProblem | ServerlessProblem,
    method: str,
    *,
    robust: int | None,
    risk: bool,
    deadline_probability: float | None,
    takeover_overhead_s: float | None,
    replaced: bool,
    max_plans: int | None,
    clock: Clock,
) -> Result:
    """``solve(..., robust=K)`` or ``solve(..., risk=True)``: checks, then the exact planner."""
    from dnnprov.models.training_progress import JOIN_OVERHEAD_S
    from dnnprov.solvers.explain.infeasibility import explain_revocation_aware
    from dnnprov.solvers.revocation.risk import solve_risk
    from dnnprov.solvers.revocation.robust import DEFAULT_MAX_PLANS, solve_robust

    if not isinstance(problem, SpotProblem):
        raise InvalidInputError("robust" if robust is not None else "risk", "exists for spot problems only")
    if robust is not None and risk:
        raise InvalidInputError("robust", "give robust=K or risk=True, not both")
    if method != "milp":
        raise InvalidInputError("method", f"robust and risk plans are exact: use method 'milp', not {method!r}")
    overhead = JOIN_OVERHEAD_S if takeover_overhead_s is None else takeover_overhead_s
    plans = DEFAULT_MAX_PLANS if max_plans is None else max_plans
    if robust is not None:
        if deadline_probability is not None:
            raise InvalidInputError("deadline_probability", "goes with risk=True")
        result = solve_robust(problem, robust, overhead_s=overhead, replaced=replaced, max_plans=plans, clock=clock)
        return explain_revocation_aware(result, problem, clock, f"robust={robust}")
    if replaced is not True:
        raise InvalidInputError("replaced", "goes with robust=K")
    result = solve_risk(
        problem, deadline_probability=deadline_probability, overhead_s=overhead, max_plans=plans, clock=clock
    )
    what = "risk" if deadline_probability is None else f"risk with deadline_probability={deadline_probability:g}"
    return explain_revocation_aware(result, problem, clock, what)
