"""Least time under a budget on the large set (issue 29): CPU seconds against the plain solve.

    .venv/bin/python benchmarks/objectives_large.py [--set data/benchmarks/large] [--first N]
        [--budget-factor F] [--time-limit S]

For each instance: the plain solve (least cost under the deadline, ``milp``), then
``objective="time"`` with the budget set to F times that proven optimum (default 1.2), each
timed with ``time.process_time``. Prints one row per instance (statuses, exact solves, CPU
seconds, the ratio) and the worst ratio; the issue's target is at most 3. Exit status 1 if
a time answer is not proven while its plain solve was, if its plan breaks the budget, or
if the worst ratio is above 3.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import warnings
from pathlib import Path

import dnnprov
from dnnprov.errors import PlausibilityWarning

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", type=Path, default=REPO / "data/benchmarks/large")
    parser.add_argument("--first", type=int, default=None, help="only the first N instances")
    parser.add_argument("--budget-factor", type=float, default=1.2)
    parser.add_argument("--time-limit", type=float, default=120.0, help="per solve (plain) and per objective run")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", PlausibilityWarning)
    files = sorted(args.set.glob("*.json"))
    files = [f for f in files if f.name != "index.json"][: args.first]
    print(
        f"{'instance':<12} {'plain':<8} {'CPU s':>7} {'time obj':<9} {'solves':>6} {'CPU s':>7} {'ratio':>6}  "
        "time s (plain -> least)"
    )
    ratios, bad = [], 0
    for path in files:
        problem = dnnprov.read_instance(path)
        tick = time.process_time()
        plain = dnnprov.solve(problem, time_limit_s=args.time_limit)
        plain_cpu = time.process_time() - tick
        if plain.cost is None:
            print(f"{path.stem:<12} {plain.status.value:<8} {plain_cpu:>7.2f}  (no plan: skipped)")
            continue
        budgeted = problem.replace(
            constraints=dataclasses.replace(problem.constraints, budget_usd=plain.cost * args.budget_factor)
        )
        tick = time.process_time()
        fastest = dnnprov.solve(budgeted, objective="time", time_limit_s=args.time_limit)
        cpu = time.process_time() - tick
        ratio = cpu / plain_cpu if plain_cpu > 0 else float("inf")
        ratios.append(ratio)
        bad += (plain.status.value == "optimal" and fastest.status.value != "optimal") or (
            fastest.cost is not None and fastest.cost > budgeted.constraints.budget_usd
        )
        times = f"{plain.time_s:,.1f} -> {fastest.time_s:,.1f}" if fastest.time_s is not None else "-"
        print(
            f"{path.stem:<12} {plain.status.value:<8} {plain_cpu:>7.2f} {fastest.status.value:<9} "
            f"{fastest.stats.get('exact_solves', 0):>6} {cpu:>7.2f} {ratio:>6.2f}  {times}",
            flush=True,
        )
    if ratios:
        print(
            f"\n{len(ratios)} instances, budget {args.budget_factor:g} x the least cost: ratio median "
            f"{sorted(ratios)[len(ratios) // 2]:.2f}, worst {max(ratios):.2f} (target: at most 3); "
            f"{bad} not proven or over budget"
        )
    return 1 if bad or max(ratios, default=0.0) > 3 else 0


if __name__ == "__main__":
    sys.exit(main())
