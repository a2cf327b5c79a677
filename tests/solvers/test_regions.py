"""One region per plan (issue 33, item 2): the region decomposition against brute force.

The brute force here evaluates every plan of the box whose workers lie in one region with
:class:`dnnprov.SpotModel` and keeps the cheapest feasible one; it shares nothing with
``solvers/regions.py`` or ``dnnprov/fuzz/regions.py``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from dnnprov.solvers.regions import combine, label_region, plan_regions, region_problem

import dnnprov
from dnnprov import fuzz
from dnnprov.cli import main
from dnnprov.cloud.regions import solve_one_region
from dnnprov.models.spot import SpotModel
from dnnprov.result import Result, SpotPlan, Status

pytestmark = pytest.mark.filterwarnings("ignore::dnnprov.errors.PlausibilityWarning")

FAMILIES = ("multi-region", "multi-region-mixed", "multi-region-magnitudes")


def brute(problem: dnnprov.SpotProblem, one_region: bool = True) -> float:
    """The least cost of a feasible plan (one region only, unless told), inf when none."""
    model = SpotModel(problem)
    cols = model.columns
    region = [c.partition("@")[2].removesuffix(":on-demand") for c in cols.labels]
    rows = [
        c
        for c in itertools.product(*(range(int(lo), int(hi) + 1) for lo, hi in zip(cols.lower, cols.upper)))
        if not one_region or len({region[i] for i, n in enumerate(c) if n}) <= 1
    ]
    best = math.inf
    low, high = problem.constraints.ps_count
    for ps in range(low, high + 1):
        ev = model.evaluate(np.array(rows, dtype=np.int64), ps)
        if ev.feasible.any():
            best = min(best, float(ev.cost[ev.feasible].min()))
    return best


def test_label_region_reads_markets_and_plain_names() -> None:
    assert label_region("p3.2xlarge@us-west-2:on-demand") == "us-west-2"
    assert label_region("p3.2xlarge@us-west-2") == "us-west-2"
    assert label_region("p3.2xlarge") == ""
    assert plan_regions({"a@x": 1, "b@y": 0, "c@z:on-demand": 2}) == ["x", "z"]


@pytest.mark.parametrize("family", FAMILIES)
def test_one_region_answers_equal_brute_force(family: str) -> None:
    """Every seeded instance: the same verdict and cost as brute force, a plan in one region,
    and the any-region optimum never above it."""
    spans = 0
    for seed in range(25):
        problem = fuzz.instance(family, seed)
        truth = brute(problem)
        result = solve_one_region(problem, "milp", time_limit_s=60)
        if math.isinf(truth):
            assert result.status is Status.INFEASIBLE, (family, seed, result.message)
            continue
        assert result.status is Status.OPTIMAL, (family, seed, result.message)
        assert math.isclose(result.cost, truth, rel_tol=1e-9, abs_tol=1e-300), (family, seed)
        assert result.bound <= result.cost * (1 + 1e-12)
        assert len(plan_regions(result.plan.counts)) == 1
        anywhere = brute(problem, one_region=False)
        assert anywhere <= truth * (1 + 1e-12)
        spans += anywhere < truth * (1 - 1e-9)
    assert family == "multi-region-magnitudes" or spans > 0  # the rule changes some answers


def test_bound_is_the_minimum_over_regions_and_status_the_weakest() -> None:
    """combine(): a region without a proof leaves a limit with the least bound; proofs everywhere: optimal."""
    problem = fuzz.instance("multi-region", 3)
    common = dict(method="milp", kind="spot", model=problem.model, instance="r")
    optimal = Result(status=Status.OPTIMAL, plan=SpotPlan({"a@x": 1}), cost=5.0, bound=5.0, **common)
    limited = Result(status=Status.LIMIT, plan=SpotPlan({"b@y": 2}), cost=7.0, bound=3.0, **common)
    infeasible = Result(status=Status.INFEASIBLE, **common)
    mixed = combine(problem, "milp", "cost", {"x": optimal, "y": limited}, 1.0)
    assert mixed.status is Status.LIMIT and mixed.bound == 3.0 and mixed.cost == 5.0
    assert mixed.details["region"] == "x"
    proven = combine(problem, "milp", "cost", {"x": optimal, "y": infeasible, "z": None}, 1.0)
    assert proven.status is Status.OPTIMAL and proven.bound == 5.0
    none = combine(problem, "milp", "cost", {"y": infeasible, "z": None}, 1.0)
    assert none.status is Status.INFEASIBLE and none.plan is None
    unproven = combine(problem, "milp", "cost", {"y": infeasible, "z": dataclasses.replace(limited, plan=None)}, 1.0)
    assert unproven.status is Status.LIMIT and unproven.bound == 3.0


def test_a_gap_asked_of_every_region_holds_for_the_whole() -> None:
    for seed in range(15):
        problem = fuzz.instance("multi-region", seed)
        truth = brute(problem)
        result = solve_one_region(problem, "milp", gap=0.3)
        if math.isinf(truth):
            assert result.status is Status.INFEASIBLE
            continue
        assert result.status in (Status.OPTIMAL, Status.FEASIBLE)
        assert result.bound <= truth * (1 + 1e-9) and result.cost <= truth / (1 - 0.3) * (1 + 1e-9)


def test_kept_instances_fix_the_region() -> None:
    """Instances kept in region x rule every other region out."""
    problem = next(
        p
        for p in (fuzz.instance("multi-region", s) for s in range(60))
        if any(t.quota for t in p.instance_types if label_region(t.name) == "us-east-1")
        and len({label_region(t.name) for t in p.instance_types}) > 1
    )
    kept = next(t.name for t in problem.instance_types if t.quota and label_region(t.name) == "us-east-1")
    problem = problem.replace(constraints=dataclasses.replace(problem.constraints, existing={kept: 1}))
    other = next(r for r in {label_region(t.name) for t in problem.instance_types} if r != "us-east-1")
    assert region_problem(problem, other) is None
    result = solve_one_region(problem, "milp")
    truth = brute(problem)
    if math.isinf(truth):
        assert result.status is Status.INFEASIBLE
    else:
        assert result.status is Status.OPTIMAL and math.isclose(result.cost, truth, rel_tol=1e-9)
        assert plan_regions(result.plan.counts) == ["us-east-1"]


def test_cli_solves_one_region_by_default_and_any_region_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    problem = next(
        p
        for p in (fuzz.instance("multi-region", s) for s in range(60))
        if math.isfinite(brute(p)) and brute(p, one_region=False) < brute(p) * (1 - 1e-9)
    )
    path = tmp_path / "multi.json"
    dnnprov.write_instance(problem, path)
    capsys.readouterr()
    assert main(["solve", str(path), "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["status"] == "optimal" and math.isclose(one["cost"], brute(problem), rel_tol=1e-9)
    assert len(plan_regions(one["plan"]["counts"])) == 1
    assert main(["solve", str(path), "--json", "--any-region"]) == 0
    anywhere = json.loads(capsys.readouterr().out)
    assert math.isclose(anywhere["cost"], brute(problem, one_region=False), rel_tol=1e-9)
    assert len(plan_regions(anywhere["plan"]["counts"])) == 2
