"""Joint provisioning's certificates at every magnitude (issue 19): fuzz against an exhaustive oracle.

The oracle below enumerates the product of every job's columns in exact rational arithmetic and
imports nothing of dnnprov's joint code. Costs span 12 decades (1e-6 .. 1e6), and some jobs' columns
differ by amounts far below HiGHS's absolute tolerances next to a large common price. A wrong
certificate is: ``optimal`` with a cost above the true optimum by more than the documented tolerance,
``infeasible`` when a joint plan exists, a plan that breaks a limit, or a bound above the optimum.
benchmarks/joint_magnitudes.py runs the same generator on many more sets.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
from dnnprov.formulations.joint import JobColumns
from dnnprov.solvers.joint.provision import solve_columns, solve_many
from test_joint import brute_force, check_plans, random_shared, scaled_prices, small_spot

from dnnprov.result import Status

TOLERANCE = 1e-8  # the documented relative tolerance of joint `optimal` (docs/joint.md)
ROWS = ("quota:a", "quota:b")


def random_set(rng: np.random.Generator) -> tuple[list[JobColumns], dict[str, float]]:
    """2-4 jobs of 1-6 columns, integer uses of 1-2 shared rows, costs over 12 decades."""
    jobs, rows = int(rng.integers(2, 5)), ROWS[: int(rng.integers(1, 3))]
    columns = []
    for j in range(jobs):
        k = int(rng.integers(1, 7))
        base = 10.0 ** rng.uniform(-6, 6)
        if rng.random() < 0.5:  # a large common price, differences near 1e-6 relative or below
            cost = base * (1 + 10.0 ** rng.uniform(-12, -5, size=k))
        else:
            cost = 10.0 ** rng.uniform(-6, 6, size=k)
        usage = {r: rng.integers(0, 6, size=k).astype(float) for r in rows}
        columns.append(JobColumns(f"job{j}", cost, usage))
    limits = {r: float(rng.integers(0, 3 * jobs + 1)) for r in rows}
    return columns, limits


def exhaustive_optimum(columns: list[JobColumns], limits: dict[str, float]) -> Fraction | None:
    """The exact least total cost over the product of the jobs' columns (``None``: no joint plan)."""
    best = None
    for choice in itertools.product(*(range(len(c.cost)) for c in columns)):
        if all(sum(c.usage[r][k] for c, k in zip(columns, choice)) <= limit for r, limit in limits.items()):
            total = sum((Fraction(float(c.cost[k])) for c, k in zip(columns, choice)), Fraction(0))
            best = total if best is None or total < best else best
    return best


def check(columns: list[JobColumns], limits: dict[str, float]) -> tuple[str, str]:
    """(status, verdict) of one set: verdict is ``ok`` or why the certificate is wrong."""
    optimum = exhaustive_optimum(columns, limits)
    solved = solve_columns(columns, limits, deadline=float("inf"))
    status = solved.status.value
    if solved.status is Status.INFEASIBLE:
        return status, "ok" if optimum is None else f"infeasible claimed, optimum {float(optimum)!r}"
    if optimum is None:
        return status, f"{status} claimed for a set without a joint plan"
    if solved.picked is not None:
        picked = [int(k) for k in solved.picked]
        for r, limit in limits.items():
            if sum(c.usage[r][k] for c, k in zip(columns, picked)) > limit:
                return status, f"plan breaks {r}"
        cost = sum((Fraction(float(c.cost[k])) for c, k in zip(columns, picked)), Fraction(0))
        if solved.status is Status.OPTIMAL and cost - optimum > Fraction(TOLERANCE) * cost:
            return status, f"optimal claimed at {float(cost)!r}, optimum {float(optimum)!r}"
    if solved.status is Status.LIMIT and solved.bound is not None and Fraction(solved.bound) > optimum:
        return status, f"bound {solved.bound!r} above optimum {float(optimum)!r}"
    return status, "ok"


def run(count: int, seed: int) -> dict[str, int]:
    """Counts of statuses and wrong certificates over ``count`` random sets."""
    rng = np.random.default_rng(seed)
    counts: dict[str, int] = {"sets": 0, "wrong": 0}
    for _ in range(count):
        status, verdict = check(*random_set(rng))
        counts["sets"] += 1
        counts[status] = counts.get(status, 0) + 1
        if verdict != "ok":
            counts["wrong"] += 1
            counts.setdefault("first_wrong", verdict)  # type: ignore[arg-type]
    return counts


def test_no_wrong_certificate_over_twelve_decades():
    counts = run(150, seed=19)
    assert counts["wrong"] == 0, counts
    # the proofs close (no `limit` without a time limit), and both certificates are exercised
    assert counts.get("optimal", 0) >= 50 and counts.get("infeasible", 0) >= 20, counts
    assert counts.get("limit", 0) == 0, counts


def test_common_large_price_with_tiny_differences():
    """Four columns at 1e5 $ differing by 1e-6 $: the cheapest joint plan is found and proven."""
    cost = 1e5 + np.array([4e-6, 3e-6, 2e-6, 1e-6])
    columns = [
        JobColumns("a", cost, {"quota:a": np.array([0.0, 1, 1, 2])}),
        JobColumns("b", cost[::-1].copy(), {"quota:a": np.array([2.0, 1, 1, 0])}),
    ]
    limits = {"quota:a": 2.0}
    solved = solve_columns(columns, limits)
    optimum = exhaustive_optimum(columns, limits)
    assert solved.status is Status.OPTIMAL
    total = sum(Fraction(float(c.cost[int(k)])) for c, k in zip(columns, solved.picked))
    assert total - optimum <= Fraction(TOLERANCE) * total
    assert Fraction(solved.bound) >= optimum * (1 - Fraction(TOLERANCE))


def test_spot_jobs_with_prices_over_twelve_decades(make_random_spot):
    """solve_many on small spot jobs whose type prices are scaled by 1e-6 .. 1e6 each: equal to the
    product brute force of test_joint (every plan evaluated by the models)."""
    rng = np.random.default_rng(191)
    statuses = []
    for _ in range(10):
        problems = []
        for _ in range(int(rng.integers(2, 4))):
            problems.append(scaled_prices(rng, small_spot(rng, make_random_spot), 6))
        shared = random_shared(rng, problems)
        expected = brute_force(problems, shared)
        result = solve_many(problems, shared=shared)
        statuses.append(result.status)
        if not np.isfinite(expected):
            assert result.status is Status.INFEASIBLE
            continue
        assert result.status is Status.OPTIMAL
        assert expected * (1 - 1e-12) <= result.cost <= expected * (1 + TOLERANCE)
        check_plans(problems, result, shared)
    assert Status.OPTIMAL in statuses
