"""Pricing a spot job for joint provisioning by the exact single-job solver (no box is enumerated).

A joint plan picks one plan n per job. For a spot job touching the shared rows r (quota rows:
the count of one column; vCPU rows: vCPUs of a family and market), its plan uses
v_r(n) = a_r . n of row r, an integer, and costs c(n) (eq. 11: price x time, a nonlinear
function of n). Under the master's shared-row duals pi_r <= 0, with weights w_r = -pi_r >= 0,
the reduced cost of a plan before the job's convexity dual is

    g(n) = c(n) - sum_r pi_r v_r(n) = c(n) + w . v(n).

The dual term is linear in the counts and is *not* multiplied by the run time, so g is not a
spot cost with other prices. It is priced here without changing the single-job solver, by
*usage caps*: for a cap vector u, the region R(u) = {plans with v(n) <= u} is the job with
smaller quotas (a quota row caps its column's quota, a vCPU row the family's vCPU quota), a
plain spot problem that :func:`~dnnprov.solvers.spot.exact.solve_spot_exact` solves exactly:
its plan n* (usage v*, cost C) and a proven lower bound C_lb <= min {c(n) : n in R(u)}.

Why the bounds below are valid. Split R(u) into its *top* {n in R(u) : v(n) >= v*} and, for each
row r with v*_r > low_r (low: the usage of the kept instances, which every plan has), the child
R(u with u_r = v*_r - 1); the top and the children cover R(u). Every n in R(u) has
c(n) >= C_lb, so

* top: g(n) >= C_lb + w . v*                               (v(n) >= v*);
* a slab m < v_r(n) <= v*_r - 1 of a child, left out:
  g(n) >= C_lb + w_r (m + 1) + sum_{s != r} w_s low_s.

When the solve was optimal (C_lb = C) the top is *dominated* by n*: it costs no more and uses
no more of every shared row, so swapping n* in keeps a joint plan feasible and no dearer.
Recursing on the children from the box's cap u0 (the quota box, capped at the shared limits:
a plan beyond a limit is never part of a joint plan) covers every plan of the job; each child
lowers one cap, so it ends. Two uses:

* :meth:`SpotPricer.price` (column generation): children only along rows with w_r > 0 (on a
  row with w_r = 0 a child's plans with v_s >= v*_s on every weighted row have g >= g(n*)), and
  slabs left out when their bound reaches the best g found so far. The least of all top and
  slab bounds and of the unexplored regions' is a lower bound on min_n g(n) over the whole
  box at any point (the Lagrangian / Farley bound needs nothing more), exact when every
  solve was optimal and the search ran out.
* :meth:`SpotPricer.front` (closing the gap): children along every row, slabs left out only
  when their bound exceeds a threshold T. Every plan with g(n) <= T is then found or dominated
  by a found plan (``complete``), unless a solve ended at its limit with a top bound <= T.

Cutoffs. Both explorations only need a region's plans with g(n) below a limit (the best g so
far, the job's convexity dual mu_j when pricing, T for a front), and every plan of R(u) has
g(n) >= c(n) + w . low. A region is therefore solved with the budget B = limit - w . low
(rounded up): the single-job solver either returns a plan of cost <= B, which is then R(u)'s
optimum (every plan it did not consider costs more than B), or proves that no plan costs
B or less (its ``infeasible`` under that budget): then every plan of R(u) has g(n) > limit and
the region is a piece with bound B + w . low (``CapSolve.cut``), explored no further. A
cutoff only decides which plans are found; each bound stays a proven one.

Sums are rounded down past their rounding error (:func:`down`): a handful of float terms each.
Solves are cached by cap, and a region inside a solved one whose optimum lies in it reuses it;
a region inside one proven to hold nothing at or below a budget reuses that proof.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
from dnnprov.solvers.highs_driver import TINY, UNIT_ROUNDOFF
from dnnprov.solvers.spot.exact import solve_spot_exact

from dnnprov.models.spot import SpotModel
from dnnprov.problems.spot import ON_DEMAND_SUFFIX, InstanceType, SpotProblem, VcpuQuota
from dnnprov.problems.validation.checks import MAX_MAGNITUDE, MIN_POSITIVE
from dnnprov.progress import Clock, stop_requested
from dnnprov.result import SpotPlan, Status

BISECT_FROM = 4  # a weighted child spanning this many uses or more is searched by halving


def down(value: float, magnitude: float, terms: int) -> float:
    """``value``, a float sum of ``terms`` terms of total absolute ``magnitude``, moved below its exact value."""
    return float(np.nextafter(value - 2.0 * (terms + 2) * UNIT_ROUNDOFF * magnitude - TINY, -np.inf))


@dataclass(frozen=True)
class CapSolve:
    """The exact solve of one region R(u): plan (``None``: none found), its cost and usage, a proven bound."""

    cap: tuple[int, ...]
    status: Status
    bound: float  # proven lower bound on the cost of every plan in R(u) (inf: proven empty)
    counts: np.ndarray | None = None
    ps: int = 1
    cost: float = math.inf
    usage: np.ndarray | None = None
    cut: bool = False  # no plan of R(u) costs ``bound`` or less (a budget's proof); its plans were not sought

    @property
    def optimal(self) -> bool:
        """Whether the plan is proven cheapest in the region."""
        return self.status is Status.OPTIMAL and self.counts is not None


@dataclass
class Exploration:
    """What :meth:`SpotPricer.price` or :meth:`SpotPricer.front` found under weights ``w``."""

    lower_bound: float  # proven lower bound on min_n g(n) over the job's box
    plans: list[CapSolve] = field(default_factory=list)
    complete: bool = True  # front: every plan with g <= T found or dominated
    best: float = math.inf  # least g of the plans found


class SpotPricer:
    """One spot job priced by exact solves of its usage-capped regions (see the module docstring).

    ``rows`` and ``a`` are the shared rows the job touches and its usage matrix (rows x
    columns, :func:`~dnnprov.solvers.joint.columns.spot_usage_rows`), ``limits`` their limits.
    """

    def __init__(self, problem: SpotProblem, rows: list[str], a: np.ndarray, limits: np.ndarray) -> None:
        self.problem = problem
        self.model = SpotModel(problem)
        self.cols = self.model.columns
        self.rows = rows
        self.a = a
        self.low = (a @ self.cols.lower).astype(np.int64)
        top = (a @ self.cols.upper).astype(np.int64)
        self.top = top
        self.u0 = tuple(int(v) for v in np.minimum(top, np.floor(limits + 1e-9).astype(np.int64)))
        self.cache: dict[tuple[int, ...], CapSolve] = {}
        self.cuts: list[CapSolve] = []  # regions proven to hold no plan at or below a budget
        self.solves = 0
        self.solve_seconds = 0.0

    # ------------------------------------------------------------------ regions
    def capped(self, cap: tuple[int, ...], budget: float | None = None) -> SpotProblem:
        """The job restricted to R(cap): smaller quotas, or a smaller vCPU quota (and ``budget``)."""
        types = {t.name: t for t in self.problem.instance_types}
        vcpu = {(q.family, q.market): q for q in self.problem.constraints.vcpu_quotas}
        on_demand = "on-demand" in self.problem.constraints.markets
        for row, u, top in zip(self.rows, cap, self.top):
            if u >= top:
                continue  # no cap below the box
            if row.startswith("quota:"):
                label = row.removeprefix("quota:")
                name = label.removesuffix(ON_DEMAND_SUFFIX)
                t = types[name]
                if label.endswith(ON_DEMAND_SUFFIX):
                    types[name] = dataclasses.replace(t, on_demand_quota=min(u, self._quota(t)))
                else:
                    types[name] = dataclasses.replace(
                        t, quota=min(u, t.quota), on_demand_quota=self._quota(t) if on_demand else t.on_demand_quota
                    )
            else:
                family, market = row.removeprefix("vcpu:").split("/")
                old = vcpu.get((family, market))
                vcpu[(family, market)] = VcpuQuota(family, market, int(u if old is None else min(u, old.vcpus)))
        constraints = dataclasses.replace(self.problem.constraints, vcpu_quotas=tuple(vcpu.values()))
        if budget is not None:
            constraints = dataclasses.replace(constraints, budget_usd=budget)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the plausibility notes were given for the job itself
            return self.problem.replace(
                instance_types=tuple(types[t.name] for t in self.problem.instance_types), constraints=constraints
            )

    @staticmethod
    def _quota(t: InstanceType) -> int:
        """A type's on-demand quota as the problem reads it (its own, or the spot quota)."""
        return t.on_demand_quota if t.on_demand_quota is not None else t.quota

    def solve(self, cap: tuple[int, ...], deadline: float, cutoff: float = math.inf) -> CapSolve:
        """The exact solve of R(cap) (cached; a region holding a cached optimum below ``cap`` reuses it).

        With a finite ``cutoff``, plans costing more are not sought: the answer is R(cap)'s
        optimum if it costs at most ``cutoff`` (or a region cached solved), else a ``cut``
        answer, proving that every plan of R(cap) costs more than ``cutoff``."""
        if cap in self.cache:
            return self.cache[cap]
        capv = np.array(cap)
        budget = self._budget(cutoff)
        if budget is not None:
            for known in self.cuts:
                if known.bound >= budget and (np.array(known.cap) >= capv).all():
                    return dataclasses.replace(known, cap=cap)
        for known in self.cache.values():
            wider = (np.array(known.cap) >= capv).all()
            if wider and known.optimal and known.usage is not None and (known.usage <= capv).all():
                found = dataclasses.replace(known, cap=cap)
                self.cache[cap] = found
                return found
            if wider and known.status is Status.INFEASIBLE:
                self.cache[cap] = dataclasses.replace(known, cap=cap)
                return self.cache[cap]
        remaining = deadline - time.perf_counter()
        if remaining <= 0 or stop_requested():
            return CapSolve(cap, Status.LIMIT, -math.inf)
        started = time.perf_counter()
        result = solve_spot_exact(self.capped(cap, budget), clock=Clock(remaining), start=self._start(capv))
        self.solves += 1
        self.solve_seconds += time.perf_counter() - started
        if budget is not None and result.status is Status.INFEASIBLE:
            # under the budget: no plan of R(cap) costs budget * (1 + tolerance) or less
            found = CapSolve(cap, Status.LIMIT, budget, cut=True)
            self.cuts.append(found)
            return found
        found = self._read(cap, result.status, result.bound, result.plan)
        if budget is not None and found.counts is None:
            # a limit: the solver's bound holds for the plans within the budget, the rest cost more
            found = dataclasses.replace(found, bound=min(found.bound, budget))
        if found.status in (Status.OPTIMAL, Status.INFEASIBLE):
            # a plan within the budget is R(cap)'s optimum: every plan not considered costs more
            self.cache[cap] = found  # a limit is not kept: a later call may have more time
        return found

    def _budget(self, cutoff: float) -> float | None:
        """The budget a solve with ``cutoff`` gets (``None``: none, the solve is the plain one).

        Only a positive finite cutoff below the job's own budget is a budget: plans cost
        at least 0, and under the job's own budget an ``infeasible`` is a proof of emptiness.
        A cutoff a problem cannot hold as ``budget_usd`` (below ``MIN_POSITIVE`` or above
        ``MAX_MAGNITUDE``: prices near 1e-9 or 1e9 $/h) is no budget either: the plain solve
        is as exact, only slower."""
        own = self.problem.constraints.budget_usd
        if not (MIN_POSITIVE <= cutoff <= MAX_MAGNITUDE) or (own is not None and cutoff >= own):
            return None
        return float(cutoff)

    def _start(self, cap: np.ndarray) -> SpotPlan | None:
        """The cheapest plan solved so far that lies in R(cap): a warm start (it changes no proof)."""
        inside = [k for k in self.cache.values() if k.usage is not None and (k.usage <= cap).all()]
        if not inside:
            return None
        best = min(inside, key=lambda k: k.cost)
        assert best.counts is not None
        return SpotPlan({label: int(n) for label, n in zip(self.cols.labels, best.counts)}, best.ps)

    def _read(self, cap: tuple[int, ...], status: Status, bound: float | None, plan: object) -> CapSolve:
        """A single-job result as a :class:`CapSolve`, its plan re-evaluated with the job's own model."""
        if status is Status.INFEASIBLE:
            return CapSolve(cap, Status.INFEASIBLE, math.inf)
        low = -math.inf if bound is None or not math.isfinite(bound) else float(bound)
        if not isinstance(plan, SpotPlan):
            return CapSolve(cap, Status.LIMIT, low)
        counts = np.array([int(plan.counts.get(label, 0)) for label in self.cols.labels], dtype=np.int64)
        ev = self.model.evaluate(counts[None, :], plan.ps)
        if not ev.feasible[0]:
            raise AssertionError("a capped region's plan breaks the job's own constraints")
        cost = float(ev.cost[0])
        usage = (self.a @ counts).astype(np.int64)
        if (usage > np.array(cap)).any():
            raise AssertionError("a capped region's plan exceeds its cap")
        optimal = status is Status.OPTIMAL
        return CapSolve(
            cap, Status.OPTIMAL if optimal else Status.LIMIT, min(low, cost), counts, int(plan.ps), cost, usage
        )

    def least_use(self, r: int, deadline: float) -> int | None:
        """The least use of row ``r`` over the plans within the shared limits (``None``: not proven in time).

        Lowers the cap of row r below each plan found until the region is proven empty.
        """
        cap = list(self.u0)
        least: int | None = None
        while cap[r] >= self.low[r]:
            s = self.solve(tuple(cap), deadline)
            if s.status is Status.INFEASIBLE:
                break
            if s.usage is None:
                return None
            least = int(s.usage[r])
            cap[r] = least - 1
        return least if least is not None else (1 << 62)  # none: no plan within the limits

    # ------------------------------------------------------------------ the two explorations
    def price(self, w: np.ndarray, deadline: float, cutoff: float = math.inf) -> Exploration:
        """A proven lower bound on min_n c(n) + w . v(n) and the plans met on the way (w >= 0).

        Plans with c(n) + w . v(n) >= ``cutoff`` (the job's convexity dual: no negative reduced
        cost) are not sought: the bound is then min(min_n c(n) + w . v(n), cutoff) or more, less
        its rounding (each piece's bound is rounded down)."""
        return self._explore(w, None, deadline, cutoff)

    def front(self, w: np.ndarray, threshold: float, deadline: float) -> Exploration:
        """Every plan with c(n) + w . v(n) <= ``threshold``, found or dominated by a found one."""
        return self._explore(w, threshold, deadline)

    def _explore(
        self, w: np.ndarray, threshold: float | None, deadline: float, cutoff: float = math.inf
    ) -> Exploration:
        """The recursion of the module docstring; ``threshold`` ``None``: pricing (T = the least of
        the best g so far and ``cutoff``)."""
        w = np.maximum(np.asarray(w, dtype=float), 0.0)
        terms = len(w) + 2
        out = Exploration(math.inf)
        parts: list[float] = []  # proven lower bounds of the pieces that cover the box

        def part(value: float, magnitude: float) -> None:
            parts.append(down(value, magnitude, terms))

        def now() -> float:
            """The limit: plans with g at or above it (pricing), or above it (front), are not needed."""
            return min(out.best, cutoff) if threshold is None else threshold

        def budget() -> float:
            """The budget B = limit - w . low of the module docstring, rounded up past its float error."""
            limit = now()
            if not math.isfinite(limit):
                return math.inf
            value = limit - base_low
            return float(np.nextafter(value + 2.0 * terms * UNIT_ROUNDOFF * (abs(limit) + base_low) + TINY, np.inf))

        base_low = float(w @ self.low)
        # (cap, guard): a guarded region is explored only if its guard, a bound on its plans
        # outside the region pushed after it (explored first), is still below the limit
        stack: list[tuple[tuple[int, ...], float | None, float]] = [(self.u0, None, 0.0)]
        seen: set[tuple[int, ...]] = set()
        if (np.array(self.u0) < self.low).any():
            stack = []  # the kept instances alone exceed a shared limit: no plan
        while stack:
            cap, guard, size = stack.pop()
            if cap in seen:
                continue
            if guard is not None:
                low = down(guard, size, terms)
                if low > now() or (threshold is None and low >= now()):
                    parts.append(low)  # its plans beyond the inner region: g >= guard
                    continue
            seen.add(cap)
            s = self.solve(cap, deadline, budget())
            if s.status is Status.INFEASIBLE:
                continue
            if s.counts is None or s.usage is None:
                part(s.bound + base_low, abs(s.bound) + base_low)  # the whole region, unexplored
                out.complete &= s.cut  # cut: every plan has g above the limit
                continue
            out.plans.append(s)
            used = float(w @ s.usage)
            g = s.cost + used
            out.best = min(out.best, g)
            limit = now()
            top = s.bound + used
            part(top, abs(s.bound) + used)
            if not s.optimal and down(top, abs(s.bound) + used, terms) <= limit:
                out.complete = False
            if threshold is None and not s.optimal:
                part(s.bound + base_low, abs(s.bound) + base_low)  # pricing: the rest of an unproven region
                continue
            for r in range(len(w)):
                if s.usage[r] <= self.low[r] or (threshold is None and w[r] <= 0):
                    continue
                rest = s.bound + base_low - w[r] * self.low[r]
                m = int(s.usage[r]) - 1
                if w[r] > 0:
                    q = (limit - rest) / w[r]
                    if not math.isfinite(q):
                        q = -math.inf if q < 0 else math.inf
                    cut = (math.ceil(q) - 1 if threshold is None else math.floor(q)) if math.isfinite(q) else m
                    if q == -math.inf:
                        cut = int(self.low[r]) - 1
                    if cut < m:
                        first = max(cut + 1, int(self.low[r]))
                        part(rest + w[r] * first, abs(s.bound) + base_low + w[r] * first)
                        m = cut
                elif rest > limit:
                    part(rest, abs(s.bound) + base_low)
                    continue
                if m < self.low[r]:
                    continue
                child = list(cap)
                child[r] = m
                mid = (int(self.low[r]) + m) // 2
                if w[r] > 0 and m - self.low[r] >= BISECT_FROM:
                    # bisect: R(u_r = mid) first; the rest of R(u_r = m) has v_r > mid
                    stack.append((tuple(child), rest + w[r] * (mid + 1), abs(s.bound) + base_low + w[r] * (mid + 1)))
                    child[r] = mid
                stack.append((tuple(child), None, 0.0))
        out.lower_bound = min(parts, default=math.inf)
        return out
