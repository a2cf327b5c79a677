"""The reasons spot and serverless explanations share: user rows by name, and the words of the
deadline, budget and user-constraint reasons (:mod:`.spot` and :mod:`.serverless` find the plans).

Each builder takes the plan that shows the relaxation (a :class:`~dnnprov.result.SpotPlan` or
:class:`~dnnprov.result.ServerlessPlan`), ``others`` (the constraints the plan still meets, in
words), ``how`` (how the plans were covered) and ``proven`` (whether the value is shown least).
"""

from __future__ import annotations

from typing import Protocol, Self, TypeVar

from dnnprov.solvers.explain.search import distinct_dollars

from dnnprov.result import Reason, Result, ServerlessPlan, SpotPlan, Status

Plan = SpotPlan | ServerlessPlan


class UserRows(Protocol):
    """The user's constraint rows of either kind (:class:`~dnnprov.models.spot.SideRows`,
    :class:`~dnnprov.models.serverless.ServerlessSideRows`)."""

    @property
    def names(self) -> tuple[str, ...]: ...

    def __len__(self) -> int: ...

    def without(self, i: int) -> Self | None: ...


Rows = TypeVar("Rows", bound=UserRows)


def row_names(side: UserRows | None) -> list[str]:
    """The user constraints' names (``row i`` where a row has none)."""
    if side is None:
        return []
    return [side.names[i] if i < len(side.names) and side.names[i] else f"row {i}" for i in range(len(side))]


def without_row(side: Rows | None, i: int) -> Rows | None:
    """``side`` without its row ``i`` (``None`` when none is left)."""
    return None if side is None else side.without(i)


def deadline_reason(
    limit: float, time_s: float, plan: Plan, *, proven: bool, others: str, at_most: str, how: str
) -> Reason:
    """No plan meets the deadline ``limit``; the fastest meeting ``others`` takes ``time_s``."""
    return Reason(
        "deadline",
        "slo.time_s",
        limit,
        time_s,
        proven,
        f"slo.time_s: no plan finishes within {limit:,g} s; the fastest plan meeting "
        f"{others}, {plan}, needs {at_most}{time_s:,.2f} s ({how})",
        plan=plan.to_dict(),
    )


def budget_reason(
    budget: float, cost: float, plan: Plan, *, proven: bool, others: str, at_most: str, how: str
) -> Reason:
    """No plan costs at most ``budget``; the cheapest meeting ``others`` costs ``cost``."""
    limit, value = distinct_dollars(budget, cost)
    return Reason(
        "budget",
        "constraints.budget_usd",
        budget,
        cost,
        proven,
        f"constraints.budget_usd: no plan costs at most ${limit}; the cheapest plan meeting "
        f"{others}, {plan}, costs {at_most}${value} ({how})",
        plan=plan.to_dict(),
    )


def constraint_reason(
    name: str, plan: Plan, cost: float, time_s: float, *, proven: bool, others: str, how: str
) -> Reason:
    """Without the user constraint ``name`` the cheapest plan meeting ``others`` is ``plan``."""
    return Reason(
        "constraint",
        name,
        None,
        None,
        proven,
        f"user constraint {name!r}: without it the cheapest plan meeting {others} is {plan} "
        f"(${cost:.6f}, {time_s:,.2f} s) ({how})",
        plan=plan.to_dict(),
    )


def bisected_deadline_reason(
    limit: float, low: float, high: float, plan: Plan, steps: int, how: str | None = None
) -> Reason:
    """The least deadline from exact solves bisecting it (or ``how``): ``high`` (``plan``'s), at least ``low``."""
    proven = high - low <= 1e-6 * high
    text = (
        f"{high:,.2f} s ({plan}; proven by {how or f'{steps} exact solves bisecting the deadline'})"
        if proven
        else f"at most {high:,.2f} s ({plan}) and at least {low:,.2f} s (the time limit stopped the "
        f"bisection of exact solves after {steps} steps)"
    )
    return Reason(
        "deadline",
        "slo.time_s",
        limit,
        high,
        proven,
        f"slo.time_s: no plan finishes within {limit:,g} s; the fastest plan meeting every other constraint needs "
        + text,
        plan=plan.to_dict(),
    )


def solved_budget_reason(budget: float, answer: Result) -> Reason | None:
    """The budget from an exact solve without it (``answer``; ``None`` when it has no plan)."""
    if answer.plan is None or answer.cost is None:
        return None
    proven = answer.status is Status.OPTIMAL
    limit, value = distinct_dollars(budget, answer.cost)
    text = (
        f"costs ${value} (proven optimal by an exact solve)"
        if proven
        else f"costs at most ${value} and at least ${answer.bound or 0:.6f} (the time limit stopped the solve)"
    )
    return Reason(
        "budget",
        "constraints.budget_usd",
        budget,
        answer.cost,
        proven,
        f"constraints.budget_usd: no plan costs at most ${limit}; "
        f"the cheapest plan meeting every other constraint, {answer.plan}, {text}",
        plan=answer.plan.to_dict(),
    )


def unexplained(text: str, *, proven: bool = False, field: str = "") -> Reason:
    """No relaxation was shown to be the cause: ``text`` says what was tried."""
    return Reason("unexplained", field, None, None, proven, text)
