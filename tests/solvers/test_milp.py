"""The exact method ``milp``: equal to exhaustive search, proven bounds, limits, determinism."""

from __future__ import annotations

import math
from importlib import resources

import numpy as np
import pytest
from numpy.testing import assert_allclose

import dnnprov
from dnnprov import Status

RANDOM_SPOT = 220
RANDOM_SERVERLESS = 220


def check_exact(problem, *, side=None) -> dnnprov.Result:
    """milp agrees with enumerate (status and cost), proves its bound, beats the heuristic."""
    exact = dnnprov.solve(problem, "milp")
    oracle = dnnprov.solve(problem, "enumerate")
    assert exact.status is oracle.status, (exact.message, oracle.message)
    if oracle.status is Status.OPTIMAL:
        assert_allclose(exact.cost, oracle.cost, rtol=1e-6)
        assert exact.bound == pytest.approx(exact.cost, rel=1e-12)
        heuristic = dnnprov.solve(problem, "heuristic")
        if heuristic.cost is not None:
            assert exact.cost <= heuristic.cost * (1 + 1e-9)
    else:
        assert exact.plan is None and oracle.status is Status.INFEASIBLE
    return exact


def test_table1_milp_proves_the_exhaustive_optimum(resnet110_table1):
    """Spec section 6: milp finds and proves 3 g4dn.4xl + 5 g3.8xl + 2 g3.16xl at $5.448374."""
    result = dnnprov.solve(resnet110_table1, "milp")
    assert result.status is Status.OPTIMAL
    assert result.cost == pytest.approx(5.448374, abs=1e-9)
    assert result.time_s == pytest.approx(2567.70, abs=1e-9)
    assert result.bound == result.cost and result.gap == 0
    assert {k: v for k, v in result.plan.counts.items() if v} == {"g4dn.4xlarge": 3, "g3.8xlarge": 5, "g3.16xlarge": 2}


def test_embedded_table1_file_reproduces_the_spec():
    """The shipped paper-table1.json gives the published heuristic and exhaustive costs."""
    problem = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    assert dnnprov.solve(problem, "reference-heuristic").cost == pytest.approx(5.787788, abs=1e-9)
    assert dnnprov.solve(problem, "milp").cost == pytest.approx(5.448374, abs=1e-9)


@pytest.mark.parametrize(
    ("loss", "time_s", "plan"),
    [
        (0.9, 1900.0, [2, 0, 2, 0, 0]),
        (0.8, 2400.0, [2, 0, 4, 0, 0]),
    ],
)
def test_table5_exhaustive_plans(make_resnet110, loss, time_s, plan):
    """Table V's Srifty+ (exhaustive) ResNet-110 plans are the proven optima of the reference model."""
    result = dnnprov.solve(make_resnet110(loss=loss, time_s=time_s), "milp")
    assert result.status is Status.OPTIMAL
    assert list(result.plan.counts.values()) == plan


def embedded_spot_instances() -> list[str]:
    folder = resources.files("dnnprov.data").joinpath("instances", "spot")
    return sorted(f"spot/{p.name}" for p in folder.iterdir() if p.name.endswith(".json"))


@pytest.mark.parametrize("name", embedded_spot_instances())
def test_milp_equals_enumerate_on_embedded_instances(name):
    """Every embedded paper instance small enough to enumerate: milp == enumerate."""
    problem = dnnprov.read_instance(dnnprov.embedded_instance(name))
    if problem.model == "paper" and math.prod(int(u) + 1 for u in problem.columns().upper) > 3_000_000:
        pytest.skip("space above 3 million plans: covered by benchmarks/scale_ladder.py")
    check_exact(problem)


@pytest.mark.parametrize("chunk", range(RANDOM_SPOT // 20))
def test_milp_equals_enumerate_on_random_spot(make_random_spot, chunk):
    """Seeded random spot instances (both models and loss variants, gamma_4 0.1 and 1,
    PS ranges, vCPU quotas, budgets, kept instances, on-demand columns, overheads)."""
    for seed in range(chunk * 20, chunk * 20 + 20):
        rng = np.random.default_rng(10_000 + seed)
        problem = make_random_spot(
            rng,
            max_quota=int(rng.integers(2, 7)),
            gamma_4=[0.1, 1.0][seed % 2],
            model=["paper", "reference"][seed // 2 % 2],
        )
        if seed % 5 == 0:
            problem = problem.replace(
                slo=dnnprov.SpotSLO(loss=problem.slo.loss, time_s=problem.slo.time_s, takeover_overhead_s=30.0)
            )
        result = check_exact(problem)
        if result.plan is not None:
            counts = np.array([list(result.plan.counts.values())])
            assert dnnprov.SpotModel(problem).evaluate(counts, result.plan.ps).feasible[0]


@pytest.mark.parametrize("chunk", range(RANDOM_SERVERLESS // 20))
def test_milp_equals_enumerate_on_random_serverless(make_random_serverless, chunk):
    """Seeded random serverless instances: milp == enumerate, never worse than the heuristic."""
    for seed in range(chunk * 20, chunk * 20 + 20):
        rng = np.random.default_rng(20_000 + seed)
        check_exact(make_random_serverless(rng, max_functions=int(rng.choice([40, 300]))))


def test_serverless_milp_with_large_memory_grid(make_resnet50):
    """m_max = 10,240 MB (160 memory sizes): still proven optimal and equal to enumerate."""
    check_exact(make_resnet50(max_memory_mb=10240))


def test_time_limit_reports_limit_and_a_valid_bound(make_random_spot):
    """Stopped by its time limit, milp never says optimal; its bound stays below the optimum."""
    problem = make_random_spot(
        np.random.default_rng(7), model="paper", loss_variant="cc", gamma_4=0.1, n_types=5, max_quota=6, budget=False
    )
    optimum = dnnprov.solve(problem, "enumerate")
    result = dnnprov.solve(problem, "milp", time_limit_s=1e-6)
    assert result.status in (Status.LIMIT, Status.OPTIMAL)
    if result.status is Status.LIMIT:
        assert result.bound is not None
        if optimum.cost is not None:
            assert result.bound <= optimum.cost * (1 + 1e-9)


def test_gap_target_keeps_its_promise(make_random_spot):
    """With gap=5 %, the plan is within 5 % of the optimum and the bound is below it."""
    for seed in range(10):
        problem = make_random_spot(np.random.default_rng(300 + seed), model="paper", loss_variant="cc")
        optimum = dnnprov.solve(problem, "enumerate")
        result = dnnprov.solve(problem, "milp", gap=0.05)
        if optimum.cost is None:
            assert result.plan is None
            continue
        assert result.status in (Status.FEASIBLE, Status.OPTIMAL)
        assert result.cost <= optimum.cost * 1.05 * (1 + 1e-9)
        assert result.bound <= optimum.cost * (1 + 1e-9)


def test_milp_is_deterministic(resnet110_paper):
    """The same input gives the same plan, cost and statistics."""
    first = dnnprov.solve(resnet110_paper, "milp")
    second = dnnprov.solve(resnet110_paper, "milp")
    assert first.plan == second.plan and first.cost == second.cost
    assert first.stats == second.stats


@pytest.mark.parametrize("chunk", range(6))
def test_cell_milps_alone_equal_enumerate(make_random_spot, chunk):
    """With outright cell evaluation off, the threshold MILPs decide every cell: still exact.

    (By default cells of at most 1,024 count vectors are evaluated outright; this keeps the
    MILP path, its no-goods and its bisections under test on the same instances.)
    """
    from dnnprov.solvers.spot.exact import solve_spot_exact

    for seed in range(chunk * 20, chunk * 20 + 20):
        rng = np.random.default_rng(40_000 + seed)
        problem = make_random_spot(
            rng,
            max_quota=int(rng.integers(2, 7)),
            gamma_4=[0.1, 1.0][seed % 2],
            model=["paper", "reference"][seed // 2 % 2],
        )
        exact = solve_spot_exact(problem, cell_enumeration=0)
        oracle = dnnprov.solve(problem, "enumerate")
        assert exact.status is oracle.status, (seed, exact.message)
        if oracle.cost is not None:
            assert_allclose(exact.cost, oracle.cost, rtol=1e-6)


def test_gap_never_turns_into_a_false_infeasible(make_random_spot):
    """A positive gap discounts the incumbent only: with no plan yet, nothing feasible is skipped."""
    for seed in range(40):
        problem = make_random_spot(np.random.default_rng(500 + seed), budget=False)
        oracle = dnnprov.solve(problem, "enumerate")
        result = dnnprov.solve(problem, "milp", gap=0.5)
        assert (result.plan is None) == (oracle.plan is None), seed
        if result.status is Status.INFEASIBLE:
            assert oracle.status is Status.INFEASIBLE


@pytest.mark.parametrize("method", ["heuristic", "reference-heuristic", "enumerate", "milp"])
def test_every_method_stops_at_its_time_limit(resnet110_table1, method):
    """A time limit that has passed at once ends every method with ``limit`` (never a proof)."""
    result = dnnprov.solve(resnet110_table1, method, time_limit_s=1e-9)
    assert result.status is Status.LIMIT
    assert result.bound is None or result.bound <= 5.448374 * (1 + 1e-9)


def test_solver_log_reports_header_progress_and_status(resnet110_table1, caplog):
    """solve(log=logger) writes the header, a line for the incumbent, and the final status."""
    import logging

    logger = logging.getLogger("dnnprov.test-log")
    with caplog.at_level(logging.INFO, logger="dnnprov.test-log"):
        result = dnnprov.solve(resnet110_table1, "milp", log=logger)
    text = caplog.text
    assert "dnnprov milp:" in text and "incumbent" in text and "bound" in text
    assert caplog.messages[-1].startswith(f"{result.status.value} after")


def test_heuristic_seed_joins_searches_that_last(resnet110_table1, caplog, monkeypatch):
    """A search still going at SEED_AT of the limit takes the heuristic's plan; the answer is the same."""
    import logging

    from dnnprov.solvers.spot import exact as spot_exact

    quick = dnnprov.solve(resnet110_table1, "milp")
    monkeypatch.setattr(spot_exact, "SEED_AT", 0.0)
    logger = logging.getLogger("dnnprov.test-log")
    with caplog.at_level(logging.INFO, logger="dnnprov.test-log"):
        seeded = dnnprov.solve(resnet110_table1, "milp", log=logger)
    assert "heuristic seed" in caplog.text
    assert seeded.status is quick.status and seeded.cost == pytest.approx(quick.cost, rel=1e-12)


def test_solver_is_quiet_by_default(resnet110_table1, capsys):
    """Without log=..., nothing reaches stdout or stderr."""
    dnnprov.solve(resnet110_table1, "milp")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
