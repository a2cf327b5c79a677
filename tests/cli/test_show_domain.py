"""``dnnprov show`` prints what plans may use, not only the fitted ranges (issue 23, noticed).

Oracles: arithmetic on the numbers of the instance file (Table I's gamma_2 = -0.2,
gamma_3 = 2507.6 and its fitted ranges), not the code's own helpers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TABLE1 = REPO / "data/instances/spot/paper-table1.json"


def _show(data: dict) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "dnnprov", "show", "-"],
        input=json.dumps(data),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_show_prints_the_capped_batch_range_and_the_worker_range_plans_may_use():
    data = json.loads(TABLE1.read_text())
    out = _show(data)
    # eq. (3)'s numerator A(b) = -0.2 b + 2507.6 is 869.2 at b_w = 8192; half of it at
    # b = (434.6 - 2507.6) / -0.2 = 10365, below 8192 x 1.5 = 12288. Workers 2..7 x 1.5: 2..10.
    assert "plans may use: batch_wa 682.667..10365 (factor 1.5" in out
    assert "workers 2..10 (factor 1.5)" in out and ">= 100 iterations" in out


def test_show_prints_per_axis_factors_the_floor_and_the_logged_axis():
    data = json.loads(TABLE1.read_text())
    data["workload"]["domain"].update(
        extrapolation=1,
        extrapolation_workers=2,
        min_iterations=250,
        loss=[0.9, 2.5],
        iterations=[0, 4000],
        extrapolation_iterations=1.25,
        loss_axis="enforce",
    )
    out = _show(data)
    # b_w factor 1: the fitted 1024..8192 (the cap at 10365 lies beyond); workers ceil(2/2)..7*2.
    assert "batch_wa 1024..8192 (factor 1," in out and "workers 1..14 (factor 2)" in out
    assert ">= 250 iterations" in out
    # 4000 logged steps x 1.25 = 5000.
    assert "logged: loss 0.9..2.5, iterations 0..4000 (beyond 5000: extrapolated); loss_axis enforce" in out
