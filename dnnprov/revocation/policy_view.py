"""What a launch policy sees and returns, shared by every policy and by the loop that asks them.

:class:`View` (the run at one poll, as a live controller observes it), :class:`Holdings` (what
to hold), the :class:`Policy` base, the placement helpers (:func:`cheapest_first`, also used
by the takeover's zone placement in :mod:`dnnprov.revocation.replan`; :func:`fill_spot`,
:func:`per_type`) and the policies' names. The policies themselves are in
:mod:`dnnprov.revocation.policies` (``replan``'s in :mod:`dnnprov.revocation.replan_policy`);
this module imports none of them, so the revocation room has no import cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dnnprov.problems.spot import ON_DEMAND_SUFFIX, InstanceType, SpotProblem
from dnnprov.result import SpotPlan

#: The policies of ``simulate`` and ``run`` (:func:`dnnprov.revocation.policies.make_policy`).
POLICY_NAMES = ("none", "replan", "fallback", "failover", "uniform-progress", "mpc")


@dataclass
class View:
    """The run at one tick, as a policy sees it.

    Pools are indexed ``p``; ``pool_type[p]`` is the type index, ``pool_group[p]`` the
    zone's position among its type's zones (0: the first, the home zone). ``want`` is the
    plan's workers per type (both markets), ``od_floor`` its on-demand workers.
    """

    t: float
    gap_s: float
    join_s: float
    deadline_s: float
    progress: float  # fraction of the job done, 0..1
    caps: np.ndarray
    refused_s: np.ndarray  # when each pool last refused (or partly granted) a launch; -inf: never
    pool_type: np.ndarray
    pool_group: np.ndarray
    pool_price: np.ndarray
    spot: np.ndarray  # held per pool (running + joining)
    od: np.ndarray  # held per type
    want: np.ndarray
    od_floor: np.ndarray
    ps: int
    event: bool  # first tick, a revocation or a capacity change
    time_to_finish: Callable[[np.ndarray], float]  # seconds for workers per type from now
    time_after: Callable[[Holdings, np.ndarray, float], float]
    """``(order, cluster, until_s)``: seconds for ``cluster`` to finish from ``until_s``, from the
    progress that the workers ``order`` keeps (the oldest held, each from when it joins) and
    those it launches now (after :meth:`delay`) are sure to add until then."""
    progress_by: Callable[[Holdings, float], float]
    """``(order, until_s)``: the fraction of the job done by ``until_s`` (0..1), from the progress
    now, the workers ``order`` keeps and launches (as :attr:`time_after`) and the notified
    workers until their reclaim (two minutes after the notice, as EC2 warns)."""
    first: bool = False
    """The run's first decision (nothing launched yet). A live controller's first poll comes a
    moment after the run's start (EC2's wall clock), so ``t == 0`` cannot say it."""

    def delay(self) -> float:
        """Seconds before instances launched now train (the plan's launch is the run's start)."""
        return 0.0 if self.first else self.join_s


@dataclass
class Holdings:
    """What a policy wants held: spot per pool, on-demand per type."""

    spot: np.ndarray
    od: np.ndarray


def cheapest_first(count: int, free: Sequence[int], prices: Sequence[float]) -> list[int]:
    """Up to ``count`` new instances over pools with ``free`` room, the cheapest pools first
    (ties: the order given); per pool, how many."""
    out = [0] * len(free)
    for p in sorted(range(len(free)), key=lambda p: prices[p]):
        take = max(0, min(int(free[p]), count))
        out[p] = take
        count -= take
    return out


def fill_spot(view: View, want_spot: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Spot per pool reaching ``want_spot`` per type: keep what is held, then add in allowed
    pools with free capacity, cheapest first; trim the dearest pools when above."""
    target = np.minimum(view.spot, view.caps)
    for i, want in enumerate(want_spot):
        mine = np.flatnonzero(view.pool_type == i)
        order = mine[np.argsort(view.pool_price[mine], kind="stable")]
        have = int(target[mine].sum())
        room = [int(view.caps[p] - target[p]) if allowed[p] else 0 for p in mine]
        target[mine] += np.asarray(
            cheapest_first(int(want) - have, room, view.pool_price[mine].tolist()), dtype=np.int64
        )
        have = int(target[mine].sum())
        for p in order[::-1]:
            if have <= want:
                break
            cut = min(int(target[p]), have - int(want))
            target[p] -= cut
            have -= cut
    return target


def most_workers(problem: SpotProblem, plan: SpotPlan, up_to_quota: bool) -> np.ndarray:
    """The most workers of each type (both markets) a run trains: the plan's, or with
    ``up_to_quota`` its quotas (spot, plus on-demand where the type has an on-demand price: a
    takeover may fall back to that market), never fewer than the plan's."""
    names = [t.name for t in problem.instance_types]
    plan_workers = np.array(
        [plan.counts.get(n, 0) + plan.counts.get(n + ON_DEMAND_SUFFIX, 0) for n in names], dtype=np.int64
    )
    if not up_to_quota:
        return plan_workers
    quota = np.array([t.quota + on_demand_room(t) for t in problem.instance_types], dtype=np.int64)
    return np.maximum(plan_workers, quota)


def on_demand_room(kind: InstanceType) -> int:
    """On-demand workers of ``kind`` a takeover may hold: its on-demand quota (the spot quota when
    unset), none without an on-demand price."""
    if kind.on_demand_price_per_h is None:
        return 0
    return kind.on_demand_quota if kind.on_demand_quota is not None else kind.quota


def per_type(view: View, spot: np.ndarray) -> np.ndarray:
    """Spot instances per type from per-pool counts."""
    return np.bincount(view.pool_type, weights=spot, minlength=len(view.want)).astype(np.int64)


class Policy:
    """Base: one instance per run (policies keep per-run state). ``up_to_quota``: the policy may
    hold more workers of a type than the plan has, up to its quotas (:func:`most_workers`)."""

    name = ""
    up_to_quota = False

    def decide(self, view: View) -> Holdings:
        raise NotImplementedError
