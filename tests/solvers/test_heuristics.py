"""The published heuristics: the authors' reference search, spotDNN's and λDNN's Algorithm 1."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dnnprov.solvers.search import heuristics
from numpy.testing import assert_allclose, assert_array_equal

import dnnprov
from dnnprov import ServerlessModel, SpotModel, Status

TYPE_NAMES = ("p3.2xlarge", "g4dn.4xlarge", "g3.8xlarge", "g3.16xlarge", "p2.8xlarge")


def counts_of(result: dnnprov.Result, labels) -> list[int]:
    """The plan's counts in column order."""
    return [result.plan.counts[label] for label in labels]


# ---------------------------------------------------------------- window helper
def plain_windows(items, n_columns, size, wrap):
    """Count vectors of windows of ``items``, by a plain loop."""
    length = len(items)
    starts = range(length) if wrap else range(length - size + 1)
    rows = []
    for s in starts:
        row = [0] * n_columns
        for i in range(size):
            row[items[(s + i) % length]] += 1
        rows.append(row)
    return np.array(rows, dtype=np.int64).reshape(len(rows), n_columns)


@pytest.mark.parametrize("wrap", [False, True])
def test_window_counts_matches_plain_loop(wrap):
    """window_counts gives the counts of every (wrapping) window, as a plain loop does."""
    rng = np.random.default_rng(3)
    for _ in range(40):
        n_columns = int(rng.integers(1, 6))
        items = rng.integers(0, n_columns, size=int(rng.integers(1, 15)))
        for size in range(1, len(items) + 1):
            got = heuristics.window_counts(items, n_columns, size, wrap=wrap)
            assert_array_equal(got, plain_windows(items.tolist(), n_columns, size, wrap))


def test_window_counts_edges():
    """No windows fit when the list is shorter than the window (without wrap) or empty."""
    assert heuristics.window_counts(np.array([0, 1]), 2, 3).shape == (0, 2)
    assert heuristics.window_counts(np.array([], dtype=np.int64), 3, 1).shape == (0, 3)
    wrapped = heuristics.window_counts(np.array([0, 1, 2]), 3, 2, wrap=True)
    assert_array_equal(wrapped, [[1, 1, 0], [0, 1, 1], [1, 0, 1]])


# ---------------------------------------------------------------- the authors' reference code
@pytest.mark.parametrize(
    ("loss", "time_s", "plan"),
    [
        (0.9, 1900.0, [2, 0, 2, 0, 0]),
        (0.8, 2400.0, [2, 0, 4, 0, 0]),
    ],
)
def test_reference_heuristic_reproduces_section6(make_resnet110, loss, time_s, plan):
    """The reference search returns the plans spec section 6 (and Table V, spotDNN) gives."""
    result = dnnprov.solve(make_resnet110(loss=loss, time_s=time_s), "reference-heuristic")
    assert result.status is Status.FEASIBLE
    assert counts_of(result, TYPE_NAMES) == plan
    assert result.plan.ps == 1
    assert result.time_s <= time_s


def test_reference_heuristic_reproduces_table1(resnet110_table1):
    """With quotas [0,5,5,5,5] and (0.8, 2600) it returns 5 g3.8xl + 3 g3.16xl: 2565.13 s, $5.787788."""
    result = dnnprov.solve(resnet110_table1, "reference-heuristic")
    assert counts_of(result, TYPE_NAMES) == [0, 0, 5, 3, 0]
    assert_allclose(result.time_s, 2565.13, rtol=0, atol=1e-9)
    assert_allclose(result.cost, 5.787788, rtol=0, atol=1e-12)
    assert result.bound is None


def test_reference_heuristic_finds_nothing_when_too_tight(make_resnet110):
    """An unreachable deadline gives no plan (the code's all-zero counts) and no claim."""
    result = dnnprov.solve(make_resnet110(loss=0.8, time_s=100.0), "reference-heuristic")
    assert result.status is Status.UNKNOWN
    assert result.plan is None and result.cost is None
    assert not result.is_feasible()


def plain_reference_search(problem: dnnprov.SpotProblem):
    """Spec section 6's search as a plain loop, evaluating one plan at a time."""
    model = SpotModel(problem)
    w, pf = problem.workload, problem.platform
    t0 = []
    for t in problem.instance_types:
        if t.speed_samples_per_s is not None:
            per_gpu = problem.batch_per_gpu(t)
            t0.append(t.gpus * per_gpu / t.speed_samples_per_s)
        else:
            t0.append(
                t.compute_time_s
                + 2 * w.param_size_mb / w.bandwidth_req_mb_s
                - 2 * t.gpus * w.param_size_mb / pf.pcie_bandwidth_mb_s
            )
    order = sorted(range(len(t0)), key=lambda i: t0[i])  # stable
    items = [i for i in order for _ in range(problem.instance_types[i].quota)]
    best, best_cost, previous = None, math.inf, None
    for size in range(1, len(items)):
        for start in range(len(items)):
            window = [items[(start + i) % len(items)] for i in range(size)]
            counts = [window.count(c) for c in range(len(t0))]
            if counts == previous:
                continue
            previous = counts
            ev = model.evaluate(np.array([counts]), problem.constraints.ps_count[0])
            if ev.feasible[0] and ev.cost[0] < best_cost:
                best, best_cost = counts, float(ev.cost[0])
    return best, best_cost


@pytest.mark.parametrize("seed", range(8))
def test_reference_heuristic_matches_plain_search(make_random_spot, seed):
    """On random reference-model problems the vectorized search equals the plain loop."""
    rng = np.random.default_rng(200 + seed)
    problem = make_random_spot(rng, model="reference", on_demand=False, existing=False, vcpu_quota=False, budget=False)
    plan, cost = plain_reference_search(problem)
    result = dnnprov.solve(problem, "reference-heuristic")
    if plan is None:
        assert result.plan is None and result.status is Status.UNKNOWN
    else:
        assert counts_of(result, problem.columns().labels) == plan
        assert_allclose(result.cost, cost, rtol=1e-12)


def test_reference_heuristic_finds_plan_on_some_random_instances(make_random_spot):
    """The seeds used above are not all trivially infeasible (the comparison has content)."""
    found = 0
    for seed in range(8):
        rng = np.random.default_rng(200 + seed)
        problem = make_random_spot(
            rng, model="reference", on_demand=False, existing=False, vcpu_quota=False, budget=False
        )
        found += plain_reference_search(problem)[0] is not None
    assert found >= 4


# ---------------------------------------------------------------- spotDNN Algorithm 1
def spec_lower_bound(problem: dnnprov.SpotProblem, *, available_only: bool) -> int:
    """n_lower of eq. (16): b_min and v_max over the available instances (the list I) or, as the
    code does, over every offered column."""
    model = SpotModel(problem)
    cols = model.columns
    w, slo = problem.workload, problem.slo
    lone = model.iteration_times(np.array([1]), np.array([1]))[0]  # T^i with B_req
    use = (cols.upper > cols.lower) if available_only else np.ones(len(cols), dtype=bool)
    if not use.any():
        return 1
    b_min = min(cols.batch[use])
    spread = w.gamma_4 if w.loss_variant == "cc" else 1.0  # R = 0, |N| = 1
    j_min = (w.gamma_2 * b_min + w.gamma_3) * math.sqrt(spread) / (slo.loss - w.gamma_5) - w.gamma_1
    v_max = max(cols.batch[use] / lone[use])
    return max(math.ceil(b_min * j_min / (v_max * slo.time_s)), 1) if j_min > 0 else 1


def plain_algorithm1(problem: dnnprov.SpotProblem):
    """Algorithm 1 from spec section 5 with bounds (15)-(16), as plain loops (eq. 16 over the
    available instances, the list I: see test_eq16_bound_uses_available_instances)."""
    model = SpotModel(problem)
    cols = model.columns
    w = problem.workload
    lone = model.iteration_times(np.array([1]), np.array([1]))[0]
    items = [c for c in range(len(cols)) for _ in range(int(cols.upper[c] - cols.lower[c]))]
    items.sort(key=lambda c: -lone[c])  # slowest first
    n_upper = math.floor(((1 - w.beta_1) / w.alpha_1) ** 2)  # eq. (15)
    n_lower = spec_lower_bound(problem, available_only=True)  # eq. (16)
    best, best_cost = None, math.inf
    for ps in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
        for n in range(n_lower, min(n_upper, len(items)) + 1):
            for idx in range(len(items) - n + 1):
                counts = cols.lower.copy()
                for c in items[idx : idx + n]:
                    counts[c] += 1
                ev = model.evaluate(counts[None, :], ps)
                if ev.feasible[0] and ev.cost[0] < best_cost:
                    best, best_cost = (counts.tolist(), ps), float(ev.cost[0])
    return best, best_cost, n_lower, n_upper


def check_against_plain_algorithm1(problem: dnnprov.SpotProblem) -> None:
    """spot_heuristic and plain_algorithm1 agree on bounds, status and cost."""
    best, cost, n_lower, n_upper = plain_algorithm1(problem)
    result = dnnprov.solve(problem, "heuristic")
    assert (result.stats["n_lower"], result.stats["n_upper"]) == (n_lower, n_upper)
    if best is None:
        assert result.status is Status.UNKNOWN and result.plan is None
    else:
        assert result.status is Status.FEASIBLE
        assert_allclose(result.cost, cost, rtol=1e-12)


@pytest.mark.parametrize("seed", range(10))
def test_paper_heuristic_matches_plain_algorithm1(make_random_spot, seed):
    """On random problems spot_heuristic finds what plain loops over Algorithm 1 find."""
    rng = np.random.default_rng(300 + seed)
    check_against_plain_algorithm1(
        make_random_spot(
            rng, model="paper", loss_variant=("cc", "no-cc")[seed % 2], gamma_4=(0.1, 1.0)[(seed // 2) % 2]
        )
    )


@pytest.mark.parametrize(("time_s", "loss"), [(3000.0, 0.8), (2400.0, 0.8), (4000.0, 0.7)])
def test_paper_heuristic_matches_plain_algorithm1_resnet110(make_resnet110, time_s, loss):
    """On ResNet-110 (paper model, gamma_4 = 1), including a case with n_lower = 2."""
    problem = make_resnet110(model="paper", gamma_4=1.0, time_s=time_s, loss=loss)
    check_against_plain_algorithm1(problem)
    if time_s == 3000.0:
        assert dnnprov.solve(problem, "heuristic").stats["n_lower"] == 2


def test_eq16_bound_uses_available_instances(make_resnet110):
    """n_lower ignores a type that cannot be bought (here p2.8xlarge with quota 0)."""
    problem = make_resnet110([2, 5, 5, 8, 0], model="paper", gamma_4=1.0, time_s=3400.0, loss=0.8)
    expected = spec_lower_bound(problem, available_only=True)
    assert expected == 2 and spec_lower_bound(problem, available_only=False) == 1
    assert dnnprov.solve(problem, "heuristic").stats["n_lower"] == expected


def test_paper_heuristic_bounds_eq15(resnet110_paper):
    """n_upper = floor(((1 - beta_1) / alpha_1)^2) = floor((2.92 / 0.8)^2) = 13 for ResNet-110."""
    result = dnnprov.solve(resnet110_paper, "heuristic")
    assert result.stats["n_upper"] == 13
    assert result.stats["n_lower"] >= 1


@pytest.mark.parametrize("seed", range(15))
def test_paper_heuristic_keeps_existing_instances(make_random_spot, seed):
    """Every plan of spotDNN's heuristic contains the kept instances E (re-planning)."""
    rng = np.random.default_rng(400 + seed)
    problem = make_random_spot(rng, existing=True, model="paper", max_quota=5)
    result = dnnprov.solve(problem, "heuristic")
    existing = problem.constraints.existing
    assert existing
    if result.plan is not None:
        for label, n in existing.items():
            assert result.plan.counts[label] >= n
        for label, n in result.details["new_instances"].items():
            assert n == result.plan.counts[label] - existing.get(label, 0)


def test_paper_heuristic_keeps_an_expensive_existing_instance(make_resnet110):
    """A running p2.8xlarge the heuristic would never choose stays in the plan."""
    free = dnnprov.solve(make_resnet110(model="paper", gamma_4=1.0, time_s=4000.0), "heuristic")
    assert free.plan.counts["p2.8xlarge"] == 0
    kept = make_resnet110(
        model="paper", gamma_4=1.0, time_s=4000.0, constraints=dnnprov.SpotConstraints(existing={"p2.8xlarge": 1})
    )
    result = dnnprov.solve(kept, "heuristic")
    assert result.status is Status.FEASIBLE
    assert result.plan.counts["p2.8xlarge"] >= 1
    assert result.cost > free.cost


def test_paper_heuristic_reproduces_reference_plans(make_resnet110):
    """Run on the reference model, Algorithm 1 also finds the Table V plans of section 6."""
    for loss, time_s, plan in [(0.9, 1900.0, [2, 0, 2, 0, 0]), (0.8, 2400.0, [2, 0, 4, 0, 0])]:
        result = dnnprov.solve(make_resnet110(loss=loss, time_s=time_s), "heuristic")
        assert counts_of(result, TYPE_NAMES) == plan


# ---------------------------------------------------------------- λDNN Algorithm 1
def naive_largest_memory(problem: dnnprov.ServerlessProblem):
    """The naive plan of Table 3: m_max and the smallest n meeting T_o."""
    model = ServerlessModel(problem)
    m = problem.platform.max_memory_mb
    for n in range(1, problem.platform.concurrency_limit + 1):
        ev = model.evaluate(n, m, 1)
        if ev.feasible:
            return n, float(ev.cost)
    raise AssertionError("no naive plan")


def test_serverless_heuristic_table3(resnet50):
    """On Table 3 (ResNet50, T_o 600 s, m_max 3008) the plan is feasible and no dearer than naive."""
    result = dnnprov.solve(resnet50, "heuristic")
    assert result.status is Status.FEASIBLE
    plan = result.plan
    ev = ServerlessModel(resnet50).evaluate(plan.functions, plan.memory_mb, plan.ps)
    assert ev.feasible and ev.time_s <= 600.0
    assert_allclose(result.cost, float(ev.cost), rtol=1e-12)
    _, naive_cost = naive_largest_memory(resnet50)
    assert result.cost <= naive_cost
    assert plan.memory_mb >= 2432 and plan.memory_mb % 64 == 0


def plain_serverless_bounds(problem, m, s):
    """Eqs. (14)-(15) from the spec, for one memory size and PS count."""
    w, p = problem.workload, problem.platform
    rate = w.rate_alpha * m + w.rate_beta
    bw_s3 = min(w.storage_alpha * m + w.storage_beta, p.storage_bandwidth_mb_s)
    bw = p.function_bandwidth_mb_s
    work = w.samples * w.epochs
    lam = bw * (rate * w.dataset_mb + work * bw_s3)
    kappa = problem.time_s * rate * bw_s3 * bw
    mu = 2 * w.model_mb * work * bw_s3 * rate
    n_upper = math.floor(s * p.ps_bandwidth_mb_s / p.function_bandwidth_mb_s)
    n_lower = math.ceil(lam / kappa + mu / (w.local_batch * kappa))
    if w.local_batch * n_lower > w.max_global_batch:
        if w.max_global_batch * kappa <= mu:
            return None
        n_lower = max(
            w.max_global_batch // w.local_batch, math.ceil(w.max_global_batch * lam / (w.max_global_batch * kappa - mu))
        )
    return n_lower, n_upper


@pytest.mark.parametrize("seed", range(20))
def test_serverless_lower_bound_cuts_no_feasible_plan(make_random_serverless, seed):
    """No n below eq. (15)'s n_lower meets T_o (with full bandwidth), so the sweep loses nothing."""
    rng = np.random.default_rng(500 + seed)
    problem = make_random_serverless(rng)
    model = ServerlessModel(problem)
    for s in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
        for m in problem.memory_grid():
            if w_rate(problem, m) <= 0:
                assert heuristics.serverless_bounds(problem, m, s) is None
                continue
            bounds = heuristics.serverless_bounds(problem, m, s)
            assert bounds == plain_serverless_bounds(problem, m, s)
            n_stop = problem.platform.concurrency_limit if bounds is None else min(bounds[0] - 1, bounds[1])
            n = np.arange(1, n_stop + 1)
            if n.size:
                train, _, _, _ = model.training_time(n, np.full(n.size, m), np.full(n.size, s))
                assert np.all(train > problem.time_s * (1 - 1e-12)), (m, s)


def w_rate(problem, m):
    """The training rate of eq. (6) at ``m`` MB."""
    return problem.workload.rate_alpha * m + problem.workload.rate_beta


def plain_lambda_dnn(problem):
    """λDNN Algorithm 1 as plain loops: per memory size the first feasible n is recorded."""
    model = ServerlessModel(problem)
    best, best_cost = None, math.inf
    low, high = problem.function_range()
    for s in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
        for m in problem.memory_grid():
            if w_rate(problem, m) <= 0:
                continue
            bounds = plain_serverless_bounds(problem, m, s)
            if bounds is None:
                continue
            for n in range(max(bounds[0], low, 1), min(bounds[1], high) + 1):
                ev = model.evaluate(n, m, s)
                if ev.feasible:
                    if ev.cost < best_cost:
                        best, best_cost = (n, m, s), float(ev.cost)
                    break
    return best, best_cost


@pytest.mark.parametrize("seed", range(15))
def test_serverless_heuristic_matches_plain_algorithm1(make_random_serverless, seed):
    """On random problems serverless_heuristic finds what plain loops over Algorithm 1 find."""
    rng = np.random.default_rng(600 + seed)
    problem = make_random_serverless(rng)
    best, cost = plain_lambda_dnn(problem)
    result = dnnprov.solve(problem, "heuristic")
    if best is None:
        assert result.status is Status.UNKNOWN and result.plan is None
    else:
        plan = result.plan
        assert (plan.functions, plan.memory_mb, plan.ps) == best
        assert_allclose(result.cost, cost, rtol=1e-12)


def test_heuristic_results_claim_no_optimality(resnet110_paper, resnet50):
    """Heuristics report feasible (never optimal) and prove no bound."""
    for problem, method in [
        (resnet110_paper, "heuristic"),
        (resnet110_paper, "reference-heuristic"),
        (resnet50, "heuristic"),
    ]:
        result = dnnprov.solve(problem, method)
        assert result.status is Status.FEASIBLE, method
        assert result.bound is None and result.gap is None
        assert result.method == method


@pytest.mark.parametrize("wrap", [False, True])
def test_distinct_windows_are_the_first_occurrences(wrap):
    """distinct=True keeps each window that differs from its predecessor, in order."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        items = np.sort(rng.integers(0, 4, size=int(rng.integers(1, 15))))
        for size in range(1, len(items) + 1):
            every = heuristics.window_counts(items, 4, size, wrap=wrap)
            kept = heuristics.window_counts(items, 4, size, wrap=wrap, distinct=True)
            expected = [w for i, w in enumerate(every) if i == 0 or not np.array_equal(w, every[i - 1])]
            np.testing.assert_array_equal(kept, np.array(expected).reshape(-1, 4))
