"""Plans that still meet T_obj when K instances are revoked (``--robust K``), proven optimal.

**Progress model** (the one :mod:`dnnprov.cloud.replan` uses, see docs/revocation.md). Write
``u = 1 / (L - g5)`` for the training loss L. On a cluster c, eq. (3) gives
``L - g5 = N_c / (j + g1)`` with ``N_c = (g2 b_w + g3) sqrt((R + g4) |c|)``, so u grows at the
constant *progress speed* ``sigma_c = x_c / N_c`` per second (x_c the iterations per second,
eq. 2), and training ends when u reaches ``u* = 1 / (L_obj - g5)``. A plan starting from
scratch begins at ``u0 = g1 / N_c``; then ``(u* - u0) / sigma_c = j / x_c`` is eq. (1)'s time.
A takeover (:func:`dnnprov.cloud.replan.replanned_problem`) continues from the reached u on the
new cluster's speed: the same model, so plans, replans and the simulator agree.

**Revocation model of --robust K.** An adversary revokes at most K spot workers of the plan,
in events at moments of its choosing; the workers of one event are replaced by the same
types after the takeover overhead o, the survivors training meanwhile. Events are either
simultaneous (one event) or their outages do not overlap. The plan is *K-robust* when its
training still ends by T_obj in every such scenario.

**Worst-case time.** An event revoking the multiset g during [t, t + o] lowers the speed
from sigma_n to sigma_{n-g} for o seconds: a progress deficit ``o (sigma_n - sigma_{n-g})``
that the full plan makes up in ``o * D(g)`` seconds, ``D(g) = 1 - sigma_{n-g} / sigma_n``,
whatever t is (an outage still running at the end only delays less: at time
``T + o D(g)`` the progress is at least ``u0 + sigma_n (T + o D(g)) - o (sigma_n - sigma_{n-g}) = u*``).
Non-overlapping events add up, so the worst-case time is ``T(n) + o * F_K(n)`` with
``F_K(n) = max(0, max over multisets R of at most K spot workers of n, and partitions P of
R into events, of sum_{g in P} D(g))``. For two events whose outages overlap for b of
the o seconds the deficit is ``(o - b)(d1 + d2) + b d12``, linear in b, so its maximum is at
b = 0 (separate) or b = o (simultaneous): partial overlaps of two events are covered.

**Exact method.** ``F_K >= 0`` (R may be empty), so every K-robust plan is nominally
feasible and its cost (eq. 11, the objective) is at least its nominal cost.
:func:`solve_robust` enumerates the nominally feasible plans of the quota box in
increasing cost and returns the first K-robust one (optimal by the ordering: every
cheaper plan was checked and is not K-robust). Beyond ``max_plans`` it solves the nominal
problem with ``milp`` (optimum C0, a lower bound on every K-robust plan's cost); if that
plan is K-robust it is optimal, else it returns the ``milp`` plan of the problem with
``T_obj - K o``, which is K-robust because ``D(g) <= 1`` (speeds are non-negative) and P
has at most K events, so ``F_K <= K``: status ``feasible`` with the proven bound C0.

**Without replacement** (``replaced=False``): revoked workers never come back (the real
traces keep capacity away for hours). Whatever the schedule, at every moment at most K
workers are out, so the progress speed is at least ``min over R of sigma_{n-R}`` (R a
multiset of at most K spot workers of n, R empty included); the run therefore ends by
``T_core / (min_R sigma_{n-R} / sigma_n) + o_fixed``, and revoking the minimising R at
the start attains it. The worst-case time is that bound (infinite when some R stops
training). The exact method is the same cost-ordered scan; beyond ``max_plans`` only a
robust nominal ``milp`` optimum is returned as optimal, else status ``limit`` with the
nominal bound.

Proven optimal: the nominal cost (eq. 11) among the K-robust plans, under this model.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from dnnprov.problems import _checks as check
from dnnprov.errors import InvalidInputError
from dnnprov.result import Result, Status
from dnnprov.solvers.enumeration import CHUNK, decode_counts, spot_space_size
from dnnprov.solvers.outcome import spot_result
from dnnprov.problems.spot import SpotProblem
from dnnprov.models.spot import SpotModel

#: The paper's measured join time of takeover instances (2.1 min, spec/spot.md section 5).
JOIN_OVERHEAD_S = 126.0
DEFAULT_MAX_PLANS = 5_000_000


def require_paper_model(problem: SpotProblem) -> None:
    """The progress model needs eq. (3) without rounding: refuse the reference model."""
    if not isinstance(problem, SpotProblem):
        raise InvalidInputError("problem", "revocation-aware planning needs a spot problem")
    if problem.model != "paper":
        raise InvalidInputError("model", "revocation-aware planning needs the paper model (the reference "
                                         "model rounds j and T, so progress is not linear in time)")


def progress_target(model: SpotModel) -> float:
    """``u* = 1 / (L_obj - g5)``: the progress at which training reaches the target loss."""
    return 1.0 / model.loss_gap


def progress_speed(model: SpotModel, counts: np.ndarray, ps: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """``(sigma, u0)`` of clusters ``counts``: progress per second and the start progress.

    A cluster without workers, or one whose loss curve never reaches the target (eq. 3
    has no root), has speed 0.
    """
    counts = np.atleast_2d(np.asarray(counts, dtype=np.int64))
    ev = model.evaluate(counts, ps)
    g1 = model.problem.workload.gamma_1
    with np.errstate(divide="ignore", invalid="ignore"):
        numerator = (ev.iterations + g1) * model.loss_gap           # N_c
        sigma = ev.iteration_rate / numerator
        start = g1 / numerator
    ok = (ev.workers > 0) & np.isfinite(sigma) & (sigma > 0)
    return np.where(ok, sigma, 0.0), np.where(ok, start, np.inf)


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


def plan_grid(problem: SpotProblem, *, max_plans: int = DEFAULT_MAX_PLANS) -> PlanGrid:
    """Evaluate the whole quota box (refused beyond ``max_plans``)."""
    require_paper_model(problem)
    size = spot_space_size(problem)
    if size > max_plans:
        raise InvalidInputError("max_plans", f"the quota box holds {size:,} plans, more than {max_plans:,}")
    model = SpotModel(problem)
    cols = model.columns
    radix = (cols.upper - cols.lower + 1).astype(np.int64)
    per_ps = int(np.prod(radix))
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("counts", "ps", "speed", "start", "rate", "time_s", "cost", "feasible")}
    for ps in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
        for begin in range(0, per_ps, CHUNK):
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
            parts["rate"].append(counts @ cols.price + ps_arr * problem.platform.ps_price_per_h)
            parts["time_s"].append(ev.time_s)
            parts["cost"].append(ev.cost)
            parts["feasible"].append(ev.feasible & (speed > 0))
    if not parts["counts"]:
        empty = np.zeros((0, len(cols)), dtype=np.int64)
        return PlanGrid(model, empty, *(np.zeros(0) for _ in range(7)))  # type: ignore[arg-type]
    joined = {k: np.concatenate(v) for k, v in parts.items()}
    return PlanGrid(model=model, **joined)


def spot_columns(model: SpotModel) -> list[int]:
    """Indices of the columns that can be revoked (spot market)."""
    return [i for i, m in enumerate(model.columns.markets) if m == "spot"]


def _multisets(columns: list[int], k: int) -> Iterator[tuple[int, ...]]:
    for size in range(1, k + 1):
        yield from itertools.combinations_with_replacement(columns, size)


def worst_case_delay(model: SpotModel, counts: np.ndarray, ps: np.ndarray, k: int) -> np.ndarray:
    """``F_K`` of each plan (module docstring): the worst delay in units of the overhead o."""
    counts = np.atleast_2d(np.asarray(counts, dtype=np.int64))
    ps = np.broadcast_to(np.asarray(ps, dtype=np.int64), (len(counts),))
    sigma, _ = progress_speed(model, counts, ps)
    best: dict[tuple[int, ...], np.ndarray] = {}
    worst = np.zeros(len(counts))
    width = counts.shape[1]
    for group in _multisets(spot_columns(model), k):
        removed = np.bincount(np.array(group), minlength=width)
        valid = (counts >= removed).all(axis=1)
        value = np.full(len(counts), -np.inf)
        if valid.any():
            rest, _ = progress_speed(model, counts[valid] - removed, ps[valid])
            with np.errstate(divide="ignore", invalid="ignore"):
                value[valid] = np.where(sigma[valid] > 0, 1.0 - rest / sigma[valid], 1.0)
        # Best partition of the multiset: the group as one event, or split in two parts
        # (each part's best partition is already known: parts are smaller multisets).
        for cut in range(1, len(group)):
            for left in set(itertools.combinations(group, cut)):
                right = list(group)
                for item in left:
                    right.remove(item)
                value = np.maximum(value, best[left] + best[tuple(right)])
        value[~valid] = -np.inf  # a plan without these workers cannot lose them in any split
        best[group] = value
        worst = np.maximum(worst, value)
    return worst


def unreplaced_delay(model: SpotModel, counts: np.ndarray, ps: np.ndarray, k: int) -> np.ndarray:
    """Worst extra seconds when up to ``k`` spot workers are lost for good (module docstring)."""
    counts = np.atleast_2d(np.asarray(counts, dtype=np.int64))
    ps = np.broadcast_to(np.asarray(ps, dtype=np.int64), (len(counts),))
    sigma, _ = progress_speed(model, counts, ps)
    core = model.evaluate(counts, ps).time_s - model.problem.slo.takeover_overhead_s
    slowest = sigma.copy()
    width = counts.shape[1]
    for group in _multisets(spot_columns(model), k):
        removed = np.bincount(np.array(group), minlength=width)
        valid = (counts >= removed).all(axis=1)
        if valid.any():
            rest, _ = progress_speed(model, counts[valid] - removed, ps[valid])
            slowest[valid] = np.minimum(slowest[valid], rest)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(slowest > 0, core * (sigma / slowest - 1.0), np.inf)


def _check_options(k: int, overhead_s: float) -> tuple[int, float]:
    return (check.integer("robust", k, minimum=0, maximum=8),
            check.number("takeover_overhead_s", overhead_s, minimum=0))


def solve_robust(problem: SpotProblem, k: int = 1, *, overhead_s: float = JOIN_OVERHEAD_S,
                 replaced: bool = True, max_plans: int = DEFAULT_MAX_PLANS,
                 time_limit_s: float = 60.0) -> Result:
    """The cheapest plan that meets T_obj even if any ``k`` spot workers are revoked (module docstring).

    ``overhead_s`` is the time revoked workers take to be replaced (default: the paper's
    2.1 min join); with ``replaced=False`` they are never replaced. ``details`` adds
    ``robust_k``, ``replaced``, ``worst_case_time_s`` and ``worst_case_delay_s``;
    ``time_s`` and ``cost`` are the plan's nominal ones.
    """
    started = time.perf_counter()
    require_paper_model(problem)
    k, overhead_s = _check_options(k, overhead_s)
    method = f"robust-{k}"
    model = SpotModel(problem)
    limit = problem.slo.time_s * (1 + 1e-12)
    if not isinstance(replaced, bool):
        raise InvalidInputError("replaced", f"must be true or false, got {replaced!r}")
    if not replaced:
        method += "-unreplaced"

    def extra(counts: np.ndarray, ps: np.ndarray) -> np.ndarray:
        if replaced:
            return overhead_s * worst_case_delay(model, counts, ps, k)
        return unreplaced_delay(model, counts, ps, k)

    if spot_space_size(problem) > max_plans:
        return _robust_by_milp(problem, model, k, overhead_s, replaced, extra, max_plans, time_limit_s, started)
    grid = plan_grid(problem, max_plans=max_plans)
    order = grid.by_cost()
    checked = 0
    for begin in range(0, len(order), 4096):
        idx = order[begin:begin + 4096]
        checked += len(idx)
        delays = extra(grid.counts[idx], grid.ps[idx])
        ok = np.flatnonzero(grid.time_s[idx] + delays <= limit)
        if ok.size:
            i = int(idx[ok[0]])
            return _robust_result(model, grid.counts[i], int(grid.ps[i]), float(delays[ok[0]]), k, overhead_s,
                                  replaced, Status.OPTIMAL, started, float(grid.cost[i]),
                                  "cheapest robust plan by enumeration in cost order",
                                  {"plans_checked": checked, "space": len(grid.counts)})
    how = f"{overhead_s:g} s to replace" if replaced else "never replaced"
    return spot_result(model, None, 1, status=Status.INFEASIBLE, method=method, started=started, bound=math.inf,
                       message=f"no plan meets T_obj when {k} workers are revoked ({how})",
                       stats={"plans_checked": checked})


def _robust_result(model: SpotModel, counts: np.ndarray, ps: int, delay_s: float, k: int, overhead_s: float,
                   replaced: bool, status: Status, started: float, bound: float, message: str,
                   stats: dict) -> Result:
    method = f"robust-{k}" if replaced else f"robust-{k}-unreplaced"
    result = spot_result(model, counts, ps, status=status, method=method, started=started,
                         bound=bound, message=message, stats=stats)
    result.details.update({"robust_k": k, "replaced": replaced, "takeover_overhead_s": overhead_s,
                           "worst_case_delay_s": delay_s, "worst_case_time_s": float(result.time_s) + delay_s})
    return result


def _robust_by_milp(problem: SpotProblem, model: SpotModel, k: int, overhead_s: float, replaced: bool,
                    extra: Callable[[np.ndarray, np.ndarray], np.ndarray], max_plans: int,
                    time_limit_s: float, started: float) -> Result:
    """Beyond ``max_plans``: the nominal milp plan if robust (optimal), else the T_obj - K o plan."""
    from dnnprov.solvers.milp import solve_spot

    method = f"robust-{k}" if replaced else f"robust-{k}-unreplaced"
    nominal = solve_spot(problem, time_limit_s=time_limit_s)
    if nominal.status is Status.INFEASIBLE:
        return spot_result(model, None, 1, status=Status.INFEASIBLE, method=method, started=started,
                           bound=math.inf, message="no plan is feasible even without revocations")
    if nominal.status is not Status.OPTIMAL or nominal.plan is None or nominal.cost is None:
        return spot_result(model, None, 1, status=Status.LIMIT, method=method, started=started,
                           message=f"the nominal milp ended {nominal.status.value}: {nominal.message}")
    counts = np.array([nominal.plan.counts.get(label, 0) for label in model.columns.labels])
    delay = float(extra(counts[None, :], np.array([nominal.plan.ps]))[0])
    if float(nominal.time_s) + delay <= problem.slo.time_s * (1 + 1e-12):
        return _robust_result(model, counts, nominal.plan.ps, delay, k, overhead_s, replaced, Status.OPTIMAL,
                              started, nominal.cost, "the nominal milp optimum is already robust", {"milp_solves": 1})
    tight = problem.slo.time_s - k * overhead_s
    safe = None
    if replaced and tight > problem.slo.takeover_overhead_s:
        slo = type(problem.slo)(problem.slo.loss, tight, problem.slo.takeover_overhead_s)
        safe = solve_spot(problem.replace(slo=slo), time_limit_s=time_limit_s)
    if safe is None or safe.plan is None:
        return spot_result(model, None, 1, status=Status.LIMIT, method=method, started=started, bound=nominal.cost,
                           message=f"quota box beyond max_plans={max_plans:,} and the nominal optimum is not "
                                   "robust: nothing proven beyond the bound")
    counts = np.array([safe.plan.counts.get(label, 0) for label in model.columns.labels])
    delay = float(extra(counts[None, :], np.array([safe.plan.ps]))[0])
    return _robust_result(model, counts, safe.plan.ps, delay, k, overhead_s, replaced, Status.FEASIBLE, started,
                          nominal.cost, f"quota box beyond max_plans={max_plans:,}: the milp plan for T_obj - K o "
                          "(robust since F_K <= K); bound = the nominal optimum", {"milp_solves": 2})
