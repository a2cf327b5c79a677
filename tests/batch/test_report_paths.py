"""`dnnprov report` run from another folder finds the instances relative to the results file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import dnnprov
from dnnprov.batch.reports.report import instance_bases, instance_info
from dnnprov.cli import main

pytest.importorskip("matplotlib", reason="report needs the batch extra")


def test_report_from_elsewhere_reads_every_instance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A batch run in a project folder writing out/results.csv; report run from an unrelated folder."""
    project = tmp_path / "project"
    (project / "set").mkdir(parents=True)
    for name in ("paper-table5-resnet110-0.7-3700.json", "paper-table5-resnet110-0.8-2400.json"):
        shutil.copy(dnnprov.embedded_instance(f"spot/{name}"), project / "set" / name)
    monkeypatch.chdir(project)
    assert (
        main(
            [
                "batch",
                "set",
                "--methods",
                "milp,heuristic",
                "--out",
                "out/results.csv",
                "--workers",
                "1",
                "--no-progress",
            ]
        )
        == 0
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    results = project / "out" / "results.csv"
    assert project in instance_bases(results) and instance_bases(results)[-1] == elsewhere
    capsys.readouterr()
    assert main(["report", str(results), "--out", str(elsewhere / "report")]) == 0
    page = (elsewhere / "report" / "index.html").read_text()
    assert "could not be read again" not in page
    info = instance_info(["set/paper-table5-resnet110-0.8-2400.json"], bases=instance_bases(results))
    assert info["slo_s"].tolist() == [2400.0]
