"""Plans that still meet T_obj when K instances are revoked (``--robust K``), proven optimal.

The progress model (u = 1 / (L - g5) grows at the speed sigma_c) is
:mod:`dnnprov.models.training_progress`.

**Revocation model of --robust K: K revocations, replacements included.** An adversary
makes at most K revocations, each of one running spot instance, at moments of its
choosing; one event may revoke a group g of instances at once (|g| revocations, g within
the plan). Revoked instances are replaced by the same types after the takeover overhead
o, the survivors training meanwhile, and a replacement may be revoked again (one more
revocation). The plan is *K-robust* when its training ends by T_obj in every such
scenario. (Counting distinct workers instead misses the adversary that revokes a worker
and then its replacement.)

**Worst-case time.** Write ``T_c = T(n) - h`` for the training part of eq. (1) (h =
``slo.takeover_overhead_s``, a fixed add-on), ``delta(S) = sigma_n - sigma_{n-S}`` for the
multiset S of instances out, and ``D(g) = delta(g) / sigma_n``. Training ends at the first
tau* with ``sigma_n tau* - Phi(tau*) = sigma_n T_c`` (Phi(tau): progress lost by tau), so
the delay is ``tau* - T_c = Phi(tau*) / sigma_n``.

*Upper bound o F_K.* ``Phi(tau*) <= integral over all time of delta+(out(tau))``
(``delta+ = max(delta, 0)``). For fixed groups that integral is linear in the event
moments t_i on each region where the order of the ends {t_i, t_i + o} is fixed; it is
translation invariant and bounded, so its maximum is at a vertex of a region, where every
``t_i - t_j`` is a multiple of o: events are simultaneous (one group, within n since it is
out at one moment) or disjoint, and the integral is ``o * sum over events of delta+(g)``.
So the delay is at most ``o F_K(n)``, ``F_K(n) = max(0, max over multisets R of at most K
spot revocations and partitions P of R into groups g <= n of sum_{g in P} D(g))``. A
column may appear in R more often than n holds it, in different groups (revoked
replacements).

*Attained when the run is long.* If ``T_c >= K o``, revoke the groups of the maximising
partition (each with ``D(g) >= 0``; others only shorten the run and are dropped) back to
back from t = 0: the speed never exceeds sigma_n, so ``tau* >= T_c >= K o`` and every
outage ends inside the run: the delay is ``o F_K``.

*Short runs.* A revocation is outstanding only until its replacement joins, so at most K
instances are out at any moment and the speed is at least ``sigma_min = min over R <= n,
|R| <= K of sigma_{n-R}``: the delay is also at most ``T_c (sigma_n / sigma_min - 1)``.
For K = 1 the worst case is exact: an event g at t leaves ``sigma_n (T_c - t)`` progress
to make; if the outage's speed ``sigma_n (1 - D)`` makes it within o, i.e.
``T_c - t <= o (1 - D)``, the delay is ``(T_c - t) D / (1 - D)``, else the outage ends
inside the run and the delay is ``o D``. So the delay is ``min(o D, (T_c - t) D / (1 - D))``,
largest at t = 0, and the worst case is ``max over single workers g of min(o D(g),
T_c D(g) / (1 - D(g)))`` (o when D = 1; 0 when D <= 0, by not revoking). For K >= 2 and
``T_c < K o`` the planner uses ``min(o F_K, T_c (sigma_n / sigma_min - 1))``: a proven
upper bound, so its plans are K-robust, but not always the exact worst case (which
orders outages that do not fit); ``details.worst_case_exact`` says which.

**Without replacement** (``replaced=False``): revoked workers never come back (the real
traces keep capacity away for hours). Whatever the schedule, at every moment at most K
workers are out, so the progress speed is at least ``sigma_min`` as above; the run
therefore ends by ``T_c sigma_n / sigma_min + h``, and revoking the minimising R at the
start attains it. The worst-case time is that bound (infinite when some R stops
training).

**Exact methods.** The delay is >= 0, so every K-robust plan is nominally feasible and its
cost (eq. 11, the objective) is the nominal one. ``method="enumerate"`` scans the
nominally feasible plans of the quota box in increasing cost and returns the first
K-robust one (optimal by the ordering; refused beyond ``max_plans``).
``method="decompose"`` runs the spot decomposition (:mod:`dnnprov.solvers.spot.exact`)
with K-robustness added to its exact evaluation (:mod:`dnnprov.solvers.revocation.robust_exact`):
its cell bounds bound the nominal cost of every nominally feasible plan of a cell, hence
of every K-robust one. ``"auto"`` enumerates boxes of at most ``AUTO_ENUMERATION`` plans
(or ``max_plans``, if smaller) and decomposes the rest. Both stop at the time limit with status ``limit`` and a proven
bound.

Proven optimal: the nominal cost (eq. 11) among the K-robust plans, under this model.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from dnnprov.solvers.outcome import spot_result
from dnnprov.solvers.search.enumeration import CHUNK, decode_counts, spot_space_size

from dnnprov.errors import InvalidInputError
from dnnprov.models.spot import SpotEvaluation, SpotModel, row_dot
from dnnprov.models.training_progress import JOIN_OVERHEAD_S, progress_speed, require_paper_model
from dnnprov.problems.spot import SpotProblem
from dnnprov.problems.validation import checks as check
from dnnprov.progress import Clock
from dnnprov.result import Result, SpotPlan, Status

DEFAULT_MAX_PLANS = 5_000_000
#: ``method="auto"`` enumerates quota boxes up to this many plans and decomposes larger ones.
AUTO_ENUMERATION = 100_000
METHODS = ("auto", "enumerate", "decompose")


class TimeLimitReached(Exception):
    """Raised inside an exhaustive scan when its clock runs out (turned into status ``limit``)."""


@dataclass(frozen=True)
class PlanGrid:
    """Every admissible plan of the quota box (side constraints met), with its model numbers.

    ``speed``/``start``: progress speed and start (module docstring); ``rate``: $/h of the
    workers and PS; ``time_s``/``cost``/``feasible``: the nominal evaluation.
    """

    model: SpotModel
    counts: np.ndarray
    ps: np.ndarray
    speed: np.ndarray
    start: np.ndarray
    rate: np.ndarray
    time_s: np.ndarray
    cost: np.ndarray
    feasible: np.ndarray

    def by_cost(self) -> np.ndarray:
        """Indices of the nominally feasible plans, cheapest first (ties: grid order)."""
        idx = np.flatnonzero(self.feasible)
        return idx[np.argsort(self.cost[idx], kind="stable")]


def plan_grid(problem: SpotProblem, *, max_plans: int = DEFAULT_MAX_PLANS, clock: Clock | None = None) -> PlanGrid:
    """Evaluate the whole quota box (refused beyond ``max_plans``).

    With ``clock``, raises :class:`TimeLimitReached` once it has expired (checked per chunk).
    """
    require_paper_model(problem)
    size = spot_space_size(problem)
    if size > max_plans:
        raise InvalidInputError("max_plans", f"the quota box holds {size:,} plans, more than {max_plans:,}")
    model = SpotModel(problem)
    cols = model.columns
    radix = (cols.upper - cols.lower + 1).astype(np.int64)
    per_ps = int(np.prod(radix))
    parts: dict[str, list[np.ndarray]] = {
        k: [] for k in ("counts", "ps", "speed", "start", "rate", "time_s", "cost", "feasible")
    }
    for ps in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
        for begin in range(0, per_ps, CHUNK):
            if clock is not None and clock.expired():
                raise TimeLimitReached
            counts = decode_counts(np.arange(begin, min(begin + CHUNK, per_ps), dtype=np.int64), cols.lower, radix)
            ps_arr = np.full(len(counts), ps, dtype=np.int64)
            keep = model.admissible(counts, ps_arr)
            counts, ps_arr = counts[keep], ps_arr[keep]
            if not len(counts):
                continue
            ev = model.evaluate(counts, ps_arr)
            speed, start = progress_speed(model, counts, ps_arr)
            parts["counts"].append(counts)
            parts["ps"].append(ps_arr)
            parts["speed"].append(speed)
            parts["start"].append(start)
            parts["rate"].append(row_dot(counts, cols.price) + ps_arr * problem.platform.ps_price_per_h)
            parts["time_s"].append(ev.time_s)
            parts["cost"].append(ev.cost)
            parts["feasible"].append(ev.feasible & (speed > 0))
    if not parts["counts"]:
        empty = np.zeros((0, len(cols)), dtype=np.int64)
        return PlanGrid(model, empty, *(np.zeros(0) for _ in range(7)))
    joined = {k: np.concatenate(v) for k, v in parts.items()}
    return PlanGrid(model=model, **joined)


def spot_columns(model: SpotModel) -> list[int]:
    """Indices of the columns that can be revoked (spot market)."""
    return [i for i, m in enumerate(model.columns.markets) if m == "spot"]


def _multisets(columns: list[int], k: int) -> Iterator[tuple[int, ...]]:
    for size in range(1, k + 1):
        yield from itertools.combinations_with_replacement(columns, size)


def _as_plans(counts: np.ndarray, ps: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    counts = np.atleast_2d(np.asarray(counts, dtype=np.int64))
    return counts, np.broadcast_to(np.asarray(ps, dtype=np.int64), (len(counts),))


def event_drops(model: SpotModel, counts: np.ndarray, ps: np.ndarray, k: int) -> dict[tuple[int, ...], np.ndarray]:
    """``D(g)`` of every multiset g of at most ``k`` spot columns the plans use (module docstring).

    ``-inf`` where a plan holds fewer workers than g (g cannot be out at one moment).
    """
    counts, ps = _as_plans(counts, ps)
    sigma, _ = progress_speed(model, counts, ps)
    used = [i for i in spot_columns(model) if counts[:, i].any()]
    drops: dict[tuple[int, ...], np.ndarray] = {}
    for group in _multisets(used, k):
        removed = np.bincount(np.array(group), minlength=counts.shape[1])
        valid = (counts >= removed).all(axis=1)
        value = np.full(len(counts), -np.inf)
        if valid.any():
            rest, _ = progress_speed(model, counts[valid] - removed, ps[valid])
            with np.errstate(divide="ignore", invalid="ignore"):
                value[valid] = np.where(sigma[valid] > 0, 1.0 - rest / sigma[valid], 1.0)
        drops[group] = value
    return drops


def worst_case_delay(model: SpotModel, counts: np.ndarray, ps: np.ndarray, k: int) -> np.ndarray:
    """``F_K`` of each plan (module docstring): the largest sum of D over the groups of at
    most ``k`` revocations, replacements included, in units of the overhead o."""
    counts, ps = _as_plans(counts, ps)
    drops = event_drops(model, counts, ps, k)
    best: dict[tuple[int, ...], np.ndarray] = {}
    worst = np.zeros(len(counts))
    for group, value in drops.items():  # smaller multisets first
        # The group as one event (if the plan holds it), or split in two parts revoked at
        # different moments (each part's best partition is known: parts are smaller).
        for cut in range(1, len(group)):
            for left in set(itertools.combinations(group, cut)):
                right = list(group)
                for item in left:
                    right.remove(item)
                value = np.maximum(value, best[left] + best[tuple(right)])
        best[group] = value
        worst = np.maximum(worst, value)
    return worst


def unreplaced_delay(model: SpotModel, counts: np.ndarray, ps: np.ndarray, k: int) -> np.ndarray:
    """Worst extra seconds when up to ``k`` spot workers are lost for good (module docstring)."""
    counts, ps = _as_plans(counts, ps)
    sigma, _ = progress_speed(model, counts, ps)
    core = model.evaluate(counts, ps).time_s - model.problem.slo.takeover_overhead_s
    slowest = sigma.copy()
    for drop in event_drops(model, counts, ps, k).values():
        valid = np.isfinite(drop)
        slowest[valid] = np.minimum(slowest[valid], sigma[valid] * (1.0 - drop[valid]))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(slowest > 0, core * (sigma / slowest - 1.0), np.inf)


def replaced_delay(
    model: SpotModel, counts: np.ndarray, ps: np.ndarray, k: int, overhead_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Worst extra seconds under at most ``k`` revocations with replacement after ``overhead_s``.

    Returns ``(delay_s, exact)``: the worst case where ``exact`` (K <= 1, or runs of at
    least K o), else the proven upper bound ``min(o F_K, T_c (sigma_n / sigma_min - 1))``
    (module docstring).
    """
    counts, ps = _as_plans(counts, ps)
    if k == 0 or not len(counts):
        return np.zeros(len(counts)), np.ones(len(counts), dtype=bool)
    core = model.evaluate(counts, ps).time_s - model.problem.slo.takeover_overhead_s
    if k == 1:
        worst = np.zeros(len(counts))
        for drop in event_drops(model, counts, ps, 1).values():
            with np.errstate(divide="ignore", invalid="ignore"):
                short = np.where(drop < 1, core * drop / (1.0 - drop), np.inf)
            delay = np.where(drop > 0, np.minimum(overhead_s * drop, short), 0.0)
            worst = np.maximum(worst, delay)
        return worst, np.ones(len(counts), dtype=bool)
    long_run = overhead_s * worst_case_delay(model, counts, ps, k)
    exact = core >= k * overhead_s
    if exact.all():
        return long_run, exact
    return np.where(exact, long_run, np.minimum(long_run, unreplaced_delay(model, counts, ps, k))), exact


def robust_check(
    model: SpotModel, k: int, overhead_s: float, replaced: bool
) -> Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``check(counts, ps) -> (delay_s, exact)``: the worst-case delay of each plan under the model chosen."""

    def check_plans(counts: np.ndarray, ps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if replaced:
            return replaced_delay(model, counts, ps, k, overhead_s)
        delay = unreplaced_delay(model, counts, ps, k)
        return delay, np.ones(len(delay), dtype=bool)

    return check_plans


def _check_options(k: int, overhead_s: float, replaced: bool, method: str) -> tuple[int, float, str]:
    if not isinstance(replaced, bool):
        raise InvalidInputError("replaced", f"must be true or false, got {replaced!r}")
    return (
        check.integer("robust", k, minimum=0, maximum=8),
        check.number("takeover_overhead_s", overhead_s, minimum=0),
        check.choice("method", method, METHODS),
    )


def solve_robust(
    problem: SpotProblem,
    k: int = 1,
    *,
    overhead_s: float = JOIN_OVERHEAD_S,
    replaced: bool = True,
    max_plans: int = DEFAULT_MAX_PLANS,
    time_limit_s: float = 60.0,
    method: str = "auto",
    clock: Clock | None = None,
) -> Result:
    """The cheapest plan that meets T_obj even if ``k`` spot instances are revoked (module docstring).

    ``overhead_s`` is the time revoked workers take to be replaced (default: the paper's
    2.1 min join); with ``replaced=False`` they are never replaced. ``method``: ``"auto"``,
    ``"enumerate"`` or ``"decompose"`` (module docstring). ``clock`` (else one of
    ``time_limit_s``) bounds the solve: at its limit the status is ``limit`` with the
    proven bound. ``details`` adds ``robust_k``, ``replaced``, ``worst_case_time_s``,
    ``worst_case_delay_s`` and ``worst_case_exact``; ``time_s`` and ``cost`` are the plan's
    nominal ones.
    """
    clock = clock or Clock(check.number("time_limit_s", time_limit_s, exclusive_minimum=0))
    require_paper_model(problem)
    k, overhead_s, method = _check_options(k, overhead_s, replaced, method)
    model = SpotModel(problem)
    delays = robust_check(model, k, overhead_s, replaced)
    size = spot_space_size(problem)
    if method == "decompose" or (method == "auto" and size > min(AUTO_ENUMERATION, max_plans)):
        return decompose_robust(problem, model, k, overhead_s, replaced, delays, clock)
    if size > max_plans:
        raise InvalidInputError(
            "max_plans",
            f"the quota box holds {size:,} plans, more than {max_plans:,} (method decompose has no such limit)",
        )
    try:
        return _robust_by_enumeration(problem, model, k, overhead_s, replaced, delays, max_plans, clock)
    except TimeLimitReached:
        return robust_result(
            model,
            None,
            1,
            k,
            overhead_s,
            replaced,
            Status.LIMIT,
            clock,
            bound=0.0,
            message=f"time limit of {clock.limit_s:g} s reached while enumerating the quota box",
        )


def _robust_by_enumeration(
    problem: SpotProblem,
    model: SpotModel,
    k: int,
    overhead_s: float,
    replaced: bool,
    delays: Callable,
    max_plans: int,
    clock: Clock,
) -> Result:
    """Scan the nominally feasible plans in increasing cost; the first K-robust one is optimal."""
    grid = plan_grid(problem, max_plans=max_plans, clock=clock)
    order = grid.by_cost()
    limit = problem.slo.time_s * (1 + 1e-12)
    checked = 0
    for begin in range(0, len(order), 4096):
        idx = order[begin : begin + 4096]
        if clock.expired():
            return robust_result(
                model,
                None,
                1,
                k,
                overhead_s,
                replaced,
                Status.LIMIT,
                clock,
                bound=float(grid.cost[idx[0]]),
                stats={"plans_checked": checked},
                message=f"time limit of {clock.limit_s:g} s reached: every plan below the "
                "bound was checked and is not robust",
            )
        checked += len(idx)
        delay, _ = delays(grid.counts[idx], grid.ps[idx])
        ok = np.flatnonzero(grid.time_s[idx] + delay <= limit)
        if ok.size:
            i = int(idx[ok[0]])
            return robust_result(
                model,
                grid.counts[i],
                int(grid.ps[i]),
                k,
                overhead_s,
                replaced,
                Status.OPTIMAL,
                clock,
                bound=float(grid.cost[i]),
                message="cheapest robust plan by enumeration in cost order",
                stats={"plans_checked": checked, "space": len(grid.counts)},
            )
    how = f"{overhead_s:g} s to replace" if replaced else "never replaced"
    return robust_result(
        model,
        None,
        1,
        k,
        overhead_s,
        replaced,
        Status.INFEASIBLE,
        clock,
        bound=math.inf,
        message=f"no plan meets T_obj under {k} revocations ({how})",
        stats={"plans_checked": checked},
    )


def decompose_robust(
    problem: SpotProblem,
    model: SpotModel,
    k: int,
    overhead_s: float,
    replaced: bool,
    delays: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
    clock: Clock,
) -> Result:
    """``--robust K`` by the decomposition: the cheapest K-robust plan, or the bound at the limit."""
    from dnnprov.solvers.revocation.robust_exact import decompose, robust_outage

    limit = problem.slo.time_s * (1 + 1e-12)

    def judge(counts: np.ndarray, ps: np.ndarray, nominal: SpotEvaluation) -> tuple[np.ndarray, np.ndarray]:
        delay, _ = delays(counts, ps)
        return nominal.time_s + delay <= limit, nominal.cost

    result, stats = decompose(problem, judge, clock, robust_outage(problem, k, overhead_s, replaced))
    counts = None
    if isinstance(result.plan, SpotPlan):
        counts = np.array([result.plan.counts.get(label, 0) for label in model.columns.labels], dtype=np.int64)
    ps = result.plan.ps if result.plan is not None else 1
    if result.status is Status.OPTIMAL:
        message = "cheapest robust plan, proven by the spot decomposition"
    elif result.status is Status.INFEASIBLE:
        message = f"proven: no plan meets T_obj under {k} revocations"
    else:
        message = result.message
    return robust_result(
        model,
        counts,
        ps,
        k,
        overhead_s,
        replaced,
        result.status,
        clock,
        bound=result.bound if result.bound is not None else 0.0,
        message=message,
        stats=stats,
    )


def robust_result(
    model: SpotModel,
    counts: np.ndarray | None,
    ps: int,
    k: int,
    overhead_s: float,
    replaced: bool,
    status: Status,
    clock: Clock,
    *,
    bound: float,
    message: str,
    stats: dict | None = None,
) -> Result:
    """Package a robust plan (or none) with its worst case in ``details``."""
    method = f"robust-{k}" if replaced else f"robust-{k}-unreplaced"
    result = spot_result(
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
    result.details.update({"robust_k": k, "replaced": replaced, "takeover_overhead_s": overhead_s})
    if counts is not None and result.time_s is not None:
        delay, exact = robust_check(model, k, overhead_s, replaced)(np.asarray(counts)[None, :], np.array([ps]))
        result.details.update(
            {
                "worst_case_delay_s": float(delay[0]),
                "worst_case_exact": bool(exact[0]),
                "worst_case_time_s": float(result.time_s) + float(delay[0]),
            }
        )
    return result
