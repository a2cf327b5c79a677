"""benchmarks/link_queue.py's simulation of the emulated PS link (first come, first served)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from conftest import benchmark_module

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "link_queue.py"


@pytest.fixture(scope="module")
def link_queue() -> ModuleType:
    return benchmark_module("link_queue")


def test_a_lone_worker_never_queues(link_queue: ModuleType) -> None:
    t_exp, comm = link_queue.simulate([6.0], hold_s=2.0, outside_s=0.25)
    assert t_exp == pytest.approx(8.25, rel=1e-3) and comm == [pytest.approx(2.25)]


def test_equal_workers_that_fill_the_link_take_turns_without_waiting(link_queue: ModuleType) -> None:
    """4 workers of 6 s with a 2 s hold: the link is busy all the time and nobody waits (a
    deterministic pipeline), so T_exp is the hold itself."""
    t_exp, comm = link_queue.simulate([6.0] * 4, hold_s=2.0, outside_s=0.0)
    assert t_exp == pytest.approx(2.0, rel=1e-3)
    assert max(comm) == pytest.approx(2.0, abs=0.02)


def test_a_lone_slow_worker_breaks_the_pipeline(link_queue: ModuleType) -> None:
    """3 x 6 s + 1 x 10 s: fewer answers per second than the four 6 s workers, and the fast
    workers now wait for the link, which eqs. (8)-(9) cannot tell from 4 equal workers (|N| = 4).
    With one communication time for all (the model), the mix would be 9 % slower; queued, it is
    more than 15 % slower."""
    equal, _ = link_queue.simulate([6.0] * 4, hold_s=2.0, outside_s=0.0)
    mixed, comm = link_queue.simulate([6.0, 6.0, 6.0, 10.0], hold_s=2.0, outside_s=0.0)
    same_comm = 1 / (3 / 8.0 + 1 / 12.0)  # every worker's iteration with the 4-worker communication time
    assert same_comm / equal == pytest.approx(1.0909, rel=1e-3)
    assert mixed / equal > 1.15
    assert min(comm[:3]) > 2.3  # the fast workers queue


def test_bad_input_is_one_error_naming_it(tmp_path: Path) -> None:
    import subprocess
    import sys

    missing = subprocess.run(
        [sys.executable, str(SCRIPT), "--profile-json", str(tmp_path / "none.json"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().splitlines()[-1].startswith("link_queue.py: error: --profile-json: not a profile")
    profile = tmp_path / "profile.json"
    profile.write_text('{"job": {}, "fits": {"cc": {}}, "compute_s": {}}')
    empty = subprocess.run(
        [sys.executable, str(SCRIPT), "--profile-json", str(profile), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert empty.returncode == 2 and "Traceback" not in empty.stderr
    assert (
        empty.stderr.strip().splitlines()[-1]
        == f"link_queue.py: error: {tmp_path}: no timing_*.json (a run folder of real_training.py)"
    )
