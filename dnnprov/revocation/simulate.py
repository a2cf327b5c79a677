"""Replaying real spot availability traces against a plan (``dnnprov simulate``, docs/revocation.md).

Each run draws, for every spot type the run may use, one of its traces and a random start
offset (so that the run's window, horizon / gap ticks, lies within the trace: a trace shorter
than a run is refused, never looped), then trains the plan under the progress model of :mod:`dnnprov.solvers.robust`
(progress ``u = 1 / (L - g5)`` grows at the cluster's speed; training ends at
``u* = 1 / (L_obj - g5)``), event by event:

- **capacity**: a trace gives the instances alive per tick. A type's instances are split
  into blocks of the trace's capacity M (M = 1 for a 1-node trace: every instance has its
  own offset); each block reads the trace at its own random offset and the type's
  capacity is the sum of its blocks. When a type holds more spot instances than its
  capacity, the excess is revoked (joining instances first). On-demand instances are
  never revoked. Spot types with no trace have no capacity.
- **joining**: instances launched after the start (replacements, takeovers, fallbacks)
  train only after ``join_s`` (the paper's 2.1 min by default) but are billed from launch;
  what a policy launches at time 0, because the plan could not start whole, starts with
  the rest of the cluster.
- **billing**: every held instance at its market's price, and the PS nodes, until the
  run ends (training done, or the horizon ``horizon x T_obj``).

Policies:

- ``none``: revoked workers are gone; nothing is launched after the start.
- ``replan``: at every revocation and whenever capacity returns, dnnprov's takeover
  (:func:`dnnprov.revocation.replan.replanned_problem`: survivors and PS kept, remaining time, loss
  reached, takeover overhead = ``join_s``, spot quotas capped at the capacity offered
  now) is solved exactly, by a scan of the precomputed quota box that gives the
  takeover's optimum (the tests check it against ``replan``); its new instances are
  launched, unless carrying on unchanged is cheaper and meets T_obj. With
  ``replan_method="heuristic"`` the takeover is solved by spotDNN's Algorithm 1 instead
  (the paper's re-provisioning). When no takeover meets the deadline, missing spot
  workers are relaunched where capacity allows.
- ``fallback``: spotDNN-style event rule (not Can't Be Late's: it decides only at events
  and never returns to spot): missing spot workers are relaunched on spot when capacity
  returns, and at any event where the cluster held now would not end by
  ``T_obj - join_s``, the missing workers are launched on-demand (same type) and kept to
  the end.

The pool-aware policies (``failover``, ``uniform-progress``, ``mpc``), ``--zones`` and the
hindsight bound replay tick by tick in :mod:`dnnprov.revocation.pool_replay`.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from dnnprov.problems import _checks as check
from dnnprov.errors import InvalidInputError
from dnnprov.revocation.availability import window_starts
from dnnprov.result import SpotPlan
from dnnprov.problems.interruption import Trace
from dnnprov.solvers.robust import (DEFAULT_MAX_PLANS, JOIN_OVERHEAD_S, PlanGrid, plan_grid, progress_speed,
                                    progress_target)
from dnnprov.problems.spot import ON_DEMAND_SUFFIX, SpotProblem, check_existing
from dnnprov.models.spot import SpotModel

POLICIES = ("none", "replan", "fallback")
REPLAN_METHODS = ("exact", "heuristic")


@dataclass(frozen=True)
class RunOutcome:
    """One replay: whether it met T_obj, when it ended, what it cost and what happened."""

    met_deadline: bool
    finish_s: float | None
    cost: float
    loss: float
    revocations: int
    replans: int
    on_demand_launched: int

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"met_deadline": bool(self.met_deadline),
                "finish_s": None if self.finish_s is None else float(self.finish_s), "cost": float(self.cost),
                "loss": float(self.loss), "revocations": int(self.revocations), "replans": int(self.replans),
                "on_demand_launched": int(self.on_demand_launched)}


@dataclass(frozen=True)
class Replay:
    """All runs of one (plan, policy) replay and their aggregate."""

    policy: str
    runs: tuple[RunOutcome, ...]
    settings: Mapping[str, Any] = field(default_factory=dict)
    bounds: tuple[float, ...] = ()                 # per run: the hindsight lower bound (if asked)

    def summary(self) -> dict[str, Any]:
        """Aggregate: deadline fraction, cost mean and p95, loss, revocations, replans, and with
        ``bounds`` the hindsight bound's mean (``None`` when some run cannot meet T_obj at all)."""
        cost = np.array([r.cost for r in self.runs])
        finish = np.array([r.finish_s for r in self.runs if r.finish_s is not None])
        extra = {}
        if self.bounds:
            finite = all(math.isfinite(b) for b in self.bounds)
            extra = {"hindsight_cost_mean": float(np.mean(self.bounds)) if finite else None,
                     "hindsight_unreachable_runs": sum(not math.isfinite(b) for b in self.bounds)}
        return {**extra, 
            "runs": len(self.runs), "policy": self.policy,
            "met_deadline": float(np.mean([r.met_deadline for r in self.runs])),
            "finished": len(finish) / len(self.runs),
            "cost_mean": float(cost.mean()), "cost_p95": float(np.percentile(cost, 95)),
            "finish_s_mean": float(finish.mean()) if len(finish) else None,
            "loss_mean": float(np.mean([r.loss for r in self.runs])),
            "revocations_mean": float(np.mean([r.revocations for r in self.runs])),
            "replans_mean": float(np.mean([r.replans for r in self.runs])),
            "on_demand_launched_mean": float(np.mean([r.on_demand_launched for r in self.runs])),
        }

    def to_dict(self, per_run: bool = False) -> dict[str, Any]:
        """The ``dnnprov simulate --json`` object (``per_run`` adds every run)."""
        out = {**self.summary(), "settings": dict(self.settings)}
        if per_run:
            out["per_run"] = [r.to_dict() for r in self.runs]
        return out


#: Most trace ticks one run may cover (horizon / gap_seconds): bounds a run's work and memory.
MAX_RUN_TICKS = 1_000_000


def check_run_ticks(trace: Trace, horizon_s: float) -> int:
    """Ticks of ``trace`` a run of ``horizon_s`` covers; refused beyond :data:`MAX_RUN_TICKS`."""
    ticks = horizon_s / trace.gap_s
    if not ticks <= MAX_RUN_TICKS:
        raise InvalidInputError(f"{trace.path}: metadata.gap_seconds",
                                f"{trace.gap_s:g} s ticks: a run of {horizon_s:g} s covers {ticks:.3g} ticks, more "
                                f"than the limit of {MAX_RUN_TICKS:,} (use a coarser trace or a shorter --horizon)")
    return math.ceil(ticks) + 1


class _Capacity:
    """Spot capacity of every type over one run: step functions on the union of change times."""

    def __init__(self, traces: Mapping[int, Trace], quotas: Sequence[int], horizon_s: float,
                 rng: np.random.Generator) -> None:
        self.types = len(quotas)
        change_times: set[float] = {0.0}
        self.blocks: list[list[tuple[Trace, int]]] = []
        for i in range(self.types):
            trace = traces.get(i)
            if trace is None:
                self.blocks.append([])
                continue
            blocks = max(1, math.ceil(quotas[i] / trace.capacity))
            mine = []
            for _ in range(blocks):
                offset = int(rng.integers(*window_starts(trace, horizon_s)))
                mine.append((trace, offset))
                seq = trace.alive[offset:offset + math.ceil(horizon_s / trace.gap_s) + 1]
                changed = np.flatnonzero(seq[1:] != seq[:-1]) + 1
                change_times.update((changed * trace.gap_s).tolist())
            self.blocks.append(mine)
        self.times = np.array(sorted(t for t in change_times if t < horizon_s))

    def at(self, t: float) -> np.ndarray:
        """Spot instances each type offers at time ``t``."""
        out = np.zeros(self.types, dtype=np.int64)
        for i, blocks in enumerate(self.blocks):
            for trace, offset in blocks:
                out[i] += trace.alive[offset + int(t // trace.gap_s)]
        return out


#: Most sub-clusters of a plan whose loss curves :meth:`ClusterSpeeds.run_start` compares.
MAX_SUBCLUSTERS = 200_000


def domain_speed(model: SpotModel, counts: np.ndarray, ps: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """``(sigma, u0)`` of clusters ``counts`` as the replays run them: a cluster outside the
    loss model's validity domain does not train (speed 0, no start), as the solver plans none
    there (docs/revocation.md, the progress model)."""
    counts = np.atleast_2d(np.asarray(counts, dtype=np.int64))
    sigma, start = progress_speed(model, counts, ps)
    inside = model.evaluate(counts, ps).inside_domain
    return np.where(inside, sigma, 0.0), np.where(inside, start, np.inf)


class ClusterSpeeds:
    """Progress speed of clusters given by workers per type (market does not matter), cached:
    both replay engines ask for the same few clusters at every event or tick."""

    def __init__(self, model: SpotModel, spot_col: Sequence[int]) -> None:
        self.model, self.spot_col = model, list(spot_col)
        self._cache: dict[tuple, float] = {}

    def run_start(self, per_type: np.ndarray, ps: int) -> float:
        """Progress ``u0`` at time 0 of a run of the plan with ``per_type`` workers.

        One start for the whole run, whatever cluster trains first: the earliest start any
        sub-cluster of the plan has on its own loss curve, ``min_c g1 / N_c`` (docs/revocation.md,
        the progress model). For one type that is the plan's own start (``N_c`` grows with
        the workers); mixes are checked over every sub-cluster up to
        :data:`MAX_SUBCLUSTERS`, beyond which the plan's own start is used.
        """
        per_type = np.asarray(per_type, dtype=np.int64)
        whole = np.zeros((1, len(self.model.columns)), dtype=np.int64)
        whole[0, self.spot_col] = per_type
        sigma, start = domain_speed(self.model, whole, ps)
        if not sigma[0] > 0:
            return 0.0
        if int(np.prod(per_type + 1)) > MAX_SUBCLUSTERS:
            return float(start[0])
        subs = np.array(list(itertools.product(*[range(int(n) + 1) for n in per_type])), dtype=np.int64)
        counts = np.zeros((len(subs), len(self.model.columns)), dtype=np.int64)
        counts[:, self.spot_col] = subs
        sigma, start = domain_speed(self.model, counts, ps)
        return float(np.min(start[sigma > 0]))

    def __call__(self, per_type: np.ndarray, ps: int) -> float:
        key = (tuple(int(v) for v in per_type), ps)
        if key not in self._cache:
            counts = np.zeros(len(self.model.columns), dtype=np.int64)
            counts[self.spot_col] = per_type
            self._cache[key] = float(domain_speed(self.model, counts[None, :], ps)[0][0])
        return self._cache[key]


class Simulator:
    """Replays traces against plans of one problem (module docstring).

    ``traces`` maps an instance type name to one or more traces (a run picks one at random).
    ``replan_method`` is how the ``replan`` policy solves a takeover: ``"exact"`` (its
    optimum, :meth:`takeover`) or ``"heuristic"`` (spotDNN's Algorithm 1 on the same
    takeover problem, as the paper re-provisions).
    """

    def __init__(self, problem: SpotProblem, traces: Mapping[str, Sequence[Trace]], *,
                 join_s: float = JOIN_OVERHEAD_S, horizon: float = 3.0, max_plans: int = DEFAULT_MAX_PLANS,
                 replan_method: str = "exact") -> None:
        if "spot" not in problem.constraints.markets:
            raise InvalidInputError("constraints.markets", "simulate replays spot capacity: the problem must offer spot")
        self.problem = problem
        self.replan_method = check.choice("replan_method", replan_method, REPLAN_METHODS)
        self.join_s = check.number("join_s", join_s, minimum=0)
        self.horizon_s = check.number("horizon", horizon, minimum=1) * problem.slo.time_s
        self.model = SpotModel(problem)
        self.types = [t.name for t in problem.instance_types]
        for name, items in traces.items():
            if name not in self.types:
                raise InvalidInputError(f"--trace {name}", f"not an instance type of the problem ({', '.join(self.types)})")
            if not items:
                raise InvalidInputError(f"--trace {name}", "no trace given")
        self.traces = {self.types.index(k): list(v) for k, v in traces.items()}
        for items in self.traces.values():
            for trace in items:
                check_run_ticks(trace, self.horizon_s)
                window_starts(trace, self.horizon_s)
        labels = self.model.columns.labels
        self.spot_col = [labels.index(n) for n in self.types]
        self.od_col = [labels.index(n + ON_DEMAND_SUFFIX) if n + ON_DEMAND_SUFFIX in labels else None for n in self.types]
        self.spot_price = np.array([t.spot_price_per_h for t in problem.instance_types])
        self.od_price = np.array([t.on_demand_price_per_h if t.on_demand_price_per_h is not None else math.nan
                                  for t in problem.instance_types])
        self.quota = [t.quota for t in problem.instance_types]
        self.target = progress_target(self.model)
        self._speed = ClusterSpeeds(self.model, self.spot_col)
        self._grid: PlanGrid | None = None
        self._inside = np.zeros(0, dtype=bool)
        self._max_plans = max_plans
        self._spent_so_far = 0.0                               # $ of the run being replayed

    def delay(self, t: float) -> float:
        """Seconds before instances launched at ``t`` train: none at the start, else ``join_s``."""
        return 0.0 if t == 0 else self.join_s

    # ------------------------------------------------------------------ model lookups
    def speed(self, per_type: np.ndarray, ps: int) -> float:
        """Progress speed of a cluster given by workers per type (market does not matter)."""
        return self._speed(per_type, ps)

    def grid(self) -> PlanGrid:
        """Every admissible plan of the quota box (built once, for the replan policy)."""
        if self._grid is None:
            self._grid = plan_grid(self.problem, max_plans=self._max_plans)
            ev = self._grid.model.evaluate(self._grid.counts, self._grid.ps)
            self._inside = getattr(ev, "inside_domain", np.ones(len(self._grid.counts), dtype=bool))
        return self._grid

    def takeover(self, held: np.ndarray, ps: int, caps: np.ndarray, elapsed: float, progress: float) -> int | None:
        """Index in :meth:`grid` of the optimal takeover plan, or ``None`` when none meets T_obj.

        ``held``: instances per column now (kept), ``caps``: spot instances per type offered
        now. Same feasible set and cost as :func:`dnnprov.revocation.replan.replanned_problem` with
        these survivors, PS, remaining time, reached loss, capacity and the takeover
        overhead :meth:`delay` (every quota-box plan keeping the survivors and PS, within
        capacity, meeting the remaining time).
        """
        g = self.grid()
        remaining = self.problem.slo.time_s - elapsed
        if remaining <= self.delay(elapsed):
            return None
        upper = np.array(self.model.columns.upper)
        for i, col in enumerate(self.spot_col):
            upper[col] = min(upper[col], max(int(caps[i]), int(held[col])))
        with np.errstate(divide="ignore"):
            time_left = self.delay(elapsed) + (self.target - progress) / g.speed
        ok = ((g.counts >= held).all(axis=1) & (g.counts <= upper).all(axis=1) & (g.ps >= ps)
              & (g.speed > 0) & self._inside & (time_left <= remaining * (1 + 1e-12)))
        budget = self.problem.constraints.budget_usd
        cost = g.rate * time_left / 3600
        if budget is not None:
            ok &= cost <= budget - self._spent_so_far
        if not ok.any():
            return None
        return int(np.argmin(np.where(ok, cost, np.inf)))

    # ------------------------------------------------------------------ one run
    def run(self, plan: SpotPlan, policy: str, rng: np.random.Generator) -> RunOutcome:
        """Replay one run of ``plan`` under ``policy`` at random trace offsets."""
        traces = {i: items[int(rng.integers(len(items)))] for i, items in self.traces.items()}
        capacity = _Capacity(traces, self.quota, self.horizon_s, rng)
        n_types = len(self.types)
        spot_plan = np.array([plan.counts.get(n, 0) for n in self.types], dtype=np.int64)
        od_plan = np.array([plan.counts.get(n + ON_DEMAND_SUFFIX, 0) for n in self.types], dtype=np.int64)
        caps = previous_caps = capacity.at(0.0)
        spot_run = np.minimum(spot_plan, caps)
        od_run = od_plan.copy()
        spot_join = np.zeros(n_types, dtype=np.int64)
        od_join = np.zeros(n_types, dtype=np.int64)
        joins: list[tuple[float, int, str, int]] = []        # (ready time, type, market, count)
        ps, ps_pending = plan.ps, []                           # pending: (ready time, new PS count)
        wanted = spot_plan.copy()                              # spot workers the policy wants held
        u = self._speed.run_start(spot_plan + od_plan, plan.ps)
        t, cost, revocations, replans, od_launched = 0.0, 0.0, 0, 0, 0
        self._spent_so_far = 0.0
        if policy == "none":
            wanted = spot_run.copy()
        events = list(capacity.times[1:]) + [self.horizon_s]
        pending_event = bool((spot_run < spot_plan).any())     # a short start is handled like a revocation
        finish = None
        while True:
            if pending_event:
                caps = capacity.at(t)
                action = self._act(policy, t, u, caps, spot_run, spot_join, od_run, od_join, wanted, ps,
                                   joining=bool(joins))
                if action is not None:
                    kind, launches, new_ps = action
                    replans += kind == "replan"
                    for market, i, count in launches:
                        joins.append((t + self.delay(t), i, market, count))
                        (spot_join if market == "spot" else od_join)[i] += count
                        od_launched += count if market == "on-demand" else 0
                    if new_ps > ps:
                        ps_pending.append((t + self.delay(t), new_ps))
                pending_event = False
            next_join = min([j[0] for j in joins] + [p[0] for p in ps_pending] + [math.inf])
            next_cap = events[0] if events else math.inf
            t_next = min(next_join, next_cap, self.horizon_s)
            running = spot_run + od_run
            sigma = self.speed(running, ps)
            rate = float(self.spot_price @ (spot_run + spot_join) + np.nansum(self.od_price * (od_run + od_join))
                         + (max([p[1] for p in ps_pending] + [ps])) * self.problem.platform.ps_price_per_h)
            if sigma > 0 and u + sigma * (t_next - t) >= self.target:
                finish = t + (self.target - u) / sigma
                cost += rate * (finish - t) / 3600
                u = self.target
                break
            if policy == "none" and running.sum() == 0 and not joins:
                break                                          # nothing left that could train
            cost += rate * (t_next - t) / 3600
            self._spent_so_far = cost
            u += sigma * (t_next - t)
            t = t_next
            if t >= self.horizon_s:
                break
            for j in [j for j in joins if j[0] <= t]:
                joins.remove(j)
                _, i, market, count = j
                if market == "spot":
                    spot_join[i] -= count
                    spot_run[i] += count
                else:
                    od_join[i] -= count
                    od_run[i] += count
            for p in [p for p in ps_pending if p[0] <= t]:
                ps_pending.remove(p)
                ps = max(ps, p[1])
            if events and events[0] <= t:
                events.pop(0)
            caps = capacity.at(t)
            over = spot_run + spot_join - caps
            lost = False
            for i in np.flatnonzero(over > 0):
                excess = int(over[i])
                revocations += excess
                lost = True
                from_join = min(excess, int(spot_join[i]))
                spot_join[i] -= from_join
                spot_run[i] -= excess - from_join
                self._drop_joins(joins, i, from_join)
                if policy == "none":
                    wanted[i] = spot_run[i] + spot_join[i]
            held = spot_run + spot_join
            rose = (caps > previous_caps) & (caps > held)
            previous_caps = caps
            if policy == "fallback":
                rose &= held < wanted
            elif policy == "replan":
                rose &= held < np.array(self.quota)
            pending_event = lost or (policy != "none" and bool(rose.any()))
        loss = 1.0 / u + self.problem.workload.gamma_5 if u > 0 else math.inf
        met = finish is not None and finish <= self.problem.slo.time_s * (1 + 1e-12)
        return RunOutcome(met_deadline=met, finish_s=finish, cost=cost, loss=loss, revocations=revocations,
                          replans=replans, on_demand_launched=od_launched)

    @staticmethod
    def _drop_joins(joins: list[tuple[float, int, str, int]], i: int, count: int) -> None:
        """Remove ``count`` joining spot instances of type ``i`` (latest launches first)."""
        for j in sorted([j for j in joins if j[1] == i and j[2] == "spot"], key=lambda j: -j[0]):
            if count <= 0:
                break
            take = min(count, j[3])
            joins.remove(j)
            if j[3] > take:
                joins.append((j[0], j[1], j[2], j[3] - take))
            count -= take

    def _per_type(self, counts: np.ndarray) -> np.ndarray:
        """Workers per type (both markets) of per-column counts."""
        out = np.zeros(len(self.types), dtype=np.int64)
        for c, name in enumerate(self.model.columns.type_names):
            out[self.types.index(name)] += counts[c]
        return out

    def _takeover_plan(self, counts: np.ndarray, ps: int, caps: np.ndarray, t: float,
                       u: float) -> tuple[np.ndarray, int] | None:
        """The takeover's counts per column and PS count, by ``replan_method``; ``None``: none."""
        if self.replan_method == "exact":
            best = self.takeover(counts, ps, caps, t, u)
            return None if best is None else (self.grid().counts[best], int(self.grid().ps[best]))
        from dnnprov.revocation.replan import replanned_problem
        from dnnprov.dispatch import solve

        labels = self.model.columns.labels
        running = {label: int(n) for label, n in zip(labels, counts) if n}
        takeover = replanned_problem(self.problem, running, {}, t, 1.0 / u + self.problem.workload.gamma_5,
                                     takeover_overhead_s=self.delay(t), ps=ps,
                                     capacity={name: int(c) for name, c in zip(self.types, caps)})
        result = solve(takeover, "heuristic")
        if result.plan is None:
            return None
        return np.array([result.plan.counts.get(label, 0) for label in labels]), int(result.plan.ps)

    def _columns(self, spot: np.ndarray, od: np.ndarray) -> np.ndarray:
        """Per-column counts of the problem from per-type spot and on-demand counts."""
        counts = np.zeros(len(self.model.columns), dtype=np.int64)
        counts[self.spot_col] = spot
        for i, col in enumerate(self.od_col):
            if col is not None:
                counts[col] += od[i]
            else:
                counts[self.spot_col[i]] += od[i]
        return counts

    def _act(self, policy: str, t: float, u: float, caps: np.ndarray, spot_run: np.ndarray,
             spot_join: np.ndarray, od_run: np.ndarray, od_join: np.ndarray, wanted: np.ndarray, ps: int,
             joining: bool) -> tuple[str, list[tuple[str, int, int]], int] | None:
        """What the policy launches now: ``(kind, [(market, type, count)], PS count)``."""
        held = spot_run + spot_join
        free = np.maximum(caps - held, 0)
        if policy == "none":
            return None
        def keep_ok(new: np.ndarray, new_ps: int) -> bool:
            """Whether the takeover beats carrying on as is (no launch, hence no overhead)."""
            if joining:
                return True
            sigma = self.speed(spot_run + od_run, ps)
            if sigma <= 0:
                return True
            keep_time = (self.target - u) / sigma
            if t + keep_time > self.problem.slo.time_s * (1 + 1e-12):
                return True
            keep_rate = float(self.spot_price @ spot_run + np.nansum(self.od_price * od_run)
                              + ps * self.problem.platform.ps_price_per_h)
            rate = float(new @ self.model.columns.price + new_ps * self.problem.platform.ps_price_per_h)
            takeover_time = self.delay(t) + (self.target - u) / self.speed(self._per_type(new), new_ps)
            return bool(rate * takeover_time < keep_rate * keep_time)

        if policy == "replan" and t < self.problem.slo.time_s - self.delay(t):
            counts = np.zeros(len(self.model.columns), dtype=np.int64)
            counts[self.spot_col] = held
            for i, col in enumerate(self.od_col):
                if col is not None:
                    counts[col] = od_run[i] + od_join[i]
            chosen = self._takeover_plan(counts, ps, caps, t, u)
            if chosen is not None:
                new_counts, new_ps = chosen
                if not keep_ok(new_counts, new_ps):
                    return None
                new = new_counts - counts
                launches = [("spot" if self.model.columns.markets[c] == "spot" else "on-demand",
                             self.types.index(self.model.columns.type_names[c]), int(new[c]))
                            for c in np.flatnonzero(new > 0)]
                wanted[:] = new_counts[self.spot_col]
                return "replan", launches, new_ps
        missing = np.maximum(wanted - held, 0)
        launches = [("spot", int(i), int(min(missing[i], free[i]))) for i in np.flatnonzero(np.minimum(missing, free) > 0)]
        if policy == "fallback":
            still = missing - np.minimum(missing, free)
            cluster = spot_run + od_run + spot_join + od_join + np.minimum(missing, free)
            sigma = self.speed(cluster, ps)
            late = sigma <= 0 or t + self.delay(t) + (self.target - u) / sigma > self.problem.slo.time_s
            if still.any() and late:
                for i in np.flatnonzero(still > 0):
                    if math.isnan(self.od_price[i]):
                        raise InvalidInputError(f"instance_types.{self.types[i]}.on_demand_price_per_h",
                                                "missing: the fallback policy launches on-demand instances")
                    launches.append(("on-demand", int(i), int(still[i])))
                    wanted[i] -= still[i]
        return ("relaunch", launches, ps) if launches else None


def simulate(problem: SpotProblem, plan: SpotPlan | Mapping[str, int], traces: Mapping[str, Sequence[Trace]], *,
             policy: str = "none", runs: int = 1000, seed: int = 0, join_s: float = JOIN_OVERHEAD_S,
             horizon: float = 3.0, replan_method: str = "exact",
             on_run: Callable[[int, int], None] | None = None, simulator: Simulator | None = None,
             time_limit_s: float | None = None) -> Replay:
    """Replay ``runs`` runs of ``plan`` against ``traces`` under ``policy`` (module docstring).

    ``on_run(done, total)`` is called after each run (a progress bar); ``simulator`` reuses
    one built for the same problem and traces (its model caches; its ``join_s``, ``horizon``
    and ``replan_method`` then apply). ``time_limit_s`` (wall-clock seconds from this call,
    set-up included) stops after the run that crosses it (at least one run); the replay
    holds the runs done and its settings say so.
    """
    started = time.perf_counter()
    policy = check.choice("policy", policy, POLICIES)
    runs = check.integer("runs", runs, minimum=1, maximum=10_000_000)
    seed = check.integer("seed", seed, minimum=0)
    if not isinstance(plan, SpotPlan):
        plan = SpotPlan(counts=check_existing("plan.counts", plan), ps=problem.constraints.ps_count[0])
    check_plan_traces(problem, plan, traces)
    sim = simulator or Simulator(problem, traces, join_s=join_s, horizon=horizon, replan_method=replan_method)
    workers = np.array([plan.counts.get(n, 0) + plan.counts.get(n + ON_DEMAND_SUFFIX, 0) for n in sim.types])
    check_plan_trains(sim.speed(workers, plan.ps))
    rng = np.random.default_rng(seed)
    outcomes = []
    stopped = False
    for done in range(1, runs + 1):
        outcomes.append(sim.run(plan, policy, rng))
        if on_run is not None:
            on_run(done, runs)
        if time_limit_s is not None and time.perf_counter() - started > time_limit_s and done < runs:
            stopped = True
            break
    settings = {"seed": seed, "join_s": sim.join_s, "horizon_s": sim.horizon_s, "plan": plan.to_dict(),
                "replan_method": sim.replan_method,
                "traces": {name: [tr.path for tr in items] for name, items in traces.items()},
                "time_obj_s": problem.slo.time_s, "runs_asked": runs, "stopped_by_time_limit": stopped}
    return Replay(policy=policy, runs=tuple(outcomes), settings=settings)


def check_plan_trains(speed: float) -> None:
    """Refuse a plan whose cluster does not train (``speed``: its progress speed), e.g. one
    outside the loss model's validity domain, where the solver plans none."""
    if not speed > 0:
        raise InvalidInputError("plan.counts", "the plan's cluster does not train under the loss model (outside "
                                               "its validity domain, or its loss curve never reaches slo.loss)")


def pooled_replay(policy: str, *, zones: bool, hindsight: bool, period: bool, model: bool, fit_period: bool,
                  replan_method: str, option: Callable[[str], str] = lambda name: name) -> bool:
    """Whether a replay needs the pool engine (zones, hindsight, a period or a pool policy), after
    refusing options that do not go together; errors name ``option(name)`` (``--model``, ``model``)."""
    if model and fit_period:
        raise InvalidInputError(option("model"), f"give {option('model')} or {option('fit_period')}, not both")
    if (model or fit_period) and policy != "mpc":
        raise InvalidInputError(option("model" if model else "fit_period"), f"goes with {option('policy')} mpc")
    pooled = zones or hindsight or period or policy not in POLICIES
    if pooled and (policy == "replan" or replan_method != "exact"):
        raise InvalidInputError(option("policy"), f"the replan policy replays without {option('zones')}, "
                                f"{option('period')} and {option('hindsight')}")
    return pooled


def check_plan_traces(problem: SpotProblem, plan: SpotPlan, traces: Mapping[str, Sequence[Trace]]) -> None:
    """Refuse traces of unknown types, plan columns the problem lacks, spot types without traces."""
    names = [t.name for t in problem.instance_types]
    for name in traces:
        if name not in names:
            raise InvalidInputError(f"--trace {name}", f"not an instance type of the problem ({', '.join(names)})")
    labels = set(problem.columns().labels)
    for label, n in plan.counts.items():
        if label not in labels:
            raise InvalidInputError(f"plan.counts.{label}", problem.why_not_a_column(label, labels))
        if n and not label.endswith(ON_DEMAND_SUFFIX) and label not in traces:
            raise InvalidInputError(f"--trace {label}", "the plan uses this spot type but no trace is given for it")
    if plan.workers == 0:
        raise InvalidInputError("plan.counts", "the plan has no worker")
