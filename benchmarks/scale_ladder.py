"""Scale ladder (issue 3): exact ``milp`` against ``heuristic`` and ``enumerate`` by size.

    .venv/bin/python benchmarks/scale_ladder.py [--quick] [--seed N] [--per-size N]
        [--time-limit S] [--sizes NAME ...] [--serverless N] [--serverless-10k N]
        [--index I ...] [--jsonl PATH] [--dump DIR] [--allow-missed] [--allow-skip]

Rungs (types x quota per type, PS count range):

* ``paper``: the embedded spot instances shipped with dnnprov except the 7 x 10 one
  (5 types, quotas 0-10, one PS; both paper and reference models);
* ``5x5-8``: 5 types, quota 5-8 per type, 1-2 PS;
* ``7x10``: 7 types x quota 10, one PS (19.5 M plans, the largest box the brute-force oracle
  takes); its first instance is the embedded ``paper-table3-overhead-7x10.json``;
* ``10x16`` and ``15x24`` (1-2 PS), ``20x32`` and ``30x32`` (1-3 PS; milp also with a
  0.5 % gap), ``40x16`` and ``80x16`` (1-3 PS);
* ``40x16-mix`` and ``80x16-mix`` (issue 19): the same sizes with the types drawn by each
  generator of :mod:`ladder_generators` in turn (independent, price following or against
  speed, wide quotas), each with the three loss variants, PS 1..1 to 1..3;
* ``80x16-tail``: the issue 19 tail instance ``../shared/repro/turn3/scale-80x16-tail.json``
  (skipped when absent);
* ``serverless``: random λDNN problems with m_max 10,240 MB, 64 MB steps and a concurrency
  limit of 1,000 functions (T_obj from a random plan of at most 200 functions);
* ``serverless-10k``: the same with a concurrency limit of 10,000, T_obj from a random
  plan of up to 10,000 functions, global batches of up to 10,000 local batches and model
  sizes log-uniform in 0.1-250 MB, so that some optima need thousands of functions (the
  PS link is shared, so only small models gain from that many; 12 instances);
* ``paper-setting``: ``paper_setting.measure()``, the embedded 7 x 10 instance under 108
  SLOs in one process, milp's total CPU time against the heuristic's;
* ``large``: ``large_set.measure()``, milp on every instance of data/benchmarks/large.

With no ``--sizes`` every rung runs; ``--quick`` runs the spot rungs up to 15x24 with 2
instances each and the serverless rungs with 5 and 2. At the end the run prints a table per
kind of rung and the targets table of issues 10 and 19 (large set, 80x16, 40x16, serverless-10k,
paper setting, the mixed families and the tail instance: measured, target, met or not) for the
rungs that ran; the exit status is 1 when a target is missed (unless ``--allow-missed``), a
rung's fixed file is absent (unless ``--allow-skip``) or an anomaly was found.

Random spot instances use the paper's model with the loss variants (cc, gamma_4 = 0.1),
(cc, gamma_4 = 1.0) and no-cc in turn. Per-type batches come from {256, 512, 1024} x GPUs
in {1, 2, 4, 8}, prices scale with the GPU count, compute times are 0.2-1.5 s / sqrt(GPUs),
and contention is mild (alpha_1 = 0.08, beta_1 = -0.2). The objective time is set from the
predicted times of random "mid-size" plans of the rung (60-300 workers drawn at the top
rungs, capped at the fastest greedy cluster; optima come out at tens of workers, up to ~100)
and always below the fastest lone worker, so one worker never suffices. Results and the
targets are discussed in docs/benchmarks.md.

Each instance has its own generator ``numpy.random.default_rng([seed, rung, index])``:
``--sizes 30x32 --seed 2024 --index 6 --dump DIR`` re-runs one instance and writes it as a
dnnprov JSON file (for ``dnnprov solve``). ``enumerate`` runs where the plan space is at most
20 million plans (the others print "n/a"; ``large`` runs milp only). Every milp plan is
re-evaluated with :class:`dnnprov.SpotModel`; a milp/enumerate cost difference, a heuristic
plan cheaper than a proven milp optimum (in ``paper-setting``: a proven milp answer costlier
than the heuristic's plan), or a milp plan the model rejects is listed under "anomalies"
(each one is a bug). Times are process CPU seconds (the machine is shared; CPU time is
steadier than wall time); the time limit is wall clock. ``--jsonl`` writes one record per
instance (``paper-setting``: one for its SLO set), each with its ``rung``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from importlib.metadata import version
from pathlib import Path

import numpy as np

import dnnprov
from dnnprov.result import Result, Status

sys.path.insert(0, str(Path(__file__).parent))  # benchmarks/ is not a package
import ladder_generators
import large_set
import paper_setting

ENUMERATE_MAX_PLANS = 20_000_000
SMALL_K = 3  # beyond enumerate: all plans of at most 3 workers are checked
GAP = 0.005
VARIANTS = (("cc", 0.1), ("cc", 1.0), ("no-cc", 1.0))
EMBEDDED_7X10 = "spot/paper-table3-overhead-7x10.json"
PROVEN = (Status.OPTIMAL.value, Status.INFEASIBLE.value)  # statuses of a proof, as in the records


@dataclass(frozen=True)
class Rung:
    """One size of the ladder: ``types`` types, quotas in ``quota``, PS count 1..``ps``."""

    name: str
    types: int
    quota: tuple[int, int]
    ps: int
    workers: tuple[int, int]  # worker counts of the plans the deadline is taken from
    gap_run: bool = False  # also run milp with gap = 0.5 %
    quick: bool = True  # part of --quick
    mixed: bool = False  # instances cycle through every generator and loss variant, PS 1..1-3


RUNGS = (
    Rung("5x5-8", 5, (5, 8), 2, (3, 12)),
    Rung("7x10", 7, (10, 10), 1, (4, 25)),
    Rung("10x16", 10, (16, 16), 2, (10, 50)),
    Rung("15x24", 15, (24, 24), 2, (20, 100)),
    Rung("20x32", 20, (32, 32), 3, (60, 300), gap_run=True, quick=False),
    Rung("30x32", 30, (32, 32), 3, (60, 300), gap_run=True, quick=False),
    # issue 10: more types at a moderate quota (appended: earlier rungs keep their seeds)
    Rung("40x16", 40, (16, 16), 3, (60, 300), quick=False),
    Rung("80x16", 80, (16, 16), 3, (60, 300), quick=False),
    # issue 19: the same sizes from every generator of ladder_generators
    Rung("40x16-mix", 40, (16, 16), 3, (60, 300), quick=False, mixed=True),
    Rung("80x16-mix", 80, (16, 16), 3, (60, 300), quick=False, mixed=True),
)
#: The issue 19 tail instance (80 types x quota 16, cc, PS 1..2), run as rung ``80x16-tail`` when present.
TAIL_INSTANCE = Path(__file__).resolve().parents[1].parent / "shared" / "repro" / "turn3" / "scale-80x16-tail.json"


@dataclass(frozen=True)
class ServerlessRung:
    """A serverless rung: the concurrency limit and how its random problems are drawn."""

    name: str
    concurrency: int
    plan_functions: int  # T_obj comes from a random plan of at most this many functions
    batch_functions: int  # max_global_batch is local_batch x 4..batch_functions
    small_models: bool  # model size log-uniform in 0.1-250 MB (else uniform in 1-250 MB)
    stream: int  # the rung's number in the instance generators' seeds
    instances: int  # default instance count
    quick_instances: int  # default instance count with --quick


SERVERLESS_RUNGS = (
    ServerlessRung(
        "serverless",
        1000,
        plan_functions=200,
        batch_functions=64,
        small_models=False,
        stream=len(RUNGS) + 1,
        instances=50,
        quick_instances=5,
    ),
    # issue 10: wide global batches and small models, so that some optima need thousands of functions
    ServerlessRung(
        "serverless-10k",
        10_000,
        plan_functions=10_000,
        batch_functions=10_000,
        small_models=True,
        stream=len(RUNGS) + 2,
        instances=12,
        quick_instances=2,
    ),
)
SERVERLESS_BY_NAME = {r.name: r for r in SERVERLESS_RUNGS}
RUNG_NAMES = (
    ("paper",) + tuple(r.name for r in RUNGS) + ("80x16-tail",) + tuple(SERVERLESS_BY_NAME) + ("paper-setting", "large")
)


# ---------------------------------------------------------------- instance builders
def random_spot(
    rng: np.random.Generator, rung: Rung, variant: tuple[str, float], name: str, generator: str = "independent"
) -> dnnprov.SpotProblem:
    """A random spot problem of ``rung``'s size whose optimum needs more than one worker.

    ``generator`` says how the types are drawn (:mod:`ladder_generators`).

    Draws are repeated (up to 20 times) until some sampled cluster beats every lone worker,
    so that T_obj can be put between them (see :func:`deadline`).
    """
    loss_variant, gamma_4 = variant
    for attempt in range(20):
        types = ladder_generators.draw_types(rng, rung.types, rung.quota, generator)
        gamma_2, gamma_3 = float(rng.uniform(-0.2, -0.05)), float(rng.uniform(2000, 3000))
        slo_loss = float(rng.uniform(0.7, 0.95))
        # gamma_1 below the smallest lone-worker term of eq. (3), so that every plan needs a
        # positive number of iterations (j <= 0 is outside the model's range: a lone 8-GPU
        # worker with j < 0 is infeasible, yet adding one slow worker makes it feasible).
        spread = gamma_4 if loss_variant == "cc" else 1.0
        largest = max(t.gpus * t.batch_per_gpu for t in types)
        j_lone = (gamma_2 * largest + gamma_3) * math.sqrt(spread) / (slo_loss - 0.5)
        workload = dnnprov.SpotWorkload(
            name="random",
            param_size_mb=float(rng.uniform(5, 20)),
            bandwidth_req_mb_s=float(rng.uniform(100, 300)),
            alpha_1=0.08,
            beta_1=-0.2,
            gamma_1=float(rng.uniform(0.2, 0.6)) * j_lone,
            gamma_2=gamma_2,
            gamma_3=gamma_3,
            gamma_4=gamma_4,
            gamma_5=0.5,
            loss_variant=loss_variant,
        )
        platform_ = dnnprov.SpotPlatform(
            ps_bandwidth_mb_s=float(rng.uniform(800, 1500)), ps_price_per_h=float(rng.choice([0.0, 0.192]))
        )
        constraints = dnnprov.SpotConstraints(ps_count=(1, rung.ps))
        draft = dnnprov.SpotProblem(
            instance_types=tuple(types),
            workload=workload,
            slo=dnnprov.SpotSLO(loss=slo_loss, time_s=1e12),
            platform=platform_,
            constraints=constraints,
            model="paper",
            name=name,
        )
        time_s, beats_lone = deadline(rng, draft, rung)
        if beats_lone:
            break
    return draft.replace(
        slo=dnnprov.SpotSLO(loss=slo_loss, time_s=time_s),
        notes=f"scale ladder rung {rung.name}, {loss_variant}, gamma_4 {gamma_4:g}, "
        f"draw {attempt + 1}" + ("" if generator == "independent" else f", generator {generator}, PS 1..{rung.ps}"),
    )


def deadline(rng: np.random.Generator, problem: dnnprov.SpotProblem, rung: Rung) -> tuple[float, bool]:
    """T_obj from mid-size plans, below every lone worker; the flag says whether that worked.

    A size K is drawn from ``rung.workers`` (capped where adding the next-fastest instance
    stops making the cluster faster: contention makes very large clusters slow). The
    candidates are 30 random compositions of K workers and the K fastest instances (by
    lone-worker sample speed), with random PS counts; T_obj is the fastest candidate's time
    times a random factor in [1, 1.2], capped just below the fastest lone worker, so a
    cluster of roughly K well-chosen workers is needed. When no candidate beats a lone worker
    (CC with a small gamma_4 favours K = 1 strongly) the flag is False and the caller draws
    a new instance.
    """
    model = dnnprov.SpotModel(problem)
    cols = model.columns
    lone = model.evaluate(np.eye(len(cols), dtype=np.int64), 1)
    ok = np.isfinite(lone.time_s) & (lone.iterations > 0) & (cols.upper > 0)
    single = float(lone.time_s[ok].min()) if ok.any() else math.inf
    pool = np.repeat(np.arange(len(cols)), cols.upper)
    by_speed = pool[np.argsort(-lone.speed[pool], kind="stable")]

    def times(plans: list[np.ndarray], ps: np.ndarray) -> np.ndarray:
        ev = model.evaluate(np.array(plans), ps)
        return np.where(np.isfinite(ev.time_s) & (ev.iterations > 0), ev.time_s, np.inf)

    greedy = [np.bincount(by_speed[:n], minlength=len(cols)) for n in range(1, len(pool) + 1)]
    curve = times(greedy, np.full(len(greedy), rung.ps))
    fastest = int(np.argmin(curve)) + 1
    k = min(int(rng.integers(rung.workers[0], rung.workers[1] + 1)), fastest)
    plans = [np.bincount(rng.choice(pool, size=k, replace=False), minlength=len(cols)) for _ in range(30)]
    plans.append(greedy[k - 1])
    best = float(times(plans, rng.integers(1, rung.ps + 1, size=len(plans))).min())
    best = min(best, float(curve[k - 1]))
    if not best < 0.97 * single:
        return (0.97 * single if math.isfinite(single) else 1e4), False
    return best * float(rng.uniform(1.0, min(1.2, 0.97 * single / best))), True


def random_serverless(
    rng: np.random.Generator, name: str, rung: ServerlessRung = SERVERLESS_RUNGS[0]
) -> dnnprov.ServerlessProblem:
    """A random λDNN problem of ``rung`` (m_max = 10,240 MB, 64 MB steps).

    T_obj is the time of a random feasible plan of at most ``rung.plan_functions`` functions
    times a factor in [0.6, 1.4] (600 s when 40 draws find no feasible plan).
    """
    local = int(rng.choice([16, 32, 64, 128]))
    workload = dnnprov.ServerlessWorkload(
        name="random",
        dataset_mb=float(rng.uniform(20, 2000)),
        samples=int(rng.integers(5000, 200001)),
        epochs=float(rng.choice([1, 2, 3, 5])),
        model_mb=(
            math.exp(rng.uniform(math.log(0.1), math.log(250))) if rung.small_models else float(rng.uniform(1, 250))
        ),
        local_batch=local,
        max_global_batch=local * int(rng.integers(4, rung.batch_functions + 1)),
        rate_alpha=float(rng.uniform(0.001, 0.03)),
        rate_beta=float(rng.uniform(-2, 10)),
        storage_alpha=float(rng.uniform(0, 0.05)),
        storage_beta=float(rng.uniform(1, 10)),
        min_memory_mb=int(rng.integers(128, 3008)),
    )
    platform_ = dnnprov.ServerlessPlatform(
        memory_step_mb=64,
        max_memory_mb=10240,
        concurrency_limit=rung.concurrency,
        ps_bandwidth_mb_s=float(rng.uniform(300, 1500)),
        ps_price_per_h=float(rng.choice([0.0, 0.096])),
        timeout_s=900.0,
    )
    ps_low = int(rng.choice([1, 1, 2]))
    constraints = dnnprov.ServerlessConstraints(ps_count=(ps_low, int(rng.integers(ps_low, 4))))
    draft = dnnprov.ServerlessProblem(
        workload=workload, time_s=1e12, platform=platform_, constraints=constraints, name=name
    )
    model = dnnprov.ServerlessModel(draft)
    grid = draft.memory_grid()
    low, high = draft.function_range()
    time_s = 600.0
    for _ in range(40):
        n = int(rng.integers(low, min(high, rung.plan_functions) + 1))
        m = grid[int(rng.integers(0, len(grid)))]
        ev = model.evaluate(n, m, ps_low)
        if bool(ev.feasible):
            time_s = float(ev.time_s) * float(rng.uniform(0.6, 1.4))
            break
    return draft.replace(time_s=time_s)


def embedded_spot(exclude: str = EMBEDDED_7X10) -> list[dnnprov.SpotProblem]:
    """The embedded spot instances, in file-name order (without ``exclude``)."""
    folder = Path(str(dnnprov.embedded_instance(exclude))).parent
    return [dnnprov.read_instance(p) for p in sorted(folder.glob("*.json")) if p.name != Path(exclude).name]


def small_k_minimum(problem: dnnprov.SpotProblem, max_workers: int = SMALL_K) -> float | None:
    """Cheapest feasible plan with at most ``max_workers`` workers, by enumeration.

    A partial oracle for the rungs too large to enumerate: no proven optimum may cost more.
    """
    model = dnnprov.SpotModel(problem)
    cols = model.columns
    plans = [
        np.bincount(c, minlength=len(cols))
        for k in range(1, max_workers + 1)
        for c in itertools.combinations_with_replacement(range(len(cols)), k)
    ]
    counts = np.array(plans)
    counts = counts[(counts >= cols.lower).all(axis=1) & (counts <= cols.upper).all(axis=1)]
    best = math.inf
    low, high = problem.constraints.ps_count
    for ps in range(low, high + 1):
        ev = model.evaluate(counts, ps)
        cost = np.where(ev.feasible, ev.cost, np.inf)
        best = min(best, float(cost.min()))
    return best if math.isfinite(best) else None


def spot_space(problem: dnnprov.SpotProblem) -> int:
    """Number of (counts, PS) plans in the quota box."""
    cols = problem.columns()
    low, high = problem.constraints.ps_count
    return math.prod(int(up - lo + 1) for lo, up in zip(cols.lower, cols.upper)) * (high - low + 1)


# ---------------------------------------------------------------- running
def timed(problem, method: str, **kwargs) -> tuple[Result, float]:
    """Solve and return the process CPU seconds it took (steadier than wall time on a shared machine)."""
    started = time.process_time()
    result = dnnprov.solve(problem, method, **kwargs)
    return result, time.process_time() - started


def rel_diff(a: float | None, b: float | None) -> float:
    """|a - b| / max(|b|, tiny); None on both sides (both infeasible) counts as 0."""
    if a is None and b is None:
        return 0.0
    if a is None or b is None:
        return math.inf
    return abs(a - b) / max(abs(b), 1e-12)


def run_spot(problem: dnnprov.SpotProblem, args, gap_run: bool, tag: str, anomalies: list[str]) -> dict:
    """All methods on one spot instance; returns a JSON-ready record."""
    rec: dict = {
        "rung_instance": tag,
        "name": problem.name,
        "space": spot_space(problem),
        "model": problem.model,
        "loss_variant": problem.workload.loss_variant,
        "gamma_4": problem.workload.gamma_4,
        "time_obj_s": problem.slo.time_s,
    }
    milp, t = timed(problem, "milp", time_limit_s=args.time_limit)
    rec["milp"] = summary(milp, t)
    check_plan(problem, milp, tag, "milp", anomalies)
    if gap_run:
        milp_gap, t = timed(problem, "milp", time_limit_s=args.time_limit, gap=GAP)
        rec["milp_gap"] = summary(milp_gap, t)
        check_plan(problem, milp_gap, tag, "milp gap", anomalies)
    heur, t = timed(problem, "heuristic")
    rec["heuristic"] = summary(heur, t)
    check_plan(problem, heur, tag, "heuristic", anomalies)
    if rec["space"] <= ENUMERATE_MAX_PLANS:
        enum, t = timed(problem, "enumerate", max_plans=ENUMERATE_MAX_PLANS)
        rec["enumerate"] = summary(enum, t)
        if milp.status in (Status.OPTIMAL, Status.INFEASIBLE) and enum.status in (Status.OPTIMAL, Status.INFEASIBLE):
            rec["milp_vs_enum"] = rel_diff(milp.cost, enum.cost)
            if rec["milp_vs_enum"] > 1e-9:
                anomalies.append(
                    f"{tag}: milp {milp.status.value} {milp.cost} ({milp.plan}) vs enumerate "
                    f"{enum.status.value} {enum.cost} ({enum.plan})"
                )
        elif enum.cost is not None and milp.bound is not None and milp.bound > enum.cost * (1 + 1e-9):
            anomalies.append(f"{tag}: milp bound {milp.bound} above enumerate's optimum {enum.cost}")
    else:
        rec["small_k_min"] = small_k_minimum(problem)
        if (
            rec["small_k_min"] is not None
            and milp.status in (Status.OPTIMAL, Status.INFEASIBLE)
            and (milp.cost is None or milp.cost > rec["small_k_min"] * (1 + 1e-9))
        ):
            anomalies.append(
                f"{tag}: milp {milp.status.value} {milp.cost} but a plan of <= {SMALL_K} workers "
                f"costs {rec['small_k_min']}"
            )
        if rec["small_k_min"] is not None and milp.bound is not None and milp.bound > rec["small_k_min"] * (1 + 1e-9):
            anomalies.append(
                f"{tag}: milp bound {milp.bound} above a plan of <= {SMALL_K} workers ({rec['small_k_min']})"
            )
    if gap_run and milp.status is Status.OPTIMAL:
        if milp_gap.cost is None or milp_gap.cost > milp.cost * (1 + GAP + 1e-9):
            anomalies.append(
                f"{tag}: gap run {milp_gap.status.value} {milp_gap.cost} not within "
                f"{100 * GAP:g} % of the optimum {milp.cost}"
            )
        if milp_gap.bound is not None and milp_gap.bound > milp.cost * (1 + 1e-9):
            anomalies.append(f"{tag}: gap run bound {milp_gap.bound} above the optimum {milp.cost}")
    best = milp.cost
    if heur.cost is not None and best is not None:
        rec["heur_ratio"] = heur.cost / best
        if milp.status is Status.OPTIMAL and heur.cost < best * (1 - 1e-9):
            anomalies.append(
                f"{tag}: heuristic {heur.cost} ({heur.plan}) below milp's proven optimum {best} ({milp.plan})"
            )
    if milp.bound is not None and heur.cost is not None and heur.cost < milp.bound * (1 - 1e-9):
        anomalies.append(f"{tag}: heuristic {heur.cost} below milp's proven bound {milp.bound}")
    return rec


def check_plan(problem, result: Result, tag: str, method: str, anomalies: list[str]) -> None:
    """Re-evaluate a returned spot plan with the model: feasible, and the reported cost."""
    if result.status is Status.ERROR:
        anomalies.append(f"{tag}: {method} error: {result.message}")
        return
    if result.plan is None:
        return
    model = dnnprov.SpotModel(problem)
    counts = np.array([[result.plan.counts.get(label, 0) for label in model.columns.labels]])
    ev = model.evaluate(counts, result.plan.ps)
    if not bool(ev.feasible[0]):
        anomalies.append(f"{tag}: {method} plan {result.plan} is infeasible by SpotModel")
    elif rel_diff(result.cost, float(ev.cost[0])) > 1e-9:
        anomalies.append(f"{tag}: {method} reports cost {result.cost}, SpotModel gives {float(ev.cost[0])}")


def summary(result: Result, seconds: float) -> dict:
    plan = result.plan
    workers = plan.workers if isinstance(plan, dnnprov.SpotPlan) else getattr(plan, "functions", None)
    return {
        "status": result.status.value,
        "cost": result.cost,
        "bound": result.bound,
        "gap": result.gap,
        "seconds": seconds,
        "workers": workers,
        "plan": None if plan is None else plan.to_dict(),
        "message": result.message,
    }


def run_serverless(problem: dnnprov.ServerlessProblem, args, tag: str, anomalies: list[str]) -> dict:
    """milp, heuristic and enumerate on one serverless instance; returns a JSON-ready record."""
    rec: dict = {
        "rung_instance": tag,
        "name": problem.name,
        "concurrency": problem.platform.concurrency_limit,
        "time_obj_s": problem.time_s,
    }
    milp, t = timed(problem, "milp", time_limit_s=args.time_limit)
    rec["milp"] = summary(milp, t)
    heur, t = timed(problem, "heuristic")
    rec["heuristic"] = summary(heur, t)
    enum, t = timed(problem, "enumerate")
    rec["enumerate"] = summary(enum, t)
    for method, result in (("milp", milp), ("heuristic", heur)):
        if result.status is Status.ERROR:
            anomalies.append(f"{tag}: {method} error: {result.message}")
    if milp.status in (Status.OPTIMAL, Status.INFEASIBLE):
        rec["milp_vs_enum"] = rel_diff(milp.cost, enum.cost)
        if rec["milp_vs_enum"] > 1e-9:
            anomalies.append(
                f"{tag}: milp {milp.status.value} {milp.cost} ({milp.plan}) vs enumerate "
                f"{enum.status.value} {enum.cost} ({enum.plan})"
            )
    if heur.cost is not None and milp.cost is not None:
        rec["heur_ratio"] = heur.cost / milp.cost
        if milp.status is Status.OPTIMAL and heur.cost < milp.cost * (1 - 1e-9):
            anomalies.append(f"{tag}: heuristic {heur.cost} below milp's proven optimum {milp.cost}")
    return rec


def run_large(args, anomalies: list[str]) -> Iterator[dict]:
    """milp on every instance of data/benchmarks/large (:func:`large_set.measure`), one record each."""
    for done in large_set.measure(large_set.DEFAULT_FOLDER, args.time_limit, "milp"):
        tag = done.path.stem
        check_plan(done.problem, done.result, tag, "milp", anomalies)
        yield {
            "rung_instance": tag,
            "name": done.problem.name,
            "space": spot_space(done.problem),
            "milp": summary(done.result, done.cpu_s),
            "wall_s": done.wall_s,
            "stats": {key: done.result.stats.get(key) for key in ("cells", "milps")},
        }


def run_paper_setting(anomalies: list[str]) -> dict:
    """The 108-SLO experiment (:func:`paper_setting.measure`) as one record.

    A proven milp answer costlier than the heuristic's plan (or infeasible next to it) is an
    anomaly, as is an error of either method.
    """
    rec = paper_setting.measure()
    for slo in rec["slos"]:
        tag = f"paper-setting loss {slo['loss']:.4f}, T_obj {slo['time_s']:g} s"
        milp, heur = slo["milp"], slo["heuristic"]
        for method in paper_setting.METHODS:
            if slo[method]["status"] == Status.ERROR.value:
                anomalies.append(f"{tag}: {method} error")
        if (
            milp["status"] in PROVEN
            and heur["cost"] is not None
            and (milp["cost"] is None or milp["cost"] > heur["cost"] * (1 + 1e-9))
        ):
            anomalies.append(
                f"{tag}: milp {milp['status']} {milp['cost']} ({milp['plan']}) but the heuristic's "
                f"plan {heur['plan']} costs {heur['cost']}"
            )
    return rec


# ---------------------------------------------------------------- table
def med(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def fmt(x: float | None, spec: str = ".3f", scale: float = 1.0) -> str:
    if x is None:
        return "n/a"
    if math.isinf(x):
        return "inf"
    return format(x * scale, spec)


def status_counts(recs: list[dict], key: str) -> str:
    """optimal / feasible within the gap / limit (+ infeasible, error if any)."""
    statuses = [r[key]["status"] for r in recs if key in r]
    text = f"{statuses.count('optimal')}/{statuses.count('feasible')}/{statuses.count('limit')}"
    extra = [f"{statuses.count(s)} {s}" for s in ("infeasible", "unknown", "error") if statuses.count(s)]
    return text + (f" ({', '.join(extra)})" if extra else "")


SPOT_HEADER = (
    "| rung | inst | plans (max) | milp opt/gap/lim | milp med s | milp max s | heur med s "
    "| heur max s | enum med s | heur/milp mean | heur/milp max | max rel diff milp-enum | med K* |"
)


def spot_row(label: str, recs: list[dict], key: str = "milp") -> str:
    milp_s = [r[key]["seconds"] for r in recs]
    heur_s = [r["heuristic"]["seconds"] for r in recs]
    enum_s = [r["enumerate"]["seconds"] for r in recs if "enumerate" in r]
    ratios = [r["heur_ratio"] for r in recs if "heur_ratio" in r]
    if key != "milp":  # ratio against the gap run's plan
        ratios = [
            r["heuristic"]["cost"] / r[key]["cost"]
            for r in recs
            if r["heuristic"]["cost"] is not None and r[key]["cost"] is not None
        ]
    diffs = [r["milp_vs_enum"] for r in recs if "milp_vs_enum" in r and key == "milp"]
    workers = [r[key]["workers"] for r in recs if r[key]["workers"] is not None]
    no_heur = sum(1 for r in recs if r["heuristic"]["cost"] is None and r[key]["cost"] is not None)
    ratio_max = fmt(max(ratios), ".4f") if ratios else "n/a"
    if no_heur:
        ratio_max += f" ({no_heur} no plan)"
    space = max(r["space"] for r in recs)
    return (
        f"| {label} | {len(recs)} | {space:.2g} | {status_counts(recs, key)} | {fmt(med(milp_s))} "
        f"| {fmt(max(milp_s))} | {fmt(med(heur_s))} | {fmt(max(heur_s))} | {fmt(med(enum_s))} "
        f"| {fmt(statistics.fmean(ratios) if ratios else None, '.4f')} | {ratio_max} "
        f"| {fmt(max(diffs), '.1e') if diffs else 'n/a'} | {fmt(med(workers), 'g')} |"
    )


SERVERLESS_HEADER = (
    "| rung | inst | milp opt/gap/lim | milp med ms | milp max ms | heur med ms "
    "| enum med ms | heur/milp mean | heur/milp max | max rel diff milp-enum | med n* |"
)


def serverless_row(label: str, recs: list[dict]) -> str:
    ms = 1000.0
    milp_s = [r["milp"]["seconds"] for r in recs]
    ratios = [r["heur_ratio"] for r in recs if "heur_ratio" in r]
    diffs = [r["milp_vs_enum"] for r in recs if "milp_vs_enum" in r]
    n = [r["milp"]["workers"] for r in recs if r["milp"]["workers"] is not None]
    no_heur = sum(1 for r in recs if r["heuristic"]["cost"] is None and r["milp"]["cost"] is not None)
    ratio_max = fmt(max(ratios), ".4f") if ratios else "n/a"
    if no_heur:
        ratio_max += f" ({no_heur} no plan)"
    return (
        f"| {label} | {len(recs)} | {status_counts(recs, 'milp')} | {fmt(med(milp_s), '.1f', ms)} "
        f"| {fmt(max(milp_s), '.1f', ms)} | {fmt(med([r['heuristic']['seconds'] for r in recs]), '.1f', ms)} "
        f"| {fmt(med([r['enumerate']['seconds'] for r in recs]), '.1f', ms)} "
        f"| {fmt(statistics.fmean(ratios) if ratios else None, '.4f')} | {ratio_max} "
        f"| {fmt(max(diffs), '.1e') if diffs else 'n/a'} | {fmt(med(n), 'g')} |"
    )


LARGE_HEADER = "| rung | inst | plans (max) | milp opt/gap/lim | milp med s | milp max s | milp total s | med K* |"


def large_row(recs: list[dict]) -> str:
    milp_s = [r["milp"]["seconds"] for r in recs]
    workers = [r["milp"]["workers"] for r in recs if r["milp"]["workers"] is not None]
    return (
        f"| large | {len(recs)} | {max(r['space'] for r in recs):.2g} | {status_counts(recs, 'milp')} "
        f"| {fmt(med(milp_s))} | {fmt(max(milp_s))} | {fmt(sum(milp_s))} | {fmt(med(workers), 'g')} |"
    )


PAPER_SETTING_HEADER = (
    "| rung | SLOs | milp proved | milp feasible | milp cheaper | milp total s | milp med ms "
    "| heur total s | heur med ms | milp/heur (totals) |"
)


def paper_setting_row(rec: dict) -> str:
    total, median = rec["total_s"], rec["median_s"]
    return (
        f"| paper-setting | {len(rec['slos'])} | {rec['proven']} | {rec['feasible']} | {rec['cheaper']} "
        f"| {fmt(total['milp'])} | {fmt(median['milp'], '.1f', 1000.0)} | {fmt(total['heuristic'])} "
        f"| {fmt(median['heuristic'], '.1f', 1000.0)} | {fmt(rec['ratio'], '.2f')} |"
    )


def verdict(met: bool) -> str:
    return "met" if met else "not met"


@dataclass(frozen=True)
class TimeTarget:
    """An issue 10 target on milp's worst CPU time over a rung (and, if ``all_proven``, its proofs)."""

    case: str
    rung: str
    worst_s: float
    all_proven: bool
    unit: str = "CPU s"

    def row(self, recs: list[dict]) -> str:
        """| case | measured | target | verdict | for the rung's records."""
        scale, spec = (1000.0, ".1f") if self.unit == "CPU ms" else (1.0, ".2f")
        seconds = [r["milp"]["seconds"] for r in recs]
        proven = sum(r["milp"]["status"] in PROVEN for r in recs)
        measured = (
            f"{proven}/{len(recs)} proven, median {fmt(med(seconds), spec, scale)}, "
            f"worst {fmt(max(seconds), spec, scale)} {self.unit}"
        )
        target = ("all proven, " if self.all_proven else "") + f"worst <= {self.worst_s * scale:g} {self.unit}"
        met = max(seconds) <= self.worst_s and (proven == len(recs) or not self.all_proven)
        return f"| {self.case} | {measured} | {target} | {verdict(met)} |"


TIME_TARGETS = (
    TimeTarget("large set (30 instances)", "large", 10.0, all_proven=True),
    TimeTarget("80 types x quota 16", "80x16", 15.0, all_proven=True),
    TimeTarget("40 types x quota 16", "40x16", 5.0, all_proven=True),
    TimeTarget(
        "serverless, m_max 10,240 MB, 10,000 functions", "serverless-10k", 0.050, all_proven=False, unit="CPU ms"
    ),
    # issue 19
    TimeTarget("40 x 16, every generator", "40x16-mix", 15.0, all_proven=True),
    TimeTarget("80 x 16, every generator", "80x16-mix", 15.0, all_proven=True),
    TimeTarget("the 80 x 16 tail instance", "80x16-tail", 10.0, all_proven=True),
)
PAPER_SETTING_RATIO = 3.0  # target: milp's total CPU time at most 3 x the heuristic's
TARGETS_HEADER = "| case | measured | target | verdict |"


def target_rows(by_rung: dict[str, list[dict]], paper: dict | None) -> list[str]:
    """The issue 10 targets table's rows, for the cases that were run."""
    rows = [t.row(by_rung[t.rung]) for t in TIME_TARGETS if by_rung.get(t.rung)]
    if paper is not None:
        total = paper["total_s"]
        rows.append(
            f"| 7 x 10 paper setting, {len(paper['slos'])} SLOs | milp {total['milp']:.3f} CPU s, heuristic "
            f"{total['heuristic']:.3f} CPU s: {paper['ratio']:.2f} x; {paper['proven']}/{len(paper['slos'])} "
            f"proven | milp total <= {PAPER_SETTING_RATIO:g} x the heuristic's total "
            f"| {verdict(paper['ratio'] <= PAPER_SETTING_RATIO)} |"
        )
    return rows


def print_table(header: str, rows: list[str]) -> None:
    """A markdown table (preceded by a blank line)."""
    print()
    print(header)
    print("|" + "---|" * (header.count(" | ") + 1))
    for row in rows:
        print(row)


# ---------------------------------------------------------------- main
def machine() -> str:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    return (
        f"nproc {cpus}, Python {platform.python_version()}, highspy {version('highspy')}, "
        f"numpy {np.__version__}, dnnprov {dnnprov.__version__}, {platform.machine()} "
        f"{platform.system()}; load average at start {load}"
    )


def revision() -> str:
    """The git commit of the tree (and whether it has local changes), if git is at hand."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    return (commit or "unknown") + (" with local changes" if dirty else "")


def warm_up() -> None:
    """One tiny solve per method so imports and HiGHS start-up are not timed."""
    problem = embedded_spot()[0]
    for method in ("milp", "heuristic", "enumerate"):
        dnnprov.solve(problem, method)
    sl = random_serverless(np.random.default_rng(0), "warm-up")
    for method in ("milp", "heuristic", "enumerate"):
        dnnprov.solve(sl, method)


#: rungs that could not run for want of a file (not by choice): exit 1 unless --allow-skip
SKIPPED: list[str] = []


def spot_problems(size: str, args, per_size: int) -> list[tuple[str, dnnprov.SpotProblem, bool]]:
    """(tag, problem, gap run?) for each instance of spot rung ``size``, honouring --index."""
    if size == "paper":
        # fixed files: skipped when --index picks random instances
        return [] if args.index is not None else [(p.name, p, False) for p in embedded_spot()]
    if size == "80x16-tail":  # a fixed file, as above; skipped with a note when ../shared is absent
        if args.index is not None or not TAIL_INSTANCE.exists():
            print(f"  (skipped: {TAIL_INSTANCE} not found)" if args.index is None else "  (skipped: --index)")
            if args.index is None:
                SKIPPED.append(f"{size}: {TAIL_INSTANCE} not found")
            return []
        return [(TAIL_INSTANCE.name, dnnprov.read_instance(TAIL_INSTANCE), False)]
    index = [r.name for r in RUNGS].index(size)
    rung = RUNGS[index]
    problems = []
    if size == "7x10" and args.index is None:
        problems.append((EMBEDDED_7X10, dnnprov.read_instance(dnnprov.embedded_instance(EMBEDDED_7X10)), False))
    for i in range(per_size - (1 if size == "7x10" else 0)):
        if args.index is not None and i not in args.index:
            continue
        rng = np.random.default_rng([args.seed, index + 1, i])
        name = f"ladder-{size}-s{args.seed}-{i}"
        if rung.mixed:  # every (generator, loss variant) pair once in 12 instances; PS 1..1-3
            generators = ladder_generators.GENERATORS
            variant = VARIANTS[(i // len(generators)) % len(VARIANTS)]
            drawn = replace(rung, ps=int(rng.integers(1, rung.ps + 1)))
            problem = random_spot(rng, drawn, variant, name, generators[i % len(generators)])
        else:
            problem = random_spot(rng, rung, VARIANTS[i % len(VARIANTS)], name)
        problems.append((f"{size}[{i}] seed {args.seed}", problem, rung.gap_run))
    return problems


def serverless_problems(rung: ServerlessRung, count: int, args) -> list[tuple[str, dnnprov.ServerlessProblem]]:
    """(tag, problem) for each random instance of ``rung``, honouring --index."""
    return [
        (
            f"{rung.name}[{i}] seed {args.seed}",
            random_serverless(
                np.random.default_rng([args.seed, rung.stream, i]), f"ladder-{rung.name}-s{args.seed}-{i}", rung
            ),
        )
        for i in range(count)
        if args.index is None or i in args.index
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="2 instances per rung, up to 15x24, and the serverless rungs (a smoke run of a few minutes)",
    )
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument(
        "--per-size", type=int, default=None, help="random instances per rung (default 12; 2 with --quick)"
    )
    for rung in SERVERLESS_RUNGS:
        parser.add_argument(
            f"--{rung.name}",
            type=int,
            default=None,
            help=f"random {rung.name} instances (default {rung.instances}; {rung.quick_instances} with --quick)",
        )
    parser.add_argument("--time-limit", type=float, default=60.0, help="milp time limit, s (default 60)")
    parser.add_argument(
        "--sizes",
        nargs="+",
        choices=RUNG_NAMES,
        default=None,
        help="rungs to run (default: all; with --quick all up to 15x24 and the serverless rungs)",
    )
    parser.add_argument(
        "--index",
        type=int,
        nargs="+",
        default=None,
        help="run only these random-instance indices of each rung (to re-run one)",
    )
    parser.add_argument(
        "--jsonl",
        type=Path,
        default=None,
        help="write one JSON record per instance (paper-setting: one for its SLO set)",
    )
    parser.add_argument("--dump", type=Path, default=None, help="write the instances as JSON files here")
    parser.add_argument(
        "--allow-missed", action="store_true", help="exit 0 even when a target of the targets table is missed"
    )
    parser.add_argument(
        "--allow-skip", action="store_true", help="exit 0 even when a rung's fixed file is absent (../shared)"
    )
    args = parser.parse_args()
    per_size = args.per_size if args.per_size is not None else (2 if args.quick else 12)
    serverless_count = {}
    for rung in SERVERLESS_RUNGS:
        chosen = getattr(args, rung.name.replace("-", "_"))
        serverless_count[rung.name] = (
            chosen if chosen is not None else (rung.quick_instances if args.quick else rung.instances)
        )
    if args.sizes is not None:
        sizes = list(args.sizes)
    else:
        sizes = (
            ["paper"]
            + [r.name for r in RUNGS if r.quick or not args.quick]
            + ([] if args.quick else ["80x16-tail"])
            + list(SERVERLESS_BY_NAME)
            + ([] if args.quick else ["paper-setting", "large"])
        )

    started = time.perf_counter()
    print(f"# dnnprov scale ladder, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    print(f"# machine: {machine()}")
    print(f"# tree: {revision()}")
    print(f"# command: {' '.join([Path(sys.executable).name] + sys.argv)}")
    print(
        f"# seed {args.seed}, {per_size} random instances per rung, milp time limit "
        f"{args.time_limit:g} s, enumerate up to {ENUMERATE_MAX_PLANS:,} plans",
        flush=True,
    )
    warm_up()
    out = args.jsonl.open("w") if args.jsonl else None
    if args.dump:
        args.dump.mkdir(parents=True, exist_ok=True)
    anomalies: list[str] = []
    spot_rows: list[str] = []
    serverless_rows: list[str] = []
    by_rung: dict[str, list[dict]] = {}
    paper: dict | None = None

    def record(rung: str, rec: dict, line: str | None = None) -> None:
        """Write ``rec`` (tagged with its rung) to --jsonl and print ``line`` or the instance summary."""
        if out:
            out.write(json.dumps({"rung": rung, **rec}) + "\n")
            out.flush()
        if line is None:
            m = rec["milp"]
            line = (
                f"  {rec['rung_instance']}: milp {m['status']} {fmt(m['cost'], '.6g')} in {m['seconds']:.3f} s"
                f" ({'n' if 'space' not in rec else 'K'} {m['workers']})"
                + (f"; heuristic {fmt(rec['heuristic']['cost'], '.6g')}" if "heuristic" in rec else "")
                + (
                    f"; gap run {rec['milp_gap']['status']} {rec['milp_gap']['seconds']:.3f} s"
                    if "milp_gap" in rec
                    else ""
                )
                + (
                    f"; enumerate {fmt(rec['enumerate']['cost'], '.6g')} in {rec['enumerate']['seconds']:.2f} s"
                    if "enumerate" in rec
                    else ""
                )
            )
        print(line, flush=True)

    def dump(problem: dnnprov.SpotProblem | dnnprov.ServerlessProblem) -> None:
        if args.dump:
            dnnprov.write_instance(problem, args.dump / f"{problem.name}.json")

    for size in sizes:
        t_rung = time.perf_counter()
        print(f"## {size}", flush=True)
        recs: list[dict] = []
        if size in SERVERLESS_BY_NAME:
            for tag, problem in serverless_problems(SERVERLESS_BY_NAME[size], serverless_count[size], args):
                dump(problem)
                recs.append(run_serverless(problem, args, tag, anomalies))
                record(size, recs[-1])
            if recs:
                serverless_rows.append(serverless_row(size, recs))
        elif size == "paper-setting":
            if args.index is None:  # a fixed instance: skipped when --index picks random instances
                paper = run_paper_setting(anomalies)
                record(size, paper, paper_setting_row(paper))
        elif size == "large":
            if args.index is None:  # fixed files, as above
                for rec in run_large(args, anomalies):
                    recs.append(rec)
                    record(size, rec)
        else:
            for tag, problem, gap_run in spot_problems(size, args, per_size):
                dump(problem)
                recs.append(run_spot(problem, args, gap_run, tag, anomalies))
                record(size, recs[-1])
            if recs:
                new_rows = [spot_row(size, recs)]
                if any("milp_gap" in r for r in recs):
                    new_rows.append(spot_row(f"{size} gap 0.5%", [r for r in recs if "milp_gap" in r], "milp_gap"))
                for row in new_rows:
                    print(row, flush=True)
                spot_rows += new_rows
        by_rung[size] = recs
        print(f"## {size} done in {time.perf_counter() - t_rung:.1f} s", flush=True)
    if out:
        out.close()

    if spot_rows:
        print_table(SPOT_HEADER, spot_rows)
    if serverless_rows:
        print_table(SERVERLESS_HEADER, serverless_rows)
    if by_rung.get("large"):
        print_table(LARGE_HEADER, [large_row(by_rung["large"])])
    if paper is not None:
        print_table(PAPER_SETTING_HEADER, [paper_setting_row(paper)])
    targets = target_rows(by_rung, paper)
    if targets:
        print("\nTargets (issues 10 and 19)")
        print_table(TARGETS_HEADER, targets)
    print()
    print("anomalies: " + ("none" if not anomalies else ""))
    for a in anomalies:
        print(f"  - {a}")
    print(f"total time {time.perf_counter() - started:.1f} s")
    missed = [row for row in targets if row.endswith("| not met |")]
    skipped = SKIPPED and not args.allow_skip
    if anomalies or (missed and not args.allow_missed) or skipped:
        print(
            f"exit 1: {len(anomalies)} anomalies, {len(missed)} targets missed"
            + (" (allowed)" if args.allow_missed else "")
            + (f", skipped: {'; '.join(SKIPPED)}" if skipped else "")
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
