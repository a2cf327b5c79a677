"""Nodes and CPU seconds of the driver's verifying branch and bound, on the code of two source trees.

    .venv/bin/python benchmarks/bnb_nodes.py FILE[,FILE...] --trees before=DIR,after=. [--repeat N]
    .venv/bin/python benchmarks/bnb_nodes.py FILE[,FILE...] --trees before=DIR,after=. --replay

Without ``--replay``: each tree solves each file (``milp``, fresh interpreter, trees alternating
as in ``tail_ab.py``); one line per solve: status, cost, bound, CPU s, the search's LPs, MILPs,
cells, nodes (cells popped), evaluations and splits, and the calls, nodes (HiGHS LP solves) and
CPU s inside ``highs_driver.verified_milp_bound``. The trees' searches
differ once one finds another plan, so ``--replay`` also compares identical searches: the
arguments of every ``verified_milp_bound`` call of the files' solves on the first tree are
recorded, then each tree re-runs exactly those searches (a fresh Highs holding the relaxation,
as ``solve_milp`` sets it up); one line per tree: calls, nodes, CPU s, outcomes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # benchmarks/ is not a package
from tail_ab import TREE_IMPORT, run_child

#: Run in the child: import dnnprov from the tree argv[1] (tail_ab.TREE_IMPORT), then act on argv[2:].
CHILD = (
    TREE_IMPORT
    + r"""
import pickle, time
import highspy, numpy as np
import dnnprov
from dnnprov.solvers import highs_driver as hd
mode, path, record = sys.argv[2], sys.argv[3], sys.argv[4]
inside, nodes, cpu, calls, outcomes = [False], [0], [0.0], [], {}
class Counted(highspy.Highs):
    def run(self):
        nodes[0] += inside[0]
        return super().run()
hd.highspy.Highs = Counted
search = hd.verified_milp_bound
def counted(h, cost, offset, scale, lower, upper, rows, integer, aim, deadline, node_limit=hd.NODE_LIMIT, **kw):
    if mode == "record":
        calls.append((cost, offset, scale, lower, upper, (rows.row, rows.col, rows.value, rows.low, rows.high),
                      integer, aim, node_limit, kw))
    inside[0], started = True, time.process_time()
    try:
        found = search(h, cost, offset, scale, lower, upper, rows, integer, aim, deadline, node_limit, **kw)
    finally:
        inside[0] = False
        cpu[0] += time.process_time() - started
    bound, point = found if isinstance(found, tuple) else (found.bound, found.point)
    kind = "closed" if bound >= aim else "point" if point is not None else "open"
    outcomes[kind] = outcomes.get(kind, 0) + 1
    return found
hd.verified_milp_bound = counted
if mode == "replay":
    searches = pickle.load(open(record, "rb"))
    for cost, offset, scale, lower, upper, parts, integer, aim, node_limit, kw in searches:
        rows, h = hd.SparseRows(*parts), hd.new_highs()
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_, lp.offset_, lp.col_cost_ = len(cost), len(rows.low), offset / scale, cost / scale
        lp.col_lower_, lp.col_upper_, lp.row_lower_, lp.row_upper_ = lower, upper, rows.low, rows.high
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = rows.starts(), rows.col.astype(np.int32), rows.value
        h.setOptionValue("presolve", "off")
        h.passModel(lp)
        known = kw if "cutoff" in search.__code__.co_varnames else {}
        counted(h, cost, offset, scale, lower, upper, rows, integer, aim, time.perf_counter() + 600, node_limit, **known)
    print(f"calls {len(searches)} nodes {nodes[0]} bnb-cpu {cpu[0]:.2f} outcomes {dict(sorted(outcomes.items()))}")
    sys.exit()
started = time.process_time()
result = dnnprov.solve(dnnprov.read_instance(path), "milp", time_limit_s=900)
total = time.process_time() - started
if mode == "record":
    with open(record, "ab") as out:
        pickle.dump(calls, out)
stats = result.stats
print(f"{result.status.value} {result.cost} bound {result.bound} cpu {total:.2f} lps {stats.get('lps')} "
      f"milps {stats.get('milps')} cells {stats.get('cells')} search-nodes {stats.get('nodes')} "
      f"evaluations {stats.get('evaluations')} splits {stats.get('splits')} "
      f"bnb calls {sum(outcomes.values())} nodes {nodes[0]} bnb-cpu {cpu[0]:.2f}")
"""
)


def child(tree: str, mode: str, path: str, record: str) -> str:
    """Run CHILD on ``tree``; its output line (or the error)."""
    return run_child(CHILD, tree, mode, path, record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", help="comma-separated instance files")
    parser.add_argument("--trees", required=True, help="comma-separated NAME=DIR source trees")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--replay", action="store_true", help="re-run the first tree's searches on every tree")
    args = parser.parse_args()
    trees = [item.split("=", 1) for item in args.trees.split(",")]
    files = args.files.split(",")
    if not args.replay:
        for path in files:
            for _ in range(args.repeat):
                for name, tree in trees:
                    print(f"{Path(path).name} {name} {child(tree, 'solve', path, '')}", flush=True)
        return
    with tempfile.TemporaryDirectory() as scratch:
        record = str(Path(scratch) / "searches.pkl")
        for path in files:
            print(
                f"{Path(path).name} recorded on {trees[0][0]}: {child(trees[0][1], 'record', path, record)}", flush=True
            )
        merged = str(Path(scratch) / "all.pkl")
        _merge(record, merged)
        for _ in range(args.repeat):
            for name, tree in trees:
                print(f"replay {name} {child(tree, 'replay', '', merged)}", flush=True)


def _merge(record: str, merged: str) -> None:
    """The per-file lists of searches appended to ``record``, as one list."""
    import pickle

    searches = []
    with open(record, "rb") as source:
        while True:
            try:
                searches += pickle.load(source)
            except EOFError:
                break
    with open(merged, "wb") as out:
        pickle.dump(searches, out)


if __name__ == "__main__":
    main()
