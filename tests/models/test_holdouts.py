"""Held-out reproduction: published numbers that no calibration was fitted to (issue 23).

The calibration (``dnnprov.profiling.calibrate``) fits λDNN's n_t and storage line to
Table 3 and spotDNN's gamma_4 to Table I; agreement with those times is a fit residual
(tests/models/test_predict.py, tests/io/test_paper_data.py), not evidence. These tests
compare the model with published numbers it was not fitted to: leave-one-out on the two
fitted tables, λDNN Fig. 8, Fig. 10 and its MobileNet run, spotDNN Table V and Table I's
costs. Each says its tolerance and why. A published number the model contradicts is a
finding (docs/reproduction.md), kept as a strict ``xfail`` that states the published
number: it cannot pass silently, and it fails loudly (XPASS) if the model comes to agree.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

import dnnprov
from dnnprov.io.catalogs.catalog import build_spot_problem, embedded_path, load_catalog, load_spot_profile
from dnnprov.io.paper import TABLE5_TYPES, UNPRICED_PS
from dnnprov.models.predict import predict
from dnnprov.problems.spot import SpotSLO
from dnnprov.profiling.calibrate import (
    ESTIMATED_GAMMA_4,
    ESTIMATED_SERVERLESS,
    TABLE1_RUNS,
    TABLE3_RUNS,
    leave_one_out_gamma_4,
    leave_one_out_serverless,
    table1_paper_problem,
)

#: λDNN's model is published with prediction errors up to 10.27 % (over function counts,
#: spec/serverless.md section 6): a reproduction cannot be asked to be closer to a measured time.
SERVERLESS_TOLERANCE = 0.10
#: spotDNN's published time-prediction error on heterogeneous clusters is 1.8-6.9 % (spec/spot.md 7).
SPOT_TOLERANCE = 0.069


def load(relative: str):
    """An embedded instance."""
    return dnnprov.read_instance(dnnprov.embedded_instance(relative))


def miss(reason: str):
    """Mark a comparison the model is known to fail (a held-out finding, docs/reproduction.md)."""
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)


# ---------------------------------------------------------------- leave-one-out on the fitted tables
def test_table3_leave_one_out_within_the_papers_own_error() -> None:
    """λDNN Table 3: each plan predicted by n_t and the storage line fitted to the other two
    comes within 10 % of its published time (measured +1.5 / -5.6 / +4.2 %). Weak evidence:
    two runs fit three coefficients, two of them at the band's bounds."""
    before = load("serverless/paper-table3-resnet50.json")
    before = before.replace(workload=dataclasses.replace(before.workload, **ESTIMATED_SERVERLESS))
    rows = leave_one_out_serverless(before, TABLE3_RUNS)
    assert [r["published_s"] for r in rows] == [703.95, 528.96, 573.34]
    for r in rows:
        assert r["predicted_s"] == pytest.approx(r["published_s"], rel=SERVERLESS_TOLERANCE), r


def test_table1_leave_one_out_within_the_papers_own_error() -> None:
    """spotDNN Table I: each plan predicted with gamma_4 fitted to the other two comes within
    6.9 % of its measured time (measured +0.8 / -0.3 / -0.5 %). Weak evidence: the three
    plans are nearly the same cluster, so any one of them fixes gamma_4 for the others."""
    rows = leave_one_out_gamma_4(table1_paper_problem(ESTIMATED_GAMMA_4), TABLE1_RUNS)
    assert [r["published_s"] for r in rows] == [2549.02, 2710.85, 2597.34]
    for r in rows:
        assert r["predicted_s"] == pytest.approx(r["published_s"], rel=SPOT_TOLERANCE), r


# ---------------------------------------------------------------- λDNN Fig. 8: times on the figures' axes
FIG8B_MEMORY = range(2496, 3009, 64)


@pytest.mark.parametrize(
    "samples",
    [
        pytest.param(ESTIMATED_SERVERLESS["samples"], id="estimated-n_t"),
        pytest.param(
            None,
            id="calibrated-n_t",
            marks=miss(
                "calibrated n_t = 65,957 predicts 561-593 s, above Fig. 8(b)'s 300-550 s axis; the paper's own "
                "Table 3 time of 8 x 2,560 MB at local batch 128 (573.34 s, this very setting) is above it too"
            ),
        ),
    ],
)
def test_fig8b_resnet50_times_lie_on_the_figures_axis(samples: int | None) -> None:
    """λDNN Fig. 8(b): ResNet50, 8 functions, 1 epoch, local batch 128, 2,496-3,008 MB; the
    figure's time axis spans 300-550 s, so every measured time lies in it (tolerance: none
    beyond the axis itself)."""
    problem = load("serverless/paper-table3-resnet50.json")
    if samples is not None:
        problem = problem.replace(workload=dataclasses.replace(problem.workload, samples=samples))
    times = [predict(problem, functions=8, memory_mb=m, local_batch=128)["time_s"] for m in FIG8B_MEMORY]
    assert 300 <= min(times) and max(times) <= 550, times


@pytest.mark.parametrize(
    "relative",
    [
        pytest.param("serverless/paper-fig10-1dcnn-90s-reconciled.json", id="reconciled-line"),
        pytest.param(
            "serverless/paper-fig10-1dcnn-90s.json",
            id="table5-line",
            marks=miss("Table 5's rate line 0.1 m - 8.8 predicts 47-122 s, above the 80 s axis below about 1,500 MB"),
        ),
    ],
)
def test_fig8a_1dcnn_times_lie_on_the_figures_axis(relative: str) -> None:
    """λDNN Fig. 8(a): 1DCNN, 8 functions, 3 epochs, 960-3,008 MB; time axis 20-80 s. The
    reconciled line was derived from the two published 1DCNN runs only, so this is held out."""
    problem = load(relative)
    problem = problem.replace(workload=dataclasses.replace(problem.workload, epochs=3))
    times = [predict(problem, functions=8, memory_mb=m)["time_s"] for m in range(960, 3009, 64)]
    assert 20 <= min(times) and max(times) <= 80, times


def test_reconciled_line_gives_both_published_1dcnn_runs() -> None:
    """FIT RESIDUAL, not validation: the reconciled line (0.0945 m + 83.6) was derived from these
    two runs (naive 10 x 3,008 MB 53.6 s, λDNN 10 x 1,088 MB 86.2 s); rounding it to three
    digits leaves them within 0.1 %. Table 5's published line misses the λDNN run by +67 %."""
    reconciled = load("serverless/paper-fig10-1dcnn-90s-reconciled.json")
    published = load("serverless/paper-fig10-1dcnn-90s.json")
    for functions, memory, time_s in ((10, 3008, 53.6), (10, 1088, 86.2)):
        assert predict(reconciled, functions=functions, memory_mb=memory)["time_s"] == pytest.approx(time_s, rel=1e-3)
    assert predict(published, functions=10, memory_mb=1088)["time_s"] == pytest.approx(144.2, abs=0.1)


# ---------------------------------------------------------------- λDNN Fig. 10: λDNN's plans met T_o
@pytest.mark.parametrize(
    "time_o, memory, functions",
    [
        pytest.param(
            700,
            2816,
            6,
            id="700s",
            marks=miss(
                "the calibrated model predicts 762.7 s for λDNN's T_o = 700 s plan, which the paper says met it"
            ),
        ),
        pytest.param(800, 2752, 6, id="800s"),
    ],
)
def test_fig10b_resnet50_lambda_dnn_plans_meet_their_deadline(time_o: int, memory: int, functions: int) -> None:
    """λDNN Fig. 10(b), ResNet50, 1 epoch: λDNN's plans met T_o, so the calibrated model must
    predict them within T_o (tolerance none: a prediction above T_o makes our solvers reject
    a plan the paper ran within it). T_o = 600 s is Table 3, fitted on."""
    problem = load("serverless/paper-table3-resnet50.json").replace(time_s=time_o)
    assert predict(problem, functions=functions, memory_mb=memory)["time_s"] <= time_o


@pytest.mark.parametrize(
    "relative, time_o, memory, functions",
    [
        pytest.param(
            "serverless/paper-fig10-1dcnn-90s.json",
            90,
            1088,
            10,
            id="table5-90s",
            marks=miss("Table 5's line predicts 144.2 s for λDNN's T_o = 90 s plan (published 86.2 s)"),
        ),
        pytest.param(
            "serverless/paper-fig10-1dcnn-90s.json",
            150,
            1344,
            7,
            id="table5-150s",
            marks=miss("Table 5's line predicts 169.6 s for λDNN's T_o = 150 s plan, which met it"),
        ),
        pytest.param("serverless/paper-fig10-1dcnn-90s.json", 210, 1792, 5, id="table5-210s"),
        pytest.param("serverless/paper-fig10-1dcnn-90s-reconciled.json", 150, 1344, 7, id="reconciled-150s"),
        pytest.param("serverless/paper-fig10-1dcnn-90s-reconciled.json", 210, 1792, 5, id="reconciled-210s"),
    ],
)
def test_fig10a_1dcnn_lambda_dnn_plans_meet_their_deadline(
    relative: str, time_o: int, memory: int, functions: int
) -> None:
    """λDNN Fig. 10(a), 1DCNN, 5 epochs: λDNN's plans met T_o (tolerance none, as above). The
    reconciled line's T_o = 90 s plan is one of the two runs it was derived from, so not here."""
    problem = load(relative).replace(time_s=time_o)
    assert predict(problem, functions=functions, memory_mb=memory)["time_s"] <= time_o


# ---------------------------------------------------------------- λDNN MobileNet (nothing fitted on it)
def test_mobilenet_heuristic_returns_the_published_plan() -> None:
    """λDNN's MobileNet run (6 epochs, T_o 1,200 s): Algorithm 1 returns exactly the published
    7 x 1,728 MB (with the published 1,728 MB minimum memory; with the 128 MB the file once
    had, it returned 14 x 576 MB)."""
    result = dnnprov.solve(load("serverless/paper-fig10-mobilenet-1200s.json"), "heuristic")
    assert result.plan is not None and (result.plan.functions, result.plan.memory_mb) == (7, 1728)


@pytest.mark.parametrize(
    "functions, memory, published_s",
    [
        pytest.param(7, 1728, 967.5, id="lambdaDNN"),
        pytest.param(
            10, 2752, 738.9, id="modified-Siren", marks=miss("predicted 594.7 s, 19.5 % below the published 738.9 s")
        ),
    ],
)
def test_mobilenet_published_times(functions: int, memory: int, published_s: float) -> None:
    """λDNN's MobileNet plans within 10 % of their published times (the paper's own prediction
    error reaches 10.27 %). Measured: λDNN's +7.8 % (1,042.5 s, one checkpoint restart)."""
    out = predict(load("serverless/paper-fig10-mobilenet-1200s.json"), functions=functions, memory_mb=memory)
    assert out["time_s"] == pytest.approx(published_s, rel=SERVERLESS_TOLERANCE)


# ---------------------------------------------------------------- spotDNN Table V: the exhaustive plans
TABLE5_SRIFTY = {(0.9, 1900): [2, 0, 2, 0, 0], (0.8, 2400): [2, 0, 4, 0, 0], (0.7, 3700): [2, 1, 3, 0, 0]}


def table5_calibrated(loss: float, time_s: float) -> dnnprov.SpotProblem:
    """A Table V ResNet-110 row on the paper model with gamma_4 calibrated to Table I."""
    return build_spot_problem(
        load_catalog(embedded_path("catalogs", "reference-code-2023.json")),
        load_spot_profile(embedded_path("workloads", "spot", "resnet110-paper.json")),
        SpotSLO(loss=loss, time_s=time_s),
        platform=UNPRICED_PS,
        quotas=dict(zip(TABLE5_TYPES, (2, 5, 5, 8, 5))),
    )


def optimum(problem: dnnprov.SpotProblem) -> list[int] | None:
    """The proven optimum's counts over the problem's columns."""
    result = dnnprov.solve(problem, "milp")
    assert result.status in (dnnprov.Status.OPTIMAL, dnnprov.Status.INFEASIBLE), result.message
    return None if result.plan is None else [result.plan.counts.get(c, 0) for c in problem.columns().labels]


@pytest.mark.parametrize(
    "model, slo",
    [
        pytest.param("reference", (0.9, 1900), id="reference-0.9-1900"),
        pytest.param("reference", (0.8, 2400), id="reference-0.8-2400"),
        pytest.param(
            "reference",
            (0.7, 3700),
            id="reference-0.7-3700",
            marks=miss("the reference model's optimum is [2,0,4,0,0]"),
        ),
        pytest.param("calibrated", (0.9, 1900), id="calibrated-0.9-1900", marks=miss("optimum [2,0,0,0,0]")),
        pytest.param("calibrated", (0.8, 2400), id="calibrated-0.8-2400", marks=miss("optimum [2,0,3,0,0]")),
        pytest.param("calibrated", (0.7, 3700), id="calibrated-0.7-3700", marks=miss("optimum [2,0,3,0,0]")),
    ],
)
def test_table5_resnet110_optimum_is_the_exhaustive_plan(model: str, slo: tuple[float, int]) -> None:
    """spotDNN Table V, ResNet-110: Srifty+ searched exhaustively, so its plan is the optimum
    the paper measured; the proven optimum must be that plan exactly. The authors'
    uncalibrated reference model gets 2 of 3; the paper model with gamma_4 calibrated to
    Table I gets 0 of 3 (a held-out miss of the calibration)."""
    loss, time_s = slo
    problem = (
        load(f"spot/paper-table5-resnet110-{loss}-{time_s}.json")
        if model == "reference"
        else table5_calibrated(loss, time_s)
    )
    assert optimum(problem) == TABLE5_SRIFTY[slo]


# ---------------------------------------------------------------- spotDNN Table I: published costs
TABLE1_COSTS = [
    ({"g3.8xlarge": 5, "g3.16xlarge": 3}, 2549.02, 5.33),
    ({"g3.8xlarge": 4, "g3.16xlarge": 3}, 2710.85, 5.16),
    ({"g4dn.4xlarge": 2, "g3.8xlarge": 5, "g3.16xlarge": 2}, 2597.34, 4.97),
]
#: Table III's prices are rounded to cents: 0.005 $/h on each of up to 9 instances is up to
#: 0.6 % of these plans' 6.87-7.56 $/h.
PRICE_ROUNDING = 0.006


def test_table1_costs_are_table3_prices_times_measured_times() -> None:
    """The published Table I costs are Table III's prices (in the Table III-price instance)
    times the measured times, with no PS charge, within the prices' rounding (measured:
    +0.43 / +0.26 / +0.31 %, on-demand +0.05 %)."""
    problem = load("spot/paper-table1-table3-prices.json")
    spot = {t.name: t.spot_price_per_h for t in problem.instance_types}
    on_demand = {t.name: t.on_demand_price_per_h for t in problem.instance_types}
    assert problem.platform.ps_price_per_h == 0
    for counts, time_s, cost in TABLE1_COSTS:
        assert sum(spot[k] * n for k, n in counts.items()) * time_s / 3600 == pytest.approx(cost, rel=PRICE_ROUNDING)
    on_demand_cost = (5 * on_demand["g3.8xlarge"] + 3 * on_demand["g3.16xlarge"]) * 2549.02 / 3600
    assert on_demand_cost == pytest.approx(17.75, rel=PRICE_ROUNDING)


def test_table1_predicted_costs_with_table3_prices() -> None:
    """The authors' reference model (nothing fitted by us) with Table III prices predicts the
    published Table I costs within its time tolerance plus the prices' rounding (measured:
    +1.07 / +0.72 / +0.83 %; the code-price instance is 5.6-8.5 % above)."""
    problem = load("spot/paper-table1-table3-prices.json")
    for counts, _, cost in TABLE1_COSTS:
        assert predict(problem, counts=counts)["cost"] == pytest.approx(cost, rel=SPOT_TOLERANCE + PRICE_ROUNDING)


def test_table1_exhaustive_optimum_with_table3_prices() -> None:
    """With Table III's prices the reference model's proven optimum is still the code's
    exhaustive plan 3 g4dn.4xl + 5 g3.8xl + 2 g3.16xl at its 2567.70 s (spec section 6), now
    costing Table III's 6.99 $/h for it; Srifty+'s plan on the testbed had one g4dn.4xlarge fewer."""
    problem = load("spot/paper-table1-table3-prices.json")
    result = dnnprov.solve(problem, "milp")
    assert result.status is dnnprov.Status.OPTIMAL
    assert [result.plan.counts.get(c, 0) for c in problem.columns().labels] == [0, 3, 5, 2, 0]
    assert result.time_s == pytest.approx(2567.70, abs=1e-9)
    assert result.cost == pytest.approx((3 * 0.36 + 5 * 0.69 + 2 * 1.37) * 2567.70 / 3600, abs=1e-6)


# ---------------------------------------------------------------- the reproduction table
def test_every_row_of_the_reproduction_table_says_fitted_on_or_held_out() -> None:
    """docs/reproduction.md: each numbered row's basis column starts with "fitted on" or "held out"
    (a row with both names the first), so no calibrated agreement reads as a reproduction."""
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "reproduction.md"
    rows = [line.split(" | ") for line in page.read_text().splitlines() if re.match(r"^\| \d+ \| ", line)]
    assert len(rows) >= 20
    for cells in rows:
        basis = cells[4].replace("**", "")
        assert re.match(r"(fitted on|held out)\b", basis), cells[0]
