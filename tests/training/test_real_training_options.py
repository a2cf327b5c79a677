"""benchmarks/real_training.py: a bad option is one line naming it, before any run; the `--plans` margin."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import benchmark_module

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "real_training.py"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--lr", "0"], "--lr: a number > 0, got 0.0"),
        (["--lr", "nan"], "--lr: a number > 0, got nan"),
        (["--speed", "-1"], "--speed: a number > 0, got -1.0"),
        (["--pilot", "0.1,x"], "--pilot: 'x' is not a number"),
        (["--pilot", "0.1,-2"], "--pilot: a number > 0, got -2.0"),
    ],
)
def test_a_bad_option_is_one_error_naming_it(options: list[str], message: str) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), *options], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == f"real_training.py: error: {message}"
    assert "Traceback" not in done.stderr


def test_plans_margin_covers_the_worst_under_prediction_it_saw() -> None:
    """`--plans D` plans for D / (1 + margin): a run under-predicted as badly as the worst run of
    the profile (its j in sample, its time held out) still finishes by D; none reached: no margin."""
    import math

    module = benchmark_module("real_training")
    profile = {
        "in_sample_iterations": [{"j_measured": 400, "j_eq3": 320}, {"j_measured": 300, "j_eq3": 330}],
        "held_out": [{"measured_s": 1000.0, "predicted_s": {"cc": 900.0}}],
    }
    margin = module.deadline_margin(profile)
    assert margin == 0.25  # 400 / 320 - 1, above the held-out 1000 / 900 - 1
    assert 900 / (1 + margin) * (400 / 320) <= 900  # (1 - 320 / 400 = 0.2 would plan 937.5 s of it)
    over = {"in_sample_iterations": [{"j_measured": 300, "j_eq3": 330}], "held_out": []}
    assert module.deadline_margin(over) == 0.0
    never = {**profile, "held_out": [{"measured_s": math.nan, "predicted_s": {"cc": 900.0}}]}
    assert module.deadline_margin(never) == math.inf
