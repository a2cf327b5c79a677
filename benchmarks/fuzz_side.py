"""Own side variables (issue 29) against brute force: ``solve_model`` with binaries, 0 wrong.

    .venv/bin/python benchmarks/fuzz_side.py [--count N] [--seed S]

Instance ``k`` is family ``F[k % len(F)]`` (:data:`dnnprov.fuzz.side.FAMILIES`) with seed
``S + k // len(F)``, with one to three side constraints that need binaries
(:func:`dnnprov.fuzz.side.side_case`). ``milp`` (on every other instance with
``cell_enumeration=0``, so that the cell MILPs carry the binaries) and ``enumerate`` are
compared with a brute force that applies the constraints as plain Python
(:func:`dnnprov.fuzz.side.check_case`). Prints the counts and the CPU seconds; exit status 1
on any wrong answer or give-up.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

from dnnprov.errors import PlausibilityWarning
from dnnprov.fuzz.side import FAMILIES, check_case, side_case


def main(argv: list[str] | None = None) -> int:
    """Run the cross-check (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1024, help="instances (default 1,024)")
    parser.add_argument("--seed", type=int, default=0, help="first seed of every family (default 0)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", PlausibilityWarning)
    started = time.process_time()
    wrong = 0
    for k in range(args.count):
        family, seed = FAMILIES[k % len(FAMILIES)], args.seed + k // len(FAMILIES)
        case = side_case(family, seed)
        findings = check_case(case, force_milps=k % 2 == 1)
        if findings:
            wrong += 1
            print(f"{family} seed {seed} ({'; '.join(case.words)}): {findings}", file=sys.stderr)
    print(f"{args.count} instances, {wrong} wrong or given up, {time.process_time() - started:.1f} CPU s")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
