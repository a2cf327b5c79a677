"""A proven lower bound on the cost of any policy that meets T_obj on one replayed trace window.

The world is the control loop's on the trace cloud (:mod:`dnnprov.control.clouds.capacity`,
:mod:`dnnprov.control.trainer`): pool ``p`` offers ``c_p(k)`` spot instances in tick ``k``
(``[k gap, (k + 1) gap)``); a spot launch gets at most the free capacity (``c_p`` minus the
pool's instances neither notified nor gone) and is refused beyond it; at a tick boundary the
instances above the new capacity are notified and reclaimed ``notice_s`` (120 s) later,
training and billed until then; on-demand launches always succeed; a launched worker trains
``join_s`` after its launch (at once at time 0) until it is gone, with the PS; the stand-in
trainer counts at most the plan's workers of each type (the progress model's runs hold within
the plan; under a policy that holds up to its quotas, ``replan``, at most those, and the
clusters below range up to them); the run meets T_obj when progress reaches ``u*`` (within the
trainer's tolerance) by ``T_obj``; every instance is billed from launch until gone. Controllers poll every 15 s, but
the bound does not use that: it holds for any controller, polling or not, that knows the
window's whole future.

**Capacity a pool can hold.** Write ``live_p(t)`` for the pool's instances neither notified
nor gone. Launches never take ``live_p`` above ``c_p``, and at every boundary ``b`` the excess
is notified, so ``live_p(t) <= c_p(t)`` at all times. The instances notified at ``b`` are at
most ``live_p(b-) - c_p(b) <= c_p(b-) - c_p(b)`` (``b-``: the tick before ``b``) and are held
during ``[b, b + notice_s)``. Hence at any ``t`` the pool holds at most

    H_p(t) = c_p(t) + sum over boundaries b in (t - notice_s, t] of max(0, c_p(b-) - c_p(b))

spot instances. ``H_p`` is constant on the slots cut at every boundary and every boundary plus
``notice_s``, up to ``T' = T_obj (1 + 1e-12)`` (the loop's tolerance on "by T_obj").

**The bound.** A cluster ``w`` (workers per type, within the plan's, with ``s`` PS,
``1 <= s <= ps``) trains at speed ``sigma(w, s)`` (the progress model's; 0 outside the loss
model's domain). In slot ``n`` (length ``len_n``) its cheapest rate ``r_n(w, s)`` puts each
type's workers on the cheapest pools within ``H_p`` (only pools cheaper than on-demand), the
rest on-demand, plus ``s`` PS. With ``du = u* (1 - 1e-12) - u0`` (``u0``: the run's start,
:meth:`ClusterSpeeds.run_start`), for every ``lambda >= 0``

    LB(lambda) = lambda du + sum_n len_n min(0, min_{w, s} (r_n(w, s) / 3600 - lambda sigma(w, s)))

is no higher than the cost of any policy that meets T_obj on the window.

Proof. Take a run that reaches ``u*`` by ``T'``. Let ``x_n(w, s)`` be the time of slot ``n``
during which the workers training are ``w`` per type with ``s`` live PS (``w`` is within the
plan, or the quotas for such a policy: the trainer counts no more). Progress is
``sum x sigma >= du`` (nothing trains after the target, nor after ``T'``), and ``sum_{w, s} x_n(w, s) <= len_n``. While ``(w, s)`` trains, the
run holds at least ``w_i`` workers of each type ``i`` and ``s`` PS, of which at most ``H_p`` in
pool ``p`` (above), every held instance billed at its price >= 0: it pays at least
``r_n(w, s)``. So ``cost >= sum x r / 3600 = sum x (r / 3600 - lambda sigma) + lambda sum x
sigma >= sum_n len_n min(0, min (r / 3600 - lambda sigma)) + lambda du = LB(lambda)``, using
``x >= 0``, ``sum_w x_n <= len_n`` and ``lambda >= 0``. Joins, refusals, polls, billing after
the target and the run's end at a poll only add to the policy's cost. ``LB`` is the
Lagrangian dual of the LP relaxation over slots; it is concave in ``lambda`` and maximized by
a golden-section search (any ``lambda`` tried is a valid bound), and rounded down by
:data:`ROUNDING` against floating-point error. When even the fastest
cluster in every slot cannot make ``du`` by ``T'``, no policy meets T_obj on the window and
the bound is infinite.

What it does not bound: policies that run another plan (other workers, PS count) or a world
with other rules (quotas enforced by the cloud would only raise it).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dnnprov.errors import InvalidInputError
from dnnprov.models.spot import SpotModel
from dnnprov.models.training_progress import progress_target
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import SpotPlan
from dnnprov.revocation.policy_view import most_workers
from dnnprov.revocation.replay.simulate import ClusterSpeeds, domain_speed

MAX_CLUSTERS = 200_000
SEARCH_STEPS = 80
MAX_DOUBLINGS = 60
#: EC2's two-minute warning (the trace cloud's :data:`dnnprov.control.clouds.capacity.NOTICE_S`).
NOTICE_S = 120.0
#: The loop's tolerances: progress within this share of the target counts as reached, a
#: finish within it of T_obj as met.
TOLERANCE = 1e-12
#: The bound is rounded down by this share, against the floating-point error of its sums.
ROUNDING = 1e-9


@dataclass(frozen=True)
class BoundPool:
    """One spot pool of a window: its type, price ($/h) and capacity per tick from the window's start."""

    type_name: str
    price_per_h: float
    capacity: np.ndarray


class Hindsight:
    """Lower bounds of one plan's runs (module docstring); clusters are enumerated once, up to
    the plan's workers of each type, or its quotas with ``up_to_quota`` (a policy that holds up
    to them, :func:`~dnnprov.revocation.policy_view.most_workers`)."""

    def __init__(
        self, problem: SpotProblem, plan: SpotPlan, notice_s: float = NOTICE_S, up_to_quota: bool = False
    ) -> None:
        self.problem, self.plan, self.notice_s = problem, plan, notice_s
        self.types = [t.name for t in problem.instance_types]
        most = most_workers(problem, plan, up_to_quota)
        size = int(np.prod(most + 1)) * plan.ps
        if size > MAX_CLUSTERS:
            raise InvalidInputError(
                "--hindsight", f"the bound enumerates {size:,} clusters, more than {MAX_CLUSTERS:,}"
            )
        model = SpotModel(problem)
        spot_col = [model.columns.labels.index(n) for n in self.types]
        workers = np.array(list(itertools.product(*[range(int(w) + 1) for w in most])), dtype=np.int64)
        workers = workers[workers.sum(axis=1) > 0]
        rows, speeds, ps_counts = [], [], []
        for ps in range(1, plan.ps + 1):
            counts = np.zeros((len(workers), len(model.columns)), dtype=np.int64)
            counts[:, spot_col] = workers
            sigma, _ = domain_speed(model, counts, ps)
            keep = sigma > 0
            rows.append(workers[keep])
            speeds.append(sigma[keep])
            ps_counts.append(np.full(int(keep.sum()), ps))
        self.workers = np.concatenate(rows)
        self.speed = np.concatenate(speeds)
        self.ps_rate = np.concatenate(ps_counts) * problem.platform.ps_price_per_h
        self.od_price = np.array(
            [
                t.on_demand_price_per_h if t.on_demand_price_per_h is not None else math.inf
                for t in problem.instance_types
            ]
        )
        start = ClusterSpeeds(model, spot_col).run_start(most_workers(problem, plan, False), plan.ps)
        self.need = progress_target(model) * (1 - TOLERANCE) - start

    def slots(self, pools: Sequence[BoundPool], gap_s: float) -> tuple[np.ndarray, np.ndarray]:
        """The slots before ``T'``: their lengths and, per pool, the most spot instances it can
        hold in each (``H_p``, module docstring)."""
        end = self.problem.slo.time_s * (1 + TOLERANCE)
        ticks = math.ceil(end / gap_s)
        cuts = {0.0, end}
        for k in range(1, ticks + 1):
            cuts.update(t for t in (k * gap_s, k * gap_s + self.notice_s) if t < end)
        times = np.array(sorted(cuts))
        lengths = np.diff(times)
        held = np.zeros((len(pools), len(lengths)), dtype=np.int64)
        for p, pool in enumerate(pools):
            cap = np.asarray(pool.capacity, dtype=np.int64)
            if len(cap) < ticks:
                raise InvalidInputError("--hindsight", f"pool {p} has {len(cap)} ticks of capacity, the window {ticks}")
            drop = np.maximum(cap[:-1] - cap[1:], 0)  # drop[k - 1]: notified at boundary k
            for n, t in enumerate(times[:-1]):
                k = math.floor(t / gap_s + 1e-9)
                recent = [j for j in range(1, k + 1) if t - self.notice_s < j * gap_s <= t + 1e-9]
                held[p, n] = int(cap[k]) + int(sum(int(drop[j - 1]) for j in recent))
        return lengths, held

    def rates(self, pools: Sequence[BoundPool], held: np.ndarray) -> np.ndarray:
        """Per slot, the cheapest rate of every enumerated cluster ($/h)."""
        rates = np.empty((held.shape[1], len(self.workers)))
        for n in range(held.shape[1]):
            rate = self.ps_rate.copy()
            for i, name in enumerate(self.types):
                offers = sorted(
                    (pool.price_per_h, int(held[p, n])) for p, pool in enumerate(pools) if pool.type_name == name
                )
                left = self.workers[:, i].copy()
                for price, cap in offers:
                    if price >= self.od_price[i]:
                        break
                    take = np.minimum(left, cap)
                    rate += take * price
                    left -= take
                with np.errstate(invalid="ignore"):
                    rate += np.where(left > 0, left * self.od_price[i], 0.0)
            rates[n] = rate
        return rates

    def bound(self, pools: Sequence[BoundPool], gap_s: float) -> float:
        """The best ``LB(lambda)`` found for the window of ``pools`` (module docstring): 0 when
        nothing is needed, ``inf`` when no policy can meet T_obj on it."""
        if self.need <= 0:
            return 0.0
        if not len(self.workers):
            return math.inf
        lengths, held = self.slots(pools, gap_s)
        per_s = self.rates(pools, held) / 3600
        speed = self.speed
        usable = np.isfinite(per_s)
        if float(lengths @ np.max(np.where(usable, speed[None, :], 0.0), axis=1)) < self.need:
            return math.inf
        need = self.need

        def lb(lam: float) -> float:
            inner = np.min(per_s - lam * speed[None, :], axis=1)
            return float(lam * need + lengths @ np.minimum(0.0, inner))

        # LB is concave: once LB(2h) <= LB(h), its maximum lies below 2h. The dearest $ per unit
        # of progress is a first guess; the marginal price of going faster can be higher.
        high = float(np.max(np.where(usable, per_s, 0) / speed[None, :])) + 1e-12
        for _ in range(MAX_DOUBLINGS):
            if lb(2 * high) <= lb(high):
                break
            high *= 2
        high *= 2
        a, b = 0.0, high
        phi = (math.sqrt(5) - 1) / 2
        c, d = b - phi * (b - a), a + phi * (b - a)
        fc, fd = lb(c), lb(d)
        best = 0.0
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
        return max(best, fc, fd, 0.0) * (1 - ROUNDING)
