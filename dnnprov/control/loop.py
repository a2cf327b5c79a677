"""The control loop: observe, ask the policy, act; the same loop for replays and for EC2.

Every ``poll_s`` seconds of cloud time (15 s by default, spotDNN's detector period) the
controller:

1. **observes** what a live controller can: the run's instances and their state (launched,
   notified, gone), the trainer's latest progress report, the clock, and what its own
   launches got. Spot capacity is not observable: a pool is taken as full after it refused
   (or partly granted) a launch, until a back-off of ``retry_s`` doubling up to
   ``retry_max_s`` runs out; otherwise it is taken to have room;
2. **asks the policy** (:mod:`dnnprov.revocation.policies`, the same objects for both clouds)
   what to hold: spot per pool, on-demand per type. A notified instance counts as lost (it
   will be reclaimed), so the policy replaces it during the two-minute notice;
3. **acts**: launches (the PS first, then workers handed its address) and terminations, each
   written to the run record before it is sent (:mod:`dnnprov.control.record`), launches
   idempotent by a ClientToken of the run and the step. A refused launch marks its pool full
   and the policy is asked again at once (up to ``rounds`` times: by default once more than
   the run has pools, so that a policy placing on one pool at a time can try each of them), so
   failover costs no poll;
   the order's terminations are sent only in a round whose launches all succeeded (make
   before break: nothing is stopped for a replacement that was refused).
   At most the plan's workers of a type train (its quotas under a policy that takes over up
   to them: ``replan``): joined on-demand instances take over from spot ones (dearest pools
   first), as in the replays.

The run ends when the trainer reports the target loss (``met`` if by the deadline), at the
horizon (``horizon x T_obj``, missed), when even the plan's whole cluster could no longer
finish by the horizon (given up), or at a cancel; then every instance of the run is
terminated. Instances are billed from launch until gone, at their pool's spot price or the
type's on-demand price, the PS at the platform's PS price.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dnnprov.control.cloud import PS_PORT, Cloud, Instance, LaunchOutcome, LaunchRequest, pool_name
from dnnprov.control.clouds.capacity import NOTICE_S
from dnnprov.control.trainer import ProgressModel, Report
from dnnprov.errors import InvalidInputError
from dnnprov.problems.spot import ON_DEMAND_SUFFIX, SpotProblem
from dnnprov.problems.validation import checks as check
from dnnprov.result import SpotPlan
from dnnprov.revocation.policy_view import Holdings, Policy, View

#: spotDNN's detector polls every 15 s.
POLL_S = 15.0
RETRY_S = 15.0
RETRY_MAX_S = 240.0
#: Least rounds of a poll (:attr:`RunSettings.rounds`).
ROUNDS = 4


@dataclass(frozen=True)
class PoolInfo:
    """A spot pool the run may use: type, zone (``None``: the cloud picks) and price."""

    type_name: str
    zone: str | None
    price_per_h: float

    @property
    def name(self) -> str:
        return pool_name(self.type_name, self.zone, "spot")


@dataclass
class RunSettings:
    """The loop's knobs (module docstring)."""

    poll_s: float = POLL_S
    join_s: float = 126.0
    horizon: float = 1.0
    retry_s: float = RETRY_S
    retry_max_s: float = RETRY_MAX_S
    #: Policy rounds per poll; ``None``: one more than the run's pools, at least :data:`ROUNDS`.
    rounds: int | None = None

    def __post_init__(self) -> None:
        self.poll_s = check.number("poll_s", self.poll_s, exclusive_minimum=0)
        self.join_s = check.number("join_s", self.join_s, minimum=0)
        self.horizon = check.number("horizon", self.horizon, minimum=1)
        self.retry_s = check.number("retry_s", self.retry_s, exclusive_minimum=0)
        self.retry_max_s = check.number("retry_max_s", self.retry_max_s, minimum=self.retry_s)
        if self.rounds is not None:
            self.rounds = check.integer("rounds", self.rounds, minimum=1, maximum=100)

    def to_dict(self) -> dict[str, Any]:
        return {
            "poll_s": self.poll_s,
            "join_s": self.join_s,
            "horizon": self.horizon,
            "retry_s": self.retry_s,
            "retry_max_s": self.retry_max_s,
            "rounds": self.rounds,
        }


@dataclass(frozen=True)
class Event:
    """Something the controller saw or did, at cloud time ``time_s``."""

    time_s: float
    kind: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"time_s": self.time_s, "kind": self.kind, **self.detail}


@dataclass
class Outcome:
    """How a run ended."""

    state: str  # "met", "missed", "gave-up", "cancelled"
    finish_s: float | None
    end_s: float
    cost: float
    loss: float
    revocations: int
    launches: int
    refusals: int
    on_demand_launched: int

    @property
    def met_deadline(self) -> bool:
        return self.state == "met"

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "met_deadline": self.met_deadline,
            "finish_s": self.finish_s,
            "end_s": self.end_s,
            "cost": self.cost,
            "loss": self.loss,
            "revocations": self.revocations,
            "launches": self.launches,
            "refusals": self.refusals,
            "on_demand_launched": self.on_demand_launched,
        }


class Controller:
    """Runs ``plan`` of ``problem`` on ``cloud`` under ``policy`` (module docstring).

    ``trainer(instances, now)`` returns the trainer's latest :class:`Report` (``None`` while
    there is none). ``record``, when given, is told every step before it is taken and every
    event after (:class:`dnnprov.control.record.RunRecord`), and keeps its memory (the
    policy's state, the pools taken as full) there when it changes; a controller built on a
    record that already holds steps resumes (:meth:`resume`): it restores that memory, adopts
    the instances the cloud reports for the run and re-sends unfinished launches with their
    tokens (the cloud returns the same instances). ``ps_type`` is the type the PS is launched
    as (default the platform's; ``m5.xlarge@us-east-1`` places it in a region of a
    multi-region run).
    """

    def __init__(
        self,
        problem: SpotProblem,
        plan: SpotPlan,
        policy: Policy,
        cloud: Cloud,
        *,
        run_id: str,
        pools: Sequence[PoolInfo],
        trainer: Callable[[list[Instance], float], Report | None],
        settings: RunSettings | None = None,
        record: Any = None,
        ps_type: str | None = None,
    ) -> None:
        self.problem, self.plan, self.policy, self.cloud = problem, plan, policy, cloud
        self.ps_type = ps_type or problem.platform.ps_type
        self.run_id, self.trainer, self.record = run_id, trainer, record
        self.settings = settings or RunSettings()
        self.types = [t.name for t in problem.instance_types]
        self.pools = list(pools)
        known = {p.type_name for p in self.pools}
        for label, n in plan.counts.items():
            name = label.removesuffix(ON_DEMAND_SUFFIX)
            if n and not label.endswith(ON_DEMAND_SUFFIX) and name not in known:
                raise InvalidInputError(f"plan.counts.{label}", "the plan uses this spot type but no pool offers it")
        self.pool_type = np.array([self.types.index(p.type_name) for p in self.pools], dtype=np.int64)
        seen: dict[str, int] = {}
        groups = []
        for p in self.pools:
            groups.append(seen.get(p.type_name, 0))
            seen[p.type_name] = groups[-1] + 1
        self.pool_group = np.array(groups, dtype=np.int64)
        self.pool_price = np.array([p.price_per_h for p in self.pools])
        self.od_price = np.array(
            [
                t.on_demand_price_per_h if t.on_demand_price_per_h is not None else math.nan
                for t in problem.instance_types
            ]
        )
        self.model = ProgressModel(problem, plan, self.settings.join_s, policy.up_to_quota)
        self.want = self.model.want
        self.od_floor = np.array([plan.counts.get(n + ON_DEMAND_SUFFIX, 0) for n in self.types], dtype=np.int64)
        self.deadline_s = problem.slo.time_s
        self.horizon_s = self.settings.horizon * problem.slo.time_s
        self.events: list[Event] = []
        self.step = 0
        self.full_until = np.full(len(self.pools), -math.inf)  # pool taken as full until then
        self.refused_s = np.full(len(self.pools), -math.inf)  # when each pool last refused a launch
        self.backoff = np.full(len(self.pools), self.settings.retry_s)
        self.outcome: Outcome | None = None
        self._seen_notice: set[str] = set()
        self._seen_end: set[str] = set()
        self._last_report: Report | None = None
        self._cancelled = False
        self.ps_address: str | None = None
        self.counters = {"revocations": 0, "launches": 0, "refusals": 0, "on_demand_launched": 0}
        self._memory: dict[str, Any] | None = None
        self._resumed = False
        self._provisioned = False  # the first round of worker launches was decided

    # ------------------------------------------------------------------ observing
    def note(self, kind: str, **detail: Any) -> None:
        """Record an event now (and journal it)."""
        self._journal(Event(self.cloud.now(), kind, detail))

    def _journal(self, event: Event) -> None:
        """Record an event (and journal it: a restarted controller reads the notices and reclaims
        it saw, and when, from the record)."""
        self.events.append(event)
        if self.record is not None:
            self.record.event(self.run_id, event)

    def memory(self) -> dict[str, Any]:
        """What the controller knows beyond the cloud and the record's steps: its policy's state
        (:func:`policy_state`) and the pools it takes as full, with their back-offs."""
        return {
            "policy": policy_state(self.policy),
            "full_until": [None if math.isinf(t) else float(t) for t in self.full_until],
            "backoff": [float(b) for b in self.backoff],
            "refused_s": [None if math.isinf(t) else float(t) for t in self.refused_s],
        }

    def _remember(self) -> None:
        """Keep :meth:`memory` in the record when it changed (before the actions it leads to)."""
        if self.record is None or not hasattr(self.record, "remember"):
            return
        memory = self.memory()
        if memory != self._memory:
            self.record.remember(self.run_id, memory)
            self._memory = memory

    def _restore(self, memory: dict[str, Any]) -> None:
        restore_policy_state(self.policy, memory.get("policy", {}))
        full = memory.get("full_until") or []
        backoff = memory.get("backoff") or []
        if len(full) == len(self.pools) and len(backoff) == len(self.pools):
            self.full_until = np.array([-math.inf if t is None else float(t) for t in full])
            self.backoff = np.array([float(b) for b in backoff])
        refused = memory.get("refused_s") or []
        if len(refused) == len(self.pools):
            self.refused_s = np.array([-math.inf if t is None else float(t) for t in refused])
        self._memory = self.memory()

    def observe(self) -> tuple[list[Instance], float, Report | None]:
        """The run's instances, the time, the trainer's report; notes new notices and ends."""
        now = self.cloud.now()
        instances = self.cloud.instances(self.run_id)
        for i in instances:
            if i.notice_s is not None and i.instance_id not in self._seen_notice:
                self._seen_notice.add(i.instance_id)
                self.counters["revocations"] += 1
                self._journal(Event(i.notice_s, "notice", {"instance": i.instance_id, "pool": i.pool}))
            if i.ended_s is not None and i.instance_id not in self._seen_end:
                self._seen_end.add(i.instance_id)
                if i.notice_s is not None:
                    self._journal(Event(i.ended_s, "reclaim", {"instance": i.instance_id, "pool": i.pool}))
        if self.ps_address is None:
            ps = [i for i in instances if i.role == "ps" and i.ended_s is None]
            self.ps_address = ps[0].ps_address if ps else None
        report = self.trainer(instances, now)
        if report is not None:
            self._last_report = report
        return instances, now, report

    def cost(self, instances: Sequence[Instance], now: float) -> float:
        """Dollars so far: every instance from launch until gone (or now)."""
        pools = {p.name: p.price_per_h for p in self.pools}
        total = 0.0
        for i in instances:
            end = now if i.ended_s is None else min(i.ended_s, now)
            if i.role == "ps":
                price = self.problem.platform.ps_price_per_h
            elif i.market == "spot":
                price = pools.get(i.pool, self.problem.instance_types[self.types.index(i.type_name)].spot_price_per_h)
            else:
                price = float(self.od_price[self.types.index(i.type_name)])
            total += price * max(0.0, end - i.launched_s) / 3600
        return total

    # ------------------------------------------------------------------ the view
    def view(self, instances: Sequence[Instance], now: float, event: bool, first: bool = False) -> View:
        """What the policy sees: holdings, estimated capacity, progress (module docstring)."""
        n_pools, n_types = len(self.pools), len(self.types)
        spot = np.zeros(n_pools, dtype=np.int64)
        od = np.zeros(n_types, dtype=np.int64)
        index = {p.name: k for k, p in enumerate(self.pools)}
        held = [i for i in instances if i.role == "worker" and i.ended_s is None and i.notice_s is None]
        for i in held:
            if i.market == "spot" and i.pool in index:
                spot[index[i.pool]] += 1
            elif i.market == "on-demand":
                od[self.types.index(i.type_name)] += 1
        room = np.array([int(self.model.most[t]) for t in self.pool_type], dtype=np.int64)
        caps = spot + np.where(self.full_until > now, 0, room)
        u = self._progress()
        ps = self.plan.ps
        span = self.model.target - self.model.start
        delay = 0.0 if first else self.settings.join_s

        def time_to_finish(workers: np.ndarray, u: float = u) -> float:
            sigma = self.model.speed(np.asarray(workers), ps)
            return (self.model.target - u) / sigma if sigma > 0 else math.inf

        notified = [
            (self.model.joined_s(i), i.notice_s + NOTICE_S, self.types.index(i.type_name))
            for i in instances
            if i.role == "worker" and i.ended_s is None and i.notice_s is not None and i.type_name in self.types
        ]

        def sure(order: Holdings, until_s: float, with_notified: bool) -> float:
            """Progress u by ``until_s`` from the workers ``order`` keeps and launches (and the
            notified ones until their reclaim, EC2's two minutes after the notice)."""
            spans = [(j, math.inf, kind) for j, kind in self._joins_kept(order, held, now + delay)]
            if with_notified:
                spans += notified
            done, t = u, now
            for cut in sorted({e for j, end, _ in spans for e in (j, end) if now < e < until_s} | {until_s}):
                if cut <= t:
                    continue
                members = np.zeros(n_types, dtype=np.int64)
                for j, end, kind in spans:
                    members[kind] += j <= t < end
                done += self.model.speed(np.minimum(members, self.model.most), ps) * (cut - t)
                t = cut
            return done

        def time_after(order: Holdings, workers: np.ndarray, until_s: float) -> float:
            return time_to_finish(workers, sure(order, until_s, False))

        def progress_by(order: Holdings, until_s: float) -> float:
            done = min(sure(order, until_s, True), self.model.target)
            return (done - self.model.start) / span if span > 0 else 1.0

        return View(
            t=now,
            gap_s=self.settings.poll_s,
            join_s=self.settings.join_s,
            deadline_s=self.deadline_s,
            progress=(u - self.model.start) / span if span > 0 else 1.0,
            caps=caps,
            refused_s=self.refused_s.copy(),
            pool_type=self.pool_type,
            pool_group=self.pool_group,
            pool_price=self.pool_price,
            spot=spot,
            od=od,
            want=self.want,
            od_floor=self.od_floor,
            ps=ps,
            event=event,
            time_to_finish=time_to_finish,
            time_after=time_after,
            progress_by=progress_by,
            first=first,
        )

    def _joins_kept(self, order: Holdings, held: Sequence[Instance], launch_join_s: float) -> list[tuple[float, int]]:
        """(join time, type index) of each worker ``order`` keeps (the oldest held per pool and
        type, as :meth:`_apply` terminates the newest) or launches (joining at ``launch_join_s``)."""
        out: list[tuple[float, int]] = []
        groups = [
            (int(order.spot[p]), [i for i in held if i.market == "spot" and i.pool == pool.name], pool.type_name)
            for p, pool in enumerate(self.pools)
        ] + [
            (int(order.od[t]), [i for i in held if i.market == "on-demand" and i.type_name == name], name)
            for t, name in enumerate(self.types)
        ]
        for count, mine, type_name in groups:
            kind = self.types.index(type_name)
            kept = sorted(mine, key=lambda i: (i.launched_s, i.instance_id))[: max(count, 0)]
            out += [(self.model.joined_s(i), kind) for i in kept]
            out += [(launch_join_s, kind)] * max(0, count - len(kept))
        return out

    def _progress(self) -> float:
        if self._last_report is None:
            return self.model.start
        return min(self.model.progress_of(self._last_report.loss), self.model.target)

    # ------------------------------------------------------------------ acting
    def _launch(self, role: str, type_name: str, zone: str | None, market: str, count: int) -> LaunchOutcome:
        self.step += 1
        request = LaunchRequest(
            run_id=self.run_id,
            step=self.step,
            role=role,
            type_name=type_name,
            zone=zone,
            market=market,
            count=count,
            token=f"{self.run_id}-{self.step}",
            ps_address=self.ps_address if role == "worker" else None,
        )
        if self.record is not None:
            self.record.intend(self.run_id, self.step, "launch", request.to_dict())
        outcome = self.cloud.launch(request)
        if self.record is not None:
            self.record.done(
                self.run_id,
                self.step,
                {"instances": [i.to_dict() for i in outcome.instances], "error_code": outcome.error_code},
            )
        pool = pool_name(type_name, zone, market)
        if outcome.instances:
            self.counters["launches"] += len(outcome.instances)
            if market == "on-demand" and role == "worker":
                self.counters["on_demand_launched"] += len(outcome.instances)
            self.note("launch", pool=pool, role=role, asked=count, got=len(outcome.instances), step=self.step)
        if outcome.error_code is not None:
            self.counters["refusals"] += 1
            self.note("refused", pool=pool, role=role, asked=count, code=outcome.error_code, step=self.step)
        return outcome

    def _terminate(self, instances: Sequence[Instance], why: str) -> None:
        if not instances:
            return
        ids = [i.instance_id for i in instances]
        self.step += 1
        if self.record is not None:
            self.record.intend(
                self.run_id, self.step, "terminate", {"instances": ids, "why": why, "time_s": self.cloud.now()}
            )
        self.cloud.terminate(ids)
        if self.record is not None:
            self.record.done(self.run_id, self.step, {})
        for i in instances:
            self._seen_end.add(i.instance_id)
        self.note("terminate", instances=len(ids), why=why, step=self.step)

    def _ensure_ps(self, instances: Sequence[Instance]) -> bool:
        """Launch the plan's PS that are not live (a first launch refused or throttled, a PS
        gone) and hand workers a live one's address; whether some PS is live."""
        live = [i for i in instances if i.role == "ps" and i.ended_s is None]
        if len(live) < self.plan.ps:
            out = self._launch("ps", self.ps_type, None, "on-demand", self.plan.ps - len(live))
            live.extend(out.instances)
        addresses = [i.ps_address or f"{i.instance_id}:{PS_PORT}" for i in live]
        if self.ps_address not in addresses:
            self.ps_address = addresses[0] if addresses else None
        return bool(live)

    def _apply(self, order: Holdings, view: View, instances: Sequence[Instance], now: float) -> bool:
        """Launch and terminate towards ``order``; whether some launch was refused.

        Launches go first; the order's terminations only when no launch was refused: a refused
        order was decided on capacity that was not there, so the policy is asked again before
        anything it meant to replace is stopped (make before break)."""
        refused = False
        live = [i for i in instances if i.role == "worker" and i.ended_s is None and i.notice_s is None]
        stop: list[list[Instance]] = []  # per pool, then per on-demand type
        for p, pool in enumerate(self.pools):
            change = int(max(order.spot[p], 0) - view.spot[p])
            mine = [i for i in live if i.market == "spot" and i.pool == pool.name]
            if change > 0:
                outcome = self._launch("worker", pool.type_name, pool.zone, "spot", change)
                if outcome.refused_for_capacity or len(outcome.instances) < change:
                    refused = True
                    self.refused_s[p] = now
                    self.full_until[p] = now + self.backoff[p]
                    self.backoff[p] = min(self.backoff[p] * 2, self.settings.retry_max_s)
                elif outcome.instances:
                    self.backoff[p] = self.settings.retry_s
            elif change < 0:
                stop.append(self._newest(mine, -change))
        for t, name in enumerate(self.types):
            change = int(order.od[t] - view.od[t])
            mine = [i for i in live if i.market == "on-demand" and i.type_name == name]
            if change > 0:
                if math.isnan(self.od_price[t]):
                    raise InvalidInputError(
                        f"instance_types.{name}.on_demand_price_per_h",
                        f"missing: the {self.policy.name} policy launches on-demand instances",
                    )
                self._launch("worker", name, None, "on-demand", change)
            elif change < 0:
                stop.append(self._newest(mine, -change))
        for group in stop if not refused else []:
            self._terminate(group, "policy")
        return refused

    @staticmethod
    def _newest(instances: Sequence[Instance], count: int) -> list[Instance]:
        return sorted(instances, key=lambda i: (i.launched_s, i.instance_id), reverse=True)[:count]

    def _release_replaced(self, instances: Sequence[Instance], now: float) -> None:
        """Stop joined spot workers beyond the plan's count of a type (dearest pools first)."""
        prices = {p.name: p.price_per_h for p in self.pools}
        for t, name in enumerate(self.types):
            joined = [
                i
                for i in instances
                if i.role == "worker"
                and i.type_name == name
                and i.ended_s is None
                and i.notice_s is None
                and self.model.joined_s(i) <= now
            ]
            excess = len(joined) - int(self.model.most[t])
            spot = [i for i in joined if i.market == "spot"]
            if excess > 0 and spot:
                spot.sort(key=lambda i: (-prices.get(i.pool, 0.0), -i.launched_s, i.instance_id))
                self._terminate(spot[:excess], "replaced")

    # ------------------------------------------------------------------ the loop
    def resume(
        self, steps: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]], memory: dict[str, Any] | None = None
    ) -> None:
        """Go on from a record (a restarted controller): adopt the run's instances the cloud
        reports (so a re-sent launch finds them with their launch times), restore the
        controller's ``memory`` (:meth:`memory`), continue its step numbers, re-send the steps
        written but not marked done (launches keep their tokens, so the cloud returns what it
        launched; terminations are repeated), note the launches whose outcome the journal
        lacks, and take the next poll as an event (what happened while no controller ran is
        looked at once)."""
        self.step = max((int(s["step"]) for s in steps), default=0)
        self._provisioned = bool(steps)
        for e in events:
            self.events.append(
                Event(float(e["time_s"]), str(e["kind"]), {k: v for k, v in e.items() if k not in ("time_s", "kind")})
            )
            if e["kind"] == "notice":
                self._seen_notice.add(str(e.get("instance")))
                self.counters["revocations"] += 1
            elif e["kind"] == "reclaim":
                self._seen_end.add(str(e.get("instance")))
        for s in steps:
            if s["kind"] == "terminate" and s["status"] == "done":
                self._seen_end.update(str(i) for i in s["payload"].get("instances", []))
        if events:
            self._last_poll = max(float(e["time_s"]) for e in events)
        if memory:
            self._restore(memory)
        self.cloud.instances(self.run_id)
        noted = {int(e["step"]) for e in events if e["kind"] in ("launch", "refused") and "step" in e}
        for s in steps:
            result = s.get("result")
            if s["status"] == "intent":
                if s["kind"] == "launch":
                    outcome = self.cloud.launch(LaunchRequest.from_dict(s["payload"]))
                    result = {"instances": [i.to_dict() for i in outcome.instances], "error_code": outcome.error_code}
                else:
                    self.cloud.terminate(s["payload"]["instances"])
                    self._seen_end.update(str(i) for i in s["payload"]["instances"])
                    result = {}
                if self.record is not None:
                    self.record.done(self.run_id, int(s["step"]), result)
                self.note("resent", step=int(s["step"]), what=s["kind"])
            if s["kind"] != "launch" or not result:
                continue
            payload, got = s["payload"], result.get("instances", [])
            self.counters["launches"] += len(got)
            if payload["market"] == "on-demand" and payload["role"] == "worker":
                self.counters["on_demand_launched"] += len(got)
            if result.get("error_code") is not None:
                self.counters["refusals"] += 1
            if int(s["step"]) not in noted:
                self._note_launch(payload, got, result.get("error_code"), int(s["step"]))
        self.note("resumed", step=self.step)
        self._resumed = True

    def _note_launch(
        self, payload: dict[str, Any], got: Sequence[dict[str, Any]], error_code: str | None, step: int
    ) -> None:
        """The launch (or refusal) event of a step whose outcome the journal lacks, at its launch time."""
        pool = pool_name(payload["type"], payload["zone"], payload["market"])
        when = min((float(i["launched_s"]) for i in got), default=self.cloud.now())
        if got:
            self._journal(
                Event(
                    when,
                    "launch",
                    {"pool": pool, "role": payload["role"], "asked": payload["count"], "got": len(got), "step": step},
                )
            )
        if error_code is not None:
            self._journal(
                Event(
                    when,
                    "refused",
                    {
                        "pool": pool,
                        "role": payload["role"],
                        "asked": payload["count"],
                        "code": error_code,
                        "step": step,
                    },
                )
            )

    def cancel(self) -> None:
        """End the run at the next poll (teardown)."""
        self._cancelled = True

    def poll(self) -> Outcome | None:
        """One round of the loop; the outcome once the run has ended."""
        instances, now, report = self.observe()
        first = not self._provisioned
        state = None
        if report is not None and report.finished_s is not None:
            state = "met" if report.finished_s <= self.deadline_s * (1 + 1e-12) else "missed"
        elif self._cancelled:
            state = "cancelled"
        elif now >= self.horizon_s - 1e-9:
            state = "missed"
        elif not first and now + self.view(instances, now, False).time_to_finish(self.want) > self.horizon_s:
            state = "gave-up"
        if state is not None:
            return self._end(state, instances, now, report)
        if first or sum(i.role == "ps" and i.ended_s is None for i in instances) < self.plan.ps:
            has_ps = self._ensure_ps(instances)
            instances = self.cloud.instances(self.run_id)
            if not has_ps:  # a worker without its PS does not train: launch none before one is up
                self._remember()
                return None
        self._provisioned = True
        expired = (self.full_until > now - self.settings.poll_s) & (self.full_until <= now)
        event = first or self._resumed or self._new_events_since_last_poll(now) or bool(expired.any())
        self._resumed = False
        rounds = max(ROUNDS, len(self.pools) + 1) if self.settings.rounds is None else self.settings.rounds
        for _ in range(rounds):
            view = self.view(instances, now, event, first=first)
            order = self.policy.decide(view)
            steps = self.step
            self._remember()
            refused = self._apply(order, view, instances, now)
            if self.step != steps:  # something was sent: look again
                instances = self.cloud.instances(self.run_id)
            if not refused:
                break
            event = True
        self._release_replaced(instances, now)
        self._last_poll = now
        self._remember()
        return None

    def _new_events_since_last_poll(self, now: float) -> bool:
        last = getattr(self, "_last_poll", -math.inf)
        return any(e.kind in ("notice", "reclaim") and e.time_s > last - 1e-9 for e in self.events)

    def _end(self, state: str, instances: Sequence[Instance], now: float, report: Report | None) -> Outcome:
        self._terminate([i for i in instances if i.ended_s is None], "teardown")
        instances = self.cloud.instances(self.run_id)
        finish = None if report is None else report.finished_s
        loss = self.model.loss(self._progress())
        self.outcome = Outcome(
            state=state,
            finish_s=finish,
            end_s=now,
            cost=self.cost(instances, now),
            loss=loss,
            revocations=self.counters["revocations"],
            launches=self.counters["launches"],
            refusals=self.counters["refusals"],
            on_demand_launched=self.counters["on_demand_launched"],
        )
        self.note("end", **self.outcome.to_dict())
        return self.outcome

    def run(self, max_polls: int | None = None) -> Outcome:
        """Poll until the run ends (``max_polls``: a bound for callers that must stop)."""
        limit = max_polls if max_polls is not None else int(self.horizon_s / self.settings.poll_s) + 10
        for _ in range(limit):
            outcome = self.poll()
            if outcome is not None:
                return outcome
            self.cloud.sleep(self.settings.poll_s)
        instances, now, report = self.observe()
        return self._end("missed", instances, now, report)


def policy_state(policy: Policy) -> dict[str, Any]:
    """A policy's own state as JSON: its plain attributes (flags, numbers, names, arrays such as
    ``fallback``'s on-demand commitment); tables and other objects are left out (rebuilt with
    the policy)."""
    out: dict[str, Any] = {}
    for key, value in vars(policy).items():
        if isinstance(value, np.ndarray):
            out[key] = {"array": value.tolist()}
        elif value is None or isinstance(value, (bool, int, float, str)):
            out[key] = value
    return out


def restore_policy_state(policy: Policy, state: dict[str, Any]) -> None:
    """Put back what :func:`policy_state` kept (keys the policy does not have are ignored)."""
    for key, value in state.items():
        if key in vars(policy):
            setattr(policy, key, np.asarray(value["array"]) if isinstance(value, dict) else value)
