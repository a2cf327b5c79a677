"""An output path that cannot be written (a folder given for a file, a file for a folder, a
file where a folder of the path should be) is one error naming the option, exit 2: it was an
internal error (exit 3) in risk fit, risk attach, build --force, generate, report and catalog import."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import one_error

TABLE1 = "embedded:spot/paper-table1.json"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _trace(folder: Path) -> str:
    path = folder / "us-east-1a_v100_1.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 300}, "data": [2, 2, 0, 1] * 30}))
    return str(path)


def _commands(folder: Path) -> dict[str, list[str]]:
    trace = _trace(folder)
    return {
        "risk fit": ["risk", "fit", trace, "--zones", "--out"],
        "risk attach": ["risk", "attach", TABLE1, "--bucket", "p3.2xlarge=2", "--out"],
        "build": [
            "build",
            "--catalog",
            "aws-table3-2023-01",
            "--profile",
            "spot/resnet110-paper",
            "--target-loss",
            "0.8",
            "--deadline",
            "4000",
            "--force",
            "--out",
        ],
        "catalog import": ["catalog", "import", "--region", "us-east-1", "--shared-data", str(SHARED), "--out"],
    }


@pytest.mark.parametrize("command", ["risk fit", "risk attach", "build", "catalog import"])
def test_a_file_output_that_is_a_folder_is_refused(tmp_path, capsys, command):
    if command == "catalog import" and not SHARED.is_dir():
        pytest.skip("needs ../shared/data")
    folder = tmp_path / "taken"
    folder.mkdir()
    one_error(capsys, [*_commands(tmp_path)[command], str(folder)], "--out", "is a folder")


@pytest.mark.parametrize("command", ["risk fit", "risk attach", "build", "catalog import"])
def test_a_file_output_below_a_file_is_refused(tmp_path, capsys, command):
    if command == "catalog import" and not SHARED.is_dir():
        pytest.skip("needs ../shared/data")
    blocker = tmp_path / "plain.txt"
    blocker.write_text("keep me")
    one_error(capsys, [*_commands(tmp_path)[command], str(blocker / "x.json")], "--out", "cannot write")
    assert blocker.read_text() == "keep me"


def test_generate_into_a_file_is_refused(tmp_path, capsys):
    blocker = tmp_path / "plain.txt"
    blocker.write_text("keep me")
    one_error(capsys, ["generate", "small", "--count", "1", "--out", str(blocker)], "--out", "is a file")
    one_error(capsys, ["generate", "small", "--count", "1", "--out", str(blocker / "sub")], "--out", "cannot write")
    assert blocker.read_text() == "keep me"


def test_report_into_a_file_is_refused(tmp_path, capsys):
    results = tmp_path / "results.csv"
    from dnnprov.cli import main

    assert main(["batch", TABLE1, "--methods", "heuristic", "--no-progress", "--out", str(results)]) == 0
    capsys.readouterr()
    blocker = tmp_path / "plain.txt"
    blocker.write_text("keep me")
    one_error(capsys, ["report", str(results), "--out", str(blocker)], "--out", "is a file")
    one_error(capsys, ["report", str(results), "--out", str(blocker / "sub")], "--out", "cannot write")
    assert blocker.read_text() == "keep me"
