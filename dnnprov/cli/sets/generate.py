"""The ``generate`` subcommand: seeded benchmark instance sets (docs/benchmarks-sets.md).

Registered in :data:`dnnprov.cli.COMMAND_GROUPS`. Bad input (an unknown set, a
missing ``../shared/data`` for the aws and trace sets) raises
:class:`~dnnprov.errors.InvalidInputError`, which ``dnnprov`` prints as one line with exit
code 2.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from dnnprov.benchsets.generate import DEFAULT_COUNTS, DEFAULT_SEED, SETS, generate
from dnnprov.cli.common import EXIT_OK, output_folder


def cmd_generate(args: argparse.Namespace) -> int:
    """Write one instance set and its index.json; print what was written."""
    started = time.perf_counter()
    if args.out is not None:
        output_folder(args.out)
    paths = generate(args.set, args.out, seed=args.seed, count=args.count, shared_data=args.shared_data)
    elapsed = time.perf_counter() - started
    index = paths[-1]
    data = [p for p in paths[:-1]]
    if args.set == "trace":
        with data[0].open() as handle:
            jobs = sum(1 for _ in handle)
        print(f"wrote {jobs:,} jobs to {data[0]} ({data[0].stat().st_size / 1e6:.1f} MB) in {elapsed:.1f} s")
    else:
        print(f"wrote {len(data)} instance files to {index.parent} in {elapsed:.1f} s")
    print(f"index: {index}")
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``generate`` subcommand."""
    counts = ", ".join(f"{k} {v}" for k, v in DEFAULT_COUNTS.items())
    p = sub.add_parser(
        "generate",
        help="write a seeded benchmark instance set",
        description=f"Write a benchmark instance set, reproducible bit for bit from --seed. Sets: {', '.join(SETS)}.",
    )
    p.add_argument("set", choices=SETS, help="which set")
    p.add_argument(
        "--out",
        type=Path,
        help="folder for the files (default: data/benchmarks/SET; the trace "
        "with a non-default --count: data/benchmarks/trace/generated)",
    )
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"random seed (default {DEFAULT_SEED})")
    p.add_argument("--count", type=int, help=f"instances (small: per kind; trace: jobs); defaults: {counts}")
    p.add_argument(
        "--shared-data",
        type=Path,
        help="folder of the real data for aws-2022, aws-2025, trace (default: <repo>/../shared/data)",
    )
    p.set_defaults(run=cmd_generate)
