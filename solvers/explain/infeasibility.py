"""Why an instance is infeasible: the constraints that cannot hold together, and what would admit a plan.

:func:`explain` runs after a method proved ``infeasible`` and adds :class:`~dnnprov.result.Reason` s
to the result. Each constraint group (the deadline ``slo.time_s``, the budget, the per-type
quotas, the vCPU quotas, the worker or function range, the validity domain, each user Pyomo
constraint) is dropped on its own; if plans then exist, the group is a cause and the least
relaxation that admits one is its *needed* value: the least time over plans meeting every
other constraint (quotas, budget, domain, loss target), the least cost without the budget,
the quota counts, the extrapolation factor of the domain. When no group alone is a cause,
pairs of groups are dropped.

How it is shown (``Reason.proven``):

* spaces of at most :data:`ENUMERATION_PLANS` plans are evaluated in full with the same
  model every method uses, over a box whose quotas are raised (so a quota relaxation is
  seen): the least values are exact (the box holds every plan of the original quotas; a
  quota relaxation is proven least only when no plan outside the raised box could need
  less);
* larger spot spaces use exact solves (:mod:`dnnprov.solvers.spot.exact`): the needed deadline by
  bisection, each step a proven answer (a plan found lowers the upper end to its time, a
  proof of infeasibility raises the lower end); the budget by one exact solve; the other
  groups by one solve without them, whose plan shows the relaxation suffices (not that it
  is least);
* everything shares what is left of the solve's time limit; a search the limit stops says
  "at most" (a plan) and "at least" (a proof) with the values it has.
"""

from __future__ import annotations

import dataclasses
import time

from dnnprov.solvers.explain import serverless as why_serverless, spot as why_spot

from dnnprov.models.serverless import ServerlessSideRows
from dnnprov.models.spot import SideRows
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.progress import Clock
from dnnprov.result import Reason, Result, Status

#: Plans evaluated outright (the relaxed box); larger spot spaces use exact solves.
ENUMERATION_PLANS = 1_000_000


def explain(
    result: Result,
    problem: SpotProblem | ServerlessProblem,
    *,
    clock: Clock,
    side: SideRows | ServerlessSideRows | None = None,
) -> Result:
    """``result`` with its infeasibility explained (unchanged unless it is ``infeasible``).

    ``side`` are the user's constraints (from the Pyomo model), named in the reasons;
    ``clock`` is the solve's clock: the explanation uses what is left of it.
    """
    if result.status is not Status.INFEASIBLE or result.infeasibility:
        return result
    started = time.perf_counter()
    if isinstance(problem, SpotProblem):
        reasons = why_spot.reasons(problem, side, clock, ENUMERATION_PLANS)  # type: ignore[arg-type]
    else:
        reasons = why_serverless.reasons(problem, side, clock, ENUMERATION_PLANS)  # type: ignore[arg-type]
    stats = {**result.stats, "explain_seconds": round(time.perf_counter() - started, 6)}
    return dataclasses.replace(
        result, infeasibility=tuple(reasons), stats=stats, solve_seconds=max(result.solve_seconds, clock.elapsed())
    )


def explain_revocation_aware(result: Result, problem: SpotProblem, clock: Clock, what: str) -> Result:
    """A robust or risk answer ``infeasible``: is the problem infeasible without revocations too?

    If it is, its reasons are given (no plan meets the constraints even without a
    revocation); if not, the reason is the revocation requirement ``what`` itself, with the
    cheapest plan meeting the constraints without revocations (an exact solve).
    """
    if result.status is not Status.INFEASIBLE:
        return result
    from dnnprov.solvers.spot.exact import solve_spot_exact

    nominal = solve_spot_exact(problem, clock=Clock(max(clock.remaining(), 0.0) / 2))
    if nominal.status is Status.INFEASIBLE:
        reasons = [
            Reason(
                "revocation",
                what,
                None,
                None,
                True,
                "even without revocations no plan meets every constraint (proven by an exact solve):",
            )
        ]
        reasons += why_spot.reasons(problem, None, clock, ENUMERATION_PLANS)
    elif nominal.plan is not None:
        cheapest = "cheapest" if nominal.status is Status.OPTIMAL else "a plan"
        reasons = [
            Reason(
                "revocation",
                what,
                None,
                None,
                True,  # shown by the plan
                f"{what}: no plan meets T_obj under it, though without revocations {cheapest} "
                f"{nominal.plan} meets every constraint (${nominal.cost:.6f}, {nominal.time_s:,.2f} s); "
                "so the revocation requirement is the cause (how much longer slo.time_s would have "
                "to be under it is not computed)",
                plan=nominal.plan.to_dict(),
            )
        ]
    else:
        reasons = [
            Reason(
                "unexplained",
                what,
                None,
                None,
                False,
                f"the time limit stopped the check without revocations ({nominal.message})",
            )
        ]
    return dataclasses.replace(
        result, infeasibility=tuple(reasons), solve_seconds=max(result.solve_seconds, clock.elapsed())
    )
