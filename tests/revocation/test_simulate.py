"""dnnprov simulate (the control loop on the trace cloud): small trace files written here, and the real traces."""

from __future__ import annotations

import glob
import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import resnet110_problem

import dnnprov
from dnnprov.cli import main
from dnnprov.control.replay import Simulation, draw_offsets
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.importing import default_shared_data
from dnnprov.problems.interruption import load_trace

JOIN = 126.0


def small_problem(time_s: float = 3300.0, markets=("spot",)) -> dnnprov.SpotProblem:
    """ResNet-110 (paper model) on p3.2xlarge and g3.8xlarge, with on-demand prices 3x spot."""
    problem = resnet110_problem(
        [2, 0, 4, 0, 0], model="paper", loss=0.8, time_s=time_s, gamma_4=1.0, ps_price_per_h=0.192
    )
    return problem.replace(
        instance_types=tuple(replace(t, on_demand_price_per_h=3 * t.spot_price_per_h) for t in problem.instance_types),
        constraints=dnnprov.SpotConstraints(markets=markets, ps_count=(1, 2)),
    )


def write_trace(folder: Path, name: str, data: list[int], gap: float = 60.0) -> Path:
    path = folder / name
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}))
    return path


def traces_of(folder: Path, data: list[int], gap: float = 60.0) -> dict:
    return {name: [load_trace(write_trace(folder, f"{name}.json", data, gap))] for name in ("p3.2xlarge", "g3.8xlarge")}


def simulate(problem: dnnprov.SpotProblem, plan: dnnprov.SpotPlan, traces: dict, **options: object) -> dict:
    return Simulation(problem, plan, traces, **options).to_dict(per_run=True)  # type: ignore[arg-type]


def test_no_revocation_meets_the_plan(tmp_path: Path) -> None:
    """Capacity always there: every policy meets T_obj at the plan's time, and costs the plan
    plus at most one poll (the loop sees the end at its next poll)."""
    problem = small_problem()
    best = dnnprov.solve(problem, "enumerate")
    assert best.plan is not None and best.cost is not None and best.time_s is not None
    traces = traces_of(tmp_path, [8] * 200)  # a run covers 3 x 3300 s + a poll
    rate = best.cost / best.time_s * 3600
    for policy in ("none", "replan", "fallback"):
        s = simulate(problem, best.plan, traces, policy=policy, runs=4, seed=3)
        assert s["met_deadline"] == 1.0 and s["revocations_mean"] == 0
        assert s["finish_s_mean"] == pytest.approx(best.time_s, rel=1e-9)
        assert best.cost * (1 - 1e-9) <= s["cost_mean"] <= best.cost + rate * 15 / 3600 + 1e-9
        assert s["loss_mean"] == pytest.approx(problem.slo.loss, rel=1e-6)


def test_cli_simulate_json(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`dnnprov simulate --json` prints one object with the documented keys; bad traces exit 2."""
    problem = small_problem()
    instance = tmp_path / "small.json"
    dnnprov.write_instance(problem, instance)
    assert main(["solve", str(instance), "--method", "enumerate", "--json"]) == 0
    plan = tmp_path / "plan.json"
    plan.write_text(capsys.readouterr().out)
    trace = write_trace(tmp_path, "t.json", ([1] * 30 + [0] * 5) * 6)
    args = [
        "simulate",
        str(instance),
        "--plan",
        str(plan),
        "--trace",
        f"p3.2xlarge={trace}",
        "--trace",
        f"g3.8xlarge={trace}",
        "--runs",
        "6",
        "--seed",
        "1",
        "--policy",
        "replan",
    ]
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["runs"] == 6 and 0 <= out["met_deadline"] <= 1
    assert out["cost_p95"] > 0 and out["cost_mean"] > 0 and out["settings"]["replan_method"] == "exact"
    assert out["settings"]["plan"] == json.loads(plan.read_text())["plan"]
    assert main(args) == 0
    assert "met deadline" in capsys.readouterr().out
    assert main(["simulate", str(instance), "--plan", str(plan), "--trace", f"p9.xlarge={trace}"]) == 2
    assert "--trace p9.xlarge" in capsys.readouterr().err
    bad = write_trace(tmp_path, "bad.json", [1, -1, 1])
    assert main(["simulate", str(instance), "--plan", str(plan), "--trace", f"p3.2xlarge={bad}"]) == 2
    assert "data[1]" in capsys.readouterr().err


def test_plan_type_without_trace_is_refused(tmp_path: Path) -> None:
    """A spot type the plan uses needs a trace."""
    problem = small_problem()
    best = dnnprov.solve(problem, "enumerate")
    assert best.plan is not None
    used = next(k for k, v in best.plan.counts.items() if v)
    traces = {k: v for k, v in traces_of(tmp_path, [1] * 5).items() if k != used}
    with pytest.raises(InvalidInputError, match="no trace"):
        Simulation(problem, best.plan, traces, runs=1)


# ------------------------------------------------------------------------ real traces
SHARED = default_shared_data()


@pytest.mark.skipif(
    SHARED is None or not (SHARED / "spot-traces").is_dir(),
    reason="../shared/data/spot-traces is absent (real spot traces)",
)
def test_real_traces_replay() -> None:
    """The 16-node V100 availability traces (aligned zones) against a 2 x p3.2xlarge plan:
    revocations or refusals happen, and fallback meets T_obj at least as often as none."""
    files = sorted(glob.glob(str(SHARED / "spot-traces/availability/16-node/*/*_v100_1.json")))
    assert files, "the 16-node V100 traces are missing from the shared data"
    traces = {"p3.2xlarge": [load_trace(f) for f in files]}
    problem = small_problem(time_s=3800.0, markets=("spot", "on-demand"))
    plan = dnnprov.SpotPlan(counts={"p3.2xlarge": 2, "g3.8xlarge": 0}, ps=1)  # 3614 s planned
    out = {p: simulate(problem, plan, traces, policy=p, runs=20, seed=0) for p in ("none", "fallback")}
    assert out["none"]["revocations_mean"] + out["none"]["refusals_mean"] > 0
    assert out["fallback"]["met_deadline"] >= out["none"]["met_deadline"]


# ------------------------------------------------------------- issue 18 defects
def _cli_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> tuple[Path, Path]:
    problem = small_problem(time_s=3600.0, markets=("spot", "on-demand"))
    instance = tmp_path / "small.json"
    dnnprov.write_instance(problem, instance)
    assert main(["solve", str(instance), "--method", "enumerate", "--json"]) == 0
    plan = tmp_path / "plan.json"
    plan.write_text(capsys.readouterr().out)
    return instance, plan


def test_per_run_json_with_capacity_changes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`--per-run --json` on runs that cross capacity changes prints valid JSON (it crashed on a bool)."""
    instance, plan = _cli_files(tmp_path, capsys)
    trace = write_trace(tmp_path, "t.json", ([1] * 10 + [0] * 5) * 14)
    for policy in ("none", "replan", "fallback"):
        args = [
            "simulate",
            str(instance),
            "--plan",
            str(plan),
            "--trace",
            f"p3.2xlarge={trace}",
            "--trace",
            f"g3.8xlarge={trace}",
            "--runs",
            "4",
            "--policy",
            policy,
            "--per-run",
            "--json",
        ]
        assert main(args) == 0
        out = json.loads(capsys.readouterr().out)
        assert len(out["per_run"]) == 4 and any(r["revocations"] or r["refusals"] for r in out["per_run"])
        assert all(isinstance(r["met_deadline"], bool) for r in out["per_run"])


def test_tiny_gap_is_refused_not_materialized(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A 1e-9 s tick would need 10^13 ticks per run: one error naming gap_seconds, exit 2."""
    instance, plan = _cli_files(tmp_path, capsys)
    trace = write_trace(tmp_path, "t.json", [1, 0, 1, 1], gap=1e-9)
    code = main(
        [
            "simulate",
            str(instance),
            "--plan",
            str(plan),
            "--trace",
            f"p3.2xlarge={trace}",
            "--trace",
            f"g3.8xlarge={trace}",
            "--runs",
            "2",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "metadata.gap_seconds" in err and "limit" in err


# ------------------------------------------------------------- windows within the trace (issue 28)
def test_a_trace_shorter_than_a_run_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A run of 3 x 3300 s covers 165 ticks of 60 s: a 100-tick trace is refused, naming it and both
    lengths (it used to be replayed in a loop without a word); the CLI says so in one line, exit 2."""
    problem = small_problem()
    best = dnnprov.solve(problem, "enumerate")
    assert best.plan is not None
    traces = traces_of(tmp_path, [1] * 100)
    with pytest.raises(InvalidInputError) as info:
        Simulation(problem, best.plan, traces, runs=1)
    assert info.value.field.endswith(".json")
    assert "100 ticks of 60 s (6,000 s) do not cover a run of 9,900 s" in info.value.problem
    assert "165 ticks" in info.value.problem
    assert simulate(problem, best.plan, traces, runs=1, horizon=1.5)["runs"] == 1  # 83 ticks and a poll: covered
    instance, plan = _cli_files(tmp_path, capsys)
    short = write_trace(tmp_path, "short.json", [1] * 100)
    assert (
        main(
            [
                "simulate",
                str(instance),
                "--plan",
                str(plan),
                "--trace",
                f"p3.2xlarge={short}",
                "--trace",
                f"g3.8xlarge={short}",
                "--runs",
                "2",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "short.json: 100 ticks of 60 s" in err and "180 ticks" in err


def test_windows_never_run_past_the_trace_end(tmp_path: Path) -> None:
    """Offsets are drawn so that a run's window (horizon, a poll and the tick the clock may reach)
    lies in the trace: on a trace whose last ticks have no capacity no window reaches them."""
    longer = {"p3.2xlarge": [load_trace(write_trace(tmp_path, "longer.json", [1] * 400))]}
    span = 9900.0 + 15.0
    offsets = draw_offsets(longer, span, 500, 0)
    assert max(offsets) + span / 60 + 1 <= 400 and min(offsets) == 0
    problem = small_problem()
    best = dnnprov.solve(problem, "enumerate")
    assert best.plan is not None
    edge = traces_of(tmp_path, [8] * 167 + [0] * 5)
    s = simulate(problem, best.plan, edge, policy="none", runs=10, seed=5)
    assert s["revocations_mean"] == 0 and s["met_deadline"] == 1.0
