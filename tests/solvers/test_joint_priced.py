"""Joint provisioning with priced columns (solvers/joint/pricing/priced.py, solvers/joint/pricing/regions.py).

Every answer is checked against the product brute force of test_joint.py (every feasible plan
of every job evaluated, the shared limits applied to every combination), with pricing forced on
so the small boxes go the priced way; one large-set job is solved jointly without a refusal.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import numpy as np
import pytest
from dnnprov.solvers.joint.columns import spot_usage_rows
from dnnprov.solvers.joint.pricing.regions import SpotPricer
from dnnprov.solvers.joint.provision import SharedLimits, solve_many
from dnnprov.solvers.search.enumeration import decode_counts
from dnnprov.solvers.spot.exact import solve_spot_exact
from test_joint import (
    REL,
    brute_force,
    check_plans,
    feasible,
    random_shared,
    scaled_prices,
    small_serverless,
    small_spot,
)

import dnnprov
from dnnprov.models.spot import SpotModel

LARGE = Path(__file__).resolve().parents[2] / "data" / "benchmarks" / "large"
# issue 33's check is 200 small sets: DNNPROV_BRUTE_SETS=200 runs it (default: a moderate count)
BRUTE_SETS = int(os.environ.get("DNNPROV_BRUTE_SETS", "40"))


#: the random families of :func:`priced_fuzz`: (name, spot job options, price decades)
FUZZ_FAMILIES = (
    ("priced-small", {"n_types": 3, "max_quota": 2, "max_ps": 2, "on_demand": False}, 0.0),
    ("priced-wide", {"n_types": 3, "max_quota": 5, "max_ps": 2, "on_demand": False}, 0.0),
    ("priced-existing", {"n_types": 3, "max_quota": 4, "max_ps": 2, "existing": True}, 0.0),
    ("priced-magnitudes", {"n_types": 3, "max_quota": 3, "max_ps": 2, "on_demand": False}, 6.0),
)


def priced_verdict(problems, shared: SharedLimits) -> tuple[str, str]:
    """(status, verdict) of one set solved with every spot job priced: ``ok`` or why the answer is wrong."""
    expected = brute_force(problems, shared)
    result = solve_many(problems, shared=shared, pricing=True)
    status = result.status.value
    if math.isinf(expected):
        return status, "ok" if result.status is dnnprov.Status.INFEASIBLE else f"{status} for a set without a plan"
    if result.status is dnnprov.Status.INFEASIBLE:
        return status, f"infeasible claimed, optimum {expected!r}"
    if result.bound is not None and result.bound > expected * (1 + REL):
        return status, f"bound {result.bound!r} above the optimum {expected!r}"
    if result.status is dnnprov.Status.OPTIMAL:
        try:
            check_plans(problems, result, shared)
        except AssertionError as e:
            return status, f"plans: {e}"
        if abs(result.cost - expected) > REL * abs(expected):
            return status, f"optimal claimed at {result.cost!r}, optimum {expected!r}"
    return status, "ok"


def priced_fuzz(count: int, seed: int) -> dict[str, dict[str, object]]:
    """Per family of :data:`FUZZ_FAMILIES`: status counts and wrong answers over ``count`` random sets
    each (1-3 priced spot jobs, a serverless job beside them in some, random shared limits)."""
    from conftest import random_serverless_problem, random_spot_problem

    out: dict[str, dict[str, object]] = {}
    for f, (name, options, decades) in enumerate(FUZZ_FAMILIES):
        rng = np.random.default_rng([seed, f])
        counts: dict[str, object] = {"sets": 0, "wrong": 0}
        for _ in range(count):
            problems = []
            for _ in range(int(rng.integers(1, 4))):
                job = feasible(random_spot_problem, rng, **options)
                problems.append(scaled_prices(rng, job, decades) if decades else job)
            if rng.random() < 0.3:
                problems.append(small_serverless(rng, random_serverless_problem))
            status, verdict = priced_verdict(problems, random_shared(rng, problems))
            counts["sets"] = int(counts["sets"]) + 1  # type: ignore[call-overload]
            counts[status] = int(counts.get(status, 0)) + 1  # type: ignore[call-overload]
            if verdict != "ok":
                counts["wrong"] = int(counts["wrong"]) + 1  # type: ignore[call-overload]
                counts.setdefault("first_wrong", verdict)
        out[name] = counts
    return out


def agrees(problems, shared: SharedLimits) -> dnnprov.Status:
    """Solve with every spot job priced; assert the answer is the brute force's. Returns the status."""
    expected = brute_force(problems, shared)
    result = solve_many(problems, shared=shared, pricing=True)
    if math.isinf(expected):
        assert result.status is dnnprov.Status.INFEASIBLE, result.message
        assert result.cost is None and result.bound == math.inf
        return result.status
    assert result.status is dnnprov.Status.OPTIMAL, result.message
    np.testing.assert_allclose(result.cost, expected, rtol=REL)
    assert result.bound == result.cost
    check_plans(problems, result, shared)
    return result.status


def test_priced_spot_sets_equal_brute_force(make_random_spot):
    """Random sets of 2-4 small spot jobs under often-binding quotas: the brute force's optimum."""
    rng = np.random.default_rng(3301)
    statuses = []
    for _ in range(30):
        problems = [small_spot(rng, make_random_spot) for _ in range(int(rng.integers(2, 5)))]
        statuses.append(agrees(problems, random_shared(rng, problems)))
    assert dnnprov.Status.OPTIMAL in statuses and dnnprov.Status.INFEASIBLE in statuses


def test_many_small_sets_equal_brute_force(make_random_spot, make_random_serverless):
    """Issue 33: small sets (spot jobs priced, some serverless beside) all equal the product brute force."""
    rng = np.random.default_rng(3305)
    statuses = []
    for _ in range(BRUTE_SETS):
        problems = [small_spot(rng, make_random_spot) for _ in range(int(rng.integers(1, 4)))]
        if rng.random() < 0.3:
            problems.append(small_serverless(rng, make_random_serverless))
        statuses.append(agrees(problems, random_shared(rng, problems)))
    assert dnnprov.Status.OPTIMAL in statuses


def test_priced_mixed_sets_equal_brute_force(make_random_spot, make_random_serverless):
    """Priced spot jobs beside enumerated serverless jobs (quotas, vCPU and concurrency rows)."""
    rng = np.random.default_rng(3302)
    for _ in range(8):
        problems = [small_spot(rng, make_random_spot) for _ in range(int(rng.integers(1, 3)))]
        problems += [small_serverless(rng, make_random_serverless) for _ in range(int(rng.integers(1, 3)))]
        agrees(problems, random_shared(rng, problems))


def test_priced_sets_with_prices_over_twelve_decades(make_random_spot):
    """Priced spot jobs whose type and PS prices are scaled by 1e-6 .. 1e6 each (the budgets of
    the region solves span the same decades): the brute force's optimum, or its infeasibility."""
    rng = np.random.default_rng(3307)
    statuses = []
    for _ in range(max(10, BRUTE_SETS // 2)):
        problems = []
        for _ in range(int(rng.integers(2, 4))):
            problems.append(scaled_prices(rng, small_spot(rng, make_random_spot), 6))
        statuses.append(agrees(problems, random_shared(rng, problems)))
    assert dnnprov.Status.OPTIMAL in statuses


def times_prices(problem: dnnprov.SpotProblem, factor: float) -> dnnprov.SpotProblem:
    """``problem`` with every type's and the PS's price multiplied by ``factor`` (no budget)."""
    data = problem.to_dict()
    for spec in data["instance_types"].values():
        spec["spot_price_per_h"] *= factor
    data["platform"]["ps_price_per_h"] *= factor
    data["constraints"]["budget_usd"] = None
    return dnnprov.problem_from_dict(data)


@pytest.mark.filterwarnings("ignore::dnnprov.errors.PlausibilityWarning")
@pytest.mark.parametrize("factor", [1e12, 1e-10])
def test_priced_sets_with_every_price_near_the_range_ends(make_random_spot, factor):
    """Every price scaled by 1e12 or 1e-10 (valid prices): the region solves' cutoffs then lie above
    1e15 or below 1e-9, which no problem holds as a budget; they must not be passed as one (an
    InvalidInputError on ``constraints.budget_usd``, a field the user never gave, before the fix)."""
    rng = np.random.default_rng(3309)
    options = {"n_types": 3, "max_quota": 2, "max_ps": 2, "model": "paper"}  # costs unrounded
    statuses = []
    for _ in range(12):
        problems = [
            times_prices(feasible(make_random_spot, rng, **options), factor) for _ in range(int(rng.integers(2, 4)))
        ]
        statuses.append(agrees(problems, random_shared(rng, problems)))
    assert dnnprov.Status.OPTIMAL in statuses


def test_priced_fuzz_families_have_no_wrong_answer():
    """The fuzz harness of benchmarks/joint_magnitudes.py --priced, a short run: every family
    exercised, no wrong answer (and both certificates met)."""
    results = priced_fuzz(6, seed=3308)
    assert set(results) == {name for name, _, _ in FUZZ_FAMILIES}
    assert all(c["wrong"] == 0 for c in results.values()), results
    assert sum(int(c.get("optimal", 0)) for c in results.values()) >= 5, results  # type: ignore[call-overload]


def test_priced_ties_and_infeasible_cases(make_random_spot):
    """Equal jobs (ties, one shared pricer), limits of 0 on every type, a job infeasible on its own."""
    rng = np.random.default_rng(3303)
    job = small_spot(rng, make_random_spot)
    labels = job.columns().labels
    twins = [job.replace(name=f"twin-{i}") for i in range(3)]
    for limit in (0, 1, 2, 3):
        agrees(twins, SharedLimits(quotas={label: limit for label in labels}))
    shared = SharedLimits(quotas={label: 0 for label in labels})
    assert agrees([job, small_spot(rng, make_random_spot)], shared) is dnnprov.Status.INFEASIBLE
    hopeless = job.replace(slo=dataclasses.replace(job.slo, time_s=1e-3), name="hopeless")
    result = solve_many([job, hopeless], pricing=True)
    assert result.status is dnnprov.Status.INFEASIBLE
    assert result.results[1].status is dnnprov.Status.INFEASIBLE
    assert "hopeless" in result.message


class PricingBox:
    """A small spot job's whole quota box under quotas of 100 on every label (none binds), for
    brute force over its reduced costs g(n) = c(n) + w . v(n)."""

    def __init__(self, problem: dnnprov.SpotProblem) -> None:
        self.problem = problem
        shared = SharedLimits(quotas={label: 100 for label in problem.columns().labels})
        self.rows, self.a = spot_usage_rows(problem, shared, "job")
        self.model = SpotModel(problem)
        cols = self.model.columns
        radix = (cols.upper - cols.lower + 1).astype(np.int64)
        self.counts = decode_counts(np.arange(int(np.prod(radix)), dtype=np.int64), cols.lower, radix)

    def pricer(self) -> SpotPricer:
        """A new pricer of the job (its own cache of region solves)."""
        return SpotPricer(self.problem, self.rows, self.a, np.full(len(self.rows), 100.0))

    def reduced_costs(self, w: np.ndarray) -> np.ndarray:
        """g of every count vector at its best PS count (inf: no PS count makes it feasible)."""
        g = np.full(len(self.counts), np.inf)
        low, high = self.problem.constraints.ps_count
        for ps in range(low, high + 1):
            ev = self.model.evaluate(self.counts, ps)
            g = np.minimum(g, np.where(ev.feasible, ev.cost + (self.counts @ self.a.T) @ w, np.inf))
        return g


def test_pricing_bound_is_below_every_reduced_cost(make_random_spot):
    """SpotPricer.price: its bound <= min_n c(n) + w . v(n) over the whole box, equal when proven."""
    rng = np.random.default_rng(3304)
    for _ in range(12):
        box = PricingBox(small_spot(rng, make_random_spot))
        pricer = box.pricer()
        for _ in range(3):
            w = rng.uniform(0, 2, len(box.rows)) * (rng.random(len(box.rows)) < 0.7)
            best = float(box.reduced_costs(w).min())
            found = pricer.price(w, math.inf)
            assert found.lower_bound <= best * (1 + 1e-12) + 1e-12
            if math.isfinite(best):
                np.testing.assert_allclose(found.lower_bound, best, rtol=1e-9)
                np.testing.assert_allclose(found.best, best, rtol=1e-9)


def test_pricing_and_fronts_with_a_cutoff_against_brute_force(make_random_spot):
    """Budgeted region solves (regions.py, "Cutoffs"): pricing with a cutoff finds the least
    g(n) = c(n) + w . v(n) when it is below the cutoff and else proves a bound of at least the
    cutoff, never above the least g; a front finds or dominates every plan with g <= T."""
    rng = np.random.default_rng(3306)
    below = above = 0
    for _ in range(12):
        box = PricingBox(small_spot(rng, make_random_spot))
        rows, a, counts = box.rows, box.a, box.counts
        for _ in range(3):
            w = rng.uniform(0, 2, len(rows)) * (rng.random(len(rows)) < 0.7)
            g = box.reduced_costs(w)
            best = float(g.min())
            if not math.isfinite(best):
                continue
            finite = np.sort(g[np.isfinite(g)])
            cutoff = float(finite[min(len(finite) - 1, int(rng.integers(0, 4)))]) * float(rng.uniform(0.9, 1.1))
            found = box.pricer().price(w, math.inf, cutoff)  # a fresh cache each time
            assert found.lower_bound <= best * (1 + 1e-12) + 1e-12
            if best < cutoff * (1 - 1e-9):
                below += 1
                np.testing.assert_allclose(found.best, best, rtol=1e-9)
            else:
                above += 1
                assert found.lower_bound >= cutoff * (1 - 1e-9) - 1e-12
            threshold = float(finite[min(len(finite) - 1, 3)])
            front = box.pricer().front(w, threshold, math.inf)
            assert front.complete
            plans = [(s.cost, s.usage) for s in front.plans]
            for k in np.flatnonzero(g <= threshold):
                use = a @ counts[k]
                cost = float(g[k] - use @ w)
                assert any(c <= cost * (1 + 1e-9) and (u <= use).all() for c, u in plans), counts[k]
    assert below and above


@pytest.mark.skipif(not (LARGE / "large-019.json").exists(), reason="the large benchmark set is not in data/")
def test_large_job_is_priced_not_refused():
    """A large-set job (a box of ~10^30 plans) jointly with another under a binding quota: proven optimal.

    Only the large job offers the capped type, so the joint optimum is the other job's own
    optimum plus the large job's optimum with that type's quota lowered: solved here alone.
    """
    large = dnnprov.read_instance(LARGE / "large-019.json")
    other = dnnprov.read_instance(LARGE / "large-009.json")
    alone = solve_spot_exact(large, time_limit_s=600)
    assert alone.status is dnnprov.Status.OPTIMAL and alone.plan is not None
    own = [(n, label) for label, n in alone.plan.counts.items() if n >= 2 and label not in other.columns().labels]
    used, label = max(own)
    shared = SharedLimits(quotas={label: used // 2})
    result = solve_many([large, other], shared=shared, time_limit_s=3600)
    assert result.status is dnnprov.Status.OPTIMAL, result.message
    assert result.stats["priced_jobs"] == 2
    types = tuple(dataclasses.replace(t, quota=used // 2) if t.name == label else t for t in large.instance_types)
    capped = solve_spot_exact(large.replace(instance_types=types), time_limit_s=600)
    rest = solve_spot_exact(other, time_limit_s=600)
    assert capped.cost is not None and rest.cost is not None
    np.testing.assert_allclose(result.cost, capped.cost + rest.cost, rtol=1e-9)
    assert result.results[0].plan.counts[label] <= used // 2
    assert result.results[0].status is dnnprov.Status.FEASIBLE  # pushed off its own optimum
    assert result.results[1].status is dnnprov.Status.OPTIMAL


PAPER = Path(__file__).resolve().parents[2] / "data" / "benchmarks" / "paper" / "spot-paper-table3-overhead-7x10.json"


@pytest.mark.skipif(not PAPER.exists(), reason="the paper benchmark instance is not in data/")
def test_seeded_columns_hold_a_joint_plan_before_pricing():
    """Paper-size jobs whose own optima together break every shared quota: the roots hold no
    joint plan; the job-by-job seed adds one (each plan within what the others left), so the
    first restricted LP needs no artificial slack. The answer stays the proven optimum."""
    from dnnprov.solvers.joint.master import solve_columns
    from dnnprov.solvers.joint.pricing.priced import own_optima_bound, seed_joint_plan, start_jobs

    base = dnnprov.read_instance(PAPER)
    problems = [
        base.replace(slo=dataclasses.replace(base.slo, time_s=base.slo.time_s * f), name=f"paper-{i}")
        for i, f in enumerate((1.0, 1.2, 1.4, 1.6))
    ]
    use: dict[str, int] = {}
    own = []
    for p in problems:
        alone = solve_spot_exact(p)
        plan = alone.plan
        assert plan is not None and alone.cost is not None
        own.append(alone.cost)
        for label, n in plan.counts.items():
            use[label] = use.get(label, 0) + n
    shared = SharedLimits(quotas={label: math.floor(0.6 * n) for label, n in use.items() if n >= 2})
    limits = shared.rows()
    generated: list = [None] * len(problems)
    priced = start_jobs(problems, shared, frozenset(range(len(problems))), generated, math.inf, cache=True)
    assert solve_columns([g.columns for g in generated], limits).picked is None  # the roots: no joint plan
    assert seed_joint_plan(generated, priced, limits, math.inf)
    seeded = solve_columns([job.generated(p.name).columns for job, p in zip(priced.values(), problems)], limits)
    assert seeded.picked is not None and seeded.cost is not None
    result = solve_many(problems, shared=shared)
    assert result.status is dnnprov.Status.OPTIMAL and result.stats["seeded"] is True
    assert result.cost is not None and result.cost <= seeded.cost * (1 + 1e-12)
    # the jobs' own optima bound every joint plan from below: proven, below the optimum here
    bound = own_optima_bound(generated)
    assert bound == pytest.approx(math.fsum(own), rel=1e-12) and bound <= math.fsum(own)
    assert bound < result.cost


@pytest.mark.skipif(not PAPER.exists(), reason="the paper benchmark instance is not in data/")
def test_solve_many_log_shows_rounds_and_a_monotone_bound(tmp_path, capsys):
    """``solve-many --log``: a header, one line per pricing round, a proven bound that never
    goes down, the final incumbent equal to the answer's total cost; stdout stays JSON."""
    import json
    import re

    from dnnprov.cli import main

    base = dnnprov.read_instance(PAPER)
    files = []
    for i, f in enumerate((1.0, 1.3, 1.6)):
        path = tmp_path / f"paper-{i}.json"
        dnnprov.write_instance(base.replace(slo=dataclasses.replace(base.slo, time_s=base.slo.time_s * f)), path)
        files.append(str(path))
    alone = solve_spot_exact(base).plan
    assert alone is not None
    label, used = max(alone.counts.items(), key=lambda kv: kv[1])
    argv = ["solve-many", *files, "--shared-quota", f"{label}={max(used, 1)}", "--max-plans-per-job", "1000"]
    assert main([*argv, "--json", "--log"]) == 0
    out, err = capsys.readouterr()
    answer = json.loads(out)
    lines = err.strip().splitlines()
    assert lines[0].startswith("dnnprov solve-many: 3 jobs (3 spot, 3 of them priced")
    assert lines[-1].startswith(f"{answer['status']} after ")
    rows = [re.match(r"^[* ]\s*([\d.]+)\s+(\S+)\s+(\S+)\s+(-|[\d.]+ %)\s+(.*)$", line) for line in lines[3:-1]]
    assert rows and all(rows), lines
    bounds = [float(m.group(3)) for m in rows if m is not None and m.group(3) != "-"]
    assert bounds == sorted(bounds)
    works = [m.group(5) for m in rows if m is not None]
    assert any(w.startswith("pricing round 1:") for w in works) and works[-1] == "final"
    final = rows[-1]
    assert final is not None and float(final.group(2)) == pytest.approx(answer["cost"], rel=1e-5)
    assert bounds[-1] <= answer["cost"] * (1 + 1e-9)
