"""Why jobs that each have a plan have no joint plan: the shared limit that cannot hold.

:func:`dnnprov.solvers.joint.provision.solve_many` proves a joint instance infeasible (a verified
Farkas certificate or a verified branch and bound). When every job has a plan on its own,
the cause is the shared limits; :func:`shared_limit_reasons` drops one shared row at a time
and solves again. A row whose removal admits a joint plan is a cause: the instance is
proven infeasible with it and the plan shows that without it there is one. ``needed`` is
then the least limit of that row admitting a joint plan, found by bisection between the
proven-infeasible limit and the plan's usage (:func:`least_limit`); ``proven`` says whether
the bisection closed within the time limit. When no single row is the cause and every
relaxed solve proved infeasibility, the rows hold only together.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
from dnnprov.solvers.joint.columns import CONCURRENCY_ROW, Problem, SharedLimits, spot_usage_rows

from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import Reason, Result, ServerlessPlan, SpotPlan, Status


class JointOutcome(Protocol):
    """What this module reads of a :class:`~dnnprov.solvers.joint.provision.JointResult` (joint.py imports this module)."""

    @property
    def status(self) -> Status: ...
    @property
    def cost(self) -> float | None: ...
    @property
    def results(self) -> Sequence[Result]: ...


def without_row(shared: SharedLimits, row: str) -> SharedLimits:
    """``shared`` with the one row ``row`` (a :meth:`SharedLimits.rows` name) dropped."""
    if row == CONCURRENCY_ROW:
        return dataclasses.replace(shared, concurrency=None)
    if row.startswith("quota:"):
        label = row.removeprefix("quota:")
        return dataclasses.replace(shared, quotas={k: v for k, v in shared.quotas.items() if k != label})
    return dataclasses.replace(
        shared, vcpu_quotas=tuple(q for q in shared.vcpu_quotas if f"vcpu:{q.family}/{q.market}" != row)
    )


def with_row_limit(shared: SharedLimits, row: str, limit: int) -> SharedLimits:
    """``shared`` with the limit of row ``row`` set to ``limit``."""
    if row == CONCURRENCY_ROW:
        return dataclasses.replace(shared, concurrency=limit)
    if row.startswith("quota:"):
        return dataclasses.replace(shared, quotas={**shared.quotas, row.removeprefix("quota:"): limit})
    return dataclasses.replace(
        shared,
        vcpu_quotas=tuple(
            dataclasses.replace(q, vcpus=limit) if f"vcpu:{q.family}/{q.market}" == row else q
            for q in shared.vcpu_quotas
        ),
    )


def least_limit(
    problems: Sequence[Problem],
    shared: SharedLimits,
    row: str,
    infeasible_at: int,
    feasible_at: int,
    deadline: float,
    solve: Callable[..., JointOutcome],
) -> tuple[int, bool]:
    """The least limit of ``row`` that admits a joint plan, by bisection between two proofs.

    Every usage is an integer (instances, vCPUs, functions), the instance is proven
    infeasible with the limit ``infeasible_at`` and has a plan using ``feasible_at``, and
    raising a limit never removes a plan, so the least feasible limit lies in
    ``(infeasible_at, feasible_at]``. Each probe either proves infeasibility (the least is
    above it) or finds a plan (the least is at most its usage). Returns ``(limit, proven)``:
    ``proven`` is ``False`` when the time ran out first (``limit`` then suffices).
    """
    low, high = infeasible_at, feasible_at
    while high - low > 1:
        left = deadline - time.perf_counter()
        if left <= 0:
            return high, False
        mid = (low + high) // 2
        probe = solve(problems, shared=with_row_limit(shared, row, mid), time_limit_s=left, explain=False)
        if probe.status is Status.INFEASIBLE:
            low = mid
        elif probe.cost is not None:
            high = min(mid, round(row_usage(problems, probe.results, shared, row)))
        else:
            return high, False
    return high, True


def row_field(row: str) -> str:
    """The input field of a shared row (``shared.quotas.g3.8xlarge``, ``shared.concurrency``)."""
    if row == CONCURRENCY_ROW:
        return "shared.concurrency"
    if row.startswith("quota:"):
        return f"shared.quotas.{row.removeprefix('quota:')}"
    return f"shared.vcpu_quotas.{row.removeprefix('vcpu:')}"


def row_usage(problems: Sequence[Problem], results: Sequence[Result], shared: SharedLimits, row: str) -> float:
    """How much of shared row ``row`` the jobs' plans use together."""
    total = 0.0
    for i, (problem, result) in enumerate(zip(problems, results)):
        plan = result.plan
        if isinstance(problem, ServerlessProblem) and isinstance(plan, ServerlessPlan):
            total += plan.functions if row == CONCURRENCY_ROW else 0
        elif isinstance(problem, SpotProblem) and isinstance(plan, SpotPlan):
            names, a = spot_usage_rows(problem, shared, f"problems[{i}]")
            if row in names:
                counts = np.array([plan.counts.get(label, 0) for label in problem.columns().labels], dtype=float)
                total += float(a[names.index(row)] @ counts)
    return total


def shared_limit_reasons(
    problems: Sequence[Problem], shared: SharedLimits, deadline: float, solve: Callable[..., JointOutcome]
) -> tuple[Reason, ...]:
    """Reasons a proven-infeasible joint instance (every job feasible alone) has no joint plan.

    ``solve`` is :func:`solve_many` (called with ``explain=False``); ``deadline`` a
    ``time.perf_counter()`` value shared by the relaxed solves.
    """
    rows = shared.rows()
    reasons: list[Reason] = []
    every_relaxation_proven = True
    for k, (row, limit) in enumerate(rows.items()):
        left = deadline - time.perf_counter()
        if left <= 0:
            every_relaxation_proven = False
            break
        relaxed = solve(problems, shared=without_row(shared, row), time_limit_s=left / (len(rows) - k), explain=False)
        if relaxed.status is Status.INFEASIBLE:
            continue
        if relaxed.cost is None:  # stopped without a joint plan: nothing shown
            every_relaxation_proven = False
            continue
        used = round(row_usage(problems, relaxed.results, shared, row))
        needed, least = least_limit(problems, shared, row, int(limit), used, deadline, solve)
        shown = (
            "no smaller limit admits a joint plan (proven)"
            if least
            else "the time limit ended the search for a smaller one"
        )
        reasons.append(
            Reason(
                "vcpu_quota" if row.startswith("vcpu:") else "quota",
                row_field(row),
                limit,
                needed,
                least,
                f"{row_field(row)}: the jobs cannot share {limit:g}; they need {needed:g} ({shown}; proven "
                f"infeasible with the limit)",
            )
        )
    if reasons:
        return tuple(reasons)
    if every_relaxation_proven and len(rows) > 1:
        return (
            Reason(
                "combination",
                "shared",
                None,
                None,
                True,
                f"no single shared limit is the cause: dropping any one of the {len(rows)} still leaves no "
                "joint plan (each proven infeasible); they cannot hold together",
            ),
        )
    return (
        Reason(
            "unexplained",
            "shared",
            None,
            None,
            False,
            "the time limit ended the search for the shared limit that cannot hold",
        ),
    )
