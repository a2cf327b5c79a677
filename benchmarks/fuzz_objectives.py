"""Objectives and Pareto fronts (issue 29) against brute force, and Table I's front in CPU seconds.

    .venv/bin/python benchmarks/fuzz_objectives.py [--count N] [--families a,b] [--seed S]
        [--time-limit S] [--repeats R]

Part 1 times ``dnnprov.pareto`` on Table I's whole front (embedded:spot/paper-table1.json)
with ``time.process_time``, ``--repeats`` times, and checks it: 37 points, all proven,
equal to brute force. Part 2 runs :func:`dnnprov.fuzz.fronts.check_instance` on ``--count``
seeded instances: instance ``k`` is family ``F[k % len(F)]`` with seed ``S + k // len(F)``
(``F``: the chosen families, the nastiest first: ties, deadlines and budgets at a plan, the
reference model's rounding, zero and extreme prices), and each gets five checks against
brute force: the front up to its deadline, the whole front, a front between two front
points' times, the least time under a budget (the instance's, or one exactly at a plan's
or a front point's cost) and a weighted objective (often the slope between two front
points: a tie in value). Findings go to stderr as they come; the tables go to stdout.
Exit status 1 if any answer is wrong (or Table I's front is not the 37 proven points);
give-ups (a limit on a front of thousands of points) are counted, not failures.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
import warnings
import zlib

import numpy as np
from dnnprov.solvers.objectives.front import NO_DEADLINE_S, at_deadline

import dnnprov
from dnnprov import fuzz
from dnnprov.errors import PlausibilityWarning
from dnnprov.fuzz.fronts import CASES, WRONG, brute_front, check_instance, feasible_plans

#: Families checked first (the rest follow in dnnprov.fuzz.FAMILIES order).
NASTY_FIRST = (
    "tied-types",
    "slo-at-plan",
    "budget-at-plan",
    "reference-model",
    "price-decades",
    "price-magnitudes",
    "all-magnitudes",
    "magnitudes-mixed",
    "serverless-deadline",
    "serverless-magnitudes",
    "zero-quota",
    "mixed",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1230, help="instances in all (default 1,230: 30 per family)")
    parser.add_argument("--families", default="", help="comma-separated family names (default: all)")
    parser.add_argument("--seed", type=int, default=1000, help="first seed of every family (default 1000)")
    parser.add_argument("--time-limit", type=float, default=20.0, help="time limit of each front or solve, s")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of Table I's front (default 5)")
    args = parser.parse_args(argv)
    names = [f for f in args.families.split(",") if f] or list(fuzz.FAMILIES)
    unknown = [f for f in names if f not in fuzz.FAMILIES]
    if unknown:
        parser.error(f"unknown families {unknown}; known: {', '.join(fuzz.FAMILIES)}")
    if args.count < 1 or args.repeats < 1:
        parser.error("--count and --repeats must be at least 1")
    args.names = [f for f in NASTY_FIRST if f in names] + [
        f for f in fuzz.FAMILIES if f in names and f not in NASTY_FIRST
    ]
    return args


def table1_front(repeats: int) -> bool:
    """Print Table I's whole front in CPU seconds; whether it is the 37 proven brute-force points."""
    problem = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    seconds = []
    for _ in range(repeats):
        tick = time.process_time()
        front = dnnprov.pareto(problem)
        seconds.append(time.process_time() - tick)
    truth = brute_front(*feasible_plans(at_deadline(problem, NO_DEADLINE_S)))
    right = (
        [(p.time_s, p.cost) for p in front.points] == truth and len(truth) == 37 and all(p.proven for p in front.points)
    )
    print(
        f"Table I whole front: {len(front.points)} points ({sum(p.proven for p in front.points)} proven), "
        f"{front.stats['exact_solves']} exact solves, {'equal to' if right else 'DIFFERENT FROM'} brute force; "
        f"CPU s over {repeats} runs: min {min(seconds):.3f}, median {statistics.median(seconds):.3f}, "
        f"max {max(seconds):.3f} (target: at most 1)\n"
    )
    return right


def table(rows: dict[str, collections.Counter], first: str, *, cpu: bool = True) -> str:
    """A Markdown table: one row per key of ``rows`` and a total (with the CPU seconds when ``cpu``)."""
    kinds = [k for k in (*WRONG, "gave-up") if any(c[k] for c in rows.values())]
    head = [first, "checks", "wrong", *kinds, *(["CPU s"] if cpu else [])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    total: collections.Counter = collections.Counter()
    for name, c in [*rows.items(), ("total", total)]:
        cells = [name, c["checks"], c["wrong"], *(c[k] for k in kinds), *([f"{c['cpu_ms'] / 1000:.1f}"] if cpu else [])]
        lines.append("| " + " | ".join(str(v) for v in cells) + " |")
        if name != "total":
            total.update(c)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run both parts; returns the exit status."""
    args = parse_args(argv)
    warnings.simplefilter("ignore", PlausibilityWarning)  # the families span implausible magnitudes on purpose
    table1_right = table1_front(args.repeats)
    by_family = {name: collections.Counter() for name in args.names}
    by_case = {case: collections.Counter() for case in CASES}
    started, last = time.perf_counter(), 0.0
    for k in range(args.count):
        family, seed = args.names[k % len(args.names)], args.seed + k // len(args.names)
        tick = time.process_time()
        rng = np.random.default_rng([zlib.crc32(family.encode()), seed, 29])
        try:
            out = check_instance(
                fuzz.instance(family, seed), rng, family=family, seed=seed, time_limit_s=args.time_limit
            )
        except Exception as exc:  # noqa: BLE001 (a crash of the method or checker is a finding; the run goes on)
            out = {case: [] for case in CASES}
            out[CASES[0]] = [fuzz.Finding("error", family, seed, f"{type(exc).__name__}: {exc}")]
        cpu_ms = round(1000 * (time.process_time() - tick))
        by_family[family].update(checks=len(out), cpu_ms=cpu_ms)
        for case, findings in out.items():
            by_case[case]["checks"] += 1
            for f in findings:
                print(f, file=sys.stderr, flush=True)
                for c in (by_family[family], by_case[case]):
                    c[f.kind] += 1
                    c["wrong"] += f.kind in WRONG
        now = time.perf_counter() - started
        if now - last >= 10 or k == args.count - 1:
            last = now
            wrong = sum(c["wrong"] for c in by_case.values())
            print(f"{k + 1}/{args.count} instances, {wrong} wrong answers, {now:.0f} s", file=sys.stderr, flush=True)
    print(table(by_case, "check", cpu=False))
    print()
    print(table(by_family, "family"))
    wrong = sum(c["wrong"] for c in by_case.values())
    print(
        f"\n{args.count} instances ({len(args.names)} families, seeds from {args.seed}), "
        f"{sum(c['checks'] for c in by_case.values())} checks: {wrong} wrong; "
        f"{sum(c['cpu_ms'] for c in by_family.values()) / 1000:.1f} CPU s, {time.perf_counter() - started:.1f} s wall"
    )
    return 1 if wrong or not table1_right else 0


if __name__ == "__main__":
    sys.exit(main())
