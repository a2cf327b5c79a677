"""Throughput of joint provisioning (:func:`dnnprov.solvers.joint.provision.solve_many`).

Prints, for sets of spot jobs sharing per-type and vCPU quotas and for large sets of
serverless jobs sharing one concurrency limit: column generation time, LP time, columns
before and after reduced-cost fixing, MILP time, total, and the proven status. The issue's
target: 1,000 spot jobs sharing quotas solved jointly to proven optimality in under 60 s
(checked when ``--spot`` includes 1000: exit 1 when missed, unless ``--allow-missed``).

    .venv/bin/python benchmarks/joint_throughput.py                 # 20, 100, 200, 1000 spot; 10000 serverless
    .venv/bin/python benchmarks/joint_throughput.py --spot 20 100 --serverless 2000

Jobs come from a seeded generator: every spot job draws 3-5 of the seven Table III types
with quotas 1-6 (boxes of at most 7^5 = 16,807 count vectors), a workload profile (the
ResNet-110 reference profile with speeds and loss coefficients perturbed per job, model
"paper", with or without the CC term) and SLOs set around a random plan of its box, so
that jobs are distinct (no column cache hits) and nearly all feasible. Shared limits are
the use of a feasible assignment in which half the jobs moved off the three most popular
types (see :func:`spot_limits`): feasible by construction and binding, since the jobs'
stand-alone optima together exceed them.
Serverless jobs vary the four Table 5 workloads (rates perturbed), memory grids and
objective times; the concurrency limit is ``tightness`` times their stand-alone functions.

``--synthetic JOBS...`` also times steps 2-3 alone (LP, fixing, MILP;
:func:`~dnnprov.solvers.joint.provision.solve_columns`) on random fronts of ``--per-job`` columns
that do not come from the models: a stress case where every column is on the front and
all eight rows are tight (see :func:`synthetic_columns`).

    .venv/bin/python benchmarks/joint_throughput.py --spot 200 1000 --types 5 6 --max-quota 8
    .venv/bin/python benchmarks/joint_throughput.py --spot --serverless --synthetic 100 200
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np
from dnnprov.formulations.joint import JobColumns
from dnnprov.solvers.joint.provision import SharedLimits, generate_columns, solve_columns, solve_many

import dnnprov

# Table III types: name, GPUs, vCPUs, spot $/h, per-GPU batch, lone-worker speed (samples/s).
# Speeds of the five reference-code types are the code's; g4dn.12xlarge and g3.4xlarge are
# scaled from g4dn.4xlarge and g3.8xlarge (estimated, for benchmarking only).
POOL = (
    ("p3.2xlarge", 1, 8, 1.25, 1024, 1885.0),
    ("p2.8xlarge", 8, 32, 2.16, 1024, 2115.0),
    ("g4dn.12xlarge", 4, 48, 1.22, 1024, 2600.0),
    ("g4dn.4xlarge", 1, 16, 0.36, 1024, 750.0),
    ("g3.16xlarge", 4, 64, 1.37, 512, 1995.0),
    ("g3.8xlarge", 2, 32, 0.69, 512, 1018.0),
    ("g3.4xlarge", 1, 16, 0.34, 512, 509.0),
)

# serverless.md Table 5 (n_t: standard training-set sizes; storage coefficients estimated)
SERVERLESS = (
    ("espcn", 128.7, 200, 0.34, 16, 256, 0.001, -2.3),
    ("1dcnn", 41.1, 25000, 2.0, 32, 512, 0.1, -8.8),
    ("mobilenet", 148.0, 50000, 18.0, 64, 512, 0.03, 5.6),
    ("resnet50", 148.0, 50000, 98.0, 128, 1024, 0.003, 11.3),
)


def spot_job(
    rng: np.random.Generator, index: int, type_range: tuple[int, int] = (3, 5), max_quota: int = 6
) -> dnnprov.SpotProblem:
    """One random, nearly always feasible spot job over ``type_range`` pool types, quotas <= ``max_quota``."""
    low, high = type_range
    while True:
        picks = sorted(rng.choice(len(POOL), size=int(rng.integers(low, high + 1)), replace=False))
        types = []
        for i in picks:
            name, gpus, vcpus, price, batch, speed = POOL[i]
            types.append(
                dnnprov.InstanceType(
                    name=name,
                    gpus=gpus,
                    vcpus=vcpus,
                    quota=int(rng.integers(1, max_quota + 1)),
                    spot_price_per_h=price,
                    batch_per_gpu=batch,
                    speed_samples_per_s=speed * float(rng.uniform(0.8, 1.2)),
                )
            )
        variant = str(rng.choice(["cc", "no-cc"]))
        workload = dnnprov.SpotWorkload(
            name=f"resnet110-like-{index}",
            param_size_mb=11.5 * float(rng.uniform(0.5, 2.0)),
            bandwidth_req_mb_s=142.0,
            alpha_1=0.8,
            beta_1=-1.92,
            gamma_1=876.5 * float(rng.uniform(0.8, 1.2)),
            gamma_2=-0.2,
            gamma_3=2507.6 * float(rng.uniform(0.9, 1.1)),
            gamma_4=float(rng.choice([0.1, 1.0])),
            gamma_5=0.5,
            loss_variant=variant,
            estimated=("gamma_4",) if variant == "cc" else (),
        )
        draft = dnnprov.SpotProblem(
            instance_types=tuple(types),
            workload=workload,
            slo=dnnprov.SpotSLO(loss=float(rng.uniform(0.7, 0.95)), time_s=1e9),
            platform=dnnprov.SpotPlatform(ps_price_per_h=0.192),
            model="paper",
            name=f"spot-{index}",
        )
        model = dnnprov.SpotModel(draft)
        cols = model.columns
        plan = rng.integers(0, cols.upper + 1)
        if plan.sum() == 0:
            continue
        ev = model.evaluate(plan[None, :], 1)
        if np.isfinite(ev.time_s[0]) and ev.time_s[0] > 0:
            return draft.replace(
                slo=dnnprov.SpotSLO(loss=draft.slo.loss, time_s=float(ev.time_s[0]) * float(rng.uniform(0.9, 1.5)))
            )


def serverless_job(rng: np.random.Generator, index: int) -> dnnprov.ServerlessProblem:
    """One random serverless job (Table 5 workload, perturbed) with at most 100 functions."""
    name, dataset, samples, model_mb, local, max_global, alpha, beta = SERVERLESS[int(rng.integers(0, 4))]
    workload = dnnprov.ServerlessWorkload(
        name=name,
        dataset_mb=dataset,
        samples=samples,
        epochs=float(rng.choice([1, 2, 3])),
        model_mb=model_mb,
        local_batch=local,
        max_global_batch=max_global,
        rate_alpha=alpha * float(rng.uniform(0.8, 1.2)),
        rate_beta=beta,
        storage_alpha=0.0,
        storage_beta=float(rng.uniform(5, 10)),
        min_memory_mb=1024,
        estimated=("storage_alpha", "storage_beta"),
    )
    platform = dnnprov.ServerlessPlatform(max_memory_mb=int(rng.choice([3008, 10240])), concurrency_limit=100)
    draft = dnnprov.ServerlessProblem(workload=workload, time_s=1e9, platform=platform, name=f"fn-{index}")
    model = dnnprov.ServerlessModel(draft)
    grid = draft.memory_grid()
    while True:
        ev = model.evaluate(int(rng.integers(2, 40)), grid[int(rng.integers(0, len(grid)))], 1)
        if np.isfinite(ev.time_s):
            return draft.replace(time_s=float(ev.time_s) * float(rng.uniform(0.8, 1.5)))


def spot_limits(jobs: list[dnnprov.SpotProblem], switch: float, seed: int) -> SharedLimits:
    """Binding but feasible shared limits: the use of a mixed assignment.

    Every job's Pareto columns are generated with all seven types and the G family's spot
    vCPUs shared (not timed). A fraction ``switch`` of the jobs (drawn at random) takes the
    column that uses the fewest instances of the three types the jobs would use most on
    their own (cheapest among those); the rest keep their stand-alone optimum. The shared
    limits are that assignment's use of every row: feasible by construction, and binding
    because the stand-alone optima together exceed them.
    """
    loose = SharedLimits(
        quotas={name: 10**6 for name, *_ in POOL},
        vcpu_quotas=(dnnprov.VcpuQuota(family="G", market="spot", vcpus=10**9),),
    )
    generated = generate_columns(jobs, loose)
    rows = list(loose.rows())
    alone = {r: sum(float(g.columns.usage.get(r, [0.0])[0]) for g in generated) for r in rows}
    top = [r for r in sorted(rows, key=alone.get, reverse=True) if r.startswith("quota:")][:3]
    rng = np.random.default_rng(seed)
    use = dict.fromkeys(rows, 0.0)
    for g in generated:
        c = g.columns
        k = 0
        if rng.random() < switch:
            scarce = sum(c.usage.get(r, np.zeros(len(c))) for r in top)
            k = int(np.lexsort((c.cost, scarce))[0])
        for r, a in c.usage.items():
            use[r] += float(a[k])
    quotas = {r.removeprefix("quota:"): int(use[r]) for r in rows if r.startswith("quota:")}
    vcpus = int(use["vcpu:G/spot"])
    return SharedLimits(quotas=quotas, vcpu_quotas=(dnnprov.VcpuQuota(family="G", market="spot", vcpus=vcpus),))


def feasible_jobs(make, count: int, seed: int) -> list:
    """``count`` jobs from ``make(rng, i)`` that are feasible on their own (seeded)."""
    rng = np.random.default_rng(seed)
    jobs: list = []
    while len(jobs) < count:
        batch = [make(rng, len(jobs) + i) for i in range(count - len(jobs))]
        alone = solve_many(batch, time_limit_s=3600, cache=False)
        if alone.status is dnnprov.Status.OPTIMAL:
            return jobs + batch
        jobs += [p for p, r in zip(batch, alone.results) if r.status is not dnnprov.Status.INFEASIBLE]
    return jobs


def synthetic_columns(jobs: int, per_job: int, rows: int, seed: int) -> tuple[list[JobColumns], dict[str, float]]:
    """Random Pareto fronts (not from the models) to time steps 2-3 at ~``per_job`` columns per job.

    Job j's columns use ``u`` in {0..6}^rows and cost ``base_j (1 + 3 / (1 + w_j . u))``,
    decreasing in every coordinate, so no column dominates another. Limits: the use of an
    assignment where each job minimizes cost + a random penalty on half the rows (feasible,
    binding, and not LP-optimal).
    """
    rng = np.random.default_rng(seed)
    columns, use = [], np.zeros(rows)
    for j in range(jobs):
        u = np.unique(rng.integers(0, 7, size=(per_job, rows)), axis=0).astype(float)
        cost = float(rng.uniform(1, 10)) * (1 + 3 / (1 + u @ rng.uniform(0.05, 0.5, rows)))
        columns.append(JobColumns(f"synthetic-{j}", cost, {f"row{r}": u[:, r] for r in range(rows)}))
        penalty = rng.uniform(0, 0.5, rows) * (rng.random(rows) < 0.5)
        use += u[int(np.argmin(cost + u @ penalty))]
    return columns, {f"row{r}": float(use[r]) for r in range(rows)}


def row(label: str, result, alone_cost: float | None) -> str:
    """One table row of the measured numbers."""
    s = result.stats
    price = "" if alone_cost is None or result.cost is None else f"{100 * (result.cost / alone_cost - 1):+.2f} %"
    return (
        f"| {label} | {s['columns_seconds']:.2f} | {s.get('lp_seconds', 0):.2f} | "
        f"{s.get('columns', 0):,} ({s.get('columns', 0) / s['jobs']:.1f}/job) | "
        f"{s.get('columns_after_fixing', 0):,} | {s.get('incumbent_seconds', 0):.2f} | "
        f"{s.get('milp_seconds', 0):.2f} | {result.solve_seconds:.2f} | {result.status.value} | {price} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spot", type=int, nargs="*", default=[20, 100, 200, 1000])
    parser.add_argument("--serverless", type=int, nargs="*", default=[10000])
    parser.add_argument(
        "--tightness", type=float, default=0.7, help="serverless: shared concurrency / stand-alone functions"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--types",
        type=int,
        nargs=2,
        default=[3, 5],
        metavar=("MIN", "MAX"),
        help="instance types per spot job (of the seven)",
    )
    parser.add_argument("--max-quota", type=int, default=6, help="largest per-job quota of a type")
    parser.add_argument(
        "--synthetic",
        type=int,
        nargs="*",
        default=[],
        metavar="JOBS",
        help="also time steps 2-3 (LP, fixing, MILP) on random fronts of --per-job columns",
    )
    parser.add_argument("--per-job", type=int, default=1500)
    parser.add_argument("--time-limit", type=float, default=600.0)
    parser.add_argument("--allow-missed", action="store_true", help="exit 0 even when the 1,000-job target is missed")
    args = parser.parse_args()
    missed = False

    print(f"spot jobs: {args.types[0]}-{args.types[1]} types, quotas <= {args.max_quota}; seed {args.seed}")
    print(
        "| jobs | columns (s) | LP (s) | columns | after fixing | incumbent (s) | MILP (s) | total (s) "
        "| status | cost vs stand-alone |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for count in args.spot:
        jobs = feasible_jobs(
            lambda rng, i: spot_job(rng, i, tuple(args.types), args.max_quota), count, args.seed + count
        )
        alone = solve_many(jobs, time_limit_s=3600)
        limits = spot_limits(jobs, 0.5, args.seed)
        result = solve_many(jobs, shared=limits, time_limit_s=args.time_limit)
        print(row(f"{count:,} spot", result, alone.cost), flush=True)
        if count == 1000 and not (result.status.value == "optimal" and result.solve_seconds < 60):
            missed = True
            print("target MISSED: 1,000 spot jobs not proven optimal within 60 s", flush=True)
    for count in args.serverless:
        jobs = feasible_jobs(serverless_job, count, args.seed + count)
        alone = solve_many(jobs, time_limit_s=3600)
        functions = sum(r.plan.functions for r in alone.results)
        limits = SharedLimits(concurrency=math.ceil(args.tightness * functions))
        result = solve_many(jobs, shared=limits, time_limit_s=args.time_limit)
        print(
            row(f"{count:,} serverless (limit {limits.concurrency:,} of {functions:,} functions)", result, alone.cost),
            flush=True,
        )
    for count in args.synthetic:
        columns, limits = synthetic_columns(count, args.per_job, 8, args.seed + count)
        started = time.perf_counter()
        solved = solve_columns(columns, limits, deadline=started + args.time_limit)
        s = solved.stats
        total = sum(len(c) for c in columns)
        print(
            f"| {count:,} synthetic fronts, 8 rows | - | {s['lp_seconds']:.2f} | "
            f"{total:,} ({total / count:.0f}/job) | "
            f"{s['columns_after_fixing']:,} | {s['incumbent_seconds']:.2f} | {s['milp_seconds']:.2f} | "
            f"{time.perf_counter() - started:.2f} | {solved.status.value} | |",
            flush=True,
        )
    return 1 if missed and not args.allow_missed else 0


if __name__ == "__main__":
    sys.exit(main())
