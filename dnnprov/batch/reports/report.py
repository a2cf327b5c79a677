"""Figures and an HTML page from a batch results file (``dnnprov report``).

Three figures, each as PNG and SVG: cost and training time against the SLO per method
(one panel per workload, as in spotDNN's Fig. 7 and λDNN's Fig. 11), a Dolan-Moré
performance profile of solve times, and the distribution of cost ratios to the best known
plan. The SLO and workload of a row are read from the instance file its ``path`` names.
Plot functions take an optional ``ax``/``axes`` and return the figure; matplotlib is used
through :class:`~matplotlib.figure.Figure` only (no pyplot state, no GUI backend).
"""

from __future__ import annotations

import dataclasses
import hashlib
import html
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dnnprov.batch.reports.tables import (
    DEFAULT_GAP_TOL,
    DEFAULT_SHIFT_S,
    PaperTables,
    Settings,
    captions,
    latex,
    markdown,
    paper_tables,
    proven,
    row_times,
    time_column,
    time_label,
    wall_fallbacks,
)
from dnnprov.batch.runner import cost_ratios, load_instances, read_results, split_path, summarize
from dnnprov.dispatch import METHODS
from dnnprov.errors import InvalidInputError
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import Status

#: Line style per method, the same in every figure.
STYLES: dict[str, dict[str, Any]] = {
    "milp": {"color": "#1f77b4", "marker": "o", "linestyle": "-", "markersize": 9},
    "enumerate": {"color": "#2ca02c", "marker": "x", "linestyle": "--", "markersize": 10},
    "heuristic": {"color": "#d62728", "marker": "^", "linestyle": "-.", "markersize": 6},
    "reference-heuristic": {"color": "#9467bd", "marker": "s", "linestyle": ":", "markersize": 4},
}
#: Solve times below this count as this much in the performance profile.
TIME_FLOOR_S = 1e-3
#: Relative tolerance for "reached the best known cost".
COST_RTOL = 1e-6
MAX_SLO_PANELS = 12


def _style(method: str) -> dict[str, Any]:
    return STYLES.get(method, {"marker": ".", "linestyle": "-"})


def _methods(df: pd.DataFrame) -> list[str]:
    order = list(METHODS)
    return sorted(df["method"].unique(), key=lambda m: (order.index(m) if m in order else len(order), m))


def _figure(**kwargs: Any):
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def fit_title(text: str, width_in: float, fontsize: float = 10) -> str:
    """``text`` wrapped onto lines that fit ``width_in`` inches at ``fontsize`` points (an
    average character is taken as 0.6 em wide, wider than most fonts' average)."""
    per_line = max(12, int(width_in * 72 / (0.6 * fontsize)))
    return textwrap.fill(text, per_line, break_long_words=True)


# ------------------------------------------------------------------ instance data
def series_key(problem: SpotProblem | ServerlessProblem) -> str:
    """What an instance is apart from its SLO training time (and name, notes): instances with
    the same key form one series, whose points the SLO figure may join with a line."""
    skip = {"name", "notes", "slo", "time_s"}
    parts = [(f.name, getattr(problem, f.name)) for f in dataclasses.fields(problem) if f.name not in skip]
    if isinstance(problem, SpotProblem):
        parts.append(("slo", (problem.slo.loss, problem.slo.takeover_overhead_s)))
    return hashlib.sha1(repr((type(problem).__name__, parts)).encode()).hexdigest()[:16]


def instance_info(paths: Sequence[str], bases: Sequence[Path] = (Path("."),)) -> pd.DataFrame:
    """Kind, workload, SLO time and loss target of each row path (read from its file), its
    size (spot: instance-type columns, types x markets; serverless: none) and its
    :func:`series_key`.

    A relative path is looked up below each of ``bases`` in turn; paths whose file cannot
    be read get NaN / empty values and are left out of the SLO figure.
    """
    paths = list(dict.fromkeys(paths))
    problems: dict[str, Any] = {}
    for base in bases:
        missing = [p for p in paths if not isinstance(problems.get(p), (SpotProblem, ServerlessProblem))]
        if not missing:
            break
        located = {p if Path(split_path(p)[0]).is_absolute() else (base / p).as_posix(): p for p in missing}
        for where, loaded in load_instances(located).items():
            problems[located[where]] = loaded
    records = []
    for path in paths:
        problem = problems.get(path)
        record: dict[str, Any] = {
            "path": path,
            "kind": "",
            "workload": "",
            "model": "",
            "slo_s": math.nan,
            "slo_loss": math.nan,
            "size": math.nan,
            "series": "",
        }
        if isinstance(problem, SpotProblem):
            record.update(
                kind="spot",
                workload=problem.workload.name,
                model=problem.model,
                slo_s=problem.slo.time_s,
                slo_loss=problem.slo.loss,
                series=series_key(problem),
                size=len(problem.instance_types) * len(problem.constraints.markets),
            )
        elif isinstance(problem, ServerlessProblem):
            record.update(
                kind="serverless",
                workload=problem.workload.name,
                model="lambda-dnn",
                slo_s=problem.time_s,
                series=series_key(problem),
            )
        records.append(record)
    columns = ["path", "kind", "workload", "model", "slo_s", "slo_loss", "size", "series"]
    return pd.DataFrame(records, columns=columns).set_index("path")


# ------------------------------------------------------------------ figures
def slo_panels(df: pd.DataFrame, info: pd.DataFrame) -> dict[tuple[str, str, str], pd.DataFrame]:
    """Rows of the SLO figure per (kind, workload, model), most SLOs first.

    Only instances where every method of the panel found a plan are kept, so that each
    point averages the same instances for every method. Panels with one SLO are left out
    when some panel has several; at most :data:`MAX_SLO_PANELS`.
    """
    meta = info.rename(columns={"kind": "panel_kind", "model": "panel_model"})
    rows = df.join(meta, on="path")
    rows = rows[rows["slo_s"].notna()]
    has_plan = (rows["plan"] != "") & rows["cost"].notna()
    panels = {}
    for key, sub in rows.groupby(["panel_kind", "workload", "panel_model"], sort=True):
        methods = sub["method"].unique()
        solved = sub[has_plan.loc[sub.index]].groupby("path")["method"].nunique()
        common = solved.index[solved == len(methods)]
        sub = sub[sub["path"].isin(common) & has_plan.loc[sub.index]]
        if len(sub):
            panels[key] = sub
    order = sorted(panels, key=lambda k: -panels[k]["slo_s"].nunique())
    if any(panels[k]["slo_s"].nunique() > 1 for k in order):
        order = [k for k in order if panels[k]["slo_s"].nunique() > 1]
    return {k: panels[k] for k in order[:MAX_SLO_PANELS]}


def plot_slo(df: pd.DataFrame, info: pd.DataFrame, axes: np.ndarray | None = None):
    """Cost (top) and training time (bottom) of the plans against the SLO, per method.

    One column of panels per (kind, workload, model) from :func:`slo_panels`. Each instance
    is a point; a line joins only the instances of one series (the same instance apart from
    its SLO training time, :func:`series_key`), never unrelated instances. The time panels
    draw the SLO itself as a grey dashed line.
    """
    panels = slo_panels(df, info)
    n = max(1, len(panels))
    ncols = min(4, n)
    nrows = math.ceil(n / ncols)
    if axes is None:
        fig = _figure(figsize=(4.2 * ncols, 6.4 * nrows), layout="constrained")
        axes = np.asarray(fig.subplots(2 * nrows, ncols, squeeze=False))
    else:
        axes = np.asarray(axes).reshape(2 * nrows, ncols)
        fig = axes.flat[0].figure
    for ax in axes.flat:
        ax.set_visible(False)
    if not panels:
        ax = axes[0, 0]
        ax.set_visible(True)
        ax.text(0.5, 0.5, "no solved instance with a readable SLO", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    for g, ((kind, workload, model), sub) in enumerate(panels.items()):
        top, bottom = axes[2 * (g // ncols), g % ncols], axes[2 * (g // ncols) + 1, g % ncols]
        top.set_visible(True)
        bottom.set_visible(True)
        _plot_series(top, bottom, sub)
        slos = np.sort(sub["slo_s"].unique())
        bottom.plot(slos, slos, color="0.6", linestyle=(0, (4, 3)), linewidth=1, label="SLO", zorder=0)
        what = "spot, " + model + " model" if kind == "spot" else kind
        count = sub["path"].nunique()
        top.set_title(fit_title(f"{workload} ({what}, {count} instance{'s' if count != 1 else ''})", 3.8), fontsize=10)
        top.set_ylabel("cost ($)")
        bottom.set_ylabel("training time (s)")
        bottom.set_xlabel("SLO training time (s)")
        for ax in (top, bottom):
            ax.grid(True, alpha=0.3)
            if len(slos) == 1:
                ax.set_xlim(slos[0] * 0.9, slos[0] * 1.1)
            elif slos[0] > 0 and slos[-1] / slos[0] > 20:
                ax.set_xscale("log")
    handles: dict[str, Any] = {}
    for ax in axes.flat:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    labels = [m for m in list(METHODS) + sorted(handles) if m in handles]
    labels = list(dict.fromkeys(labels + ["SLO"]))
    fig.legend(
        [handles[k] for k in labels if k in handles],
        [k for k in labels if k in handles],
        loc="outside lower center",
        ncols=len(labels),
        frameon=False,
    )
    fig.suptitle(
        fit_title(
            "Cost and training time of the plans versus the SLO (instances every method solved; "
            "lines join only instances that differ in nothing but the SLO)",
            fig.get_figwidth() - 0.2,
            12,
        ),
        fontsize=12,
    )
    return fig


def _plot_series(top, bottom, sub: pd.DataFrame) -> None:
    """Each method's points of one panel: a line per series with several SLOs, markers alone
    for the others (one legend entry per method)."""
    for method in _methods(sub):
        style = _style(method)
        rows = sub[sub["method"] == method]
        label = method
        for _, series in rows.groupby("series", sort=True):
            m = series.groupby("slo_s")[["cost", "time_s"]].mean().reset_index().sort_values("slo_s")
            line = style if len(m) > 1 else {**style, "linestyle": "none"}
            top.plot(m["slo_s"], m["cost"], label=label, markerfacecolor="none", **line)
            bottom.plot(m["slo_s"], m["time_s"], label=label, markerfacecolor="none", **line)
            label = "_nolegend_"


def solve_success(df: pd.DataFrame, gap_tol: float = DEFAULT_GAP_TOL) -> pd.Series:
    """Rows that solved their instance: proven (optimal, infeasible, or a ``limit`` row whose
    gap is at most ``gap_tol``), or reached the best known cost (within :data:`COST_RTOL`)
    without being stopped by the limit."""
    ratio = cost_ratios(df)
    reached = (ratio <= 1 + COST_RTOL) & (df["status"] != Status.LIMIT.value)
    return proven(df, gap_tol) | reached


def performance_ratios(df: pd.DataFrame, gap_tol: float = DEFAULT_GAP_TOL) -> pd.Series:
    """Dolan-Moré ratios: a row's time (CPU time when the rows have it, else wall time,
    :func:`~dnnprov.batch.reports.tables.row_times`) over the fastest successful time on its path
    (``inf`` where the row did not succeed, see :func:`solve_success`)."""
    secs = row_times(df).fillna(np.inf).clip(lower=TIME_FLOOR_S)
    times = secs.where(solve_success(df, gap_tol), np.inf)
    fastest = times.groupby(df["path"]).transform("min")
    with np.errstate(invalid="ignore"):
        return (times / fastest).where(np.isfinite(fastest), np.inf)


def plot_performance_profile(df: pd.DataFrame, ax=None, gap_tol: float = DEFAULT_GAP_TOL):
    """Fraction of each method's instances solved within a factor tau of the fastest, over
    CPU time (wall time when the rows have no CPU time; the axis says which)."""
    if ax is None:
        fig = _figure(figsize=(6.4, 4.4), layout="constrained")
        ax = fig.subplots()
    fig = ax.figure
    ratios = performance_ratios(df, gap_tol)
    column = time_column(df)
    what = time_label(Settings(time_column=column, wall_rows=wall_fallbacks(df, column)))
    finite = ratios[np.isfinite(ratios)]
    top = max(2.0, float(finite.max()) * 1.5) if len(finite) else 2.0
    for method in _methods(df):
        r = np.sort(ratios[df["method"] == method].to_numpy())
        taus = np.concatenate([[1.0], r[np.isfinite(r)], [top]])
        frac = [np.mean(r <= t) for t in taus]
        style = _style(method)
        ax.step(
            taus,
            frac,
            where="post",
            label=method,
            color=style.get("color"),
            linestyle=style["linestyle"],
            linewidth=1.8,
        )
    ax.set_xscale("log", base=2)
    ax.set_xlim(1, top)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(fit_title(rf"$\tau$: {what} / fastest (log$_2$)", fig.get_figwidth() - 0.4))
    ax.set_ylabel(r"fraction of instances solved within $\tau$")
    ax.set_title(
        fit_title(
            "Performance profile (solved: proven, or the best known cost without hitting the limit)",
            fig.get_figwidth() - 0.4,
        ),
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    return fig


def figure_ratios(df: pd.DataFrame) -> pd.Series:
    """Each row's ratio in the cost-ratio figure: cost over the best known cost of its path;
    1 for a row without a plan on an instance proven infeasible where no method found a plan
    (the row agrees: there is none); ``inf`` for every other row without a plan."""
    has_plan = (df["plan"] != "") & df["cost"].notna()
    proven_infeasible = (df["status"] == Status.INFEASIBLE.value).groupby(df["path"]).transform("any")
    no_plan_anywhere = ~has_plan.groupby(df["path"]).transform("any")
    agrees = proven_infeasible & no_plan_anywhere & (df["status"] != Status.ERROR.value)
    return cost_ratios(df).where(has_plan, np.where(agrees, 1.0, np.inf))


def plot_cost_ratios(df: pd.DataFrame, ax=None):
    """Empirical distribution of cost / best known cost per method: a proven-infeasible
    instance without a plan counts as 1 (:func:`figure_ratios`), any other row without a plan
    as inf; the legend's mean is over the plans."""
    if ax is None:
        fig = _figure(figsize=(6.4, 4.4), layout="constrained")
        ax = fig.subplots()
    fig = ax.figure
    ratios = figure_ratios(df)
    plans = cost_ratios(df)
    finite = ratios[np.isfinite(ratios)]
    right = max(1.05, 1 + (float(finite.max()) - 1) * 1.1) if len(finite) else 1.05
    for method in _methods(df):
        r = np.sort(ratios[df["method"] == method].to_numpy())
        xs = np.concatenate([[0.995, 1.0], r[np.isfinite(r)], [right]])
        frac = [np.mean(r <= x) for x in xs]
        style = _style(method)
        own = plans[(df["method"] == method) & plans.notna()]
        ax.step(
            xs,
            frac,
            where="post",
            color=style.get("color"),
            linestyle=style["linestyle"],
            linewidth=1.8,
            label=f"{method} (mean {own.mean():.4f} over {len(own)} plans)",
        )
    ax.set_xlim(0.995, right)
    if right > 2:
        ax.set_xscale("log")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("cost / best known cost of the instance (proven infeasible, no plan: 1)")
    ax.set_ylabel("fraction of instances")
    ax.set_title("Cost ratio to the best known plan", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    return fig


# ------------------------------------------------------------------ the report
FIGURES = (
    ("slo", "Cost and training time versus SLO"),
    ("performance-profile", "Performance profile of solve times"),
    ("cost-ratio", "Cost ratio to the best known plan"),
)


def instance_bases(results: str | Path, roots: Sequence[str | Path] = ()) -> list[Path]:
    """Folders a row's relative instance path may start from, in the order they are tried.

    ``roots`` first, then the results file's folder and each folder above it (a batch run
    from a project folder with ``--out sub/results.csv`` wrote paths relative to that
    project folder), then the current folder.
    """
    folder = Path(results).resolve().parent
    bases = [Path(r).resolve() for r in roots] + [folder, *folder.parents, Path.cwd()]
    return list(dict.fromkeys(bases))


def write_report(
    results: str | Path,
    out: str | Path,
    roots: Sequence[str | Path] = (),
    *,
    shift_s: float = DEFAULT_SHIFT_S,
    gap_tol: float = DEFAULT_GAP_TOL,
) -> tuple[pd.DataFrame, list[Path]]:
    """Write the tables (``summary.md``, ``summary.tex``, ``summary.csv``), the figures (PNG
    and SVG) and ``index.html`` into ``out``.

    The tables are :func:`~dnnprov.batch.reports.tables.paper_tables` with the shifted geometric
    mean's shift ``shift_s`` (seconds) and the gap tolerance ``gap_tol`` of a proven
    ``limit`` row. Relative instance paths in the rows are looked up as
    :func:`instance_bases` says, so the report finds them from any folder. Returns the
    per-method summary (:func:`~dnnprov.batch.reports.summary.summarize`) and the files written.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InvalidInputError("report", "needs matplotlib: pip install 'dnnprov[batch]'") from None
    results = Path(results)
    df = read_results(results)
    if df.empty:
        raise InvalidInputError(str(results), "has no rows")
    info = instance_info(df["path"].tolist(), bases=instance_bases(results, roots))
    tables = paper_tables(df, info["size"], shift_s=shift_s, gap_tol=gap_tol)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(df, gap_tol=gap_tol)
    figures = {
        "slo": plot_slo(df, info),
        "performance-profile": plot_performance_profile(df, gap_tol=gap_tol),
        "cost-ratio": plot_cost_ratios(df),
    }
    files = [out / "summary.md", out / "summary.tex", out / "summary.csv"]
    files[0].write_text(markdown(tables, f"Batch summary: {results.name}"))
    files[1].write_text(latex(tables))
    tables.long().to_csv(files[2], index=False)
    for name, fig in figures.items():
        for ext in ("png", "svg"):
            path = out / f"{name}.{ext}"
            fig.savefig(path, dpi=150 if ext == "png" else None)
            files.append(path)
    files.append(out / "index.html")
    files[-1].write_text(_index_html(results, df, summary, info, tables))
    return summary, files


def _index_html(results: Path, df: pd.DataFrame, summary: pd.DataFrame, info: pd.DataFrame, tables: PaperTables) -> str:
    table = summary.to_html(float_format=lambda v: f"{v:.4f}", na_rep="-", border=0, classes="summary")
    per_method = tables.times[("method",)].to_html(float_format=lambda v: f"{v:.3f}", na_rep="-", border=0)
    failed = df[df["status"] == Status.ERROR.value][["path", "method", "error"]]
    unread = int(info["slo_s"].isna().sum())
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>dnnprov batch report: {html.escape(results.name)}</title>",
        (
            "<style>body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
            "table{border-collapse:collapse}td,th{padding:.25em .8em;text-align:right;border-bottom:1px solid #ddd}"
            "td:first-child,th:first-child{text-align:left}img{max-width:100%;border:1px solid #eee}"
            "figure{margin:2em 0}</style></head><body>"
        ),
        f"<h1>Batch report: {html.escape(results.name)}</h1>",
        (
            f"<p>{len(df)} rows, {df['path'].nunique()} instances, {df['method'].nunique()} methods. "
            "Cost ratio: cost over the cheapest plan any method found for the instance. "
            "Solve times in seconds.</p>"
        ),
        table,
        (
            f"<p>{html.escape(captions(tables)['method'])} Per family and size: "
            '<a href="summary.md">summary.md</a>, <a href="summary.tex">summary.tex</a> (LaTeX, booktabs), '
            '<a href="summary.csv">summary.csv</a>.</p>'
        ),
        per_method,
    ]
    for name, caption in FIGURES:
        parts.append(
            f'<figure><a href="{name}.png"><img src="{name}.svg" alt="{html.escape(caption)}"></a>'
            f'<figcaption>{html.escape(caption)} (<a href="{name}.png">PNG</a>, '
            f'<a href="{name}.svg">SVG</a>)</figcaption></figure>'
        )
    if unread:
        parts.append(f"<p>{unread} instance file(s) could not be read again; their rows are not in the SLO figure.</p>")
    if len(failed):
        parts.append(f"<h2>Failed rows ({len(failed)})</h2>")
        parts.append(failed.head(200).to_html(index=False, border=0))
    parts.append("</body></html>\n")
    return "\n".join(parts)
