"""A proven lower bound on the cost of any policy that meets T_obj knowing a run's future.

For one run (its pools and windows), the slots are the ticks ``[t_n, t_n + gap)`` cut at
``T_obj``; in slot ``n`` pool ``p`` offers ``c_p(n)`` spot instances. A cluster ``w``
(workers per type, with PS count ``s``) has progress speed ``sigma(w, s)`` (the
simulator's model) and, in slot ``n``, the cheapest rate ``r_n(w, s)``: each type's
workers on the cheapest spot pools within their capacity, the rest on-demand, plus the
PS. With ``du = u* - u0`` the progress the plan needs, for every ``lambda >= 0``

    LB(lambda) = lambda du + sum_n len_n min(0, min_{w, s} (r_n(w, s) / 3600 - lambda sigma(w, s)))

(``w`` over the plan's sub-clusters) is no higher than the cost of any policy that runs the
plan (holds at most its workers of each type, as every policy of
:mod:`dnnprov.revocation.policies` does and the progress model requires: the run's start
``u0`` holds for those clusters only) with a PS count in ``constraints.ps_count``. For
every plan at once (``plan=None``), ``w`` ranges over the clusters of at most ``quota +
on_demand_quota`` workers of each type and ``u0`` is the latest start any has. When even
the fastest cluster in every slot cannot reach ``du`` by T_obj, no policy meets it and the
bound is infinite.

Proof. Take any replayed policy that finishes by T_obj. In slot ``n`` it holds a
piecewise-constant set of instances; let ``x_n(w, s)`` be the time it trains with
productive cluster ``(w, s)`` (workers that have joined). Its progress is
``sum x_n(w, s) sigma(w, s) >= du`` and ``sum_w x_n(w, s) <= len_n``. Its spot workers in
pool ``p`` never exceed ``c_p(n)`` (the excess is revoked at the tick), every held
instance is billed at a price >= 0 and the productive ones are among the held ones, so
while it trains with ``(w, s)`` it pays at least ``r_n(w, s)``. Hence

    cost >= sum x r / 3600 = sum x (r / 3600 - lambda sigma) + lambda sum x sigma
         >= sum_n len_n min(0, min (r / 3600 - lambda sigma)) + lambda du = LB(lambda),

using ``x >= 0``, ``sum_w x_n <= len_n`` and ``lambda >= 0``. Join delays, revocation
losses and the time after T_obj are dropped, which only lowers the bound. ``LB`` is the
Lagrangian dual of the LP relaxation over slots (per slot a convex combination of
clusters, total progress >= du); it is concave in ``lambda`` and maximized here by a
golden-section search (over a range doubled until LB falls); any ``lambda`` tried gives a
valid bound.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from dnnprov.revocation.pool_replay import Pool, PoolReplay
from dnnprov.errors import InvalidInputError
from dnnprov.result import SpotPlan
from dnnprov.revocation.simulate import domain_speed

MAX_CLUSTERS = 200_000
SEARCH_STEPS = 80
MAX_DOUBLINGS = 60


class Hindsight:
    """Lower bounds of one problem's runs (module docstring); clusters are enumerated once."""

    def __init__(self, replay: PoolReplay, plan: SpotPlan | None = None) -> None:
        self.replay = replay
        problem = replay.problem
        most = []
        for t in problem.instance_types:
            od = t.on_demand_quota if t.on_demand_quota is not None else t.quota
            most.append(t.quota + (od if t.on_demand_price_per_h is not None else 0))
        ps_counts = problem.constraints.ps_count[1] - problem.constraints.ps_count[0] + 1
        #: ``"quota"``: clusters within the quotas; ``"plan"``: within the plan's workers per type
        self.scope = "quota"
        if int(np.prod([m + 1 for m in most])) * ps_counts > MAX_CLUSTERS and plan is not None:
            most = [int(m) for m in replay.plan_workers(plan)[0]]
            self.scope = "plan"
        size = int(np.prod([m + 1 for m in most])) * ps_counts
        if size > MAX_CLUSTERS:
            raise InvalidInputError("--hindsight", f"the bound enumerates {size:,} clusters, more than {MAX_CLUSTERS:,}")
        workers = np.array(list(itertools.product(*[range(m + 1) for m in most])), dtype=np.int64)
        workers = workers[workers.sum(axis=1) > 0]
        rows, speeds, ps_list, starts = [], [], [], []
        model = replay.model
        for ps in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
            counts = np.zeros((len(workers), len(model.columns)), dtype=np.int64)
            counts[:, replay.spot_col] = workers
            sigma, start = domain_speed(model, counts, ps)
            keep = sigma > 0
            starts.append(start[keep])
            rows.append(workers[keep])
            speeds.append(sigma[keep])
            ps_list.append(np.full(int(keep.sum()), ps))
        #: The latest start on a loss curve of any cluster: a plan starting there needs the least.
        self.best_start = float(np.max(np.concatenate(starts)))
        self.workers = np.concatenate(rows)
        self.speed = np.concatenate(speeds)
        self.ps_rate = np.concatenate(ps_list) * problem.platform.ps_price_per_h
        self.types = len(problem.instance_types)
        self.od_price = np.array([t.on_demand_price_per_h if t.on_demand_price_per_h is not None else math.inf
                                  for t in problem.instance_types])

    def slot_rates(self, pools: list[Pool]) -> tuple[np.ndarray, np.ndarray]:
        """Per slot before T_obj: its length and the cheapest rate of every cluster ($/h)."""
        gap, deadline = self.replay.gap_s, self.replay.problem.slo.time_s
        n_slots = math.ceil(deadline / gap)
        lengths = np.minimum(gap, deadline - gap * np.arange(n_slots))
        rates = np.empty((n_slots, len(self.workers)))
        for n in range(n_slots):
            rate = self.ps_rate.copy()
            for i in range(self.types):
                offers = sorted((p.price, p.at(n)) for p in pools if p.type_index == i)
                w = self.workers[:, i]
                left = w.copy()
                for price, cap in offers:
                    if price >= self.od_price[i]:
                        break
                    take = np.minimum(left, cap)
                    rate += take * price
                    left -= take
                with np.errstate(invalid="ignore"):
                    rate += np.where(left > 0, left * self.od_price[i], 0.0)
            rates[n] = rate
        return lengths, rates

    def within(self, plan: SpotPlan | None) -> np.ndarray:
        """Which enumerated clusters a run of ``plan`` may hold: its sub-clusters (every one for
        ``None``, a bound for every plan)."""
        if plan is None:
            return np.ones(len(self.workers), dtype=bool)
        return (self.workers <= self.replay.plan_workers(plan)[0][None, :]).all(axis=1)

    def bound(self, plan: SpotPlan | None, pools: list[Pool]) -> float:
        """The best ``LB(lambda)`` found for this run (module docstring); 0 when nothing is needed.

        ``plan`` ``None``: a bound for every plan, not just one (``du`` from the latest start
        any cluster has on its loss curve, :attr:`best_start`).
        """
        if plan is None and self.scope == "plan":
            raise InvalidInputError("--hindsight", "a bound for every plan needs the quota box, which is too large "
                                                   f"to enumerate (more than {MAX_CLUSTERS:,} clusters)")
        start = self.best_start if plan is None else self.replay.start_progress(plan)
        du = self.replay.target - start
        if du <= 0:
            return 0.0
        within = self.within(plan)
        lengths, rates = self.slot_rates(pools)
        per_s = rates[:, within] / 3600
        speed = self.speed[within]
        usable = np.isfinite(per_s)
        if float(lengths @ np.max(np.where(usable, speed[None, :], 0.0), axis=1)) < du:
            return math.inf                              # no policy can meet T_obj on this run

        def lb(lam: float) -> float:
            inner = np.min(per_s - lam * speed[None, :], axis=1)
            return float(lam * du + lengths @ np.minimum(0.0, inner))

        # LB is concave: once LB(2h) <= LB(h), its maximum lies below 2h. The dearest $ per unit
        # of progress is a first guess; the marginal price of going faster can be higher.
        high = float(np.max(np.where(usable, per_s, 0) / speed[None, :])) + 1e-12
        for _ in range(MAX_DOUBLINGS):
            if lb(2 * high) <= lb(high):
                break
            high *= 2
        high *= 2
        low, best = 0.0, 0.0
        a, b = low, high
        phi = (math.sqrt(5) - 1) / 2
        c, d = b - phi * (b - a), a + phi * (b - a)
        fc, fd = lb(c), lb(d)
        for _ in range(SEARCH_STEPS):
            best = max(best, fc, fd)
            if fc >= fd:
                b, d, fd = d, c, fc
                c = b - phi * (b - a)
                fc = lb(c)
            else:
                a, c, fc = c, d, fd
                d = a + phi * (b - a)
                fd = lb(d)
        return max(best, fc, fd, 0.0)
