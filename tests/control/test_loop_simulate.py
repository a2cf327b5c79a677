"""``dnnprov simulate``: the control loop on the trace cloud, its per-run timelines, its hindsight
bound (valid in the loop's world, and changing nothing else) and its refusals (issue 28)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from control.test_loop import problem

import dnnprov
from dnnprov.cli import main
from dnnprov.control.replay import Simulation, window_bounds
from dnnprov.errors import InvalidInputError
from dnnprov.io.instances import write_instance
from dnnprov.problems.interruption import Trace, load_trace
from dnnprov.result import SpotPlan
from dnnprov.revocation.policies import POLICY_NAMES
from dnnprov.revocation.replay.hindsight import BoundPool, Hindsight

REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "spot-traces" / "availability"
V100 = REAL / "16-node" / "aws-08-27-2023"


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """The two-zone p3 instance of test_loop, its optimal plan (2 x p3.2xlarge) and two
    synthetic zones: one that comes and goes, one that always has room."""
    instance = tmp_path / "p3.json"
    write_instance(problem(), instance)
    plan = tmp_path / "plan.json"
    result = dnnprov.solve(problem(), "milp")
    assert result.plan is not None and result.plan.counts == {"p3.2xlarge": 2}
    plan.write_text(json.dumps(result.to_dict()))
    traces = []
    for zone, alive in (("us-west-2a", [2, 2, 0, 0] * 30), ("us-west-2c", [4, 4, 1, 4, 0, 4] * 20)):
        path = tmp_path / f"{zone}_v100_1.json"
        path.write_text(json.dumps({"metadata": {"gap_seconds": 300}, "data": alive}))
        traces += ["--trace", f"p3.2xlarge={path}"]
    return instance, plan, traces


def simulate_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["simulate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_per_run_json_has_offsets_and_event_timelines(
    files: tuple[Path, Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    instance, plan, traces = files
    out = simulate_json(
        capsys,
        str(instance),
        "--plan",
        str(plan),
        *traces,
        "--policy",
        "failover",
        "--runs",
        "5",
        "--seed",
        "3",
        "--per-run",
    )
    assert out["runs"] == 5 and len(out["per_run"]) == 5 and out["policy"] == "failover"
    for key in ("met_deadline", "cost_mean", "cost_p05", "cost_p50", "cost_p95", "replans_mean", "settings"):
        assert key in out
    for run in out["per_run"]:
        assert isinstance(run["offset"], int) and run["events"][0]["kind"] == "launch"
        assert run["met_deadline"] == (run["state"] == "met")
        assert [e["time_s"] for e in run["events"]] == sorted(e["time_s"] for e in run["events"])
        assert run["events"][-1]["kind"] == "end"
    # a run replayed alone from its offset tells the same story
    first = out["per_run"][0]
    problem_, doc = dnnprov.read_instance(str(instance)), json.loads(plan.read_text())
    sim_plan = SpotPlan(counts=doc["plan"]["counts"], ps=doc["plan"]["ps"])
    loaded = {"p3.2xlarge": [load_trace(t.split("=", 1)[1]) for t in traces[1::2]]}
    from dnnprov.control.loop import RunSettings
    from dnnprov.control.replay import run_once
    from dnnprov.revocation.policies import make_policy

    alone = run_once(problem_, sim_plan, loaded, make_policy("failover"), first["offset"], RunSettings(horizon=3.0))
    assert alone.to_dict()["events"] == first["events"] and alone.outcome.cost == first["cost"]


def test_the_engine_option_is_gone_with_one_clear_error(
    files: tuple[Path, Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    instance, plan, traces = files
    for engine in ("loop", "tick"):
        assert main(["simulate", str(instance), "--plan", str(plan), *traces, "--engine", engine]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--engine" in err[0] and "one engine" in err[0]


@pytest.mark.parametrize(
    "option, value, field",
    [
        ("--join", "nan", "--join"),
        ("--join", "-1000", "--join"),
        ("--horizon", "0", "--horizon"),
        ("--horizon", "nan", "--horizon"),
        ("--poll", "0", "--poll"),
        ("--runs", "0", "--runs"),
        ("--replan-method", "heuristic", "--replan-method"),
        ("--fit-period", "0:0.5", "--fit-period"),
    ],
)
def test_bad_options_are_one_error_naming_the_option(
    option: str, value: str, field: str, files: tuple[Path, Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 28's defects (``--join nan`` exited 3, ``--horizon 0`` made every run free, ``--join
    -1000`` was accepted) and options that go with another policy: exit 2, one line."""
    instance, plan, traces = files
    for policy in ("none", "mpc") if option in ("--join", "--horizon") else ("failover",):
        assert (
            main(
                [
                    "simulate",
                    str(instance),
                    "--plan",
                    str(plan),
                    *traces,
                    "--runs",
                    "2",
                    "--policy",
                    policy,
                    option,
                    value,
                ]
            )
            == 2
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and field in err[0], err


def test_a_trace_shorter_than_a_window_is_refused_never_looped(
    files: tuple[Path, Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    instance, plan, _ = files
    short = tmp_path / "us-west-2a_v100_1.json"
    short.write_text(json.dumps({"metadata": {"gap_seconds": 300}, "data": [2] * 20}))  # 6000 s < 3 x 2700 s
    assert main(["simulate", str(instance), "--plan", str(plan), "--trace", f"p3.2xlarge={short}", "--runs", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not loop" in err[0] and str(short) in err[0]


def test_hindsight_adds_the_bound_and_changes_nothing_else(
    files: tuple[Path, Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    instance, plan, traces = files
    common = [str(instance), "--plan", str(plan), *traces, "--runs", "8", "--seed", "5", "--per-run"]
    for policy in ("none", "uniform-progress", "mpc"):
        plain = simulate_json(capsys, *common, "--policy", policy)
        bounded = simulate_json(capsys, *common, "--policy", policy, "--hindsight")
        extra = {"hindsight_cost_mean", "hindsight_unreachable_runs"}
        assert set(bounded) - set(plain) == extra
        rows = bounded.pop("per_run")
        assert [{k: v for k, v in r.items() if k != "hindsight_cost"} for r in rows] == plain.pop("per_run")
        assert bounded["settings"].pop("hindsight_scope") == "plan"
        assert {k: v for k, v in bounded.items() if k not in extra} == plain


def hindsight_holds(
    problem_: dnnprov.SpotProblem, plan: SpotPlan, traces: dict[str, list[Trace]], runs: int, seed: int
) -> int:
    """Every policy on the same windows: the bound <= the cost of every run that met T_obj
    (returns how many (run, policy) pairs met, so that the check is not empty)."""
    checked = 0
    for policy in POLICY_NAMES:
        sim = Simulation(problem_, plan, traces, policy=policy, runs=runs, seed=seed, hindsight=True)
        done, _, bounds = sim.run()
        assert bounds is not None and len(bounds) == len(done)
        for run, bound in zip(done, bounds):
            if run.outcome.met_deadline:
                assert math.isfinite(bound) and bound <= run.outcome.cost, (policy, run.offset, bound, run.outcome)
                checked += 1
    return checked


def test_hindsight_is_below_every_policy_that_met_on_synthetic_windows() -> None:
    """Notices, refusals and on-demand takeovers on hand-made zones (the cost of a run that met
    is never below its window's bound, whatever the policy)."""
    p = problem()
    plan = SpotPlan(counts={"p3.2xlarge": 2}, ps=1)
    traces = {
        "p3.2xlarge": [
            Trace("t/us-west-2a_v100_1.json", 300.0, np.array([2, 2, 0, 1, 0, 2] * 30)),
            Trace("t/us-west-2c_v100_1.json", 300.0, np.array([1, 0, 0, 2, 2, 1, 0] * 26)),
        ]
    }
    assert hindsight_holds(p, plan, traces, runs=6, seed=1) >= 12


@pytest.mark.skipif(not V100.is_dir(), reason="../shared/data/spot-traces (real traces) is absent")
def test_hindsight_is_below_every_policy_that_met_on_real_windows() -> None:
    """The three real 16-node V100 zones of 2023-08-27: a 4-worker plan (two runs per policy)."""
    p = problem()
    plan = SpotPlan(counts={"p3.2xlarge": 4}, ps=1)
    traces = {"p3.2xlarge": [load_trace(str(V100 / f"{z}_v100_1.json")) for z in ("us-west-2a", "us-west-2c")]}
    assert hindsight_holds(p, plan, traces, runs=2, seed=4) >= 4


def test_held_capacity_counts_the_instances_under_notice() -> None:
    """A pool that drops 3 -> 0 at 300 s holds up to 3 instances until 420 s (the notice), then
    none; a drop and a rise within the notice add up (the notified ones and the new launches)."""
    p = problem()
    bound = Hindsight(p, SpotPlan(counts={"p3.2xlarge": 2}, ps=1))
    lengths, held = bound.slots([BoundPool("p3.2xlarge", 0.918, np.array([3, 0, 0, 3, 1, 3] * 10))], 60.0)
    times = np.concatenate([[0.0], np.cumsum(lengths)])
    at = {round(float(t)): int(h) for t, h in zip(times[:-1], held[0])}
    # ticks of 60 s: 3 | 0 (3 notified at 60, held until 180) | 0 | 3 | 1 (2 notified at 240) | 3 (+ those 2)
    assert at[0] == 3 and at[60] == 3 and at[120] == 3 and at[180] == 3 + 0
    assert at[240] == 1 + 2 and at[300] == 3 + 2


def test_an_impossible_window_has_an_infinite_bound_and_a_plan_too_big_is_refused() -> None:
    p = problem()
    plan = SpotPlan(counts={"p3.2xlarge": 2}, ps=1)
    traces = {"p3.2xlarge": [Trace("t/us-west-2a_v100_1.json", 300.0, np.array([0] * 60))]}
    no_od = p.replace(instance_types=tuple(replace(t, on_demand_price_per_h=None) for t in p.instance_types))
    assert window_bounds(no_od, plan, traces, [0]) == [math.inf]
    assert window_bounds(p, plan, traces, [0])[0] > 0
    with pytest.raises(InvalidInputError) as err:
        Hindsight(p, SpotPlan(counts={"p3.2xlarge": 300_000}, ps=1))
    assert err.value.field == "--hindsight"


def test_replan_is_a_policy_of_the_loop_and_solves_takeovers() -> None:
    """replan re-solves at the events it sees (the first poll at least) and meets the deadline
    when a zone always has room."""
    p = problem()
    plan = SpotPlan(counts={"p3.2xlarge": 2}, ps=1)
    traces = {
        "p3.2xlarge": [
            Trace("t/us-west-2a_v100_1.json", 300.0, np.array([2, 0, 0, 2] * 40)),
            Trace("t/us-west-2c_v100_1.json", 300.0, np.array([4] * 160)),
        ]
    }
    out = Simulation(p, plan, traces, policy="replan", runs=3, seed=0).to_dict(per_run=True)
    assert out["met_deadline"] == 1.0 and out["replans_mean"] >= 1
    assert out["settings"]["replan_method"] == "exact"
    heuristic = Simulation(p, plan, traces, policy="replan", runs=3, seed=0, replan_method="heuristic").to_dict()
    assert heuristic["met_deadline"] == 1.0


def test_replan_launches_a_plan_that_fits_as_it_is() -> None:
    """replan does not re-solve a plan at the start when its spot workers fit the capacity the
    controller knows: an on-demand plan stays on demand (no revocation, no takeover) and a plan
    with a spare spot worker keeps it, where re-solving would trade each for the cheapest
    takeover (spot, and one worker fewer). A plan that does not fit is asked for as
    it is and re-solved once its launch is partly refused."""
    p = problem()
    p = p.replace(constraints=replace(p.constraints, markets=("spot", "on-demand")))
    traces = {
        "p3.2xlarge": [
            Trace("t/us-west-2a_v100_1.json", 300.0, np.array([3, 0, 0, 3] * 40)),
            Trace("t/us-west-2c_v100_1.json", 300.0, np.array([4] * 160)),
        ]
    }
    on_demand = SpotPlan(counts={"p3.2xlarge:on-demand": 2}, ps=1)
    out = Simulation(p, on_demand, traces, policy="replan", runs=3, seed=0).to_dict()
    assert out["met_deadline"] == 1.0
    assert out["revocations_mean"] == 0 and out["replans_mean"] == 0 and out["on_demand_launched_mean"] == 2

    def steady(free: int) -> dict[str, list[Trace]]:
        zones = ("us-west-2a", "us-west-2c")
        return {"p3.2xlarge": [Trace(f"t/{z}_v100_1.json", 300.0, np.array([free] * 160)) for z in zones]}

    spare = Simulation(p, SpotPlan(counts={"p3.2xlarge": 3}, ps=1), steady(4), policy="replan", runs=2, seed=0)
    kept = spare.to_dict()
    assert kept["revocations_mean"] == 0 and kept["replans_mean"] == 0  # nothing lost
    too_big = Simulation(p, SpotPlan(counts={"p3.2xlarge": 8}, ps=1), steady(1), policy="replan", runs=1, seed=0)
    run = too_big.to_dict(per_run=True)["per_run"][0]
    asked = [e["asked"] for e in run["events"] if e["kind"] == "launch" and e["role"] == "worker"]
    assert asked[0] == 8 and run["replans"] >= 1  # the plan asked for; 2 of 8 granted: re-solved
