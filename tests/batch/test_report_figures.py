"""Report figures from a real batch results file: the cost-ratio curve counts a proven-infeasible
instance as solved, and every title fits inside its figure."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import dnnprov
from dnnprov.batch.files import read_results
from dnnprov.batch.reports.report import (
    figure_ratios,
    instance_info,
    plot_cost_ratios,
    plot_performance_profile,
    plot_slo,
)
from dnnprov.batch.runner import run_batch

pytest.importorskip("matplotlib", reason="report needs the batch extra")

#: Table I's optimum and the paper heuristic's plan there (README, spec section 6).
TABLE1_OPTIMUM, TABLE1_HEURISTIC = 5.448374, 5.787788


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A batch of Table I (feasible), Table I at 2,300 s (proven infeasible: no plan within the
    quotas, docs/sweep.md) and the serverless ResNet-50 instance, by three methods."""
    folder = tmp_path_factory.mktemp("report")
    table1 = json.loads(dnnprov.embedded_instance("spot/paper-table1.json").read_text())
    shutil.copy(dnnprov.embedded_instance("spot/paper-table1.json"), folder / "table1.json")
    table1.update(name="table1-2300", slo={**table1["slo"], "time_s": 2300})
    (folder / "table1-2300.json").write_text(json.dumps(table1))
    shutil.copy(dnnprov.embedded_instance("serverless/paper-table3-resnet50.json"), folder / "resnet50.json")
    out = folder / "results.csv"
    run_batch([folder], ["milp", "heuristic", "enumerate"], out=out, workers=1, progress=False)
    return out


def _curve(fig, method: str) -> tuple[np.ndarray, np.ndarray]:
    """The (x, y) of a method's step line in a cost-ratio figure."""
    [line] = [ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith(method + " ")]
    return np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)


def _fraction_at(fig, method: str, x: float) -> float:
    xs, ys = _curve(fig, method)
    return float(ys[np.searchsorted(xs, x, side="right") - 1])


def test_proven_infeasible_instances_are_solved_in_the_cost_ratio_curve(results: Path) -> None:
    """milp and enumerate prove table1-2300 infeasible and the heuristic finds no plan there: all
    three agree, so each counts it at ratio 1; the heuristic's Table I plan is 6.2 % dearer."""
    df = read_results(results)
    by_status = df.set_index(["instance", "method"])["status"]
    assert by_status["table1-2300", "milp"] == by_status["table1-2300", "enumerate"] == "infeasible"
    assert by_status["table1-2300", "heuristic"] == "unknown"
    ratios = figure_ratios(df)
    assert (ratios[df["instance"] == "table1-2300"] == 1.0).all()
    fig = plot_cost_ratios(df)
    for method in ("milp", "enumerate"):
        assert _fraction_at(fig, method, 1.0) == 1.0
    assert _fraction_at(fig, "heuristic", 1.0) == pytest.approx(2 / 3)
    assert _fraction_at(fig, "heuristic", TABLE1_HEURISTIC / TABLE1_OPTIMUM * (1 + 1e-6)) == 1.0
    labels = [ln.get_label() for ln in fig.axes[0].get_lines()]
    assert "heuristic (mean 1.0311 over 2 plans)" in labels  # (1 + 5.787788 / 5.448374) / 2


def test_a_failed_row_of_an_infeasible_instance_stays_a_failure(results: Path) -> None:
    """A method that errors has not agreed with anything: its row stays at inf; and where some
    method found a plan, a row without one is a failure even if another row says infeasible."""
    df = read_results(results)
    broken = df.copy()
    heuristic_2300 = (broken["instance"] == "table1-2300") & (broken["method"] == "heuristic")
    broken.loc[heuristic_2300, "status"] = "error"
    assert np.isinf(figure_ratios(broken)[heuristic_2300]).all()
    contradicted = df.copy()
    table1_milp = (contradicted["instance"] == "paper-table1") & (contradicted["method"] == "milp")
    contradicted.loc[table1_milp, ["status", "cost", "plan"]] = ["infeasible", np.nan, ""]
    assert np.isinf(figure_ratios(contradicted)[table1_milp]).all()


def _outside(fig) -> list[str]:
    """Titles of ``fig`` (suptitle and axes titles) whose drawn extent leaves the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    texts = [
        t for t in [fig._suptitle, *(ax.title for ax in fig.axes if ax.get_visible())] if t is not None and t.get_text()
    ]
    width = fig.bbox.width
    return [
        t.get_text() for t in texts if t.get_window_extent(renderer).x0 < 0 or t.get_window_extent(renderer).x1 > width
    ]


def test_titles_fit_their_figures(results: Path) -> None:
    """Every title lies inside its figure, also in the narrowest SLO figure (one panel)."""
    df = read_results(results)
    info = instance_info(df["path"].tolist(), bases=[results.parent.parent, Path.cwd()])
    spot = df[df["kind"] == "spot"]
    assert info["slo_s"].notna().all()
    for fig in (plot_slo(df, info), plot_slo(spot, info), plot_performance_profile(df), plot_cost_ratios(df)):
        assert _outside(fig) == []
