"""The validity domain (issue 23): the numerator cap, per-axis factors, the loss/iteration axis.

Oracles: the cap is recomputed here from each file's gammas by hand (A(b) = gamma_2 b +
gamma_3 at half its fitted-edge value), exactness under the domain is checked against
exhaustive search, and the loss axis against the logged numbers the test itself wrote.
"""

from __future__ import annotations

import dataclasses
import json
import math

import jsonschema
import numpy as np
import pytest
from conftest import spot_space

import dnnprov
from dnnprov.io.catalogs.catalog import embedded_path
from dnnprov.io.instances import schema
from dnnprov.problems.validation.domain import numerator_range
from dnnprov.result import Status

SHIPPED = ["esperberto", "inception-v3", "resnet110-paper", "resnet110-reference", "vgg19"]
FACTORS = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0)


def shipped_profile(name: str) -> dict:
    """The workload object of a shipped spot profile, read as plain JSON (not through dnnprov)."""
    return json.loads(embedded_path("workloads", "spot", f"{name}.json").read_text())["workload"]


def with_domain(problem: dnnprov.SpotProblem, **domain) -> dnnprov.SpotProblem:
    """``problem`` whose workload carries ``SpotDomain(**domain)``."""
    return problem.replace(workload=dataclasses.replace(problem.workload, domain=dnnprov.SpotDomain(**domain)))


def aws_2025(number: int) -> dnnprov.SpotProblem:
    return dnnprov.read_instance(embedded_path("benchmarks", "aws-2025", f"aws-2025-{number:03d}.json"))


def milp_matching_enumerate(problem: dnnprov.SpotProblem, time_limit_s: float = 60) -> dnnprov.Result:
    """milp's result, after checking it against exhaustive search: same status, same cost."""
    milp = dnnprov.solve(problem, "milp", time_limit_s=time_limit_s)
    exhaustive = dnnprov.solve(problem, "enumerate", time_limit_s=time_limit_s)
    assert milp.status is exhaustive.status
    if milp.plan is not None:
        assert milp.cost == pytest.approx(exhaustive.cost, rel=1e-9)
    return milp


# ---------------------------------------------------------------- the numerator cap
@pytest.mark.parametrize("name", SHIPPED)
def test_cap_keeps_half_the_numerator_of_the_fitted_edge(name):
    """For every shipped profile and factor the capped b_w end is min(f b_high, the b_w where
    A falls to half of A(b_high)), computed by hand from the file's gammas."""
    w = shipped_profile(name)
    g2, g3 = w["gamma_2"], w["gamma_3"]
    low, high = w["domain"]["batch_wa"]
    half_edge = (0.5 * (g2 * high + g3) - g3) / g2  # A(b) = A(b_high) / 2
    assert half_edge == pytest.approx(high + 0.5 * (-g3 / g2 - high))
    for factor in FACTORS + (10.0,):
        domain = dnnprov.SpotDomain(batch_wa=(low, high), workers=(2, 7), extrapolation=factor)
        b_low, b_high = domain.batch_bounds(g2, g3)
        assert b_low == pytest.approx(low / factor)
        assert b_high == pytest.approx(min(high * factor, half_edge))
        assert g2 * b_high + g3 >= 0.5 * (g2 * high + g3) * (1 - 1e-12)  # never near the root
    # the fact: the root sits at 1.53x the fitted upper b_w for every shipped profile
    assert -g3 / g2 / high == pytest.approx(1.53, abs=0.005)


def test_cap_follows_the_sign_of_gamma_2():
    """With gamma_2 > 0 the numerator falls with smaller b_w: the cap is a lower end."""
    assert numerator_range((100.0, 200.0), -1.0, 1000.0) == (-math.inf, 200.0 + 0.5 * 800.0)
    low, high = numerator_range((100.0, 200.0), 2.0, -100.0)  # A(100) = 100, root at 50
    assert (low, high) == (75.0, math.inf)
    assert numerator_range((100.0, 200.0), 0.0, 5.0) == (-math.inf, math.inf)
    # a fit whose own range reaches the root admits no b_w extrapolation
    assert numerator_range((100.0, 200.0), -10.0, 1500.0) == (100.0, 200.0)


def test_model_uses_the_capped_interval_for_feasibility():
    """A plan beyond the cap is outside the domain, and the note says why the end is there."""
    t = dnnprov.InstanceType(
        name="x1.large", gpus=1, spot_price_per_h=1.0, quota=9, batch_per_gpu=1500, speed_samples_per_s=2000.0
    )
    w = dnnprov.SpotWorkload(
        name="w",
        param_size_mb=10.0,
        bandwidth_req_mb_s=100.0,
        alpha_1=0.1,
        beta_1=0.2,
        gamma_1=100.0,
        gamma_2=-1.0,
        gamma_3=2000.0,
        gamma_4=0.5,
        gamma_5=0.5,
        domain=dnnprov.SpotDomain(batch_wa=(500.0, 1000.0), workers=(1, 9), extrapolation=3.0),
    )
    problem = dnnprov.SpotProblem(instance_types=(t,), workload=w, slo=dnnprov.SpotSLO(loss=0.8, time_s=1e6))
    model = dnnprov.SpotModel(problem)
    assert model.domain_bounds()[0][1] == pytest.approx(1500.0)  # 1000 + (2000 - 1000) / 2
    assert model.evaluate(np.array([[2]])).inside_domain[0]  # b_w 1500: on the cap
    narrower = problem.replace(instance_types=(dataclasses.replace(t, batch_per_gpu=1600),))
    assert not dnnprov.SpotModel(narrower).evaluate(np.array([[2]])).inside_domain[0]
    note = dnnprov.SpotModel(narrower).domain_note(1600.0, 2)
    assert note.startswith("outside the validity domain") and "capped at 1500" in note


@pytest.mark.parametrize("number, factor", [(6, 1.0), (6, 2.0), (6, 3.0), (10, 2.5)])
def test_milp_plans_need_many_iterations_at_any_factor(number, factor):
    """At any factor milp's plan needs at least a hundred iterations, and it is enumerate's
    optimum (the whole quota box searched)."""
    problem = aws_2025(number)
    problem = with_domain(problem, **{**problem.workload.domain.to_dict(), "extrapolation": factor})
    milp = milp_matching_enumerate(problem, time_limit_s=120)
    assert milp.status in (Status.OPTIMAL, Status.INFEASIBLE)
    if milp.plan is not None:
        assert milp.details["iterations"] >= 100


def test_the_iteration_floor_is_what_keeps_one_worker_plans_out():
    """aws-2025-006 at x2 admits one-worker clusters (R = 0): without the floor its optimum
    needs a handful of iterations; with it, over a hundred at a higher (exact) cost."""
    problem = aws_2025(6)
    domain = {**problem.workload.domain.to_dict(), "extrapolation": 2.0}
    floorless = dnnprov.solve(with_domain(problem, **domain, min_iterations=0.0), "milp")
    floored = dnnprov.solve(with_domain(problem, **domain), "milp")
    assert floorless.details["iterations"] < 100 and floorless.details["workers"] == 1
    assert floored.details["iterations"] >= 100 and floored.cost > floorless.cost
    reasons = dnnprov.predict(with_domain(problem, **domain), counts=floorless.plan.counts)["reasons"]
    assert any("below the domain's floor of 100" in r for r in reasons)


@pytest.mark.parametrize("seed", range(8))
def test_milp_equals_enumerate_where_the_cap_binds(make_random_spot, seed):
    """Random small problems whose domain is capped inside the columns' batch range: the
    decomposition's bounds stay valid (milp's proven optimum is exhaustive search's)."""
    problem = make_random_spot(np.random.default_rng(9000 + seed), model="paper", max_quota=3, max_ps=2)
    w = problem.workload
    batches = problem.columns().batch
    root = -w.gamma_3 / w.gamma_2
    edge = float(min(batches.min(), 0.6 * root))
    problem = with_domain(problem, batch_wa=(edge / 2, edge), workers=(1, 12), extrapolation=3.0)
    cap = dnnprov.SpotModel(problem).domain_bounds()[0][1]
    assert cap == pytest.approx(min(3 * edge, edge + (root - edge) / 2))
    assert spot_space(problem) <= 2_000_000
    milp = milp_matching_enumerate(problem)
    if milp.plan is not None:
        assert milp.details["batch_wa"] <= cap * (1 + 1e-9)


# ---------------------------------------------------------------- per-axis factors
def test_per_axis_factors_override_the_shorthand():
    """extrapolation is the factor of both axes; extrapolation_workers / _batch_wa override it."""
    both = dnnprov.SpotDomain(batch_wa=(1000.0, 2000.0), workers=(2, 6), extrapolation=1.5)
    assert both.worker_bounds() == (2, 9) and both.batch_bounds(-0.1, 10000.0) == pytest.approx((1000 / 1.5, 3000.0))
    apart = dataclasses.replace(both, extrapolation_workers=2.0, extrapolation_batch_wa=1.0)
    assert apart.worker_bounds() == (1, 12)
    assert apart.batch_bounds(-0.1, 10000.0) == (1000.0, 2000.0)
    assert apart.with_extrapolation(1.0).worker_bounds() == (2, 6)


def test_new_fields_round_trip_and_match_the_schema(tmp_path):
    """Every new key reads back equal through the instance file, and the JSON Schema accepts it."""
    problem = with_domain(
        aws_2025(4),
        batch_wa=(128.0, 1024.0),
        workers=(2, 7),
        extrapolation=1.5,
        extrapolation_workers=2.0,
        extrapolation_batch_wa=1.2,
        loss=(0.9, 4.1),
        iterations=(0.0, 600.0),
        extrapolation_iterations=10.0,
        loss_axis="enforce",
    )
    path = tmp_path / "p.json"
    dnnprov.write_instance(problem, path)
    data = json.loads(path.read_text())
    jsonschema.validate(data, schema("spot"), cls=jsonschema.Draft202012Validator)
    assert dnnprov.read_instance(path).workload.domain == problem.workload.domain
    domain_schema = schema("spot")["$defs"]["workload"]["properties"]["domain"]["properties"]
    assert set(domain_schema) == {f.name for f in dataclasses.fields(dnnprov.SpotDomain)}


@pytest.mark.parametrize(
    "field, value",
    [
        ("extrapolation_workers", 0.5),
        ("extrapolation_batch_wa", "2"),
        ("extrapolation_iterations", 0.0),
        ("loss", (2.0, 1.0)),
        ("iterations", (-1.0, 5.0)),
        ("loss_axis", "refuse"),
    ],
)
def test_bad_new_fields_name_the_field(field, value):
    with pytest.raises(dnnprov.InvalidInputError) as info:
        dnnprov.SpotDomain(batch_wa=(1.0, 5.0), workers=(1, 3), **{field: value})
    assert info.value.field.startswith(f"workload.domain.{field}")


# ---------------------------------------------------------------- the loss/iteration axis
def logged(problem: dnnprov.SpotProblem, **axis) -> dnnprov.SpotProblem:
    """``problem`` whose domain also records logged losses / steps."""
    return problem.replace(
        workload=dataclasses.replace(problem.workload, domain=dataclasses.replace(problem.workload.domain, **axis))
    )


def test_slo_below_the_logged_losses_is_flagged_not_refused():
    """Table I's SLO loss 0.8 under logs that reached 0.9 only: the plan stands, flagged."""
    base = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    flagged = dnnprov.solve(logged(base, loss=(0.9, 4.6)), "milp")
    plain = dnnprov.solve(base, "milp")
    assert flagged.status is Status.OPTIMAL and flagged.cost == plain.cost
    assert "loss" in flagged.details["extrapolated"]
    assert "target loss 0.8 below the logged losses (0.9-4.6)" in flagged.details["domain"]
    prediction = dnnprov.predict(logged(base, loss=(0.9, 4.6)), counts=flagged.plan.counts)
    assert prediction["feasible"] and "loss" in prediction["domain"]["extrapolated"]


def test_iterations_far_beyond_the_logs_are_flagged():
    """A plan needing more than f times the most logged steps is named with the ratio."""
    base = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    result = dnnprov.solve(logged(base, iterations=(0.0, 195.0), extrapolation_iterations=2.0), "milp")
    j = result.details["iterations"]
    assert j > 390  # Table I needs thousands of iterations
    assert "iterations" in result.details["extrapolated"]
    assert f"{j / 195:.3g}x the most logged (195)" in result.details["domain"]


def test_enforced_loss_axis_makes_such_slos_infeasible():
    """loss_axis "enforce": an SLO below the logs has no plan (proven), for every method."""
    base = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    problem = logged(base, loss=(0.9, 4.6), loss_axis="enforce")
    for method in ("milp", "enumerate"):
        assert dnnprov.solve(problem, method).status is Status.INFEASIBLE


@pytest.mark.parametrize("seed", range(6))
def test_enforced_iteration_cap_keeps_milp_exact(make_random_spot, seed):
    """An enforced iteration limit is a nonlinear cut; milp's optimum still equals
    exhaustive search's, and its plan stays within the limit."""
    problem = make_random_spot(np.random.default_rng(7000 + seed), model="paper", max_quota=3, max_ps=2)
    model = dnnprov.SpotModel(problem)
    cols = model.columns
    rng = np.random.default_rng(seed)
    plans = rng.integers(cols.lower, cols.upper + 1, size=(200, len(cols)))
    j = model.evaluate(plans).iterations
    limit = float(np.nanmedian(j)) if np.isfinite(j).any() else 1000.0
    problem = with_domain(problem, batch_wa=(1.0, 1e5), workers=(1, 40), iterations=(0.0, limit), loss_axis="enforce")
    milp = milp_matching_enumerate(problem)
    if milp.plan is not None:
        assert milp.details["iterations"] <= limit * (1 + 1e-9)


def test_the_loss_fit_records_the_logged_losses_and_steps():
    """fit-loss writes the loss/iteration axis: the range of the losses and steps it was given."""
    from dnnprov.profiling.fits.loss import fit_loss
    from dnnprov.profiling.readers import LossLog

    truth = dict(gamma_1=300.0, gamma_2=-0.2, gamma_3=2500.0, gamma_4=0.1, gamma_5=0.5)
    rows = []
    for run, (k, b, r) in enumerate([(2, 1024.0, 0.71), (4, 2048.0, 0.87), (7, 4096.0, 0.93)]):
        for step in range(0, 601, 50):
            loss = (truth["gamma_2"] * b + truth["gamma_3"]) * math.sqrt((r + truth["gamma_4"]) * k) / (
                step + truth["gamma_1"]
            ) + truth["gamma_5"]
            rows.append((f"r{run}", k, b, r, float(step), loss * (1 + 0.001 * ((step // 50) % 3 - 1))))
    fit = fit_loss(LossLog.from_rows(rows))
    losses = [row[5] for row in rows]
    assert fit.domain.loss == (min(losses), max(losses))
    assert fit.domain.iterations == (0.0, 600.0)
    assert fit.domain.to_dict()["iterations"] == [0.0, 600.0]
