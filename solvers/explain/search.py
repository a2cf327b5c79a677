"""The bookkeeping of "why infeasible": the best relaxation of each constraint group over evaluated plans.

An infeasible problem is explained by evaluating plans of a *relaxed* problem (deadline,
budget, domain, quotas and user constraints dropped; the box of counts widened) and
checking each dropped constraint group on its own. For a group G, the plans that meet
every constraint but G show what relaxing G alone would admit; the least relaxation over
them is the group's *measure* at its best plan (the smallest time for the deadline, the
smallest cost for the budget, ...). :class:`GroupSearch` keeps that best plan per group,
and per pair of groups when no group alone explains the infeasibility, chunk after chunk.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dnnprov.progress import Clock
from dnnprov.result import Result, Status


@dataclass
class Best:
    """The best plan seen for one group (or pair): least measure, then least cost."""

    measure: float = math.inf
    cost: float = math.inf
    plan: Any = None
    count: int = 0  # plans the group's relaxation admits
    ranges: dict[str, list[float]] = field(default_factory=dict)

    def found(self) -> bool:
        """Whether some plan meets every constraint but the group's."""
        return self.plan is not None


class GroupSearch:
    """Least relaxation per constraint group over chunks of evaluated plans.

    ``groups`` are the names of the dropped constraint groups; each chunk gives ``base``
    (plans the relaxed problem accepts), one ``ok`` mask per group, the ``measure`` of
    each group (what relaxing it would need per plan), the plans' ``cost`` and a function
    turning a chunk index into a plan. ``ranges`` (optional, per group) name arrays whose
    min and max over the group's admitted plans are kept (e.g. b_w for the domain).
    """

    def __init__(self, groups: list[str]) -> None:
        self.groups = groups
        self.best = {g: Best() for g in groups}
        self.pairs = {pair: Best() for pair in itertools.combinations(groups, 2)}
        self.anything = Best()  # plans the relaxed problem accepts at all
        self.evaluated = 0
        self.contradiction: Any = None  # a plan meeting every constraint (a bug if ever set)

    def add(
        self,
        base: np.ndarray,
        ok: dict[str, np.ndarray],
        measure: dict[str, np.ndarray],
        cost: np.ndarray,
        plan_of: Callable[[int], Any],
        ranges: dict[str, dict[str, np.ndarray]] | None = None,
    ) -> None:
        """Fold one chunk of plans in."""
        self.evaluated += len(base)
        cost = np.where(np.isfinite(cost), cost, math.inf)
        self._keep(self.anything, base, cost, cost, plan_of)
        everything = base.copy()
        for g in self.groups:
            everything &= ok[g]
        if everything.any():
            self.contradiction = plan_of(int(np.flatnonzero(everything)[0]))
        for g in self.groups:
            others = base.copy()
            for h in self.groups:
                if h != g:
                    others &= ok[h]
            self._keep(self.best[g], others, measure[g], cost, plan_of)
            for name, values in (ranges or {}).get(g, {}).items():
                if others.any():
                    low, high = float(values[others].min()), float(values[others].max())
                    kept = self.best[g].ranges.setdefault(name, [math.inf, -math.inf])
                    kept[0], kept[1] = min(kept[0], low), max(kept[1], high)
        for (g, h), best in self.pairs.items():
            others = base.copy()
            for k in self.groups:
                if k not in (g, h):
                    others &= ok[k]
            self._keep(best, others, cost, cost, plan_of)

    @staticmethod
    def _keep(
        best: Best, mask: np.ndarray, measure: np.ndarray, cost: np.ndarray, plan_of: Callable[[int], Any]
    ) -> None:
        if not mask.any():
            return
        best.count += int(mask.sum())
        values = np.where(mask, measure, math.inf)
        low = float(values.min())
        if not math.isfinite(low):
            return
        tied = np.where(mask & (values <= low), cost, math.inf)
        i = int(np.argmin(tied))
        if (low, float(cost[i])) < (best.measure, best.cost):
            best.measure, best.cost, best.plan = low, float(cost[i]), plan_of(i)


def distinct_dollars(limit: float, value: float) -> tuple[str, str]:
    """``limit`` and ``value`` in dollars with the fewest significant digits (at least 6) that
    tell them apart, so that "no plan costs at most $L; the cheapest costs $V" never reads
    as V <= L (issue 33: $0.00879104 against $0.008791)."""
    for digits in range(6, 18):
        a, b = f"{limit:.{digits}g}", f"{value:.{digits}g}"
        if a != b:
            return a, b
    return f"{limit!r}", f"{value!r}"


def extrapolation_needed(value: np.ndarray, low: float, high: float) -> np.ndarray:
    """Least factor f >= 1 with ``value`` in ``[low / f, high * f]`` (validity-domain widening)."""
    value = np.asarray(value, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.maximum(np.maximum(low / value, value / high), 1.0)
    return np.where(np.isfinite(f), f, math.inf)


def outside(value: np.ndarray, low: float, high: float | None) -> np.ndarray:
    """How far ``value`` lies outside ``[low, high]`` (0 inside; ``high`` ``None``: no end)."""
    value = np.asarray(value, dtype=float)
    below = np.maximum(low - value, 0.0)
    return below if high is None else np.maximum(below, value - high)


def share(clock: Clock, part: float) -> Clock:
    """A clock for one step: ``part`` of the time left on ``clock`` (never past it)."""
    return Clock(max(min(clock.remaining() * part, clock.remaining()), 0.0))


def bisect_deadline(
    solve_at: Callable[[float, Clock], Result], low: float, high: float, clock: Clock, tolerance: float = 1e-6
) -> tuple[float, float, Any, int]:
    """The least deadline admitting a plan, between ``low`` (no plan) and ``high`` (a plan's time).

    ``solve_at(deadline, clock)`` is an exact solve at that deadline. Returns
    ``(at_least, at_most, plan, steps)``: no plan is faster than ``at_least`` (proofs),
    ``plan`` takes ``at_most``; they meet (within ``tolerance``) unless the clock ran out.
    """
    plan, steps = None, 0
    while high - low > tolerance * high and not clock.expired():
        probe = (low + high) / 2
        steps += 1
        answer = solve_at(probe, share(clock, 0.5))
        if answer.plan is not None and answer.time_s is not None and answer.time_s <= probe * (1 + 1e-12):
            high, plan = answer.time_s, answer.plan
        elif answer.status is Status.INFEASIBLE:
            low = probe
        else:
            break
    return low, high, plan, steps
