"""Issue 23's domain target: no extrapolation factor lets milp plan a handful of iterations.

    .venv/bin/python benchmarks/domain_extrapolation.py [--factors 1,1.25,1.5,2,2.5,3]
        [--time-limit 60] [--max-plans 3000000] [--floor 100] [--min-iterations J] [PATHS...]

For every spot instance of the set (default data/benchmarks/aws-2025) and every factor f,
the instance's validity domain gets extrapolation f on every axis and is solved by milp
and, as an independent check of exactness, by exhaustive search: every count vector whose
|N| the domain admits is evaluated with SpotModel (the quota boxes of the set hold up to
1e24 plans, so ``enumerate`` over the whole box is refused; the domain's |N| range makes
most variants small enough). Variants above --max-plans are reported as not
cross-checked. A miss is a milp plan needing fewer than --floor iterations, a milp answer
that is not a proof (limit, error), milp and exhaustive search disagreeing (cost beyond
1e-9 relative, or one infeasible and not the other), or, on every variant, the paper's
heuristic finding a plan cheaper than milp's proven optimum (or one where milp proved none).
Prints one row per (instance, factor) and a summary; exits 1 on any miss. Times are CPU
seconds (time.process_time) of this process.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

import numpy as np

import dnnprov
from dnnprov.batch.runner import find_instance_files
from dnnprov.result import Status

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SET = REPO / "data" / "benchmarks" / "aws-2025"


def timed(problem: dnnprov.SpotProblem, method: str, **options) -> tuple[dnnprov.Result, float]:
    """The result of one solve and its CPU seconds."""
    started = time.process_time()
    result = dnnprov.solve(problem, method, **options)
    return result, time.process_time() - started


def how_many(lower: np.ndarray, upper: np.ndarray, k_low: int, k_high: int) -> int:
    """How many count vectors have lower <= n <= upper and k_low <= sum n <= k_high (a
    dynamic program over the columns: ways[s] = vectors so far summing to s)."""
    ways = [1] + [0] * k_high
    for low, high in zip(lower.tolist(), upper.tolist()):
        ways = [sum(ways[s - n] for n in range(low, min(high, s) + 1)) for s in range(k_high + 1)]
    return sum(ways[k_low:])


def count_vectors(lower: np.ndarray, upper: np.ndarray, k_low: int, k_high: int, limit: int) -> np.ndarray | None:
    """Every count vector with lower <= n <= upper and k_low <= sum n <= k_high, built column
    by column (written here, apart from the solvers' own composition code); ``None`` when
    there are more than ``limit``."""
    if how_many(lower, upper, k_low, k_high) > limit:
        return None
    partial = np.zeros((1, 0), dtype=np.int16)
    sums = np.zeros(1, dtype=np.int64)
    for c in range(len(lower)):
        rest_low = int(lower[c + 1 :].sum())
        grown_parts, grown_sums = [], []
        for n in range(int(lower[c]), int(upper[c]) + 1):
            keep = sums + n + rest_low <= k_high
            grown_parts.append(np.column_stack([partial[keep], np.full(int(keep.sum()), n, dtype=np.int16)]))
            grown_sums.append(sums[keep] + n)
        partial, sums = np.concatenate(grown_parts), np.concatenate(grown_sums)
    return partial[sums >= k_low]


def exhaustive_in_domain(problem: dnnprov.SpotProblem, limit: int) -> tuple[Status, float | None, float]:
    """The cheapest feasible plan by evaluating every plan whose |N| the domain admits
    (SpotModel.evaluate, no solver code); (status, cost, CPU s), LIMIT above ``limit`` plans."""
    started = time.process_time()
    model = dnnprov.SpotModel(problem)
    cols = model.columns
    _, (k_low, k_high) = model.domain_bounds()
    low, high = problem.constraints.ps_count
    plans = count_vectors(
        cols.lower, cols.upper, max(k_low, 1), min(k_high, int(cols.upper.sum())), limit // (high - low + 1)
    )
    if plans is None:
        return Status.LIMIT, None, time.process_time() - started
    best = math.inf
    for ps in range(low, high + 1):
        for chunk in range(0, len(plans), 200_000):
            ev = model.evaluate(plans[chunk : chunk + 200_000].astype(np.int64), ps)
            if ev.feasible.any():
                best = min(best, float(ev.cost[ev.feasible].min()))
    status = Status.OPTIMAL if math.isfinite(best) else Status.INFEASIBLE
    return status, (best if math.isfinite(best) else None), time.process_time() - started


def check_variant(problem: dnnprov.SpotProblem, factor: float, args: argparse.Namespace) -> tuple[list[str], str]:
    """Solve one (instance, factor) variant; returns (misses, the printed row)."""
    domain = problem.workload.domain.with_extrapolation(factor)
    if args.min_iterations is not None:
        domain = dataclasses.replace(domain, min_iterations=args.min_iterations)
    variant = problem.replace(workload=dataclasses.replace(problem.workload, domain=domain))
    milp, milp_s = timed(variant, "milp", time_limit_s=args.time_limit)
    enum_status, enum_cost, enum_s = exhaustive_in_domain(variant, args.max_plans)
    heuristic = dnnprov.solve(variant, "heuristic", time_limit_s=args.time_limit)
    misses = []
    if milp.status is Status.OPTIMAL and heuristic.plan is not None and heuristic.cost < milp.cost * (1 - 1e-9):
        misses.append(f"the heuristic's ${heuristic.cost:.6f} beats milp's proven ${milp.cost:.6f}")
    if milp.status is Status.INFEASIBLE and heuristic.plan is not None:
        misses.append("the heuristic found a plan where milp proved none")
    j = milp.details.get("iterations") if milp.plan is not None else None
    if j is not None and j < args.floor:
        misses.append(f"milp plan needs {j:.1f} iterations (< {args.floor:g})")
    if milp.status not in (Status.OPTIMAL, Status.INFEASIBLE):
        misses.append(f"milp ended {milp.status.value}: {milp.message}")
    if enum_status is Status.LIMIT:
        checked = f"no (over {args.max_plans:,} plans)"
    else:
        if (milp.status is Status.INFEASIBLE) != (enum_status is Status.INFEASIBLE):
            misses.append(f"milp {milp.status.value} but exhaustive search {enum_status.value}")
        elif milp.plan is not None and not math.isclose(milp.cost, enum_cost, rel_tol=1e-9):
            misses.append(f"milp ${milp.cost:.6f} but exhaustive search ${enum_cost:.6f}")
        checked = "yes"
    cost = f"${milp.cost:.6f}" if milp.cost is not None else "-"
    iterations = f"{j:,.0f}" if j is not None else "-"
    b_w = f"{milp.details['batch_wa']:.0f}" if milp.plan is not None else "-"
    row = (
        f"{problem.name:<14} {factor:>5g} {milp.status.value:<10} {cost:>12} {iterations:>9} {b_w:>6} "
        f"{milp_s:>8.2f} {enum_s:>8.2f}  {checked}"
    )
    return misses, row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=[str(DEFAULT_SET)])
    parser.add_argument("--factors", default="1,1.25,1.5,2,2.5,3")
    parser.add_argument("--time-limit", type=float, default=60.0, help="per solve, seconds (default 60)")
    parser.add_argument(
        "--max-plans",
        type=int,
        default=3_000_000,
        help="most plans (count vectors x PS counts) the exhaustive check evaluates",
    )
    parser.add_argument("--floor", type=float, default=100.0, help="fewest iterations a milp plan may need")
    parser.add_argument(
        "--min-iterations",
        type=float,
        default=None,
        help="replace the domains' iteration floor (0: none, to see what the b_w cap alone does)",
    )
    args = parser.parse_args()
    factors = [float(f) for f in args.factors.split(",")]
    problems = [
        p
        for p in (dnnprov.read_instance(f) for f in find_instance_files(args.paths) if f.name != "index.json")
        if isinstance(p, dnnprov.SpotProblem) and p.workload.domain is not None
    ]
    print(
        f"{'instance':<14} {'f':>5} {'milp':<10} {'cost':>12} {'j':>9} {'b_w':>6} {'milp_cpu':>8} "
        f"{'exh_cpu':>8}  cross-checked"
    )
    misses: list[str] = []
    checked = total = 0
    for problem in problems:
        for factor in factors:
            found, row = check_variant(problem, factor, args)
            print(row, flush=True)
            misses += [f"{problem.name} x{factor:g}: {m}" for m in found]
            total += 1
            checked += row.endswith("yes")
    print(
        f"\n{total} variants ({len(problems)} instances x {len(factors)} factors), {checked} cross-checked "
        f"against exhaustive search, {len(misses)} misses"
    )
    for miss in misses:
        print(f"  MISS {miss}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
