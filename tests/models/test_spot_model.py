"""The spot performance and cost model (spec/spot.md eqs. (1)-(11) and section 6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import resnet110_problem
from numpy.testing import assert_allclose, assert_array_equal

import dnnprov
from dnnprov import SpotModel

TYPE_NAMES = ("p3.2xlarge", "g4dn.4xlarge", "g3.8xlarge", "g3.16xlarge", "p2.8xlarge")


def small_problem(
    *, b_req=100.0, b_ps=1200.0, alpha_1=0.1, beta_1=0.2, model="paper", gpus=1, quota=40, **type_fields
) -> dnnprov.SpotProblem:
    """One instance type and a workload with chosen bandwidth and contention coefficients."""
    fields = {"batch_per_gpu": 128, "speed_samples_per_s": 200.0, **type_fields}
    t = dnnprov.InstanceType(name="x1.large", gpus=gpus, spot_price_per_h=1.0, quota=quota, **fields)
    w = dnnprov.SpotWorkload(
        name="w",
        param_size_mb=10.0,
        bandwidth_req_mb_s=b_req,
        alpha_1=alpha_1,
        beta_1=beta_1,
        gamma_1=100.0,
        gamma_2=-0.1,
        gamma_3=2000.0,
        gamma_4=0.5,
        gamma_5=0.5,
        loss_variant="cc" if model == "paper" else "no-cc",
        alpha_2=type_fields.get("_a2"),
        beta_2=None,
    )
    return dnnprov.SpotProblem(
        instance_types=(t,),
        workload=w,
        slo=dnnprov.SpotSLO(loss=0.8, time_s=1e6),
        platform=dnnprov.SpotPlatform(ps_bandwidth_mb_s=b_ps),
        model=model,
    )


def plan_of(type_index: int, n: int, n_types: int = 5) -> np.ndarray:
    """A count vector with ``n`` workers of one type."""
    counts = np.zeros(n_types, dtype=np.int64)
    counts[type_index] = n
    return counts


# ---------------------------------------------------------------- eq. (5): the CC
@pytest.mark.parametrize("type_index", range(5))
def test_cc_of_identical_workers_matches_paper(make_resnet110, type_index):
    """R is 0 / 0.71 / 0.82 / 0.87 for 1 / 2 / 3 / 4 identical workers, as the paper checks."""
    model = SpotModel(make_resnet110([6] * 5, model="paper", gamma_4=1.0, time_s=1e6))
    ev = model.evaluate(np.stack([plan_of(type_index, n) for n in (1, 2, 3, 4)]))
    assert_allclose(ev.cc, [0.0, 0.71, 0.82, 0.87], atol=0.005)
    assert ev.cc[0] == 0.0


def test_cc_of_mixed_cluster_follows_eq5(make_resnet110):
    """For mixed clusters R is the distance of the update shares from [1, 0, ..., 0]."""
    problem = make_resnet110([3] * 5, model="paper", gamma_4=1.0, time_s=1e6)
    model = SpotModel(problem)
    rng = np.random.default_rng(5)
    plans = rng.integers(0, 4, size=(40, 5))
    plans = plans[plans.sum(axis=1) > 0]
    ev = model.evaluate(plans)
    for plan, cc in zip(plans, ev.cc):
        times = model.iteration_times(np.array([plan.sum()]), np.array([1]))[0]
        speeds = np.repeat(model.columns.batch / times, plan)  # v^i, one per worker
        shares = np.sort(speeds / speeds.sum())[::-1]
        expected = math.sqrt((shares[0] - 1) ** 2 + float(np.sum(shares[1:] ** 2)))
        assert_allclose(cc, expected, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- eq. (4): WA batch
@pytest.mark.parametrize("model_name", ["paper", "reference"])
def test_homogeneous_wa_batch_is_the_worker_batch(make_resnet110, model_name):
    """b_w of a cluster of one type equals that type's worker batch g * b_k."""
    model = SpotModel(make_resnet110([6] * 5, model=model_name, time_s=1e6))
    gpus = np.array([1, 1, 2, 4, 8])
    per_gpu = np.array([1024, 1024, 512, 512, 1024])
    for k in range(5):
        ev = model.evaluate(np.stack([plan_of(k, n) for n in range(1, 7)]))
        assert_allclose(ev.batch_wa, gpus[k] * per_gpu[k], rtol=1e-12)


def test_mixed_wa_batch_lies_between_worker_batches(make_resnet110):
    """b_w of a mixed cluster is a weighted average: strictly between the extreme batches."""
    model = SpotModel(make_resnet110(model="paper", time_s=1e6))
    ev = model.evaluate(np.array([[1, 0, 0, 0, 1], [0, 0, 1, 2, 0], [0, 2, 3, 0, 0]]))
    assert 1024 < ev.batch_wa[0] < 8192  # p3.2xl (1024) with p2.8xl (8192)
    assert 1024 < ev.batch_wa[1] < 2048  # g3.8xl (1024) with g3.16xl (2048)
    assert_allclose(ev.batch_wa[2], 1024, rtol=1e-12)  # g4dn (1024) with g3.8xl (2 x 512)


# ---------------------------------------------------------------- eqs. (8)-(9): contention
@pytest.mark.parametrize("ps", [1, 2])
def test_contention_engages_exactly_above_threshold(ps):
    """B_wk = B_req while K * B_req <= s * B_ps, and eq. (8) once K * B_req > s * B_ps."""
    problem = small_problem(b_req=100.0, b_ps=1200.0, alpha_1=0.1, beta_1=0.2)
    model = SpotModel(problem)
    threshold = 12 * ps  # K * 100 == ps * 1200
    k = np.array([threshold - 1, threshold, threshold + 1, threshold + 5])
    bw = model.worker_bandwidth(k, np.full(4, ps))
    assert_array_equal(bw[:2], [100.0, 100.0])  # at equality: "<=" case
    p = 0.1 * np.sqrt(k[2:]) + 0.2
    expected = p * ps * 1200.0 / k[2:] + (1 - p) * 100.0
    assert_allclose(bw[2:], expected, rtol=1e-12)
    assert np.all(bw[2:] < 100.0)


def test_two_ps_double_the_contention_threshold(make_resnet110):
    """With B_req = 142 and B_ps = 1200 contention starts at K = 9 with 1 PS and K = 17 with 2."""
    model = SpotModel(make_resnet110(model="paper", time_s=1e6))
    k = np.array([8, 9, 16, 17])
    one = model.worker_bandwidth(k, np.ones(4, dtype=int))
    two = model.worker_bandwidth(k, np.full(4, 2))
    assert one[0] == 142.0 and one[1] < 142.0
    assert two[0] == two[1] == two[2] == 142.0 and two[3] < 142.0
    assert one[2] < 142.0  # 16 workers contend on one PS


@pytest.mark.parametrize("model_name", ["paper", "reference"])
def test_contention_probability_capped_at_one(model_name):
    """P = min(alpha_1 sqrt(K) + beta_1, 1): at P = 1 every worker gets B_ps / K."""
    model = SpotModel(small_problem(b_req=500.0, alpha_1=0.8, beta_1=-1.92, model=model_name))
    k = np.array([16, 25, 36])  # P = 1.28, 2.08, 2.88 before the cap
    assert_allclose(model.worker_bandwidth(k, np.ones(3)), 1200.0 / k, rtol=1e-12)


def test_paper_clamps_negative_contention_probability():
    """The paper model clamps P below at 0 (B_wk = B_req); the reference code does not."""
    kwargs = dict(b_req=500.0, alpha_1=0.8, beta_1=-1.92)
    k, ps = np.array([3]), np.array([1])  # 3 * 500 > 1200, P = -0.534
    paper = SpotModel(small_problem(model="paper", **kwargs)).worker_bandwidth(k, ps)
    reference = SpotModel(small_problem(model="reference", **kwargs)).worker_bandwidth(k, ps)
    p = 0.8 * math.sqrt(3) - 1.92
    assert p < 0
    assert_allclose(paper, [500.0])
    assert_allclose(reference, [p * 400.0 + (1 - p) * 500.0], rtol=1e-12)
    assert reference[0] > 500.0


# ---------------------------------------------------------------- eqs. (6)-(7): T_comm
def test_paper_comm_time_includes_pcie_term(make_resnet110):
    """Paper model: T^i - T_comp^i = 2 S / B_wk + 2 g_i S / B_pcie, eq. (7)."""
    model = SpotModel(make_resnet110(model="paper", time_s=1e6))
    k = np.array([1, 9, 13])
    bw = model.worker_bandwidth(k, np.ones(3))
    comm = model.iteration_times(k, np.ones(3)) - model.columns.compute_time
    gpus = np.array([1, 1, 2, 4, 8])
    expected = 2 * 11.5 / bw[:, None] + 2 * gpus * 11.5 / 10000.0
    assert_allclose(comm, expected, rtol=1e-12)


def test_reference_comm_time_has_no_pcie_term(make_resnet110):
    """Reference model: T^i - T_comp^i = 2 S / B_wk only (spec section 6)."""
    model = SpotModel(make_resnet110(model="reference", time_s=1e6))
    k = np.array([1, 9, 13])
    bw = model.worker_bandwidth(k, np.ones(3))
    comm = model.iteration_times(k, np.ones(3)) - model.columns.compute_time
    assert_allclose(comm, np.broadcast_to(2 * 11.5 / bw[:, None], comm.shape), rtol=1e-12)


def test_lone_worker_time_recovers_profile(make_resnet110):
    """A lone worker's T^i is the profiled T0 = g b_k / speed (paper, eq. 6); the reference
    code's sign slip makes it T0 + 2 g S / B_pcie."""
    t0 = np.array([1024 / 1885, 1024 / 750, 1024 / 1018, 2048 / 1995, 8192 / 2115])
    gpus = np.array([1, 1, 2, 4, 8])
    one = (np.array([1]), np.array([1]))
    paper = SpotModel(make_resnet110(model="paper", time_s=1e6)).iteration_times(*one)[0]
    reference = SpotModel(make_resnet110(model="reference", time_s=1e6)).iteration_times(*one)[0]
    assert_allclose(paper, t0, rtol=1e-12)
    assert_allclose(reference, t0 + 2 * gpus * 11.5 / 10000.0, rtol=1e-12)


# ---------------------------------------------------------------- eq. (10): batch from memory
@pytest.mark.parametrize(("memory_gb", "per_gpu"), [(16.0, 1024), (15.9, 512), (8.0, 512), (7.99, 256), (0.5, 32)])
def test_batch_from_gpu_memory_eq10(memory_gb, per_gpu):
    """b_k = 2 ** floor(log2(alpha_2 * mem + beta_2)) and the worker batch is g * b_k."""
    t = dnnprov.InstanceType(
        name="x4.large",
        gpus=4,
        spot_price_per_h=1.0,
        quota=3,
        gpu_memory_gb=memory_gb,
        speed_samples_per_s=4 * per_gpu / 2.0,
    )
    w = dnnprov.SpotWorkload(
        name="w",
        param_size_mb=10.0,
        bandwidth_req_mb_s=100.0,
        alpha_1=0.5,
        beta_1=-1.0,
        gamma_1=10.0,
        gamma_2=-0.01,
        gamma_3=500.0,
        gamma_4=0.5,
        gamma_5=0.5,
        alpha_2=64.0,
        beta_2=0.0,
    )
    problem = dnnprov.SpotProblem(instance_types=(t,), workload=w, slo=dnnprov.SpotSLO(0.8, 1e6))
    assert problem.batch_per_gpu(t) == per_gpu
    assert problem.columns().batch[0] == 4 * per_gpu
    ev = SpotModel(problem).evaluate(np.array([[2]]))
    assert_allclose(ev.batch_wa, [4 * per_gpu])


def test_eq10_batch_below_one_is_refused():
    """A memory so small that eq. (10) gives a batch below 1 is invalid input."""
    t = dnnprov.InstanceType(
        name="x1.large", gpus=1, spot_price_per_h=1.0, quota=1, gpu_memory_gb=0.01, compute_time_s=0.5
    )
    w = dnnprov.SpotWorkload(
        name="w",
        param_size_mb=10.0,
        bandwidth_req_mb_s=100.0,
        alpha_1=0.5,
        beta_1=-1.0,
        gamma_1=10.0,
        gamma_2=-0.01,
        gamma_3=500.0,
        gamma_4=0.5,
        gamma_5=0.5,
        alpha_2=64.0,
        beta_2=0.0,
    )
    with pytest.raises(dnnprov.InvalidInputError) as excinfo:
        dnnprov.SpotProblem(instance_types=(t,), workload=w, slo=dnnprov.SpotSLO(0.8, 1e6))
    assert excinfo.value.field == "instance_types.x1.large.gpu_memory_gb"
    assert "below 1" in str(excinfo.value)


# ---------------------------------------------------------------- spec section 6 reproduction
@pytest.mark.parametrize(
    ("plan", "time_s", "cost"),
    [
        ([0, 0, 5, 3, 0], 2565.13, 5.787788),  # the reference heuristic's Table I plan
        ([0, 3, 5, 2, 0], 2567.70, 5.448374),  # the exhaustive optimum of Table I
    ],
)
def test_reference_model_reproduces_table1(resnet110_table1, plan, time_s, cost):
    """The reference model gives the published time and cost of the Table I plans."""
    ev = SpotModel(resnet110_table1).evaluate(np.array([plan]))
    assert_allclose(ev.time_s, [time_s], rtol=0, atol=1e-9)
    assert_allclose(ev.cost, [cost], rtol=0, atol=1e-12)
    assert ev.feasible[0]


def reference_code(problem: dnnprov.SpotProblem, counts) -> tuple[float, float]:
    """Spec section 6 transcribed literally, one worker at a time: (T, cost)."""
    w, pf = problem.workload, problem.platform
    workers = []
    for t, n in zip(problem.instance_types, counts):
        batch = t.gpus * t.batch_per_gpu
        t0 = batch / t.speed_samples_per_s
        tcomp = t0 - (
            2 * w.param_size_mb / w.bandwidth_req_mb_s - 2 * t.gpus * w.param_size_mb / pf.pcie_bandwidth_mb_s
        )
        workers += [(batch, tcomp, t.spot_price_per_h)] * int(n)
    n = len(workers)
    if n * w.bandwidth_req_mb_s > pf.ps_bandwidth_mb_s:
        p = min(w.alpha_1 * math.sqrt(n) + w.beta_1, 1)
        bw = p * pf.ps_bandwidth_mb_s / n + (1 - p) * w.bandwidth_req_mb_s
    else:
        bw = w.bandwidth_req_mb_s
    times = [tcomp + 2 * w.param_size_mb / bw for _, tcomp, _ in workers]
    v = sum(b / t for (b, _, _), t in zip(workers, times))
    b_w = np.around(v / sum(1 / t for t in times), 1)
    j = np.around((w.gamma_2 * b_w + w.gamma_3) * math.sqrt(n) / (problem.slo.loss - w.gamma_5) - w.gamma_1)
    time = np.around(b_w * j / v, 2)
    cost = np.around(sum(p for _, _, p in workers) * time / 3600, 6)
    return float(time), float(cost)


def test_reference_model_matches_literal_transcription(make_resnet110):
    """On 300 random plans the reference model equals a literal scalar transcription of section 6."""
    rng = np.random.default_rng(11)
    problem = make_resnet110([4, 6, 6, 8, 5], loss=0.75, time_s=3000.0)
    model = SpotModel(problem)
    plans = rng.integers(0, [5, 7, 7, 9, 6], size=(300, 5))
    plans = plans[plans.sum(axis=1) > 0]
    ev = model.evaluate(plans)
    expected = np.array([reference_code(problem, p) for p in plans])
    assert_allclose(ev.time_s, expected[:, 0], rtol=0, atol=1e-9)
    assert_allclose(ev.cost, expected[:, 1], rtol=0, atol=1e-12)
    assert_array_equal(ev.feasible, (expected[:, 0] > 0) & (expected[:, 0] <= 3000.0))


# ---------------------------------------------------------------- the paper model, eqs. (1)-(11)
def paper_model(problem: dnnprov.SpotProblem, counts, ps: int) -> dict:
    """Eqs. (1)-(11) transcribed worker by worker from spec/spot.md, plus every side constraint."""
    w, pf, c = problem.workload, problem.platform, problem.constraints
    by_name = {t.name: t for t in problem.instance_types}
    cols = problem.columns()
    workers = []
    for label, n in zip(cols.labels, counts):
        name, _, market = label.partition(":")
        t = by_name[name]
        per_gpu = t.batch_per_gpu or 2 ** math.floor(math.log2(w.alpha_2 * t.gpu_memory_gb + w.beta_2))
        batch = t.gpus * per_gpu
        pcie = 2 * t.gpus * w.param_size_mb / pf.pcie_bandwidth_mb_s
        if t.compute_time_s is not None:
            tcomp = t.compute_time_s
        else:
            tcomp = batch / t.speed_samples_per_s - 2 * w.param_size_mb / w.bandwidth_req_mb_s - pcie
        price = t.spot_price_per_h if market == "" else t.on_demand_price_per_h
        workers += [(batch, tcomp, pcie, price)] * int(n)
    k = len(workers)
    total_ps = ps * pf.ps_bandwidth_mb_s
    if w.bandwidth_req_mb_s > total_ps / k:  # eq. (8)
        p = min(max(w.alpha_1 * math.sqrt(k) + w.beta_1, 0.0), 1.0)  # eq. (9)
        bw = p * total_ps / k + (1 - p) * w.bandwidth_req_mb_s
    else:
        bw = w.bandwidth_req_mb_s
    times = [tcomp + 2 * w.param_size_mb / bw + pcie for _, tcomp, pcie, _ in workers]  # (6)-(7)
    t_exp = 1 / sum(1 / t for t in times)  # eq. (2)
    speeds = [b / t for (b, *_), t in zip(workers, times)]
    v = sum(speeds)
    b_w = v * t_exp  # eq. (4)
    shares = sorted((s / v for s in speeds), reverse=True)
    r = math.sqrt((shares[0] - 1) ** 2 + sum(s * s for s in shares[1:]))  # eq. (5)
    numerator = w.gamma_2 * b_w + w.gamma_3
    spread = k if w.loss_variant == "no-cc" else (r + w.gamma_4) * k
    j = numerator * math.sqrt(spread) / (problem.slo.loss - w.gamma_5) - w.gamma_1  # eq. (3)
    time = j * t_exp + problem.slo.takeover_overhead_s  # eq. (1)
    cost = (sum(x[3] for x in workers) + ps * pf.ps_price_per_h) * time / 3600  # eq. (11)
    ok = numerator > 0 and j > 0 and time <= problem.slo.time_s
    ok &= all(lo <= n <= up for lo, n, up in zip(cols.lower, counts, cols.upper))
    lo, hi = c.workers
    ok &= k >= lo and (hi is None or k <= hi) and c.ps_count[0] <= ps <= c.ps_count[1]
    for q in c.vcpu_quotas:
        used = sum(
            by_name[lbl.partition(":")[0]].vcpus * n
            for lbl, n in zip(cols.labels, counts)
            if by_name[lbl.partition(":")[0]].quota_family == q.family
            and (":on-demand" in lbl) == (q.market == "on-demand")
        )
        ok &= used <= q.vcpus
    if c.budget_usd is not None:
        ok &= cost <= c.budget_usd
    return {"time": time, "cost": cost, "cc": r, "batch_wa": b_w, "feasible": bool(ok)}


@pytest.mark.parametrize("seed", range(12))
def test_paper_model_matches_literal_transcription(make_random_spot, seed):
    """On random paper-model problems every output equals a scalar transcription of eqs. (1)-(11)."""
    rng = np.random.default_rng(seed)
    problem = make_random_spot(rng, model="paper", loss_variant=("cc", "no-cc")[seed % 2])
    problem = problem.replace(
        slo=dnnprov.SpotSLO(problem.slo.loss, problem.slo.time_s, takeover_overhead_s=float(seed % 3) * 10.0)
    )
    model = SpotModel(problem)
    cols = model.columns
    plans = rng.integers(cols.lower, cols.upper + 1, size=(60, len(cols)))
    plans = plans[plans.sum(axis=1) > 0]
    ps_low, ps_high = problem.constraints.ps_count
    ps = rng.integers(max(ps_low - 1, 1), ps_high + 2, size=len(plans))
    ev = model.evaluate(plans, ps)
    checked = 0
    for i, (plan, s) in enumerate(zip(plans, ps)):
        ref = paper_model(problem, plan, int(s))
        if not np.isfinite(ref["time"]) or ref["batch_wa"] * problem.workload.gamma_2 + problem.workload.gamma_3 <= 0:
            assert not ev.feasible[i]
            continue
        assert_allclose(ev.time_s[i], ref["time"], rtol=1e-9)
        assert_allclose(ev.cost[i], ref["cost"], rtol=1e-9)
        assert_allclose(ev.cc[i], ref["cc"], rtol=1e-9, atol=1e-12)
        assert_allclose(ev.batch_wa[i], ref["batch_wa"], rtol=1e-12)
        assert ev.feasible[i] == ref["feasible"], (plan.tolist(), int(s))
        checked += 1
    assert checked > 0


# ---------------------------------------------------------------- vectorization and feasibility
@pytest.mark.parametrize("model_name", ["paper", "reference"])
def test_vectorized_equals_one_by_one(make_random_spot, model_name):
    """Evaluating many plans at once gives, to the last bit, what evaluating them one at a time
    gives: a cost on a budget's edge must not be feasible in one call and not in another."""
    for seed in range(12):
        rng = np.random.default_rng(100 + seed)
        model = SpotModel(make_random_spot(rng, model=model_name))
        cols = model.columns
        plans = rng.integers(cols.lower, cols.upper + 1, size=(50, len(cols)))
        ps = rng.integers(1, 4, size=50)
        batch = model.evaluate(plans, ps)
        for i in range(len(plans)):
            single = model.evaluate(plans[i], int(ps[i]))
            for name in ("time_s", "cost", "cc", "batch_wa", "iterations", "speed", "iteration_rate"):
                np.testing.assert_equal(getattr(batch, name)[i], getattr(single, name)[0], err_msg=name)
            assert batch.feasible[i] == single.feasible[0]
            assert batch.workers[i] == single.workers[0]


def test_empty_plan_is_infeasible(make_resnet110):
    """A plan without workers is never feasible and has no cost."""
    ev = SpotModel(make_resnet110(time_s=1e6)).evaluate(np.zeros((1, 5), dtype=int))
    assert not ev.feasible[0]
    assert np.isnan(ev.cost[0])


def test_side_constraints_make_plans_infeasible(make_resnet110):
    """Quotas, kept instances, worker range, PS range, vCPU quota and budget each cut plans."""
    base = make_resnet110(model="paper", time_s=1e6)
    plan = np.array([[1, 0, 2, 0, 0]])
    assert SpotModel(base).evaluate(plan).feasible[0]
    assert not SpotModel(base).evaluate(np.array([[3, 0, 2, 0, 0]])).feasible[0]  # quota 2
    assert not SpotModel(base).evaluate(plan, 2).feasible[0]  # ps_count (1, 1)
    cost = float(SpotModel(base).evaluate(plan).cost[0])
    types = tuple(dnnprov.InstanceType(**{**t.__dict__, "vcpus": 8 * t.gpus}) for t in base.instance_types)
    cases = [
        dnnprov.SpotConstraints(existing={"p2.8xlarge": 1}),
        dnnprov.SpotConstraints(workers=(4, None)),
        dnnprov.SpotConstraints(workers=(1, 2)),
        dnnprov.SpotConstraints(budget_usd=cost * 0.999),
    ]
    for cons in cases:
        assert not SpotModel(base.replace(constraints=cons)).evaluate(plan).feasible[0], cons
    loose = base.replace(constraints=dnnprov.SpotConstraints(budget_usd=cost * 1.001, ps_count=(1, 2)))
    assert SpotModel(loose).evaluate(plan, 2).feasible[0]
    quota = dnnprov.VcpuQuota(family="G", market="spot", vcpus=31)  # 2 x g3.8xl = 32
    tight = base.replace(instance_types=types, constraints=dnnprov.SpotConstraints(vcpu_quotas=(quota,)))
    assert not SpotModel(tight).evaluate(plan).feasible[0]
    assert SpotModel(tight).evaluate(np.array([[1, 0, 1, 0, 0]])).feasible[0]


def test_time_slo_boundary(make_resnet110):
    """A plan is feasible exactly when its predicted time is within T_obj."""
    probe = SpotModel(make_resnet110(model="paper", time_s=1e6))
    plan = np.array([[1, 1, 1, 0, 0]])
    t = float(probe.evaluate(plan).time_s[0])
    assert SpotModel(make_resnet110(model="paper", time_s=t * 1.000001)).evaluate(plan).feasible[0]
    assert not SpotModel(make_resnet110(model="paper", time_s=t * 0.999999)).evaluate(plan).feasible[0]


def test_unreachable_loss_makes_plan_infeasible(make_resnet110):
    """When gamma_2 * b_w + gamma_3 <= 0, eq. (3) has no root and the plan is infeasible."""
    problem = make_resnet110(model="paper", time_s=1e9, gamma_4=1.0)
    w = problem.workload
    steep = dnnprov.SpotWorkload(**{**w.__dict__, "gamma_2": -0.5})  # 8192 * -0.5 + 2507.6 < 0
    model = SpotModel(problem.replace(workload=steep))
    ev = model.evaluate(np.array([[0, 0, 0, 0, 1], [1, 0, 0, 0, 0]]))
    assert np.isnan(ev.iterations[0]) and not ev.feasible[0]
    assert ev.feasible[1]


def test_more_ps_cost_more_and_relieve_contention(make_resnet110):
    """A second PS adds its price to the cost and raises B_wk once the cluster contends."""
    problem = make_resnet110(
        [6] * 5, model="paper", time_s=1e6, ps_price_per_h=0.5, constraints=dnnprov.SpotConstraints(ps_count=(1, 2))
    )
    model = SpotModel(problem)
    plan = np.array([[0, 6, 6, 0, 0]])  # 12 workers: contended
    one, two = model.evaluate(plan, 1), model.evaluate(plan, 2)
    assert two.time_s[0] < one.time_s[0]
    assert_allclose(two.cost[0], (6 * 0.3612 + 6 * 0.684 + 2 * 0.5) * two.time_s[0] / 3600, rtol=1e-12)


# ---------------------------------------------------------------- validity domain
def with_domain(problem: dnnprov.SpotProblem, **domain) -> dnnprov.SpotProblem:
    """``problem`` whose workload carries the validity domain ``domain``."""
    import dataclasses

    return problem.replace(workload=dataclasses.replace(problem.workload, domain=dnnprov.SpotDomain(**domain)))


def test_plans_outside_the_domain_are_infeasible():
    """b_w or |N| outside the domain makes a plan infeasible; inside it stays feasible."""
    problem = with_domain(small_problem(), batch_wa=(100.0, 200.0), workers=(2, 4))
    e = SpotModel(problem).evaluate(np.array([[1], [2], [4], [5]]))
    assert_array_equal(e.inside_domain, [False, True, True, False])
    assert_array_equal(e.feasible, [False, True, True, False])
    outside_b = with_domain(small_problem(), batch_wa=(200.0, 400.0), workers=(1, 40))
    assert not SpotModel(outside_b).evaluate(np.array([[3]])).feasible[0]  # b_w 128 < 200


def test_extrapolation_widens_both_ranges():
    """Factor f turns [low, high] into [low / f, high * f] for b_w and |N|."""
    model = SpotModel(with_domain(small_problem(), batch_wa=(200.0, 400.0), workers=(2, 7), extrapolation=1.6))
    (b_low, b_high), (k_low, k_high) = model.domain_bounds()
    assert (b_low, b_high) == pytest.approx((125.0, 640.0))
    assert (k_low, k_high) == (2, 11)
    assert_array_equal(model.evaluate(np.array([[1], [3], [11], [12]])).feasible, [False, True, True, False])


def test_no_domain_means_no_limit():
    """Without a domain the bounds are open and every plan is inside."""
    model = SpotModel(small_problem())
    assert model.domain_bounds() == ((0.0, math.inf), (1, None))
    assert model.evaluate(np.array([[40]])).inside_domain[0]
    assert model.domain_note(128.0, 40) is None


def test_domain_note_wording():
    """Edge, extrapolated and outside plans are named; a plan well inside gets no note."""
    model = SpotModel(with_domain(small_problem(), batch_wa=(100.0, 200.0), workers=(2, 6), extrapolation=1.5))
    assert model.domain_note(150.0, 4) is None
    assert "at the validity domain's edge" in model.domain_note(150.0, 9)
    assert "extrapolated beyond the fitted ranges" in model.domain_note(150.0, 8)
    assert model.domain_note(150.0, 10).startswith("outside the validity domain")


@pytest.mark.parametrize(
    "field, value",
    [("batch_wa", (5.0, 1.0)), ("workers", (0, 3)), ("workers", (2, None)), ("extrapolation", 0.5), ("cc", (0.2, 1.5))],
)
def test_bad_domain_names_the_field(field, value):
    """Invalid domains are refused with the field named."""
    domain = {"batch_wa": (1.0, 5.0), "workers": (1, 3), field: value}
    with pytest.raises(dnnprov.InvalidInputError) as info:
        dnnprov.SpotDomain(**domain)
    assert info.value.field.startswith(f"workload.domain.{field}")


def test_domain_round_trips_through_the_instance_file(tmp_path):
    """A problem with a domain writes and reads back equal, and the schema accepts it."""
    problem = with_domain(
        small_problem(), batch_wa=(100.0, 200.0), workers=(2, 4), cc=(0.5, 0.8), extrapolation=1.2, source="test"
    )
    path = dnnprov.write_instance(problem, tmp_path / "p.json")
    assert dnnprov.read_instance(path) == problem


@pytest.mark.parametrize("seed", range(6))
def test_every_method_keeps_plans_inside_the_domain(make_random_spot, seed):
    """enumerate, milp and the heuristic respect a random domain; milp equals enumerate."""
    import dataclasses

    rng = np.random.default_rng(100 + seed)
    problem = make_random_spot(rng)
    batch = problem.columns().batch
    low = float(rng.uniform(batch.min(), batch.max()))
    domain = dnnprov.SpotDomain(batch_wa=(low, float(rng.uniform(low, batch.max() * 1.2))), workers=(2, 5))
    problem = problem.replace(workload=dataclasses.replace(problem.workload, domain=domain))
    model = SpotModel(problem)
    results = {m: dnnprov.solve(problem, m) for m in ("enumerate", "milp", "heuristic")}
    for method, result in results.items():
        if result.plan is not None:
            counts = np.array([[result.plan.counts.get(c, 0) for c in model.columns.labels]])
            assert model.evaluate(counts, result.plan.ps).inside_domain[0], method
    assert results["milp"].status == results["enumerate"].status
    if results["enumerate"].cost is not None:
        assert results["milp"].cost == pytest.approx(results["enumerate"].cost, rel=1e-6)


def test_reference_model_prices_the_ps_as_documented():
    """docs/instance-format.md: ps_price_per_h is added to the cost in both models (the
    authors' instances set it to 0); ../shared/repro/turn3/reference-ps-price.json priced it."""
    free = resnet110_problem([2, 0, 4, 0, 0], model="reference", loss=0.8, time_s=2400.0)
    priced = resnet110_problem([2, 0, 4, 0, 0], model="reference", loss=0.8, time_s=2400.0, ps_price_per_h=10.0)
    counts = [[2, 0, 4, 0, 0]]
    a, b = SpotModel(free).evaluate(counts, 1), SpotModel(priced).evaluate(counts, 1)
    assert a.time_s[0] == b.time_s[0]
    assert b.cost[0] - a.cost[0] == pytest.approx(10.0 * a.time_s[0] / 3600, abs=2e-6)


@pytest.mark.parametrize("counts", [[[3]], [3], [[1, 2, 3]], np.zeros((2, 2, 2), dtype=np.int64)])
def test_counts_of_another_width_are_refused(counts) -> None:
    """A row narrower or wider than the columns (issue 28: ``[[3]]`` on two columns gave 1,726 s)."""
    from dataclasses import replace

    one = small_problem()
    two = one.replace(instance_types=(one.instance_types[0], replace(one.instance_types[0], name="x2.large")))
    model = SpotModel(two)
    assert len(model.columns) == 2
    with pytest.raises(dnnprov.InvalidInputError, match=r"^counts: an array of shape .* \(N, 2\)"):
        model.evaluate(counts)
    with pytest.raises(dnnprov.InvalidInputError, match="^ps: "):
        model.evaluate([[1, 0], [0, 1]], [1, 1, 1])
    assert model.evaluate([[3, 0]]).time_s[0] == pytest.approx(SpotModel(one).evaluate([[3]]).time_s[0])
