"""Joint provisioning's certificates over 12 decades of prices (issue 19), against an exhaustive oracle.

Runs the generator and the oracle of tests/solvers/test_joint_verified.py (the product of every
job's columns in exact rational arithmetic, no dnnprov joint code) on ``--count`` random sets and
prints the status counts, the wrong certificates (must be 0: exit 1 otherwise) and the CPU seconds::

    .venv/bin/python benchmarks/joint_magnitudes.py --count 2000 --seed 1

``--priced`` runs instead the priced path (spot jobs whose columns come from exact region
solves, solvers/joint/pricing/) against the product brute force of tests/solvers/test_joint.py
(every plan of every job evaluated by the models), ``--count`` sets in each family of
tests/solvers/test_joint_priced.py's ``FUZZ_FAMILIES``, one JSON line per family::

    .venv/bin/python benchmarks/joint_magnitudes.py --priced --count 2500 --seed 1
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # conftest's generators
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "solvers"))

from test_joint_priced import priced_fuzz
from test_joint_verified import run


def main() -> int:
    """Parse the arguments, run the sets, print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--priced", action="store_true", help="the priced path's families instead")
    args = parser.parse_args()
    started = time.process_time()
    if args.priced:
        wrong = 0
        for name, family in priced_fuzz(args.count, args.seed).items():
            print(json.dumps({"family": name, **family}), flush=True)
            wrong += int(family["wrong"])  # type: ignore[call-overload]
        print(json.dumps({"cpu_seconds": round(time.process_time() - started, 2), "wrong": wrong}))
        return 1 if wrong else 0
    counts = run(args.count, args.seed)
    counts["cpu_seconds"] = round(time.process_time() - started, 2)  # type: ignore[assignment]
    print(json.dumps(counts))
    return 1 if counts["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
