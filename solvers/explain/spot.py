"""Reasons a spot problem is infeasible (the method is in :mod:`dnnprov.solvers.explain.infeasibility`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from dnnprov.solvers.explain.reasons import (
    bisected_deadline_reason,
    budget_reason,
    constraint_reason,
    deadline_reason,
    row_names,
    solved_budget_reason,
    unexplained,
    without_row,
)
from dnnprov.solvers.explain.search import (
    GroupSearch,
    bisect_deadline,
    extrapolation_needed,
    outside,
    share,
)
from dnnprov.solvers.search.enumeration import ChunkSizer, decode_counts, spot_space_size

from dnnprov.errors import InvalidInputError
from dnnprov.models.spot import SideRows, SpotModel, within_budget
from dnnprov.problems.spot import SpotProblem
from dnnprov.problems.validation import checks as check
from dnnprov.progress import Clock
from dnnprov.result import Reason, SpotPlan

BIG_TIME_S = 1e12  # "no deadline": far above any plan's time
FEASIBILITY_GAP = 0.5  # exact solves that only need a plan (and a proof when there is none)
RAISED_BOX = 20_000  # plans of the raised-quota box at least (or 4 times the problem's own)


def reasons(problem: SpotProblem, side: SideRows | None, clock: Clock, max_plans: int) -> list[Reason]:
    """The reasons ``problem`` (with user rows ``side``) has no plan; see the module doc of infeasibility."""
    domain = problem.workload.domain
    if SpotModel(problem).slo_refused() and domain is not None and domain.loss is not None:  # no plan at all
        return [
            Reason(
                "domain",
                "slo.loss",
                problem.slo.loss,
                domain.loss[0],
                True,
                f"the target loss {problem.slo.loss:g} lies below the lowest logged loss "
                f'{domain.loss[0]:g} and workload.domain.loss_axis is "enforce": the domain admits no '
                'plan at this target (a target at or above the logged losses, or loss_axis "flag", '
                "would; proven: the enforced axis refuses every plan at a target below the logs)",
            )
        ]
    size = spot_space_size(problem)
    if size <= max_plans:
        return by_enumeration(problem, side, clock, min(max_plans, max(4 * size, RAISED_BOX)))
    return by_exact_solves(problem, side, clock)


# ---------------------------------------------------------------------- problem variants
def relax(problem: SpotProblem, group: str, value: Any = None) -> SpotProblem:
    """``problem`` with one constraint group set to ``value`` (``None``: dropped, quotas doubled)."""
    c, w = problem.constraints, problem.workload
    if group == "deadline":
        return problem.replace(slo=dataclasses.replace(problem.slo, time_s=BIG_TIME_S if value is None else value))
    if group == "budget":
        return problem.replace(constraints=dataclasses.replace(c, budget_usd=value))
    if group == "domain":
        domain = None if value is None or w.domain is None else dataclasses.replace(w.domain, extrapolation=value)
        return problem.replace(workload=dataclasses.replace(w, domain=domain))
    if group == "iterations":  # the domain without its iteration floor and enforced loss axis
        domain = None if w.domain is None else dataclasses.replace(w.domain, min_iterations=0, loss_axis="flag")
        return problem.replace(workload=dataclasses.replace(w, domain=domain))
    if group == "vcpu_quota":
        quotas = (
            ()
            if value is None
            else tuple(dataclasses.replace(q, vcpus=max(q.vcpus, value.get(_family(q), 0))) for q in c.vcpu_quotas)
        )
        return problem.replace(constraints=dataclasses.replace(c, vcpu_quotas=quotas))
    if group == "workers":
        return problem.replace(constraints=dataclasses.replace(c, workers=(1, None) if value is None else value))
    if group == "quota":
        cols = problem.columns()
        upper = dict(zip(cols.labels, (int(u) for u in cols.upper)))
        wanted = value if value is not None else {k: min(2 * u + 4, check.MAX_QUOTA) for k, u in upper.items()}
        types = []
        for t in problem.instance_types:
            spot = max(upper.get(t.name, t.quota), wanted.get(t.name, 0))
            changes: dict[str, Any] = {"quota": spot if t.name in upper else t.quota}
            label = t.name + ":on-demand"
            if label in upper:
                changes["on_demand_quota"] = max(upper[label], wanted.get(label, 0))
            types.append(dataclasses.replace(t, **changes))
        return problem.replace(instance_types=tuple(types))
    raise ValueError(f"unknown constraint group {group!r}")


def _family(q: Any) -> str:
    return f"{q.family}/{q.market}"


def _plan(problem: SpotProblem, counts: np.ndarray, ps: int) -> SpotPlan:
    return SpotPlan(counts={k: int(n) for k, n in zip(problem.columns().labels, counts)}, ps=int(ps))


def _meets(
    problem: SpotProblem | Callable[[], SpotProblem], side: SideRows | None, counts: np.ndarray, ps: int
) -> bool:
    """Whether the plan meets every constraint of ``problem`` (the check every method uses).

    ``problem`` may be a function building the relaxed problem; one the limits refuse admits nothing.
    """
    try:
        problem = problem() if callable(problem) else problem
    except InvalidInputError:
        return False
    return bool(SpotModel(problem, side).evaluate(np.asarray(counts)[None, :], ps).feasible[0])


# ---------------------------------------------------------------------- small spaces: evaluate all
def raised_upper(problem: SpotProblem, limit: int) -> np.ndarray:
    """Quotas raised to a common cap so that the box of counts holds at most ``limit`` plans."""
    cols = problem.columns()
    low, high = problem.constraints.ps_count
    n_ps = high - low + 1

    def box(cap: int) -> int:
        return math.prod(int(max(up, cap) - lo + 1) for lo, up in zip(cols.lower, cols.upper)) * n_ps

    lo, hi = 0, check.MAX_QUOTA
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if box(mid) <= limit and int(np.maximum(cols.upper, mid).sum()) <= check.MAX_WORKERS:
            lo = mid
        else:
            hi = mid - 1
    return np.maximum(cols.upper, lo)


def by_enumeration(problem: SpotProblem, side: SideRows | None, clock: Clock, limit: int) -> list[Reason]:
    """Evaluate every plan of the raised-quota box once, every constraint group checked on its own."""
    cols, cons, w = problem.columns(), problem.constraints, problem.workload
    upper = raised_upper(problem, limit)
    relaxed = SpotModel(
        relax(relax(relax(relax(relax(problem, "deadline"), "budget"), "domain"), "vcpu_quota"), "workers")
    )
    relaxed.columns = dataclasses.replace(relaxed.columns, upper=upper)
    original = SpotModel(problem)
    names = row_names(side)
    groups = (
        ["deadline"]
        + (["budget"] if cons.budget_usd is not None else [])
        + (["domain", "iterations"] if w.domain is not None else [])
        + (["quota"] if (upper > cols.upper).any() else [])
        + (["vcpu_quota"] if cons.vcpu_quotas else [])
        + (["workers"] if cons.workers != (1, None) else [])
        + [f"constraint:{n}" for n in names]
    )
    search = GroupSearch(groups)

    def scan(box: np.ndarray, skip: np.ndarray | None) -> bool:
        """Fold every plan of the box ``lower..box`` (those inside ``lower..skip`` left out); ``True``: stopped."""
        radix = (box - cols.lower + 1).astype(np.int64)
        per_ps = int(np.prod(radix))
        sizer = ChunkSizer(clock)
        for ps in range(cons.ps_count[0], cons.ps_count[1] + 1):
            start, done = 0, 0
            while start < per_ps:
                chunk = sizer.next(done)
                if clock.expired():
                    return True
                counts = decode_counts(np.arange(start, min(start + chunk, per_ps), dtype=np.int64), cols.lower, radix)
                start, done = start + len(counts), len(counts)
                if skip is not None:
                    counts = counts[~(counts <= skip).all(axis=1)]
                if len(counts):
                    _fold(search, problem, side, relaxed, original, counts, ps, groups)
        return False

    # the plans of the real quotas first (every group but the quotas is decided there), then the rest
    size = spot_space_size(problem)
    stopped_within = scan(cols.upper, None)
    stopped_raised = stopped_within or ("quota" in groups and scan(upper, cols.upper))
    if search.contradiction is not None:
        counts, ps = search.contradiction
        raise AssertionError(f"infeasible was claimed, but {_plan(problem, counts, ps)} meets every constraint")
    n_ps = cons.ps_count[1] - cons.ps_count[0] + 1
    total = math.prod(int(up - lo + 1) for lo, up in zip(cols.lower, upper)) * n_ps
    stop = f"the time limit stopped the evaluation after {search.evaluated:,} of "
    within = f"{stop}{size:,} plans" if stopped_within else f"proven: all {size:,} plans within the quotas evaluated"
    raised = (
        f"{stop}{total:,} plans (quotas raised up to {int(upper.max()):,})"
        if stopped_raised
        else f"proven: all {total:,} plans with quotas up to {int(upper.max()):,} evaluated"
    )
    return compose(problem, side, search, upper, within, raised, proven=(not stopped_within, not stopped_raised))


def _fold(
    search: GroupSearch,
    problem: SpotProblem,
    side: SideRows | None,
    relaxed: SpotModel,
    original: SpotModel,
    counts: np.ndarray,
    ps: int,
    groups: list[str],
) -> None:
    """Evaluate one chunk of plans and fold it into ``search``."""
    cols, cons, w = original.columns, problem.constraints, problem.workload
    ev = relaxed.evaluate(counts, ps)
    ok: dict[str, np.ndarray] = {"deadline": ev.time_s <= problem.slo.time_s * (1 + 1e-12)}
    measure: dict[str, np.ndarray] = {"deadline": ev.time_s}
    ranges: dict[str, dict[str, np.ndarray]] = {}
    if "budget" in groups:
        assert cons.budget_usd is not None  # (the group exists only with a budget)
        ok["budget"], measure["budget"] = within_budget(ev.cost, cons.budget_usd), ev.cost
    if "domain" in groups:
        assert w.domain is not None  # (the group exists only with a domain)
        ok["domain"] = original.inside_domain(ev.batch_wa, ev.workers)
        measure["domain"] = np.maximum(
            extrapolation_needed(ev.batch_wa, *w.domain.batch_wa), extrapolation_needed(ev.workers, *w.domain.workers)
        )
        ranges["domain"] = {"batch_wa": ev.batch_wa, "workers": ev.workers.astype(float)}
    if "iterations" in groups:  # the domain's other half: its iteration floor and enforced cap
        ok["iterations"], measure["iterations"] = original.admits_iterations(ev.iterations), ev.cost
        ranges["iterations"] = {"iterations": ev.iterations}
    within = np.asarray((counts <= cols.upper).all(axis=1))
    if "quota" in groups:
        ok["quota"], measure["quota"] = within, np.maximum(counts - cols.upper, 0).sum(axis=1).astype(float)
    elif not within.all():
        raise AssertionError("the box of counts left the quotas without a quota group")
    if "vcpu_quota" in groups:
        excess = sum(np.maximum(counts @ per_column - limit, 0) for per_column, limit in original.vcpu_rows)
        ok["vcpu_quota"], measure["vcpu_quota"] = np.asarray(excess) == 0, np.asarray(excess, dtype=float)
    if "workers" in groups:
        distance = outside(ev.workers, cons.workers[0], cons.workers[1])
        ok["workers"], measure["workers"] = distance == 0, distance
    if side is not None:
        meets = side.row_ok(counts, ps)  # the rows of own variables share one answer
        for i, name in enumerate(row_names(side)):
            g = f"constraint:{name}"
            ok[g] = meets[:, i]
            measure[g] = ev.cost
    search.add(ev.feasible, ok, measure, ev.cost, lambda i: (counts[i].copy(), int(ps)), ranges)


# ---------------------------------------------------------------------- the reasons, in words
def _others(problem: SpotProblem, side: SideRows | None, group: str) -> str:
    """The other constraints a relaxation keeps, in words."""
    c, w = problem.constraints, problem.workload
    kept = ["the loss target"]
    kept += ["the quotas"] if group != "quota" else []
    kept += [f"the budget ${c.budget_usd:g}"] if c.budget_usd is not None and group != "budget" else []
    kept += [f"the deadline {problem.slo.time_s:,g} s"] if group != "deadline" else []
    kept += ["the validity domain"] if w.domain is not None and group != "domain" else []
    kept += ["the vCPU quotas"] if c.vcpu_quotas and group != "vcpu_quota" else []
    kept += ["the user constraints"] if side is not None and not group.startswith("constraint:") else []
    return ", ".join(kept[:-1]) + " and " + kept[-1] if len(kept) > 1 else kept[0]


def compose(
    problem: SpotProblem,
    side: SideRows | None,
    search: GroupSearch,
    upper: np.ndarray,
    within: str,
    raised: str,
    *,
    proven: tuple[bool, bool],
) -> list[Reason]:
    """Turn the search's best plans into reasons (single groups first, then pairs).

    ``within`` says how plans within the quotas were covered, ``raised`` how the raised box
    was; ``proven`` says whether each was covered in full.
    """
    proven_within, proven_raised = proven
    cols = problem.columns()
    out = []
    if int(cols.upper.sum()) == 0:
        out.append(
            Reason(
                "quota",
                "instance_types.*.quota",
                0,
                None,
                True,
                "every quota is 0: no plan can have a worker (proven: no count vector is allowed)",
            )
        )
    for group in search.groups:
        best = search.best[group]
        if best.found():
            quota = group == "quota"
            out.append(
                _single(
                    problem,
                    side,
                    group,
                    best,
                    upper,
                    raised if quota else within,
                    proven_raised if quota else proven_within,
                )
            )
    if any(r.plan is not None for r in out):
        return out
    for (g, h), best in search.pairs.items():
        if best.found():
            counts, ps = best.plan
            plan = _plan(problem, counts, ps)
            quota = "quota" in (g, h)
            out.append(
                Reason(
                    "combination",
                    f"{_field(g)} + {_field(h)}",
                    None,
                    None,
                    proven_raised if quota else proven_within,
                    f"{_field(g)} and {_field(h)} cannot hold together: neither alone is the cause, "
                    f"but without both the cheapest plan is {plan} (${best.cost:.6f}) "
                    f"({raised if quota else within})",
                    plan=plan.to_dict(),
                )
            )
    if not any(r.plan is not None for r in out) and not proven_raised:
        out.append(unexplained(f"no relaxation was found: {raised}"))
    elif not any(r.plan is not None for r in out):
        w, smallest = problem.workload, float(cols.batch.min())
        if w.gamma_2 <= 0 and w.gamma_2 * smallest + w.gamma_3 <= 0:
            # b_w is a weighted mean of worker batches (eq. 4), so b_w >= the smallest one
            out.append(
                Reason(
                    "loss",
                    "slo.loss",
                    problem.slo.loss,
                    None,
                    True,
                    f"slo.loss {problem.slo.loss:g}: eq. (3) has no root for any plan: gamma_2 b_w + gamma_3 "
                    f"= {w.gamma_2:g} b_w + {w.gamma_3:g} <= 0 already at the smallest worker batch "
                    f"{smallest:g} (b_w, a weighted mean of worker batches, is never smaller); worker "
                    f"batches below {-w.gamma_3 / w.gamma_2:.6g} would be needed (proven by eq. 3 and 4)",
                )
            )
            return out
        reached = search.anything.found()
        out.append(
            Reason(
                "loss" if not reached else "unexplained",
                "slo.loss",
                problem.slo.loss,
                None,
                proven_raised,
                (
                    f"no plan reaches the loss target {problem.slo.loss:g} at any deadline within the "
                    f"quotas raised up to {int(upper.max()):,} ({raised})"
                )
                if not reached
                else f"no plan is admitted by dropping one or two constraint groups ({raised})",
            )
        )
    return out


def _field(group: str) -> str:
    return {
        "deadline": "slo.time_s",
        "budget": "constraints.budget_usd",
        "domain": "workload.domain",
        "iterations": "workload.domain.min_iterations",
        "quota": "instance_types.*.quota",
        "vcpu_quota": "constraints.vcpu_quotas",
        "workers": "constraints.workers",
    }.get(group, group.removeprefix("constraint:"))


def _single(
    problem: SpotProblem, side: SideRows | None, group: str, best: Any, upper: np.ndarray, how: str, proven: bool
) -> Reason:
    """The reason for one group whose relaxation alone admits plans."""
    counts, ps = best.plan
    plan = _plan(problem, counts, ps)
    cols, c, w = problem.columns(), problem.constraints, problem.workload
    ev = SpotModel(problem).evaluate(counts[None, :], ps)
    time_s, cost = float(ev.time_s[0]), float(ev.cost[0])
    others = _others(problem, side, group)
    at_most = "" if proven else "at most "
    if group == "deadline":
        ok = _meets(lambda: relax(problem, "deadline", time_s), side, counts, ps)
        return deadline_reason(
            problem.slo.time_s, time_s, plan, proven=proven and ok, others=others, at_most=at_most, how=how
        )
    if group == "budget":
        ok = _meets(lambda: relax(problem, "budget", cost), side, counts, ps)
        assert c.budget_usd is not None  # (the group exists only with a budget)
        return budget_reason(c.budget_usd, cost, plan, proven=proven and ok, others=others, at_most=at_most, how=how)
    if group == "domain":
        assert w.domain is not None  # the group exists only with a domain
        f = best.measure * (1 + 1e-9)
        ok = _meets(lambda: relax(problem, "domain", f), side, counts, ps)
        b, k = best.ranges.get("batch_wa", [math.nan] * 2), best.ranges.get("workers", [math.nan] * 2)
        (b_lo, b_hi), (k_lo, k_hi) = SpotModel(problem).domain_bounds()
        return Reason(
            "domain",
            "workload.domain.extrapolation",
            w.domain.extrapolation,
            f,
            proven and ok,
            f"workload.domain: no plan inside the validity domain (b_w {b_lo:.6g}-{b_hi:.6g}, |N| "
            f"{k_lo}-{k_hi}) meets {others}; the plans that do have b_w {b[0]:.6g}-{b[1]:.6g} and |N| "
            f"{int(k[0])}-{int(k[1])}; an extrapolation factor of {at_most}{f:.6g} (now "
            f"{w.domain.extrapolation:g}) admits {plan} ({how})",
            plan=plan.to_dict(),
        )
    if group == "iterations":
        assert w.domain is not None  # the group exists only with a domain
        ok = _meets(lambda: relax(problem, "iterations"), side, counts, ps)
        j = float(ev.iterations[0])
        low, high = best.ranges.get("iterations", [math.nan] * 2)
        cap = SpotModel(problem).iteration_cap()
        limits = f"at least {w.domain.min_iterations:g} iterations" + (
            f' and at most {cap:,.0f} (loss_axis "enforce")' if math.isfinite(cap) else ""
        )
        return Reason(
            "domain",
            "workload.domain.min_iterations",
            w.domain.min_iterations,
            None,
            proven and ok,
            f"workload.domain: the domain admits plans needing {limits}; the plans meeting {others} "
            f"need {low:,.0f}-{high:,.0f}, which no extrapolation factor changes; without the iteration "
            f"limits the cheapest is {plan} ({j:,.0f} iterations, ${cost:.6f}; {how})",
            plan=plan.to_dict(),
        )
    if group == "quota":
        over = {label: int(n) for label, n, u in zip(cols.labels, counts, cols.upper) if n > u}
        # a plan outside the raised box exceeds some quota by more than that column was raised
        least = proven and best.measure <= float(np.min(upper + 1 - cols.upper))
        ok = _meets(lambda: relax(problem, "quota", over), side, counts, ps)
        needs = ", ".join(
            f"{n} x {label} but its quota is {int(cols.upper[cols.labels.index(label)])}" for label, n in over.items()
        )
        what = "the fewest extra instances" if least else "a quota raise that suffices"
        return Reason(
            "quota",
            "instance_types.*.quota",
            {label: int(cols.upper[cols.labels.index(label)]) for label in over},
            over,
            least and ok,
            f"quotas: the plan with {what} meeting {others}, {plan}, needs {needs} "
            f"({time_s:,.2f} s, ${cost:.6f}; {how})",
            plan=plan.to_dict(),
        )
    if group == "vcpu_quota":
        used = {
            _family(q): int(counts @ per_column)
            for q, (per_column, _) in zip(c.vcpu_quotas, SpotModel(problem).vcpu_rows)
        }
        over = {k: v for k, v in used.items() if v > next(q.vcpus for q in c.vcpu_quotas if _family(q) == k)}
        ok = _meets(lambda: relax(problem, "vcpu_quota", over), side, counts, ps)
        return Reason(
            "vcpu_quota",
            "constraints.vcpu_quotas",
            {_family(q): q.vcpus for q in c.vcpu_quotas if _family(q) in over},
            over,
            proven and ok,
            f"constraints.vcpu_quotas: the plan with the fewest vCPUs over the quotas meeting {others}, "
            f"{plan}, needs {', '.join(f'{v:,} vCPUs of {k}' for k, v in over.items())} ({how})",
            plan=plan.to_dict(),
        )
    if group == "workers":
        k = int(counts.sum())
        low, high = c.workers
        needed = [min(low, k), None if high is None else max(high, k)]
        ok = _meets(lambda: relax(problem, "workers", tuple(needed)), side, counts, ps)
        return Reason(
            "workers",
            "constraints.workers",
            list(c.workers),
            needed,
            proven and ok,
            f"constraints.workers {list(c.workers)}: the nearest plan meeting {others}, {plan}, has "
            f"{k} workers ({how})",
            plan=plan.to_dict(),
        )
    name = group.removeprefix("constraint:")
    ok = _meets(problem, without_row(side, row_names(side).index(name)), counts, ps)
    return constraint_reason(name, plan, cost, time_s, proven=proven and ok, others=others, how=how)


# ---------------------------------------------------------------------- large spaces: exact solves
def by_exact_solves(problem: SpotProblem, side: SideRows | None, clock: Clock) -> list[Reason]:
    """Each group dropped in an exact solve; the deadline bisected; the budget solved to optimality."""
    from dnnprov.solvers.spot.exact import solve_spot_exact

    c, w = problem.constraints, problem.workload
    names = row_names(side)
    groups = (
        ["deadline"]
        + (["budget"] if c.budget_usd is not None else [])
        + (["domain"] if w.domain is not None else [])
        + ["quota"]
        + (["vcpu_quota"] if c.vcpu_quotas else [])
        + (["workers"] if c.workers != (1, None) else [])
    )
    out: list[Reason] = []
    todo = len(groups) + len(names)
    for group in groups:
        try:
            variant = relax(problem, group)
        except InvalidInputError:  # e.g. doubled quotas beyond the worker limit
            continue
        gap = 0.0 if group == "budget" else FEASIBILITY_GAP
        answer = solve_spot_exact(variant, side=side, gap=gap, clock=share(clock, 1 / max(todo, 1)))
        todo -= 1
        reason = _exact_reason(problem, side, group, answer, clock, solve_spot_exact)
        if reason is not None:
            out.append(reason)
    for i, name in enumerate(names):
        answer = solve_spot_exact(
            problem, side=without_row(side, i), gap=FEASIBILITY_GAP, clock=share(clock, 1 / max(todo, 1))
        )
        todo -= 1
        if answer.plan is not None:
            out.append(
                Reason(
                    "constraint",
                    name,
                    None,
                    None,
                    True,
                    f"user constraint {name!r}: without it {answer.plan} meets every other constraint "
                    f"(${answer.cost:.6f}, {answer.time_s:,.2f} s; an exact solve)",
                    plan=answer.plan.to_dict(),
                )
            )
    if not out:
        out.append(
            unexplained(
                "no single constraint group was shown to be the cause within the time limit "
                "(each was dropped in an exact solve)"
            )
        )
    return out


def _exact_reason(
    problem: SpotProblem, side: SideRows | None, group: str, answer: Any, clock: Clock, solver: Any
) -> Reason | None:
    """The reason for one group from the exact solve without it (``None``: not shown to be a cause)."""
    if answer.plan is None:
        return None
    plan, cost, time_s = answer.plan, answer.cost, answer.time_s
    if group == "deadline":
        # One search by time (solvers/objectives/fastest.py) finds the least time proven, in
        # about one solve's work; the bisection's 13+ exact solves only if it stops early.
        from dnnprov.solvers.objectives.fastest import fastest_within_budget

        least = fastest_within_budget(relax(problem, "deadline", time_s), side=side, clock=share(clock, 0.5))
        if least.proven and least.answer is not None and least.answer.plan is not None and least.time_s is not None:
            return bisected_deadline_reason(
                problem.slo.time_s, least.time_s, least.time_s, least.answer.plan, 1, how="one search by time"
            )

        def solve_at(deadline: float, step: Clock) -> Any:
            return solver(relax(problem, "deadline", deadline), side=side, gap=FEASIBILITY_GAP, clock=step)

        low, high, faster, steps = bisect_deadline(solve_at, problem.slo.time_s, time_s, clock)
        return bisected_deadline_reason(problem.slo.time_s, low, high, faster or plan, steps)
    if group == "budget":
        assert problem.constraints.budget_usd is not None  # (the group exists only with a budget)
        return solved_budget_reason(problem.constraints.budget_usd, answer)
    what = {
        "domain": "dropping the validity domain",
        "quota": "doubling every quota (plus 4)",
        "vcpu_quota": "dropping the vCPU quotas",
        "workers": "dropping constraints.workers",
    }[group]
    needed = None
    if group == "domain":
        d = problem.workload.domain
        assert d is not None  # the group exists only with a domain
        ev = SpotModel(problem).evaluate(np.array([list(plan.counts.values())]), plan.ps)
        needed = float(
            max(extrapolation_needed(ev.batch_wa, *d.batch_wa)[0], extrapolation_needed(ev.workers, *d.workers)[0])
        ) * (1 + 1e-9)
        what += f" (an extrapolation factor of at most {needed:.6g}, now {d.extrapolation:g}, is enough)"
    return Reason(
        group,
        _field(group),
        None,
        needed,
        False,
        f"{_field(group)}: {what} admits {plan} (${cost:.6f}, {time_s:,.2f} s; an exact solve shows "
        "this relaxation suffices, not that it is the least)",
        plan=plan.to_dict(),
    )
