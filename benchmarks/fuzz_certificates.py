"""Certificate fuzzing (issue 8): ``milp`` against ``enumerate`` on seeded tiny instances.

    .venv/bin/python benchmarks/fuzz_certificates.py [--count N] [--families a,b]
        [--seed S] [--out DIR] [--time-limit S] [--gap G] [--shrink-per-kind K] [--cell-milps]

Instance ``k`` of the run is family ``F[k % len(F)]`` (``F``: the chosen families, in
:data:`dnnprov.fuzz.FAMILIES` order) with seed ``S + k // len(F)``, so
``dnnprov.fuzz.instance(family, seed)`` rebuilds any one of them. Each is solved with
``milp`` and ``enumerate`` and checked by :func:`dnnprov.fuzz.check` (with ``--cell-milps``
spot cells are decided by their MILPs alone, as the tests' ``cell_enumeration=0``). For the first
``--shrink-per-kind`` findings of each (family, kind), the instance is shrunk greedily and
written to ``--out`` (one JSON file each, loadable with ``dnnprov solve FILE``), or printed
to stderr as instance JSON without ``--out``.

Instances with columns in several regions (the ``multi-region`` families) are checked a second
time under the one-region rule (``dnnprov.solvers.regions``: one ``milp`` per region against
brute force over the one-region plans, :mod:`dnnprov.fuzz.regions`), counted in the row
``FAMILY one-region``.

Progress goes to stderr; at the end a Markdown table of counts by family and finding kind,
with the CPU seconds of generating and checking (shrinking apart), goes to stdout. Exit status 1 if any wrong certificate was found.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import warnings
from pathlib import Path

from dnnprov.solvers.spot.exact import solve_spot_exact

import dnnprov
from dnnprov import fuzz
from dnnprov.errors import PlausibilityWarning
from dnnprov.fuzz import regions
from dnnprov.result import Status


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000, help="instances in all (default 10,000)")
    parser.add_argument("--families", default="", help="comma-separated family names (default: all)")
    parser.add_argument("--seed", type=int, default=1000, help="first seed of every family (default 1000)")
    parser.add_argument("--out", type=Path, help="write shrunk reproducing instances here (default: print them)")
    parser.add_argument("--time-limit", type=float, default=10.0, help="milp time limit per instance, s")
    parser.add_argument(
        "--gap",
        type=float,
        default=0.0,
        help="relative gap for milp (default 0: prove optimality); with a gap, 'feasible' plans must be within it",
    )
    parser.add_argument(
        "--cell-milps",
        action="store_true",
        help="decide every spot cell by its MILPs (no outright evaluation of small cells), "
        "to exercise that path; expect give-ups on degenerate large boxes; shrinking "
        "re-solves with the default settings",
    )
    parser.add_argument(
        "--shrink-per-kind",
        type=int,
        default=3,
        help="shrink and write (or print) at most this many findings per (family, kind)",
    )
    args = parser.parse_args(argv)
    names = [f for f in args.families.split(",") if f] or list(fuzz.FAMILIES)
    unknown = [f for f in names if f not in fuzz.FAMILIES]
    if unknown:
        parser.error(f"unknown families {unknown}; known: {', '.join(fuzz.FAMILIES)}")
    if args.count < 1:
        parser.error("--count must be at least 1")
    args.names = [f for f in fuzz.FAMILIES if f in names]
    return args


def table(names: list[str], counts: dict[str, collections.Counter], cpu: dict[str, float]) -> str:
    """Markdown table: instances, oracle verdicts and finding kinds per family."""
    kinds = [k for k in (*fuzz.WRONG_CERTIFICATES, *fuzz.OTHER_KINDS) if any(c[k] for c in counts.values())]
    head = ["family", "instances", "optimal", "infeasible", "wrong", *kinds, "CPU s"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    total: collections.Counter = collections.Counter()
    for name in names + ["total"]:
        c = total if name == "total" else counts[name]
        seconds = sum(cpu.values()) if name == "total" else cpu[name]
        cells = [
            name,
            c["instances"],
            c["optimal"],
            c["infeasible"],
            c["wrong"],
            *(c[k] for k in kinds),
            f"{seconds:.1f}",
        ]
        rows.append("| " + " | ".join(str(v) for v in cells) + " |")
        if name != "total":
            total.update(c)
    return "\n".join(rows)


def tally(c: collections.Counter, verdict: Status, findings: list[fuzz.Finding]) -> None:
    """Count one checked instance: the oracle's verdict, whether it was wrong, each finding kind."""
    c["instances"] += 1
    c[verdict.value if verdict in (Status.OPTIMAL, Status.INFEASIBLE) else "oracle"] += 1
    c["wrong"] += any(f.wrong_certificate for f in findings)
    for kind in {f.kind for f in findings}:
        c[kind] += 1


def main(argv: list[str] | None = None) -> int:
    """Run the fuzzer; returns the exit status."""
    args = parse_args(argv)
    # The families span magnitudes no real offer has on purpose: their warnings are expected.
    warnings.simplefilter("ignore", PlausibilityWarning)
    rows = args.names + [f"{n} one-region" for n in args.names if n.startswith("multi-region")]
    counts = {name: collections.Counter() for name in rows}
    cpu = dict.fromkeys(rows, 0.0)
    shrunk: collections.Counter = collections.Counter()
    written: list[Path] = []
    started, last, cpu_started = time.perf_counter(), 0.0, time.process_time()
    for k in range(args.count):
        family, seed = args.names[k % len(args.names)], args.seed + k // len(args.names)
        tick = time.process_time()
        problem = fuzz.instance(family, seed)
        oracle = dnnprov.solve(problem, "enumerate")
        milp = None
        if args.cell_milps and isinstance(problem, dnnprov.SpotProblem):
            milp = solve_spot_exact(problem, cell_enumeration=0, time_limit_s=args.time_limit, gap=args.gap)
        findings = fuzz.check(
            problem, time_limit_s=args.time_limit, gap=args.gap, family=family, seed=seed, milp=milp, oracle=oracle
        )
        cpu[family] += time.process_time() - tick
        tally(counts[family], oracle.status, findings)
        if f"{family} one-region" in counts and regions.applies(problem):
            assert isinstance(problem, dnnprov.SpotProblem)  # applies() says so
            tick = time.process_time()
            truth = regions.one_region_oracle(problem)
            more = regions.check_one_region(
                problem, time_limit_s=args.time_limit, family=family, seed=seed, oracle=truth
            )
            cpu[f"{family} one-region"] += time.process_time() - tick
            tally(counts[f"{family} one-region"], truth.status, more)
            for f in more:
                print(f, "(one region)", file=sys.stderr)
        for f in findings:
            print(f, file=sys.stderr)
            if shrunk[family, f.kind] < args.shrink_per_kind:
                shrunk[family, f.kind] += 1
                small = fuzz.shrink_finding(problem, f, time_limit_s=args.time_limit, gap=args.gap)
                if args.out is None:
                    print(dnnprov.dumps_instance(fuzz.annotate(small, f)), file=sys.stderr)
                else:
                    written.append(fuzz.write_finding(small, f, args.out))
                    print(f"  -> {written[-1]}", file=sys.stderr)
        now = time.perf_counter() - started
        if now - last >= 5 or k == args.count - 1:
            last = now
            wrong = sum(c["wrong"] for c in counts.values())
            print(f"{k + 1}/{args.count} instances, {wrong} with wrong certificates, {now:.0f} s", file=sys.stderr)
    print(table(rows, counts, cpu))
    print(
        f"\n{args.count} instances, seed {args.seed}, gap {args.gap:g}: {sum(cpu.values()):.1f} CPU s generating and "
        f"checking, {time.process_time() - cpu_started:.1f} CPU s in all with shrinking, "
        f"{time.perf_counter() - started:.1f} s wall; {len(written)} instances written"
    )
    return 1 if any(c["wrong"] for c in counts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
