"""The paper's setting (7 Table III types x quota 10), many SLOs in one process (issue 10).

    .venv/bin/python benchmarks/paper_setting.py [--losses 12] [--deadlines 9]

Solves the embedded ``spot/paper-table3-overhead-7x10.json`` for every SLO of a grid
(losses 0.62-0.95 x deadlines 1,200-6,000 s; 12 x 9 = 108 by default) with the paper's
heuristic and with ``milp``, after one warm-up solve (imports and first HiGHS call
excluded), and prints the process CPU seconds of each method in total, the per-SLO median
and the ratio milp / heuristic, with how many SLOs milp proved and how often it was cheaper.

:func:`measure` runs the experiment and returns its numbers; ``scale_ladder.py`` calls it
for its ``paper-setting`` rung.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import dnnprov

INSTANCE = "spot/paper-table3-overhead-7x10.json"
METHODS = ("heuristic", "milp")


def measure(losses: int = 12, deadlines: int = 9) -> dict:
    """Solve the ``losses`` x ``deadlines`` SLO grid with both methods; a JSON-ready dict.

    Keys: ``instance``, ``slos`` (per SLO: ``loss``, ``time_s`` and per method ``status``,
    ``cost``, ``plan``, ``seconds``), ``proven`` / ``feasible`` (milp), ``cheaper`` (milp
    cheaper than the heuristic), per method ``total_s``, ``median_s``, ``worst_s``, and
    ``ratio`` (milp total / heuristic total). Seconds are process CPU time.
    """
    base = dnnprov.read_instance(dnnprov.embedded_instance(INSTANCE))
    dnnprov.solve(base, "milp")  # warm-up
    slos = []
    for loss in np.linspace(0.62, 0.95, losses):
        for t in np.linspace(1200, 6000, deadlines):
            problem = base.replace(slo=dnnprov.SpotSLO(loss=float(loss), time_s=float(t)))
            entry: dict = {"loss": float(loss), "time_s": float(t)}
            for method in METHODS:
                started = time.process_time()
                result = dnnprov.solve(problem, method)
                cpu_s = time.process_time() - started
                entry[method] = {
                    "status": result.status.value,
                    "cost": result.cost,
                    "plan": None if result.plan is None else result.plan.to_dict(),
                    "seconds": cpu_s,
                }
            slos.append(entry)
    seconds = {m: [e[m]["seconds"] for e in slos] for m in METHODS}
    total = {m: sum(v) for m, v in seconds.items()}
    pairs = [(e["milp"], e["heuristic"]) for e in slos]
    return {
        "instance": INSTANCE,
        "slos": slos,
        "proven": sum(milp["status"] in ("optimal", "infeasible") for milp, _ in pairs),
        "feasible": sum(milp["plan"] is not None for milp, _ in pairs),
        "cheaper": sum(
            milp["cost"] is not None and (heur["cost"] is None or milp["cost"] < heur["cost"] * (1 - 1e-9))
            for milp, heur in pairs
        ),
        "total_s": total,
        "median_s": {m: statistics.median(v) for m, v in seconds.items()},
        "worst_s": {m: max(v) for m, v in seconds.items()},
        "ratio": total["milp"] / total["heuristic"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--losses", type=int, default=12)
    parser.add_argument("--deadlines", type=int, default=9)
    args = parser.parse_args()
    result = measure(args.losses, args.deadlines)
    print(
        f"{len(result['slos'])} SLOs on {INSTANCE}: milp proved {result['proven']}, {result['feasible']} feasible, "
        f"cheaper than the heuristic on {result['cheaper']}"
    )
    for method in METHODS:
        print(
            f"  {method:<10} total {result['total_s'][method]:.3f} CPU s, "
            f"median {1000 * result['median_s'][method]:.1f} ms, worst {1000 * result['worst_s'][method]:.1f} ms"
        )
    print(f"  ratio milp / heuristic (totals): {result['ratio']:.2f}")


if __name__ == "__main__":
    main()
