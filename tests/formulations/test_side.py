"""Own side variables and used[c] (issue 29): the one-liners, objectives, refusals, and a
cross-check against brute force on a few hundred small instances."""

from __future__ import annotations

import warnings

import numpy as np
import pyomo.environ as pyo
import pytest
from dnnprov.formulations import side
from dnnprov.formulations.spot import create_spot_model, side_rows
from dnnprov.solvers.side_vars import attach
from dnnprov.solvers.spot.exact import solve_spot_exact

import dnnprov
from dnnprov.errors import PlausibilityWarning
from dnnprov.fuzz.side import FAMILIES, check_case, side_case
from dnnprov.model_solve import solve_model


@pytest.fixture
def table1() -> dnnprov.SpotProblem:
    return dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))


def test_at_most_two_types_on_table1(table1):
    """The issue's figure, $5.787788, proven; enumerate and the forced-MILP path agree."""
    m = create_spot_model(table1)
    side.at_most_types(m, 2)
    result = solve_model(m)
    assert result.status is dnnprov.Status.OPTIMAL and result.cost == pytest.approx(5.787788, abs=1e-6)
    assert sum(1 for v in result.plan.counts.values() if v) <= 2
    assert solve_model(m, "enumerate").cost == pytest.approx(result.cost, rel=1e-12)
    forced = solve_spot_exact(table1, side=attach(side_rows(m)), cell_enumeration=0)
    assert forced.status is dnnprov.Status.OPTIMAL and forced.cost == pytest.approx(result.cost, rel=1e-12)
    assert forced.stats["milps"] > 0
    assert sum(pyo.value(m.performance.used[c]) for c in m.C) == 2  # the plan is loaded, used[c] too


def test_own_binaries_give_the_same_answer(table1):
    """'At most 2 types' stated with binaries of one's own instead of used[c]."""
    m = create_spot_model(table1)
    m.y = pyo.Var(m.C, domain=pyo.Binary)
    m.link = pyo.Constraint(m.C, rule=lambda m, c: m.n[c] <= m.n[c].ub * m.y[c])
    m.k = pyo.Constraint(expr=sum(m.y[c] for c in m.C) <= 2)
    assert solve_model(m).cost == pytest.approx(5.787788, abs=1e-6)


def test_least_time_objective_in_pyomo(table1):
    """An objective on m.performance.T is the least time within the budget (2,514.09 s under $6)."""
    m = create_spot_model(
        table1.replace(constraints=table1.constraints.__class__(**{**table1.constraints.__dict__, "budget_usd": 6.0}))
    )
    m.objective.deactivate()
    m.fast = pyo.Objective(expr=m.performance.T)
    result = solve_model(m)
    assert result.status is dnnprov.Status.OPTIMAL and result.time_s == pytest.approx(2514.09)
    side.at_most_types(m, 2)
    both = solve_model(m)
    assert both.time_s == pytest.approx(solve_model(m, "enumerate").time_s) and both.time_s >= result.time_s
    # proven by the one search by time (with the side rows)
    assert both.status is dnnprov.Status.OPTIMAL and both.stats["exact_solves"] == 1


def test_other_objectives_and_performance_variables_are_refused(table1):
    m = create_spot_model(table1)
    m.objective.deactivate()
    m.odd = pyo.Objective(expr=m.performance.cost + m.n["p3.2xlarge"])
    with pytest.raises(dnnprov.InvalidInputError, match="odd"):
        solve_model(m)
    m = create_spot_model(table1)
    m.slow = pyo.Constraint(expr=m.performance.X >= 0.001)
    with pytest.raises(dnnprov.InvalidInputError, match="slow"):
        solve_model(m)


def test_one_liners_refuse_bad_input(table1):
    m = create_spot_model(table1)
    with pytest.raises(dnnprov.InvalidInputError, match="k"):
        side.at_most_types(m, 0)
    with pytest.raises(dnnprov.InvalidInputError, match="types"):
        side.min_share(m, ["no.such"], 0.3)
    with pytest.raises(dnnprov.InvalidInputError, match="family"):
        side.all_or_nothing(m, "zz")


def test_fixed_charge_total_is_loaded(table1):
    m = create_spot_model(table1)
    block = side.fixed_charge(m, {"g3.8xlarge": 2.0, "p3.2xlarge": 1.0}, 2.5)
    result = solve_model(m)
    used = {t for t, v in result.plan.counts.items() if v}
    assert not {"g3.8xlarge", "p3.2xlarge"} <= used
    assert pyo.value(block.total) == pytest.approx(2.0 * ("g3.8xlarge" in used) + 1.0 * ("p3.2xlarge" in used))
    assert result.cost == pytest.approx(solve_model(m, "enumerate").cost, rel=1e-12)


@pytest.mark.parametrize("start", range(0, 200, 40))
def test_side_binaries_against_brute_force(start):
    """200 small instances (40 per run), 1-3 binary constraints each: milp and enumerate
    equal brute force; every other instance forces the cell MILPs."""
    warnings.simplefilter("ignore", PlausibilityWarning)
    wrong = []
    for k in range(start, start + 40):
        case = side_case(FAMILIES[k % len(FAMILIES)], k // len(FAMILIES))
        findings = check_case(case, force_milps=k % 2 == 1)
        if findings:
            wrong.append((k, case.words, findings))
    assert not wrong


def test_own_variables_in_serverless_rows():
    """A binary of one's own in the serverless model: 'more than 8 functions only with 3008 MB or less'."""
    from dnnprov.formulations.serverless import create_serverless_model

    problem = dnnprov.read_instance(dnnprov.embedded_instance("serverless/paper-table3-resnet50.json"))
    m = create_serverless_model(problem)
    m.big = pyo.Var(domain=pyo.Binary)
    m.many = pyo.Constraint(expr=m.n <= 8 + 100 * m.big)
    m.small = pyo.Constraint(expr=m.memory_mb <= 3008 + 10240 * (1 - m.big))
    exact, brute = solve_model(m), solve_model(m, "enumerate")
    assert exact.status is dnnprov.Status.OPTIMAL and exact.cost == pytest.approx(brute.cost, rel=1e-12)
    plan = exact.plan
    assert plan.functions <= 8 or plan.memory_mb <= 3008
    assert np.isfinite(exact.bound)


def test_weight_zero_objective_in_pyomo(table1):
    """cost + 0 * T is the weighted objective with W = 0 (documented W >= 0): the least cost.

    Before, the zero coefficient dropped T from Pyomo's linear form and the objective was refused.
    """
    m = create_spot_model(table1)
    m.objective.deactivate()
    m.zero = pyo.Objective(expr=m.performance.cost + 0 * m.performance.T)
    result = solve_model(m)
    assert result.status is dnnprov.Status.OPTIMAL and result.objective.kind == "weighted"
    assert result.cost == dnnprov.solve(table1).cost
    m.zero.deactivate()
    m.negative = pyo.Objective(expr=m.performance.cost - 0.001 * m.performance.T)
    with pytest.raises(dnnprov.InvalidInputError, match="negative"):
        solve_model(m)
