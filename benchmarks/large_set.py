"""Proof times on a benchmark instance set, in process CPU seconds (issue 10).

    .venv/bin/python benchmarks/large_set.py [FOLDER] [--time-limit S] [--method milp]

Solves every instance file of FOLDER (default data/benchmarks/large) one after the other in
this process and prints one line per instance (status, cost, gap, CPU s, wall s, cells,
MILPs) and then the median and worst CPU seconds. CPU time is steadier than wall time on a
shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import dnnprov


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default="data/benchmarks/large", type=Path)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--method", default="milp")
    args = parser.parse_args()
    files = sorted(p for p in args.folder.glob("*.json") if p.name != "index.json")
    cpu_times = []
    proven = 0
    print(f"{'instance':<18} {'status':<8} {'cost':>12} {'gap %':>7} {'CPU s':>7} {'wall s':>7} {'cells':>6} {'MILPs':>6}")
    for path in files:
        problem = dnnprov.read_instance(path)
        cpu, wall = time.process_time(), time.perf_counter()
        result = dnnprov.solve(problem, args.method, time_limit_s=args.time_limit)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        cpu_times.append(cpu)
        proven += result.status.value in ("optimal", "infeasible")
        gap = "-" if result.gap is None else f"{100 * result.gap:.2f}"
        cost = "-" if result.cost is None else f"{result.cost:.6f}"
        print(f"{path.stem:<18} {result.status.value:<8} {cost:>12} {gap:>7} {cpu:7.2f} {wall:7.2f} "
              f"{result.stats.get('cells', '-'):>6} {result.stats.get('milps', '-'):>6}", flush=True)
    print(f"\n{proven}/{len(files)} proven; CPU s median {statistics.median(cpu_times):.2f}, "
          f"worst {max(cpu_times):.2f}, total {sum(cpu_times):.1f}")


if __name__ == "__main__":
    main()
