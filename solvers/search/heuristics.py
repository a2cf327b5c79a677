"""The published heuristics: spotDNN's Algorithm 1, its authors' code, and λDNN's Algorithm 1."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from dnnprov.solvers.outcome import serverless_result, spot_result

from dnnprov.models.serverless import ServerlessModel
from dnnprov.models.spot import SpotModel
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.progress import Clock
from dnnprov.result import Result, Status


def window_prefix(items: np.ndarray, n_columns: int) -> np.ndarray:
    """Prefix counts of the list ``items`` written twice (windows may wrap around)."""
    length = len(items)
    one_hot = np.zeros((2 * length + 1, n_columns), dtype=np.int64)
    doubled = np.concatenate([items, items])
    one_hot[np.arange(1, 2 * length + 1), doubled] = 1
    return one_hot.cumsum(axis=0)


def window_counts(
    items: np.ndarray,
    n_columns: int,
    size: int,
    *,
    wrap: bool = False,
    prefix: np.ndarray | None = None,
    distinct: bool = False,
) -> np.ndarray:
    """Count vectors of every window ``items[s : s + size]`` of a list of column indices.

    With ``wrap`` the windows start at every position and wrap around to the list's head
    (the authors' code); without, they start at ``0 .. len - size`` (the paper).
    ``prefix`` (from :func:`window_prefix`) saves recomputing it for every size;
    ``distinct`` keeps only windows that differ from the one before them.
    """
    length = len(items)
    if prefix is None:
        prefix = window_prefix(items, n_columns)
    if distinct:
        starts = distinct_window_starts(items, size, wrap=wrap)
    else:
        starts = np.arange(max(length if wrap else length - size + 1, 0))
    return prefix[starts + size] - prefix[starts]


def distinct_window_starts(items: np.ndarray, size: int, *, wrap: bool = False) -> np.ndarray:
    """Starts of the windows that differ from the window before them (the first always).

    Window s equals window s - 1 exactly when the item leaving (items[s - 1]) equals the
    item entering (items[s - 1 + size]); with types repeated by quota most windows repeat.
    Keeping first occurrences in order keeps "the first plan of least cost" unchanged.
    """
    length = len(items)
    count = length if wrap else length - size + 1
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    doubled = np.concatenate([items, items])
    s = np.arange(1, count)
    changed = doubled[s - 1] != doubled[s - 1 + size]
    return np.concatenate([[0], s[changed]])


def _out_of_time(clock: Clock | None) -> bool:
    return clock is not None and clock.expired()


# ---------------------------------------------------------------- spot, the paper
def spot_bounds(
    problem: SpotProblem, model: SpotModel, lone_times: np.ndarray, available: np.ndarray
) -> tuple[int, int]:
    """n_lower and n_upper of eqs. (15)-(16), as the paper computes them (heuristic bounds).

    b_min and v_max of eq. (16) range over the available instances (the list I).
    """
    w, slo = problem.workload, problem.slo
    cols = model.columns
    if w.alpha_1 > 0 and w.beta_1 < 1:
        n_upper = math.floor(((1 - w.beta_1) / w.alpha_1) ** 2)  # eq. (15)
    else:
        n_upper = int(cols.upper.sum())
    if not available.any():
        return 1, n_upper
    b_min = float(cols.batch[available].min())
    spread = 1.0 if w.loss_variant == "no-cc" else w.gamma_4
    j_min = (w.gamma_2 * b_min + w.gamma_3) * math.sqrt(spread) / model.loss_gap - w.gamma_1
    v_max = float((cols.batch / lone_times)[available].max())
    n_lower = math.ceil(b_min * j_min / (v_max * slo.time_s)) if j_min > 0 else 1  # eq. (16)
    return max(n_lower, 1), n_upper


def spot_heuristic(problem: SpotProblem, *, clock: Clock | None = None) -> Result:
    """spotDNN Algorithm 1: bounds (15)-(16) and a sliding window over instances sorted
    by lone-worker iteration time, slowest first; kept instances E are always included.

    With a ``clock`` the sweep stops at its limit (status ``limit``, the best plan so far).
    """
    started = time.perf_counter() if clock is None else clock.started
    model = SpotModel(problem)
    cols = model.columns
    lone_times = model.iteration_times(np.array([1]), np.array([1]))[0]  # T^i with B_req
    available = cols.upper - cols.lower
    items = np.repeat(np.arange(len(cols)), available)
    items = items[np.argsort(-lone_times[items], kind="stable")]  # step 5
    n_lower, n_upper = spot_bounds(problem, model, lone_times, available > 0)
    best_cost, best = math.inf, None
    evaluated = 0
    prefix = window_prefix(items, len(cols))
    stopped = False
    for ps in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
        for size in range(n_lower, min(n_upper, len(items)) + 1):  # step 6
            if _out_of_time(clock):
                stopped = True
                break
            plans = window_counts(items, len(cols), size, prefix=prefix, distinct=True) + cols.lower  # 7-8
            ev = model.evaluate(plans, ps)  # steps 9-12
            evaluated += len(plans)
            cost = np.where(ev.feasible, ev.cost, np.inf)
            i = int(np.argmin(cost))
            if cost[i] < best_cost:  # steps 14-15
                best_cost, best = float(cost[i]), (plans[i], ps)
        if stopped:
            break

    def package(plan: tuple[np.ndarray, int] | None, **outcome: Any) -> Result:
        counts, ps = (None, 1) if plan is None else plan
        return spot_result(model, counts, ps, method="heuristic", started=started, **outcome)

    stats = {"plans_evaluated": evaluated, "n_lower": n_lower, "n_upper": n_upper}
    nothing = "the sliding window found no feasible plan (not a proof of infeasibility)"
    return swept(package, best, stats, clock, stopped=stopped, sweep="the sliding window", nothing=nothing)


# ---------------------------------------------------------------- spot, the authors' code
def reference_heuristic(problem: SpotProblem, *, clock: Clock | None = None) -> Result:
    """The search of the authors' reference code (spec section 6), exactly.

    Types sorted by profiled iteration time T0 ascending (stable), each repeated by its
    quota; windows of size 1 .. len-1 starting anywhere, wrapping to the head; the first
    plan of strictly smallest cost wins. No bounds. Runs on the problem's model variant.
    With a ``clock`` the sweep stops at its limit (status ``limit``, the best plan so far).
    """
    started = time.perf_counter() if clock is None else clock.started
    model = SpotModel(problem)
    cols = model.columns
    w, pf = problem.workload, problem.platform
    # T0 = T_comp + T_comm at B_req, undoing the (reference) compute-time derivation.
    pcie = 2 * cols.gpus * w.param_size_mb / pf.pcie_bandwidth_mb_s
    network = 2 * w.param_size_mb / w.bandwidth_req_mb_s
    t0 = cols.compute_time + (network - pcie if model.reference else network + pcie)
    order = np.argsort(t0, kind="stable")
    items = np.repeat(order, (cols.upper - cols.lower)[order])
    best_cost, best = math.inf, None
    evaluated = 0
    ps = problem.constraints.ps_count[0]
    prefix = window_prefix(items, len(cols))
    stopped = False
    for size in range(1, len(items)):
        if _out_of_time(clock):
            stopped = True
            break
        plans = window_counts(items, len(cols), size, wrap=True, prefix=prefix, distinct=True) + cols.lower
        ev = model.evaluate(plans, ps)
        evaluated += len(plans)
        cost = np.where(ev.feasible, ev.cost, np.inf)
        i = int(np.argmin(cost))  # first occurrence: "strictly smaller cost" keeps the earliest
        if cost[i] < best_cost:
            best_cost, best = float(cost[i]), plans[i]

    def package(counts: np.ndarray | None, **outcome: Any) -> Result:
        return spot_result(model, counts, ps, method="reference-heuristic", started=started, **outcome)

    stats = {"plans_evaluated": evaluated}
    nothing = "no feasible window (the reference code returns all-zero counts)"
    return swept(package, best, stats, clock, stopped=stopped, sweep="the window sweep", nothing=nothing)


# ---------------------------------------------------------------- serverless
def serverless_bounds(problem: ServerlessProblem, memory_mb: int, ps: int) -> tuple[int, int] | None:
    """n_lower (15) and n_upper (14) for one memory size; ``None`` if (15) has no solution."""
    w, p = problem.workload, problem.platform
    rate = w.rate_alpha * memory_mb + w.rate_beta
    storage_bw = min(w.storage_alpha * memory_mb + w.storage_beta, p.storage_bandwidth_mb_s)
    if rate <= 0 or storage_bw <= 0:
        return None
    n_upper = math.floor(ps * p.ps_bandwidth_mb_s / p.function_bandwidth_mb_s)  # eq. (14)
    ps_bw = p.function_bandwidth_mb_s
    work = w.samples * w.epochs
    lam = ps_bw * (rate * w.dataset_mb + work * storage_bw)
    kappa = problem.time_s * rate * storage_bw * ps_bw
    mu = 2 * w.model_mb * work * storage_bw * rate
    n_lower = math.ceil(lam / kappa + mu / (w.local_batch * kappa))  # eq. (15)
    if w.local_batch * n_lower > w.max_global_batch:
        if w.max_global_batch * kappa <= mu:
            return None
        n_lower = max(
            w.max_global_batch // w.local_batch, math.ceil(w.max_global_batch * lam / (w.max_global_batch * kappa - mu))
        )
    return max(n_lower, 1), n_upper


def serverless_heuristic(problem: ServerlessProblem, *, clock: Clock | None = None) -> Result:
    """λDNN Algorithm 1: sweep memory sizes; for each, the first n in [n_lower, n_upper]
    meeting T_o is taken (larger n only costs more under the paper's cost).

    With a ``clock`` the sweep stops at its limit (status ``limit``, the best plan so far).
    """
    started = time.perf_counter() if clock is None else clock.started
    model = ServerlessModel(problem)
    best_cost, best = math.inf, None
    evaluated = 0
    low, high = problem.function_range()
    stopped = False
    for ps in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
        for m in problem.memory_grid():
            if _out_of_time(clock):
                stopped = True
                break
            bounds = serverless_bounds(problem, m, ps)
            if bounds is None:
                continue
            n_lo, n_hi = max(bounds[0], low), min(bounds[1], high)
            if n_lo > n_hi:
                continue
            n = np.arange(n_lo, n_hi + 1)
            ev = model.evaluate(n, m, ps)
            evaluated += len(n)
            hits = np.flatnonzero(ev.feasible)
            if hits.size and ev.cost[hits[0]] < best_cost:
                best_cost, best = float(ev.cost[hits[0]]), (int(n[hits[0]]), m, ps)
        if stopped:
            break
    package = partial(serverless_result, model, method="heuristic", started=started)
    nothing = "the memory sweep found no feasible plan (not a proof of infeasibility)"
    stats = {"plans_evaluated": evaluated}
    return swept(package, best, stats, clock, stopped=stopped, sweep="the memory sweep", nothing=nothing)


def swept(
    package: Callable[..., Result],
    best: Any,
    stats: dict[str, int],
    clock: Clock | None,
    *,
    stopped: bool,
    sweep: str,
    nothing: str,
) -> Result:
    """A heuristic's outcome: ``stopped`` by the clock before ``sweep`` ended (``limit``, the
    best plan so far), no plan found (``unknown``: ``nothing``, no proof), else its plan
    (``feasible``). ``package(plan, status=..., ...)`` turns a plan (``None``: none) into the result.
    """
    if stopped:
        assert clock is not None  # only a clock stops a search early
        message = f"time limit of {clock.limit_s:g} s reached before {sweep} ended"
        return package(best, status=Status.LIMIT, message=message, stats=stats)
    if best is None:
        return package(None, status=Status.UNKNOWN, message=nothing, stats=stats)
    return package(best, status=Status.FEASIBLE, stats=stats)
