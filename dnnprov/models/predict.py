"""The performance predictor: what the model says about one given plan.

Both papers' systems are built around a predictor (spotDNN's performance model, λDNN's
performance predictor): given a plan, predict its training time and cost. :func:`predict`
is that, for a :class:`~dnnprov.problems.spot.SpotProblem` (a count per column and a PS count) or a
:class:`~dnnprov.problems.serverless.ServerlessProblem` (functions, memory, PS count, and
optionally a local batch that does not follow eq. 9). It returns a JSON-ready dict with
``time_s`` and ``cost`` like ``solve --json``, the model's intermediate quantities, whether
the plan is feasible (and why not) and whether it lies inside the workload's validity
domain.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from dnnprov.errors import InvalidInputError
from dnnprov.models.serverless import ServerlessModel
from dnnprov.models.spot import SpotModel, within_budget
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.problems.validation import checks as check
from dnnprov.result import finite_or_none

#: Points of the predicted loss curve (evenly spaced in normalized iterations).
CURVE_POINTS = 21


def predict(
    problem: SpotProblem | ServerlessProblem,
    *,
    counts: Mapping[str, int] | None = None,
    ps: int = 1,
    functions: int | None = None,
    memory_mb: int | None = None,
    local_batch: float | None = None,
) -> dict[str, Any]:
    """Predict one plan of ``problem``; returns a JSON-ready dict.

    Spot: ``counts`` maps column labels (type name, or ``name:on-demand``) to counts
    (missing columns: 0), ``ps`` is the PS count. Serverless: ``functions`` and
    ``memory_mb`` (required), ``ps``, and ``local_batch`` to predict a plan whose local
    batch is not eq. (9)'s. Keys common to both: ``kind``, ``instance``, ``time_s``,
    ``cost``, ``feasible``, ``reasons`` (why not feasible; empty when feasible),
    ``inside_domain`` and ``domain``.
    """
    check_plan(problem, counts=counts, ps=ps, functions=functions, memory_mb=memory_mb, local_batch=local_batch)
    if isinstance(problem, SpotProblem):
        return _predict_spot(problem, counts or {}, ps)
    assert functions is not None and memory_mb is not None  # checked
    return _predict_serverless(problem, functions, memory_mb, ps, local_batch)


def check_plan(
    problem: SpotProblem | ServerlessProblem,
    *,
    counts: Mapping[str, int] | None = None,
    ps: int = 1,
    functions: int | None = None,
    memory_mb: int | None = None,
    local_batch: float | None = None,
) -> None:
    """Refuse, as :func:`predict` would, a plan it cannot predict (one :class:`InvalidInputError`
    naming the argument), without predicting it: the service refuses such a job at once."""
    if isinstance(problem, SpotProblem):
        if functions is not None or memory_mb is not None or local_batch is not None:
            raise InvalidInputError("functions", "a spot plan is given by counts (and ps), not functions/memory")
        labels = problem.columns().labels
        for label, n in (counts or {}).items():
            if label not in labels:
                raise InvalidInputError(f"counts.{label}", f"unknown column (offered: {', '.join(labels)})")
            _integer(f"counts.{label}", n, 0, check.MAX_QUOTA)
        _integer("ps", ps, 1, check.MAX_PS_COUNT)
        if not any((counts or {}).values()):
            raise InvalidInputError("counts", "the plan has no workers")
        return
    if isinstance(problem, ServerlessProblem):
        if counts:
            raise InvalidInputError("counts", "a serverless plan is given by functions and memory_mb, not counts")
        if functions is None or memory_mb is None:
            raise InvalidInputError(
                "functions" if functions is None else "memory_mb",
                "missing: a serverless plan needs functions and memory_mb",
            )
        _integer("functions", functions, 1, check.MAX_FUNCTIONS)
        _integer("memory_mb", memory_mb, 1, check.MAX_MEMORY_MB)
        _integer("ps", ps, 1, check.MAX_PS_COUNT)
        if local_batch is not None:  # finite, at least 1e-9 and at most a batch's limit: 1e-320 overflowed eq. (2)
            check.number("local_batch", local_batch, exclusive_minimum=0, maximum=check.MAX_BATCH)
        return
    raise InvalidInputError("problem", f"must be a SpotProblem or ServerlessProblem, got {type(problem).__name__}")


def _integer(field: str, value: object, minimum: int, maximum: int) -> int:
    """``value`` as an integer from ``minimum`` to ``maximum`` (the format's resource limit of
    the field: a plan beyond it is no plan the solvers could give, and numpy cannot hold some)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidInputError(field, f"must be an integer >= {minimum}, got {str(value)[:40]}")
    if value > maximum:
        raise InvalidInputError(field, f"must be at most {maximum:,} (resource limit), got {str(value)[:40]}")
    return int(value)


def _f(value: Any) -> float | None:
    return finite_or_none(float(value))


def _predict_spot(problem: SpotProblem, counts: Mapping[str, int], ps: int) -> dict[str, Any]:
    model = SpotModel(problem)
    cols = model.columns
    vector = np.zeros(len(cols), dtype=np.int64)
    for label, n in counts.items():  # labels and integers checked (check_plan)
        vector[cols.labels.index(label)] = int(n)
    ps = int(ps)
    e = model.evaluate(vector[None, :], np.array([ps]))
    w, slo, cons = problem.workload, problem.slo, problem.constraints
    workers = int(e.workers[0])
    b_w, j = float(e.batch_wa[0]), float(e.iterations[0])
    times = model.iteration_times(np.array([workers]), np.array([ps]))[0]
    speeds = cols.batch / times  # v^i per column
    v = float((vector * speeds).sum())
    top = float(speeds[vector > 0].max())
    cc = math.sqrt(max(1 - 2 * top / v + float((vector * speeds**2).sum()) / v**2, 0.0))  # eq. (5)
    bandwidth = float(model.worker_bandwidth(np.array([workers]), np.array([ps]))[0])
    p = w.alpha_1 * math.sqrt(workers) + w.beta_1
    p = min(p, 1.0) if model.reference else min(max(p, 0.0), 1.0)

    reasons = []
    if not (j > 0):
        reasons.append(f"eq. (3) has no positive root: the loss SLO {slo.loss:g} is unreachable at b_w {b_w:.6g}")
    elif float(e.time_s[0]) > slo.time_s * (1 + 1e-12):
        reasons.append(f"time {float(e.time_s[0]):.2f} s exceeds slo.time_s {slo.time_s:g} s")
    for i, label in enumerate(cols.labels):
        if vector[i] > cols.upper[i]:
            reasons.append(f"{label}: {vector[i]} exceeds the quota {cols.upper[i]}")
        if vector[i] < cols.lower[i]:
            reasons.append(f"{label}: {vector[i]} drops kept instances (constraints.existing {cols.lower[i]})")
    low, high = cons.workers
    if workers < low or (high is not None and workers > high):
        reasons.append(f"|N| {workers} outside constraints.workers {list(cons.workers)}")
    if not cons.ps_count[0] <= ps <= cons.ps_count[1]:
        reasons.append(f"ps {ps} outside constraints.ps_count {list(cons.ps_count)}")
    for (per_column, limit), quota in zip(model.vcpu_rows, cons.vcpu_quotas):
        used = int(vector @ per_column)
        if used > limit:
            reasons.append(f"vCPU quota {quota.family}/{quota.market}: {used} > {limit}")
    if cons.budget_usd is not None and not within_budget(e.cost[0], cons.budget_usd):
        reasons.append(f"cost ${float(e.cost[0]):.6f} exceeds constraints.budget_usd {cons.budget_usd:g}")
    inside = bool(e.inside_domain[0])
    note = model.domain_note(b_w, workers, iterations=_f(j))
    if not inside and note is not None:  # a plan outside the domain always has a note
        reasons.append(note)
    (b_low, b_high), (k_low, k_high) = model.domain_bounds()

    numerator = w.gamma_2 * b_w + w.gamma_3
    spread = workers if w.loss_variant == "no-cc" else (cc + w.gamma_4) * workers
    curve = []
    if j > 0:
        for step in np.linspace(0.0, j, CURVE_POINTS):
            loss = numerator * math.sqrt(spread) / (step + w.gamma_1) + w.gamma_5 if step + w.gamma_1 > 0 else None
            curve.append(
                {
                    "iterations": float(step),
                    "time_s": float(step / e.iteration_rate[0]),
                    "loss": _f(loss) if loss is not None else None,
                }
            )
    return {
        "kind": "spot",
        "model": problem.model,
        "instance": problem.name,
        "plan": {"counts": {label: int(n) for label, n in zip(cols.labels, vector) if n}, "ps": ps},
        "time_s": _f(e.time_s[0]),
        "cost": _f(e.cost[0]),
        "feasible": bool(e.feasible[0]),
        "reasons": reasons,
        "inside_domain": inside,
        "domain": {
            "batch_wa": [b_low, _f(b_high)],
            "workers": [k_low, k_high],
            "note": model.domain_note(b_w, workers, cc, _f(j)),
            "extrapolated": model.extrapolated_axes(b_w, workers, _f(j)),
        },
        "workers": workers,
        "batch_wa": b_w,
        "cc": cc,
        "cc_in_loss_model": w.loss_variant == "cc",
        "iterations": _f(j),
        "loss_objective": slo.loss,
        "loss_curve": curve,
        "iteration_rate_per_s": _f(e.iteration_rate[0]),
        "speed_samples_per_s": _f(e.speed[0]),
        "contention_probability": p,
        "bandwidth_mb_s": bandwidth,
        "ps_bandwidth_mb_s": ps * problem.platform.ps_bandwidth_mb_s,
        "iteration_time_s": {label: float(times[i]) for i, label in enumerate(cols.labels) if vector[i]},
    }


def _predict_serverless(
    problem: ServerlessProblem, functions: int, memory_mb: int, ps: int, local_batch: float | None
) -> dict[str, Any]:
    n, m, s = int(functions), int(memory_mb), int(ps)  # checked (check_plan)
    model = ServerlessModel(problem)
    e = model.evaluate(np.array([n]), np.array([m]), np.array([s]), local_batch=local_batch)
    train, k, t_load, per_iteration = model.training_time(np.array([n]), np.array([m]), np.array([s]), local_batch)
    w, p, c = problem.workload, problem.platform, problem.constraints
    rate = w.rate_alpha * m + w.rate_beta
    storage = min(w.storage_alpha * m + w.storage_beta, p.storage_bandwidth_mb_s)
    ps_bw = min(p.function_bandwidth_mb_s, s * p.ps_bandwidth_mb_s / n)
    b_l = float(e.local_batch[0])
    time = float(e.time_s[0])

    reasons = []
    if rate <= 0 or storage <= 0:
        reasons.append(
            f"eq. (6)/(8) give a non-positive rate ({rate:g} samples/s) or storage bandwidth ({storage:g} MB/s) at {m} MB"
        )
    if m % p.memory_step_mb or m > p.max_memory_mb:
        reasons.append(f"{m} MB is not on the memory grid ({p.memory_step_mb} MB steps up to {p.max_memory_mb} MB)")
    if m < w.min_memory_mb:
        reasons.append(f"{m} MB is below the workload's minimum memory {w.min_memory_mb} MB: the run fails")
    low, high = problem.function_range()
    if not low <= n <= high:
        reasons.append(f"{n} functions outside the range {low}-{high} (constraints.functions, concurrency limit)")
    if not c.ps_count[0] <= s <= c.ps_count[1]:
        reasons.append(f"ps {s} outside constraints.ps_count {list(c.ps_count)}")
    if b_l < 1:
        reasons.append(f"local batch {b_l:g} is below one sample")
    if np.isfinite(train[0]) and t_load[0] + per_iteration[0] > p.timeout_s - p.checkpoint_margin_s:
        reasons.append("loading plus one iteration does not fit in one function's lifetime before its checkpoint")
    if time > problem.time_s * (1 + 1e-12):
        reasons.append(f"time {time:.2f} s exceeds slo.time_s {problem.time_s:g} s")
    if c.budget_usd is not None and not within_budget(e.cost[0], c.budget_usd):
        reasons.append(f"cost ${float(e.cost[0]):.6f} exceeds constraints.budget_usd {c.budget_usd:g}")
    inside = bool(e.inside_domain[0])
    (m_low, m_high), (n_low, n_high) = model.domain_bounds()
    note = model.domain_note(n, m)
    if not inside and note is not None:  # a plan outside the domain always has a note
        reasons.append(note)
    iteration_comp = b_l / rate if rate > 0 else math.inf
    return {
        "kind": "serverless",
        "model": "lambda-dnn",
        "instance": problem.name,
        "plan": {"functions": n, "memory_mb": m, "local_batch": b_l, "ps": s},
        "time_s": _f(time),
        "cost": _f(e.cost[0]),
        "feasible": bool(e.feasible[0]),
        "reasons": reasons,
        "inside_domain": inside,
        "domain": {"memory_mb": [m_low, _f(m_high)], "functions": [n_low, n_high], "note": note},
        "local_batch_rule": "eq. (9)" if local_batch is None else "given",
        "global_batch": b_l * n,
        "iterations": _f(k[0]),
        "launches": int(e.launches[0]) if np.isfinite(e.launches[0]) else None,
        "rate_samples_per_s": rate,
        "storage_bandwidth_mb_s": storage,
        "ps_bandwidth_mb_s": ps_bw,
        "load_s": _f(t_load[0]),
        "compute_per_iteration_s": _f(iteration_comp),
        "communication_per_iteration_s": _f(2 * w.model_mb / ps_bw),
        "training_s": _f(train[0]),
    }
