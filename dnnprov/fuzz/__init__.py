"""Differential certificate fuzzing: ``milp`` against exhaustive search on tiny instances.

``milp`` claims proofs: ``optimal`` (no plan is cheaper), ``infeasible`` (no plan meets
the constraints) and a lower ``bound`` on every plan's cost. On instances small enough
for ``enumerate`` to evaluate every plan, each claim can be checked. :func:`check` solves
one instance both ways and returns a :class:`Finding` per broken claim; :func:`shrink`
minimizes a failing instance greedily; :func:`write_finding` saves it as an instance
file that ``dnnprov solve FILE`` reloads. The seeded instance families live in
:mod:`dnnprov.fuzz.families.spot` (:data:`FAMILIES` is re-exported here); :func:`instance`
builds one of them from its family name and seed.

Tolerances: a cost counts as above the optimum beyond ``1e-6`` relative plus ``1e-9``
absolute; a bound counts as above the optimum beyond ``1e-9`` relative plus ``1e-12``.
Below an optimum of $1e-3 the absolute parts shrink to the relative ones (issue 19:
prices of 1e-9 $/h give optima far below 1e-9 $, where a fixed 1e-9 would hide errors).
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import dnnprov
from dnnprov.errors import InvalidInputError
from dnnprov.fuzz.families.spot import FAMILIES, MAX_PLANS, Problem, draw, plan_cap
from dnnprov.io.instances import write_instance
from dnnprov.models.serverless import ServerlessModel
from dnnprov.models.spot import SpotModel
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import Result, ServerlessPlan, SpotPlan, Status

__all__ = [
    "FAMILIES",
    "MAX_PLANS",
    "OTHER_KINDS",
    "WRONG_CERTIFICATES",
    "Finding",
    "annotate",
    "check",
    "compare",
    "evaluate_plan",
    "instance",
    "plan_cap",
    "shrink",
    "shrink_finding",
    "write_finding",
]

COST_RTOL, COST_ATOL = 1e-6, 1e-9
BOUND_RTOL, BOUND_ATOL = 1e-9, 1e-12
#: Below this optimum ($) the absolute tolerances shrink to the relative ones.
SMALL_COST = 1e-3
#: A gap above this must be explained in the result's message (issue 8, item 5).
SILENT_GAP = 0.10

#: Kinds of finding that are wrong answers (a claim the oracle refutes, or a crash).
WRONG_CERTIFICATES = {
    "false-optimal": "milp proved a plan optimal that costs more than the enumerated optimum",
    "outside-gap": "milp stopped at a relative gap with a plan further than the gap from the optimum",
    "false-infeasible": "milp proved infeasibility but enumerate found a plan",
    "infeasible-plan": "milp returned a plan the model rejects",
    "wrong-cost": "milp reported a cost other than the model's cost of its plan",
    "bound-above-optimum": "milp's proven lower bound is above the true optimum",
    "plan-on-infeasible": "milp returned a plan although enumerate proved no plan feasible",
    "cheaper-than-oracle": "milp's feasible plan is cheaper than enumerate's optimum (oracle or model bug)",
    "error": "milp failed (status error, or it refused a valid instance)",
}
#: Kinds that are reported but are not wrong certificates.
OTHER_KINDS = {
    "gave-up": "milp ended without a proof (limit, unknown, or feasible at gap 0) on a tiny instance",
    "overran": "milp's wall time exceeded time_limit * 1.1 + 2 s",
    "silent-gap": "milp's bound is $0 or missing, or its gap above 10 %, and its message says nothing",
    "oracle": "enumerate gave no verdict (instance too large or an error)",
}


@dataclass(frozen=True)
class Finding:
    """One broken claim (or a give-up) on one instance; ``seed`` is ``None`` for files."""

    kind: str
    family: str
    seed: int | None
    message: str

    @property
    def wrong_certificate(self) -> bool:
        """Whether this finding is a wrong answer, not just a give-up."""
        return self.kind in WRONG_CERTIFICATES

    def __str__(self) -> str:
        where = self.family if self.seed is None else f"{self.family}#{self.seed}"
        return f"[{self.kind}] {where}: {self.message}"


def instance(family: str, seed: int) -> Problem:
    """Instance ``seed`` of ``family``: the same pair always gives the same problem."""
    rng = np.random.default_rng([zlib.crc32(family.encode()), seed])
    return draw(family, rng)


# ------------------------------------------------------------------ checking
def _above(value: float, reference: float, rtol: float, atol: float) -> bool:
    return value > reference * (1 + rtol) + atol


def evaluate_plan(problem: Problem, plan: SpotPlan | ServerlessPlan) -> tuple[bool, float, str]:
    """(feasible, cost, reason) of a returned plan, re-evaluated with the model."""
    if isinstance(problem, SpotProblem):
        if not isinstance(plan, SpotPlan):
            return False, math.nan, f"a {type(plan).__name__} for a spot problem"
        model = SpotModel(problem)
        labels = model.columns.labels
        unknown = sorted(set(plan.counts) - set(labels))
        if unknown:
            return False, math.nan, f"unknown columns {unknown}"
        counts = np.array([plan.counts.get(label, 0) for label in labels], dtype=np.int64)
        ev = model.evaluate(counts[None, :], plan.ps)
        return bool(ev.feasible[0]), float(ev.cost[0]), f"T = {float(ev.time_s[0]):.6g} s"
    if not isinstance(plan, ServerlessPlan):
        return False, math.nan, f"a {type(plan).__name__} for a serverless problem"
    one = ServerlessModel(problem).evaluate(plan.functions, plan.memory_mb, plan.ps)
    return bool(one.feasible), float(one.cost), f"T = {float(one.time_s):.6g} s"


def compare(
    problem: Problem, milp: Result, oracle: Result, *, family: str = "", seed: int | None = None, gap: float = 0.0
) -> list[Finding]:
    """Every claim of ``milp`` (run with relative ``gap``) that the exhaustive ``oracle`` refutes."""
    found: list[Finding] = []

    def report(kind: str, message: str) -> None:
        found.append(Finding(kind, family or problem.name, seed, message))

    if oracle.status not in (Status.OPTIMAL, Status.INFEASIBLE):
        report("oracle", f"enumerate: {oracle.status.value} ({oracle.message})")
        return found
    opt = oracle.cost if oracle.status is Status.OPTIMAL and oracle.cost is not None else math.inf
    # below $1e-3 the absolute tolerances would hide wrong answers (prices reach 1e-9 $/h):
    # there they shrink to the relative ones
    small = math.isfinite(opt) and abs(opt) < SMALL_COST
    cost_atol = min(COST_ATOL, COST_RTOL * abs(opt)) if small else COST_ATOL
    bound_atol = min(BOUND_ATOL, BOUND_RTOL * abs(opt)) if small else BOUND_ATOL
    truth = f"enumerate: {oracle.status.value}" + (f" ${opt:.9g} with {oracle.plan}" if math.isfinite(opt) else "")
    said = f"milp: {milp.status.value} cost {milp.cost!r} bound {milp.bound!r} plan {milp.plan}"
    if milp.status is Status.ERROR:
        report("error", f"{said}; {milp.message}")
    if milp.plan is not None:
        feasible, cost, why = evaluate_plan(problem, milp.plan)
        if not feasible:
            report("infeasible-plan", f"{said}; the model rejects it ({why}); {truth}")
        elif milp.cost is None or not math.isclose(milp.cost, cost, rel_tol=1e-9, abs_tol=1e-12):
            report("wrong-cost", f"{said}; the model's cost is {cost!r}")
        if math.isinf(opt):
            report("plan-on-infeasible", f"{said}; {truth}")
        elif feasible and cost < opt - (opt * COST_RTOL + cost_atol):
            report("cheaper-than-oracle", f"{said} is feasible at ${cost:.9g}; {truth}")
    if milp.status is Status.OPTIMAL and milp.cost is not None and _above(milp.cost, opt, COST_RTOL, cost_atol):
        report("false-optimal", f"{said}; {truth}")
    elif (
        milp.status is not Status.INFEASIBLE
        and milp.bound is not None
        and math.isfinite(opt)
        and _above(milp.bound, opt, BOUND_RTOL, bound_atol)
    ):
        report("bound-above-optimum", f"{said}; {truth}")
    if (
        gap > 0
        and milp.status is Status.FEASIBLE
        and milp.cost is not None
        and _above(milp.cost, opt * (1 + gap), COST_RTOL, cost_atol)
    ):
        report("outside-gap", f"{said} with gap {gap:g}; {truth}")
    if milp.status is Status.INFEASIBLE and math.isfinite(opt):
        report("false-infeasible", f"{said} ({milp.message}); {truth}")
    if milp.status in (Status.LIMIT, Status.UNKNOWN) or (milp.status is Status.FEASIBLE and gap == 0):
        report("gave-up", f"{said} after {milp.solve_seconds:.3f} s ({milp.message}); {truth}")
    weak = milp.bound is None or milp.bound <= 0 or (milp.gap or 0) > SILENT_GAP
    if milp.status in (Status.LIMIT, Status.FEASIBLE) and weak and not milp.message.strip():
        report("silent-gap", f"{said} with an empty message")
    return found


def check(
    problem: Problem,
    *,
    time_limit_s: float = 10.0,
    gap: float = 0.0,
    family: str = "",
    seed: int | None = None,
    milp: Result | None = None,
    oracle: Result | None = None,
    work_limit: int | None = None,
) -> list[Finding]:
    """Solve ``problem`` with ``milp`` and ``enumerate`` and report every wrong certificate.

    ``gap`` is passed to milp: with ``gap > 0`` a ``feasible`` result must cost at most
    ``(1 + gap)`` times the optimum. ``milp`` / ``oracle`` may be given to check a result
    obtained elsewhere (the tests plant wrong answers this way); otherwise both methods are
    run here, and milp's wall time is checked against ``time_limit_s * 1.1 + 2``.
    ``work_limit`` (nodes, :class:`dnnprov.progress.Clock`) makes a give-up reproducible.
    """
    found: list[Finding] = []
    if milp is None:
        started = time.perf_counter()
        try:
            milp = dnnprov.solve(problem, "milp", time_limit_s=time_limit_s, gap=gap, work_limit=work_limit)
        except InvalidInputError as exc:
            return [Finding("error", family or problem.name, seed, f"milp refused a valid instance: {exc}")]
        wall = time.perf_counter() - started
        if wall > time_limit_s * 1.1 + 2:
            found.append(
                Finding(
                    "overran",
                    family or problem.name,
                    seed,
                    f"milp took {wall:.2f} s with time_limit_s = {time_limit_s:g}",
                )
            )
    if oracle is None:
        oracle = dnnprov.solve(problem, "enumerate")
    return found + compare(problem, milp, oracle, family=family, seed=seed, gap=gap)


# ------------------------------------------------------------------ shrinking
def _try(build: Callable[[], Problem]) -> Problem | None:
    try:
        return build()
    except InvalidInputError:
        return None


def _smaller_ranges(low: int, high: int | None) -> Iterator[tuple[int, int | None]]:
    """Narrower integer ranges inside ``[low, high]`` (none for an unbounded range)."""
    if high is None:
        return
    if high > low:
        mid = (low + high) // 2
        yield from ((low, low), (high, high), (low, mid), (mid + 1, high), (low, high - 1), (low + 1, high))


def _spot_reductions(p: SpotProblem) -> Iterator[Callable[[], Problem]]:
    """Candidate simplifications of a spot problem, biggest first."""
    c = p.constraints
    types = p.instance_types

    def constrained(**changes: Any) -> SpotProblem:
        return p.replace(constraints=replace(c, **changes))

    def without(i: int) -> SpotProblem:
        kept = [t for j, t in enumerate(types) if j != i]
        names = {t.name for t in kept}
        families = {t.quota_family for t in kept}
        existing = {k: v for k, v in c.existing.items() if k.split(":")[0] in names}
        vcpu = tuple(q for q in c.vcpu_quotas if q.family in families)
        return p.replace(instance_types=tuple(kept), constraints=replace(c, existing=existing, vcpu_quotas=vcpu))

    if len(types) > 1:
        for i in range(len(types)):
            yield partial(without, i)
    if "on-demand" in c.markets and len(c.markets) > 1:
        yield lambda: p.replace(
            constraints=replace(
                c, markets=("spot",), existing={k: v for k, v in c.existing.items() if not k.endswith(":on-demand")}
            )
        )
    for i in range(len(c.vcpu_quotas)):
        yield partial(constrained, vcpu_quotas=c.vcpu_quotas[:i] + c.vcpu_quotas[i + 1 :])
    for label, count in c.existing.items():
        yield partial(constrained, existing={k: v for k, v in c.existing.items() if k != label})
        if count > 1:
            yield partial(constrained, existing={**c.existing, label: count - 1})
    if c.budget_usd is not None:
        yield lambda: p.replace(constraints=replace(c, budget_usd=None))
    low, high = c.workers
    if low > 1:
        yield lambda: p.replace(constraints=replace(c, workers=(1, high)))
    if high is not None:
        yield lambda: p.replace(constraints=replace(c, workers=(low, None)))
    for ps in _smaller_ranges(*c.ps_count):
        yield partial(constrained, ps_count=ps)
    for i, t in enumerate(types):
        lowest = max([v for k, v in c.existing.items() if k.split(":")[0] == t.name], default=0)
        for key in ("quota", "on_demand_quota"):
            q = getattr(t, key)
            if q is None or q <= lowest:
                continue
            for smaller in sorted({lowest, (q + lowest) // 2, q - 1}):
                changed = replace(t, **{key: smaller})
                yield partial(p.replace, instance_types=types[:i] + (changed,) + types[i + 1 :])
    if p.workload.domain is not None:
        yield lambda: p.replace(workload=replace(p.workload, domain=None))
    if p.slo.takeover_overhead_s:
        yield lambda: p.replace(slo=replace(p.slo, takeover_overhead_s=0.0))
    if p.platform.ps_price_per_h:
        yield lambda: p.replace(platform=replace(p.platform, ps_price_per_h=0.0))


def _serverless_reductions(p: ServerlessProblem) -> Iterator[Callable[[], Problem]]:
    """Candidate simplifications of a serverless problem, biggest first."""
    c, pf = p.constraints, p.platform
    low, high = p.function_range()

    def constrained(**changes: Any) -> ServerlessProblem:
        return p.replace(constraints=replace(c, **changes))

    for functions in _smaller_ranges(low, high):
        yield partial(constrained, functions=functions)
    for ps in _smaller_ranges(*c.ps_count):
        yield partial(constrained, ps_count=ps)
    if c.budget_usd is not None:
        yield lambda: p.replace(constraints=replace(c, budget_usd=None))
    if p.workload.domain is not None:
        yield lambda: p.replace(workload=replace(p.workload, domain=None))
    grid = p.memory_grid()
    if len(grid) > 1:
        mid = grid[len(grid) // 2]
        yield lambda: p.replace(platform=replace(pf, max_memory_mb=grid[len(grid) // 2 - 1]))
        yield lambda: p.replace(workload=replace(p.workload, min_memory_mb=mid))
        yield lambda: p.replace(platform=replace(pf, max_memory_mb=grid[-2]))
        yield lambda: p.replace(workload=replace(p.workload, min_memory_mb=grid[1]))


def shrink(problem: Problem, still_fails: Callable[[Problem], bool], *, max_steps: int = 200) -> Problem:
    """Greedy minimization: apply the first simplification that ``still_fails``, repeat.

    Simplifications drop instance types, markets, vCPU quotas, kept instances, the budget,
    the validity domain and range limits; lower quotas; narrow PS, function and memory ranges; zero the
    takeover overhead and PS price. Ends at a problem no single step simplifies further
    (or after ``max_steps`` accepted steps).
    """
    current = problem
    for _ in range(max_steps):
        steps = _spot_reductions(current) if isinstance(current, SpotProblem) else _serverless_reductions(current)
        for step in steps:
            candidate = _try(step)
            if candidate is not None and still_fails(candidate):
                current = candidate
                break
        else:
            return current
    return current


def shrink_finding(problem: Problem, finding: Finding, *, time_limit_s: float = 10.0, gap: float = 0.0) -> Problem:
    """:func:`shrink` ``problem`` while :func:`check` (same limit and gap) still reports ``finding.kind``."""

    def still_fails(candidate: Problem) -> bool:
        return any(f.kind == finding.kind for f in check(candidate, time_limit_s=time_limit_s, gap=gap))

    return shrink(problem, still_fails)


def annotate(problem: Problem, finding: Finding) -> Problem:
    """``problem`` named ``<family>-<seed>-<kind>``, with the finding in its notes."""
    stem = (
        f"{finding.family}-{finding.seed}-{finding.kind}"
        if finding.seed is not None
        else f"{finding.family}-{finding.kind}"
    )
    return problem.replace(name=stem, notes=f"fuzz finding: {finding}")


def write_finding(problem: Problem, finding: Finding, out_dir: str | Path) -> Path:
    """Write :func:`annotate` (``problem``) as ``<name>.json`` in ``out_dir``; returns the path."""
    named = annotate(problem, finding)
    return write_instance(named, Path(out_dir) / f"{named.name}.json")
