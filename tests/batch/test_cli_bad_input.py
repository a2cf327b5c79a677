"""Bad command-line input of sweep, solve-many and predict (issue 19): one error line, exit 2, before any solve."""

from __future__ import annotations

import pytest
from conftest import one_error

import dnnprov

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


@pytest.mark.parametrize("option", ["--time-limit", "--kill-after"])
@pytest.mark.parametrize("seconds", ["1e16", "1e308"])
def test_batch_refuses_a_time_limit_beyond_1e15(tmp_path, capsys, option, seconds):
    """A huge limit used to reach the worker slot, whose wait overflowed: every row failed
    with an internal OverflowError and the batch exited 0."""
    out = tmp_path / "rows.csv"
    one_error(
        capsys, ["batch", TABLE1, "--methods", "milp", "--no-progress", "--out", str(out), option, seconds], option
    )
    assert not out.exists()


def test_a_worker_waits_past_the_longest_poll(monkeypatch):
    """A budget beyond what one poll() accepts (about 24 days) is waited in slices."""
    from dnnprov.execution import process

    class Conn:
        def __init__(self) -> None:
            self.timeouts: list[float] = []

        def poll(self, timeout: float) -> bool:
            if timeout > process.MAX_POLL_S:
                raise OverflowError("timeout is too large")
            self.timeouts.append(timeout)
            return len(self.timeouts) == 3

        def recv(self) -> tuple:
            return (7, "answer")

    worker = object.__new__(process.WorkerProcess)
    worker.conn = Conn()
    assert worker.receive(7, 1e12) == (True, "answer")
    assert worker.conn.timeouts[:2] == [process.MAX_POLL_S] * 2


def test_solve_many_names_the_file_of_a_bad_job(tmp_path, capsys):
    """With several FILEs, an error in one names that file (it named only the field inside)."""
    dup = tmp_path / "dup.json"
    dup.write_text(
        dnnprov.embedded_instance("spot/paper-table1.json").read_text().replace('"name":', '"name": "x", "name":', 1)
    )
    one_error(capsys, ["solve-many", TABLE1, str(dup)], f"{dup}: name")
