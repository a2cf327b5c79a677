"""The paper tables of `dnnprov report` (summary.md, summary.tex, summary.csv) on a small
hand-made results file: exact counts and shifted geometric means, the limit-row rule, family
and size rows, well-formed LaTeX, one-line errors."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from dnnprov.batch.files import ROW_COLUMNS, read_results
from dnnprov.batch.reports.summary import summarize
from dnnprov.batch.reports.tables import (
    family_of,
    latex,
    markdown,
    paper_tables,
    proven,
    shifted_geometric_mean,
    size_class,
)
from dnnprov.cli import main
from dnnprov.errors import InvalidInputError

PLAN = '{"counts": {"a": 1}, "ps": 1}'
#: (path, method, status, cost, bound, gap, seconds, error)
ROWS = [
    ("sets/small/spot-000.json", "milp", "optimal", 5.0, 5.0, 0.0, 1.0, ""),
    ("sets/small/spot-001.json", "milp", "limit", 6.0, 6.0, 0.0, 10.0, ""),  # closed: proven
    ("sets/small/spot-002.json", "milp", "limit", 7.0, 6.3, 0.1, 100.0, ""),  # 10 % gap: not solved
    ("sets/large/large-000.json", "milp", "infeasible", None, None, None, 3.0, ""),
    ("sets/large/large-001.json", "milp", "error", None, None, None, 62.0, "timeout: task process killed after 62 s"),
    ("sets/small/spot-000.json", "heuristic", "feasible", 5.5, None, None, 0.5, ""),
    ("sets/small/spot-001.json", "heuristic", "unknown", None, None, None, 0.5, ""),
]


def write_rows(path: Path, rows=ROWS) -> Path:
    """A results file in the batch's column layout."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(ROW_COLUMNS)
        for file, method, status, cost, bound, gap, secs, error in rows:
            row = dict.fromkeys(ROW_COLUMNS, "")
            row.update(
                path=file,
                instance=Path(file).stem,
                kind="spot",
                model="paper",
                method=method,
                status=status,
                cost=cost,
                bound=bound,
                gap=gap,
                solve_seconds=secs,
                error=error,
                plan=PLAN if cost is not None else "",
            )
            w.writerow(["" if row[c] is None else row[c] for c in ROW_COLUMNS])
    return path


@pytest.fixture
def df(tmp_path: Path) -> pd.DataFrame:
    return read_results(write_rows(tmp_path / "r.csv"))


def test_shifted_geometric_mean_by_hand() -> None:
    """Times 1, 10, 100 with shift 1: (2 * 11 * 101)^(1/3) - 1; shift 0 is the geometric mean."""
    assert shifted_geometric_mean([1, 10, 100], 1.0) == pytest.approx((2 * 11 * 101) ** (1 / 3) - 1, rel=1e-12)
    assert shifted_geometric_mean([1, 10, 100], 0.0) == pytest.approx(10.0, rel=1e-12)
    assert shifted_geometric_mean([1, 10, 100], 10.0) == pytest.approx((11 * 20 * 110) ** (1 / 3) - 10, rel=1e-12)
    assert math.isnan(shifted_geometric_mean([], 1.0))
    assert shifted_geometric_mean([2, float("nan")], 1.0) == pytest.approx(2.0)


def test_limit_row_is_solved_only_when_proven(df: pd.DataFrame) -> None:
    """A limit row with gap 0 is proven, with gap 10 % it is not; optimal and infeasible count."""
    solved = dict(zip(zip(df["instance"], df["method"]), proven(df)))
    assert solved["spot-000", "milp"] and solved["spot-001", "milp"] and solved["large-000", "milp"]
    assert not solved["spot-002", "milp"] and not solved["large-001", "milp"]
    assert not solved["spot-000", "heuristic"]
    assert proven(df, gap_tol=0.1).sum() == proven(df).sum() + 1


def test_summarize_does_not_count_unproven_limit_rows(df: pd.DataFrame) -> None:
    """`solved` of the batch summary: plans from methods that ended, or proven; not the 10 % limit row."""
    table = summarize(df)
    assert table.loc["milp", "solved"] == 3  # optimal, closed limit, infeasible
    assert table.loc["heuristic", "solved"] == 1  # its plan (the heuristic ended on its own)


def test_per_method_numbers(df: pd.DataFrame) -> None:
    """Exact counts and sgm per method (wall time: the rows have no CPU time)."""
    tables = paper_tables(df, shift_s=1.0)
    assert not tables.settings.cpu
    m = tables.times[("method",)]
    milp, heur = m.loc["milp"].iloc[0], m.loc["heuristic"].iloc[0]
    assert (milp["instances"], milp["solved"], milp["plans"], milp["limit"], milp["failed"]) == (5, 3, 3, 2, 0)
    assert milp["sgm_time_s"] == pytest.approx((2 * 11 * 101 * 4 * 63) ** (1 / 5) - 1, rel=1e-12)
    assert (heur["instances"], heur["solved"], heur["plans"], heur["limit"]) == (2, 0, 1, 0)
    assert heur["sgm_time_s"] == pytest.approx(0.5, rel=1e-12)
    gaps = tables.gaps
    assert gaps.loc["milp"].iloc[0].tolist() == pytest.approx([2, 0.1, 0.1, 0, 1], nan_ok=True)
    h = gaps.loc["heuristic"].iloc[0]
    assert (h["unsolved"], h["no_bound"], h["no_plan"]) == (2, 1, 1) and math.isnan(h["mean_gap"])


def test_cpu_times_when_the_rows_have_them(df: pd.DataFrame) -> None:
    """With cpu_seconds the tables use CPU time; a killed task (no CPU time) counts at its wall
    time and the caption says so; one finished row without CPU time means wall time for all."""
    cpu = df.assign(cpu_seconds=[0.5, 5.0, 50.0, 2.0, None, 0.25, 0.25])
    tables = paper_tables(cpu, shift_s=1.0)
    assert tables.settings.cpu and tables.settings.wall_rows == 1
    milp = tables.times[("method",)].loc["milp"].iloc[0]
    assert milp["sgm_time_s"] == pytest.approx((1.5 * 6 * 51 * 3 * 63) ** (1 / 5) - 1, rel=1e-12)
    assert "CPU time (wall time for 1 killed or crashed task)" in markdown(tables, "t")
    partial = cpu.assign(cpu_seconds=[0.5, 5.0, 50.0, None, None, 0.25, 0.25])
    assert not paper_tables(partial).settings.cpu


def test_family_and_size_rows(df: pd.DataFrame) -> None:
    """Families from the instance folders (with the kind), sizes from a size per path."""
    sizes = pd.Series(
        {
            "sets/small/spot-000.json": 3,
            "sets/small/spot-001.json": 4,
            "sets/small/spot-002.json": 7,
            "sets/large/large-000.json": 40,
        }
    )
    tables = paper_tables(df, sizes, shift_s=1.0)
    fam = tables.times[("method", "family")]
    assert list(fam.index) == [("milp", "large/spot"), ("milp", "small/spot"), ("heuristic", "small/spot")]
    small = fam.loc[("milp", "small/spot")]
    assert (small["instances"], small["solved"], small["limit"]) == (3, 2, 1)
    assert small["sgm_time_s"] == pytest.approx((2 * 11 * 101) ** (1 / 3) - 1, rel=1e-12)
    size = tables.times[("method", "family", "size")]
    assert list(size.index) == [
        ("milp", "large/spot", "33-64"),
        ("milp", "large/spot", "-"),
        ("milp", "small/spot", "3-4"),
        ("milp", "small/spot", "5-8"),
        ("heuristic", "small/spot", "3-4"),
    ]
    assert size.loc[("milp", "small/spot", "3-4"), "sgm_time_s"] == pytest.approx(math.sqrt(2 * 11) - 1)
    assert [size_class(n) for n in (1, 2, 3, 4, 5, 8, 9, 40)] == ["1", "2", "3-4", "3-4", "5-8", "5-8", "9-16", "33-64"]
    assert family_of("data/benchmarks/trace/trace-sample.jsonl#3", "serverless") == "trace/serverless"
    assert family_of("data/instances/spot/paper-table1.json", "spot") == "spot"


def test_own_family_and_size_columns_are_kept(df: pd.DataFrame) -> None:
    """A frame with its own family and size labels is grouped by them."""
    labelled = df.assign(family=["a", "a", "b", "b", "b", "a", "a"], size=["x", "x", "x", "y", "y", "x", "x"])
    tables = paper_tables(labelled)
    assert list(tables.times[("method", "family")].index) == [("milp", "a"), ("milp", "b"), ("heuristic", "a")]
    assert tables.times[("method", "family", "size")].loc[("milp", "b", "y"), "instances"] == 2


def test_markdown_states_the_shift_and_has_the_sgm_column(df: pd.DataFrame) -> None:
    text = markdown(paper_tables(df, shift_s=10.0), "t")
    assert "| method | instances | solved | plans | limit | failed | sgm time (s, shift 10 s) |" in text
    assert "shift 10 s" in text and "wall time (the results have no CPU time)" in text
    sgm = (11 * 20 * 110 * 13 * 72) ** (1 / 5) - 10
    assert f"| milp | 5 | 3 | 3 | 2 | 0 | {sgm:.3f} |" in text


def test_latex_is_well_formed(df: pd.DataFrame) -> None:
    """Balanced braces, one tabular per table float, booktabs rules, escaped specials."""
    tables = paper_tables(df.assign(path=df["path"].str.replace("small", "small_&_%")), shift_s=1.0)
    tex = latex(tables)
    body = re.sub(r"\\[{}&%_$#]", "", tex)  # escaped characters are no braces
    body = "\n".join(line for line in body.splitlines() if not line.startswith("%"))
    depth = 0
    for ch in body:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        assert depth >= 0
    assert depth == 0
    floats = re.findall(r"\\begin\{table\}(.*?)\\end\{table\}", tex, re.DOTALL)
    assert len(floats) == len(tables.times) + 1 == tex.count("\\begin{table}") == tex.count("\\end{table}")
    for f in floats:
        assert f.count("\\begin{tabular}") == f.count("\\end{tabular}") == 1
        assert f.count("\\toprule") == f.count("\\midrule") == f.count("\\bottomrule") == 1
        assert f.count("\\caption{") == 1
        spec = re.search(r"\\begin\{tabular\}\{([lr]+)\}", f).group(1)
        for line in f.split("\\midrule")[1].split("\\bottomrule")[0].strip().splitlines():
            assert line.endswith("\\\\") and len(re.split(r"(?<!\\)&", line)) == len(spec)
    assert "small\\_\\&\\_\\%/spot" in tex and "$\\leq$" in tex


def test_cli_writes_summary_md(tmp_path: Path, capsys) -> None:
    """`dnnprov report RESULTS --out DIR` writes summary.md (sgm column), .tex and .csv."""
    pytest.importorskip("matplotlib")
    results = write_rows(tmp_path / "r.csv")
    assert main(["report", str(results), "--out", str(tmp_path / "rep"), "--shift", "1"]) == 0
    md = (tmp_path / "rep" / "summary.md").read_text()
    assert "sgm time (s, shift 1 s)" in md
    assert "\\begin{tabular}" in (tmp_path / "rep" / "summary.tex").read_text()
    long = pd.read_csv(tmp_path / "rep" / "summary.csv")
    line = long[(long["level"] == "method") & (long["method"] == "milp")].iloc[0]
    assert line["solved"] == 3 and line["no_plan"] == 1
    assert line["sgm_time_s"] == pytest.approx((2 * 11 * 101 * 4 * 63) ** (1 / 5) - 1, rel=1e-9)


@pytest.mark.parametrize(
    "args, field", [(["--shift", "-1"], "shift"), (["--gap-tol", "1.5"], "gap_tol"), (["--shift", "nan"], "shift")]
)
def test_bad_settings_are_one_line(tmp_path: Path, capsys, args, field) -> None:
    results = write_rows(tmp_path / "r.csv")
    assert main(["report", str(results), "--out", str(tmp_path / "rep"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"dnnprov: error: {field}: ")
    with pytest.raises(InvalidInputError, match=field):
        paper_tables(read_results(results), **{"shift_s" if field == "shift" else "gap_tol": float(args[1])})


def test_slo_figure_joins_only_one_instances_series() -> None:
    """Two instances that differ only in the SLO share a line; an unrelated instance of the same
    workload is a lone marker, never joined to them."""
    pytest.importorskip("matplotlib")
    import dataclasses

    import dnnprov
    from dnnprov.batch.reports.report import plot_slo, series_key

    table1 = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    later = dataclasses.replace(table1, name="later", slo=dataclasses.replace(table1.slo, time_s=3000.0))
    other_loss = dataclasses.replace(table1, slo=dataclasses.replace(table1.slo, loss=table1.slo.loss + 0.1))
    assert series_key(table1) == series_key(later) != series_key(other_loss)
    info = pd.DataFrame(
        {
            "path": ["a.json", "b.json", "c.json"],
            "kind": "spot",
            "workload": "w",
            "model": "paper",
            "slo_s": [2600.0, 3000.0, 2800.0],
            "slo_loss": 0.8,
            "size": 4.0,
            "series": ["s1", "s1", "s2"],
        }
    ).set_index("path")
    rows = pd.DataFrame(
        {
            "path": ["a.json", "b.json", "c.json"],
            "method": "milp",
            "status": "optimal",
            "cost": [6.0, 5.0, 9.0],
            "time_s": [2500.0, 2900.0, 2700.0],
            "plan": PLAN,
        }
    )
    fig = plot_slo(rows, info)
    top = fig.axes[0]
    lines = sorted(([float(x) for x in ln.get_xdata()], ln.get_linestyle()) for ln in top.get_lines())
    assert lines == [([2600.0, 3000.0], "-"), ([2800.0], "None")]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["milp", "SLO"]
