"""The summary of batch rows (:mod:`dnnprov.batch.runner`): one line per method with
instances, solved, optimal, failed, the mean cost ratio to the best known plan, and the
median and 95th-percentile solve times.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from dnnprov.dispatch import METHODS
from dnnprov.result import Status

if TYPE_CHECKING:
    import pandas as pd


def method_rank(methods: Sequence[str]) -> Callable[[str], tuple[int, str]]:
    """Sort key of methods: the order given, then the other methods of dnnprov."""
    order = list(methods) + [m for m in METHODS if m not in methods]
    return lambda m: (order.index(m) if m in order else len(order), m)


def best_known(df: pd.DataFrame) -> pd.Series:
    """Cheapest plan cost per path over all methods (NaN where no method found a plan)."""
    has_plan = (df["plan"] != "") & df["cost"].notna()
    return df[has_plan].groupby("path")["cost"].min().reindex(df["path"].unique())


def cost_ratios(df: pd.DataFrame) -> pd.Series:
    """Each row's cost over the best known cost of its path (NaN without a plan)."""
    import pandas as pd

    best = df["path"].map(best_known(df))
    has_plan = (df["plan"] != "") & df["cost"].notna()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(best > 0, df["cost"] / best, np.where(df["cost"] == best, 1.0, np.inf))
    return pd.Series(np.where(has_plan, ratio, np.nan), index=df.index, name="cost_ratio")


SUMMARY_COLUMNS = ("instances", "solved", "optimal", "failed", "mean_cost_ratio", "median_solve_s", "p95_solve_s")


def summarize(df: pd.DataFrame, gap_tol: float = 1e-6) -> pd.DataFrame:
    """One line per method: instances, solved, optimal, failed, mean cost ratio to the best
    known plan of each instance, median and 95th-percentile solve seconds.

    Solved: a plan from a method that ended on its own (not ``limit``), or proven: status
    ``optimal`` or ``infeasible``, or ``limit`` with a plan whose relative gap is at most
    ``gap_tol``. A ``limit`` row whose bound does not prove its plan is not solved.
    """
    import pandas as pd

    ratio = cost_ratios(df)
    has_plan = (df["plan"] != "") & df["cost"].notna()
    limit = df["status"] == Status.LIMIT.value
    closed = limit & has_plan & (df["gap"].astype(float) <= gap_tol)
    solved = (has_plan & ~limit) | closed | df["status"].isin([Status.OPTIMAL.value, Status.INFEASIBLE.value])
    lines = {}
    for method in sorted(df["method"].unique(), key=method_rank(METHODS)):
        mask = df["method"] == method
        secs = df.loc[mask, "solve_seconds"].dropna()
        lines[method] = {
            "instances": int(mask.sum()),
            "solved": int((mask & solved).sum()),
            "optimal": int((mask & (df["status"] == Status.OPTIMAL.value)).sum()),
            "failed": int((mask & (df["status"] == Status.ERROR.value)).sum()),
            "mean_cost_ratio": float(ratio[mask & has_plan].mean()) if (mask & has_plan).any() else math.nan,
            "median_solve_s": float(secs.median()) if len(secs) else math.nan,
            "p95_solve_s": float(secs.quantile(0.95)) if len(secs) else math.nan,
        }
    table = pd.DataFrame.from_dict(lines, orient="index", columns=list(SUMMARY_COLUMNS))
    table.index.name = "method"
    return table


def format_summary(table: pd.DataFrame) -> str:
    """The summary table as aligned text."""
    import pandas as pd

    return table.to_string(
        formatters={
            "mean_cost_ratio": lambda v: "-" if pd.isna(v) else f"{v:.4f}",
            "median_solve_s": lambda v: "-" if pd.isna(v) else f"{v:.3f}",
            "p95_solve_s": lambda v: "-" if pd.isna(v) else f"{v:.3f}",
        }
    )
