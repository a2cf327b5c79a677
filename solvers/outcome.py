"""Turning a plan found by any method into a :class:`~dnnprov.result.Result`."""

from __future__ import annotations

import time
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from dnnprov.models.serverless import ServerlessModel
from dnnprov.models.spot import SpotEvaluation
from dnnprov.problems.spot import SpotColumns, SpotProblem
from dnnprov.result import Objective, Result, ServerlessPlan, SpotPlan, Status


class SpotPlanModel(Protocol):
    """What packaging a spot plan reads of its model: a :class:`~dnnprov.models.spot.SpotModel`,
    or one that judges plans by another criterion
    (:class:`~dnnprov.solvers.spot.incumbents.JudgedModel`)."""

    @property
    def problem(self) -> SpotProblem: ...

    @property
    def columns(self) -> SpotColumns: ...

    def evaluate(self, counts: npt.ArrayLike, ps: npt.ArrayLike = 1) -> SpotEvaluation: ...

    def domain_note(
        self, batch_wa: float, workers: int, cc: float | None = None, iterations: float | None = None
    ) -> str | None: ...

    def extrapolated_axes(self, batch_wa: float, workers: int, iterations: float | None = None) -> list[str]: ...


def spot_result(
    model: SpotPlanModel,
    counts: np.ndarray | None,
    ps: int,
    *,
    status: Status,
    method: str,
    started: float,
    bound: float | None = None,
    message: str = "",
    stats: dict[str, Any] | None = None,
    objective: Objective = Objective(),
) -> Result:
    """Re-evaluate ``counts`` with the model and package it; ``counts=None``: no plan.

    An ``optimal`` result without a ``bound`` gets the plan's ``objective`` value as its bound.
    """
    problem = model.problem
    base: dict[str, Any] = dict(
        method=method,
        kind="spot",
        model=problem.model,
        instance=problem.name,
        message=message,
        stats=stats or {},
        objective=objective,
    )
    if counts is None:
        return Result(status=status, bound=bound, solve_seconds=time.perf_counter() - started, **base)
    counts = np.asarray(counts, dtype=np.int64)
    ev = model.evaluate(counts[None, :], ps)
    if not ev.feasible[0]:
        raise AssertionError(f"{method} returned a plan the model rejects: {counts.tolist()}, ps={ps}")
    cost = float(ev.cost[0])
    if status is Status.OPTIMAL and bound is None:
        bound = objective.value(float(ev.time_s[0]), cost)
    plan = SpotPlan(counts={label: int(n) for label, n in zip(model.columns.labels, counts)}, ps=int(ps))
    details: dict[str, Any] = {
        "workers": int(ev.workers[0]),
        "batch_wa": float(ev.batch_wa[0]),
        "cc": float(ev.cc[0]),
        "iterations": float(ev.iterations[0]),
        "new_instances": {
            label: int(n - low) for label, n, low in zip(model.columns.labels, counts, model.columns.lower) if n > low
        },
    }
    note = model.domain_note(float(ev.batch_wa[0]), int(ev.workers[0]), float(ev.cc[0]), float(ev.iterations[0]))
    _add_domain_note(base, details, note)
    extrapolated = model.extrapolated_axes(float(ev.batch_wa[0]), int(ev.workers[0]), float(ev.iterations[0]))
    if extrapolated:
        details["extrapolated"] = extrapolated
    return Result(
        status=status,
        plan=plan,
        time_s=float(ev.time_s[0]),
        cost=cost,
        bound=bound,
        solve_seconds=time.perf_counter() - started,
        details=details,
        **base,
    )


def _add_domain_note(base: dict[str, Any], details: dict[str, Any], note: str | None) -> None:
    """Say in the result where the plan sits in the workload's validity domain (if anywhere notable)."""
    if note is None:
        return
    details["domain"] = note
    base["message"] = f"{base['message']}; {note}" if base["message"] else note


def serverless_result(
    model: ServerlessModel,
    plan: tuple[int, int, int] | None,
    *,
    status: Status,
    method: str,
    started: float,
    bound: float | None = None,
    message: str = "",
    stats: dict[str, Any] | None = None,
    objective: Objective = Objective(),
) -> Result:
    """Re-evaluate ``plan = (functions, memory_mb, ps)`` and package it; ``None``: no plan.

    An ``optimal`` result without a ``bound`` gets the plan's ``objective`` value as its bound.
    """
    problem = model.problem
    base: dict[str, Any] = dict(
        method=method,
        kind="serverless",
        model="lambda-dnn",
        instance=problem.name,
        message=message,
        stats=stats or {},
        objective=objective,
    )
    if plan is None:
        return Result(status=status, bound=bound, solve_seconds=time.perf_counter() - started, **base)
    n, m, s = (int(v) for v in plan)
    ev = model.evaluate(n, m, s)
    if not ev.feasible:
        raise AssertionError(f"{method} returned a plan the model rejects: {plan}")
    cost = float(ev.cost)
    if status is Status.OPTIMAL and bound is None:
        bound = objective.value(float(ev.time_s), cost)
    details: dict[str, Any] = {"iterations": float(ev.iterations), "launches": int(ev.launches)}
    _add_domain_note(base, details, model.domain_note(n, m))
    return Result(
        status=status,
        plan=ServerlessPlan(n, m, float(ev.local_batch), s),
        time_s=float(ev.time_s),
        cost=cost,
        bound=bound,
        solve_seconds=time.perf_counter() - started,
        details=details,
        **base,
    )
