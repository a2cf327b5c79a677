"""Cost-deadline curves: every point exact (checked against enumerate), table and figures written."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dnnprov
from dnnprov.cli import main
from dnnprov.errors import InvalidInputError
from dnnprov.batch.sweep import deadline_grid, parse_losses, sweep

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
    assert main(["sweep", f"embedded:{TABLE1}", "--deadlines", "2400:3600:5", "--losses", "0.75,0.8",
                 "--out", str(tmp_path)]) == 0
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
