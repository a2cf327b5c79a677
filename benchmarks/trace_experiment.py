"""λDNN's trace-driven experiment in our terms, and the trace throughput benchmark.

Draws serverless jobs from the Philly trace the way λDNN's simulation did
(``dnnprov.benchsets.generate.trace_jobs``: T_o uniform in [600, 1200] s, workloads from Table 5),
solves each with ``milp`` (proven optimal), ``heuristic`` (λDNN Algorithm 1) and a naive
rule, and prints: the fraction of jobs whose plan meets T_o, the function memory-time
(GB-s) and the cost of each method relative to naive, and the wall time and rate of the
whole run on a process pool.

The naive rule is the paper's "largest memory" strategy without a performance model: every
function gets m_max and the job gets as many functions as the global-batch cap allows at
the CPU-efficient local batch (n = b_g^max / b_l^f), whether or not that meets T_o.

    python benchmarks/trace_experiment.py --count 100000 --workers 2
    python benchmarks/trace_experiment.py --count 100000 --workers 2 --milp-only

Needs ../shared/data (the Philly runtimes); exits with a message when it is absent.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import platform
import sys
import time
from typing import Any

import numpy as np

import dnnprov
from dnnprov.benchsets.generate import trace_jobs
from dnnprov.errors import InvalidInputError


def naive_plan(problem: dnnprov.ServerlessProblem) -> tuple[int, int]:
    """Largest memory, and the most functions the global-batch cap allows (no model)."""
    w = problem.workload
    low, high = problem.function_range()
    n = min(max(w.max_global_batch // w.local_batch, low), high)
    return n, problem.memory_grid()[-1]


def solve_milp_only(data: dict[str, Any]) -> float:
    """milp alone on one job (the throughput run): its solve seconds."""
    result = dnnprov.solve(dnnprov.problem_from_dict(data), "milp")
    if result.status not in (dnnprov.Status.OPTIMAL, dnnprov.Status.INFEASIBLE):
        raise RuntimeError(f"milp ended {result.status.value}: {result.message}")
    return result.solve_seconds


def solve_job(data: dict[str, Any]) -> tuple[float, ...]:
    """(met T_o, GB-s, cost) for milp, heuristic and naive, plus milp's solve seconds."""
    problem = dnnprov.problem_from_dict(data)
    row: list[float] = []
    exact = dnnprov.solve(problem, "milp")
    if exact.status is not dnnprov.Status.OPTIMAL and exact.status is not dnnprov.Status.INFEASIBLE:
        raise RuntimeError(f"{problem.name}: milp ended {exact.status.value}: {exact.message}")
    for result in (exact, dnnprov.solve(problem, "heuristic")):
        if result.plan is None:
            row += [0.0, math.nan, math.nan]
        else:
            plan = result.plan
            row += [1.0, plan.functions * plan.memory_mb / 1024 * result.time_s, result.cost]
    n, m = naive_plan(problem)
    ev = dnnprov.ServerlessModel(problem).evaluate(n, m, problem.constraints.ps_count[0])
    met = bool(ev.feasible)
    row += [float(met), n * m / 1024 * float(ev.time_s), float(ev.cost)]
    row.append(exact.solve_seconds)
    return tuple(row)


def main() -> int:
    """Run the experiment and print the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000, help="trace jobs (default 10,000)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--shared-data", default=None, help="folder of the real data (default ../shared/data)")
    parser.add_argument(
        "--milp-only",
        action="store_true",
        help="throughput run: solve every job with milp only and print the wall time",
    )
    args = parser.parse_args()
    try:
        jobs = list(trace_jobs(seed=args.seed, count=args.count, shared_data=args.shared_data))
    except InvalidInputError as exc:
        print(f"trace_experiment: {exc}", file=sys.stderr)
        return 2
    print(
        f"{len(jobs):,} trace jobs; {args.workers} worker processes; {os.cpu_count()} cores; "
        f"Python {platform.python_version()}"
    )
    started = time.perf_counter()
    with multiprocessing.get_context("forkserver").Pool(args.workers) as pool:
        if args.milp_only:
            seconds = np.array(pool.map(solve_milp_only, jobs, chunksize=200))
            wall = time.perf_counter() - started
            print(
                f"milp, proven optimal: {len(jobs):,} jobs in {wall:.1f} s wall ({len(jobs) / wall:,.0f} jobs/s); "
                f"per job median {1e3 * np.median(seconds):.2f} ms, max {1e3 * seconds.max():.1f} ms"
            )
            return 0
        rows = np.array(pool.map(solve_job, jobs, chunksize=200))
    wall = time.perf_counter() - started
    names = ("milp (proven optimal)", "heuristic (λDNN Alg. 1)", "naive (largest memory)")
    print(f"\n{'method':<26}{'meets T_o':>10}{'GB-s vs naive':>15}{'cost vs naive':>15}{'jobs compared':>15}")
    for i, name in enumerate(names):
        met, gbs, cost = rows[:, 3 * i], rows[:, 3 * i + 1], rows[:, 3 * i + 2]
        both = (met == 1) & (rows[:, 6] == 1)  # this method and naive both meet T_o
        change_gbs = np.sum(gbs[both]) / np.sum(rows[both, 7]) - 1
        change_cost = np.sum(cost[both]) / np.sum(rows[both, 8]) - 1
        print(
            f"{name:<26}{100 * met.mean():>9.2f}%{100 * change_gbs:>14.1f}%{100 * change_cost:>14.1f}%"
            f"{int(both.sum()):>15,}"
        )
    print("\n(GB-s and cost are compared with naive on the jobs where both meet T_o)")
    print(
        f"milp solve time per job: median {1e3 * np.median(rows[:, 9]):.2f} ms, "
        f"95th percentile {1e3 * np.percentile(rows[:, 9], 95):.2f} ms"
    )
    print(f"wall time {wall:.1f} s for {len(jobs):,} jobs x 3 methods ({len(jobs) / wall:,.0f} jobs/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
