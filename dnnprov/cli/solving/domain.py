"""The validity-domain options of ``dnnprov solve`` and ``dnnprov predict``, and the domain's cost.

    --no-domain        drop workload.domain: nothing of it is enforced or flagged
    --extrapolation F  the domain's factor on every axis (per-axis factors of the file dropped)
    --domain-cost      (solve) also solve without the domain; report that optimum and the ratio

:func:`add_domain_options` adds them to a parser, :func:`apply_domain_options` applies them
to a problem read from a file, :func:`solve_with_domain_cost` is ``--domain-cost``
(docs/cli.md, "Validity domain").
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from typing import Any

from dnnprov.dispatch import solve
from dnnprov.errors import InvalidInputError
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.problems.validation import checks as check
from dnnprov.result import Result, Status, finite_or_none

Problem = SpotProblem | ServerlessProblem
#: Statuses whose ``bound`` is a proven lower bound on the optimum (with the plan's cost above it).
PROVEN = (Status.OPTIMAL, Status.FEASIBLE, Status.LIMIT)


def add_domain_options(parser: argparse.ArgumentParser, *, cost: bool = False) -> None:
    """Add ``--no-domain`` and ``--extrapolation F`` (and ``--domain-cost`` when ``cost``)."""
    parser.add_argument(
        "--no-domain",
        action="store_true",
        help="ignore the workload's validity domain (nothing of it enforced or flagged)",
    )
    parser.add_argument(
        "--extrapolation",
        type=float,
        default=None,
        metavar="F",
        help="the domain's extrapolation factor on every axis (overrides the file's factors)",
    )
    if cost:
        parser.add_argument(
            "--domain-cost",
            action="store_true",
            help="also solve without the domain and report its optimum and the cost ratio "
            "(the time limit covers both solves)",
        )


def without_domain(problem: Problem) -> Problem:
    """``problem`` with no validity domain."""
    return problem.replace(workload=dataclasses.replace(problem.workload, domain=None))


def apply_domain_options(problem: Problem, args: argparse.Namespace) -> Problem:
    """``problem`` as ``--no-domain`` / ``--extrapolation F`` ask (unchanged without them)."""
    factor = getattr(args, "extrapolation", None)
    if getattr(args, "no_domain", False):
        if factor is not None:
            raise InvalidInputError("--extrapolation", "widens the domain that --no-domain drops: give one of them")
        if getattr(args, "domain_cost", False):
            raise InvalidInputError(
                "--domain-cost", "compares the domain's optimum with the domain-free one: it goes without --no-domain"
            )
        return without_domain(problem)
    domain = problem.workload.domain
    if domain is None and (factor is not None or getattr(args, "domain_cost", False)):
        option = "--extrapolation" if factor is not None else "--domain-cost"
        raise InvalidInputError(option, "the instance has no workload.domain")
    if factor is None or domain is None:
        return problem
    factor = check.number("--extrapolation", factor, minimum=1)
    # Any: the workload's own kind of domain (mypy's dataclass replace types a union's field as None)
    extended: Any = domain.with_extrapolation(factor)
    return problem.replace(workload=dataclasses.replace(problem.workload, domain=extended))


def solve_with_domain_cost(
    problem: Problem, method: str = "milp", *, time_limit_s: float = 60.0, **options: Any
) -> Result:
    """Solve ``problem`` with its domain, then without; the result's ``details["domain_cost"]``
    says what the domain cost.

    The time limit covers both: the solve with the domain gets half, the one without the
    rest. ``ratio`` is the optimum with the domain over the optimum without when both are
    proven optimal; otherwise ``ratio_bounds`` [low, high] is what the proven bounds imply
    (the optima o_d in [bound_d, cost_d] and o_f in [bound_f, cost_f] give o_d / o_f in
    [bound_d / cost_f, cost_d / bound_f], and o_d >= o_f since the domain only removes
    plans), ``null`` where a side proves nothing (a heuristic, or no plan). ``proven`` says
    whether ``ratio`` is proven.
    """
    if problem.workload.domain is None:
        raise InvalidInputError("workload.domain", "missing: --domain-cost compares with the domain-free optimum")
    started = time.perf_counter()
    with_domain = solve(problem, method, time_limit_s=time_limit_s / 2, **options)
    remaining = max(time_limit_s - (time.perf_counter() - started), 1e-3)
    free = solve(without_domain(problem), method, time_limit_s=remaining, **options)
    report = domain_cost_report(with_domain, free)
    message = f"{with_domain.message}; {report['note']}" if with_domain.message else report["note"]
    return dataclasses.replace(with_domain, details={**with_domain.details, "domain_cost": report}, message=message)


def domain_cost_report(with_domain: Result, free: Result) -> dict[str, Any]:
    """What the domain cost, from a solve with it and one without (see :func:`solve_with_domain_cost`)."""

    def side(result: Result) -> dict[str, Any]:
        return {
            "status": result.status.value,
            "cost": finite_or_none(result.cost),
            "bound": finite_or_none(result.bound) if result.status in PROVEN else None,
            "plan": result.plan.to_dict() if result.plan is not None else None,
            "iterations": result.details.get("iterations"),
        }

    report: dict[str, Any] = {"without_domain": side(free), "ratio": None, "ratio_bounds": None, "proven": False}
    if free.status is Status.INFEASIBLE:
        report["note"] = "domain cost: no plan exists even without the domain (proven)"
        return report
    if with_domain.status is Status.INFEASIBLE and free.plan is not None:
        report["note"] = (
            f"domain cost: no plan inside the domain (proven); without it ${free.cost:.6f} "
            f"by {free.method} ({free.status.value})"
        )
        return report
    if with_domain.plan is None or free.plan is None or with_domain.cost is None or free.cost is None:
        report["note"] = "domain cost: unknown (a solve found no plan within its time limit)"
        return report
    bound_d = with_domain.bound if with_domain.status in PROVEN and with_domain.bound is not None else None
    bound_f = free.bound if free.status in PROVEN and free.bound is not None else None
    low = max(1.0, bound_d / free.cost) if bound_d is not None and free.cost > 0 else 1.0
    high = with_domain.cost / bound_f if bound_f is not None and bound_f > 0 else None
    if with_domain.status is Status.OPTIMAL and free.status is Status.OPTIMAL:
        ratio = with_domain.cost / free.cost if free.cost > 0 else math.inf
        report.update(ratio=finite_or_none(ratio), ratio_bounds=[finite_or_none(ratio)] * 2, proven=True)
        report["note"] = f"domain cost: x{ratio:.6g} (proven; without the domain ${free.cost:.6f}, {_iterations(free)})"
        return report
    report["ratio_bounds"] = [finite_or_none(low), finite_or_none(high)]
    upper = f"{high:.6g}" if high is not None else "unbounded (no proven bound without the domain)"
    report["note"] = (
        f"domain cost: not proven, x{low:.6g} to {upper} (without the domain ${free.cost:.6f} by "
        f"{free.method}, {free.status.value}, {_iterations(free)})"
    )
    return report


def _iterations(result: Result) -> str:
    j = result.details.get("iterations")
    return f"{j:,.0f} iterations" if isinstance(j, (int, float)) and math.isfinite(j) else "iterations n/a"
