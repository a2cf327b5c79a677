"""Plans of least expected cost under the offers' interruption models (``--risk``), proven optimal.

**Revocation model.** Each spot worker of column m is revoked as a Poisson process of rate
``lambda_m`` per hour (its type's :class:`~dnnprov.problems.interruption.Interruption`; on-demand workers are
never revoked). A revocation of one worker of m costs ``d_m`` seconds of full-plan time:

    d_m = o * max(0, D(e_m)) + w,   D(e_m) = 1 - sigma_{n - e_m} / sigma_n

where o is the takeover overhead after which the worker is replaced by the same type at
the same price (the survivors train meanwhile; :mod:`dnnprov.solvers.revocation.robust` derives
``o D``, clamped at 0: a revocation never speeds training up), and ``w`` the work lost
since the last checkpoint (``lost_work_s``; default 0: under ASP the PS keeps the
parameters, so a worker's loss loses no finished update). Revocations keep arriving at
the plan's full rate ``Lambda = sum_m n_m lambda_m`` while delays run (conservative).

**Replacement.** ``replacement="spot"`` replaces a revoked worker at its spot price;
``"on-demand"`` (the default: the mean regain times fitted from the real AWS traces are
50 min to 6 h, 2.7-3.8 h for the 16-node V100 pools, longer than most training runs) replaces it by an on-demand worker of the same type, the
reserve a plan holds, so each of the ``n_m`` spot slots of m pays
``p_od,m - p_m`` per hour from its first revocation on: on average
``n_m (p_od,m - p_m) (E[T] - (1 - exp(-lambda_m E[T])) / lambda_m)`` (evaluated at the
expected duration; the objective is this stated function). Replacements are then still
counted as revocable in rho, which only lengthens E[T].

**Expected time and cost.** Every second of progress brings on average
``rho = sum_m n_m lambda_m d_m / 3600`` seconds of delay, and every delay second again rho
(a renewal argument), so with ``rho < 1`` the expected time is

    E[T] = T_core / (1 - rho) + o_fixed

(T_core = j / x of eq. 1, o_fixed the instance's own ``slo.takeover_overhead_s``), and the
expected cost ``E[C] = price_rate * E[T] / 3600 + replacement premium``: the whole plan is
billed for the whole run (revoked workers are in fact not billed while being replaced).

**Deadline.** ``deadline_probability=None``: ``E[T] <= T_obj``. Else ``q``: the plan must
meet T_obj with probability at least q, which we guarantee through
``P(Poisson(Lambda T_obj / 3600) <= k*) >= q`` with ``k* = floor((T_obj - T) / d_safe)``,
``d_safe = o + w`` for a plan with a revocable spot worker (T the nominal time): if at most
k* revocations happen before T_obj, their outages (each at most o long: the replacement
joins after o) cover at most ``k* o`` seconds, during which the plan progresses at a speed
>= 0 and outside which it runs whole at full speed, and each loses at most w seconds of
work; so the delay accrued by T_obj is at most ``k* d_safe`` and training has ended. (The
per-revocation delay ``d_m`` of E[T] would not do here: outages may overlap, and two at
once can stop a 2-worker plan entirely, far more than the sum of their one-at-a-time drops.)

**Exact methods.** ``rho >= 0`` and a premium ``>= 0`` (on-demand prices at least the spot
ones, checked) give ``E[C] >= C`` (the nominal cost, eq. 11) and both
deadline forms imply ``T <= T_obj``, so every admissible plan is nominally feasible.
``method="enumerate"``: the nominally feasible plans of the quota box are scanned in
increasing nominal cost, keeping the least E[C]; the scan stops at the first plan whose
nominal cost is at least the best E[C] found (it and every later plan have
``E[C] >= C >=`` that best). ``method="decompose"``: the spot decomposition with E[C] and
the deadline form in its exact evaluation (:mod:`dnnprov.solvers.revocation.robust_exact`); its
bounds on C bound E[C]. ``"auto"`` enumerates small boxes and decomposes the rest.

Proven optimal: the expected cost E[C] of this model among the plans meeting the deadline
form, over the whole quota box.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from dnnprov.solvers.outcome import spot_result
from dnnprov.solvers.revocation.robust import (
    AUTO_ENUMERATION,
    DEFAULT_MAX_PLANS,
    METHODS,
    TimeLimitReached,
    plan_grid,
    spot_columns,
)
from dnnprov.solvers.search.enumeration import spot_space_size
from scipy.special import pdtr  # P(Poisson(mean) <= k); scipy.stats would add a second of start-up

from dnnprov.errors import InvalidInputError
from dnnprov.models.spot import SpotModel
from dnnprov.models.training_progress import JOIN_OVERHEAD_S, progress_speed, require_paper_model
from dnnprov.problems.spot import SpotProblem
from dnnprov.problems.validation import checks as check
from dnnprov.progress import Clock
from dnnprov.result import Result, SpotPlan, Status


def column_rates(problem: SpotProblem, model: SpotModel) -> np.ndarray:
    """Revocations per instance-hour of each column (0 on-demand); spot types need a model."""
    rates = np.zeros(len(model.columns))
    types = {t.name: t for t in problem.instance_types}
    for i in spot_columns(model):
        t = types[model.columns.type_names[i]]
        if t.interruption is None:
            if model.columns.upper[i] == 0:
                continue
            raise InvalidInputError(
                f"instance_types.{t.name}.interruption",
                "missing: --risk needs every offered spot type's interruption model "
                "(from a catalog's Spot Advisor bucket or `dnnprov risk fit`)",
            )
        rates[i] = t.interruption.rate_per_h
    return rates


def replacement_premium(problem: SpotProblem, model: SpotModel, replacement: str) -> np.ndarray:
    """$/h more that a replacement of each column costs than the worker it replaces."""
    premium = np.zeros(len(model.columns))
    if replacement == "spot":
        return premium
    types = {t.name: t for t in problem.instance_types}
    for i in spot_columns(model):
        t = types[model.columns.type_names[i]]
        if model.columns.upper[i] == 0:
            continue
        if t.on_demand_price_per_h is None:
            raise InvalidInputError(
                f"instance_types.{t.name}.on_demand_price_per_h",
                "missing: on-demand replacement needs it (or use replacement spot)",
            )
        if t.on_demand_price_per_h < t.spot_price_per_h:
            raise InvalidInputError(
                f"instance_types.{t.name}.on_demand_price_per_h",
                "below the spot price: on-demand replacement would not be a premium",
            )
        premium[i] = t.on_demand_price_per_h - t.spot_price_per_h
    return premium


def expected_outcome(
    model: SpotModel,
    rates: np.ndarray,
    counts: np.ndarray,
    ps: np.ndarray,
    *,
    overhead_s: float,
    lost_work_s: float,
    premium: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """E[T], E[C], rho, Lambda (per hour) and d_safe of each plan (module docstring)."""
    counts = np.atleast_2d(np.asarray(counts, dtype=np.int64))
    ps = np.broadcast_to(np.asarray(ps, dtype=np.int64), (len(counts),))
    ev = model.evaluate(counts, ps)
    sigma, _ = progress_speed(model, counts, ps)
    fixed = model.problem.slo.takeover_overhead_s
    core = ev.time_s - fixed
    rho = np.zeros(len(counts))
    d_safe = np.zeros(len(counts))
    for i in spot_columns(model):
        if rates[i] == 0:
            continue
        has = counts[:, i] > 0
        removed = counts.copy()
        removed[:, i] -= has
        rest, _ = progress_speed(model, removed, ps)
        with np.errstate(divide="ignore", invalid="ignore"):
            drop = np.where(sigma > 0, 1.0 - rest / sigma, 1.0)
        d = np.where(has, overhead_s * np.maximum(drop, 0.0) + lost_work_s, 0.0)
        rho += counts[:, i] * rates[i] * d / 3600
        d_safe = np.where(has, overhead_s + lost_work_s, d_safe)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected_time = np.where(rho < 1, core / (1 - rho) + fixed, np.inf)
    rate = counts @ model.columns.price + ps * model.problem.platform.ps_price_per_h
    extra = np.zeros(len(counts))
    if premium is not None:
        hours = np.where(np.isfinite(expected_time), expected_time, 0.0) / 3600
        for column in np.flatnonzero((premium > 0) & (rates > 0)):
            converted_hours = hours - (1 - np.exp(-rates[column] * hours)) / rates[column]
            extra += counts[:, column] * premium[column] * converted_hours
    cost = np.where(np.isfinite(expected_time), rate * expected_time / 3600 + extra, np.inf)
    return {
        "time": expected_time,
        "cost": cost,
        "rho": rho,
        "events_per_h": counts @ rates,
        "d_safe": d_safe,
        "nominal_time": ev.time_s,
    }


def deadline_probability_bound(outcome: dict[str, np.ndarray], time_obj: float) -> np.ndarray:
    """The proven lower bound ``P(Poisson(Lambda T_obj) <= k*)`` on meeting T_obj (module docstring)."""
    slack = time_obj - outcome["nominal_time"]
    d_safe = outcome["d_safe"]
    with np.errstate(divide="ignore", invalid="ignore"):
        k_star = np.where(d_safe > 0, np.floor(slack / np.where(d_safe > 0, d_safe, 1.0)), np.inf)
    mean = outcome["events_per_h"] * time_obj / 3600
    prob = np.where(np.isinf(k_star), 1.0, pdtr(np.where(np.isinf(k_star), 0, k_star), mean))
    return np.where(slack >= 0, prob, 0.0)


def solve_risk(
    problem: SpotProblem,
    *,
    deadline_probability: float | None = None,
    overhead_s: float = JOIN_OVERHEAD_S,
    lost_work_s: float = 0.0,
    replacement: str = "on-demand",
    max_plans: int = DEFAULT_MAX_PLANS,
    time_limit_s: float = 60.0,
    method: str = "auto",
    clock: Clock | None = None,
) -> Result:
    """The plan of least expected cost under the interruption models (module docstring).

    ``deadline_probability`` ``None`` asks ``E[T] <= T_obj``; a value q in (0, 1) asks that
    T_obj is met with probability at least q (through the proven Poisson bound).
    ``replacement`` ``"on-demand"`` or ``"spot"``: the market of replacements. ``method``
    ``"auto"``, ``"enumerate"`` or ``"decompose"`` as for :func:`~dnnprov.solvers.revocation.robust.solve_robust`;
    ``clock`` (else one of ``time_limit_s``) bounds the solve (status ``limit`` with the
    proven bound). ``result.cost`` and ``time_s`` are the expected cost and time
    (``bound`` = cost when optimal); ``details`` adds ``nominal_cost``, ``nominal_time_s``,
    ``revocations_expected`` and ``deadline_probability_lower_bound``.
    """
    clock = clock or Clock(check.number("time_limit_s", time_limit_s, exclusive_minimum=0))
    require_paper_model(problem)
    if deadline_probability is not None:
        deadline_probability = check.number(
            "deadline_probability", deadline_probability, exclusive_minimum=0, maximum=1
        )
    overhead_s = check.number("takeover_overhead_s", overhead_s, minimum=0)
    lost_work_s = check.number("lost_work_s", lost_work_s, minimum=0)
    replacement = check.choice("replacement", replacement, ("on-demand", "spot"))
    method = check.choice("method", method, METHODS)
    name = "risk" if deadline_probability is None else f"risk-p{deadline_probability:g}"
    model = SpotModel(problem)
    rates = column_rates(problem, model)
    premium = replacement_premium(problem, model, replacement)

    def outcome(counts: np.ndarray, ps: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
        out = expected_outcome(
            model, rates, counts, ps, overhead_s=overhead_s, lost_work_s=lost_work_s, premium=premium
        )
        if deadline_probability is None:
            ok = out["time"] <= problem.slo.time_s * (1 + 1e-12)
        else:
            ok = (deadline_probability_bound(out, problem.slo.time_s) >= deadline_probability) & np.isfinite(
                out["time"]
            )
        return out, ok

    size = spot_space_size(problem)
    if method == "decompose" or (method == "auto" and size > min(AUTO_ENUMERATION, max_plans)):
        from dnnprov.solvers.revocation.robust_exact import decompose_risk

        def admissible_cost(counts: np.ndarray, ps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            out, ok = outcome(counts, ps)
            return ok, out["cost"]

        found, stats = decompose_risk(problem, model, admissible_cost, clock)
        plan = found.plan if isinstance(found.plan, SpotPlan) else None
        counts = None if plan is None else np.array([plan.counts.get(label, 0) for label in model.columns.labels])
        ps = plan.ps if plan is not None else 1
        message = {
            Status.OPTIMAL: "least expected cost, proven by the spot decomposition",
            Status.INFEASIBLE: "proven: no plan meets the deadline under the interruption model",
        }
        return _risk_result(
            model,
            counts,
            ps,
            found.status,
            name,
            clock,
            outcome,
            stats,
            bound=found.bound if found.bound is not None else 0.0,
            message=message.get(found.status, found.message),
            extra={"takeover_overhead_s": overhead_s, "lost_work_s": lost_work_s, "replacement": replacement},
        )
    if size > max_plans:
        raise InvalidInputError(
            "max_plans",
            f"the quota box holds {size:,} plans, more than {max_plans:,} (method decompose has no such limit)",
        )
    extra = {"takeover_overhead_s": overhead_s, "lost_work_s": lost_work_s, "replacement": replacement}
    try:
        grid = plan_grid(problem, max_plans=max_plans, clock=clock)
    except TimeLimitReached:
        return _risk_result(
            model,
            None,
            1,
            Status.LIMIT,
            name,
            clock,
            outcome,
            {},
            bound=0.0,
            extra=extra,
            message=f"time limit of {clock.limit_s:g} s reached while enumerating the quota box",
        )
    order = grid.by_cost()
    best_cost, best, checked, limited = math.inf, None, 0, False
    for begin in range(0, len(order), 4096):
        idx = order[begin : begin + 4096]
        if grid.cost[idx[0]] >= best_cost:
            break
        if clock.expired():
            limited = True
            break
        checked += len(idx)
        out, ok = outcome(grid.counts[idx], grid.ps[idx])
        cost = np.where(ok, out["cost"], np.inf)
        j = int(np.argmin(cost))
        if cost[j] < best_cost:
            best_cost, best = float(cost[j]), int(idx[j])
    stats = {"plans_checked": checked, "space": len(grid.counts), "method": "enumerate"}
    counts = None if best is None else grid.counts[best]
    ps = 1 if best is None else int(grid.ps[best])
    if limited:
        # every plan not scanned has nominal cost >= the next one's, a bound on its E[C]
        bound = min(best_cost, float(grid.cost[order[checked]]))
        return _risk_result(
            model,
            counts,
            ps,
            Status.LIMIT,
            name,
            clock,
            outcome,
            stats,
            bound=bound,
            extra=extra,
            message=f"time limit of {clock.limit_s:g} s reached during the cost-ordered scan",
        )
    if best is None:
        return _risk_result(
            model,
            None,
            1,
            Status.INFEASIBLE,
            name,
            clock,
            outcome,
            stats,
            bound=math.inf,
            extra=extra,
            message="no plan meets the deadline under the interruption model",
        )
    return _risk_result(
        model,
        counts,
        ps,
        Status.OPTIMAL,
        name,
        clock,
        outcome,
        stats,
        bound=best_cost,
        extra=extra,
        message="least expected cost under the interruption model (cost and time_s are expected "
        "values; details has the nominal ones)",
    )


def _risk_result(
    model: SpotModel,
    counts: np.ndarray | None,
    ps: int,
    status: Status,
    method: str,
    clock: Clock,
    outcome: Callable,
    stats: dict,
    *,
    bound: float,
    message: str,
    extra: dict,
) -> Result:
    """Package a risk plan: cost and time_s are E[C] and E[T], the nominal ones in ``details``."""
    nominal = spot_result(
        model,
        counts,
        ps,
        status=status,
        method=method,
        started=clock.started,
        bound=bound,
        message=message,
        stats=stats,
    )
    if counts is None:
        nominal.details.update(extra)
        return nominal
    out, _ = outcome(np.asarray(counts)[None, :], np.array([ps]))
    details = dict(nominal.details)
    details.update(
        {
            "nominal_cost": nominal.cost,
            "nominal_time_s": nominal.time_s,
            "revocations_expected": float(out["events_per_h"][0] * out["time"][0] / 3600),
            "deadline_probability_lower_bound": float(deadline_probability_bound(out, model.problem.slo.time_s)[0]),
            **extra,
        }
    )
    cost = float(out["cost"][0])
    return Result(
        status=status,
        method=method,
        kind=nominal.kind,
        model=nominal.model,
        instance=nominal.instance,
        plan=nominal.plan,
        time_s=float(out["time"][0]),
        cost=cost,
        bound=cost if status is Status.OPTIMAL else bound,
        solve_seconds=clock.elapsed(),
        message=message,
        details=details,
        stats=stats,
    )
