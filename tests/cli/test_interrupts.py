"""Ctrl-C and SIGTERM keep the best plan (issue 22): real processes, real signals, real solves.

Each solve runs on large-024 (17 columns, quota sum 613; its proof takes 10-17 CPU s), is
signalled at the first log line after WARM_S once its log has shown an incumbent, and must
print that incumbent (or a better one) with a proven bound, say it was interrupted and exit 130. The plan is checked against the
predictor (eqs. 1-13), not against what the solver says about it.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import dnnprov
from dnnprov.cli.common import EXIT_INTERRUPTED

REPO = Path(__file__).resolve().parents[2]
LARGE = REPO / "data/benchmarks/large/large-024.json"
CLI = [sys.executable, "-m", "dnnprov"]
#: seconds of solving before the signal, at least; the signal goes with the next log line after it
#: (progress lines come every second), long before the proof ends
WARM_S = 2.0


@pytest.fixture(autouse=True)
def interruptible():
    """Ctrl-C as a terminal delivers it, however the suite was started: a shell that starts it in
    the background (``nohup ... &``) leaves SIGINT ignored, which this process and the processes
    it starts would inherit (Python keeps an ignored SIGINT ignored)."""
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def _signal_after_incumbent(argv: list[str], sig: int) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``dnnprov argv --log``; after WARM_S, at the next log line, send ``sig`` (an incumbent shown first).

    Returns the finished process and the cost of the last incumbent the log showed.
    """
    proc = subprocess.Popen([*CLI, *argv, "--log"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    started, incumbent, log = time.monotonic(), None, []
    assert proc.stderr is not None
    for line in proc.stderr:
        log.append(line)
        if line.startswith("*") and len(line.split()) > 2 and line.split()[2] != "-":
            incumbent = float(line.split()[2])
        if incumbent is not None and time.monotonic() - started >= WARM_S:
            break
    assert incumbent is not None, "".join(log)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "".join(log) + err), incumbent


def _assert_plan_meets_the_constraints(counts: dict[str, int], ps: int, cost: float) -> None:
    problem = dnnprov.read_instance(LARGE)
    predicted = dnnprov.predict(problem, counts=counts, ps=ps)
    assert predicted["feasible"], predicted["reasons"]
    assert predicted["cost"] == pytest.approx(cost, rel=1e-9)


def test_sigint_prints_the_best_plan_as_json():
    run, incumbent = _signal_after_incumbent(["solve", str(LARGE), "--json"], signal.SIGINT)
    assert run.returncode == EXIT_INTERRUPTED, run.stderr
    out = json.loads(run.stdout)
    assert out["status"] == "limit" and out["details"]["stopped"] == "interrupted"
    assert "interrupted" in out["message"] and "time limit" not in out["message"]
    assert out["cost"] <= incumbent * (1 + 1e-6)  # the incumbent is not lost
    assert 0 < out["bound"] <= out["cost"]
    _assert_plan_meets_the_constraints(out["plan"]["counts"], out["plan"]["ps"], out["cost"])
    assert "Traceback" not in run.stderr


def test_sigterm_prints_the_best_plan_as_text():
    run, incumbent = _signal_after_incumbent(["solve", str(LARGE)], signal.SIGTERM)
    assert run.returncode == EXIT_INTERRUPTED, run.stderr
    lines = dict(
        line.strip().split(" : ", 1) if " : " in line else (line.strip().split(": ", 1) + [""])[:2]
        for line in run.stdout.splitlines()[1:]
    )
    assert run.stdout.splitlines()[0].endswith(": limit")
    assert lines["note"].startswith("interrupted")
    cost = float(lines["cost"].lstrip("$"))
    bound = float(lines["bound"].split()[0].lstrip("$"))
    assert bound <= cost <= incumbent * (1 + 1e-6)
    assert "limit after" in run.stderr and "interrupted" in run.stderr  # the log's last line says so too
    assert "Traceback" not in run.stderr


def test_python_solve_returns_the_incumbent_on_ctrl_c():
    """In Python, a real SIGINT during dnnprov.solve returns the Result instead of raising."""

    class SignalAtIncumbent(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.started, self.sent, self.incumbent = time.monotonic(), False, None

        def emit(self, record: logging.LogRecord) -> None:
            line = record.getMessage()
            if line.startswith("*") and line.split()[2] != "-":
                self.incumbent = float(line.split()[2])
            if not self.sent and self.incumbent is not None and time.monotonic() - self.started >= WARM_S:
                self.sent = True
                os.kill(os.getpid(), signal.SIGINT)

    logger = logging.getLogger("test-interrupts")
    handler = SignalAtIncumbent()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        result = dnnprov.solve(dnnprov.read_instance(LARGE), time_limit_s=120, log=logger)
    finally:
        logger.removeHandler(handler)
    assert handler.sent
    assert result.status is dnnprov.Status.LIMIT and result.details["stopped"] == "interrupted"
    assert result.cost <= handler.incumbent * (1 + 1e-6) and result.bound <= result.cost
    _assert_plan_meets_the_constraints(result.plan.counts, result.plan.ps, result.cost)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored
    again = dnnprov.solve(dnnprov.read_instance(REPO / "data/instances/spot/paper-table1.json"))
    assert again.status is dnnprov.Status.OPTIMAL and "stopped" not in again.details  # the flag was reset


def test_batch_interrupt_keeps_finished_rows(tmp_path):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) during a batch:
    exit 130, every finished row is in the results file, each one whole."""
    out = tmp_path / "rows.csv"
    proc = subprocess.Popen(
        [
            *CLI,
            "batch",
            str(REPO / "data/benchmarks/large"),
            "--methods",
            "milp",
            "--time-limit",
            "2",
            "--workers",
            "1",
            "--out",
            str(out),
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (out.exists() and len(out.read_text().splitlines()) >= 3):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "interrupted" in err
    rows = list(csv.DictReader(out.open()))
    assert 2 <= len(rows) < 30
    assert all(r["status"] in ("optimal", "limit", "infeasible") and r["instance"].startswith("large-") for r in rows)


def test_stop_flag_semantics_with_real_signals():
    """Inside stop_on_signals a SIGINT sets the flag (no exception), a second one raises;
    a program's own handler is left alone with only_default; handlers come back after."""
    from dnnprov.progress import Clock, stop_on_signals, stop_requested

    clock = Clock(3600)
    with stop_on_signals((signal.SIGINT, signal.SIGTERM)):
        assert not stop_requested() and not clock.expired()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)  # the handler runs at the next bytecode
        assert stop_requested() and clock.expired() and clock.remaining() <= 0
        assert clock.stop_reason() == "interrupted"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert stop_requested()  # kept after the block, for the caller to ask

    seen = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with stop_on_signals(only_default=True):  # the program's handler stays
            assert not stop_requested()  # cleared on entry
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
            assert seen == [signal.SIGINT] and not stop_requested()
    finally:
        signal.signal(signal.SIGINT, previous)


def test_python_solve_model_with_a_user_constraint_keeps_the_incumbent_on_ctrl_c():
    """solve_model (a Pyomo model with the user's own constraint) on Ctrl-C returns its best plan
    so far, marked interrupted, instead of raising; the plan meets the user's constraint."""
    import threading

    import pyomo.environ as pyo
    from dnnprov.formulations.spot import create_spot_model

    from dnnprov.model_solve import solve_model

    m = create_spot_model(dnnprov.read_instance(LARGE))
    m.at_most_400 = pyo.Constraint(expr=m.workers <= 400)
    timer = threading.Timer(2 * WARM_S, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        result = solve_model(m, "milp", time_limit_s=300)
    finally:
        timer.cancel()
    assert result.status is dnnprov.Status.LIMIT and result.details["stopped"] == "interrupted"
    assert "interrupted" in result.message
    if result.plan is not None:  # an incumbent was found before the signal
        assert result.bound is None or result.bound <= result.cost
        assert result.plan.workers <= 400
        _assert_plan_meets_the_constraints(result.plan.counts, result.plan.ps, result.cost)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
