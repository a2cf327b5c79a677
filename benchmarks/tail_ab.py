"""The issue 19 bounds switched on and off on the same instances (CPU seconds): what they buy.

    .venv/bin/python benchmarks/tail_ab.py FILE[,FILE...] [--variants base,new] [--time-limit S] [--repeat N]

``new`` is the solver as it is; ``base`` replaces ``CellBounds.cc_square_secant`` (the deadline
row with R's growth in Q) by ``None`` and ``CellBounds.fast_ratio`` by 0 and sets the split
tolerance back to 1e-3, which is the search before issue 19 but for two changes that prove
nothing new (``refine`` measuring CC looseness against the best bound, cells dropped at the
threshold before their row ranges). Variants alternate per instance and repetition, so a
changing machine load affects both alike. One line per solve: file, variant, status, cost,
CPU seconds, LPs, MILPs.
"""

from __future__ import annotations

import argparse
import time

import dnnprov
from dnnprov.solvers import spot_bounds, spot_exact

NEW = {"cc_square_secant": spot_bounds.CellBounds.cc_square_secant,
       "fast_ratio": spot_bounds.CellBounds.fast_ratio, "split": spot_exact.SPLIT_TOLERANCE}


def use(variant: str) -> None:
    """Switch the issue 19 bounds on (``new``) or off (``base``)."""
    base = variant == "base"
    spot_bounds.CellBounds.cc_square_secant = (lambda self, cell: None) if base else NEW["cc_square_secant"]
    spot_bounds.CellBounds.fast_ratio = (lambda self, cell: 0.0) if base else NEW["fast_ratio"]
    spot_exact.SPLIT_TOLERANCE = 1e-3 if base else NEW["split"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", help="comma-separated instance files")
    parser.add_argument("--variants", default="base,new", help="comma-separated: base, new")
    parser.add_argument("--time-limit", type=float, default=600.0, help="milp wall-clock limit, s")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    for path in args.files.split(","):
        problem = dnnprov.read_instance(path)
        for _ in range(args.repeat):
            for variant in args.variants.split(","):
                use(variant)
                started = time.process_time()
                result = dnnprov.solve(problem, "milp", time_limit_s=args.time_limit)
                print(f"{path} {variant} {result.status.value} {result.cost} cpu {time.process_time() - started:.2f} "
                      f"lps {result.stats.get('lps')} milps {result.stats.get('milps')}", flush=True)


if __name__ == "__main__":
    main()
