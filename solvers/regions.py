"""One region per plan: the cheapest plan whose workers all lie in one region, solved exactly.

A multi-region instance (columns ``TYPE@REGION``, docs/cloud.md) lets a plan put workers in
several regions beside one PS; the spot model prices no traffic between regions, so such a
plan's time and cost are optimistic. Under the *one-region* rule every worker of a plan is in
one region (and the PS with them). The plans that obey it are the union, over the regions
``r``, of the plans of the *region subproblem* ``r``: the instance with only ``r``'s columns
(the others fixed at zero; vCPU quotas of the other regions' families dropped, as they bind
nothing then). So the rule is solved by decomposition (:func:`solve_one_region`): every region
subproblem is solved by the same solve (the caller's: ``dnnprov.solve`` with one method and
its options, as :func:`dnnprov.cloud.regions.solve_one_region` passes it), and

- the answer is the best region's plan;
- its proven bound is the **minimum over regions** of each region's proven bound (a proven
  infeasible region counts as +inf): every one-region plan is a plan of some region, whose
  value is at least that region's bound, hence at least the minimum;
- it is ``optimal`` only when every region is ``optimal`` or proven ``infeasible``,
  ``infeasible`` only when every region is; otherwise ``feasible``/``limit`` with that bound
  (and a gap asked of each region holds for the whole: ``bound_r >= (1 - gap) value_r >=
  (1 - gap) value_best``).

A region subproblem with kept instances (``constraints.existing``) in another region has no
plan (the kept workers would span regions): it counts as infeasible. Types without a region
(plain names) form a group of their own. The time limit is shared: each region gets what is
left of it. Region names are read from the types' names (``TYPE@REGION``, the separator of
:mod:`dnnprov.io.catalogs.catalog`, which solvers do not import).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from dnnprov.errors import PlausibilityWarning
from dnnprov.problems.spot import ON_DEMAND_SUFFIX, SpotProblem
from dnnprov.result import Result, Status

#: The group of types whose names carry no region.
NO_REGION = ""
#: Joins a type and its region (``p3.2xlarge@us-west-2``), as catalogs name their pools.
REGION_SEPARATOR = "@"
#: Solves one region's subproblem within the seconds given.
RegionSolve = Callable[[SpotProblem, float], Result]


def label_region(label: str) -> str:
    """The region of a column label (``p3.2xlarge@us-west-2:on-demand`` -> ``us-west-2``; plain: ``""``)."""
    return label.removesuffix(ON_DEMAND_SUFFIX).partition(REGION_SEPARATOR)[2]


def problem_regions(problem: SpotProblem) -> list[str]:
    """The regions of the instance's types, sorted (``""`` for types without one)."""
    return sorted({label_region(t.name) for t in problem.instance_types})


def plan_regions(counts: dict[str, int]) -> list[str]:
    """The regions a plan's workers lie in (columns with a positive count), sorted."""
    return sorted({label_region(label) for label, n in counts.items() if n})


def region_problem(problem: SpotProblem, region: str) -> SpotProblem | None:
    """The instance with only ``region``'s columns; ``None`` when it has none, or when instances
    kept elsewhere (``constraints.existing``) rule the region out."""
    kept = problem.constraints.existing
    if any(n and label_region(label) != region for label, n in kept.items()):
        return None
    types = tuple(t for t in problem.instance_types if label_region(t.name) == region)
    if not types:
        return None
    families = {t.quota_family for t in types}
    constraints = replace(
        problem.constraints,
        existing={k: n for k, n in kept.items() if label_region(k) == region},
        vcpu_quotas=tuple(q for q in problem.constraints.vcpu_quotas if q.family in families),
    )
    with warnings.catch_warnings():  # the whole instance warned already; its parts say nothing new
        warnings.simplefilter("ignore", PlausibilityWarning)
        return problem.replace(instance_types=types, constraints=constraints)


def solve_one_region(
    problem: SpotProblem, solve: RegionSolve, *, method: str, objective: Any = "cost", time_limit_s: float = 60.0
) -> Result:
    """The best plan whose workers lie in one region, with a bound proven over every region.

    ``solve(subproblem, seconds)`` solves one region (``method`` and ``objective`` are its,
    named in a result without a plan). A problem of one region is solved as it is.
    """
    if len(problem_regions(problem)) < 2:
        return solve(problem, time_limit_s)
    started = time.monotonic()
    results: dict[str, Result | None] = {}
    for region in problem_regions(problem):
        sub = region_problem(problem, region)
        left = max(time_limit_s - (time.monotonic() - started), 0.0)
        results[region] = None if sub is None else solve(sub, left)
    return combine(problem, method, objective, results, time.monotonic() - started)


def _bound(result: Result | None) -> float | None:
    """A region's proven bound (+inf: no plan there; ``None``: nothing proven)."""
    if result is None or result.status is Status.INFEASIBLE:
        return math.inf
    return result.bound


def combine(
    problem: SpotProblem, method: str, objective: Any, results: dict[str, Result | None], seconds: float
) -> Result:
    """The one-region answer from every region's result (``None``: the region has no plan);
    ``objective`` is the solve's (named in a result without a plan)."""
    planned = [
        (region, r) for region, r in results.items() if r is not None and r.is_feasible() and r.value is not None
    ]
    bounds = [_bound(r) for r in results.values()]
    bound = None if any(b is None for b in bounds) else min(b for b in bounds if b is not None)
    summary = {
        region: None
        if r is None
        else {"status": r.status.value, "value": r.value, "bound": r.bound, "seconds": r.solve_seconds}
        for region, r in results.items()
    }
    stats = {"regions": len(results), "region_results": summary}
    errors = [f"{region}: {r.message}" for region, r in results.items() if r is not None and r.status is Status.ERROR]
    proven = all(r is None or r.status in (Status.OPTIMAL, Status.INFEASIBLE) for r in results.values())
    within_gap = all(
        r is None or r.status in (Status.OPTIMAL, Status.INFEASIBLE, Status.FEASIBLE) for r in results.values()
    )
    if not planned:
        if bound is not None and math.isinf(bound):
            status, message = Status.INFEASIBLE, _infeasible_message(results)
        else:
            status = Status.ERROR if errors else Status.LIMIT
            message = "; ".join(errors) or "no one-region plan found before the limit; " + _regions_text(results)
        some = next((r for r in results.values() if r is not None), None)
        return Result(
            status=status,
            method=method,
            kind="spot",
            model=problem.model,
            instance=problem.name,
            bound=None if bound is None or math.isinf(bound) else bound,
            solve_seconds=seconds,
            message=message,
            details={"one_region": True},
            stats=stats,
            warnings=() if some is None else some.warnings,
            objective=objective,
        )
    region, best = min(planned, key=lambda p: (p[1].value, p[0]))
    if errors:
        status = Status.ERROR
    elif proven:
        status = Status.OPTIMAL
    else:
        status = Status.FEASIBLE if within_gap else Status.LIMIT
    value = best.value
    assert value is not None  # planned results have a value
    shown = None if bound is None else min(bound, value)
    note = f"one region per plan: {region or 'no region'} is the best of {len(results)} regions"
    return replace(
        best,
        status=status,
        instance=problem.name,
        bound=shown,
        solve_seconds=seconds,
        message="; ".join([note, *errors] + ([best.message] if best.message else [])),
        details={**best.details, "one_region": True, "region": region},
        stats={**best.stats, **stats},
    )


def _regions_text(results: dict[str, Result | None]) -> str:
    return ", ".join(
        f"{region or 'no region'} {'no plan' if r is None else r.status.value}" for region, r in results.items()
    )


def _infeasible_message(results: dict[str, Result | None]) -> str:
    parts = [
        f"{region or 'no region'}: "
        + ("instances kept in another region" if r is None else (r.message or "infeasible").split("\n")[0])
        for region, r in results.items()
    ]
    return "no plan with every worker in one region: " + "; ".join(parts)
