"""The serverless performance and cost model (spec/serverless.md eqs. (1)-(10), timeouts)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import dnnprov
from dnnprov import ServerlessModel


def literal(problem: dnnprov.ServerlessProblem, n: int, m: int, s: int) -> dict:
    """Eqs. (1)-(10) and the timeout rule of section 5, transcribed for one plan."""
    w, p = problem.workload, problem.platform
    rate = w.rate_alpha * m + w.rate_beta  # (6)
    bw_ps = min(p.function_bandwidth_mb_s, s * p.ps_bandwidth_mb_s / n)  # (7)
    bw_s3 = min(w.storage_alpha * m + w.storage_beta, p.storage_bandwidth_mb_s)  # (8)
    b_l = w.local_batch if w.local_batch * n <= w.max_global_batch else w.max_global_batch / n  # (9)
    if rate <= 0 or bw_s3 <= 0:
        return {"time": math.inf, "feasible": False, "local_batch": b_l}
    k = w.samples * w.epochs / (b_l * n)  # (2)
    t_load = w.dataset_mb / (n * bw_s3)  # (3)
    t_comp = b_l / rate  # (4)
    t_comm = 2 * w.model_mb / bw_ps  # (5)
    train = t_load + k * (t_comp + t_comm)  # (1)
    usable = p.timeout_s - p.checkpoint_margin_s
    launches = max(math.ceil(train / usable), 1)
    time = train + (launches - 1) * p.checkpoint_overhead_s
    cost = (
        n * m / 1024 * time * p.price_per_gb_s + n * launches * p.price_per_request + s * p.ps_price_per_h * time / 3600
    )  # (10), real tariff
    low, high = problem.function_range()
    c = problem.constraints
    feasible = (
        m % p.memory_step_mb == 0
        and w.min_memory_mb <= m <= p.max_memory_mb
        and t_load + t_comp + t_comm <= usable
        and low <= n <= high
        and c.ps_count[0] <= s <= c.ps_count[1]
        and time <= problem.time_s
        and (c.budget_usd is None or cost <= c.budget_usd)
    )
    return {
        "time": time,
        "cost": cost,
        "train": train,
        "launches": launches,
        "iterations": k,
        "local_batch": b_l,
        "feasible": feasible,
    }


def test_model_matches_literal_transcription_resnet50(resnet50):
    """Over n = 1..20 and the whole memory grid the model equals the transcription of eqs. (1)-(10)."""
    model = ServerlessModel(resnet50)
    n, m = (a.ravel() for a in np.meshgrid(np.arange(1, 21), np.arange(2048, 3009, 64)))
    ev = model.evaluate(n, m, 1)
    for i in range(len(n)):
        ref = literal(resnet50, int(n[i]), int(m[i]), 1)
        assert_allclose(ev.time_s[i], ref["time"], rtol=1e-12)
        assert_allclose(ev.cost[i], ref["cost"], rtol=1e-12)
        assert_allclose(ev.local_batch[i], ref["local_batch"], rtol=1e-12)
        assert ev.launches[i] == ref["launches"]
        assert ev.feasible[i] == ref["feasible"], (n[i], m[i])
    assert ev.feasible.any() and not ev.feasible.all()


@pytest.mark.parametrize("seed", range(10))
def test_model_matches_literal_transcription_random(make_random_serverless, seed):
    """On random problems and plans (PS counts included) the model equals the transcription."""
    rng = np.random.default_rng(seed)
    problem = make_random_serverless(rng)
    model = ServerlessModel(problem)
    grid = problem.memory_grid()
    n = rng.integers(1, problem.platform.concurrency_limit + 3, size=80)
    m = rng.choice(grid + [grid[0] + 1, problem.platform.max_memory_mb + problem.platform.memory_step_mb], size=80)
    s = rng.integers(1, 5, size=80)
    ev = model.evaluate(n, m, s)
    for i in range(80):
        ref = literal(problem, int(n[i]), int(m[i]), int(s[i]))
        assert ev.feasible[i] == ref["feasible"], (n[i], m[i], s[i])
        if math.isfinite(ref["time"]):
            assert_allclose(ev.time_s[i], ref["time"], rtol=1e-12)
            assert_allclose(ev.cost[i], ref["cost"], rtol=1e-12)
        else:
            assert not np.isfinite(ev.time_s[i])


def test_local_batch_eq9(resnet50):
    """b_l = b_l^f = 128 while 128 n <= b_g^max = 1024, then b_g^max / n."""
    model = ServerlessModel(resnet50)
    n = np.array([1, 4, 8, 9, 16, 20])
    assert_allclose(model.local_batch(n), [128, 128, 128, 1024 / 9, 64, 51.2], rtol=1e-15)


def test_ps_bandwidth_eq7(resnet50):
    """Per-iteration time uses min(B_f^max, s B_p / n): 84 MB/s up to 14 functions per PS."""
    model = ServerlessModel(resnet50)
    n = np.array([14, 15, 20, 28, 29])
    for ps, bw in [(1, [84, 80, 60, 1200 / 28, 1200 / 29]), (2, [84, 84, 84, 84, 2400 / 29])]:
        _, _, _, per_iteration = model.training_time(n, np.full(5, 2560), np.full(5, ps))
        rate = 0.003 * 2560 + 11.3
        expected = model.local_batch(n) / rate + 2 * 98 / np.array(bw, dtype=float)
        assert_allclose(per_iteration, expected, rtol=1e-12)


def test_storage_bandwidth_saturates_eq8(make_resnet50):
    """B_f^s = min(alpha_2 m + beta_2, B_s): loading time stops falling at B_s = 115 MB/s."""
    problem = make_resnet50()
    fast = problem.replace(
        workload=dnnprov.ServerlessWorkload(**{**problem.workload.__dict__, "storage_alpha": 0.05, "storage_beta": 0.0})
    )
    model = ServerlessModel(fast)
    m = np.array([1600, 2432, 3008])  # 80, 121.6, 150.4 MB/s raw
    _, _, t_load, _ = model.training_time(np.full(3, 4), m, np.ones(3))
    assert_allclose(t_load, 148 / (4 * np.array([80.0, 115.0, 115.0])), rtol=1e-12)
    assert t_load[0] > t_load[1] == t_load[2]


def test_memory_time_constant_while_bandwidth_is_free(resnet50):
    """With b_l and B_f^p fixed (n <= 8), n * T is the same for every n (eqs. 1-5)."""
    model = ServerlessModel(resnet50)
    n = np.arange(1, 9)
    train, _, _, _ = model.training_time(n, np.full(8, 2560), np.ones(8))
    assert_allclose(n * train, np.full(8, n[0] * train[0]), rtol=1e-12)
    assert np.all(np.diff(train) < 0)


def test_more_memory_trains_faster(resnet50):
    """At fixed n, more memory (a faster rate, eq. 6) never increases the training time."""
    model = ServerlessModel(resnet50)
    grid = np.array(resnet50.memory_grid())
    ev = model.evaluate(np.full(len(grid), 8), grid, 1)
    assert np.all(np.diff(ev.time_s) < 0)


def test_cost_is_memory_time_when_only_memory_is_priced(make_resnet50):
    """With no request or PS price, C = m n p T, eq. (10), p per MB-second."""
    problem = make_resnet50()
    platform = dnnprov.ServerlessPlatform(price_per_request=0.0, ps_price_per_h=0.0)
    model = ServerlessModel(problem.replace(platform=platform))
    n, m = np.array([6, 8, 10]), np.array([2432, 2560, 3008])
    ev = model.evaluate(n, m, 1)
    assert_allclose(ev.cost, m * n * (0.0000166667 / 1024) * ev.time_s, rtol=1e-12)


def test_timeout_adds_checkpoint_restarts(make_resnet50):
    """Past the timeout the run is split into launches of timeout - margin seconds, each restart
    costing the checkpoint overhead and one request per function."""
    problem = make_resnet50(time_s=5000.0)
    model = ServerlessModel(problem)
    train, _, _, _ = model.training_time(np.array([2, 3]), np.array([2432, 2432]), np.ones(2))
    ev = model.evaluate(np.array([2, 3]), 2432, 1)
    launches = np.ceil(train / 870.0)
    assert_array_equal(ev.launches, launches)
    assert launches[0] >= 2
    assert_allclose(ev.time_s, train + (launches - 1) * 6.0, rtol=1e-12)
    memory = np.array([2, 3]) * 2432 / 1024 * ev.time_s * 0.0000166667
    ps = 0.096 * ev.time_s / 3600
    assert_allclose(ev.cost, memory + np.array([2, 3]) * launches * 2e-7 + ps, rtol=1e-12)


def test_feasibility_mask(resnet50):
    """Off-grid, too little or too much memory, too many functions, a wrong PS count, a missed
    deadline or a blown budget each make a plan infeasible."""
    model = ServerlessModel(resnet50)
    assert model.evaluate(8, 2560, 1).feasible
    for n, m, s in [(8, 2500, 1), (8, 2368, 1), (8, 3072, 1), (8, 2560, 2), (1001, 2560, 1), (2, 2560, 1)]:
        assert not model.evaluate(n, m, s).feasible, (n, m, s)
    cost = float(model.evaluate(8, 2560, 1).cost)
    capped = ServerlessModel(resnet50.replace(constraints=dnnprov.ServerlessConstraints(budget_usd=cost * 0.999)))
    assert not capped.evaluate(8, 2560, 1).feasible
    few = ServerlessModel(resnet50.replace(constraints=dnnprov.ServerlessConstraints(functions=(1, 7))))
    assert not few.evaluate(8, 2560, 1).feasible and few.evaluate(7, 2560, 1).feasible


def test_plan_must_fit_one_iteration_before_first_checkpoint(make_resnet50):
    """A plan whose loading plus one iteration exceeds timeout - margin cannot run."""
    problem = make_resnet50(time_s=1e6).replace(
        platform=dnnprov.ServerlessPlatform(timeout_s=40.0, checkpoint_margin_s=30.0)
    )
    ev = ServerlessModel(problem).evaluate(np.array([1, 8]), 2560, 1)
    assert not ev.feasible.any()
    assert np.isfinite(ev.time_s).all()


def test_vectorized_equals_one_by_one(make_random_serverless):
    """Evaluating arrays of plans gives what evaluating them one at a time gives."""
    for seed in range(5):
        rng = np.random.default_rng(50 + seed)
        problem = make_random_serverless(rng)
        model = ServerlessModel(problem)
        n = rng.integers(1, 30, size=40)
        m = rng.choice(problem.memory_grid(), size=40)
        s = rng.integers(1, 4, size=40)
        batch = model.evaluate(n, m, s)
        for i in range(40):
            one = model.evaluate(int(n[i]), int(m[i]), int(s[i]))
            for name in ("time_s", "cost", "iterations", "local_batch", "launches"):
                assert_allclose(getattr(batch, name)[i], getattr(one, name), rtol=1e-12, equal_nan=True, err_msg=name)
            assert batch.feasible[i] == one.feasible


def test_memory_grid(make_resnet50):
    """The grid runs from the first step multiple at or above m_min to m_max (eq. 12)."""
    grid = make_resnet50().memory_grid()
    assert grid[0] == 2432 and grid[-1] == 3008
    assert_array_equal(np.diff(grid), 64)
    odd = make_resnet50().replace(
        workload=dnnprov.ServerlessWorkload(**{**make_resnet50().workload.__dict__, "min_memory_mb": 2400})
    )
    assert odd.memory_grid()[0] == 2432


def test_memory_outside_the_domain_is_infeasible(make_resnet50):
    """A memory domain (with extrapolation) bounds the sizes every method may use."""
    import dataclasses

    problem = make_resnet50()
    domain = dnnprov.ServerlessDomain(memory_mb=(2432, 2816), extrapolation=1.0)
    limited = problem.replace(workload=dataclasses.replace(problem.workload, domain=domain))
    e = ServerlessModel(limited).evaluate(np.array([8, 8]), np.array([2816, 3008]))
    assert_array_equal(e.inside_domain, [True, False])
    assert not e.feasible[1] and ServerlessModel(problem).evaluate(np.array([8]), np.array([3008])).inside_domain[0]
    wider = dataclasses.replace(domain, extrapolation=1.1)
    assert ServerlessModel(
        limited.replace(workload=dataclasses.replace(problem.workload, domain=wider))
    ).domain_bounds()[0] == pytest.approx((2432 / 1.1, 2816 * 1.1))


def test_local_batch_override_changes_iterations(make_resnet50):
    """A given local batch replaces eq. (9): half the batch, twice the iterations."""
    model = ServerlessModel(make_resnet50())
    default = model.evaluate(np.array([8]), np.array([3008]))
    half = model.evaluate(np.array([8]), np.array([3008]), local_batch=64)
    assert half.local_batch[0] == 64 and default.local_batch[0] == 128
    assert half.iterations[0] == pytest.approx(2 * default.iterations[0])


def test_serverless_domain_note_wording(make_resnet50):
    """Edge, extrapolated and outside memory sizes are named; inside plans get no note."""
    import dataclasses

    problem = make_resnet50()
    domain = dnnprov.ServerlessDomain(memory_mb=(2432, 2816), extrapolation=1.1)
    model = ServerlessModel(problem.replace(workload=dataclasses.replace(problem.workload, domain=domain)))
    assert model.domain_note(8, 2560) is None
    assert model.domain_note(8, 3008).startswith("extrapolated beyond the fitted ranges")
    assert "at the validity domain's edge" in model.domain_note(8, 3072)
    assert model.domain_note(8, 3200).startswith("outside the validity domain")


@pytest.mark.parametrize("seed", range(4))
def test_every_method_keeps_memory_inside_the_domain(make_random_serverless, seed):
    """enumerate, milp and the heuristic respect a random memory domain; milp equals enumerate."""
    import dataclasses

    rng = np.random.default_rng(200 + seed)
    problem = make_random_serverless(rng)
    grid = problem.memory_grid()
    low = float(rng.choice(grid))
    domain = dnnprov.ServerlessDomain(memory_mb=(low, float(rng.uniform(low, grid[-1]))))
    problem = problem.replace(workload=dataclasses.replace(problem.workload, domain=domain))
    results = {m: dnnprov.solve(problem, m) for m in ("enumerate", "milp", "heuristic")}
    for method, result in results.items():
        if result.plan is not None:
            assert domain.memory_mb[0] <= result.plan.memory_mb <= domain.memory_mb[1], method
    assert results["milp"].status == results["enumerate"].status
    if results["enumerate"].cost is not None:
        assert results["milp"].cost == pytest.approx(results["enumerate"].cost, rel=1e-6)
