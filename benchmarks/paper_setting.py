"""The paper's setting (7 Table III types x quota 10), many SLOs in one process (issue 10).

    .venv/bin/python benchmarks/paper_setting.py [--losses 12] [--deadlines 9]

Solves the embedded ``spot/paper-table3-overhead-7x10.json`` for every SLO of a grid
(losses 0.62-0.95 x deadlines 1,200-6,000 s; 12 x 9 = 108 by default) with the paper's
heuristic and with ``milp``, after one warm-up solve (imports and first HiGHS call
excluded), and prints the process CPU seconds of each method in total, the per-SLO median
and the ratio milp / heuristic, with how many SLOs milp proved and how often it was cheaper.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import dnnprov

INSTANCE = "spot/paper-table3-overhead-7x10.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--losses", type=int, default=12)
    parser.add_argument("--deadlines", type=int, default=9)
    args = parser.parse_args()
    base = dnnprov.read_instance(dnnprov.embedded_instance(INSTANCE))
    dnnprov.solve(base, "milp")                               # warm-up
    slos = [(float(loss), float(t)) for loss in np.linspace(0.62, 0.95, args.losses)
            for t in np.linspace(1200, 6000, args.deadlines)]
    seconds = {"heuristic": [], "milp": []}
    proven = cheaper = feasible = 0
    for loss, t in slos:
        problem = base.replace(slo=dnnprov.SpotSLO(loss=loss, time_s=t))
        results = {}
        for method in seconds:
            cpu = time.process_time()
            results[method] = dnnprov.solve(problem, method)
            seconds[method].append(time.process_time() - cpu)
        exact, heuristic = results["milp"], results["heuristic"]
        proven += exact.status.value in ("optimal", "infeasible")
        feasible += exact.plan is not None
        if exact.cost is not None and (heuristic.cost is None or exact.cost < heuristic.cost * (1 - 1e-9)):
            cheaper += 1
    total = {m: sum(v) for m, v in seconds.items()}
    print(f"{len(slos)} SLOs on {INSTANCE}: milp proved {proven}, {feasible} feasible, "
          f"cheaper than the heuristic on {cheaper}")
    for method, values in seconds.items():
        print(f"  {method:<10} total {total[method]:.3f} CPU s, median {1000 * statistics.median(values):.1f} ms, "
              f"worst {1000 * max(values):.1f} ms")
    print(f"  ratio milp / heuristic (totals): {total['milp'] / total['heuristic']:.2f}")


if __name__ == "__main__":
    main()
