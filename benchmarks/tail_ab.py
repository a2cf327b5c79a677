"""A/B runs of the spot ``milp`` on the same instances in the same minutes (CPU seconds).

    .venv/bin/python benchmarks/tail_ab.py FILE[,FILE...] [--variants base,new] [--time-limit S] [--repeat N]
    .venv/bin/python benchmarks/tail_ab.py FILE[,FILE...] --trees before=DIR,after=. [--repeat N]

``--variants``: ``new`` is the solver as it is; ``base`` replaces ``CcBounds.cc_square_secant``
(the deadline row with R's growth in Q) by ``None`` and ``CellBounds.fast_ratio`` by 0 and sets
the split tolerance back to 1e-3, which is the search before issue 19 but for two changes that
prove nothing new (``refine`` measuring CC looseness against the best bound, cells dropped at
the threshold before their row ranges).

``--trees``: each solve runs in a fresh interpreter on the code of a source tree (a checkout or
``git archive`` export of this repository: ``dnnprov/``, ``solvers/``, ``formulations/``,
``data/``), so two commits are compared without switching branches. Variants or trees
alternate per instance and repetition, so a changing machine load affects both alike. One line
per solve: file, variant, status, cost, CPU seconds, LPs, MILPs.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

#: Child preamble: import dnnprov from the source tree given as argv[1] (its rooms mapped as
#: the editable install maps them); shared with bnb_nodes.py.
TREE_IMPORT = r"""
import importlib.abc, importlib.util, sys
from pathlib import Path
root = Path(sys.argv[1]).resolve()
rooms = {"dnnprov": root / "dnnprov", "dnnprov.solvers": root / "solvers",
         "dnnprov.formulations": root / "formulations", "dnnprov.data": root / "data"}
class Tree(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in rooms:
            return importlib.util.spec_from_file_location(name, rooms[name] / "__init__.py",
                                                          submodule_search_locations=[str(rooms[name])])
        return None
sys.meta_path = [Tree()] + [f for f in sys.meta_path if "editable" not in repr(f).lower()]
"""

#: Run in the child: solve argv[2] with the limit argv[3] on the tree argv[1], print one line.
CHILD = (
    TREE_IMPORT
    + r"""
import time
import dnnprov
problem = dnnprov.read_instance(sys.argv[2])
started = time.process_time()
result = dnnprov.solve(problem, "milp", time_limit_s=float(sys.argv[3]))
print(f"{result.status.value} {result.cost} cpu {time.process_time() - started:.2f} "
      f"lps {result.stats.get('lps')} milps {result.stats.get('milps')}")
"""
)


def use(variant: str) -> None:
    """Switch the issue 19 bounds on (``new``) or off (``base``) in this process."""
    from dnnprov.solvers.spot import bounds as spot_bounds, cc as spot_cc, exact as spot_exact

    if not hasattr(use, "new"):
        use.new = {
            "cc_square_secant": spot_cc.CcBounds.cc_square_secant,
            "fast_ratio": spot_bounds.CellBounds.fast_ratio,
            "split": spot_exact.SPLIT_TOLERANCE,
        }
    base = variant == "base"
    spot_cc.CcBounds.cc_square_secant = (lambda self, cell: None) if base else use.new["cc_square_secant"]
    spot_bounds.CellBounds.fast_ratio = (lambda self, cell: 0.0) if base else use.new["fast_ratio"]
    spot_exact.SPLIT_TOLERANCE = 1e-3 if base else use.new["split"]


def run_child(script: str, *args: str) -> str:
    """Run ``script`` (a TREE_IMPORT child) in a fresh interpreter; its output line (or the error)."""
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"error (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}"
    return done.stdout.strip()


def solve_in_tree(tree: Path, path: str, time_limit_s: float) -> str:
    """One solve on the code of ``tree`` in a fresh interpreter; its summary line."""
    return run_child(CHILD, str(tree), path, str(time_limit_s))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", help="comma-separated instance files")
    parser.add_argument("--variants", default="base,new", help="comma-separated: base, new")
    parser.add_argument("--trees", default=None, help="comma-separated NAME=DIR source trees (instead of variants)")
    parser.add_argument("--time-limit", type=float, default=600.0, help="milp wall-clock limit, s")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    trees = [item.split("=", 1) for item in args.trees.split(",")] if args.trees else None
    for path in args.files.split(","):
        for _ in range(args.repeat):
            if trees:
                for name, tree in trees:
                    print(f"{path} {name} {solve_in_tree(Path(tree), path, args.time_limit)}", flush=True)
                continue
            import dnnprov

            problem = dnnprov.read_instance(path)
            for variant in args.variants.split(","):
                use(variant)
                started = time.process_time()
                result = dnnprov.solve(problem, "milp", time_limit_s=args.time_limit)
                print(
                    f"{path} {variant} {result.status.value} {result.cost} cpu {time.process_time() - started:.2f} "
                    f"lps {result.stats.get('lps')} milps {result.stats.get('milps')}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
