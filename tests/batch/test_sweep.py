"""Cost-deadline curves: every point exact (checked against enumerate), table and figures written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import one_error

import dnnprov
from dnnprov.batch.sweep import Sweep, deadline_grid, parse_losses, plot_sweep, sweep
from dnnprov.cli import main
from dnnprov.errors import InvalidInputError

TABLE1 = "spot/paper-table1.json"


def test_deadline_grid_includes_both_ends() -> None:
    """START:STOP:N gives N evenly spaced deadlines; lists are sorted; bad grids name the option."""
    grid = deadline_grid("600:3600:24")
    assert len(grid) == 24 and grid[0] == 600 and grid[-1] == pytest.approx(3600)
    assert grid[1] - grid[0] == pytest.approx(3000 / 23)
    assert deadline_grid([3600, 600, 600]) == [600, 3600]
    for bad in ("600:3600", "3600:600:5", "a:b:c", "0:10:3", "600:3600:1"):
        with pytest.raises(InvalidInputError, match="^--deadlines: "):
            deadline_grid(bad)
    with pytest.raises(InvalidInputError, match="^--losses: "):
        parse_losses("0.8,x")
    for dropped_or_repeated in ("", "0.8,,0.9", "0.8,", "0.8,0.9,0.8"):  # used to drop or repeat a point silently
        with pytest.raises(InvalidInputError, match="^--losses: "):
            parse_losses(dropped_or_repeated)


def test_unreachable_losses_are_refused_before_any_point(capsys: pytest.CaptureFixture) -> None:
    """A loss the model cannot reach (or any loss on a serverless instance) is one error naming
    --losses, before the first point is solved or the progress header printed."""
    assert main(["sweep", f"embedded:{TABLE1}", "--deadlines", "2000:3000:3", "--losses", "0.8,-1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dnnprov: error: --losses: -1 is not above workload.gamma_5") and err.count("\n") == 1
    serverless = "embedded:serverless/paper-table3-resnet50.json"
    assert main(["sweep", serverless, "--deadlines", "2000:3000:3", "--losses", "0.8"]) == 2
    assert capsys.readouterr().err == (
        "dnnprov: error: --losses: a serverless problem has no target loss (its SLO is a time)\n"
    )


def test_every_point_is_the_proven_optimum() -> None:
    """At each deadline milp's cost equals exhaustive search's; the curve falls; the heuristic is never cheaper."""
    problem = dnnprov.read_instance(dnnprov.embedded_instance(TABLE1))
    result = sweep(problem, [2300, 2500, 2600, 3000, 3600])
    assert result.violations == []
    rows = result.rows
    assert [r["status"] for r in rows] == ["infeasible"] + ["optimal"] * 4
    for row in rows[1:]:
        point = problem.replace(slo=dnnprov.SpotSLO(loss=0.8, time_s=row["deadline_s"]))
        assert row["cost"] == pytest.approx(dnnprov.solve(point, "enumerate").cost, rel=1e-9)
        assert row["heuristic_cost"] >= row["cost"] - 1e-9
    assert rows[2]["cost"] == pytest.approx(5.448374)  # Table I's deadline: the README's optimum
    costs = [r["cost"] for r in rows[1:]]
    assert costs == sorted(costs, reverse=True)
    assert [r["changed"] for r in rows] == [True] + [rows[i]["plan"] != rows[i - 1]["plan"] for i in range(1, 5)]


def test_losses_and_serverless() -> None:
    """A lower target loss costs more at the same deadline; a serverless problem sweeps its time SLO only."""
    problem = dnnprov.read_instance(dnnprov.embedded_instance(TABLE1))
    frame = sweep(problem, [3000, 3600], [0.75, 0.8], heuristic=False).to_frame()
    by = frame.set_index(["loss", "deadline_s"])["cost"]
    assert by[(0.75, 3000.0)] > by[(0.8, 3000.0)] and frame["heuristic_cost"].isna().all()
    serverless = dnnprov.read_instance(dnnprov.embedded_instance("serverless/paper-table3-resnet50.json"))
    rows = sweep(serverless, [serverless.time_s, 2 * serverless.time_s]).rows
    assert rows[0]["loss"] is None and rows[1]["cost"] <= rows[0]["cost"]
    with pytest.raises(InvalidInputError, match="^losses: "):
        sweep(serverless, [600], [0.8])


def test_cli_writes_table_and_figures(tmp_path, capsys: pytest.CaptureFixture) -> None:
    """`dnnprov sweep --out DIR` prints the table and writes CSV, Parquet, PNG and SVG."""
    assert (
        main(
            [
                "sweep",
                f"embedded:{TABLE1}",
                "--deadlines",
                "2400:3600:5",
                "--losses",
                "0.75,0.8",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "5 x g3.8xlarge" in out and str(tmp_path / "sweep.csv") in out
    csv = pd.read_csv(tmp_path / "sweep.csv")
    assert len(csv) == 10 and set(csv["loss"]) == {0.75, 0.8}
    parquet = pd.read_parquet(tmp_path / "sweep.parquet")
    assert list(parquet.columns) == list(csv.columns)
    np.testing.assert_allclose(parquet["cost"], csv["cost"])
    for name in ("sweep.png", "sweep.svg", "sweep-loss.png"):
        assert (tmp_path / name).stat().st_size > 10_000
    assert main(["sweep", f"embedded:{TABLE1}", "--deadlines", "10:1:3"]) == 2
    assert "--deadlines" in capsys.readouterr().err


LARGE = Path(__file__).resolve().parents[2] / "data" / "benchmarks" / "large" / "large-003.json"


def _row(deadline: float, status: str, cost: float | None = None, bound: float | None = None, plan: str = "") -> dict:
    """One sweep row as :func:`sweep` writes it (serverless: no loss)."""
    gap = None if cost is None or bound is None else (cost - bound) / cost
    return {
        "loss": None,
        "deadline_s": deadline,
        "status": status,
        "cost": cost,
        "bound": bound,
        "gap": gap,
        "time_s": None,
        "plan": plan,
        "workers": None,
        "ps": None,
        "changed": True,
        "solve_seconds": 0.1,
        "heuristic_status": None,
        "heuristic_cost": None,
        "heuristic_plan": None,
    }


def test_figure_draws_proven_unproven_and_infeasible_points_apart() -> None:
    """Only optimal points carry the "proven" label; a limit point is hollow with a bar down to
    its bound; proven infeasible and no-plan-found points have labels of their own."""
    rows = [
        _row(100, "infeasible"),
        _row(200, "limit"),
        _row(300, "limit", 10.0, 7.0, "a"),
        _row(400, "optimal", 8.0, 8.0, "b"),
    ]
    fig = plot_sweep(Sweep("t", "serverless", rows=rows))
    handles, labels = fig.axes[0].get_legend_handles_labels()
    by = dict(zip(labels, handles))
    assert list(by["milp: proven minimal cost"].get_xdata()) == [400]
    unproven = by["milp: best plan at the time limit, not proven (bar: down to the proven bound)"]
    marker = unproven.lines[0]
    assert list(marker.get_xdata()) == [300] and marker.get_markerfacecolor() == "white"
    [bar] = unproven.lines[2]
    np.testing.assert_allclose(bar.get_segments()[0], [[300, 7.0], [300, 10.0]])
    assert "proven infeasible: no plan meets the deadline" in by
    assert list(by["no plan found by the time limit, not proven infeasible"].get_xdata()) == [200]
    notes = fig.axes[1].texts[0].get_text()
    assert "a  (from 300 s, $10.0000, limit, not proven: gap 30.0 %)" in notes
    assert "b  (from 400 s, $8.0000, proven)" in notes


@pytest.mark.skipif(not LARGE.exists(), reason="data/benchmarks/large/large-003.json is not in this checkout")
def test_unproven_sweep_is_never_labelled_proven() -> None:
    """large-003 under a short limit (the issue's case): a point counts as proven in the
    figure exactly when milp proved it, and the progress callback sees every point in order."""
    problem = dnnprov.read_instance(LARGE)
    seen: list[tuple[int, int, str]] = []
    result = sweep(
        problem,
        [60000, 80000],
        time_limit_s=0.5,
        heuristic=False,
        progress=lambda i, n, row: seen.append((i, n, row["status"])),
    )
    assert seen == [(1, 2, result.rows[0]["status"]), (2, 2, result.rows[1]["status"])]
    labels = plot_sweep(result).axes[0].get_legend_handles_labels()[1]
    statuses = {r["status"] for r in result.rows if r["cost"] is not None}
    assert ("milp: proven minimal cost" in labels) == ("optimal" in statuses)
    assert any("not proven" in label for label in labels) == bool(statuses - {"optimal"})
    for row in result.rows:
        if row["status"] == "limit" and row["cost"] is not None:
            assert row["bound"] <= row["cost"] and row["gap"] > 0


def test_cli_reports_progress_per_point_on_stderr(capsys: pytest.CaptureFixture) -> None:
    """One progress line per point on standard error, each with the status of its table row."""
    assert main(["sweep", f"embedded:{TABLE1}", "--deadlines", "2300:3600:3", "--no-heuristic"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert lines[0] == "sweep: 3 points, milp each within 60 s"
    assert [line.split(":")[1] for line in lines[1:]] == [
        " point 1/3 (loss 0.8, deadline 2300 s)",
        " point 2/3 (loss 0.8, deadline 2950 s)",
        " point 3/3 (loss 0.8, deadline 3600 s)",
    ]
    assert "infeasible - (proven infeasible)" in lines[1] and "optimal $" in lines[2] and "(proven)" in lines[2]
    assert "sweep: point" not in captured.out
    assert main(["sweep", f"embedded:{TABLE1}", "--deadlines", "2300:3600:3", "--no-progress"]) == 0
    assert capsys.readouterr().err == ""


def test_cli_refuses_an_unusable_out_before_solving(tmp_path, capsys: pytest.CaptureFixture) -> None:
    """An --out that is a file, or whose sweep.png is a folder, is one error line on stderr and
    nothing else: no progress line, so no point was solved before the check."""
    taken = tmp_path / "taken"
    taken.write_text("keep me")
    argv = [
        "sweep",
        str(LARGE if LARGE.exists() else f"embedded:{TABLE1}"),
        "--deadlines",
        "60000:80000:5",
        "--time-limit",
        "3",
    ]
    one_error(capsys, argv + ["--out", str(taken)], "--out", "is an existing file")
    (tmp_path / "dir" / "sweep.png").mkdir(parents=True)
    one_error(capsys, argv + ["--out", str(tmp_path / "dir")], "--out", "sweep.png exists and is not a file")
    assert taken.read_text() == "keep me"
