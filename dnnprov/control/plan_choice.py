"""The plan cheapest under ``mpc`` run on the control loop over the fit period (``dnnprov risk plan``).

Every single-type candidate plan (docs/revocation.md, :mod:`dnnprov.revocation.plan_choice`)
is priced by :func:`dnnprov.control.replay.run_many` under ``mpc`` planned on the availability
model fitted on ``fit_period``, over windows drawn in that same period: the mean cost of its
runs; it counts only when at least :data:`MIN_MET` of them meet T_obj.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from functools import partial

import numpy as np

from dnnprov.control.loop import RunSettings
from dnnprov.control.replay import run_many, summarize
from dnnprov.errors import InvalidInputError
from dnnprov.models.training_progress import JOIN_OVERHEAD_S
from dnnprov.problems.interruption import Trace
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import SpotPlan
from dnnprov.revocation.availability import fit_availability
from dnnprov.revocation.plan_choice import (
    DEFAULT_RUNS,
    MAX_CANDIDATES,
    MIN_MET,
    PlanChoice,
)
from dnnprov.revocation.policies import make_policy
from dnnprov.revocation.replay.pool_replay import TracePools


def choose_plan(
    problem: SpotProblem,
    traces: Mapping[str, Sequence[Trace]],
    *,
    zones: bool = True,
    fit_period: tuple[float, float] = (0.0, 1.0),
    join_s: float = JOIN_OVERHEAD_S,
    runs: int = DEFAULT_RUNS,
    seed: int = 0,
    time_limit_s: float | None = None,
) -> PlanChoice:
    """Price every single-type plan by ``mpc`` run on the loop over the fit period (module docstring).

    ``zones`` is kept for callers: the traces of a type are always its aligned pools.

    ``time_limit_s`` (wall-clock seconds from this call): a candidate whose replay the limit
    cuts short is left out, and none is started after it; the choice then holds the
    cheapest of those priced and counts the rest (``unpriced``).
    """
    started = time.perf_counter()
    if not traces:
        raise InvalidInputError("--trace", "give the traces of at least one spot type")
    replay = TracePools(problem, traces, join_s=join_s, period=fit_period)  # windows fit the period
    settings = RunSettings(join_s=join_s, horizon=3.0)
    low, most = problem.constraints.ps_count
    high = low if most is None else most
    count = sum(problem.instance_types[replay.types.index(n)].quota for n in traces) * (high - low + 1)
    if count > MAX_CANDIDATES:
        raise InvalidInputError("--trace", f"{count:,} candidate plans are more than the limit of {MAX_CANDIDATES}")
    best: tuple[float, SpotPlan] | None = None
    candidates, sources, unpriced = [], [], 0
    for name, items in traces.items():
        quota = problem.instance_types[replay.types.index(name)].quota
        model = None
        for ps in range(low, high + 1):
            for workers in range(1, quota + 1):
                plan = SpotPlan(counts={name: workers}, ps=ps)
                cluster = _one_type(replay, name, workers)
                if replay.speed(cluster, ps) <= 0:
                    continue  # no progress (e.g. outside the loss model's domain)
                left = None if time_limit_s is None else time_limit_s - (time.perf_counter() - started)
                if left is not None and left <= 0:
                    unpriced += 1
                    continue
                if model is None:
                    model = fit_availability(items, quota, fit_period)
                    sources.append(model.source)
                table = replay.takeover_table(plan, model)
                done = run_many(
                    problem,
                    plan,
                    {name: items},
                    partial(make_policy, "mpc", table),
                    runs=runs,
                    seed=seed,
                    settings=settings,
                    period=fit_period,
                    time_limit_s=left,
                )
                if len(done) < runs:
                    unpriced += 1  # priced on fewer runs than the others: left out
                    continue
                summary = summarize("mpc", done, {}, False)
                ok = summary["met_deadline"] >= MIN_MET
                cost = float(summary["cost_mean"])
                candidates.append(
                    {
                        "type": name,
                        "workers": workers,
                        "ps": ps,
                        "met_deadline": summary["met_deadline"],
                        "expected_cost": cost if ok else None,
                    }
                )
                if ok and (best is None or cost < best[0]):
                    best = (cost, plan)
    return PlanChoice(
        problem=problem,
        plan=best[1] if best else None,
        expected_cost=best[0] if best else None,
        candidates=tuple(candidates),
        source="; ".join(sources),
        unpriced=unpriced,
        time_limit_s=time_limit_s,
    )


def _one_type(replay: TracePools, name: str, workers: int) -> np.ndarray:
    """Workers per type of a plan of ``workers`` instances of ``name``."""
    out = np.zeros(len(replay.types), dtype=np.int64)
    out[replay.types.index(name)] = workers
    return out
