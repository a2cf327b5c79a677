"""Plans and policies chosen together: the plan cheapest under ``mpc`` on the fit period.

This module holds the choice (:class:`PlanChoice`); :func:`dnnprov.control.plan_choice.choose_plan`
makes it, pricing each candidate on the control loop (``dnnprov simulate``'s engine).

The nominal optimum prices a plan as if its spot instances ran undisturbed. Here every
single-type plan (type with traces, workers ``W`` within the quota, PS count in range,
inside the loss model's validity domain, as the solver requires) is priced by running the ``mpc`` policy, planned on the availability model fitted on
``fit_period``, on the control loop over windows drawn in that same period: the mean
cost of its runs, with the joins, notices, refusals and safety net the table leaves out. A
candidate counts only when at least :data:`MIN_MET` of those runs meet T_obj; the
cheapest counts (ties: the smaller plan). The choice is judged elsewhere, on another
period. ``W`` is the most workers the policy may hold (it resizes within ``0..W``), and a
run of the plan starts where the W-worker loss curve starts (docs/revocation.md, the
progress model): more workers give the policy more room but more normalized iterations
to train. The choice is an estimate on the fit period, so the result says ``feasible``,
never ``optimal``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dnnprov.problems.spot import SpotProblem
from dnnprov.result import Result, SpotPlan, Status

MAX_CANDIDATES = 512
#: Share of the fit period's runs a candidate must finish by T_obj.
MIN_MET = 0.99
DEFAULT_RUNS = 40


@dataclass(frozen=True)
class PlanChoice:
    """The chosen plan and every candidate's expected cost."""

    problem: SpotProblem
    plan: SpotPlan | None
    expected_cost: float | None
    candidates: tuple[dict[str, Any], ...]
    source: str
    #: Candidates left unpriced because the time limit came first (0: every one priced).
    unpriced: int = 0
    time_limit_s: float | None = None

    def stopped(self) -> str:
        """What the time limit left out ("" when every candidate was priced)."""
        if not self.unpriced:
            return ""
        return (
            f"time limit of {self.time_limit_s:g} s reached: {len(self.candidates)} candidates priced, "
            f"{self.unpriced} not priced"
        )

    def result(self) -> Result:
        """A solve-style result (a plan document for ``simulate``, ``export``); status
        ``limit`` when the time limit left candidates unpriced."""
        stopped = self.stopped()
        status = Status.LIMIT if stopped else Status.FEASIBLE if self.plan is not None else Status.UNKNOWN
        details = {
            "policy": "mpc",
            "model": self.source,
            "candidates": list(self.candidates),
            "unpriced_candidates": self.unpriced,
        }
        if self.plan is None:
            message = "; ".join(filter(None, ["no candidate plan priced meets T_obj under the model", stopped]))
            return Result(
                status=status,
                method="risk-plan",
                kind="spot",
                model=self.problem.model,
                instance=self.problem.name,
                message=message,
                details=details,
            )
        message = "; ".join(
            filter(None, ["cheapest mean cost under the mpc policy replayed on the fit period", stopped])
        )
        return Result(
            status=status,
            method="risk-plan",
            kind="spot",
            model=self.problem.model,
            instance=self.problem.name,
            plan=self.plan,
            cost=self.expected_cost,
            message=message,
            details=details,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the result's."""
        return self.result().to_dict()

    def summary(self) -> str:
        """Human-readable lines."""
        stopped = [f"  {self.stopped()} (the cheapest of those priced is shown)"] if self.unpriced else []
        if self.plan is None:
            return "\n".join([f"{self.problem.name}: no plan priced meets T_obj under the fitted model", *stopped])
        lines = [
            f"{self.problem.name}: {self.plan} under mpc, expected ${self.expected_cost:.4f} ({self.source})",
            *stopped,
        ]
        ranked = sorted(
            self.candidates, key=lambda c: c["expected_cost"] if c["expected_cost"] is not None else math.inf
        )
        for c in ranked[:5]:
            cost = "cannot meet T_obj" if c["expected_cost"] is None else f"${c['expected_cost']:.4f}"
            lines.append(f"  {c['workers']} x {c['type']}, {c['ps']} PS: {cost}")
        return "\n".join(lines)
