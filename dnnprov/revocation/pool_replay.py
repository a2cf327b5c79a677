"""Replaying spot pools tick by tick under a launch policy (``dnnprov simulate --zones``).

A run draws its windows, then walks the traces' ticks. The progress model, billing and
join delay are those of :mod:`dnnprov.revocation.simulate` (progress grows at the cluster's
speed; launched instances train ``join_s`` after launch but are billed from it, except at
time 0; on-demand is never revoked; the PS is billed throughout):

- **pools**: with ``zones=True`` the traces of one type are its pools, aligned in time:
  one offset per run for all of them, drawn so that the run's window (horizon / gap ticks)
  lies in the replay period (never past the traces' end, never looped: a period or trace
  shorter than a window is refused). Otherwise each run picks
  one trace per type and, as ``simulate`` does, splits the type's quota into blocks of the
  trace's capacity, each at its own offset (each block is an anonymous pool of that zone).
  A pool's price is its zone's ``spot_price_per_h`` in the instance (else the type's), its
  capacity the trace's count, capped by the zone's ``capacity``.
- **ticks**: capacity changes only at ticks. At each tick the instances above a pool's
  capacity are revoked (joining ones first), then the policy (:mod:`dnnprov.revocation.policies`)
  says what to hold; instances it drops stop being billed, those it adds are launched.
  At most the plan's workers of a type run (the progress model's runs hold within the
  plan): on-demand instances joining to replace spot ones (a safety net going on-demand)
  take over from them, and the replaced spot instances stop then (dearest pools first).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from dnnprov.revocation.availability import AvailabilityModel, aligned, period_ticks, window_starts
from dnnprov.revocation.policies import Policy, RunningTable, TakeoverTable, View, make_policy
from dnnprov.revocation.simulate import (ClusterSpeeds, Replay, RunOutcome, check_plan_trains, check_plan_traces,
                                        check_run_ticks)
from dnnprov.errors import InvalidInputError
from dnnprov.problems import _checks as check
from dnnprov.models.spot import SpotModel
from dnnprov.problems.interruption import Trace
from dnnprov.problems.spot import ON_DEMAND_SUFFIX, SpotProblem
from dnnprov.result import SpotPlan
from dnnprov.solvers.robust import JOIN_OVERHEAD_S, progress_target


@dataclass(frozen=True)
class Pool:
    """One pool of one run: type index, zone position, trace, offset, price, capacity cap."""

    type_index: int
    group: int
    zone: str | None
    trace: Trace
    offset: int
    price: float
    capacity: int | None

    def at(self, tick: int) -> int:
        """Spot instances the pool offers at ``tick`` of the run (its window lies within the trace)."""
        alive = int(self.trace.alive[self.offset + tick])
        return alive if self.capacity is None else min(alive, self.capacity)


class PoolReplay:
    """Replays a problem's pools (module docstring); ``period`` bounds the window starts."""

    def __init__(self, problem: SpotProblem, traces: Mapping[str, Sequence[Trace]], *, zones: bool,
                 join_s: float = JOIN_OVERHEAD_S, horizon: float = 3.0,
                 period: tuple[float, float] = (0.0, 1.0)) -> None:
        if problem.model != "paper":
            raise InvalidInputError("model", "replays need the paper model (progress linear in time)")
        join_s = check.number("join_s", join_s, minimum=0)
        horizon = check.number("horizon", horizon, minimum=1)
        self.problem, self.zones, self.join_s, self.period = problem, zones, join_s, period
        self.horizon_s = horizon * problem.slo.time_s
        self.model = SpotModel(problem)
        self.types = [t.name for t in problem.instance_types]
        for name, items in traces.items():
            if name not in self.types:
                raise InvalidInputError(f"--trace {name}", f"not an instance type of the problem ({', '.join(self.types)})")
        every = [t for items in traces.values() for t in items]
        _, self.gap_s = aligned(every)
        for trace in every:
            check_run_ticks(trace, self.horizon_s)
        self.traces = {self.types.index(k): list(v) for k, v in traces.items()}
        for items in self.traces.values():
            for trace in [min(items, key=lambda t: len(t.alive))] if zones else items:
                self.window_starts(trace, aligned(items)[0] if zones else len(trace.alive))
        self.spot_col = [self.model.columns.labels.index(n) for n in self.types]
        self.od_price = np.array([t.on_demand_price_per_h if t.on_demand_price_per_h is not None else math.nan
                                  for t in problem.instance_types])
        self.target = progress_target(self.model)
        self._speed = ClusterSpeeds(self.model, self.spot_col)

    # ------------------------------------------------------------------ model lookups
    def speed(self, per_type: np.ndarray, ps: int) -> float:
        """Progress per second of a cluster of workers per type (market does not matter)."""
        return self._speed(per_type, ps)

    def start_progress(self, plan: SpotPlan) -> float:
        """Progress at time 0 of every run of ``plan``, whatever the policy launches first
        (:meth:`dnnprov.revocation.simulate.ClusterSpeeds.run_start`, as ``simulate``)."""
        return self._speed.run_start(self.plan_workers(plan)[0], plan.ps)

    def plan_workers(self, plan: SpotPlan) -> tuple[np.ndarray, np.ndarray]:
        """The plan's workers per type (both markets) and its on-demand workers per type."""
        spot = np.array([plan.counts.get(n, 0) for n in self.types], dtype=np.int64)
        od = np.array([plan.counts.get(n + ON_DEMAND_SUFFIX, 0) for n in self.types], dtype=np.int64)
        return spot + od, od

    # ------------------------------------------------------------------ windows
    def window_starts(self, trace: Trace, length: int) -> tuple[int, int]:
        """The ticks a run's window may start at in the replay period of traces of ``length``
        common ticks: the whole window lies in the period, so it never runs past the traces'
        end nor into another period (a fit period before a held-out one)."""
        first, end = period_ticks(length, self.period)
        return window_starts(trace, self.horizon_s, first, end, self.period)

    def draw_pools(self, rng: np.random.Generator) -> list[Pool]:
        """The pools of one run (module docstring)."""
        pools = []
        for i, items in self.traces.items():
            offered = {z.zone: z for z in self.problem.instance_types[i].zones}
            base = self.problem.instance_types[i].spot_price_per_h
            if self.zones:
                length, _ = aligned(items)
                offset = int(rng.integers(*self.window_starts(items[0], length)))
                for g, trace in enumerate(items):
                    zone = offered.get(trace.zone or "")
                    price = zone.spot_price_per_h if zone and zone.spot_price_per_h is not None else base
                    pools.append(Pool(i, g, trace.zone, trace, offset, price, zone.capacity if zone else None))
                continue
            trace = items[int(rng.integers(len(items)))]
            zone = offered.get(trace.zone or "")
            price = zone.spot_price_per_h if zone and zone.spot_price_per_h is not None else base
            starts = self.window_starts(trace, len(trace.alive))
            for _ in range(max(1, math.ceil(self.problem.instance_types[i].quota / trace.capacity))):
                pools.append(Pool(i, 0, trace.zone, trace, int(rng.integers(*starts)), price,
                                  zone.capacity if zone else None))
        return pools

    # ------------------------------------------------------------------ one run
    def run(self, plan: SpotPlan, policy: Policy, pools: list[Pool]) -> RunOutcome:
        """Replay ``plan`` under ``policy`` on the pools of one run."""
        want, od_floor = self.plan_workers(plan)
        n_types, n_pools = len(self.types), len(pools)
        pool_type = np.array([p.type_index for p in pools], dtype=np.int64)
        pool_group = np.array([p.group for p in pools], dtype=np.int64)
        pool_price = np.array([p.price for p in pools])
        ps, gap, deadline = plan.ps, self.gap_s, self.problem.slo.time_s
        ps_rate = ps * self.problem.platform.ps_price_per_h
        spot_run = np.zeros(n_pools, dtype=np.int64)
        od_run = np.zeros(n_types, dtype=np.int64)
        joins: list[list] = []                               # [ready time, "spot"|"od", index, count]
        u0 = self.start_progress(plan)
        u, cost, revocations, od_launched, finish = u0, 0.0, 0, 0, None
        previous = None
        tick = 0
        while tick * gap < self.horizon_s and finish is None:
            t = tick * gap
            caps = np.array([p.at(tick) for p in pools], dtype=np.int64)
            held = spot_run + self._joining(joins, "spot", n_pools)
            over = np.maximum(held - caps, 0)
            revoked = bool(over.any())
            for p in np.flatnonzero(over):
                revocations += int(over[p])
                self._drop(joins, spot_run, "spot", int(p), int(over[p]))
            spot_held = spot_run + self._joining(joins, "spot", n_pools)
            od_held = od_run + self._joining(joins, "od", n_types)
            view = View(t=t, gap_s=gap, join_s=self.join_s, deadline_s=deadline,
                        progress=(u - u0) / (self.target - u0), caps=caps, pool_type=pool_type,
                        pool_group=pool_group, pool_price=pool_price, spot=spot_held, od=od_held, want=want,
                        od_floor=od_floor, ps=ps,
                        event=tick == 0 or revoked or previous is None or bool((caps != previous).any()),
                        time_to_finish=lambda w, u=u: self._time_to_finish(w, ps, u),
                        running_spot=spot_run.copy(), running_od=od_run.copy(),
                        time_after_tick=lambda kept, launched, w, u=u, t=t: self._time_to_finish(
                            w, ps, u + self._sure_progress(kept, launched, ps, 0.0 if t == 0 else self.join_s)))
            previous = caps
            order = policy.decide(view)
            spot_target = np.minimum(np.maximum(order.spot, 0), caps)
            ready = t + (0.0 if t == 0 else self.join_s)
            for p in range(n_pools):
                change = int(spot_target[p] - spot_held[p])
                if change > 0:
                    joins.append([ready, "spot", p, change])
                elif change < 0:
                    self._drop(joins, spot_run, "spot", p, -change)
            for i in range(n_types):
                change = int(order.od[i] - od_held[i])
                if change > 0:
                    if math.isnan(self.od_price[i]):
                        raise InvalidInputError(f"instance_types.{self.types[i]}.on_demand_price_per_h",
                                                f"missing: the {policy.name} policy launches on-demand instances")
                    joins.append([ready, "od", i, change])
                    od_launched += change
                elif change < 0:
                    self._drop(joins, od_run, "od", i, -change)
            end = min(t + gap, self.horizon_s)
            while t < end and finish is None:
                for j in [j for j in joins if j[0] <= t]:
                    joins.remove(j)
                    (spot_run if j[1] == "spot" else od_run)[j[2]] += j[3]
                self._release_replaced(spot_run, od_run, want, pool_type, pool_price)
                nxt = min([j[0] for j in joins if j[0] > t] + [end])
                productive = np.bincount(pool_type, weights=spot_run, minlength=n_types).astype(np.int64) + od_run
                sigma = self.speed(productive, ps)
                spot_billed = spot_run + self._joining(joins, "spot", n_pools)
                od_billed = od_run + self._joining(joins, "od", n_types)
                rate = float(pool_price @ spot_billed + np.nansum(self.od_price * od_billed) + ps_rate)
                if sigma > 0 and u + sigma * (nxt - t) >= self.target:
                    finish = t + (self.target - u) / sigma
                    cost += rate * (finish - t) / 3600
                    u = self.target
                    break
                cost += rate * (nxt - t) / 3600
                u += sigma * (nxt - t)
                t = nxt
            tick += 1
        met = finish is not None and finish <= deadline * (1 + 1e-12)
        loss = 1.0 / u + self.problem.workload.gamma_5 if u > 0 else math.inf
        return RunOutcome(met_deadline=met, finish_s=finish, cost=cost, loss=loss, revocations=revocations,
                          replans=0, on_demand_launched=od_launched)

    @staticmethod
    def _release_replaced(spot_run: np.ndarray, od_run: np.ndarray, want: np.ndarray, pool_type: np.ndarray,
                          pool_price: np.ndarray) -> None:
        """Stop the running spot instances (dearest pools first) that joined on-demand ones
        replace: at most the plan's workers of a type run."""
        for i in range(len(want)):
            mine = np.flatnonzero(pool_type == i)
            excess = int(spot_run[mine].sum() + od_run[i] - want[i])
            for p in mine[np.argsort(-pool_price[mine], kind="stable")]:
                if excess <= 0:
                    break
                cut = min(excess, int(spot_run[p]))
                spot_run[p] -= cut
                excess -= cut

    def _sure_progress(self, kept: np.ndarray, launched: np.ndarray, ps: int, delay: float) -> float:
        """Progress by the next tick of ``kept`` workers, joined by ``launched`` after ``delay``."""
        first = min(delay, self.gap_s)
        return self.speed(kept, ps) * first + self.speed(kept + launched, ps) * (self.gap_s - first)

    def _time_to_finish(self, workers: np.ndarray, ps: int, u: float) -> float:
        sigma = self.speed(workers, ps)
        return (self.target - u) / sigma if sigma > 0 else math.inf

    @staticmethod
    def _joining(joins: list[list], kind: str, size: int) -> np.ndarray:
        out = np.zeros(size, dtype=np.int64)
        for j in joins:
            if j[1] == kind:
                out[j[2]] += j[3]
        return out

    @staticmethod
    def _drop(joins: list[list], running: np.ndarray, kind: str, index: int, count: int) -> None:
        """Remove ``count`` instances of pool/type ``index``: joining ones (latest first), then running."""
        for j in sorted([j for j in joins if j[1] == kind and j[2] == index], key=lambda j: -j[0]):
            if count <= 0:
                return
            take = min(count, j[3])
            j[3] -= take
            count -= take
            if j[3] == 0:
                joins.remove(j)
        running[index] -= min(count, int(running[index]))

    # ------------------------------------------------------------------ the mpc table
    def takeover_table(self, plan: SpotPlan, model: AvailabilityModel | Mapping[str, AvailabilityModel], *,
                       price_joins: bool = True) -> TakeoverTable | RunningTable:
        """The exact model-predictive table of ``plan`` under ``model`` (one type's, or one per
        type of the plan by name): clusters of up to the plan's workers of each of its types
        (the clusters its run's start covers), with the plan's PS. A one-type plan gets a
        :class:`RunningTable` (it tracks the holdings and prices joins) when that fits its size
        limit and ``price_joins``; otherwise (several types) a :class:`TakeoverTable`."""
        want, _ = self.plan_workers(plan)
        used = [int(i) for i in np.flatnonzero(want)]
        if not isinstance(model, AvailabilityModel):
            models = []
            for i in used:
                if self.types[i] not in model:
                    raise InvalidInputError("--model", f"no availability model of {self.types[i]}, a type of the plan")
                models.append(model[self.types[i]])
        elif len(used) == 1:
            models = [model]
        else:
            raise InvalidInputError("--model", f"one availability model covers one type; the plan uses {len(used)}: "
                                               "fit each type's on --fit-period instead")
        for i, m in zip(used, models):
            if abs(m.gap_s - self.gap_s) > 1e-9:
                raise InvalidInputError("--model", f"fitted on {m.gap_s:g} s ticks; the traces have {self.gap_s:g} s")
            if math.isnan(self.od_price[i]):
                raise InvalidInputError(f"instance_types.{self.types[i]}.on_demand_price_per_h",
                                        "missing: the mpc policy launches on-demand instances")
        most = tuple(int(want[i]) for i in used)
        u0 = self.start_progress(plan)
        clusters = np.array(list(itertools.product(*[range(w + 1) for w in most])), dtype=np.int64)
        per_cluster = np.zeros(len(clusters))
        for c, cluster in enumerate(clusters):
            workers = np.zeros(len(self.types), dtype=np.int64)
            workers[used] = cluster
            per_cluster[c] = self.speed(workers, plan.ps) / (self.target - u0) if cluster.any() else 0.0
        spot_price = []
        for i in used:
            t = self.problem.instance_types[i]
            prices = [z.spot_price_per_h for z in t.zones if z.spot_price_per_h is not None]
            spot_price.append(float(np.mean(prices)) if prices else t.spot_price_per_h)
        args = dict(types=tuple(used), most=most, gap_s=self.gap_s, deadline_s=self.problem.slo.time_s,
                    join_s=self.join_s, progress_per_s=per_cluster, spot_price=np.array(spot_price),
                    od_price=self.od_price[used], fixed_price=plan.ps * self.problem.platform.ps_price_per_h,
                    models=tuple(models))
        if price_joins and len(used) == 1 and RunningTable.fits(most[0], self.problem.slo.time_s, self.gap_s):
            return RunningTable(**args)
        return TakeoverTable(**args)


def replay_pools(problem: SpotProblem, plan: SpotPlan, traces: Mapping[str, Sequence[Trace]], *, policy: str,
                 zones: bool, runs: int = 1000, seed: int = 0, join_s: float = JOIN_OVERHEAD_S,
                 horizon: float = 3.0, period: tuple[float, float] = (0.0, 1.0),
                 model: AvailabilityModel | None = None, fit_period: tuple[float, float] | None = None,
                 hindsight: bool = False, hindsight_any_plan: bool = False, time_limit_s: float | None = None,
                 on_run: Callable[[int, int], None] | None = None) -> Replay:
    """Replay ``runs`` runs of ``plan`` on the pools under ``policy`` (module docstring).

    ``mpc`` plans on ``model``, or on one fitted on ``fit_period`` of the traces (default:
    the whole traces, which then overlaps the replay windows; settings say which).
    ``hindsight`` adds each run's lower bound (:mod:`dnnprov.revocation.hindsight`), for this plan
    or, with ``hindsight_any_plan``, for any plan.
    ``time_limit_s`` (wall-clock seconds from this call, set-up included) stops after the
    run that crosses it (at least one run); the replay then holds the runs done and says so.
    """
    from dnnprov.revocation.availability import fit_availability
    from dnnprov.revocation.hindsight import Hindsight

    started = time.perf_counter()
    check_plan_traces(problem, plan, traces)
    runs = check.integer("runs", runs, minimum=1, maximum=10_000_000)
    seed = check.integer("seed", seed, minimum=0)
    replay = PoolReplay(problem, traces, zones=zones, join_s=join_s, horizon=horizon, period=period)
    check_plan_trains(replay.speed(replay.plan_workers(plan)[0], plan.ps))
    table, fitted = None, None
    if policy == "mpc":
        want, _ = replay.plan_workers(plan)
        if model is None:
            fitted = fit_period or (0.0, 1.0)
            model = {}
            for i in np.flatnonzero(want):
                kind = replay.types[int(i)]
                if kind not in traces:
                    raise InvalidInputError(f"--trace {kind}", "mpc fits every type of the plan: give this type's traces")
                used = traces[kind] if zones else traces[kind][:1]
                length = aligned(used)[0]          # a model of runs is fitted on at least one run's ticks
                window_starts(min(used, key=lambda t: len(t.alive)), replay.horizon_s, *period_ticks(length, fitted),
                              fitted)
                model[kind] = fit_availability(used, max(problem.instance_types[int(i)].quota, int(want[i])), fitted)
        table = replay.takeover_table(plan, model)
    bounds = Hindsight(replay, None if hindsight_any_plan else plan) if hindsight else None
    rng = np.random.default_rng(seed)
    outcomes, lower = [], []
    stopped = False
    for done in range(1, runs + 1):
        pools = replay.draw_pools(rng)
        outcomes.append(replay.run(plan, make_policy(policy, table), pools))
        if bounds is not None:
            lower.append(bounds.bound(None if hindsight_any_plan else plan, pools))
        if on_run is not None:
            on_run(done, runs)
        if time_limit_s is not None and time.perf_counter() - started > time_limit_s and done < runs:
            stopped = True
            break
    settings = {"seed": seed, "join_s": join_s, "horizon_s": replay.horizon_s, "plan": plan.to_dict(),
                "zones": zones, "period": list(period),
                "traces": {name: [tr.path for tr in items] for name, items in traces.items()},
                "time_obj_s": problem.slo.time_s, "runs_asked": runs, "stopped_by_time_limit": stopped}
    if bounds is not None:
        settings["hindsight_scope"] = bounds.scope
    if table is not None:
        settings["model"] = {"source": "; ".join(m.source for m in table.models),
                             "fit_period": list(table.models[0].period), "expected_cost": table.expected_cost}
    return Replay(policy=policy, runs=tuple(outcomes), settings=settings, bounds=tuple(lower))
