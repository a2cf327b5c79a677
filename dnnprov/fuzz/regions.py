"""Certificates of the one-region rule (:mod:`dnnprov.cloud.regions`) against brute force.

:func:`one_region_oracle` evaluates every plan of a tiny multi-region instance whose workers
lie in one region (the box's plans filtered by their columns' regions, then
:class:`~dnnprov.SpotModel`'s feasibility and cost, for every PS count): it shares nothing with
the decomposition but the model. :func:`check_one_region` solves the instance with
:func:`~dnnprov.solvers.regions.solve_one_region` (``milp`` per region) and returns the findings of
:func:`dnnprov.fuzz.compare` against that oracle (the same kinds and tolerances).
"""

from __future__ import annotations

import itertools
import math
import time
from functools import partial

import numpy as np

import dnnprov
from dnnprov.fuzz import Finding, compare
from dnnprov.fuzz.families.spot import MAX_PLANS, Problem
from dnnprov.models.spot import SpotModel
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import Result, SpotPlan, Status
from dnnprov.solvers.regions import label_region, plan_regions, problem_regions, solve_one_region


def applies(problem: Problem) -> bool:
    """Whether ``problem`` is a spot instance with columns in two regions or more."""
    return isinstance(problem, SpotProblem) and len(problem_regions(problem)) > 1


def one_region_oracle(problem: SpotProblem, max_plans: int = MAX_PLANS) -> Result:
    """The cheapest one-region plan by exhaustive evaluation (``unknown`` beyond ``max_plans``)."""
    started = time.monotonic()
    model = SpotModel(problem)
    cols = model.columns
    regions = [label_region(label) for label in cols.labels]
    ranges = [range(int(lo), int(hi) + 1) for lo, hi in zip(cols.lower, cols.upper, strict=True)]
    size = math.prod(len(r) for r in ranges)
    base = partial(Result, method="enumerate", kind="spot", model=problem.model, instance=problem.name)
    if size > max_plans:
        return base(status=Status.UNKNOWN, message=f"{size:,} plans > {max_plans:,}")
    rows = [c for c in itertools.product(*ranges) if len({regions[i] for i, n in enumerate(c) if n}) <= 1]
    best: tuple[float, int, int] | None = None  # cost, PS count, row
    if rows:
        plans = np.array(rows, dtype=np.int64)
        low, high = problem.constraints.ps_count
        for ps in range(low, high + 1):
            ev = model.evaluate(plans, ps)
            for row in np.flatnonzero(ev.feasible).tolist():
                if best is None or float(ev.cost[row]) < best[0]:
                    best = (float(ev.cost[row]), ps, row)
    seconds = time.monotonic() - started
    if best is None:
        return base(status=Status.INFEASIBLE, solve_seconds=seconds)
    cost, ps, row = best
    counts = {label: int(n) for label, n in zip(cols.labels, rows[row], strict=True)}
    return base(status=Status.OPTIMAL, plan=SpotPlan(counts, ps), cost=cost, bound=cost, solve_seconds=seconds)


def check_one_region(
    problem: SpotProblem,
    *,
    time_limit_s: float = 10.0,
    family: str = "",
    seed: int | None = None,
    oracle: Result | None = None,
) -> list[Finding]:
    """Every claim of the one-region decomposition (``milp`` per region) that brute force refutes,
    and an ``infeasible-plan`` finding when its plan spans regions (``oracle``: a
    :func:`one_region_oracle` result already at hand)."""
    result = solve_one_region(
        problem,
        lambda sub, seconds: dnnprov.solve(sub, "milp", time_limit_s=seconds),
        method="milp",
        time_limit_s=time_limit_s,
    )
    found = compare(problem, result, oracle or one_region_oracle(problem), family=family, seed=seed)
    if isinstance(result.plan, SpotPlan) and len(plan_regions(result.plan.counts)) > 1:
        where = ", ".join(plan_regions(result.plan.counts))
        found.append(Finding("infeasible-plan", family or problem.name, seed, f"one-region plan in {where}"))
    return found
