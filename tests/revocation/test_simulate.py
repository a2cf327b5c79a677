"""dnnprov simulate: replays of small trace files written here, and of the real traces."""

from __future__ import annotations

import glob
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import dnnprov
from conftest import resnet110_problem
from dnnprov.cli import main
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalog_import import default_shared_data
from dnnprov.revocation.replan import replan
from dnnprov.problems.interruption import load_trace
from dnnprov.revocation.simulate import Simulator, simulate
from dnnprov.solvers.robust import progress_speed, progress_target

JOIN = 126.0


def small_problem(time_s: float = 3300.0, markets=("spot",)) -> dnnprov.SpotProblem:
    """ResNet-110 (paper model) on p3.2xlarge and g3.8xlarge, with on-demand prices 3x spot."""
    problem = resnet110_problem([2, 0, 4, 0, 0], model="paper", loss=0.8, time_s=time_s, gamma_4=1.0,
                                ps_price_per_h=0.192)
    return problem.replace(instance_types=tuple(replace(t, on_demand_price_per_h=3 * t.spot_price_per_h)
                                                for t in problem.instance_types),
                           constraints=dnnprov.SpotConstraints(markets=markets, ps_count=(1, 2)))


def write_trace(folder: Path, name: str, data: list[int], gap: float = 60.0) -> Path:
    path = folder / name
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}))
    return path


def traces_of(folder: Path, data: list[int], gap: float = 60.0) -> dict:
    return {name: [load_trace(write_trace(folder, f"{name}.json", data, gap))] for name in ("p3.2xlarge", "g3.8xlarge")}


def test_no_revocation_costs_exactly_the_plan(tmp_path: Path) -> None:
    """Capacity always there: every policy meets T_obj at exactly the plan's time and cost."""
    problem = small_problem()
    best = dnnprov.solve(problem, "enumerate")
    traces = traces_of(tmp_path, [1] * 165)            # a run covers 3 x 3300 s = 165 ticks
    for policy in ("none", "replan", "fallback"):
        s = simulate(problem, best.plan, traces, policy=policy, runs=20, seed=3).summary()
        assert s["met_deadline"] == 1.0 and s["revocations_mean"] == 0 and s["replans_mean"] == 0
        assert s["cost_mean"] == pytest.approx(best.cost, rel=1e-9)
        assert s["finish_s_mean"] == pytest.approx(best.time_s, rel=1e-9)
        assert s["loss_mean"] == pytest.approx(problem.slo.loss, rel=1e-9)


def test_no_capacity_means_no_training_without_a_fallback(tmp_path: Path) -> None:
    """Spot never available: policy none trains nothing; fallback goes on-demand and pays for it."""
    problem = small_problem(time_s=3600.0)
    best = dnnprov.solve(small_problem(time_s=3300.0), "enumerate")
    traces = traces_of(tmp_path, [0] * 180)
    none = simulate(problem, best.plan, traces, policy="none", runs=5).summary()
    assert none["met_deadline"] == 0.0 and none["finished"] == 0.0 and none["cost_mean"] == 0.0
    fallback = simulate(problem, best.plan, traces, policy="fallback", runs=5).summary()
    assert fallback["met_deadline"] == 1.0 and fallback["on_demand_launched_mean"] == best.plan.workers
    od_rate = sum(3 * t.spot_price_per_h * best.plan.counts[t.name] for t in problem.instance_types)
    expected = (od_rate + best.plan.ps * problem.platform.ps_price_per_h) * best.time_s / 3600
    assert fallback["cost_mean"] == pytest.approx(expected, rel=1e-9)   # launched at 0: no join delay
    assert fallback["finish_s_mean"] == pytest.approx(best.time_s, rel=1e-9)


def test_replays_are_reproducible_and_policies_help(tmp_path: Path) -> None:
    """Capacity lost a third of the time: revocations happen, replan and fallback meet T_obj more often."""
    problem = small_problem(time_s=3600.0, markets=("spot", "on-demand"))
    best = dnnprov.solve(problem, "enumerate")
    traces = traces_of(tmp_path, ([1] * 20 + [0] * 10) * 8)
    sim = Simulator(problem, traces)
    runs = {p: simulate(problem, best.plan, traces, policy=p, runs=150, seed=7, simulator=sim).summary()
            for p in ("none", "replan", "fallback")}
    again = simulate(problem, best.plan, traces, policy="replan", runs=150, seed=7).summary()
    assert again == runs["replan"]
    assert runs["none"]["revocations_mean"] > 0.3
    assert runs["replan"]["met_deadline"] > runs["none"]["met_deadline"]
    assert runs["fallback"]["met_deadline"] > runs["none"]["met_deadline"]
    assert runs["replan"]["replans_mean"] > 0 and runs["fallback"]["on_demand_launched_mean"] > 0
    spot_dnn = simulate(problem, best.plan, traces, policy="replan", runs=60, seed=7, replan_method="heuristic").summary()
    assert spot_dnn["replans_mean"] > 0 and spot_dnn["met_deadline"] > runs["none"]["met_deadline"] - 0.1
    with pytest.raises(InvalidInputError, match="replan_method"):
        Simulator(problem, traces, replan_method="greedy")


@pytest.mark.parametrize(("revoked", "elapsed", "caps"), [
    ({"g3.8xlarge": 2}, 600.0, {"p3.2xlarge": 2, "g3.8xlarge": 0}),
    ({"p3.2xlarge": 1}, 1200.0, {"p3.2xlarge": 1, "g3.8xlarge": 4}),
    ({"p3.2xlarge": 2, "g3.8xlarge": 1}, 300.0, {"p3.2xlarge": 0, "g3.8xlarge": 4}),
])
def test_replan_policy_solves_the_takeover_exactly(tmp_path: Path, revoked, elapsed, caps) -> None:
    """The simulator's takeover is dnnprov replan's optimum (enumerate on the takeover problem)."""
    problem = small_problem(time_s=3600.0, markets=("spot", "on-demand"))
    start = dnnprov.solve(problem, "enumerate")
    start = replace(start, plan=dnnprov.SpotPlan(counts={"p3.2xlarge": 2, "g3.8xlarge": 3}, ps=1))
    sim = Simulator(problem, traces_of(tmp_path, [1] * 180))
    model = sim.model
    counts = np.array([[start.plan.counts.get(label, 0) for label in model.columns.labels]])
    sigma, u0 = progress_speed(model, counts, start.plan.ps)
    u = float(u0[0] + sigma[0] * elapsed)
    loss = 1 / u + problem.workload.gamma_5
    held = counts[0].copy()
    for name, n in revoked.items():
        held[model.columns.labels.index(name)] -= n
    best = sim.takeover(held, start.plan.ps, np.array([caps.get(n, 0) for n in sim.types]), elapsed, u)
    oracle = replan(problem, start.plan, revoked, elapsed, loss, takeover_overhead_s=JOIN, capacity=caps,
                    method="enumerate")
    if oracle.plan is None:
        assert best is None
        return
    grid = sim.grid()
    cost = grid.rate[best] * (JOIN + (progress_target(model) - u) / grid.speed[best]) / 3600
    assert cost == pytest.approx(oracle.cost, rel=1e-9)


def test_cli_simulate_json(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`dnnprov simulate --json` prints one object with the documented keys; bad traces exit 2."""
    problem = small_problem()
    instance = tmp_path / "small.json"
    dnnprov.write_instance(problem, instance)
    assert main(["solve", str(instance), "--method", "enumerate", "--json"]) == 0
    plan = tmp_path / "plan.json"
    plan.write_text(capsys.readouterr().out)
    trace = write_trace(tmp_path, "t.json", ([1] * 30 + [0] * 5) * 6)
    args = ["simulate", str(instance), "--plan", str(plan), "--trace", f"p3.2xlarge={trace}",
            "--trace", f"g3.8xlarge={trace}", "--runs", "25", "--seed", "1", "--policy", "replan"]
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["runs"] == 25 and 0 <= out["met_deadline"] <= 1
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
    used = next(k for k, v in best.plan.counts.items() if v)
    traces = {k: v for k, v in traces_of(tmp_path, [1] * 5).items() if k != used}
    with pytest.raises(InvalidInputError, match="no trace"):
        simulate(problem, best.plan, traces, runs=1)


# ------------------------------------------------------------------------ real traces
SHARED = default_shared_data()


@pytest.mark.skipif(SHARED is None or not (SHARED / "spot-traces").is_dir(),
                    reason="../shared/data/spot-traces is absent (real spot traces)")
def test_real_traces_replay() -> None:
    """The 16-node V100 availability traces against a 2 x p3.2xlarge plan: revocations happen,
    the replan and fallback policies meet T_obj more often than none."""
    files = sorted(glob.glob(str(SHARED / "spot-traces/availability/16-node/*/*_v100_1.json")))
    assert files, "the 16-node V100 traces are missing from the shared data"
    traces = {"p3.2xlarge": [load_trace(f) for f in files]}
    problem = small_problem(time_s=3800.0, markets=("spot", "on-demand"))
    plan = dnnprov.SpotPlan(counts={"p3.2xlarge": 2, "g3.8xlarge": 0}, ps=1)   # 3614 s planned
    sim = Simulator(problem, traces)
    out = {p: simulate(problem, plan, traces, policy=p, runs=200, seed=0, simulator=sim).summary()
           for p in ("none", "replan", "fallback")}
    assert out["none"]["revocations_mean"] > 0
    assert out["none"]["met_deadline"] < 1.0
    assert out["replan"]["met_deadline"] > out["none"]["met_deadline"]
    assert out["fallback"]["met_deadline"] > out["none"]["met_deadline"]


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
        args = ["simulate", str(instance), "--plan", str(plan), "--trace", f"p3.2xlarge={trace}",
                "--trace", f"g3.8xlarge={trace}", "--runs", "12", "--policy", policy, "--per-run", "--json"]
        assert main(args) == 0
        out = json.loads(capsys.readouterr().out)
        assert len(out["per_run"]) == 12 and any(r["revocations"] for r in out["per_run"])
        assert all(isinstance(r["met_deadline"], bool) for r in out["per_run"])


def test_tiny_gap_is_refused_not_materialized(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A 1e-9 s tick would need 10^13 ticks per run: one error naming gap_seconds, exit 2."""
    instance, plan = _cli_files(tmp_path, capsys)
    trace = write_trace(tmp_path, "t.json", [1, 0, 1, 1], gap=1e-9)
    code = main(["simulate", str(instance), "--plan", str(plan), "--trace", f"p3.2xlarge={trace}",
                 "--trace", f"g3.8xlarge={trace}", "--runs", "2"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "metadata.gap_seconds" in err and "limit" in err


# ------------------------------------------------------------- windows within the trace (issue 28)
def test_a_trace_shorter_than_a_run_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A run of 3 x 3300 s covers 165 ticks of 60 s: a 100-tick trace is refused, naming it and both
    lengths (it used to be replayed in a loop without a word); the CLI says so in one line, exit 2."""
    problem = small_problem()
    best = dnnprov.solve(problem, "enumerate")
    traces = traces_of(tmp_path, [1] * 100)
    with pytest.raises(InvalidInputError) as info:
        simulate(problem, best.plan, traces, runs=1)
    assert info.value.field.endswith(".json")
    assert "100 ticks of 60 s (6,000 s) do not cover a run of 9,900 s" in info.value.problem
    assert "165 ticks" in info.value.problem
    assert simulate(problem, best.plan, traces, runs=1, horizon=1.5).runs     # 83 ticks: covered
    instance, plan = _cli_files(tmp_path, capsys)
    short = write_trace(tmp_path, "short.json", [1] * 100)
    assert main(["simulate", str(instance), "--plan", str(plan), "--trace", f"p3.2xlarge={short}",
                 "--trace", f"g3.8xlarge={short}", "--runs", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "short.json: 100 ticks of 60 s" in err and "180 ticks" in err


def test_windows_never_run_past_the_trace_end(tmp_path: Path) -> None:
    """A trace exactly one run long whose last 5 ticks have no capacity: every window is the whole
    trace, so no run meets the outage before it ends (old: random offsets wrapped into it)."""
    from dnnprov.revocation.simulate import _Capacity

    problem = small_problem()
    best = dnnprov.solve(problem, "enumerate")
    traces = traces_of(tmp_path, [1] * 160 + [0] * 5)
    s = simulate(problem, best.plan, traces, policy="none", runs=40, seed=5).summary()
    assert s["revocations_mean"] == 0 and s["met_deadline"] == 1.0
    longer = load_trace(write_trace(tmp_path, "longer.json", [1] * 400))
    rng = np.random.default_rng(0)
    for _ in range(200):
        capacity = _Capacity({0: longer}, [8], 9900.0, rng)
        assert all(offset + 165 <= 400 for _, offset in capacity.blocks[0])
