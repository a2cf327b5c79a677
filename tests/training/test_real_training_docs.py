"""docs/reproduction.md's transcript of ``benchmarks/real_training.py --quick``, run for real.

The long runs' figures are tables in the docs; the one transcript they show is of the quick
mode (three profiling clusters, two held-out ones: about 2 wall minutes, 10-15 CPU s), its
numbers ``...`` wildcards (doctest's ELLIPSIS), so the lines and labels are what the script
prints today (tests/test_docs_examples.py lists the block as run here)."""

from __future__ import annotations

import doctest
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the reference trainer needs torch: pip install 'dnnprov[train]'")

REPO = Path(__file__).resolve().parents[2]
COMMAND = "$ python benchmarks/real_training.py --quick"


def quick_block() -> str:
    """The console block of docs/reproduction.md whose first line is :data:`COMMAND`."""
    text = (REPO / "docs/reproduction.md").read_text()
    found = [b for b in re.findall(r"^```console\n(.*?)^```", text, re.DOTALL | re.MULTILINE) if b.startswith(COMMAND)]
    assert len(found) == 1, f"docs/reproduction.md has {len(found)} console blocks starting {COMMAND!r}"
    return found[0]


def matches(want: str, got: str) -> bool:
    return doctest.OutputChecker().check_output(want, got, doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)


def test_the_checker_refuses_a_changed_label():
    """The match below is not vacuous: the page's text with one label changed is refused."""
    want = quick_block().split("\n", 1)[1]
    assert "median |error|" in want and matches(want, want.replace("...", "1"))
    assert not matches(want, want.replace("median |error|", "mean |error|").replace("...", "1"))


def test_quick_transcript_is_what_the_benchmark_prints(tmp_path):
    """The quick mode, run as the page shows, prints the page's lines (exit 0 or 1: the targets
    are the benchmark's contract, not this test's)."""
    command, want = quick_block().split("\n", 1)
    argv = shlex.split(command[2:])
    assert argv[:2] == ["python", "benchmarks/real_training.py"]
    run = subprocess.run(
        [sys.executable, *argv[1:], "--out", str(tmp_path / "runs")],
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert run.returncode in (0, 1), run.stderr[-2000:]
    assert matches(want, run.stdout), f"--- page:\n{want}--- got:\n{run.stdout}"
