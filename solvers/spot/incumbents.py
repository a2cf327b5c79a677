"""Incumbents for the spot decomposition: plans tried because they may be cheap (a part of ``SpotDecomposition``).

Nothing here proves anything: a plan found here only becomes the incumbent after
:meth:`IncumbentSearch.consider` evaluates it exactly with the model, and a cheaper
incumbent only lets the search close cells sooner. The plans come from the price-speed
frontier of each (K, s) and a local search from its cheapest plan, from another method (the
heuristic seed), and from a local search around every plan that would beat the incumbent but
breaks a constraint; rounded LP points arrive through :meth:`consider` too (:mod:`.lp`), and
the search's outright evaluations of whole cells through :meth:`best_of`.

Every plan is evaluated by one model, :attr:`IncumbentSearch.model`: the problem's
:class:`SpotModel`, or with a *judge* (:mod:`dnnprov.solvers.revocation.robust_exact`) a
:class:`JudgedModel` that also applies a criterion of the caller's to the plans that may
become the incumbent.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from dnnprov.solvers.outcome import SpotPlanModel
from dnnprov.solvers.spot.cells import greedy_many
from dnnprov.solvers.spot.terms import SpotTerms

from dnnprov.models.spot import SpotEvaluation, SpotModel
from dnnprov.problems.spot import SpotColumns, SpotProblem
from dnnprov.result import Result, SpotPlan

FRONTIER_STEPS = np.array([1.0, 1.5, 2.0, 3.0, 5.0, 8.0])  # lambda / rho of the frontier plans tried per (K, s)
POLISH_ROUNDS = 3
FRONTIER_CLIMB_ROUNDS = 50  # local search from each new worker range's best frontier plan ...
FRONTIER_CLIMB_WITHIN = 1.3  # ... when it costs less than this times the incumbent (or there is none)


#: ``judge(counts, ps, nominal) -> (admissible, objective)`` for plans that may become the incumbent.
Judge = Callable[[np.ndarray, np.ndarray, SpotEvaluation], tuple[np.ndarray, np.ndarray]]


class JudgedModel:
    """A :class:`SpotModel` whose ``evaluate`` also applies a criterion, ``judge``.

    It stands in for the model where plans are evaluated and packaged
    (:class:`~dnnprov.solvers.outcome.SpotPlanModel`): the problem, the columns and the
    domain notes are the wrapped model's. ``ceiling()`` is the incumbent's objective: plans
    whose nominal cost reaches it are returned as the nominal model has them (they cannot
    win, whatever the criterion says, as long as it never lowers a cost).
    """

    def __init__(self, base: SpotModel, judge: Judge, ceiling: Callable[[], float]) -> None:
        self.base = base
        self.judge = judge
        self.ceiling = ceiling
        self.judged = 0
        #: plans (counts, PS) the criterion refused although nominally feasible and cheap enough
        self.refused: set[tuple[tuple[int, ...], int]] = set()

    @property
    def problem(self) -> SpotProblem:
        """The wrapped model's problem."""
        return self.base.problem

    @property
    def columns(self) -> SpotColumns:
        """The wrapped model's columns."""
        return self.base.columns

    def domain_note(
        self, batch_wa: float, workers: int, cc: float | None = None, iterations: float | None = None
    ) -> str | None:
        """The wrapped model's note on where a plan sits in the validity domain."""
        return self.base.domain_note(batch_wa, workers, cc, iterations)

    def extrapolated_axes(self, batch_wa: float, workers: int, iterations: float | None = None) -> list[str]:
        """The wrapped model's axes on which a plan lies beyond the data."""
        return self.base.extrapolated_axes(batch_wa, workers, iterations)

    def evaluate(self, counts: npt.ArrayLike, ps: npt.ArrayLike = 1) -> SpotEvaluation:
        """The nominal evaluation, with ``feasible`` and ``cost`` of the judged problem."""
        counts = np.atleast_2d(np.asarray(counts, dtype=np.int64))
        ps = np.broadcast_to(np.asarray(ps, dtype=np.int64), (len(counts),))
        ev = self.base.evaluate(counts, ps)
        live = np.flatnonzero(ev.feasible & (ev.cost < self.ceiling()))
        if not live.size:
            return ev
        self.judged += live.size
        nominal = SpotEvaluation(**{f.name: getattr(ev, f.name)[live] for f in dataclasses.fields(ev)})
        admissible, objective = self.judge(counts[live], ps[live], nominal)
        feasible, cost = ev.feasible.copy(), ev.cost.astype(float).copy()
        feasible[live] = admissible
        cost[live] = objective
        self.refused.update((tuple(int(v) for v in counts[i]), int(ps[i])) for i in live[~admissible])
        return dataclasses.replace(ev, feasible=feasible, cost=cost)


class IncumbentSearch:
    """The incumbent and how plans become it, for the problem of ``terms``; evaluations count in ``stats``.

    ``judge``: a criterion every plan that may become the incumbent must also meet, with the
    objective it gives (:class:`JudgedModel`); ``None``: the model's own feasibility and cost.
    """

    def __init__(self, terms: SpotTerms, stats: dict[str, int], judge: Judge | None = None) -> None:
        self.problem = terms.problem
        self.cols = terms.cols
        self.shape = terms.shape
        self.stats = stats
        self.judged = None if judge is None else JudgedModel(terms.model, judge, lambda: self.best_cost)
        #: the model every plan is evaluated with: the problem's, or the judged one standing in for it
        self.model: SpotPlanModel = terms.model if self.judged is None else self.judged
        self.evaluated: dict[tuple[tuple[int, ...], int], float] = {}
        self.best_cost = math.inf
        self.best: tuple[np.ndarray, int] | None = None

    def refused(self, counts: np.ndarray, ps: int) -> bool:
        """Whether the judge refused this plan although it was nominally feasible and cheap enough."""
        return self.judged is not None and (tuple(int(v) for v in counts), int(ps)) in self.judged.refused

    def best_of(self, counts: np.ndarray, ps: int) -> None:
        """Evaluate many plans (rows of ``counts``) with ``ps`` PS; keep the cheapest if it beats the incumbent."""
        ev = self.model.evaluate(counts, ps)
        self.stats["evaluations"] += len(counts)
        cost = np.where(ev.feasible, ev.cost, np.inf)
        i = int(np.argmin(cost))
        if cost[i] < self.best_cost:
            self.best_cost, self.best = float(cost[i]), (counts[i].copy(), ps)

    def take(self, incumbent: Result) -> None:
        """Try another method's plan as the incumbent (evaluated and checked here)."""
        if isinstance(incumbent.plan, SpotPlan):  # (a serverless plan has no counts to try)
            counts = np.array([incumbent.plan.counts[label] for label in self.cols.labels])
            self.consider(counts, incumbent.plan.ps)

    def consider(self, counts: np.ndarray, ps: int) -> None:
        """Evaluate one plan exactly (once) and keep it if it is the best so far.

        A plan that would cost less than the incumbent but breaks a constraint (most often
        the deadline) is polished: its neighbours may be feasible and still cheap. Polishing
        feasible improvements as well was measured to gain nothing (40 x 16, large set) and to
        cost 5 % on the paper setting.
        """
        key = (tuple(int(v) for v in counts), ps)
        if key in self.evaluated:
            return
        ev = self.model.evaluate(counts[None, :], ps)
        self.stats["evaluations"] += 1
        cost = float(ev.cost[0]) if ev.feasible[0] else math.inf
        self.evaluated[key] = cost
        if cost < self.best_cost:
            self.best_cost, self.best = cost, (counts.copy(), ps)
        elif ev.cost[0] < self.best_cost:  # a near miss: cheaper than U but infeasible
            self.polish(counts, ps)

    def polish(self, counts: np.ndarray, ps: int) -> None:
        """Local search for incumbents around a promising plan (proves nothing; any plan it
        keeps is evaluated exactly): :meth:`climb` below the incumbent for a few rounds."""
        found = self.climb(counts, ps, self.best_cost, POLISH_ROUNDS)
        if found is not None:
            self.best_cost, self.best = found[0], (found[1], found[2])

    def climb(self, counts: np.ndarray, ps: int, bar: float, rounds: int) -> tuple[float, np.ndarray, int] | None:
        """Best improvement from ``counts`` over adding, removing or swapping one worker and
        changing the PS count by one, each round's plan the cheapest feasible one below the
        last (the first below ``bar``); the last plan found with its cost, ``None`` if none."""
        cons = self.problem.constraints
        current, current_ps = counts.copy(), ps
        found: tuple[float, np.ndarray, int] | None = None
        for _ in range(rounds):
            plans = self.neighbours(current)
            ps_values = [s for s in (current_ps - 1, current_ps + 1) if cons.ps_count[0] <= s <= cons.ps_count[1]]
            batches = [(plans, current_ps)] * bool(len(plans)) + [(current[None, :], s) for s in ps_values]
            best: tuple[float, np.ndarray, int] | None = None
            for batch, s in batches:
                ev = self.model.evaluate(batch, s)
                self.stats["evaluations"] += len(batch)
                cost = np.where(ev.feasible, ev.cost, np.inf)
                i = int(np.argmin(cost))
                if cost[i] < (bar if best is None else best[0]):
                    best = (float(cost[i]), batch[i].copy(), s)
            if best is None:
                break
            found = best
            bar, current, current_ps = best
        return found

    def neighbours(self, counts: np.ndarray) -> np.ndarray:
        """The plans one worker away from ``counts`` inside the quotas: one added, one removed,
        or one moved between two columns (built from the columns that can give or take one,
        so their number grows with the columns used, not with the square of all columns)."""
        cols = self.cols
        gain, lose = np.flatnonzero(counts < cols.upper), np.flatnonzero(counts > cols.lower)
        take, give = np.meshgrid(lose, gain, indexing="ij")
        moved = take != give
        take, give = take[moved], give[moved]
        plans = np.repeat(counts[None, :], len(gain) + len(lose) + len(take), axis=0)
        rows = np.arange(len(plans))
        plans[rows[: len(gain)], gain] += 1
        plans[rows[len(gain) : len(gain) + len(lose)], lose] -= 1
        swaps = rows[len(gain) + len(lose) :]
        plans[swaps, take] -= 1
        plans[swaps, give] += 1
        return plans[plans.sum(axis=1) > 0]

    def try_frontier(self, pairs: list[tuple[int, int]], lo: np.ndarray, hi: np.ndarray, rho: np.ndarray) -> None:
        """Try plans of the price-speed frontier of each (K, s) as incumbents (proves nothing).

        The greedy for P - lambda X gives, as lambda grows from the smallest price per rate
        rho, plans ever faster and dearer, the last one the fastest of its K; the cheapest
        feasible one per PS count is offered to :meth:`consider`, so the cost bounds prune
        from the first worker counts on, and :meth:`climb` starts from it when it costs less
        than FRONTIER_CLIMB_WITHIN times the incumbent.
        """
        rate = np.array([self.shape(*pair).rate for pair in pairs])  # (pairs, columns)
        lam = rho[:, None] * FRONTIER_STEPS[None, :]  # (pairs, steps)
        weight = np.concatenate(
            [self.cols.price[None, None, :] - lam[:, :, None] * rate[:, None, :], -rate[:, None, :]], axis=1
        )  # ... and the fastest plan
        boxes, tries, columns = weight.shape
        plans = greedy_many(
            weight.reshape(boxes * tries, columns), lo, hi, np.repeat(np.array([[k] for k, _ in pairs]), tries, axis=0)
        )
        ps = np.repeat(np.array([s for _, s in pairs]), tries)
        for s in np.unique(ps):
            mine = plans[ps == s]
            ev = self.model.evaluate(mine, int(s))
            self.stats["evaluations"] += len(mine)
            cost = np.where(ev.feasible, ev.cost, np.inf)
            best = int(np.argmin(cost))
            if cost[best] < self.best_cost:
                self.consider(mine[best], int(s))
            if math.isfinite(cost[best]) and cost[best] < FRONTIER_CLIMB_WITHIN * self.best_cost:
                # the frontier ignores how b_w and the speed spread move j: a local search from
                # its cheapest plan finds far cheaper ones (80 x 16 tail: 5.58 -> 4.65 $ at once)
                found = self.climb(mine[best], int(s), float(cost[best]), FRONTIER_CLIMB_ROUNDS)
                if found is not None and found[0] < self.best_cost:
                    self.best_cost, self.best = found[0], (found[1], found[2])
