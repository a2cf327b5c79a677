"""Launch policies over spot pools: the objects the control loop asks, for ``dnnprov run``
(EC2) and ``dnnprov simulate`` (the trace cloud) alike.

A policy is asked at every poll of the controller (:mod:`dnnprov.control.loop`; it decides
only at the polls its rule says): given a :class:`View` of the run now (time, progress, the
holdings of each pool, the capacity the controller takes each pool to have), it returns how
many spot instances to hold in each pool and how many on-demand instances of each type
(:class:`Holdings`). Plans name types; placing them on pools is the policy's. A policy sees
only what a live controller observes: capacity is an estimate (the instances held plus room,
unless the pool refused a launch lately), never the trace.

- ``none``: the plan's instances at the start where capacity is; nothing after.
- ``replan``: dnnprov's takeover solved at every event (:mod:`dnnprov.revocation.replan_policy`).
- ``fallback``: spotDNN-style event rule on the type's first zone only: at a revocation or
  a capacity change, missing spot workers are relaunched there where capacity allows, and
  if the cluster held then would not end by ``T_obj - join_s`` the still-missing workers
  go on-demand and stay to the end. It never returns to spot and decides only at events
  (so it is not Can't Be Late's rule).
- ``failover``: the same rule, relaunching in any zone with capacity (cheapest first), as
  SkyPilot's managed spot jobs fail over across zones.
- ``uniform-progress``: Can't Be Late's rule (Wu et al., NSDI 24) at every tick: spot
  wherever available; on-demand for the missing workers only while progress is behind the
  uniform line ``t / (T_obj - join_s - gap)``, with hysteresis (on-demand is kept until
  progress is ahead by :data:`HYSTERESIS_TICKS` ticks of the line); and a safety net:
  when waiting one more tick could leave too little time for an all-on-demand cluster
  to finish, it goes all on-demand and stays.
- ``mpc``: model-predictive (:class:`ModelPredictive`): the exact optimum, under the
  fitted availability model, of what to hold in each state: for a one-type plan the spot
  and on-demand instances given those held now, joins priced (:class:`RunningTable`);
  otherwise the cluster, spot as far as the pooled capacity goes, on-demand for the rest
  (:class:`TakeoverTable`); with a safety net that counts the progress the kept running
  workers are sure to make before the next tick. It is refusal-aware: a pool that refused (or
  partly granted) a launch is taken as full until the model's next tick
  (:data:`REFUSAL_TICKS`, :meth:`ModelPredictive.refusal_aware`), so it is asked at most
  once a tick, not at every end of the loop's back-off.

``replan`` places a takeover's new spot instances by the same rule (:func:`cheapest_first`,
through :func:`dnnprov.revocation.replan.zone_placement`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from dnnprov.errors import InvalidInputError
from dnnprov.revocation.availability import AvailabilityModel
from dnnprov.revocation.policy_view import (
    POLICY_NAMES,
    Holdings,
    Policy,
    View,
    fill_spot,
    per_type,
)

HYSTERESIS_TICKS = 2
PROGRESS_BUCKETS = 2000
#: Cost-to-go of a state that cannot finish by the deadline (finite, so that expectations
#: over zero-chance cells stay numbers; above any real cost).
INFEASIBLE = 1e15
#: Most states of one takeover table (ticks x buckets x capacities): bounds its memory and work.
MAX_TABLE_STATES = 20_000_000
#: A :class:`RunningTable` action: commit to the fastest cluster on-demand (the safety net).
COMMIT = -1
#: Most state-actions of one :class:`RunningTable` (a few CPU seconds); a one-type plan beyond
#: it gets a :class:`TakeoverTable`.
MAX_RUNNING_WORK = 150_000_000
#: Most clusters (and joint capacity states) of one takeover table: its transition is their square.
MAX_CLUSTERS = 2_000
#: Model ticks an ``mpc`` run takes a pool that refused a launch as full: the tick of the
#: refusal (:meth:`ModelPredictive.refusal_aware`).
REFUSAL_TICKS = 1


def safety_net(view: View, cluster: np.ndarray | None = None) -> bool:
    """Whether waiting one more tick could leave too little time for ``cluster`` (default: the
    plan's workers) all on-demand to finish (no progress assumed meanwhile)."""
    need = view.join_s + view.time_to_finish(view.want if cluster is None else cluster)
    return view.t + view.gap_s + need > view.deadline_s


class NoRelaunch(Policy):
    """``none``: the plan where capacity is at the start, then nothing."""

    name = "none"

    def decide(self, view: View) -> Holdings:
        if not view.first:
            return Holdings(np.minimum(view.spot, view.caps), view.od.copy())
        spot = fill_spot(view, view.want - view.od_floor, view.pool_group == 0)
        return Holdings(spot, view.od_floor.copy())


@dataclass
class Fallback(Policy):
    """``fallback`` (home zone only) and ``failover`` (every zone): module docstring."""

    every_zone: bool = False
    od: np.ndarray | None = None

    @property
    def name(self) -> str:  # type: ignore[override]
        return "failover" if self.every_zone else "fallback"

    def decide(self, view: View) -> Holdings:
        if self.od is None:
            self.od = view.od_floor.copy()
        if not view.event:
            return Holdings(np.minimum(view.spot, view.caps), self.od.copy())
        allowed = np.ones(len(view.caps), dtype=bool) if self.every_zone else view.pool_group == 0
        spot = fill_spot(view, view.want - self.od, allowed)
        missing = view.want - self.od - per_type(view, spot)
        if missing.any():
            cluster = per_type(view, spot) + self.od
            finish = view.time_to_finish(cluster)
            if view.t + view.delay() + finish > view.deadline_s:
                self.od = self.od + missing
        return Holdings(spot, self.od.copy())


@dataclass
class UniformProgress(Policy):
    """``uniform-progress``: Can't Be Late's rule (module docstring)."""

    name = "uniform-progress"
    on_demand: bool = False
    committed: bool = False

    def decide(self, view: View) -> Holdings:
        if self.committed or safety_net(view):
            self.committed = True
            return Holdings(
                np.zeros_like(view.spot) if view.od.sum() >= view.want.sum() else np.minimum(view.spot, view.caps),
                view.want.copy(),
            )
        spot = fill_spot(view, view.want, np.ones(len(view.caps), dtype=bool))
        horizon = view.deadline_s - view.join_s - view.gap_s
        line = view.t / horizon
        margin = HYSTERESIS_TICKS * view.gap_s / horizon if self.on_demand else 0.0
        self.on_demand = view.progress < line + margin
        od = view.want - per_type(view, spot) if self.on_demand else np.zeros_like(view.want)
        return Holdings(spot, np.maximum(od, 0))


@dataclass
class ModelPredictive(Policy):
    """``mpc``: reads what to hold from its table (:class:`RunningTable` or
    :class:`TakeoverTable`), planned for decisions at the model's ticks; safety net.

    The loop asks at every poll. The table's state is the one it was planned for: the tick
    the poll falls in and the progress at that tick's first poll (``tick``, ``tick_progress``;
    progress made since then is the tick's own), with the capacity and holdings now, so polls
    within a tick repeat the tick's decision unless capacity or holdings changed.

    The safety net knows when capacity can drop: only at a tick of the model's grid from the
    run's start, with a notice. Were every spot instance lost at the next tick, the fastest
    cluster launched on-demand then (one join) must still finish by ``T_obj``, from the progress
    the workers the order keeps or launches are sure to make until that tick; otherwise it
    commits to that cluster on-demand and stays. It is the table's own condition (so it never
    overrules an action the table took for it) and it leaves out the progress the lost
    instances make during their notice (which covers a detector poll's delay on EC2).
    """

    table: TakeoverTable | RunningTable
    name = "mpc"
    committed: bool = False
    tick: int = -1
    tick_progress: float = 0.0
    refusal_ticks: int = REFUSAL_TICKS

    def decide(self, view: View) -> Holdings:
        view = self.refusal_aware(view)
        kinds = list(self.table.types)
        fastest = np.zeros_like(view.want)
        fastest[kinds] = self.table.fastest
        commit = Holdings(
            np.zeros_like(view.spot) if view.od.sum() >= fastest.sum() else np.minimum(view.spot, view.caps), fastest
        )
        if self.committed:
            return commit
        tick = int(view.t // self.table.gap_s)
        if view.first or tick != self.tick:
            self.tick, self.tick_progress = tick, view.progress
        available = [int(view.caps[view.pool_type == i].sum()) for i in kinds]
        want_spot = np.zeros_like(view.want)
        if isinstance(self.table, RunningTable):
            held = int(view.spot[view.pool_type == kinds[0]].sum()), int(view.od[kinds[0]])
            holding = self.table.holding_at(view.t, self.tick_progress, available[0], *held)
            if holding is None:
                self.committed = True
                return commit
            cluster, want_spot[kinds] = np.array([sum(holding)]), holding[0]
        else:
            cluster = self.table.cluster_at(view.t, self.tick_progress, available)
            want_spot[kinds] = np.minimum(cluster, available)
        spot = fill_spot(view, want_spot, np.ones(len(view.caps), dtype=bool))
        od = np.zeros_like(view.want)
        od[kinds] = cluster - per_type(view, spot)[kinds]
        order = Holdings(spot, od)
        loss_s = min((tick + 1) * self.table.gap_s, view.deadline_s)  # when capacity can next drop
        after = view.time_after(order, fastest, loss_s)
        if after > 0 and loss_s + view.join_s + after > view.deadline_s:
            self.committed = True
            return commit
        return order

    def refusal_aware(self, view: View) -> View:
        """``view`` with no room in the pools that refused a launch lately: in the model tick of
        the refusal and the ``refusal_ticks - 1`` after it (capacity moves only at the model's
        ticks, so a pool that refused stays full until one of them at least)."""
        gap = self.table.gap_s
        until = (np.floor(view.refused_s / gap) + self.refusal_ticks) * gap
        lately = until > view.t
        if not lately.any():
            return view
        return replace(view, caps=np.where(lately, np.minimum(view.caps, view.spot), view.caps))


@dataclass
class RunningTable:
    """The exact takeover policy of a one-type plan that tracks what the run holds (prices joins).

    The state at tick ``n`` is the progress bucket, the pooled spot capacity ``A = min(available,
    W)`` and the instances held after the tick's revocations, ``s`` spot (``s <= A``) and ``o``
    on-demand (``s + o <= W``). An action holds ``(s', o')`` (``s' <= A``, ``s' + o' <= W``) for
    the tick: the ``min(s, s') + min(o, o')`` kept train at once, the launched ones after
    ``join_s`` (at time 0 at once), every held instance is billed for the tick (or until the
    target is reached within it), and at the next tick capacity ``A'`` revokes the spot above
    it, ``(min(s', A'), o')``. Ticks run up to ``T_obj`` (the last one partial): joins are priced,
    so no join is reserved. Otherwise as :class:`TakeoverTable` (buckets rounded down, the fitted
    chain, :data:`INFEASIBLE` for states that cannot finish, safety net in :class:`ModelPredictive`).
    """

    types: tuple[int, ...]  # the plan's one type index
    most: tuple[int, ...]  # (W,)
    gap_s: float
    deadline_s: float
    join_s: float
    progress_per_s: np.ndarray  # per cluster size 0..W, fraction of the job per second
    spot_price: np.ndarray  # $/h, one entry
    od_price: np.ndarray  # $/h, one entry
    fixed_price: float
    models: tuple[AvailabilityModel, ...]
    holdings: np.ndarray = field(init=False)  # [pair] -> (spot, on-demand)
    actions: np.ndarray = field(init=False)  # [tick, bucket, capacity, pair] -> pair, or COMMIT
    expected_cost: float = field(init=False)

    @staticmethod
    def size(most: int, deadline_s: float, gap_s: float) -> tuple[int, int]:
        """States (ticks x buckets x capacities x holdings) and work (states x actions) of the
        table of a plan of ``most`` workers."""
        ticks = math.ceil(deadline_s / gap_s - 1e-9)
        holdings = (most + 1) * (most + 2) // 2
        states = ticks * (PROGRESS_BUCKETS + 1) * (most + 1) * holdings
        return states, states * holdings

    @classmethod
    def fits(cls, most: int, deadline_s: float, gap_s: float) -> bool:
        """Whether the table stays within :data:`MAX_TABLE_STATES` and :data:`MAX_RUNNING_WORK`."""
        states, work = cls.size(most, deadline_s, gap_s)
        return states <= MAX_TABLE_STATES and work <= MAX_RUNNING_WORK

    def __post_init__(self) -> None:
        b, most = PROGRESS_BUCKETS, self.most[0]
        self.holdings = np.array([(s, o) for s in range(most + 1) for o in range(most + 1 - s)], dtype=np.int64)
        pairs = len(self.holdings)
        whole, rest = divmod(self.deadline_s, self.gap_s)
        lengths = [self.gap_s] * int(whole) + ([rest] if rest > 1e-9 * self.gap_s else [])
        if not self.fits(most, self.deadline_s, self.gap_s):
            raise InvalidInputError(
                "--policy",
                f"mpc's table of {len(lengths):,} ticks x {b + 1} progress buckets x "
                f"{(most + 1) * pairs:,} capacities and holdings is above the limit "
                f"of {MAX_TABLE_STATES:,} states or {MAX_RUNNING_WORK:,} state-actions",
            )
        caps = np.arange(most + 1)
        spot, od = self.holdings[:, 0], self.holdings[:, 1]
        index = {(int(x), int(y)): i for i, (x, y) in enumerate(self.holdings)}
        after = np.array([[index[(min(int(x), int(a)), int(y))] for a in caps] for x, y in self.holdings])  # [pair, A']
        allowed = spot[None, :] <= caps[:, None]  # [A, pair]
        trans = capped_transition(self.models[0], most)
        rate = spot * float(self.spot_price[0]) + od * float(self.od_price[0]) + self.fixed_price
        sigma, bucket = self.progress_per_s, np.arange(b + 1)
        left = (b - bucket)[:, None] / b  # fraction of the job left
        fastest = float(sigma.max())
        commit_rate = int(np.argmax(sigma)) * float(self.od_price[0]) + self.fixed_price
        value = np.full((b + 1, most + 1, pairs), INFEASIBLE)  # at T_obj: done, or failed
        value[b] = 0.0
        self.actions = np.zeros((len(lengths), b + 1, most + 1, pairs), dtype=np.int16)
        for n in range(len(lengths) - 1, -1, -1):
            length = lengths[n]
            delay = 0.0 if n == 0 else min(self.join_s, length)
            expected = np.stack([value[:, caps, after[a]] @ trans.T for a in range(pairs)], axis=1)  # [b', a, A]
            # the safety net's condition: from the next tick, the fastest cluster on-demand
            # (one join) still finishes by T_obj; an action that breaks it is overruled by the
            # net, which commits now: that cluster on-demand to the end (its cost, estimated
            # without the progress of the instances kept while it joins)
            end = min(self.deadline_s, (n + 1) * self.gap_s)
            rescue = (bucket == b) | (end + self.join_s + (1 - bucket / b) / fastest <= self.deadline_s * (1 + 1e-12))
            commit_s = delay + (1 - bucket / b) / fastest
            commit = np.where(
                n * self.gap_s + commit_s <= self.deadline_s * (1 + 1e-12), commit_rate * commit_s / 3600, INFEASIBLE
            )
            new = np.full_like(value, INFEASIBLE)
            for q in range(pairs):
                kept = sigma[np.minimum(spot[q], spot) + np.minimum(od[q], od)]  # per action
                full = sigma[spot + od]
                steps = np.floor((kept * delay + full * (length - delay)) * b).astype(np.int64)
                with np.errstate(divide="ignore", invalid="ignore"):
                    ends = np.where(kept * delay >= left, left / kept, delay + (left - kept * delay) / full)
                billed = np.minimum(length, np.nan_to_num(ends, nan=length, posinf=length))  # [b, a]
                reached = np.minimum(bucket[:, None] + steps, b)  # [b, a]
                cand = (billed * rate / 3600)[:, :, None] + expected[reached, np.arange(pairs)[None, :]]  # [b, a, A]
                cand = np.where(rescue[reached][:, :, None], cand, INFEASIBLE)
                cand = np.where(allowed.T[None, :, :], cand, np.inf)
                best = np.argmin(cand, axis=1)
                chosen = np.take_along_axis(cand, best[:, None, :], axis=1)[:, 0, :]
                net = commit[:, None] < chosen
                new[:, :, q] = np.where(net, commit[:, None], chosen)
                self.actions[n, :, :, q] = np.where(net, COMMIT, best)
            new[b] = 0.0
            value = np.where(allowed[None, :, :], np.minimum(new, INFEASIBLE), INFEASIBLE)
        first = value[0, caps, index[(0, 0)]]
        start = capped_start(self.models[0], most)
        self.expected_cost = float(start @ first) if (first[start > 0] < INFEASIBLE / 2).all() else math.inf

    @property
    def fastest(self) -> np.ndarray:
        """The cluster of most progress per second (the safety net's all-on-demand cluster)."""
        return np.array([int(np.argmax(self.progress_per_s))])

    def holding_at(self, t: float, progress: float, available: int, spot: int, od: int) -> tuple[int, int] | None:
        """The optimal (spot, on-demand) to hold at time ``t``, progress fraction, pooled capacity
        and holdings now; ``None``: commit to the fastest cluster on-demand (the safety net)."""
        n, most = int(t // self.gap_s), self.most[0]
        if n >= len(self.actions):
            return None
        cap = min(int(available), most)
        spot = min(int(spot), cap)
        od = min(int(od), most - spot)
        b = min(PROGRESS_BUCKETS, max(0, math.floor(progress * PROGRESS_BUCKETS)))
        pair = int(np.flatnonzero((self.holdings[:, 0] == spot) & (self.holdings[:, 1] == od))[0])
        action = int(self.actions[n, b, cap, pair])
        if action == COMMIT:
            return None
        spot_n, od_n = self.holdings[action]
        return int(spot_n), int(od_n)


@dataclass
class TakeoverTable:
    """The exact takeover policy of a plan's instance types under availability models.

    A cluster is a vector of workers per type of the plan, ``w_m = 0..W_m`` (``W_m``: the
    plan's workers of type m). Backward induction over ticks ``n`` (up to ``T_obj - join_s``:
    the last switch to on-demand costs one join), progress in :data:`PROGRESS_BUCKETS` buckets
    (rounded down: progress is never overstated) and the pooled spot capacity of each type
    ``A_m = min(available_m, W_m)``: in each state the cluster minimizing the tick's cost plus
    the expected cost-to-go, each type on spot as far as its capacity goes (``min(A_m, w_m)``,
    the cheaper market) and on-demand for the rest, billed for the tick (or until the
    cluster reaches the target within it). Types change capacity independently,
    each by its own fitted chain (one type: exactly its model). A state that cannot finish
    by the deadline costs :data:`INFEASIBLE`; every capacity change has a positive chance in
    the fitted model, so the table never bets on capacity staying. The overheads of
    relaunches are left to the safety net. ``expected_cost`` is the table's value at the
    start, averaged over the models' chance of k at launch.
    """

    types: tuple[int, ...]  # the plan's type indices
    most: tuple[int, ...]  # W_m per type
    gap_s: float
    deadline_s: float
    join_s: float
    progress_per_s: np.ndarray  # per cluster (index into :attr:`clusters`), fraction of the job per second
    spot_price: np.ndarray  # $/h per type
    od_price: np.ndarray  # $/h per type
    fixed_price: float  # $/h paid whatever runs (the PS)
    models: tuple[AvailabilityModel, ...]
    clusters: np.ndarray = field(init=False)
    actions: np.ndarray = field(init=False)
    expected_cost: float = field(init=False)

    def __post_init__(self) -> None:
        b = PROGRESS_BUCKETS
        self.clusters = np.array(list(itertools.product(*[range(w + 1) for w in self.most])), dtype=np.int64)
        size = len(self.clusters)  # capacity states = clusters (same ranges)
        ticks = max(0, math.floor((self.deadline_s - self.join_s) / self.gap_s))
        lengths = [self.gap_s] * ticks
        if len(lengths) * (b + 1) * size > MAX_TABLE_STATES or size > MAX_CLUSTERS:
            raise InvalidInputError(
                "--policy",
                f"mpc's table of {len(lengths):,} ticks x {b + 1} progress buckets x "
                f"{size:,} capacities is above the limit of {MAX_TABLE_STATES:,} "
                f"states or {MAX_CLUSTERS:,} capacities (a shorter slo.time_s, a "
                "coarser trace or a smaller plan)",
            )
        trans = np.ones((1, 1))
        start = np.ones(1)
        for model, w in zip(self.models, self.most):
            trans = np.kron(trans, capped_transition(model, w))
            start = np.kron(start, capped_start(model, w))
        value = np.full((b + 1, size), INFEASIBLE)  # at the deadline: done, or failed
        value[b, :] = 0.0
        self.actions = np.full((len(lengths), b + 1, size), size - 1, dtype=np.int16)  # no way: the whole plan
        bucket = np.arange(b + 1)
        spot = np.minimum(self.clusters[None, :, :], self.clusters[:, None, :])  # [capacity, cluster, type]
        per_h = (spot @ self.spot_price + (self.clusters[None, :, :] - spot) @ self.od_price) + self.fixed_price
        for n in range(len(lengths) - 1, -1, -1):
            steps = np.floor(self.progress_per_s * lengths[n] * b).astype(np.int64)
            # a cluster that reaches the target within the tick is billed until it does
            with np.errstate(divide="ignore", invalid="ignore"):
                billed = np.minimum(lengths[n], (b - bucket)[:, None] / (self.progress_per_s[None, :] * b))
            expected = value @ trans.T  # (b+1) x A: E[V_{n+1}(b', A') | A]
            new = np.full_like(value, INFEASIBLE)
            for k in range(size):
                cand = billed[:, k, None] * per_h[None, :, k] / 3600 + expected[np.minimum(bucket + steps[k], b), :]
                better = cand < new
                new[better] = cand[better]
                self.actions[n][better] = k
            new[b, :] = 0.0
            value = new
        first = value[0, :]
        self.expected_cost = float(start @ first) if (first[start > 0] < INFEASIBLE / 2).all() else math.inf

    @property
    def fastest(self) -> np.ndarray:
        """The cluster of most progress per second (the safety net's all-on-demand cluster)."""
        return self.clusters[int(np.argmax(self.progress_per_s))]

    def cluster_at(self, t: float, progress: float, available: Sequence[int]) -> np.ndarray:
        """The optimal cluster (workers per plan type) at time ``t``, progress fraction and
        pooled capacity per type."""
        n = int(t // self.gap_s)
        if n >= len(self.actions):
            return self.clusters[-1]
        b = min(PROGRESS_BUCKETS, max(0, math.floor(progress * PROGRESS_BUCKETS)))
        state = 0
        for a, w in zip(available, self.most):
            state = state * (w + 1) + min(int(a), w)
        return self.clusters[int(self.actions[n, b, state])]


def capped_transition(model: AvailabilityModel, cap: int) -> np.ndarray:
    """The model's chain on ``min(total, cap)`` (states above ``cap`` merged, weighted by ``start``)."""
    if model.cap < cap:
        raise InvalidInputError("--model", f"fitted for up to {model.cap} instances; the plan needs {cap}")
    m, start = model.matrix, np.asarray(model.start)
    merge = np.minimum(np.arange(model.cap + 1), cap)
    out = np.zeros((cap + 1, cap + 1))
    weight = np.zeros(cap + 1)
    for i in range(model.cap + 1):
        w = start[i] + 1e-12
        out[merge[i]] += w * np.bincount(merge, weights=m[i], minlength=cap + 1)
        weight[merge[i]] += w
    return out / weight[:, None]


def capped_start(model: AvailabilityModel, cap: int) -> np.ndarray:
    """The model's chance of k at launch, for ``min(total, cap)``."""
    return np.bincount(np.minimum(np.arange(model.cap + 1), cap), weights=np.asarray(model.start), minlength=cap + 1)


def holds_up_to_quota(name: str) -> bool:
    """Whether the policy ``name`` may hold more workers of a type than the plan, up to its quotas
    (:attr:`Policy.up_to_quota`; ``replan`` only), known before the policy is made."""
    if name == "replan":
        from dnnprov.revocation.replan_policy import Replan

        return Replan.up_to_quota
    return Policy.up_to_quota


def make_policy(
    name: str,
    table: TakeoverTable | RunningTable | None = None,
    *,
    problem: object = None,
    plan: object = None,
    replan_method: str = "exact",
) -> Policy:
    """A fresh policy (per run) by name; ``replan`` needs the ``problem`` and ``plan`` (its
    takeovers are solved on them), ``mpc`` its ``table``."""
    if name == "none":
        return NoRelaunch()
    if name == "replan":
        from dnnprov.problems.spot import SpotProblem
        from dnnprov.result import SpotPlan
        from dnnprov.revocation.replan_policy import Replan

        if not isinstance(problem, SpotProblem) or not isinstance(plan, SpotPlan):
            raise InvalidInputError("--policy", "replan solves takeovers of the run's problem and plan: give both")
        return Replan(problem, plan, replan_method)
    if name in ("fallback", "failover"):
        return Fallback(every_zone=name == "failover")
    if name == "uniform-progress":
        return UniformProgress()
    if name == "mpc":
        if table is None:
            raise InvalidInputError("--policy", "mpc needs an availability model (--model, or traces to fit one)")
        return ModelPredictive(table)
    raise InvalidInputError("--policy", f"must be one of {', '.join(POLICY_NAMES)}; got {name!r}")
