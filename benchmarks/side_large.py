"""At most k instance types on the large set (issue 29): CPU seconds against the plain solve.

    .venv/bin/python benchmarks/side_large.py [--set data/benchmarks/large] [--first N] [--k K]
        [--time-limit S]

For each instance: the plain solve (``dnnprov.solve``, ``milp``), then the Pyomo model with
:func:`dnnprov.formulations.side.at_most_types` ``(m, K)`` solved by ``solve_model``, each
timed with ``time.process_time``. Prints one row per instance (statuses, costs, CPU seconds,
the ratio) and the worst ratio; the issue's target is at most 3. Exit status 1 if a side
solve is not proven (``optimal``, or ``infeasible``: no plan) while its plain solve was, if
its plan uses more than K types, or if the worst ratio is above 3.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

from dnnprov.formulations import side
from dnnprov.formulations.spot import create_spot_model

from dnnprov.dispatch import solve
from dnnprov.errors import PlausibilityWarning
from dnnprov.io.instances import read_instance
from dnnprov.model_solve import solve_model
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import SpotPlan

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", type=Path, default=REPO / "data/benchmarks/large")
    parser.add_argument("--first", type=int, default=None, help="only the first N instances")
    parser.add_argument("--k", type=int, default=2, help="at most this many instance types (default 2)")
    parser.add_argument("--time-limit", type=float, default=120.0, help="per solve, wall seconds")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", PlausibilityWarning)
    files = [f for f in sorted(args.set.glob("*.json")) if f.name != "index.json"][: args.first]
    print(
        f"{'instance':<12} {'plain':<8} {'cost':>12} {'CPU s':>7} {'k types':<8} {'cost':>12} {'CPU s':>7} {'ratio':>6}"
    )
    ratios, bad = [], 0
    for path in files:
        problem = read_instance(path)
        assert isinstance(problem, SpotProblem)
        tick = time.process_time()
        plain = solve(problem, time_limit_s=args.time_limit)
        plain_cpu = time.process_time() - tick
        model = create_spot_model(problem)
        side.at_most_types(model, args.k)
        tick = time.process_time()
        few = solve_model(model, time_limit_s=args.time_limit)
        cpu = time.process_time() - tick
        ratio = cpu / plain_cpu if plain_cpu > 0 else float("inf")
        ratios.append(ratio)
        types = {name for name, n in (few.plan.counts.items() if isinstance(few.plan, SpotPlan) else ()) if n}
        proven = few.status.value in ("optimal", "infeasible")  # infeasible: proven, no plan
        bad += (plain.status.value == "optimal" and not proven) or len(
            {problem.columns().type_names[problem.columns().labels.index(c)] for c in types}
        ) > args.k
        print(
            f"{path.stem:<12} {plain.status.value:<8} {plain.cost or 0:>12.6f} {plain_cpu:>7.2f} "
            f"{few.status.value:<8} {few.cost or 0:>12.6f} {cpu:>7.2f} {ratio:>6.2f}"
        )
    if ratios:
        print(f"worst ratio {max(ratios):.2f} (target: at most 3)")
    return 1 if bad or max(ratios, default=0.0) > 3 else 0


if __name__ == "__main__":
    sys.exit(main())
