"""The solver-neutral Result: stable dict/JSON form, plans, summary, self-validation."""

from __future__ import annotations

import json
import math

import pytest
from numpy.testing import assert_allclose

import dnnprov
from dnnprov import Result, ServerlessPlan, SpotPlan, Status

STABLE_KEYS = {
    "status",
    "method",
    "kind",
    "model",
    "instance",
    "plan",
    "time_s",
    "cost",
    "bound",
    "gap",
    "solve_seconds",
    "message",
    "details",
    "stats",
    "warnings",
    "infeasibility",
    "objective",
    "objective_value",
}


@pytest.fixture
def table1_result(resnet110_table1):
    """The exhaustive Table I result (spec section 6)."""
    return dnnprov.solve(resnet110_table1, "enumerate")


@pytest.fixture
def resnet50_result(resnet50):
    """λDNN's heuristic on the Table 3 setting."""
    return dnnprov.solve(resnet50, "heuristic")


def test_to_dict_has_stable_keys(table1_result, resnet50_result):
    """to_dict() has exactly the documented keys, for spot and serverless results alike."""
    for result in (table1_result, resnet50_result):
        d = result.to_dict()
        assert set(d) == STABLE_KEYS
        assert isinstance(d["status"], str) and d["status"] == result.status.value
    d = table1_result.to_dict()
    assert (d["status"], d["method"], d["kind"], d["model"]) == ("optimal", "enumerate", "spot", "reference")
    assert_allclose([d["time_s"], d["cost"], d["bound"], d["gap"]], [2567.70, 5.448374, 5.448374, 0.0])
    assert d["solve_seconds"] >= 0


def test_spot_plan_dict_form(table1_result):
    """A spot plan renders as {"counts": {type: n}, "ps": s}, omitting unused types."""
    assert table1_result.to_dict()["plan"] == {
        "counts": {"g4dn.4xlarge": 3, "g3.8xlarge": 5, "g3.16xlarge": 2},
        "ps": 1,
    }
    assert table1_result.plan.workers == 10


def test_serverless_plan_dict_form(resnet50_result):
    """A serverless plan renders with functions, memory_mb, local_batch and ps."""
    plan = resnet50_result.to_dict()["plan"]
    assert set(plan) == {"functions", "memory_mb", "local_batch", "ps"}
    assert isinstance(plan["functions"], int) and isinstance(plan["memory_mb"], int)
    assert plan["local_batch"] == 128.0 and plan["ps"] == 1
    assert plan["memory_mb"] % 64 == 0 and 2432 <= plan["memory_mb"] <= 3008


def test_on_demand_columns_keep_their_label():
    """Instances bought on demand appear under ``name:on-demand``."""
    plan = SpotPlan(counts={"p3.2xlarge": 1, "p3.2xlarge:on-demand": 2, "g3.8xlarge": 0}, ps=2)
    assert plan.to_dict() == {"counts": {"p3.2xlarge": 1, "p3.2xlarge:on-demand": 2}, "ps": 2}
    assert plan.workers == 3
    assert str(plan) == "1 x p3.2xlarge, 2 x p3.2xlarge:on-demand; 2 PS"


def test_json_round_trip(table1_result, resnet50_result, make_resnet110):
    """to_json() parses back to to_dict(), as strict JSON (no NaN or infinity), for every status."""
    infeasible = dnnprov.solve(make_resnet110(time_s=100.0), "enumerate")
    limited = dnnprov.solve(make_resnet110(), "enumerate", max_plans=10)
    unknown = dnnprov.solve(make_resnet110(time_s=100.0), "reference-heuristic")
    statuses = set()
    for result in (table1_result, resnet50_result, infeasible, limited, unknown):
        d = result.to_dict()
        assert json.loads(result.to_json()) == d
        json.dumps(d, allow_nan=False)
        statuses.add(d["status"])
    assert statuses == {"optimal", "feasible", "infeasible", "limit", "unknown"}
    assert infeasible.to_dict()["bound"] is None and infeasible.to_dict()["plan"] is None


def test_non_finite_numbers_become_null():
    """Infinite bounds and NaN details are written as null, not as invalid JSON."""
    result = Result(
        status=Status.INFEASIBLE,
        method="enumerate",
        kind="spot",
        model="paper",
        instance="x",
        bound=math.inf,
        details={"cc": math.nan, "workers": 3},
    )
    d = result.to_dict()
    assert d["bound"] is None and d["details"] == {"cc": None, "workers": 3}
    json.dumps(d, allow_nan=False)


def test_summary_mentions_plan_and_cost(table1_result, resnet50_result):
    """summary() names the status, the plan and the cost."""
    text = table1_result.summary()
    assert "optimal" in text and "enumerate" in text
    assert "3 x g4dn.4xlarge" in text and "5 x g3.8xlarge" in text and "2 x g3.16xlarge" in text
    assert "$5.448374" in text and "2567.70 s" in text
    text = resnet50_result.summary()
    plan = resnet50_result.plan
    assert f"{plan.functions} functions x {plan.memory_mb} MB" in text
    assert f"${resnet50_result.cost:.6f}" in text
    assert str(table1_result) == table1_result.summary()


def test_summary_without_plan(make_resnet110):
    """A result without a plan says so through its status and shows no plan or cost line."""
    text = dnnprov.solve(make_resnet110(time_s=100.0), "enumerate").summary()
    assert "infeasible" in text and "plan :" not in text and "cost :" not in text


@pytest.mark.parametrize(
    "kwargs",
    [
        {"plan": SpotPlan({"a": 1}), "cost": 1.0},  # no bound
        {"cost": 1.0, "bound": 1.0},  # no plan
    ],
)
def test_optimal_result_needs_plan_and_bound(kwargs):
    """An optimal result without a proven bound (or without a plan) is refused."""
    with pytest.raises(ValueError, match="bound"):
        Result(status=Status.OPTIMAL, method="m", kind="spot", model="paper", instance="x", **kwargs)


def test_status_accepts_strings_and_refuses_unknown():
    """The status may be given as its string value; an unknown status is refused."""
    result = Result(
        status="feasible",
        method="m",
        kind="serverless",
        model="lambda-dnn",
        instance="x",
        plan=ServerlessPlan(4, 1024, 64.0),
        cost=1.0,
    )
    assert result.status is Status.FEASIBLE and result.is_feasible()
    with pytest.raises(ValueError):
        Result(status="solved", method="m", kind="spot", model="paper", instance="x")


@pytest.mark.parametrize(
    ("cost", "bound", "gap"),
    [
        (10.0, 9.0, 0.1),
        (10.0, 10.0, 0.0),
        (10.0, 11.0, 0.0),
        (0.0, 0.0, 0.0),
        (10.0, None, None),
        (None, 5.0, None),
    ],
)
def test_gap(cost, bound, gap):
    """gap = (cost - bound) / cost, clipped at 0, None unless both are known."""
    result = Result(
        status=Status.LIMIT,
        method="m",
        kind="spot",
        model="paper",
        instance="x",
        plan=SpotPlan({"a": 1}) if cost is not None else None,
        cost=cost,
        bound=bound,
    )
    if gap is None:
        assert result.gap is None and result.to_dict()["gap"] is None
    else:
        assert_allclose(result.gap, gap, rtol=1e-12)


def test_is_feasible():
    """Only results with a plan and status optimal / feasible / limit are feasible."""
    base = dict(method="m", kind="spot", model="paper", instance="x")
    plan = SpotPlan({"a": 1})
    assert Result(status=Status.LIMIT, plan=plan, cost=1.0, **base).is_feasible()
    assert not Result(status=Status.LIMIT, **base).is_feasible()
    assert not Result(status=Status.UNKNOWN, **base).is_feasible()
    assert not Result(status=Status.ERROR, message="boom", **base).is_feasible()


def test_to_row_is_flat(table1_result):
    """to_row() gives one flat row with the plan as sorted JSON."""
    row = table1_result.to_row()
    assert all(not isinstance(v, (dict, list)) for v in row.values())
    assert json.loads(row["plan"]) == table1_result.to_dict()["plan"]
    assert row["status"] == "optimal" and row["cost"] == table1_result.cost
    assert row["plan"] == json.dumps(table1_result.to_dict()["plan"], sort_keys=True)


def test_details_report_model_quantities(table1_result):
    """A spot result's details hold the plan's worker count, b_w, R, iterations and new instances."""
    details = table1_result.details
    assert details["workers"] == 10
    assert details["cc"] == 0.0  # the reference model has no R
    assert details["iterations"] == round(details["iterations"])  # j is rounded in that model
    assert details["new_instances"] == {"g4dn.4xlarge": 3, "g3.8xlarge": 5, "g3.16xlarge": 2}
