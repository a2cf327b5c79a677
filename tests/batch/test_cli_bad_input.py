"""Bad command-line input of sweep, solve-many and predict (issue 19): one error line, exit 2, before any solve."""

from __future__ import annotations

import pytest
from conftest import one_error

TABLE1 = "embedded:spot/paper-table1.json"


def test_sweep_out_on_an_existing_file_is_refused_before_solving(tmp_path, capsys):
    target = tmp_path / "taken.txt"
    target.write_text("keep me")
    one_error(capsys, ["sweep", TABLE1, "--deadlines", "600:3600:40", "--out", str(target)], "--out", "existing file")
    # one_error allows one stderr line only: a solved point would have printed its progress line
    assert target.read_text() == "keep me"


@pytest.mark.parametrize("command", [["solve-many", TABLE1, TABLE1], ["sweep", TABLE1, "--deadlines", "600:3600:2"]])
@pytest.mark.parametrize("limit", ["nan", "inf", "-1", "0"])
def test_time_limit_must_be_finite_and_positive(capsys, command, limit):
    one_error(capsys, [*command, "--time-limit", limit], "--time-limit")


@pytest.mark.parametrize("count", ["99999999999999999999", "-1", "4097"])
def test_predict_counts_out_of_range(capsys, count):
    one_error(capsys, ["predict", TABLE1, "--counts", f"g3.8xlarge={count}"], "--counts g3.8xlarge")
