"""Steps 2 and 3 of joint provisioning on given columns: the LP, reduced-cost fixing, verified MILPs.

:func:`solve_columns` is what :mod:`dnnprov.solvers.joint.provision` calls once the columns
are known (enumerated, or priced by :mod:`dnnprov.solvers.joint.pricing.priced`); the argument it
implements (the Lagrangian bound, the fixing sets S(tau), the verified MILPs) is steps 2 and 3
of the provision module's docstring. Its bound is a verified bound over the columns it is given.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from dnnprov.formulations.joint import JobColumns
from dnnprov.solvers.highs_driver import TINY, UNIT_ROUNDOFF, MilpSolution, MilpStatus
from dnnprov.solvers.joint.model import ColumnModel

from dnnprov.progress import stop_requested
from dnnprov.result import Status

OPTIMAL_TOLERANCE = 1e-8  # relative: a verified bound this close to the cost proves it optimal
SUPPORT_TOLERANCE = 1e-7  # LP values above this count as the LP's support
INCUMBENT_WIDTHS = (4, 32)  # smallest-delta columns per job tried by the incumbent MILP
INCUMBENT_SECONDS = 1.0  # time limit of each incumbent MILP
INITIAL_WIDTH = 4  # the first exact MILP sees about this many columns per job
INCUMBENT_GAP = 1e-6  # relative gap at which an incumbent MILP may stop
# Column generation wins while restricted LPs are small: 1,000 spot jobs x 40 columns 0.05 s
# (full LP by IPM 1.5 s), 100 x 1,500 columns 0.04 s (IPM 4 s). With 10,000-20,000 jobs
# every round re-solves an LP with as many rows, and sharing one row makes every job swap
# columns as its dual moves: 2.5-10 s against 1.1-2.6 s for IPM on the full LP.
PRICING_MAX_JOBS = 5000


@dataclass
class ColumnSolution:
    """Outcome of :func:`solve_columns`: the column chosen for each job (``None``: no plan)."""

    status: Status
    picked: np.ndarray | None
    cost: float | None
    bound: float | None
    message: str = ""
    usage: dict[str, float] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    kept: np.ndarray | None = None  # global indices of the columns the last MILP saw


def solve_columns(
    columns: Sequence[JobColumns], shared: Mapping[str, float], *, deadline: float = math.inf, fixing: bool = True
) -> ColumnSolution:
    """Steps 2 and 3 of the module docstring on given columns: LP, fixing, exact MILP.

    ``columns`` holds one :class:`JobColumns` per job (each with at least one column),
    ``shared`` the limit of every shared row; ``deadline`` is a ``perf_counter`` value.
    """
    stats: dict[str, Any] = {}
    model = ColumnModel.build(columns, shared)
    stats["shared_rows"] = len(model.row_names)
    t0 = time.perf_counter()
    lp = MilpSolution(MilpStatus.LIMIT, None, math.inf, -math.inf)  # no LP solved (yet)
    if model.jobs <= PRICING_MAX_JOBS:
        lp = model.solve_lp(stats, time_limit_s=deadline - time.perf_counter())
    if lp.row_dual is None and time.perf_counter() < deadline:
        lp = model.solve(integer=False, time_limit_s=deadline - time.perf_counter())  # the full LP
        stats["lp_full"] = True
    stats["lp_seconds"] = time.perf_counter() - t0
    if lp.status is MilpStatus.INFEASIBLE:
        # HiGHS's word is no proof: only a verified Farkas certificate of the full LP is.
        check = model.verified_solve(integer=False, time_limit_s=deadline - time.perf_counter())
        if check.status is MilpStatus.INFEASIBLE:
            return ColumnSolution(
                Status.INFEASIBLE,
                None,
                None,
                math.inf,
                "proven infeasible: the shared limits cannot be met by all jobs at once "
                "(a verified Farkas certificate of the LP relaxation)",
                stats=stats,
            )
        return ColumnSolution(
            Status.LIMIT,
            None,
            None,
            None,
            "HiGHS reported the LP relaxation infeasible but no certificate verified",
            stats=stats,
        )
    if lp.row_dual is None or lp.x is None:
        ended = "at the time limit" if lp.status is MilpStatus.LIMIT else "without an answer from HiGHS"
        return ColumnSolution(Status.LIMIT, None, None, None, f"the LP relaxation ended {ended}", stats=stats)
    bound, delta = model.lagrangian(lp.row_dual)  # verified: bound <= L*, delta <= delta*
    if len(model.cost) and bool((model.cost >= 0).all()):
        # every column costs >= 0, so does every choice of one a job: 0 is a bound too (the
        # verified bound of a set of free plans is a hair below 0 and would never close at 0)
        bound = max(bound, 0.0)
    stats["lp_objective"] = lp.objective
    stats["lp_bound"] = bound

    t0 = time.perf_counter()
    best, upper = _incumbent(model, lp.x, delta, deadline) if fixing else (None, math.inf)
    stats["incumbent_seconds"] = time.perf_counter() - t0
    stats["incumbent"] = upper if math.isfinite(upper) else None

    # Step 3: verified MILPs on S(tau) = {columns with delta <= tau}. Every round proves
    #   OPT >= min(B_S, L + tau)
    # where B_S is the driver's verified bound over S(tau): a solution within S(tau) costs
    # >= B_S, and one using a column outside has delta* >= delta > tau, so it costs
    # >= L* + delta* > L + tau. The best such bound over the rounds is kept; the result is
    # optimal once it meets the incumbent within OPTIMAL_TOLERANCE. tau starts small (about
    # INITIAL_WIDTH columns per job, never above U - L) and widens fourfold; at tau >= U - L
    # the second term is >= U, so a verified B_S settles it.
    t0 = time.perf_counter()
    n = len(model.cost)

    def threshold(width: int) -> float:
        """tau giving about ``width`` columns per job, capped at U - L (inf: keep everything)."""
        if not fixing:
            return math.inf
        k = min(n, width * model.jobs)
        tau = float(np.partition(delta, k - 1)[k - 1]) if k < n else math.inf
        return min(tau, _up(upper - bound)) if math.isfinite(upper) else tau

    width = INITIAL_WIDTH
    tau = threshold(width)
    proven_bound, rounds, infeasible = bound, 0, False
    kept, previous = np.arange(n), None
    subset_bound = -math.inf  # B_S of the last MILP, over the set `previous`
    last_tau = -math.inf
    while time.perf_counter() < deadline and not stop_requested() and not closes(proven_bound, upper):
        kept = np.flatnonzero(delta <= tau) if math.isfinite(tau) else np.arange(n)
        outside = _down(bound + tau) if len(kept) < n else math.inf
        if previous is not None and np.array_equal(kept, previous):
            # the same set with a larger tau: its B_S stands, only L + tau grew
            proven_bound = max(proven_bound, min(subset_bound, outside))
            if tau <= last_tau:
                break  # tau cannot grow: the proof did not close
            last_tau = tau
            width *= 4
            tau = threshold(width)
            continue
        rounds += 1
        previous, last_tau = kept, tau
        milp, best, upper = _verified_subset(model, kept, best, upper, deadline)
        subset_bound = milp.dual_bound
        proven_bound = max(proven_bound, min(subset_bound, outside))
        if milp.status is MilpStatus.INFEASIBLE and len(kept) == n and best is None:
            infeasible = True  # verified (no target without an incumbent): no joint solution
            break
        if milp.status in (MilpStatus.LIMIT, MilpStatus.ERROR) and len(kept) == n:
            break
        width *= 4
        tau = threshold(width)
    stats["columns_after_fixing"] = len(kept)
    stats["fixing_rounds"] = rounds  # 0: the Lagrangian bound alone met the incumbent
    stats["fixing_threshold"] = float(tau) if rounds and math.isfinite(tau) else None
    stats["milp_seconds"] = time.perf_counter() - t0
    if best is None:
        if infeasible:
            return ColumnSolution(
                Status.INFEASIBLE,
                None,
                None,
                math.inf,
                "proven infeasible: the shared limits cannot be met by all jobs at once (verified branch and bound)",
                stats=stats,
            )
        return ColumnSolution(
            Status.LIMIT, None, None, proven_bound, "time limit: no joint plan found yet", stats=stats
        )
    picked = model.choice(best)
    used = model.usage(picked)
    if (used > model.limits + 1e-9).any():
        raise AssertionError("the chosen plans exceed a shared limit")
    total = math.fsum(model.cost[picked])  # correctly rounded; _total(best) >= the exact sum
    usage = {r: float(u) for r, u in zip(model.row_names, used)}
    usage.update({r: 0.0 for r in shared if r not in usage})
    if closes(proven_bound, _total(model, best)):
        return ColumnSolution(Status.OPTIMAL, picked - model.starts[:-1], total, total, "", usage, stats, kept)
    return ColumnSolution(
        Status.LIMIT,
        picked - model.starts[:-1],
        total,
        min(proven_bound, total),
        "limit: incumbent and verified bound (the proof did not close in time)",
        usage,
        stats,
        kept,
    )


PROOF_ATTEMPTS = 3  # verified MILPs per fixing set, each aimed at the incumbent found before


def _verified_subset(
    model: ColumnModel, kept: np.ndarray, best: np.ndarray | None, upper: float, deadline: float
) -> tuple[MilpSolution, np.ndarray | None, float]:
    """The verified MILP over ``kept``, aimed at proving the incumbent ``upper`` (new incumbent if found).

    The driver proves "no point below the target" with target U (1 - OPTIMAL_TOLERANCE / 2),
    which :func:`closes` accepts. When HiGHS or the driver's own branch and bound finds a
    point below the target (HiGHS's MILP answer is not always its optimum), the incumbent
    improves and the proof is aimed again at the new one.
    """
    milp = None
    for _ in range(PROOF_ATTEMPTS):
        target = upper - OPTIMAL_TOLERANCE / 2 * abs(upper) if math.isfinite(upper) else None
        milp = model.verified_solve(kept, time_limit_s=deadline - time.perf_counter(), proof_target=target)
        improved = False
        if milp.x is not None:
            x = np.zeros(len(model.cost))
            x[model.choice(milp.x)] = 1.0
            if _feasible(model, x) and _total(model, x) < upper:
                best, upper, improved = x, _total(model, x), True
        if not improved or closes(milp.dual_bound, upper) or time.perf_counter() >= deadline or stop_requested():
            break
    assert milp is not None
    return milp, best, upper


def closes(bound: float, cost: float) -> bool:
    """Whether a verified ``bound`` proves ``cost`` optimal within OPTIMAL_TOLERANCE."""
    return math.isfinite(cost) and bound >= cost - OPTIMAL_TOLERANCE * abs(cost)


def _total(model: ColumnModel, x: np.ndarray) -> float:
    """The chosen columns' total cost, rounded up (fsum is correctly rounded). A sum of 0 is
    exact (a nonzero exact sum of floats is a multiple of the least subnormal, so it rounds to
    no 0) and stays 0: rounded up it would be a hair above the bound 0 of free plans."""
    total = math.fsum(model.cost[model.choice(x)])
    return total if total == 0.0 else _up(total)


def _feasible(model: ColumnModel, x: np.ndarray) -> bool:
    """Whether one column per job meets every shared limit (integer uses: float sums are exact)."""
    return bool((model.usage(model.choice(x)) <= model.limits).all())


def _up(value: float) -> float:
    """``value`` moved up past one rounding error (it came from one float operation)."""
    return float(np.nextafter(value + 2 * UNIT_ROUNDOFF * abs(value) + TINY, np.inf))


def _down(value: float) -> float:
    """``value`` moved down past one rounding error (it came from one float operation)."""
    return float(np.nextafter(value - 2 * UNIT_ROUNDOFF * abs(value) - TINY, -np.inf))


def _incumbent(
    model: ColumnModel, x_lp: np.ndarray, delta: np.ndarray, deadline: float
) -> tuple[np.ndarray | None, float]:
    """A quick feasible joint solution by rounding the LP (``None``, inf if none found fast).

    Every job the LP assigns integrally keeps its column; the (few, at most one per
    shared row in a basic solution) fractional jobs choose among their smallest-delta
    columns, then among all their columns, in short MILPs that need not be proven.
    """
    n = len(model.cost)
    support = np.flatnonzero(x_lp > SUPPORT_TOLERANCE)
    by_delta = np.lexsort((delta, model.job_of))
    rank = np.empty(n, dtype=np.int64)
    rank[by_delta] = np.arange(n) - model.starts[model.job_of[by_delta]]  # 0 = smallest delta of its job
    fractional = np.zeros(model.jobs, dtype=bool)
    fractional[model.job_of[support[x_lp[support] < 1 - SUPPORT_TOLERANCE]]] = True
    near = fractional[model.job_of]
    if not near.any():
        x = np.zeros(n)
        x[model.choice(np.where(x_lp > 0.5, 1.0, 0.0))] = 1.0
        return (x, _total(model, x)) if _feasible(model, x) else (None, math.inf)  # the LP optimum is integral
    attempts = [np.union1d(support, np.flatnonzero(near & (rank < width))) for width in INCUMBENT_WIDTHS]
    attempts.append(np.union1d(support, np.flatnonzero(near)))
    tried: set[bytes] = set()
    for subset in attempts:
        remaining = deadline - time.perf_counter()
        if remaining <= 0 or stop_requested():
            break
        if subset.tobytes() in tried:
            continue  # the same columns as an earlier attempt
        tried.add(subset.tobytes())
        result = model.solve(
            subset, integer=True, time_limit_s=min(remaining / 10, INCUMBENT_SECONDS), gap=INCUMBENT_GAP
        )
        if result.x is not None:
            x = np.zeros(n)
            x[model.choice(result.x)] = 1.0
            if _feasible(model, x):
                return x, _total(model, x)
    return None, math.inf
