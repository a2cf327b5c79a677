"""The progress model of the replays (the loop's stand-in trainer) and what it forbids: a run
gains nothing from where it starts or which cluster it launches first; mpc over several types."""

from __future__ import annotations

import glob
import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
from conftest import resnet110_problem
from test_pool_replay import OD_PRICE, flat_model, one_type_problem, plan_time, trace

import dnnprov
from dnnprov.control.loop import RunSettings
from dnnprov.control.plan_choice import choose_plan
from dnnprov.control.replay import Simulation, draw_offsets, run_once, window_bounds
from dnnprov.io.catalogs.importing import default_shared_data
from dnnprov.problems.interruption import load_trace
from dnnprov.revocation.availability import fit_availability
from dnnprov.revocation.policies import (
    PROGRESS_BUCKETS,
    make_policy,
)
from dnnprov.revocation.replay.pool_replay import TracePools

JOIN = 126.0
PS_PRICE = 0.192


def full_capacity(level: int, gap: float = 300.0) -> dict[str, list]:
    return {"p3.2xlarge": [trace("us-east-1a_v100_1.json", [level] * 200, gap)]}


@pytest.mark.parametrize("time_s", [5000.0, 3300.0])  # 3300 s: too short for one worker
@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("policy", ["none", "fallback", "failover", "uniform-progress", "mpc"])
def test_no_run_buys_progress_with_its_plan_or_start(workers: int, policy: str, time_s: float) -> None:
    """Whatever the plan's size and the policy, on the loop: a run never reaches L_obj before
    the plan's cluster could from scratch (eq. 1; the stand-in trainer counts at most the plan's
    workers). The old model started a 1-worker plan on the 1-worker curve and let mpc run 4
    workers from there."""
    problem = one_type_problem(time_s=time_s, quota=4)
    plan = dnnprov.SpotPlan(counts={"p3.2xlarge": workers}, ps=1)
    traces = full_capacity(4)
    table = TracePools(problem, traces).takeover_table(plan, flat_model(4, 4)) if policy == "mpc" else None
    run = run_once(problem, plan, traces, make_policy(policy, table), 0, RunSettings(horizon=3.0)).outcome
    assert run.finish_s is not None
    assert run.finish_s >= min(plan_time(problem, k) for k in range(1, workers + 1)) * (1 - 1e-12)


def test_risk_plan_buys_no_head_start() -> None:
    """A job one worker cannot finish in time: `risk plan` used to choose one worker anyway
    (its curve starts furthest, and mpc then grew the cluster); now every candidate runs
    within its own workers, so the choice can meet T_obj with the workers it names."""
    problem = one_type_problem(time_s=1.0, quota=6)
    problem = problem.replace(slo=replace(problem.slo, time_s=1.15 * plan_time(problem, 4)))
    assert plan_time(problem, 1) > problem.slo.time_s
    traces = {
        "p3.2xlarge": [
            trace("us-east-1a_v100_1.json", ([6] * 20 + [2] * 5) * 8),
            trace("us-east-1b_v100_1.json", ([3] * 7 + [0] * 9) * 12),
        ]
    }
    choice = choose_plan(problem, traces, zones=True, runs=12)
    assert choice.plan is not None
    chosen = choice.plan.workers
    assert plan_time(problem, chosen) <= problem.slo.time_s
    by_workers = {c["workers"]: c["expected_cost"] for c in choice.candidates}
    assert by_workers[1] is None  # one worker cannot make it, whatever the model


# ------------------------------------------------------------------ mpc over several types
def two_type_problem(time_s: float, quotas: tuple[int, int] = (2, 1)) -> dnnprov.SpotProblem:
    """ResNet-110 (paper model) on p3.2xlarge and p3.16xlarge (8 V100, the type of the 8-V100
    1-node traces): spot $9.7359/h (use1-az1, ../shared/data spot price history of
    2022-05-31), on-demand $24.48/h (us-east-1, ../shared/data on-demand list); its speed is
    estimated, 8 x the spec's p3.2xlarge 1885 samples/s at 1024 per GPU."""
    problem = resnet110_problem(
        [quotas[0], 0, 0, 0, quotas[1]], model="paper", loss=0.8, time_s=time_s, gamma_4=1.0, ps_price_per_h=PS_PRICE
    )
    p3, other = (t for t in problem.instance_types if t.name in ("p3.2xlarge", "p2.8xlarge"))
    p3 = replace(p3, on_demand_price_per_h=OD_PRICE)
    big = replace(
        other,
        name="p3.16xlarge",
        gpus=8,
        speed_samples_per_s=8 * p3.speed_samples_per_s,
        batch_per_gpu=p3.batch_per_gpu,
        spot_price_per_h=9.7359,
        on_demand_price_per_h=24.48,
    )
    return problem.replace(instance_types=(p3, big), constraints=dnnprov.SpotConstraints(ps_count=(1, 1)))


def brute_force_two_types(
    problem: dnnprov.SpotProblem, plan: dnnprov.SpotPlan, levels: tuple[int, int], ticks: int, gap: float
) -> float:
    """Capacity certain: the cheapest sequence of clusters (workers per type within the plan)
    over ``ticks`` ticks reaching the target, by eq. (3)'s progress u (exact, no buckets)."""
    model = dnnprov.SpotModel(problem)
    names = [t.name for t in problem.instance_types]
    most = [plan.counts.get(n, 0) for n in names]
    clusters = list(itertools.product(*[range(m + 1) for m in most]))
    ev = model.evaluate([list(c) for c in clusters if any(c)], 1)
    w = problem.workload
    numerator = (ev.iterations + w.gamma_1) * (problem.slo.loss - w.gamma_5)  # N_c (eq. 3 at the target)
    speed = dict(zip([c for c in clusters if any(c)], ev.iteration_rate / numerator))
    speed[tuple(0 for _ in most)] = 0.0
    start = min(w.gamma_1 / n for n in numerator)  # the plan's sub-clusters
    target = 1 / (problem.slo.loss - w.gamma_5)
    spot = [t.spot_price_per_h for t in problem.instance_types]
    od = [t.on_demand_price_per_h for t in problem.instance_types]
    best = math.inf
    for seq in itertools.product(clusters, repeat=ticks):
        u, cost = start, 0.0
        for c in seq:
            if u >= target:
                break
            billed = gap if speed[c] <= 0 else min(gap, (target - u) / speed[c])  # billed until it ends
            cost += (
                (sum(min(k, a) * s + (k - min(k, a)) * o for k, a, s, o in zip(c, levels, spot, od)) + PS_PRICE)
                * billed
                / 3600
            )
            u += speed[c] * billed
        if u >= target * (1 - 1e-12):
            best = min(best, cost)
    return best


@pytest.mark.parametrize("levels", [(0, 0), (2, 0), (1, 1), (0, 1)])
def test_mpc_table_of_two_types_matches_a_brute_force(levels: tuple[int, int]) -> None:
    """Two types with certain capacity: the table's expected cost is the cheapest sequence of
    clusters over both types (enumerated), up to the buckets' rounding (which only adds)."""
    gap = 900.0
    problem = two_type_problem(time_s=4 * gap + JOIN)
    plan = dnnprov.SpotPlan(counts={"p3.2xlarge": 2, "p3.16xlarge": 1}, ps=1)
    traces = {
        "p3.2xlarge": [trace("us-east-1a_v100_1.json", [levels[0]] * 20, gap)],
        "p3.16xlarge": [trace("us-east-1a_v100_8.json", [levels[1]] * 20, gap)],
    }
    replay = TracePools(problem, traces)
    table = replay.takeover_table(
        plan, {"p3.2xlarge": flat_model(2, levels[0], gap), "p3.16xlarge": flat_model(1, levels[1], gap)}
    )
    oracle = brute_force_two_types(problem, plan, levels, 4, gap)
    assert math.isfinite(oracle)
    assert table.expected_cost >= oracle * (1 - 1e-9)
    assert table.expected_cost <= oracle * (1 + 4 * 3 / PROGRESS_BUCKETS) + 0.01


SHARED = default_shared_data()


@pytest.mark.skipif(
    SHARED is None or not (SHARED / "spot-traces").is_dir(),
    reason="../shared/data/spot-traces is absent (real spot traces)",
)
def test_mpc_chooses_among_types_on_real_traces() -> None:
    """Real aligned traces of two types (aws-10-26-2022: 1-V100 and 8-V100 instances, zones
    us-west-2a and us-west-2b), fit on the first half, run the loop on the second: mpc's table
    chooses between the plan's types (the cheap one while on track, the 8-GPU spot instance when
    behind with only it available); the loop under mpc meets every deadline, costs at least
    the hindsight bound in every run, and less than failover on the same windows. (These windows
    never put the run behind: since the loop stops nothing before its launches succeed, mpc
    trains on p3.2xlarge alone in all of them.)"""
    folder = SHARED / "spot-traces/availability/1-node/aws-10-26-2022"
    traces = {
        "p3.2xlarge": [load_trace(f) for f in sorted(glob.glob(str(folder / "*_v100_1.json")))],
        "p3.16xlarge": [load_trace(f) for f in sorted(glob.glob(str(folder / "*_v100_8.json")))],
    }
    assert [len(v) for v in traces.values()] == [2, 2], "the aws-10-26-2022 V100 traces are missing"
    plan = dnnprov.SpotPlan(counts={"p3.2xlarge": 2, "p3.16xlarge": 1}, ps=1)
    problem = two_type_problem(time_s=1.0)
    one = float(dnnprov.SpotModel(problem).evaluate([[1, 0]], 1).time_s[0])
    problem = problem.replace(slo=replace(problem.slo, time_s=1.2 * one))  # one p3.2xlarge: 1.2x slack
    replay = TracePools(problem, traces, period=(0.5, 1.0))
    models = {name: fit_availability(items, 2, (0.0, 0.5)) for name, items in traces.items()}
    table = replay.takeover_table(plan, models)
    assert table.types == (0, 1) and table.most == (2, 1)
    assert table.cluster_at(1800.0, 0.0, [0, 1]).tolist() == [0, 1]  # behind: the 8-GPU spot instance
    assert table.cluster_at(1800.0, 0.5, [0, 1]).tolist() == [1, 0]  # on track: one p3.2xlarge
    settings = RunSettings(horizon=3.0)
    costs: dict[str, list[float]] = {"mpc": [], "failover": []}
    offsets = draw_offsets(traces, 3 * problem.slo.time_s + settings.poll_s, 12, 3, (0.5, 1.0))
    bounds = window_bounds(problem, plan, traces, offsets)
    for offset, bound in zip(offsets, bounds):
        for name, spent in costs.items():
            run = run_once(problem, plan, traces, make_policy(name, table), offset, settings).outcome
            if name == "mpc":
                assert run.met_deadline, offset
                assert run.cost >= bound
            spent.append(run.cost)
    assert np.mean(costs["mpc"]) < np.mean(costs["failover"])


def embedded_p3_problem(quota: int = 4, time_s: float = 20000.0) -> dnnprov.SpotProblem:
    """The embedded ResNet-110 profile (validity domain 2-7 workers, x1.5) on p3.2xlarge only."""
    table1 = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    p3 = replace(
        next(t for t in table1.instance_types if t.name == "p3.2xlarge"), quota=quota, on_demand_price_per_h=OD_PRICE
    )
    return table1.replace(
        instance_types=(p3,),
        model="paper",
        constraints=dnnprov.SpotConstraints(ps_count=(1, 1)),
        workload=replace(table1.workload, loss_variant="cc", gamma_4=1.0, estimated=("gamma_4",)),
        slo=dnnprov.SpotSLO(loss=0.8, time_s=time_s),
    )


def test_a_cluster_outside_the_domain_does_not_train() -> None:
    """A lone worker lies outside the embedded profile's 2-7 worker domain: no replay lets it
    train. Fallback, left with one of two workers at 900 s, brings the cluster back into the
    domain on-demand (it ends no sooner than a join, less the notice, after the undisturbed plan);
    `none`, left with one for good, never ends; the hindsight bound of a 2-worker plan on full
    capacity is then the plan itself on spot, not a cheaper stretch of one worker; a 1-worker
    plan is refused, naming plan.counts."""
    from dnnprov.errors import InvalidInputError

    problem = embedded_p3_problem(quota=2)
    model = dnnprov.SpotModel(problem)
    assert not model.evaluate([[1]], 1).inside_domain[0] and model.evaluate([[2]], 1).inside_domain[0]
    t1, t2 = plan_time(problem, 1), plan_time(problem, 2)
    assert 900 < t2 and t1 < 3 * problem.slo.time_s  # one worker would finish, were it let train
    plan = dnnprov.SpotPlan(counts={"p3.2xlarge": 2}, ps=1)
    price, ps_rate = problem.instance_types[0].spot_price_per_h, problem.platform.ps_price_per_h
    dropping = {"p3.2xlarge": [trace("us-east-1a_v100_1.json", [2] * 3 + [1] * 200)]}
    run = run_once(problem, plan, dropping, make_policy("fallback"), 0, RunSettings(horizon=3.0)).outcome
    assert run.met_deadline and run.on_demand_launched == 1
    assert run.finish_s is not None and run.finish_s >= t2 + JOIN - 120  # the notice's 120 s still train
    lonely = {"p3.2xlarge": [trace("us-east-1a_v100_1.json", [2] + [1] * 299)]}
    out = Simulation(problem, plan, lonely, policy="none", runs=3).to_dict()
    assert out["finished"] == 0.0
    full = {"p3.2xlarge": [trace("us-east-1a_v100_1.json", [2] * 300)]}
    bound = window_bounds(problem, plan, full, [0])[0]
    assert bound == pytest.approx((2 * price + ps_rate) * t2 / 3600, rel=1e-6)
    with pytest.raises(InvalidInputError, match="plan.counts"):
        Simulation(problem, dnnprov.SpotPlan(counts={"p3.2xlarge": 1}, ps=1), lonely, policy="none")


def test_risk_plan_and_mpc_stay_inside_the_loss_models_domain() -> None:
    """The embedded ResNet-110 profile was fitted on 2-7 workers (x1.5 extrapolation): a lone
    worker lies outside it, so the solver never plans one; neither does `risk plan`."""
    problem = embedded_p3_problem()
    assert not dnnprov.SpotModel(problem).evaluate([[1]], 1).inside_domain[0]
    traces = {"p3.2xlarge": [trace("us-east-1a_v100_1.json", ([4] * 30 + [1] * 10) * 6)]}
    choice = choose_plan(problem, traces, zones=True, runs=5)
    assert choice.plan is not None and min(c["workers"] for c in choice.candidates) == 2


def test_mpc_of_two_types_on_the_loop_and_its_refusals() -> None:
    """simulate fits each type of the plan for mpc (every deadline met, never below the
    bound); one model file cannot cover two types (a clear error naming --model)."""
    from dnnprov.errors import InvalidInputError

    problem = two_type_problem(time_s=6000.0)
    traces = {
        "p3.2xlarge": [trace("us-east-1a_v100_1.json", ([2] * 6 + [0] * 4) * 10, 600.0)],
        "p3.16xlarge": [trace("us-east-1a_v100_8.json", ([0] * 5 + [1] * 5) * 10, 600.0)],
    }
    plan = dnnprov.SpotPlan(counts={"p3.2xlarge": 2, "p3.16xlarge": 1}, ps=1)
    out = Simulation(problem, plan, traces, policy="mpc", runs=8, seed=1, hindsight=True).to_dict(per_run=True)
    assert out["met_deadline"] == 1.0
    assert all(r["cost"] >= r["hindsight_cost"] for r in out["per_run"])
    with pytest.raises(InvalidInputError, match="--model"):
        Simulation(problem, plan, traces, policy="mpc", runs=1, model=flat_model(2, 2, 600.0)).to_dict()


@pytest.mark.parametrize("workers", [2, 4])
def test_a_tail_fit_runs_its_plan_in_eq1s_time(workers: int) -> None:
    """gamma_1 < 0 (eq. 3 fitted to the curves' tails, its pole at j = -gamma_1): an undisturbed
    run of the plan takes eq. (1)'s time, as predict says. The earliest start of a sub-cluster
    (one worker's, furthest back when gamma_1 < 0) used to charge the plan |gamma_1| (N_plan /
    N_1 - 1) iterations more."""
    base = one_type_problem(time_s=5000.0, quota=4)
    iterations = float(dnnprov.SpotModel(base).evaluate([[workers]], 1).iterations[0])
    problem = base.replace(workload=replace(base.workload, gamma_1=-0.5 * iterations))
    assert problem.workload.gamma_1 < 0
    plan = dnnprov.SpotPlan(counts={"p3.2xlarge": workers}, ps=1)
    run = run_once(problem, plan, full_capacity(4), make_policy("none"), 0, RunSettings(horizon=3.0)).outcome
    assert run.finish_s is not None
    assert run.finish_s == pytest.approx(plan_time(problem, workers), rel=1e-9)
