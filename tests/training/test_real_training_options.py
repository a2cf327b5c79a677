"""benchmarks/real_training.py refuses a bad option with one line naming it, before any run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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
