"""Pyomo formulations: the statement is the model, user constraints reach every method."""

from __future__ import annotations

import dataclasses
import importlib.resources
import math

import numpy as np
import pyomo.environ as pyo
import pytest
from dnnprov.formulations.serverless import (
    create_serverless_model,
    load_plan as load_serverless_plan,
    side_rows as serverless_side_rows,
)
from dnnprov.formulations.spot import complete_plan, create_spot_model, load_plan, side_rows
from hypothesis import HealthCheck, given, settings, strategies as st
from numpy.testing import assert_allclose

import dnnprov
from dnnprov import ServerlessModel, SpotModel, Status
from dnnprov.model_solve import scip_available, solve_model, solve_model_scip

PROPERTY_SETTINGS = settings(
    max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def embedded(kind: str) -> list[str]:
    """Names of the embedded instances of one kind (``spot`` or ``serverless``)."""
    folder = importlib.resources.files("dnnprov.data").joinpath("instances", kind)
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".json"))


def violations(model: pyo.ConcreteModel, rtol: float = 1e-7) -> list[str]:
    """Active constraints the model's current values violate (scaled by the bound)."""
    bad = []
    for con in model.component_data_objects(pyo.Constraint, active=True, descend_into=True):
        body = pyo.value(con.body)
        for bound, sign in ((con.lb, -1.0), (con.ub, 1.0)):
            if bound is not None and sign * (body - bound) > rtol * max(1.0, abs(bound)):
                bad.append(f"{con.name}: {body!r} vs {bound!r}")
    return bad


def counts_of(result: dnnprov.Result, model: pyo.ConcreteModel) -> np.ndarray:
    """The spot plan's counts in the model's column order."""
    return np.array([result.plan.counts[c] for c in model.C], dtype=np.int64)


def optimal_cost(model, add=None) -> float:
    """Proven optimal ``milp`` cost of a model (inf if infeasible); ``add(m)`` adds rows first."""
    if add is not None:
        add(model)
    result = solve_model(model, "milp", time_limit_s=60)
    assert result.status in (Status.OPTIMAL, Status.INFEASIBLE), result.message
    if result.status is Status.INFEASIBLE:
        return math.inf
    assert not violations(model), violations(model)  # the plan meets the statement
    return result.cost


def spot_cost(problem: dnnprov.SpotProblem, add=None) -> float:
    """Proven optimal ``milp`` cost of a spot problem (inf if infeasible)."""
    return optimal_cost(create_spot_model(problem), add)


def serverless_cost(problem: dnnprov.ServerlessProblem, add=None) -> float:
    """Proven optimal ``milp`` cost of a serverless problem (inf if infeasible)."""
    return optimal_cost(create_serverless_model(problem), add)


def not_below(new: float, old: float) -> bool:
    """``new >= old`` up to a relative 1e-9 (inf compares as usual)."""
    return new >= old or math.isclose(new, old, rel_tol=1e-9)


# ---------------------------------------------------------------- spot: the statement
@pytest.mark.parametrize("name", embedded("spot"))
def test_spot_model_builds_for_embedded_instance(name):
    """Every embedded spot instance gives a model with its variables, blocks and bounds."""
    problem = dnnprov.read_instance(dnnprov.embedded_instance(f"spot/{name}"))
    m = create_spot_model(problem)
    cols = problem.columns()
    assert list(m.C) == list(cols.labels)
    assert [m.n[c].bounds for c in m.C] == list(zip(cols.lower.tolist(), cols.upper.tolist()))
    assert all(m.n[c].is_integer() for c in m.C) and m.s.is_integer()
    assert m.s.bounds == problem.constraints.ps_count
    assert isinstance(m.side, pyo.Block) and isinstance(m.performance, pyo.Block)
    b = m.performance
    for var in ("size", "X", "V", "P", "b_w", "j", "T"):
        assert isinstance(getattr(b, var), pyo.Var)
    assert hasattr(b, "R") == (problem.workload.loss_variant == "cc")
    if hasattr(b, "R"):
        assert isinstance(b.top, pyo.Var) and isinstance(b.v_top, pyo.Var)
    assert all(k >= 1 for k, _ in b.KS)
    assert m.objective.sense == pyo.minimize
    assert side_rows(m, builtin=False) is None  # nothing added by a user yet


@pytest.mark.parametrize(("loss_variant", "gamma_4"), [("cc", 0.1), ("cc", 1.0), ("no-cc", 1.0)])
def test_spot_statement_reproduces_evaluate(make_random_spot, loss_variant, gamma_4):
    """Fixing n and s and evaluating the performance equations gives SpotModel.evaluate's
    cost, T, b_w, R and j, and the constraints hold exactly for the feasible plans."""
    checked = 0
    for seed in range(12):
        rng = np.random.default_rng(500 + seed)
        problem = make_random_spot(rng, model="paper", loss_variant=loss_variant, gamma_4=gamma_4)
        m = create_spot_model(problem)
        sm = SpotModel(problem)
        cols = sm.columns
        for _ in range(6):
            counts = rng.integers(cols.lower, cols.upper + 1)
            ps = int(rng.integers(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1))
            ev = sm.evaluate(counts[None, :], ps)
            if (counts.sum(), ps) not in m.performance.KS:
                assert not ev.feasible[0]
                continue
            for c, v in zip(m.C, counts):
                m.n[c].fix(int(v))
            m.s.fix(ps)
            complete_plan(m)
            b = m.performance
            assert_allclose(pyo.value(b.cost), ev.cost[0], rtol=1e-12)
            assert_allclose(pyo.value(b.T), ev.time_s[0], rtol=1e-12)
            assert_allclose(pyo.value(b.b_w), ev.batch_wa[0], rtol=1e-12)
            assert_allclose(pyo.value(b.j), ev.iterations[0], rtol=1e-12)
            if loss_variant == "cc":
                assert_allclose(pyo.value(b.R), ev.cc[0], rtol=1e-12, atol=1e-12)
            assert (not violations(m)) == bool(ev.feasible[0])
            checked += 1
    assert checked > 30


def test_reference_statement_is_the_unrounded_code(resnet110_table1):
    """For the reference model the MINLP omits the code's rounding: b_w rounds to the same value."""
    m = create_spot_model(resnet110_table1)
    sm = SpotModel(resnet110_table1)
    plan = np.array([0, 3, 5, 2, 0])
    load_plan(m, plan, 1)
    ev = sm.evaluate(plan[None, :], 1)
    assert round(pyo.value(m.performance.b_w), 1) == ev.batch_wa[0]
    assert_allclose(pyo.value(m.performance.T), ev.time_s[0], rtol=1e-3)
    assert_allclose(pyo.value(m.performance.cost), ev.cost[0], rtol=1e-3)


# ---------------------------------------------------------------- spot: user constraints
def test_forty_percent_cap_milp_equals_enumerate(resnet110_paper):
    """The docs example: at most 40 % of workers from one type; milp == enumerate, cap holds."""
    m = create_spot_model(resnet110_paper)
    free = solve_model(m)
    m.cap = pyo.Constraint(m.C, rule=lambda m, c: m.n[c] <= 0.4 * m.workers)
    rows = side_rows(m, builtin=False)
    assert rows is not None and len(rows) == len(m.C)
    capped = solve_model(m, "milp")
    oracle = dnnprov.solvers.search.enumeration.enumerate_spot(resnet110_paper, side=side_rows(m))
    assert capped.status is Status.OPTIMAL and oracle.status is Status.OPTIMAL
    assert_allclose(capped.cost, oracle.cost, rtol=1e-9)
    counts = counts_of(capped, m)
    assert (counts <= 0.4 * counts.sum() + 1e-9).all()
    assert max(free.plan.counts.values()) > 0.4 * free.plan.workers  # the cap binds here
    assert capped.cost >= free.cost
    assert [pyo.value(m.n[c]) for c in m.C] == counts.tolist()  # loaded into the model
    assert_allclose(pyo.value(m.objective), capped.cost, rtol=1e-12)
    assert solve_model(m, "enumerate").cost == oracle.cost


def test_cap_on_reference_model_milp_equals_enumerate(resnet110_table1):
    """The same cap on the Table I (reference, rounded) model: milp == enumerate."""
    m = create_spot_model(resnet110_table1)
    m.cap = pyo.Constraint(m.C, rule=lambda m, c: m.n[c] <= 0.4 * m.workers)
    milp, enum = solve_model(m, "milp"), solve_model(m, "enumerate")
    assert milp.status is Status.OPTIMAL and enum.status is Status.OPTIMAL
    assert milp.cost == enum.cost
    assert (counts_of(milp, m) <= 0.4 * milp.plan.workers + 1e-9).all()


def test_side_rows_with_ps_count(make_resnet110):
    """Rows on m.s (at most 2 workers per PS, and at least 2 PS) reach every method."""
    problem = make_resnet110(
        model="paper",
        gamma_4=1.0,
        time_s=4000.0,
        ps_price_per_h=0.192,
        constraints=dnnprov.SpotConstraints(ps_count=(1, 3)),
    )
    m = create_spot_model(problem)
    m.per_ps = pyo.Constraint(expr=m.workers <= 2 * m.s)
    m.two_ps = pyo.Constraint(expr=m.s >= 2)
    rows = side_rows(m, builtin=False)
    assert rows.names == ("per_ps", "two_ps")
    assert_allclose(rows.a_s, [-2.0, 1.0])
    milp, enum = solve_model(m, "milp"), solve_model(m, "enumerate")
    assert milp.status is Status.OPTIMAL
    assert_allclose(milp.cost, enum.cost, rtol=1e-9)
    assert milp.plan.ps >= 2 and milp.plan.workers <= 2 * milp.plan.ps
    assert not violations(m)


def test_fixed_and_tightened_variables_become_rows(resnet110_paper):
    """Fixing n[c] or tightening its bounds is honoured like a constraint."""
    m = create_spot_model(resnet110_paper)
    m.n["g3.8xlarge"].fix(2)
    m.n["p3.2xlarge"].setub(1)
    rows = side_rows(m, builtin=False)
    assert rows.names == ("bounds of n['p3.2xlarge']", "fixed n['g3.8xlarge']")
    result = solve_model(m)
    assert result.plan.counts["g3.8xlarge"] == 2 and result.plan.counts["p3.2xlarge"] <= 1
    assert_allclose(result.cost, solve_model(m, "enumerate").cost, rtol=1e-9)


def test_nonlinear_user_constraint_is_refused(resnet110_paper):
    """A nonlinear row is refused with its name and what is wrong."""
    m = create_spot_model(resnet110_paper)
    m.pairs = pyo.Constraint(expr=m.n["p3.2xlarge"] * m.n["g3.8xlarge"] <= 2)
    with pytest.raises(dnnprov.InvalidInputError, match=r"pairs.*nonlinear"):
        solve_model(m)


def test_constraint_on_performance_variables_is_refused(resnet110_paper):
    """Rows on T (outside m.performance) or rows added inside m.performance are refused."""
    m = create_spot_model(resnet110_paper)
    m.faster = pyo.Constraint(expr=m.performance.T <= 3000)
    with pytest.raises(dnnprov.InvalidInputError, match=r"faster.*uses performance\.T"):
        side_rows(m)
    m.del_component(m.faster)
    m.performance.faster = pyo.Constraint(expr=m.performance.T <= 3000)
    with pytest.raises(dnnprov.InvalidInputError, match="inside m.performance"):
        side_rows(m)


def test_deactivated_builtin_and_replaced_objective_are_refused(resnet110_paper):
    """The solvers cannot drop the problem's own rows, nor optimize another objective."""
    m = create_spot_model(resnet110_paper)
    m.performance.eq13_deadline.deactivate()
    with pytest.raises(dnnprov.InvalidInputError, match="deactivated"):
        solve_model(m)
    m = create_spot_model(resnet110_paper)
    m.objective.deactivate()
    m.fewest = pyo.Objective(expr=m.workers)
    with pytest.raises(dnnprov.InvalidInputError, match="objective"):
        solve_model(m)


def test_heuristics_refuse_user_rows_and_run_without(resnet110_paper):
    """Heuristics do not know user rows: refused with them, dnnprov.solve's answer without."""
    m = create_spot_model(resnet110_paper)
    plain = solve_model(m, "heuristic")
    assert plain.cost == dnnprov.solve(resnet110_paper, "heuristic").cost
    m.cap = pyo.Constraint(expr=m.n["p3.2xlarge"] <= 1)
    with pytest.raises(dnnprov.InvalidInputError, match="does not know user constraints"):
        solve_model(m, "heuristic")


def test_model_not_built_by_dnnprov_is_refused():
    """solve_model needs a model from dnnprov.formulations."""
    with pytest.raises(dnnprov.InvalidInputError, match="was not built by dnnprov"):
        solve_model(pyo.ConcreteModel())


# ---------------------------------------------------------------- serverless
@pytest.mark.parametrize("name", embedded("serverless"))
def test_serverless_model_builds_for_embedded_instance(name):
    """Every embedded serverless instance gives a model with its variables and blocks."""
    problem = dnnprov.read_instance(dnnprov.embedded_instance(f"serverless/{name}"))
    m = create_serverless_model(problem)
    assert list(m.MEM) == problem.memory_grid()
    assert m.n.is_integer() and m.s.is_integer() and m.performance.launches.is_integer()
    for var in ("full_batch", "full_bandwidth", "b_l", "k", "B_fp", "T_train", "T"):
        assert isinstance(getattr(m.performance, var), pyo.Var)
    assert serverless_side_rows(m, builtin=False) is None


def test_serverless_statement_reproduces_evaluate(make_random_serverless):
    """Loading (n, m, s) and evaluating eqs. (1)-(10) gives ServerlessModel.evaluate."""
    checked = 0
    for seed in range(25):
        rng = np.random.default_rng(900 + seed)
        problem = make_random_serverless(rng)
        m = create_serverless_model(problem)
        sm = ServerlessModel(problem)
        low, high = problem.function_range()
        grid = problem.memory_grid()
        for _ in range(6):
            n = int(rng.integers(low, max(low, high) + 1))
            mb = grid[int(rng.integers(0, len(grid)))]
            s = int(rng.integers(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1))
            ev = sm.evaluate(n, mb, s)
            if not np.isfinite(ev.time_s):
                continue
            load_serverless_plan(m, n, mb, s)
            b = m.performance
            assert_allclose(pyo.value(b.T), float(ev.time_s), rtol=1e-12)
            assert_allclose(pyo.value(b.cost), float(ev.cost), rtol=1e-12)
            assert_allclose(pyo.value(b.k), float(ev.iterations), rtol=1e-12)
            assert pyo.value(b.launches) == int(ev.launches)
            assert (not violations(m)) == bool(ev.feasible)
            checked += 1
    assert checked > 50


@pytest.mark.parametrize("rule", ["memory", "functions", "both"])
def test_serverless_user_rows_milp_equals_enumerate(resnet50, rule):
    """memory_mb <= 2,816 and/or n >= 9 on Table 3's ResNet50: milp == enumerate, rows hold."""
    m = create_serverless_model(resnet50)
    free = solve_model(m)
    if rule in ("memory", "both"):
        m.small = pyo.Constraint(expr=m.memory_mb <= 2816)
    if rule in ("functions", "both"):
        m.many = pyo.Constraint(expr=m.n >= 9)
    milp, enum = solve_model(m, "milp"), solve_model(m, "enumerate")
    assert milp.status is Status.OPTIMAL and enum.status is Status.OPTIMAL
    assert_allclose(milp.cost, enum.cost, rtol=1e-12)
    assert milp.cost >= free.cost
    if rule in ("memory", "both"):
        assert milp.plan.memory_mb <= 2816
    if rule in ("functions", "both"):
        assert milp.plan.functions >= 9
    assert pyo.value(m.memory_mb) == milp.plan.memory_mb and not violations(m)


def test_serverless_side_rows_map_memory_binaries(resnet50):
    """A row on memory_mb becomes a_m = coefficient; other uses of the binaries are refused."""
    m = create_serverless_model(resnet50)
    m.mix = pyo.Constraint(expr=2 * m.memory_mb - 64 * m.n + 3 * m.s <= 5000)
    rows = serverless_side_rows(m, builtin=False)
    assert_allclose([rows.a_m[0], rows.a_n[0], rows.a_s[0], rows.high[0]], [2, -64, 3, 5000], atol=1e-9)
    m.odd = pyo.Constraint(expr=m.use_memory[2560] == 0)
    with pytest.raises(dnnprov.InvalidInputError, match="odd.*not a linear function of m.memory_mb"):
        serverless_side_rows(m)
    m.del_component(m.odd)
    m.bad = pyo.Constraint(expr=m.n * m.memory_mb <= 20000)
    with pytest.raises(dnnprov.InvalidInputError, match="bad.*nonlinear"):
        solve_model(m)


# ---------------------------------------------------------------- SCIP second opinion
SCIP_SEEDS = (0, 2, 6, 11, 14, 23)


@pytest.mark.skipif(
    not scip_available(),
    reason="pyscipopt not installed (pip install 'dnnprov[scip]'): no independent MINLP cross-check",
)
def test_scip_second_opinion_never_beats_proven_optimum(make_random_spot):
    """SCIP on the stated MINLP: never cheaper than the proven optimum, usually equal."""
    agree = 0
    for seed in SCIP_SEEDS:
        problem = make_random_spot(
            np.random.default_rng(seed), model="paper", n_types=3, max_quota=3, max_ps=2, on_demand=False
        )
        m = create_spot_model(problem)
        exact = solve_model(m, "milp")
        scip = solve_model_scip(m, time_limit_s=20)
        assert scip.status is not Status.OPTIMAL  # never a certificate
        if exact.status is Status.INFEASIBLE:
            assert scip.plan is None
            continue
        if scip.plan is not None:
            assert scip.cost >= exact.cost * (1 - 1e-7)
            agree += math.isclose(scip.cost, exact.cost, rel_tol=1e-6)
    assert agree >= len(SCIP_SEEDS) // 2


# ---------------------------------------------------------------- properties
def small_spot(seed: int, make_random_spot) -> dnnprov.SpotProblem:
    """A small random spot problem (<= 4 types, quota <= 3, PS <= 2)."""
    return make_random_spot(
        np.random.default_rng(seed), n_types=int(seed % 2) + 3, max_quota=3, max_ps=2, on_demand=False
    )


@PROPERTY_SETTINGS
@given(seed=st.integers(0, 10**6), looser=st.floats(1.0, 1.5), extra=st.integers(1, 2), tighter=st.floats(0.5, 1.2))
def test_spot_monotone_in_deadline_quota_and_constraints(make_random_spot, seed, looser, extra, tighter):
    """A looser deadline or a higher quota never raises the optimum; a budget or an added
    side row never lowers it; every plan meets the statement (checked inside spot_cost)."""
    problem = small_spot(seed, make_random_spot)
    base = spot_cost(problem)
    slo = dataclasses.replace(problem.slo, time_s=problem.slo.time_s * looser)
    assert not_below(base, spot_cost(problem.replace(slo=slo)))
    i = seed % len(problem.instance_types)
    types = list(problem.instance_types)
    types[i] = dataclasses.replace(types[i], quota=types[i].quota + extra)
    assert not_below(base, spot_cost(problem.replace(instance_types=tuple(types))))
    if math.isfinite(base):
        budget = dataclasses.replace(problem.constraints, budget_usd=base * tighter)
        assert not_below(spot_cost(problem.replace(constraints=budget)), base)
    column = seed % len(problem.columns())

    def add(m):
        m.user = pyo.Constraint(expr=m.n[list(m.C)[column]] <= pyo.value(m.n[list(m.C)[column]].ub) // 2)

    assert not_below(spot_cost(problem, add), base)


@PROPERTY_SETTINGS
@given(
    seed=st.integers(0, 10**6),
    looser=st.floats(1.0, 1.5),
    tighter=st.floats(0.5, 1.2),
    cap=st.sampled_from([512, 1024, 2048]),
)
def test_serverless_monotone_in_deadline_limit_and_constraints(make_random_serverless, seed, looser, tighter, cap):
    """A looser deadline or a higher concurrency limit never raises the optimum; a budget
    or a user row (memory_mb <= cap, n >= 4) never lowers it; plans meet the statement."""
    problem = make_random_serverless(np.random.default_rng(seed), max_functions=30)
    base = serverless_cost(problem)
    assert not_below(base, serverless_cost(problem.replace(time_s=problem.time_s * looser)))
    platform = dataclasses.replace(problem.platform, concurrency_limit=problem.platform.concurrency_limit + 5)
    assert not_below(base, serverless_cost(problem.replace(platform=platform)))
    if math.isfinite(base):
        budget = dataclasses.replace(problem.constraints, budget_usd=base * tighter)
        assert not_below(serverless_cost(problem.replace(constraints=budget)), base)

    def add(m):
        m.small = pyo.Constraint(expr=m.memory_mb <= cap)
        m.many = pyo.Constraint(expr=m.n >= 4)

    assert not_below(serverless_cost(problem, add), base)


@pytest.mark.parametrize(
    "add, field",
    [
        (lambda m: setattr(m, "bad", pyo.Constraint(expr=math.nan * m.n["p3.2xlarge"] <= 3)), "bad"),
        (lambda m: setattr(m, "bad", pyo.Constraint(expr=math.inf * m.n["p3.2xlarge"] <= 3)), "bad"),
        (lambda m: setattr(m, "bad", pyo.Constraint(expr=m.n["p3.2xlarge"] + math.inf >= 3)), "bad"),
        (lambda m: m.n["p3.2xlarge"].fix(math.nan), r"n\['p3.2xlarge'\]"),
        (lambda m: m.s.fix(math.nan), "s"),
    ],
    ids=["nan-coefficient", "inf-coefficient", "inf-constant", "n-fixed-to-nan", "s-fixed-to-nan"],
)
def test_non_finite_user_rows_are_refused(resnet110_paper, add, field):
    """A NaN or infinite coefficient, constant or fixed value is refused by name, not read as a row.

    Before, a NaN coefficient made every plan break the row (``infeasible``, "proven"), an
    infinite constant made the row vanish, and a plan variable fixed to NaN was no row at all.
    """
    m = create_spot_model(resnet110_paper)
    add(m)
    with pytest.raises(dnnprov.InvalidInputError, match=field):
        solve_model(m)


def test_non_finite_serverless_rows_and_own_variables_are_refused(resnet50):
    """The same for the serverless model and for an own variable fixed to NaN."""
    m = create_serverless_model(resnet50)
    m.bad = pyo.Constraint(expr=math.nan * m.memory_mb <= 3000)
    with pytest.raises(dnnprov.InvalidInputError, match="bad"):
        solve_model(m)
    m = create_serverless_model(resnet50)
    m.n.fix(math.nan)
    with pytest.raises(dnnprov.InvalidInputError, match="n"):
        solve_model(m)
    m = create_serverless_model(resnet50)
    m.y = pyo.Var()
    m.y.fix(math.nan)
    m.own = pyo.Constraint(expr=m.n <= m.y)
    with pytest.raises(dnnprov.InvalidInputError, match="own"):
        solve_model(m)
