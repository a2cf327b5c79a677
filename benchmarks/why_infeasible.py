"""What "why infeasible" costs (issue 22): CPU seconds of the reasons on infeasible variants of the paper set.

    .venv/bin/python benchmarks/why_infeasible.py [--time-limit 60] [--fuzz N]

Every spot and serverless instance of ``data/benchmarks/paper`` is made infeasible three
ways (deadline x 0.5, budget at half the proven optimum, every quota 0; serverless: the
first two), solved with ``milp``, and its explanation is timed again on its own
(``time.process_time``, CPU seconds: the machine may be loaded). Prints one row per
variant: the plan space, how the reasons were shown (``enumeration`` or ``exact solves``),
their CPU seconds and kinds. Contract: every reason that names a value is proven within
the time limit; exit 1 otherwise. ``--fuzz N`` then solves the first N certificate-fuzz
instances (:mod:`dnnprov.fuzz`, as ``benchmarks/fuzz_certificates.py`` builds them) with
``milp`` and ``enumerate``, with the reasons and with ``explain`` replaced by the identity,
and prints both CPU totals.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from dnnprov.solvers.explain import infeasibility
from dnnprov.solvers.explain.infeasibility import ENUMERATION_PLANS
from dnnprov.solvers.search.enumeration import spot_space_size

import dnnprov
from dnnprov import Status, fuzz
from dnnprov.progress import Clock

ROOT = Path(__file__).resolve().parents[1]


def variants(problem: dnnprov.SpotProblem | dnnprov.ServerlessProblem, optimum: float) -> dict[str, object]:
    """The infeasible variants of one instance."""
    if isinstance(problem, dnnprov.SpotProblem):
        return {
            "deadline x0.5": problem.replace(slo=dataclasses.replace(problem.slo, time_s=problem.slo.time_s / 2)),
            "budget optimum/2": problem.replace(
                constraints=dataclasses.replace(problem.constraints, budget_usd=optimum / 2)
            ),
            "quotas 0": problem.replace(
                instance_types=tuple(dataclasses.replace(t, quota=0) for t in problem.instance_types)
            ),
        }
    return {
        "deadline x0.5": problem.replace(time_s=problem.time_s / 2),
        "budget optimum/2": problem.replace(
            constraints=dataclasses.replace(problem.constraints, budget_usd=optimum / 2)
        ),
    }


def serverless_space(problem: dnnprov.ServerlessProblem) -> int:
    """Plans of the (n, m, s) grid."""
    low, high = problem.function_range()
    ps_low, ps_high = problem.constraints.ps_count
    return (high - low + 1) * len(problem.memory_grid()) * (ps_high - ps_low + 1)


def fuzz_cost(count: int) -> None:
    """CPU seconds of ``milp`` + ``enumerate`` on ``count`` fuzz instances, with and without the reasons."""
    families = list(fuzz.FAMILIES)
    problems = [fuzz.instance(families[k % len(families)], 1000 + k // len(families)) for k in range(count)]

    def run() -> tuple[float, int]:
        started, infeasible = time.process_time(), 0
        for problem in problems:
            infeasible += dnnprov.solve(problem, "milp", time_limit_s=10).status is Status.INFEASIBLE
            dnnprov.solve(problem, "enumerate")
        return time.process_time() - started, infeasible

    with_reasons, infeasible = run()
    kept = infeasibility.explain
    infeasibility.explain = lambda result, problem, **_: result
    try:
        without, _ = run()
    finally:
        infeasibility.explain = kept
    print(
        f"fuzz: {count} instances, {infeasible} infeasible: CPU {with_reasons:.2f} s with the reasons, "
        f"{without:.2f} s without"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--fuzz", type=int, default=0, help="also time N fuzz instances with and without reasons")
    args = parser.parse_args()
    failures = 0
    print(f"{'instance':45} {'variant':17} {'plans':>11} {'how':12} {'cpu_s':>7}  reasons")
    for path in sorted((ROOT / "data/benchmarks/paper").glob("*-*.json")):
        problem = dnnprov.read_instance(str(path))
        base = dnnprov.solve(problem, time_limit_s=args.time_limit)
        if base.cost is None:
            continue
        for name, variant in variants(problem, base.cost).items():
            result = dnnprov.solve(variant, time_limit_s=args.time_limit)
            if result.status is not Status.INFEASIBLE:
                print(f"{problem.name:45} {name:17} {'':>11} {'':12} {'':>7}  ({result.status.value})")
                continue
            bare = dataclasses.replace(result, infeasibility=())
            started = time.process_time()
            explained = infeasibility.explain(bare, variant, clock=Clock(args.time_limit))
            cpu = time.process_time() - started
            spot = isinstance(variant, dnnprov.SpotProblem)
            space = spot_space_size(variant) if spot else serverless_space(variant)
            how = "enumeration" if space <= ENUMERATION_PLANS else "exact solves"
            unproven = [
                r.kind
                for r in explained.infeasibility
                if r.needed is not None and not r.proven and r.kind in ("deadline", "budget")
            ]
            failures += bool(unproven) or not explained.infeasibility
            kinds = ", ".join(f"{r.kind}{'' if r.proven else '?'}" for r in explained.infeasibility)
            print(f"{problem.name:45} {name:17} {space:>11,} {how:12} {cpu:7.3f}  {kinds}")
    print(f"{failures} variants missed the contract (a deadline or budget value not proven)")
    if args.fuzz:
        fuzz_cost(args.fuzz)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
