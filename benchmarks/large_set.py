"""Proof times on a benchmark instance set, in process CPU seconds (issue 10).

    .venv/bin/python benchmarks/large_set.py [FOLDER] [--time-limit S] [--method milp]

Solves every instance file of FOLDER (default data/benchmarks/large) one after the other in
this process and prints one line per instance (status, cost, gap, CPU s, wall s, cells,
MILPs) and then the median and worst CPU seconds. CPU time is steadier than wall time on a
shared machine.

:func:`measure` does the solving and yields each instance's outcome as it finishes;
``scale_ladder.py`` calls it for its ``large`` rung.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dnnprov
from dnnprov.result import Result, Status

DEFAULT_FOLDER = Path(__file__).resolve().parent.parent / "data" / "benchmarks" / "large"


@dataclass(frozen=True)
class Measured:
    """One solved instance file: the problem, the result and the CPU / wall seconds it took."""

    path: Path
    problem: dnnprov.SpotProblem | dnnprov.ServerlessProblem
    result: Result
    cpu_s: float
    wall_s: float

    @property
    def proven(self) -> bool:
        """Optimality or infeasibility was proven."""
        return self.result.status in (Status.OPTIMAL, Status.INFEASIBLE)


def measure(folder: Path = DEFAULT_FOLDER, time_limit_s: float = 60.0, method: str = "milp") -> Iterator[Measured]:
    """Solve every instance file of ``folder`` (not ``index.json``) in name order, yielding each as it is done."""
    for path in sorted(p for p in folder.glob("*.json") if p.name != "index.json"):
        problem = dnnprov.read_instance(path)
        cpu, wall = time.process_time(), time.perf_counter()
        result = dnnprov.solve(problem, method, time_limit_s=time_limit_s)
        yield Measured(path, problem, result, time.process_time() - cpu, time.perf_counter() - wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default=DEFAULT_FOLDER, type=Path)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--method", default="milp")
    args = parser.parse_args()
    cpu_times = []
    proven = 0
    print(
        f"{'instance':<18} {'status':<8} {'cost':>12} {'gap %':>7} {'CPU s':>7} {'wall s':>7} {'cells':>6} {'MILPs':>6}"
    )
    for done in measure(args.folder, args.time_limit, args.method):
        result = done.result
        cpu_times.append(done.cpu_s)
        proven += done.proven
        gap = "-" if result.gap is None else f"{100 * result.gap:.2f}"
        cost = "-" if result.cost is None else f"{result.cost:.6f}"
        print(
            f"{done.path.stem:<18} {result.status.value:<8} {cost:>12} {gap:>7} {done.cpu_s:7.2f} {done.wall_s:7.2f} "
            f"{result.stats.get('cells', '-'):>6} {result.stats.get('milps', '-'):>6}",
            flush=True,
        )
    print(
        f"\n{proven}/{len(cpu_times)} proven; CPU s median {statistics.median(cpu_times):.2f}, "
        f"worst {max(cpu_times):.2f}, total {sum(cpu_times):.1f}"
    )


if __name__ == "__main__":
    main()
