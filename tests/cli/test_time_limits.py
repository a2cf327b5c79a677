"""The time-limit contract of every command that takes a limit (issue 19).

No test asserts a wall time (CI machines are loaded): each counts the work done at a limit
that must stop it (a limit of 1e-9 s, or a replay whose callback sleeps, so that wall-clock
time passes while hardly any CPU time does), and checks that the answer says what was left.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import one_error, resnet110_problem
from dnnprov.solvers.joint.provision import solve_many

import dnnprov
from dnnprov.cli import main
from dnnprov.control.plan_choice import choose_plan
from dnnprov.control.replay import Simulation
from dnnprov.errors import InvalidInputError
from dnnprov.problems.interruption import load_trace

TABLE1 = "embedded:spot/paper-table1.json"
ZONES = ("us-east-1a", "us-east-1b")


def one_type_problem(time_s: float = 7200.0, quota: int = 4) -> dnnprov.SpotProblem:
    """ResNet-110 (paper model) on p3.2xlarge only, with an on-demand price."""
    problem = resnet110_problem(
        [quota, 0, 0, 0, 0], model="paper", loss=0.8, time_s=time_s, gamma_4=1.0, ps_price_per_h=0.192
    )
    types = tuple(replace(t, on_demand_price_per_h=3.06) for t in problem.instance_types if t.name == "p3.2xlarge")
    return problem.replace(instance_types=types, constraints=dnnprov.SpotConstraints(ps_count=(1, 1)))


def zone_traces(folder: Path) -> list[Path]:
    """Two small aligned pools of p3.2xlarge (5-minute ticks)."""
    paths = []
    for zone, data in zip(ZONES, ([2, 2, 0, 1] * 30, [0, 1, 2, 2] * 30)):
        paths.append(folder / f"{zone}_v100_1.json")
        paths[-1].write_text(json.dumps({"metadata": {"gap_seconds": 300}, "data": data}))
    return paths


@pytest.fixture
def files(tmp_path: Path) -> dict[str, object]:
    """An instance, its optimal plan (a solve --json document) and two zone traces."""
    problem = one_type_problem()
    instance = tmp_path / "one.json"
    dnnprov.write_instance(problem, instance)
    result = dnnprov.solve(problem, "enumerate")
    plan = tmp_path / "plan.json"
    plan.write_text(result.to_json())
    traces = zone_traces(tmp_path)
    return {
        "problem": problem,
        "instance": str(instance),
        "plan": str(plan),
        "result": result,
        "traces": [str(p) for p in traces],
        "trace_options": [a for p in traces for a in ("--trace", f"p3.2xlarge={p}")],
    }


# ------------------------------------------------------------------ refusals
def _commands(files: dict[str, object]) -> dict[str, list[str]]:
    instance, plan = files["instance"], files["plan"]
    return {
        "solve": ["solve", TABLE1],
        "replan": [
            "replan",
            instance,
            "--plan",
            plan,
            "--revoked",
            "p3.2xlarge=1",
            "--elapsed",
            "100",
            "--loss-reached",
            "2",
        ],
        "risk solve": ["risk", "solve", instance, "--robust", "1"],
        "simulate": ["simulate", instance, "--plan", plan, *files["trace_options"], "--runs", "5"],
        "risk fit": ["risk", "fit", *files["traces"]],
        "risk plan": ["risk", "plan", instance, *files["trace_options"], "--zones"],
        "sweep": ["sweep", TABLE1, "--deadlines", "600:3600:2"],
        "solve-many": ["solve-many", TABLE1, TABLE1],
    }


@pytest.mark.parametrize(
    "command", ["solve", "replan", "risk solve", "simulate", "risk fit", "risk plan", "sweep", "solve-many"]
)
@pytest.mark.parametrize("limit", ["nan", "inf", "-inf", "-1", "0", "1e16"])
def test_a_time_limit_that_is_not_a_finite_positive_number_is_refused(files, capsys, command, limit):
    """One error line naming --time-limit, exit 2, before any work (inf used to mean no limit
    for replan, risk solve and simulate; risk fit and risk plan had no limit; 1e16 was refused
    naming time_limit_s, the Python parameter, and only after sweep had printed its first line)."""
    one_error(capsys, [*_commands(files)[command], f"--time-limit={limit}"], "--time-limit", "finite")


@pytest.mark.parametrize("limit", [math.nan, math.inf, -1.0, 0.0])
def test_solve_many_in_python_refuses_a_limit_that_is_not_finite_and_positive(limit):
    """nan used to pass ``time_limit_s <= 0`` and left the solve without a deadline."""
    problem = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    with pytest.raises(InvalidInputError, match="time_limit_s"):
        solve_many([problem], time_limit_s=limit)


# ------------------------------------------------------------------ replays
def _sleeping(pause_s: float):
    """An ``on_run`` callback that lets wall-clock time pass (and almost no CPU time)."""

    def on_run(done: int, total: int) -> None:
        time.sleep(pause_s)

    return on_run


@pytest.mark.parametrize("policy", ["fallback", "failover"])
def test_a_replay_limit_is_wall_clock(files, policy):
    """Each run is followed by 0.05 s of sleep; at a 0.2 s limit the replay stops after at most
    5 runs of 40 (after the run that crosses it) and says so. The limit used to count CPU
    seconds only, and these 40 runs take far less CPU than 0.2 s: all 40 ran."""
    problem = files["problem"]
    plan = files["result"].plan
    pools = {"p3.2xlarge": [load_trace(p) for p in files["traces"]]}
    out = Simulation(problem, plan, pools, policy=policy, runs=40, time_limit_s=0.2).to_dict(on_run=_sleeping(0.05))
    assert 1 <= out["runs"] <= 5
    assert out["settings"]["stopped_by_time_limit"] is True and out["settings"]["runs_asked"] == 40


def test_simulate_cli_says_how_many_runs_were_done(files, capsys):
    """--time-limit 1e-9: one run (at least one is done), the output says 1 of 1000."""
    assert (
        main(
            [
                "simulate",
                files["instance"],
                "--plan",
                files["plan"],
                *files["trace_options"],
                "--zones",
                "--policy",
                "mpc",
                "--runs",
                "1000",
                "--time-limit",
                "1e-9",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "stopped by --time-limit 1e-09 s after 1 of 1000 runs" in out


# ------------------------------------------------------------------ risk plan
def test_risk_plan_stops_at_its_limit_and_counts_what_it_left(files):
    """At 1e-9 s no candidate is priced: status limit, no plan, and every candidate that a
    full choice prices is counted as unpriced."""
    problem = files["problem"]
    pools = {"p3.2xlarge": [load_trace(p) for p in files["traces"]]}
    full = choose_plan(problem, pools, zones=True, runs=5)
    cut = choose_plan(problem, pools, zones=True, runs=5, time_limit_s=1e-9)
    assert full.unpriced == 0 and full.result().status is dnnprov.Status.FEASIBLE
    assert cut.candidates == () and cut.unpriced == len(full.candidates) > 0
    result = cut.result()
    assert result.status is dnnprov.Status.LIMIT and result.plan is None
    assert f"0 candidates priced, {len(full.candidates)} not priced" in result.message


@pytest.mark.parametrize("limit", [0.05, 0.3, 1.0])
def test_risk_plan_cut_short_keeps_the_cheapest_priced(files, limit):
    """Whatever the limit cuts, the candidates priced are the first ones of the full choice
    (same figures), priced + unpriced is the whole set, and the plan is the cheapest priced."""
    problem = files["problem"]
    pools = {"p3.2xlarge": [load_trace(p) for p in files["traces"]]}
    full = choose_plan(problem, pools, zones=True, runs=5)
    cut = choose_plan(problem, pools, zones=True, runs=5, time_limit_s=limit)
    assert len(cut.candidates) + cut.unpriced == len(full.candidates)
    assert list(cut.candidates) == list(full.candidates[: len(cut.candidates)])
    priced = [c["expected_cost"] for c in cut.candidates if c["expected_cost"] is not None]
    assert cut.expected_cost == (min(priced) if priced else None)
    assert cut.result().status is (dnnprov.Status.LIMIT if cut.unpriced else dnnprov.Status.FEASIBLE)


def test_risk_plan_cli_without_a_priced_plan_exits_1(files, capsys):
    assert (
        main(["risk", "plan", files["instance"], *files["trace_options"], "--zones", "--time-limit", "1e-9", "--json"])
        == 1
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "limit" and doc["plan"] is None and doc["details"]["unpriced_candidates"] > 0


# ------------------------------------------------------------------ risk fit
def test_risk_fit_names_the_traces_its_limit_left(files, capsys):
    """Checked between files: at 1e-9 s the first trace is fitted, the other is named, exit 1."""
    first, second = files["traces"]
    assert main(["risk", "fit", first, second, "--time-limit", "1e-9", "--json"]) == 1
    captured = capsys.readouterr()
    fits = json.loads(captured.out)
    assert [f["trace"] for f in fits] == [first]
    assert "after 1 of 2 traces" in captured.err and second in captured.err


@pytest.mark.parametrize("mode", ["--zones", "--pool"])
def test_risk_fit_of_one_model_fits_nothing_when_a_trace_is_left(files, capsys, mode):
    assert main(["risk", "fit", *files["traces"], mode, "--time-limit", "1e-9"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "no model fitted" in captured.err


def test_risk_fit_within_its_limit_fits_every_trace(files, capsys):
    assert main(["risk", "fit", *files["traces"], "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 2


# ------------------------------------------------------------------ solves
@pytest.mark.parametrize(
    "argv",
    [
        ["risk", "solve", "embedded:spot/paper-table6-vgg19-4.6-2700.json", "--robust", "1", "--method", "decompose"],
        [
            "replan",
            TABLE1,
            "--plan",
            "{plan}",
            "--revoked",
            "g3.8xlarge=1",
            "--elapsed",
            "600",
            "--loss-reached",
            "1.5",
        ],
    ],
    ids=["risk solve", "replan"],
)
def test_a_tiny_limit_answers_limit_with_a_valid_bound(tmp_path, capsys, argv):
    """A 1e-9 s limit: the solve checks its clock and answers ``limit`` (or proves at once);
    the bound it gives is at most the optimum the same command proves without a limit."""
    plan = tmp_path / "plan.json"
    assert main(["solve", TABLE1, "--json"]) == 0
    plan.write_text(capsys.readouterr().out)
    argv = [a.replace("{plan}", str(plan)) for a in argv]
    answers = []
    for limit in ("60", "1e-9"):
        code = main([*argv, "--time-limit", limit, "--json"])
        doc = json.loads(capsys.readouterr().out)
        answers.append((code, doc.get("result", doc)))  # replan prints a plan document
    (_, proven), (code, cut) = answers
    assert proven["status"] == "optimal"
    assert code in (0, 1) and cut["status"] in ("limit", "optimal")
    assert cut["bound"] is None or cut["bound"] <= proven["cost"] * (1 + 1e-9)
    if cut["cost"] is not None:
        assert cut["cost"] >= proven["cost"] * (1 - 1e-9)


def test_sweep_and_solve_many_at_a_tiny_limit_say_limit(capsys):
    """solve-many at 1e-9 s stops in column generation (status limit, no plans, exit 1); every
    point of a sweep at 1e-9 s is ``limit`` or proven before the clock was read."""
    assert (
        main(
            [
                "solve-many",
                TABLE1,
                "embedded:spot/paper-table5-resnet110-0.8-2400.json",
                "--time-limit",
                "1e-9",
                "--json",
            ]
        )
        == 1
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "limit"
    code = main(["sweep", TABLE1, "--deadlines", "2000:3000:2", "--time-limit", "1e-9", "--no-progress"])
    lines = capsys.readouterr().out.splitlines()[1:]
    assert code in (0, 1) and len(lines) >= 2
    assert all(line.split()[2] in ("limit", "optimal", "infeasible") for line in lines[:2]), lines


# ------------------------------------------------------------------ start-up
@pytest.mark.parametrize(
    "modules",
    [
        ["dnnprov.cli.solving.joint", "dnnprov.solvers.joint.provision"],  # solve-many
        [
            "dnnprov.cli.revocation.risk",
            "dnnprov.solvers.revocation.risk",
            "dnnprov.solvers.revocation.robust",
        ],  # risk solve --risk / --robust
    ],
    ids=["solve-many", "risk solve"],
)
def test_commands_start_without_pyomo_and_scipy_stats(modules):
    """Start-up counts against a command's limit as its user sees it: solve-many and risk
    solve load neither Pyomo nor scipy.stats (about 1.5 CPU-s each; importing Pyomo made
    scipy's import pull in scipy.stats), not even in the solve (the Poisson bound of
    --deadline-probability is scipy.special's)."""
    bound = (
        "; import numpy as np; from dnnprov.solvers.revocation.risk import deadline_probability_bound as b; "
        "b({'nominal_time': np.array([1.0]), 'd_safe': np.array([1.0]), 'events_per_h': np.array([1.0])}, 10.0)"
    )
    code = (
        "import sys; "
        + "; ".join(f"import {m}" for m in modules)
        + (bound if "dnnprov.solvers.revocation.risk" in modules else "")
        + "; print(sorted(m for m in ('pyomo', 'scipy.stats') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.parametrize("k, mean", [(0, 0.0), (0, 2.5), (3, 2.5), (7, 0.3), (40, 35.0)])
def test_the_deadline_probability_bound_is_the_poisson_cdf(k, mean):
    """The bound P(Poisson(Lambda T_obj) <= k*) against the CDF summed term by term."""
    from dnnprov.solvers.revocation.risk import deadline_probability_bound

    time_obj, d_safe = 3600.0, 100.0
    outcome = {
        "nominal_time": np.array([time_obj - k * d_safe - 50.0]),
        "d_safe": np.array([d_safe]),
        "events_per_h": np.array([mean]),
    }
    expected = sum(math.exp(-mean) * mean**i / math.factorial(i) for i in range(k + 1))
    assert deadline_probability_bound(outcome, time_obj)[0] == pytest.approx(expected, rel=1e-12)
