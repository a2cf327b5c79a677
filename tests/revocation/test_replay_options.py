"""The option pairs `simulate` refuses, and bad --join and --horizon (issue 28), on the CLI and
in the Python API."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import resnet110_problem

import dnnprov
from dnnprov.cli import main
from dnnprov.control.replay import Simulation
from dnnprov.errors import InvalidInputError
from dnnprov.problems.interruption import load_trace


@pytest.mark.parametrize(
    ("policy", "changes", "field", "text"),
    [
        ("mpc", {"model": "m", "fit_period": (0.0, 0.5)}, "--model", "give --model or --fit-period, not both"),
        ("failover", {"model": "m"}, "--model", "goes with --policy mpc"),
        ("none", {"fit_period": (0.0, 0.5)}, "--fit-period", "goes with --policy mpc"),
        ("mpc", {"replan_method": "heuristic"}, "--replan-method", "goes with --policy replan"),
        ("sideways", {}, "--policy", "must be one of"),
    ],
)
def test_options_that_do_not_go_together_are_refused_naming_the_field(
    policy, changes, field, text, tmp_path: Path
) -> None:
    """The one engine's option rules (the CLI and the service build the same Simulation; the
    service names its body's fields, tests/service/test_simulate_jobs.py)."""
    problem, _, _, _, traces = _one_type(tmp_path)
    plan = dnnprov.solve(problem, "enumerate").plan
    with pytest.raises(InvalidInputError) as info:
        Simulation(problem, plan, traces, policy=policy, runs=1, **changes)
    assert info.value.field == field and text in info.value.problem


# ------------------------------------------------------------------ join and horizon (issue 28)
def _one_type(tmp_path: Path) -> tuple[dnnprov.SpotProblem, Path, Path, list[str], dict]:
    """ResNet-110 (paper model) on p3.2xlarge, its plan, and one long 300 s trace (files and loaded)."""
    problem = resnet110_problem([4, 0, 0, 0, 0], model="paper", loss=0.8, time_s=7200.0, gamma_4=1.0)
    types = tuple(replace(t, on_demand_price_per_h=3.06) for t in problem.instance_types if t.name == "p3.2xlarge")
    problem = problem.replace(instance_types=types, constraints=dnnprov.SpotConstraints(ps_count=(1, 1)))
    instance, plan, path = tmp_path / "one.json", tmp_path / "plan.json", tmp_path / "us-east-1a_v100_1.json"
    dnnprov.write_instance(problem, instance)
    plan.write_text(dnnprov.solve(problem, "enumerate").to_json())
    path.write_text(json.dumps({"metadata": {"gap_seconds": 300}, "data": [4, 3, 4, 2] * 100}))
    return problem, instance, plan, ["--trace", f"p3.2xlarge={path}"], {"p3.2xlarge": [load_trace(path)]}


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--join", "nan"),
        ("--join", "-1000"),
        ("--join", "inf"),
        ("--horizon", "0"),
        ("--horizon", "nan"),
        ("--horizon", "0.5"),
    ],
)
def test_cli_refuses_bad_join_and_horizon(
    option: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """simulate (every policy) and risk plan: one error line naming the option, exit 2 (issue 28: NaN
    gave an IndexError, exit 3; --horizon 0 made every run free, exit 0; --join -1000 was taken)."""
    _, instance, plan, traces, _ = _one_type(tmp_path)
    commands = [
        ["simulate", str(instance), "--plan", str(plan), *traces, "--runs", "3", "--policy", policy]
        for policy in ("none", "fallback", "mpc", "failover")
    ]
    if option == "--join":
        commands.append(["risk", "plan", str(instance), *traces])
    for command in commands:
        assert main([*command, option, value]) == 2, command
        err = capsys.readouterr().err
        assert err.startswith(f"dnnprov: error: {option}: must be") and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"join_s": math.nan}, "--join"),
        ({"join_s": -1000.0}, "--join"),
        ({"horizon": 0.0}, "--horizon"),
        ({"horizon": math.inf}, "--horizon"),
    ],
)
def test_python_api_refuses_bad_join_and_horizon(options: dict, field: str, tmp_path: Path) -> None:
    """Simulation (every policy) and choose_plan refuse them naming the field, before any run."""
    from dnnprov.control.plan_choice import choose_plan

    problem, _, _, _, traces = _one_type(tmp_path)
    plan = dnnprov.solve(problem, "enumerate").plan
    calls = [
        lambda: Simulation(problem, plan, traces, runs=2, **options),
        lambda: Simulation(problem, plan, traces, policy="mpc", runs=2, **options),
    ]
    if field == "--join":
        calls.append(lambda: choose_plan(problem, traces, zones=False, runs=2, **options))
    for call in calls:
        with pytest.raises(InvalidInputError) as info:
            call()
        assert info.value.field in (field, field.removeprefix("--").replace("join", "join_s"))


@pytest.mark.parametrize("poll_s", [1e-3, 1e-9])
def test_a_poll_so_short_that_a_run_takes_millions_of_polls_is_refused(poll_s: float, tmp_path: Path) -> None:
    """--poll 0.001 was taken: each run stepped the loop 21.6 million times (hours; no error).
    Refused when the Simulation is made, naming --poll, before any run."""
    problem, _, _, _, traces = _one_type(tmp_path)
    plan = dnnprov.solve(problem, "enumerate").plan
    with pytest.raises(InvalidInputError) as info:
        Simulation(problem, plan, traces, runs=1, poll_s=poll_s)
    assert info.value.field == "--poll" and "polls" in info.value.problem
    Simulation(problem, plan, traces, runs=1, poll_s=0.1)  # 216,000 polls a run: taken


def test_zones_changes_nothing_as_its_help_says(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`simulate --zones` is accepted for old scripts and, as its help says, changes nothing (the
    traces of a type are always its aligned pools): the same JSON, figures, settings and per-run
    events, with or without it; its help says so."""
    _, instance, plan, traces, _ = _one_type(tmp_path)
    base = ["simulate", str(instance), "--plan", str(plan), *traces, "--policy", "failover", "--runs", "4"]
    outs = []
    for extra in ([], ["--zones"]):
        assert main([*base, *extra, "--seed", "3", "--per-run", "--json"]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0] == outs[1] and len(outs[0]["per_run"]) == 4
    assert main(["simulate", "--help"]) == 0
    assert "kept for old scripts" in " ".join(capsys.readouterr().out.split())
