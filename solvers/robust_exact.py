"""``--robust K`` and ``--risk`` beyond enumeration: the spot decomposition with a revocation-aware evaluation.

Why it is exact. :class:`~dnnprov.solvers.spot_exact.SpotDecomposition` proves the nominal
optimum by cells whose bounds are lower bounds on the nominal cost C (eq. 11) of every
nominally feasible plan in them, and by evaluating exactly every plan its MILPs or
enumerations produce (each then cut off by a no-good). Both planners here keep that
search and change only the exact evaluation, through :class:`JudgedModel`:

* ``--robust K``: a plan counts as feasible only when it is nominally feasible *and*
  K-robust (:mod:`dnnprov.solvers.robust`); its cost stays C. K-robust plans are a subset
  of the nominally feasible ones with the same cost, so every cell bound still bounds them.
* ``--risk``: a plan counts as feasible when it is nominally feasible and meets the
  deadline form, and its cost is the expected cost E[C] (:mod:`dnnprov.solvers.risk`).
  ``E[C] >= C`` and both deadline forms imply T <= T_obj, so a bound on C over the
  nominally feasible plans of a cell bounds E[C] over its admissible ones.

The incumbent U is then the best robust plan (or least E[C]); a cell is closed when its
bound reaches U, which is valid because the bound is below every admissible plan's
objective. Plans whose nominal cost is already at least U cannot become the incumbent
whatever the revocation check says (the objective is at least C), so the check runs only
on the others: that is the one shortcut, and it changes no decision of the search.
The status (``optimal``, ``infeasible``: no plan survives, ``limit`` with the bound) and
the bound come from the decomposition's own proof obligations.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from dnnprov.models.spot import SpotEvaluation, SpotModel
from dnnprov.problems.spot import SpotProblem
from dnnprov.progress import Clock, SolverLog
from dnnprov.result import Result, Status
from dnnprov.solvers.spot_exact import SpotDecomposition

#: ``judge(counts, ps, nominal) -> (admissible, objective)`` for plans that may become the incumbent.
Judge = Callable[[np.ndarray, np.ndarray, SpotEvaluation], tuple[np.ndarray, np.ndarray]]


class JudgedModel:
    """A :class:`SpotModel` whose ``evaluate`` applies a revocation criterion (module docstring).

    Every other attribute is the wrapped model's. ``ceiling()`` is the incumbent's
    objective: plans whose nominal cost reaches it are returned as the nominal model has
    them (they cannot win, whatever the criterion says).
    """

    def __init__(self, base: SpotModel, judge: Judge, ceiling: Callable[[], float]) -> None:
        self.base = base
        self.judge = judge
        self.ceiling = ceiling
        self.judged = 0

    def __getattr__(self, name: str):
        return getattr(self.base, name)

    def evaluate(self, counts: np.ndarray, ps: np.ndarray | int = 1) -> SpotEvaluation:
        """The nominal evaluation, with ``feasible`` and ``cost`` of the revocation-aware problem."""
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
        return dataclasses.replace(ev, feasible=feasible, cost=cost)


def decompose(problem: SpotProblem, judge: Judge, clock: Clock) -> tuple[Result, dict]:
    """Run the spot decomposition with ``judge`` in its exact evaluation; the result and stats."""
    search = SpotDecomposition(problem, clock=clock, log=SolverLog(clock))
    judged = JudgedModel(search.model, judge, lambda: search.best_cost)
    search.model = judged
    result = search.run(None)
    return result, {**search.stats, "plans_judged": judged.judged, "method": "decompose"}


def _plan_counts(model: SpotModel, result: Result) -> np.ndarray | None:
    if result.plan is None:
        return None
    return np.array([result.plan.counts.get(label, 0) for label in model.columns.labels], dtype=np.int64)


def decompose_robust(problem: SpotProblem, model: SpotModel, k: int, overhead_s: float, replaced: bool,
                     delays: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
                     clock: Clock) -> Result:
    """``--robust K`` by the decomposition: the cheapest K-robust plan, or the bound at the limit."""
    from dnnprov.solvers.robust import robust_result

    limit = problem.slo.time_s * (1 + 1e-12)

    def judge(counts: np.ndarray, ps: np.ndarray, nominal: SpotEvaluation) -> tuple[np.ndarray, np.ndarray]:
        delay, _ = delays(counts, ps)
        return nominal.time_s + delay <= limit, nominal.cost

    result, stats = decompose(problem, judge, clock)
    counts = _plan_counts(model, result)
    ps = result.plan.ps if result.plan is not None else 1
    if result.status is Status.OPTIMAL:
        message = "cheapest robust plan, proven by the spot decomposition"
    elif result.status is Status.INFEASIBLE:
        message = f"proven: no plan meets T_obj under {k} revocations"
    else:
        message = result.message
    return robust_result(model, counts, ps, k, overhead_s, replaced, result.status, clock,
                         bound=result.bound if result.bound is not None else 0.0, message=message, stats=stats)


def decompose_risk(problem: SpotProblem, model: SpotModel,
                   outcome: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
                   clock: Clock) -> tuple[Result, dict]:
    """``--risk`` by the decomposition; ``outcome(counts, ps) -> (admissible, expected cost)``."""
    def judge(counts: np.ndarray, ps: np.ndarray, nominal: SpotEvaluation) -> tuple[np.ndarray, np.ndarray]:
        admissible, cost = outcome(counts, ps)
        return admissible & np.isfinite(cost), np.where(np.isfinite(cost), cost, np.inf)

    return decompose(problem, judge, clock)
