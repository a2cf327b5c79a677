"""Tables an OR paper can print from batch rows (``dnnprov report``): ``summary.md``,
``summary.tex`` (booktabs) and ``summary.csv``.

Per method, per method and family, per method, family and size: instances, solved
(proven: :func:`proven`), time-limit hits, failures and the shifted geometric mean of the
CPU time (wall time when the results have none, and the tables say so); and a gap table of
the rows not solved (mean and max relative gap of those with a plan and a bound, rows
without a bound, rows without a plan).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

import numpy as np

from dnnprov.batch.reports.summary import method_rank
from dnnprov.dispatch import METHODS
from dnnprov.errors import InvalidInputError
from dnnprov.result import Status

if TYPE_CHECKING:
    import pandas as pd

#: Default shift of the shifted geometric mean, seconds.
DEFAULT_SHIFT_S = 1.0
#: Default tolerance on the relative gap of a ``limit`` row that counts as proven.
DEFAULT_GAP_TOL = 1e-6
#: Grouping levels of the tables, in order.
LEVELS: tuple[tuple[str, ...], ...] = (("method",), ("method", "family"), ("method", "family", "size"))
TIME_COLUMNS = ("instances", "solved", "plans", "limit", "failed", "sgm_time_s")
GAP_COLUMNS = ("unsolved", "mean_gap", "max_gap", "no_bound", "no_plan")


@dataclass(frozen=True)
class Settings:
    """How the tables are computed: the sgm shift (s), the gap tolerance, the time column,
    and how many rows a CPU-time table times by the wall clock (:func:`wall_fallbacks`)."""

    shift_s: float = DEFAULT_SHIFT_S
    gap_tol: float = DEFAULT_GAP_TOL
    time_column: str = "solve_seconds"
    wall_rows: int = 0

    @property
    def cpu(self) -> bool:
        """Whether the times are CPU times."""
        return self.time_column == "cpu_seconds"


def check_settings(shift_s: float, gap_tol: float) -> None:
    """Raise :class:`InvalidInputError` naming ``shift`` or ``gap_tol`` when out of range."""
    if not (isinstance(shift_s, (int, float)) and math.isfinite(shift_s) and shift_s >= 0):
        raise InvalidInputError("shift", f"must be a finite number of seconds >= 0, got {shift_s!r}")
    if not (isinstance(gap_tol, (int, float)) and math.isfinite(gap_tol) and 0 <= gap_tol < 1):
        raise InvalidInputError("gap_tol", f"must be in [0, 1), got {gap_tol!r}")


def time_column(df: pd.DataFrame) -> str:
    """``cpu_seconds`` when every row that ran to its end (status not ``error``) has a CPU
    time, else ``solve_seconds`` (wall time: older results, or rows resumed from them)."""
    if "cpu_seconds" not in df.columns:
        return "solve_seconds"
    cpu = df["cpu_seconds"].astype(float)
    ran = df["status"] != Status.ERROR.value
    return "cpu_seconds" if cpu.notna().any() and cpu[ran].notna().all() else "solve_seconds"


def row_times(df: pd.DataFrame, column: str | None = None) -> pd.Series:
    """Each row's time in ``column`` (default :func:`time_column`); with CPU times, a row
    without one (a task killed or crashed) counts at its wall time (:func:`wall_fallbacks`)."""
    column = column or time_column(df)
    wall = df["solve_seconds"].astype(float)
    return df["cpu_seconds"].astype(float).fillna(wall) if column == "cpu_seconds" else wall


def wall_fallbacks(df: pd.DataFrame, column: str | None = None) -> int:
    """Rows that :func:`row_times` times by the wall clock although the times are CPU times."""
    if (column or time_column(df)) != "cpu_seconds":
        return 0
    return int((df["cpu_seconds"].isna() & df["solve_seconds"].notna()).sum())


def shifted_geometric_mean(values: Sequence[float] | np.ndarray, shift_s: float = DEFAULT_SHIFT_S) -> float:
    """``(prod (t_i + s))^(1/n) - s`` over the finite values (NaN when there is none).

    Computed through logarithms; negative values count as 0.
    """
    t = np.asarray(values, dtype=float)
    t = np.clip(t[np.isfinite(t)], 0.0, None)
    if not len(t):
        return math.nan
    if shift_s == 0 and (t == 0).any():
        return 0.0
    return float(np.exp(np.mean(np.log(t + shift_s))) - shift_s)


def has_plan(df: pd.DataFrame) -> pd.Series:
    """Rows with a plan (a plan and a cost)."""
    return (df["plan"].fillna("") != "") & df["cost"].notna()


def proven(df: pd.DataFrame, gap_tol: float = DEFAULT_GAP_TOL) -> pd.Series:
    """Rows that solved their instance: status ``optimal`` or ``infeasible``, or ``limit``
    with a plan whose relative gap is at most ``gap_tol`` (the bound proves it)."""
    status = df["status"]
    closed = (status == Status.LIMIT.value) & has_plan(df) & (df["gap"].astype(float) <= gap_tol)
    return status.isin([Status.OPTIMAL.value, Status.INFEASIBLE.value]) | closed


def limit_hits(df: pd.DataFrame, gap_tol: float = DEFAULT_GAP_TOL) -> pd.Series:
    """Rows stopped by the time limit and not proven: status ``limit``, or a task killed
    after its limit (``error`` starting ``timeout:``)."""
    killed = (df["status"] == Status.ERROR.value) & df["error"].fillna("").str.startswith("timeout:")
    return ((df["status"] == Status.LIMIT.value) & ~proven(df, gap_tol)) | killed


# ------------------------------------------------------------------ families and sizes
def family_of(path: str, kind: str = "") -> str:
    """The instance set of a row path: its file's folder name (``large``), with the kind when
    the folder holds more than one (``small/spot``); the folder name alone when it is the kind."""
    file = str(path).split("#", 1)[0]
    folder = PurePosixPath(file.replace("\\", "/")).parent.name or "."
    if not kind or folder == kind:
        return folder
    return f"{folder}/{kind}"


def size_class(n: float) -> str:
    """Power-of-two class of a size: ``1``, ``2``, ``3-4``, ``5-8``, ``9-16``, ... (``-`` for none)."""
    if n is None or not math.isfinite(n) or n < 1:
        return "-"
    n = int(n)
    hi = 1 << max(0, (n - 1).bit_length())
    lo = hi // 2 + 1
    return str(hi) if lo >= hi else f"{lo}-{hi}"


def with_groups(df: pd.DataFrame, sizes: pd.Series | None = None) -> pd.DataFrame:
    """``df`` with ``family`` and ``size`` columns: kept where the rows have them, else the
    family from :func:`family_of` and the size class (:func:`size_class`) of ``sizes``
    (a number per path, e.g. the spot columns of the instance; ``-`` where unknown)."""
    out = df.copy()
    if "family" not in out.columns or (out["family"].fillna("") == "").all():
        kinds = out["kind"].fillna("") if "kind" in out.columns else [""] * len(out)
        out["family"] = [family_of(p, k) for p, k in zip(out["path"], kinds)]
    if "size" not in out.columns or out["size"].isna().all():
        n = out["path"].map(sizes) if sizes is not None else None
        out["size"] = ["-"] * len(out) if n is None else [size_class(v) for v in n.astype(float)]
    out["family"] = out["family"].fillna("").astype(str).replace("", "-")
    out["size"] = out["size"].fillna("-").astype(str)
    return out


# ------------------------------------------------------------------ the tables
def _sort_key(level: Sequence[str]):
    rank = method_rank(METHODS)

    def key(index: tuple) -> tuple:
        parts: list[object] = []
        for name, value in zip(level, index):
            if name == "method":
                parts.append(rank(value))
            elif name == "size":
                lo = str(value).split("-")[0]
                parts.append((0, int(lo), "") if lo.isdigit() else (1, 0, str(value)))
            else:
                parts.append(str(value))
        return tuple(parts)

    return key


def _groups(df: pd.DataFrame, level: Sequence[str]) -> list[tuple[tuple, pd.Index]]:
    """``(key tuple, row index)`` of each group of ``level``."""
    return [(key if isinstance(key, tuple) else (key,), sub.index) for key, sub in df.groupby(list(level), sort=False)]


def time_table(df: pd.DataFrame, level: Sequence[str], settings: Settings) -> pd.DataFrame:
    """One line per group of ``level`` (columns of ``df``, from :func:`with_groups`):
    instances, solved, limit, failed, sgm_time_s."""
    import pandas as pd

    solved = proven(df, settings.gap_tol)
    plans = has_plan(df)
    hits = limit_hits(df, settings.gap_tol)
    failed = (df["status"] == Status.ERROR.value) & ~hits
    times = row_times(df, settings.time_column)
    lines = {}
    for key, idx in _groups(df, level):
        lines[key] = {
            "instances": len(idx),
            "solved": int(solved[idx].sum()),
            "plans": int(plans[idx].sum()),
            "limit": int(hits[idx].sum()),
            "failed": int(failed[idx].sum()),
            "sgm_time_s": shifted_geometric_mean(times[idx].to_numpy(), settings.shift_s),
        }
    keys = sorted(lines, key=_sort_key(level))
    table = pd.DataFrame(
        [lines[k] for k in keys], columns=list(TIME_COLUMNS), index=pd.MultiIndex.from_tuples(keys, names=list(level))
    )
    return table


def gap_table(df: pd.DataFrame, level: Sequence[str], settings: Settings) -> pd.DataFrame:
    """One line per group of ``level``: the rows not solved (:func:`proven`), the mean and
    max relative gap of those with a plan and a bound, those with a plan and no bound, and
    those without a plan."""
    import pandas as pd

    open_ = ~proven(df, settings.gap_tol)
    plan = has_plan(df)
    gap = df["gap"].astype(float)
    bounded = open_ & plan & np.isfinite(gap)
    lines = {}
    for key, idx in _groups(df, level):
        gaps = gap[idx][bounded[idx]]
        lines[key] = {
            "unsolved": int(open_[idx].sum()),
            "mean_gap": float(gaps.mean()) if len(gaps) else math.nan,
            "max_gap": float(gaps.max()) if len(gaps) else math.nan,
            "no_bound": int((open_ & plan & ~np.isfinite(gap))[idx].sum()),
            "no_plan": int((open_ & ~plan)[idx].sum()),
        }
    keys = sorted(lines, key=_sort_key(level))
    return pd.DataFrame(
        [lines[k] for k in keys], columns=list(GAP_COLUMNS), index=pd.MultiIndex.from_tuples(keys, names=list(level))
    )


@dataclass(frozen=True)
class PaperTables:
    """The tables of a report: one time table per level of :data:`LEVELS`, one gap table."""

    settings: Settings
    times: dict[tuple[str, ...], pd.DataFrame]
    gaps: pd.DataFrame

    def long(self) -> pd.DataFrame:
        """Every line of every table in one frame (``summary.csv``): ``level``, method,
        family, size (``all`` above the level), the time columns and the gap columns."""
        import pandas as pd

        frames = []
        for level, table in self.times.items():
            flat = table.reset_index()
            for name in ("family", "size"):
                if name not in flat.columns:
                    flat[name] = "all"
            flat.insert(0, "level", "+".join(level))
            frames.append(flat)
        out = pd.concat(frames, ignore_index=True)
        gaps = self.gaps.reset_index()
        gaps["level"], gaps["family"], gaps["size"] = "method", "all", "all"
        out = out.merge(gaps, on=["level", "method", "family", "size"], how="left")
        for col in ("unsolved", "no_bound", "no_plan"):
            out[col] = out[col].astype("Int64")
        cols = ["level", "method", "family", "size", *TIME_COLUMNS, *GAP_COLUMNS]
        return out[cols]


def paper_tables(
    df: pd.DataFrame,
    sizes: pd.Series | None = None,
    *,
    shift_s: float = DEFAULT_SHIFT_S,
    gap_tol: float = DEFAULT_GAP_TOL,
) -> PaperTables:
    """The time tables per :data:`LEVELS` and the gap table per method of batch rows ``df``.

    ``sizes`` maps a row path to its instance's size (see :func:`with_groups`). Times are
    ``cpu_seconds`` when the rows have them, else ``solve_seconds`` (:func:`time_column`).
    """
    check_settings(shift_s, gap_tol)
    if df.empty:
        raise InvalidInputError("results", "has no rows")
    column = time_column(df)
    settings = Settings(float(shift_s), float(gap_tol), column, wall_fallbacks(df, column))
    rows = with_groups(df, sizes)
    times = {level: time_table(rows, level, settings) for level in LEVELS}
    return PaperTables(settings, times, gap_table(rows, ("method",), settings))


# ------------------------------------------------------------------ Markdown and LaTeX
def _num(value: float, digits: int) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _pct(value: float) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{100 * value:.2f}"


def time_label(settings: Settings) -> str:
    """What the times are: CPU seconds, or wall seconds when the results have no CPU time."""
    if not settings.cpu:
        return "wall time (the results have no CPU time)"
    n = settings.wall_rows
    return "CPU time" + (f" (wall time for {n} killed or crashed task{'s' if n != 1 else ''})" if n else "")


def captions(tables: PaperTables) -> dict[str, str]:
    """One caption per table, each stating the solved rule and the sgm shift."""
    s = tables.settings
    solved = (
        f"solved: optimal, proven infeasible, or stopped at the limit with relative gap <= {s.gap_tol:g}; "
        "plans: rows with a plan; limit: stopped by the time limit unproven (or killed after it); "
        "failed: other errors"
    )
    sgm = f"sgm: shifted geometric mean of the {time_label(s)} of the rows with a time, shift {s.shift_s:g} s"
    names = {
        ("method",): "per method",
        ("method", "family"): "per method and instance family",
        ("method", "family", "size"): "per method, family and size (instance-type columns, by powers of 2)",
    }
    out = {"+".join(level): f"Results {names[level]}. {solved}; {sgm}." for level in tables.times}
    out["gaps"] = (
        f"Unsolved rows per method: mean and max relative gap (%) of those with a plan and a bound "
        f"(no bound: a plan without a bound; no plan: neither plan nor proof; gap tolerance {s.gap_tol:g})."
    )
    return out


def _headers(table: pd.DataFrame, settings: Settings, latex: bool) -> list[str]:
    names = {
        "sgm_time_s": (
            f"sgm time (s, shift {settings.shift_s:g} s)"
            if not latex
            else f"sgm time (s, shift {settings.shift_s:g}\\,s)"
        ),
        "mean_gap": "mean gap (%)",
        "max_gap": "max gap (%)",
        "no_bound": "no bound",
        "no_plan": "no plan",
    }
    return list(table.index.names) + [names.get(c, c) for c in table.columns]


def _cells(table: pd.DataFrame) -> list[list[str]]:
    rows = []
    for key, line in zip(table.index, table.itertuples(index=False)):
        key = key if isinstance(key, tuple) else (key,)
        cells = [str(k) for k in key]
        for col, value in zip(table.columns, line):
            if col == "sgm_time_s":
                cells.append(_num(value, 3))
            elif col in ("mean_gap", "max_gap"):
                cells.append(_pct(value))
            else:
                cells.append(str(int(value)))
        rows.append(cells)
    return rows


def markdown_table(table: pd.DataFrame, settings: Settings) -> str:
    """``table`` as a GitHub Markdown table (labels left, numbers right)."""
    head = _headers(table, settings, latex=False)
    n_keys = table.index.nlevels
    lines = [
        "| " + " | ".join(head) + " |",
        "|" + "|".join(":---" if i < n_keys else "---:" for i in range(len(head))) + "|",
    ]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in _cells(table)]
    return "\n".join(lines)


def latex_escape(text: str) -> str:
    """``text`` with LaTeX's special characters escaped."""
    text = text.replace("<=", "\0")
    special = {
        "\0": r"$\leq$",
        "\\": r"\textbackslash{}",
        "&": r"\&",
        "%": r"\%",
        "$": r"\$",
        "#": r"\#",
        "_": r"\_",
        "{": r"\{",
        "}": r"\}",
        "~": r"\textasciitilde{}",
        "^": r"\textasciicircum{}",
    }
    return "".join(special.get(ch, ch) for ch in text)


def latex_table(table: pd.DataFrame, settings: Settings, caption: str, label: str) -> str:
    """``table`` as a LaTeX ``table`` float with one booktabs ``tabular`` and its caption."""
    head = _headers(table, settings, latex=True)
    n_keys = table.index.nlevels
    spec = "l" * n_keys + "r" * (len(head) - n_keys)
    escaped_head = [h if "\\," in h else latex_escape(h) for h in head]
    lines = [
        "\\begin{table}[htbp]",
        "\\centering",
        "\\small",
        f"\\caption{{{latex_escape(caption)}}}",
        f"\\label{{{label}}}",
        f"\\begin{{tabular}}{{{spec}}}",
        "\\toprule",
        " & ".join(escaped_head) + " \\\\",
        "\\midrule",
    ]
    lines += [" & ".join(latex_escape(c) for c in row) + " \\\\" for row in _cells(table)]
    lines += ["\\bottomrule", "\\end{tabular}", "\\end{table}"]
    return "\n".join(lines)


def _sections(tables: PaperTables) -> list[tuple[str, str, pd.DataFrame]]:
    caps = captions(tables)
    titles = {
        "method": "Per method",
        "method+family": "Per method and family",
        "method+family+size": "Per method, family and size",
    }
    out = [(titles["+".join(level)], caps["+".join(level)], table) for level, table in tables.times.items()]
    out.append(("Gaps of the unsolved rows", caps["gaps"], tables.gaps))
    return out


def markdown(tables: PaperTables, title: str) -> str:
    """``summary.md``: a heading per table, its caption, the table."""
    parts = [f"# {title}", ""]
    for heading, caption, table in _sections(tables):
        parts += [f"## {heading}", "", caption, "", markdown_table(table, tables.settings), ""]
    return "\n".join(parts)


def latex(tables: PaperTables) -> str:
    """``summary.tex``: one ``table`` float per table (needs ``\\usepackage{booktabs}``)."""
    parts = ["% dnnprov report: needs \\usepackage{booktabs}", ""]
    for i, (_, caption, table) in enumerate(_sections(tables)):
        label = "tab:dnnprov-" + ("gaps" if i == len(tables.times) else "-".join(table.index.names))
        parts += [latex_table(table, tables.settings, caption, label), ""]
    return "\n".join(parts)
