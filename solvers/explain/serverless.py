"""Reasons a serverless problem is infeasible (the method is in :mod:`dnnprov.solvers.explain.infeasibility`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from functools import partial
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
from dnnprov.solvers.search.enumeration import ChunkSizer

from dnnprov.errors import InvalidInputError
from dnnprov.models.serverless import ServerlessModel, ServerlessSideRows
from dnnprov.models.spot import within_budget
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.validation import checks as check
from dnnprov.progress import Clock
from dnnprov.result import Reason, ServerlessPlan

BIG_TIME_S = 1e12
OTHERS = "every other constraint"  # what a relaxation keeps, in words


def reasons(problem: ServerlessProblem, side: ServerlessSideRows | None, clock: Clock, max_plans: int) -> list[Reason]:
    """The reasons ``problem`` (with user rows ``side``) has no plan."""
    _, high = problem.function_range()
    per_n = len(problem.memory_grid()) * (problem.constraints.ps_count[1] - problem.constraints.ps_count[0] + 1)
    if high * per_n <= max_plans:
        cap = int(min(check.MAX_FUNCTIONS, max_plans // per_n, 2 * high + 64))
        return by_enumeration(problem, side, clock, max(cap, high))
    return by_exact_solves(problem, side, clock)


def relax(problem: ServerlessProblem, group: str, value: Any = None) -> ServerlessProblem:
    """``problem`` with one constraint group set to ``value`` (``None``: dropped)."""
    c, w = problem.constraints, problem.workload
    if group == "deadline":
        return problem.replace(time_s=BIG_TIME_S if value is None else value)
    if group == "budget":
        return problem.replace(constraints=dataclasses.replace(c, budget_usd=value))
    if group == "domain":
        domain = None if value is None or w.domain is None else dataclasses.replace(w.domain, extrapolation=value)
        return problem.replace(workload=dataclasses.replace(w, domain=domain))
    if group == "functions":
        low, high = (1, None) if value is None else value
        limit = problem.platform.concurrency_limit if high is None else max(problem.platform.concurrency_limit, high)
        return problem.replace(
            constraints=dataclasses.replace(c, functions=(low, high)),
            platform=dataclasses.replace(problem.platform, concurrency_limit=limit),
        )
    raise ValueError(f"unknown constraint group {group!r}")


def _plan(model: ServerlessModel, n: int, m: int, s: int) -> tuple[ServerlessPlan, float, float]:
    ev = model.evaluate(n, m, s)
    return ServerlessPlan(int(n), int(m), float(ev.local_batch), int(s)), float(ev.time_s), float(ev.cost)


def _plan_at(n: np.ndarray, m: int, s: np.ndarray, i: int) -> tuple[int, int, int]:
    """Plan ``i`` of a chunk (function counts ``n``, memory ``m``, PS counts ``s``)."""
    return int(n[i]), int(m), int(s[i])


def _meets(
    problem: ServerlessProblem | Callable[[], ServerlessProblem],
    side: ServerlessSideRows | None,
    n: int,
    m: int,
    s: int,
) -> bool:
    """Whether the plan meets every constraint of ``problem`` (or of the problem a function builds)."""
    try:
        problem = problem() if callable(problem) else problem
    except InvalidInputError:
        return False
    return bool(ServerlessModel(problem, side).evaluate(n, m, s).feasible)


def by_enumeration(problem: ServerlessProblem, side: ServerlessSideRows | None, clock: Clock, cap: int) -> list[Reason]:
    """Evaluate every (n, m, s) with n up to ``cap``, every constraint group checked on its own."""
    c, w = problem.constraints, problem.workload
    low, high = problem.function_range()
    relaxed = ServerlessModel(
        relax(relax(relax(relax(problem, "deadline"), "budget"), "domain"), "functions", (1, cap))
    )
    original = ServerlessModel(problem)
    names = row_names(side)
    groups = (
        ["deadline"]
        + (["budget"] if c.budget_usd is not None else [])
        + (["domain"] if w.domain is not None else [])
        + (["functions"] if cap > high or low > 1 else [])
        + [f"constraint:{n}" for n in names]
    )
    search = GroupSearch(groups)

    def scan(first: int, last: int) -> bool:
        """Fold every plan with ``first..last`` functions; ``True``: the clock stopped it."""
        n_all, s_all = (
            a.ravel() for a in np.meshgrid(np.arange(first, last + 1), np.arange(c.ps_count[0], c.ps_count[1] + 1))
        )
        sizer = ChunkSizer(clock)
        for m in problem.memory_grid():
            start, done = 0, 0
            while start < len(n_all):
                chunk = sizer.next(done)
                if clock.expired():
                    return True
                n, s = n_all[start : start + chunk], s_all[start : start + chunk]
                start, done = start + len(n), len(n)
                fold(n, m, s)
        return False

    def fold(n: np.ndarray, m: int, s: np.ndarray) -> None:
        """Evaluate plans ``(n, m, s)`` (m one memory size) and fold them into ``search``."""
        ev = relaxed.evaluate(n, m, s)
        ok = {"deadline": ev.time_s <= problem.time_s * (1 + 1e-12)}
        measure = {"deadline": ev.time_s}
        ranges: dict[str, dict[str, np.ndarray]] = {}
        if c.budget_usd is not None:  # (the "budget" group)
            ok["budget"], measure["budget"] = within_budget(ev.cost, c.budget_usd), ev.cost
        if w.domain is not None:  # (the "domain" group)
            d = w.domain
            ok["domain"] = original.inside_domain(n, np.full(len(n), m))
            need = extrapolation_needed(np.full(len(n), float(m)), *d.memory_mb)
            if d.functions is not None:
                need = np.maximum(need, extrapolation_needed(n, *d.functions))
            measure["domain"] = need
            ranges["domain"] = {"memory_mb": np.full(len(n), float(m)), "functions": n.astype(float)}
        if "functions" in groups:
            distance = outside(n, low, high)
            ok["functions"], measure["functions"] = distance == 0, distance
        elif not ((n >= low) & (n <= high)).all():
            raise AssertionError("the function counts left the range without a functions group")
        if side is not None:
            meets = side.row_ok(n, np.full(len(n), m), s)  # the rows of own variables share one answer
            for i, name in enumerate(names):
                ok[f"constraint:{name}"] = meets[:, i]
                measure[f"constraint:{name}"] = ev.cost
        search.add(ev.feasible, ok, measure, ev.cost, partial(_plan_at, n, m, s), ranges)

    per_n = len(problem.memory_grid()) * (c.ps_count[1] - c.ps_count[0] + 1)
    stopped_within = scan(1, high)
    stopped_raised = stopped_within or (cap > high and scan(high + 1, cap))
    if search.contradiction is not None:
        raise AssertionError(f"infeasible was claimed, but plan {search.contradiction} meets every constraint")
    stop = f"the time limit stopped the evaluation after {search.evaluated:,} of "
    within = (
        f"{stop}{high * per_n:,} plans"
        if stopped_within
        else f"proven: all {high * per_n:,} plans up to {high:,} functions evaluated"
    )
    raised = (
        f"{stop}{cap * per_n:,} plans"
        if stopped_raised
        else f"proven: all {cap * per_n:,} plans up to {cap:,} functions evaluated"
    )
    return compose(problem, side, search, cap, within, raised, proven=(not stopped_within, not stopped_raised))


def compose(
    problem: ServerlessProblem,
    side: ServerlessSideRows | None,
    search: GroupSearch,
    cap: int,
    within: str,
    raised: str,
    *,
    proven: tuple[bool, bool],
) -> list[Reason]:
    """Turn the search's best plans into reasons (single groups first, then pairs).

    ``within`` says how the plans up to the function limit were covered, ``raised`` how the
    wider box was; ``proven`` says whether each was covered in full.
    """
    model = ServerlessModel(problem)
    out = []
    low, high = problem.function_range()
    proven_within, proven_raised = proven
    for group in search.groups:
        best = search.best[group]
        if not best.found():
            continue
        n, m, s = best.plan
        plan, time_s, cost = _plan(model, n, m, s)
        how = raised if group == "functions" else within
        covered = proven_raised if group == "functions" else proven_within
        at_most = "" if covered else "at most "
        if group == "deadline":
            ok = _meets(partial(relax, problem, "deadline", time_s), side, n, m, s)
            out.append(
                deadline_reason(
                    problem.time_s, time_s, plan, proven=covered and ok, others=OTHERS, at_most=at_most, how=how
                )
            )
        elif group == "budget":
            budget = problem.constraints.budget_usd
            assert budget is not None  # (a budget group exists only with a budget)
            ok = _meets(partial(relax, problem, "budget", cost), side, n, m, s)
            out.append(
                budget_reason(budget, cost, plan, proven=covered and ok, others=OTHERS, at_most=at_most, how=how)
            )
        elif group == "domain":
            f = best.measure * (1 + 1e-9)
            d = problem.workload.domain
            assert d is not None  # the group exists only with a domain
            ok = _meets(partial(relax, problem, "domain", f), side, n, m, s)
            mem = best.ranges.get("memory_mb", [math.nan] * 2)
            (m_lo, m_hi), _ = model.domain_bounds()
            out.append(
                Reason(
                    "domain",
                    "workload.domain.extrapolation",
                    d.extrapolation,
                    f,
                    covered and ok,
                    f"workload.domain: no plan inside the validity domain ({m_lo:.6g}-{m_hi:.6g} MB) meets "
                    f"every other constraint; the plans that do use {mem[0]:g}-{mem[1]:g} MB; an "
                    f"extrapolation factor of {at_most}{f:.6g} (now {d.extrapolation:g}) admits {plan} ({how})",
                    plan=plan.to_dict(),
                )
            )
        elif group == "functions":
            needed = [min(low, n), max(high, n)]
            least = covered and best.measure <= cap + 1 - high
            ok = _meets(partial(relax, problem, "functions", tuple(needed)), side, n, m, s)
            out.append(
                Reason(
                    "functions",
                    "constraints.functions",
                    [low, high],
                    needed,
                    least and ok,
                    f"constraints.functions / platform.concurrency_limit allow {low}-{high} functions; the "
                    f"nearest plan meeting every other constraint, {plan}, has {n} ({how})",
                    plan=plan.to_dict(),
                )
            )
        else:
            name = group.removeprefix("constraint:")
            ok = _meets(problem, without_row(side, row_names(side).index(name)), n, m, s)
            out.append(constraint_reason(name, plan, cost, time_s, proven=covered and ok, others=OTHERS, how=how))
    if out:
        return out
    for (g, h), best in search.pairs.items():
        if best.found():
            plan, _, cost = _plan(model, *best.plan)
            out.append(
                Reason(
                    "combination",
                    f"{g} + {h}",
                    None,
                    None,
                    proven_raised,
                    f"{g} and {h} cannot hold together: neither alone is the cause, but without both "
                    f"the cheapest plan is {plan} (${cost:.6f}) ({raised})",
                    plan=plan.to_dict(),
                )
            )
    if not out and not proven_raised:
        out.append(unexplained(f"no relaxation was found: {raised}"))
    elif not out:
        out.append(
            unexplained(
                f"no plan (up to {cap:,} functions) meets the platform's limits (timeout, memory grid, "
                f"batch) even without the deadline, budget, domain and user constraints ({raised})",
                proven=True,
            )
        )
    return out


def by_exact_solves(problem: ServerlessProblem, side: ServerlessSideRows | None, clock: Clock) -> list[Reason]:
    """Grids beyond the enumeration limit: the deadline bisected with exact solves, the budget solved."""
    from dnnprov.solvers.serverless_exact import solve_serverless_exact

    out: list[Reason] = []
    free = solve_serverless_exact(relax(problem, "deadline"), side=side, clock=share(clock, 0.3))
    if free.plan is not None and free.time_s is not None:

        def solve_at(deadline: float, step: Clock) -> Any:
            return solve_serverless_exact(relax(problem, "deadline", deadline), side=side, clock=step)

        low, high, faster, steps = bisect_deadline(solve_at, problem.time_s, free.time_s, share(clock, 0.7))
        out.append(bisected_deadline_reason(problem.time_s, low, high, faster or free.plan, steps))
    if problem.constraints.budget_usd is not None:
        answer = solve_serverless_exact(relax(problem, "budget"), side=side, clock=share(clock, 1.0))
        reason = solved_budget_reason(problem.constraints.budget_usd, answer)
        if reason is not None:
            out.append(reason)
    if not out:
        out.append(
            unexplained("neither the deadline nor the budget alone was shown to be the cause within the time limit")
        )
    return out
