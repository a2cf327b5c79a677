"""``dnnprov simulate``: runs of the control loop on the trace cloud, the one replay engine.

A run takes the aligned traces of each spot type of the plan as its pools (one pool per
trace, zone from the file name), all read from one offset drawn in the replay period such
that the window (``horizon x T_obj`` plus a poll) stays inside the traces (never wrapping: a
trace or period shorter than a window is refused), and runs the loop of
:mod:`dnnprov.control.loop` with the stand-in trainer under a policy of
:mod:`dnnprov.revocation.policies` (the objects ``dnnprov run`` uses). Each run keeps its
offset and its event timeline, so that any run can be replayed alone or run against the EC2
twin from the same offset. :class:`Simulation` is what the CLI and the service call: the
options checked at once, then the runs, their summary and, with ``hindsight``, each window's
proven lower bound (:mod:`dnnprov.revocation.replay.hindsight`), computed on the same windows after
the runs (it changes nothing else).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dnnprov.control.clouds.capacity import NOTICE_S, CapacityBook, PoolSpec
from dnnprov.control.clouds.trace import TraceCloud
from dnnprov.control.loop import Controller, Event, Outcome, PoolInfo, RunSettings
from dnnprov.control.trainer import ProgressModel, stand_in
from dnnprov.errors import InvalidInputError
from dnnprov.problems.interruption import Trace
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import SpotPlan
from dnnprov.revocation.availability import AvailabilityModel
from dnnprov.revocation.policy_view import Policy

if TYPE_CHECKING:
    from dnnprov.revocation.replay.hindsight import Hindsight

#: Most controller polls one run may take (--horizon x T_obj / --poll): each is a step of the
#: loop, about 50 us of CPU on the trace cloud (measured on the 0.5 h test job at 1 s and 15 s
#: polls), so a run at the limit takes about a minute.
MAX_RUN_POLLS = 1_000_000


@dataclass(frozen=True)
class LoopRun:
    """One run: its window's offset (ticks), outcome and events (and the policy's takeovers)."""

    offset: int
    outcome: Outcome
    events: tuple[Event, ...]
    replans: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            **self.outcome.to_dict(),
            "replans": self.replans,
            "events": [e.to_dict() for e in self.events],
        }


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


def window_starts(
    traces: Mapping[str, Sequence[Trace]], span_s: float, period: tuple[float, float] = (0.0, 1.0)
) -> tuple[int, int]:
    """First and last-plus-one offsets (ticks) whose window of ``span_s`` seconds (plus the tick
    the clock may reach at its end) lies inside ``period`` of every trace (fractions of their
    common length): the replays' containment rule
    (:func:`dnnprov.revocation.availability.window_starts`), never past a trace's end and never
    from one period into the other."""
    from dnnprov.revocation.availability import aligned, window_starts as contained

    every = [t for items in traces.values() for t in items]
    length, gap = aligned(every)
    first, end = int(period[0] * length), int(period[1] * length)
    low, high = first, end
    for trace in every:
        a, b = contained(trace, span_s + gap, first, end, period if period != (0.0, 1.0) else None)
        low, high = max(low, a), min(high, b)
    return low, high


def run_once(
    problem: SpotProblem,
    plan: SpotPlan,
    traces: Mapping[str, Sequence[Trace]],
    policy: Policy,
    offset: int,
    settings: RunSettings,
    run_id: str = "replay",
) -> LoopRun:
    """One run of the loop on the trace cloud from ``offset``."""
    pools = trace_pools(problem, traces, offset)
    cloud = TraceCloud(CapacityBook(pools))
    controller = Controller(
        problem,
        plan,
        policy,
        cloud,
        run_id=run_id,
        pools=[PoolInfo(p.type_name, p.zone, p.price_per_h) for p in pools],
        trainer=stand_in(ProgressModel(problem, plan, settings.join_s, policy.up_to_quota), run_id),
        settings=settings,
    )
    outcome = controller.run()
    return LoopRun(
        offset=offset,
        outcome=outcome,
        events=tuple(sorted(controller.events, key=lambda e: e.time_s)),
        replans=int(getattr(policy, "takeovers", 0)),
    )


def draw_offsets(
    traces: Mapping[str, Sequence[Trace]], span_s: float, runs: int, seed: int, period: tuple[float, float] = (0.0, 1.0)
) -> list[int]:
    """``runs`` window offsets drawn with ``seed`` in ``period`` (:func:`window_starts`)."""
    first, last = window_starts(traces, span_s, period)
    rng = np.random.default_rng(seed)
    return [int(rng.integers(first, last)) for _ in range(runs)]


def run_many(
    problem: SpotProblem,
    plan: SpotPlan,
    traces: Mapping[str, Sequence[Trace]],
    make_policy: Callable[[], Policy],
    *,
    runs: int,
    seed: int,
    settings: RunSettings,
    period: tuple[float, float] = (0.0, 1.0),
    offsets: Sequence[int] | None = None,
    on_run: Callable[[int, int], None] | None = None,
    time_limit_s: float | None = None,
) -> list[LoopRun]:
    """``runs`` runs from offsets drawn with ``seed`` in ``period`` (or the ``offsets`` given);
    ``time_limit_s`` (wall-clock seconds from this call) stops after the run that crosses it."""
    started = time.perf_counter()
    span = settings.horizon * problem.slo.time_s + settings.poll_s
    first, last = window_starts(traces, span, period)
    rng = np.random.default_rng(seed)  # drawn run by run (as draw_offsets does): a long replay
    total = runs if offsets is None else len(offsets)  # cut by its time limit draws no more than it runs
    out = []
    for k in range(total):
        offset = int(rng.integers(first, last)) if offsets is None else offsets[k]
        if not first <= offset < last:
            raise InvalidInputError("offset", f"{offset} is outside the window starts {first}..{last - 1}")
        out.append(run_once(problem, plan, traces, make_policy(), offset, settings))
        if on_run is not None:
            on_run(k + 1, total)
        if time_limit_s is not None and time.perf_counter() - started > time_limit_s:
            break
    return out


def loop_policy_factory(
    problem: SpotProblem,
    plan: SpotPlan,
    traces: Mapping[str, Sequence[Trace]],
    policy: str,
    *,
    join_s: float,
    horizon: float,
    model: Any = None,
    fit_period: tuple[float, float] | None = None,
    replan_method: str = "exact",
) -> Callable[[], Policy]:
    """A fresh-policy factory by name; ``mpc`` gets its exact table, planned on ``model`` (one
    availability model, or one per type by name) or fitted on ``fit_period`` of the traces
    (default: all of them, which then overlaps the replay windows); ``replan`` solves its
    takeovers by ``replan_method``."""
    from dnnprov.revocation.policies import make_policy
    from dnnprov.revocation.replay.pool_replay import TracePools

    if policy != "mpc":
        make_policy(policy, problem=problem, plan=plan, replan_method=replan_method)  # refuses a bad name now
        return lambda: make_policy(policy, problem=problem, plan=plan, replan_method=replan_method)
    table = mpc_table(TracePools(problem, traces, join_s=join_s, horizon=horizon), plan, traces, model, fit_period)
    return lambda: make_policy("mpc", table)


def mpc_table(
    pools: Any,
    plan: SpotPlan,
    traces: Mapping[str, Sequence[Trace]],
    model: Any,
    fit_period: tuple[float, float] | None,
) -> Any:
    """``mpc``'s table on ``pools`` (a :class:`dnnprov.revocation.replay.pool_replay.TracePools`)."""
    if model is None:
        model = pools.fitted_models(plan, traces, fit_period or (0.0, 1.0))
    return pools.takeover_table(plan, model)


def summarize(
    policy: str, runs: Sequence[LoopRun], settings: dict[str, Any], per_run: bool, bounds: Sequence[float] | None = None
) -> dict[str, Any]:
    """``simulate --json``: the aggregate and (``per_run``) the runs; with ``bounds`` (each
    run's hindsight bound) their mean and the runs no policy can meet T_obj on."""
    cost = np.array([r.outcome.cost for r in runs])
    finish = [r.outcome.finish_s for r in runs if r.outcome.finish_s is not None]
    out: dict[str, Any] = {
        "runs": len(runs),
        "policy": policy,
        "met_deadline": float(np.mean([r.outcome.met_deadline for r in runs])),
        "finished": len(finish) / len(runs),
        "cost_mean": float(cost.mean()),
        "cost_p05": float(np.percentile(cost, 5)),
        "cost_p50": float(np.percentile(cost, 50)),
        "cost_p95": float(np.percentile(cost, 95)),
        "finish_s_mean": float(np.mean(finish)) if finish else None,
        "loss_mean": float(np.mean([r.outcome.loss for r in runs])),
        "revocations_mean": float(np.mean([r.outcome.revocations for r in runs])),
        "launches_mean": float(np.mean([r.outcome.launches for r in runs])),
        "refusals_mean": float(np.mean([r.outcome.refusals for r in runs])),
        "replans_mean": float(np.mean([r.replans for r in runs])),
        "on_demand_launched_mean": float(np.mean([r.outcome.on_demand_launched for r in runs])),
        "settings": settings,
    }
    if bounds is not None:
        finite = all(math.isfinite(b) for b in bounds)
        out["hindsight_cost_mean"] = float(np.mean(bounds)) if finite else None
        out["hindsight_unreachable_runs"] = sum(not math.isfinite(b) for b in bounds)
    if per_run:
        out["per_run"] = [r.to_dict() for r in runs]
        if bounds is not None:
            for row, b in zip(out["per_run"], bounds):
                row["hindsight_cost"] = b if math.isfinite(b) else None
    return out


def window_bounds(
    problem: SpotProblem,
    plan: SpotPlan,
    traces: Mapping[str, Sequence[Trace]],
    offsets: Sequence[int],
    up_to_quota: bool = False,
) -> list[float]:
    """The hindsight bound of each window (:class:`dnnprov.revocation.replay.hindsight.Hindsight`: no
    policy running ``plan`` on the trace cloud's rules meets T_obj there for less; with
    ``up_to_quota``, none that holds up to the quotas either)."""
    from dnnprov.revocation.replay.hindsight import Hindsight

    return bounds_of(Hindsight(problem, plan, NOTICE_S, up_to_quota), traces, offsets)


def bounds_of(bound: Hindsight, traces: Mapping[str, Sequence[Trace]], offsets: Sequence[int]) -> list[float]:
    """:func:`window_bounds` by a :class:`~dnnprov.revocation.replay.hindsight.Hindsight` already made."""
    from dnnprov.revocation.replay.hindsight import BoundPool

    problem = bound.problem
    out = []
    for offset in offsets:
        pools = trace_pools(problem, traces, offset)
        gap = pools[0].trace.gap_s
        ticks = math.ceil(problem.slo.time_s * 1.01 / gap) + 1
        out.append(
            bound.bound(
                [BoundPool(p.type_name, p.price_per_h, p.trace.alive[offset : offset + ticks]) for p in pools], gap
            )
        )
    return out


class Simulation:
    """``dnnprov simulate`` (and the service's ``simulate``): every option checked when built, the
    runs by :meth:`run` (module docstring). ``model`` is ``mpc``'s availability model (one, or
    one per type), ``fit_period`` where to fit it instead."""

    def __init__(
        self,
        problem: SpotProblem,
        plan: SpotPlan,
        traces: Mapping[str, Sequence[Trace]],
        *,
        policy: str = "none",
        runs: int = 1000,
        seed: int = 0,
        join_s: float = 126.0,
        horizon: float = 3.0,
        poll_s: float = 15.0,
        period: tuple[float, float] | None = None,
        fit_period: tuple[float, float] | None = None,
        model: AvailabilityModel | None = None,
        hindsight: bool = False,
        replan_method: str = "exact",
        time_limit_s: float | None = None,
    ) -> None:
        from dnnprov.problems.validation import checks as check
        from dnnprov.revocation.policies import holds_up_to_quota
        from dnnprov.revocation.replay.pool_replay import TracePools
        from dnnprov.revocation.replay.simulate import (
            POLICIES,
            REPLAN_METHODS,
            check_plan_traces,
            check_plan_trains,
        )

        self.policy = check.choice("--policy", policy, POLICIES)
        self.up_to_quota = holds_up_to_quota(self.policy)
        self.runs = check.integer("--runs", runs, minimum=1, maximum=10_000_000)
        self.seed = check.integer("--seed", seed, minimum=0)
        self.replan_method = check.choice("--replan-method", replan_method, REPLAN_METHODS)
        if replan_method != "exact" and policy != "replan":
            raise InvalidInputError("--replan-method", "goes with --policy replan")
        if (model is not None or fit_period is not None) and policy != "mpc":
            raise InvalidInputError("--model" if model is not None else "--fit-period", "goes with --policy mpc")
        if model is not None and fit_period is not None:
            raise InvalidInputError("--model", "give --model or --fit-period, not both")
        self.settings = RunSettings(
            poll_s=check.number("--poll", poll_s, exclusive_minimum=0),
            join_s=check.number("--join", join_s, minimum=0),
            horizon=check.number("--horizon", horizon, minimum=1),
        )
        if time_limit_s is not None:
            check.number("--time-limit", time_limit_s, exclusive_minimum=0)
        self.problem, self.plan, self.traces = problem, plan, traces
        self.period, self.fit_period, self.model = period or (0.0, 1.0), fit_period, model
        self.time_limit_s = time_limit_s
        check_plan_traces(problem, plan, traces)
        self.pools = TracePools(problem, traces, join_s=join_s, horizon=horizon, period=self.period)
        check_plan_trains(self.pools.speed(self.pools.plan_workers(plan)[0], plan.ps))
        self.span_s = self.settings.horizon * problem.slo.time_s + self.settings.poll_s
        polls = self.span_s / self.settings.poll_s
        if polls > MAX_RUN_POLLS:  # each poll is a step of the loop: --poll 0.001 ran for hours
            raise InvalidInputError(
                "--poll",
                f"{self.settings.poll_s:g} s polls: a run of {self.span_s:,.0f} s (--horizon x T_obj) takes "
                f"{polls:.3g} polls, more than the limit of {MAX_RUN_POLLS:,} (poll less often)",
            )
        window_starts(traces, self.span_s, self.period)
        self._bound: Hindsight | None = None
        if hindsight:
            from dnnprov.revocation.replay.hindsight import Hindsight

            self._bound = Hindsight(problem, plan, NOTICE_S, self.up_to_quota)  # refuses one too large

    def run(
        self, on_run: Callable[[int, int], None] | None = None
    ) -> tuple[list[LoopRun], dict[str, Any], list[float] | None]:
        """The runs, the settings the JSON reports, and each window's bound (``hindsight``)."""
        started = time.perf_counter()
        table = None
        if self.policy == "mpc":
            table = mpc_table(self.pools, self.plan, self.traces, self.model, self.fit_period)
        from dnnprov.revocation.policies import make_policy

        def factory() -> Policy:
            return make_policy(
                self.policy, table, problem=self.problem, plan=self.plan, replan_method=self.replan_method
            )

        left = None if self.time_limit_s is None else self.time_limit_s - (time.perf_counter() - started)
        runs = run_many(
            self.problem,
            self.plan,
            self.traces,
            factory,
            runs=self.runs,
            seed=self.seed,
            settings=self.settings,
            period=self.period,
            on_run=on_run,
            time_limit_s=None if left is None else max(left, 0.0),
        )
        settings: dict[str, Any] = {
            "seed": self.seed,
            "period": list(self.period),
            **self.settings.to_dict(),
            "plan": self.plan.to_dict(),
            "time_obj_s": self.problem.slo.time_s,
            "notice_s": NOTICE_S,
            "traces": {k: [t.path for t in v] for k, v in self.traces.items()},
            "runs_asked": self.runs,
            "stopped_by_time_limit": len(runs) < self.runs,
        }
        if self.policy == "replan":
            settings["replan_method"] = self.replan_method
        if table is not None:
            settings["model"] = {
                "source": "; ".join(m.source for m in table.models),
                "fit_period": list(table.models[0].period),
                "expected_cost": table.expected_cost,
            }
        bounds = None
        if self._bound is not None:
            bounds = bounds_of(self._bound, self.traces, [r.offset for r in runs])
            settings["hindsight_scope"] = "quotas" if self.up_to_quota else "plan"
        return runs, settings, bounds

    def to_dict(self, per_run: bool = False, on_run: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """The ``simulate --json`` object."""
        runs, settings, bounds = self.run(on_run)
        return summarize(self.policy, runs, settings, per_run, bounds)
