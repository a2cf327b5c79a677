"""The predictor: one given plan's time, cost, loss curve, feasibility and domain."""

from __future__ import annotations

import itertools
import json

import pytest

import dnnprov
from dnnprov.cli import main
from dnnprov.models.predict import predict

TABLE1 = "spot/paper-table1.json"
TABLE3 = "serverless/paper-table3-resnet50.json"


def load(relative: str):
    """An embedded instance."""
    return dnnprov.read_instance(dnnprov.embedded_instance(relative))


def test_cli_predicts_the_table1_heuristic_plan(capsys: pytest.CaptureFixture[str]) -> None:
    """The Table I heuristic plan: 2565.13 s and $5.787788, like solve --json's keys."""
    assert main(["predict", f"embedded:{TABLE1}", "--counts", "g3.8xlarge=5,g3.16xlarge=3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["time_s"] == pytest.approx(2565.13) and out["cost"] == pytest.approx(5.787788)
    assert out["feasible"] and out["inside_domain"] and out["reasons"] == []
    assert out["plan"] == {"counts": {"g3.8xlarge": 5, "g3.16xlarge": 3}, "ps": 1}
    assert out["batch_wa"] == pytest.approx(1402.1) and out["workers"] == 8


def test_prediction_equals_the_solvers_evaluation() -> None:
    """predict of the exhaustive optimum gives enumerate's time and cost."""
    problem = load(TABLE1)
    result = dnnprov.solve(problem, "enumerate")
    out = predict(problem, counts=result.plan.counts, ps=result.plan.ps)
    assert out["time_s"] == pytest.approx(result.time_s) and out["cost"] == pytest.approx(result.cost)


def test_loss_curve_reaches_the_objective_on_the_paper_model() -> None:
    """The predicted loss curve falls to L_obj after the predicted iterations (eq. 3)."""
    problem = load("spot/paper-table5-inception-v3-1.2-4500.json")
    out = predict(problem, counts={"p3.2xlarge": 2, "g3.16xlarge": 3})
    curve = out["loss_curve"]
    assert curve[-1]["iterations"] == pytest.approx(out["iterations"])
    assert curve[-1]["loss"] == pytest.approx(problem.slo.loss)
    assert all(a["loss"] > b["loss"] for a, b in itertools.pairwise(curve))
    e = dnnprov.SpotModel(problem).evaluate([[2, 0, 0, 3, 0]])
    assert out["cc"] == pytest.approx(float(e.cc[0])) and out["cc_in_loss_model"]
    assert 0 <= out["contention_probability"] <= 1


def test_infeasible_plan_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    """Over quota and outside the domain: exit 1 and every reason listed."""
    assert main(["predict", f"embedded:{TABLE1}", "--counts", "g3.8xlarge=5,p2.8xlarge=9"]) == 1
    text = capsys.readouterr().out
    assert "feasible: no" in text and "exceeds the quota 5" in text and "outside the validity domain" in text


def test_the_domain_removes_handful_of_iteration_plans() -> None:
    """A worker batch that drives eq. (3)'s numerator near zero "trains" in a handful of
    iterations without a domain; the domain (b_w up to 8192) makes that plan infeasible."""
    import dataclasses

    problem = load("spot/paper-table3-overhead-7x10.json")
    big = dnnprov.InstanceType(
        name="big.x", gpus=1, spot_price_per_h=1.0, quota=4, batch_per_gpu=11518, compute_time_s=4.0
    )
    problem = problem.replace(instance_types=problem.instance_types + (big,))
    unbounded = problem.replace(workload=dataclasses.replace(problem.workload, domain=None))
    loose = predict(unbounded, counts={"big.x": 2})
    assert loose["feasible"] and loose["iterations"] < 10
    out = predict(problem, counts={"big.x": 2})
    assert not out["inside_domain"] and not out["feasible"]
    assert out["domain"]["batch_wa"] == [1024, 8192] and out["domain"]["workers"] == [2, 9]


@pytest.mark.parametrize(
    "functions, memory, local_batch, published",
    [(8, 3008, 64, 703.95), (9, 2816, 128, 528.96), (8, 2560, None, 573.34)],
)
def test_table3_fit_residuals_within_ten_percent(functions, memory, local_batch, published) -> None:
    """FIT RESIDUAL, not validation: n_t and the storage line were fitted to these three λDNN
    Table 3 times (dnnprov.profiling.calibrate), so this checks the fit and the local-batch
    rule, not the model. Held-out comparisons: tests/models/test_holdouts.py."""
    out = predict(load(TABLE3), functions=functions, memory_mb=memory, local_batch=local_batch)
    assert out["time_s"] == pytest.approx(published, rel=0.10)
    assert out["local_batch_rule"] == ("eq. (9)" if local_batch is None else "given")


def test_serverless_prediction_equals_the_model() -> None:
    """predict agrees with ServerlessModel.evaluate on the same plan."""
    problem = load(TABLE3)
    e = dnnprov.ServerlessModel(problem).evaluate(8, 2560)
    out = predict(problem, functions=8, memory_mb=2560)
    assert out["time_s"] == pytest.approx(float(e.time_s)) and out["cost"] == pytest.approx(float(e.cost))
    assert out["global_batch"] == 1024 and out["feasible"]


def test_below_minimum_memory_is_infeasible() -> None:
    """λDNN's random plan (4 x 1,536 MB) is below ResNet50's 2,432 MB minimum: it fails."""
    out = predict(load(TABLE3), functions=4, memory_mb=1536, local_batch=64)
    assert not out["feasible"] and any("minimum memory" in r for r in out["reasons"])


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--counts", "nosuch=2"], "counts.nosuch"),
        (["--counts", "g3.8xlarge"], "--counts"),
        (["--counts", "g3.8xlarge=0"], "counts"),
        (["--functions", "3"], "functions"),
    ],
)
def test_bad_spot_requests_are_one_clear_error(argv, field, capsys: pytest.CaptureFixture[str]) -> None:
    """Unknown columns, malformed counts, empty plans and serverless options give exit 2."""
    assert main(["predict", f"embedded:{TABLE1}", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"dnnprov: error: {field}") and "\n" not in err


def test_serverless_needs_memory(capsys: pytest.CaptureFixture[str]) -> None:
    """A serverless prediction without --memory-mb names the missing field."""
    assert main(["predict", f"embedded:{TABLE3}", "--functions", "8"]) == 2
    assert capsys.readouterr().err.startswith("dnnprov: error: memory_mb")


@pytest.mark.parametrize(
    "argv, field",
    [
        ([f"embedded:{TABLE1}", "--counts", "g3.8xlarge=2", "--ps", "1000000000000000000000000"], "ps"),
        ([f"embedded:{TABLE1}", "--counts", "g3.8xlarge=2", "--ps", "65"], "ps"),
        ([f"embedded:{TABLE3}", "--functions", "8", "--memory-mb", "3008", "--local-batch", "1e-320"], "local_batch"),
        ([f"embedded:{TABLE3}", "--functions", "8", "--memory-mb", "3008", "--local-batch", "1e308"], "local_batch"),
        ([f"embedded:{TABLE3}", "--functions", "8", "--memory-mb", "10000000000000000000000"], "memory_mb"),
        ([f"embedded:{TABLE3}", "--functions", "100001", "--memory-mb", "3008"], "functions"),
    ],
)
def test_plans_beyond_the_resource_limits_are_one_clear_error(argv, field, capsys: pytest.CaptureFixture[str]) -> None:
    """--ps 10**24 overflowed numpy (exit 3); --local-batch 1e-320 overflowed eq. (2) and then
    crashed the summary (exit 3), 1e308 printed a numpy RuntimeWarning."""
    from conftest import one_error

    one_error(capsys, ["predict", *argv], f"error: {field}:")
