"""Runs of the control loop on the trace cloud: ``dnnprov simulate``'s engine.

A run takes the aligned traces of each spot type of the plan as its pools (one pool per
trace, zone from the file name), all read from one offset drawn in the replay period such
that the window (``horizon x T_obj`` plus a poll) stays inside the traces, and runs the
loop of :mod:`dnnprov.control.loop` with the stand-in trainer. Each run keeps its offset and
its event timeline, so that any run can be replayed alone or run against the EC2 twin from
the same offset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from dnnprov.control.capacity import CapacityBook, PoolSpec
from dnnprov.control.loop import Controller, Event, Outcome, PoolInfo, RunSettings
from dnnprov.control.trace_cloud import TraceCloud
from dnnprov.control.trainer import ProgressModel, stand_in
from dnnprov.errors import InvalidInputError
from dnnprov.problems.interruption import Trace
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import SpotPlan
from dnnprov.revocation.policies import Policy


@dataclass(frozen=True)
class LoopRun:
    """One run: its window's offset (ticks), outcome and events."""

    offset: int
    outcome: Outcome
    events: tuple[Event, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"offset": self.offset, **self.outcome.to_dict(), "events": [e.to_dict() for e in self.events]}


def trace_pools(problem: SpotProblem, traces: Mapping[str, Sequence[Trace]], offset: int) -> list[PoolSpec]:
    """The pools of a run at ``offset``: one per trace of each type, priced at its zone's
    spot price in the problem (else the type's); zones unnamed by the file are ``zone-K``."""
    pools = []
    for t in problem.instance_types:
        offered = {z.zone: z for z in t.zones}
        for k, trace in enumerate(traces.get(t.name, ())):
            zone = trace.zone or f"zone-{k}"
            price = offered[zone].spot_price_per_h if zone in offered and offered[zone].spot_price_per_h else None
            pools.append(PoolSpec(t.name, zone, trace, offset, t.spot_price_per_h if price is None else price))
    return pools


def window_starts(traces: Mapping[str, Sequence[Trace]], span_s: float,
                  period: tuple[float, float] = (0.0, 1.0)) -> tuple[int, int]:
    """First and last-plus-one offsets (ticks) whose window of ``span_s`` seconds (plus the tick
    the clock may reach at its end) lies inside ``period`` of every trace (fractions of their
    common length): the replays' containment rule
    (:func:`dnnprov.revocation.availability.window_starts`), never past a trace's end and never
    from one period into the other."""
    from dnnprov.revocation.availability import aligned
    from dnnprov.revocation.availability import window_starts as contained

    every = [t for items in traces.values() for t in items]
    length, gap = aligned(every)
    first, end = int(period[0] * length), int(period[1] * length)
    low, high = first, end
    for trace in every:
        a, b = contained(trace, span_s + gap, first, end, period if period != (0.0, 1.0) else None)
        low, high = max(low, a), min(high, b)
    return low, high


def run_once(problem: SpotProblem, plan: SpotPlan, traces: Mapping[str, Sequence[Trace]], policy: Policy,
             offset: int, settings: RunSettings, run_id: str = "replay") -> LoopRun:
    """One run of the loop on the trace cloud from ``offset``."""
    pools = trace_pools(problem, traces, offset)
    cloud = TraceCloud(CapacityBook(pools))
    controller = Controller(problem, plan, policy, cloud, run_id=run_id,
                            pools=[PoolInfo(p.type_name, p.zone, p.price_per_h) for p in pools],
                            trainer=stand_in(ProgressModel(problem, plan, settings.join_s), run_id),
                            settings=settings)
    outcome = controller.run()
    return LoopRun(offset=offset, outcome=outcome, events=tuple(sorted(controller.events, key=lambda e: e.time_s)))


def run_many(problem: SpotProblem, plan: SpotPlan, traces: Mapping[str, Sequence[Trace]],
             make_policy: Callable[[], Policy], *, runs: int, seed: int, settings: RunSettings,
             period: tuple[float, float] = (0.0, 1.0), offsets: Sequence[int] | None = None,
             on_run: Callable[[int, int], None] | None = None) -> list[LoopRun]:
    """``runs`` runs from offsets drawn with ``seed`` in ``period`` (or the ``offsets`` given)."""
    span = settings.horizon * problem.slo.time_s + settings.poll_s
    first, last = window_starts(traces, span, period)
    if offsets is None:
        rng = np.random.default_rng(seed)
        offsets = [int(rng.integers(first, last)) for _ in range(runs)]
    out = []
    for k, offset in enumerate(offsets):
        if not first <= offset < last:
            raise InvalidInputError("offset", f"{offset} is outside the window starts {first}..{last - 1}")
        out.append(run_once(problem, plan, traces, make_policy(), offset, settings))
        if on_run is not None:
            on_run(k + 1, len(offsets))
    return out


def loop_policy_factory(problem: SpotProblem, plan: SpotPlan, traces: Mapping[str, Sequence[Trace]], policy: str,
                        *, join_s: float, horizon: float, model: Any = None,
                        fit_period: tuple[float, float] | None = None) -> Callable[[], Policy]:
    """A fresh-policy factory by name; ``mpc`` gets its exact table, fitted as ``simulate`` fits it."""
    from dnnprov.revocation.availability import fit_availability
    from dnnprov.revocation.policies import make_policy
    from dnnprov.revocation.pool_replay import PoolReplay

    if policy != "mpc":
        make_policy(policy)                                 # refuses an unknown name now
        return lambda: make_policy(policy)
    replay = PoolReplay(problem, traces, zones=True, join_s=join_s, horizon=horizon)
    if model is None:
        want, _ = replay.plan_workers(plan)
        model = {}
        for i in np.flatnonzero(want):
            kind = replay.types[int(i)]
            if kind not in traces:
                raise InvalidInputError(f"--trace {kind}", "mpc fits every type of the plan: give this type's traces")
            model[kind] = fit_availability(traces[kind], max(problem.instance_types[int(i)].quota, int(want[i])),
                                           fit_period or (0.0, 1.0))
    table = replay.takeover_table(plan, model)
    return lambda: make_policy("mpc", table)


def summarize(policy: str, runs: Sequence[LoopRun], settings: dict[str, Any], per_run: bool) -> dict[str, Any]:
    """``simulate --engine loop --json``: the aggregate (same keys as the tick engine) and the runs."""
    cost = np.array([r.outcome.cost for r in runs])
    finish = [r.outcome.finish_s for r in runs if r.outcome.finish_s is not None]
    out: dict[str, Any] = {
        "runs": len(runs), "policy": policy, "engine": "loop",
        "met_deadline": float(np.mean([r.outcome.met_deadline for r in runs])),
        "finished": len(finish) / len(runs), "cost_mean": float(cost.mean()),
        "cost_p95": float(np.percentile(cost, 95)), "finish_s_mean": float(np.mean(finish)) if finish else None,
        "loss_mean": float(np.mean([r.outcome.loss for r in runs])),
        "revocations_mean": float(np.mean([r.outcome.revocations for r in runs])),
        "launches_mean": float(np.mean([r.outcome.launches for r in runs])),
        "refusals_mean": float(np.mean([r.outcome.refusals for r in runs])),
        "on_demand_launched_mean": float(np.mean([r.outcome.on_demand_launched for r in runs])),
        "settings": settings}
    if per_run:
        out["per_run"] = [r.to_dict() for r in runs]
    return out
