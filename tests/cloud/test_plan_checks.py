"""Plan documents are checked before any export or replay: magnitudes, finiteness, the instance's limits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import resnet50_problem, resnet110_problem

import dnnprov
from dnnprov.cli import main
from dnnprov.cloud.export import PlanDocument, load_plan
from dnnprov.errors import InvalidInputError
from dnnprov.revocation.replay.simulate import check_plan_traces

REPRO = Path(__file__).resolve().parents[2].parent / "shared" / "repro" / "turn3"


def spot_result(counts: dict, ps: int = 1, **extra) -> dict:
    return {
        "status": "optimal",
        "method": "milp",
        "kind": "spot",
        "model": "paper",
        "instance": "t",
        "plan": {"counts": counts, "ps": ps},
        "time_s": 100.0,
        "cost": 1.0,
        "bound": 1.0,
        **extra,
    }


@pytest.mark.parametrize(
    ("result", "field"),
    [
        (spot_result({"p3.2xlarge": 10**12}), "result.plan.counts.p3.2xlarge"),
        (spot_result({"p3.2xlarge": 1}, ps=10**9), "result.plan.ps"),
        (spot_result({"p3.2xlarge": 1}, cost=float("nan")), "result.cost"),
        (spot_result({"p3.2xlarge": 1}, time_s=float("inf")), "result.time_s"),
        (spot_result({f"t{i}": 4096 for i in range(5)}), "result.plan.counts"),
    ],
)
def test_nonsense_plans_are_refused_without_an_instance(result: dict, field: str) -> None:
    """Counts and PS beyond the format's limits, NaN or inf numbers: one error naming the field."""
    with pytest.raises(InvalidInputError) as info:
        PlanDocument.from_dict(result)
    assert info.value.field == field


def test_a_plan_over_the_instance_quota_is_refused() -> None:
    """50 instances of a type whose quota is 8: refused when the instance is known."""
    problem = resnet110_problem([8, 0, 4, 0, 0])
    doc = PlanDocument.from_dict(spot_result({"p3.2xlarge": 50}))
    with pytest.raises(InvalidInputError, match="exceed the quota 8") as info:
        PlanDocument(result=doc.result, problem=problem)
    assert info.value.field == "result.plan.counts.p3.2xlarge"


def test_a_plan_with_ps_outside_the_instance_range_is_refused() -> None:
    """The instance allows 1-2 PS (what replan accepts): a plan with 3 is refused, 2 is fine."""
    problem = resnet110_problem([2, 0, 4, 0, 0])
    problem = problem.replace(constraints=dnnprov.SpotConstraints(ps_count=(1, 2)))
    PlanDocument(result=spot_result({"p3.2xlarge": 2}, ps=2), problem=problem)
    with pytest.raises(InvalidInputError, match="outside the instance's range 1-2") as info:
        PlanDocument(result=spot_result({"p3.2xlarge": 2}, ps=3), problem=problem)
    assert info.value.field == "result.plan.ps"


def test_a_serverless_plan_off_the_memory_grid_is_refused() -> None:
    """Memory that the instance's grid does not hold, or more functions than its limit."""
    problem = resnet50_problem()
    grid = problem.memory_grid()
    good = {
        "status": "feasible",
        "method": "heuristic",
        "kind": "serverless",
        "model": "paper",
        "instance": "s",
        "plan": {"functions": 2, "memory_mb": grid[0], "ps": 1},
    }
    PlanDocument(result=good, problem=problem)
    for plan, field in (
        ({"functions": 2, "memory_mb": grid[-1] + 1, "ps": 1}, "result.plan.memory_mb"),
        ({"functions": problem.function_range()[1] + 1, "memory_mb": grid[0], "ps": 1}, "result.plan.functions"),
    ):
        with pytest.raises(InvalidInputError) as info:
            PlanDocument(result={**good, "plan": plan}, problem=problem)
        assert info.value.field == field


def test_a_solved_plan_passes_its_own_instance(tmp_path: Path) -> None:
    """What `dnnprov solve --json` prints loads back against the instance it solved."""
    problem = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    result = dnnprov.solve(problem, "milp")
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(result.to_dict()))
    assert load_plan(path, problem=problem).counts() == {k: v for k, v in result.plan.counts.items() if v}


@pytest.mark.skipif(not REPRO.is_dir(), reason="../shared/repro/turn3 is absent (the defect reproductions)")
@pytest.mark.parametrize("name", ["plan-counts-1e12.json", "plan-ps-1e9.json", "plan-cost-nan.json"])
def test_repro_plans_get_one_error_from_simulate_and_export(name: str, capsys: pytest.CaptureFixture) -> None:
    """The issue's plans (10^12 instances, 10^9 PS, a NaN cost): exit 2 and one error line, no replay."""
    plan = str(REPRO / name)
    simulate = [
        "simulate",
        str(REPRO / "spot-inception.json"),
        "--plan",
        plan,
        "--trace",
        f"p3.2xlarge={REPRO / 'trace.json'}",
        "--runs",
        "3",
    ]
    for argv in (simulate, ["export", plan, "--to", "json"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("dnnprov: error: result.")


def test_a_plan_on_a_disabled_market_says_so(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """An on-demand column of a spot-only instance: `replan`, `simulate` and `export` name the disabled market, not
    'not a column'; a type the instance does not offer stays an unknown column."""
    problem = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    assert problem.constraints.markets == ("spot",)
    instance = tmp_path / "table1.json"
    dnnprov.write_instance(problem, instance)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(spot_result({"g3.8xlarge:on-demand": 2, "g3.16xlarge": 3})))
    assert (
        main(
            [
                "replan",
                str(instance),
                "--plan",
                str(plan),
                "--revoked",
                "g3.16xlarge=1",
                "--elapsed",
                "600",
                "--loss-reached",
                "0.9",
            ]
        )
        == 2
    )
    assert capsys.readouterr().err == (
        "dnnprov: error: plan.counts.g3.8xlarge:on-demand: on-demand is not in "
        'constraints.markets (spot): add "on-demand" there to keep running '
        "on-demand instances of g3.8xlarge\n"
    )
    assert main(["export", str(plan), "--to", "json", "--instance", str(instance)]) == 2
    assert capsys.readouterr().err.startswith(
        "dnnprov: error: result.plan.counts.g3.8xlarge:on-demand: on-demand is not in constraints.markets (spot)"
    )
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": [5] * 100}))
    assert main(["simulate", str(instance), "--plan", str(plan), "--trace", f"g3.16xlarge={trace}", "--runs", "2"]) == 2
    assert capsys.readouterr().err.startswith(
        "dnnprov: error: result.plan.counts.g3.8xlarge:on-demand: on-demand is not in constraints.markets (spot)"
    )
    problem_plan = dnnprov.SpotPlan(counts={"g3.8xlarge:on-demand": 2, "g3.16xlarge": 3}, ps=1)
    with pytest.raises(InvalidInputError, match="on-demand is not in constraints.markets"):
        check_plan_traces(problem, problem_plan, {"g3.16xlarge": []})  # the library path says so too
    plan.write_text(json.dumps(spot_result({"p9.xlarge": 2, "g3.16xlarge": 3})))
    assert main(["export", str(plan), "--to", "json", "--instance", str(instance)]) == 2
    assert capsys.readouterr().err.startswith("dnnprov: error: result.plan.counts.p9.xlarge: unknown instance type")
