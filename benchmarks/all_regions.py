"""The real all-regions catalog (issue 33): every GPU pool the 2025 data prices, one job solved exactly.

    nice -n 10 .venv/bin/python benchmarks/all_regions.py [--shared-data DIR] [--ladder] [--allow-skip]

Imports ``../shared/data`` over every region it prices (``dnnprov catalog import --region all``:
one (type, region) pool per column, ``TYPE@REGION``), builds one spot instance per
(workload, deadline) with ``dnnprov build --estimate-unprofiled`` (every pool whose GPU a
profile can be estimated for: the NVIDIA types; AMD and ARM GPUs have no reference) and
solves it with ``milp``, with workers in any region and under the one-region rule
(``dnnprov.cloud.regions.solve_one_region``, the default of ``dnnprov solve``). Prints the number of columns, the status and the CPU seconds of
each solve; exits 1 when a solve is not proven optimal or takes more than 10 CPU s.

``--ladder`` adds synthetic instances of 500-2,000 columns: the real pools repeated over
made-up regions with prices scaled by a seeded factor in [0.7, 1.3] (target: proven, worst
at most 60 CPU s; each pool's quota is at most 16,384 / columns, the workers limit). Without the shared data it says why and exits 2 (0 with ``--allow-skip``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np

import dnnprov
from dnnprov.cli import main as cli
from dnnprov.cloud.regions import solve_one_region
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.importing import default_shared_data, write_catalog
from dnnprov.io.catalogs.regions import import_regions
from dnnprov.problems.validation.checks import MAX_WORKERS

TARGET_CPU_S = 10.0
LADDER_TARGET_CPU_S = 60.0
#: (profile, target loss, deadlines in s): the deadlines go from loose to tight (larger clusters).
JOBS = (("spot/resnet110-paper", 0.8, (3600.0, 1800.0, 900.0)), ("spot/vgg19", 4.0, (7200.0, 3600.0)))
LADDER = (500, 1000, 1500, 2000)


def commit() -> str:
    """The checkout's commit (short), or ``unknown``."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def build(catalog: Path, profile: str, loss: float, deadline: float, out: Path) -> dnnprov.SpotProblem:
    """``dnnprov build`` of one job on ``catalog`` (every estimable pool, quota 10 each)."""
    argv = ["build", "--catalog", str(catalog), "--profile", profile, "--target-loss", str(loss)]
    argv += ["--deadline", str(deadline), "--estimate-unprofiled", "--out", str(out), "--force"]
    if cli(argv) != 0:
        raise SystemExit(f"dnnprov build failed: {' '.join(argv)}")
    problem = dnnprov.read_instance(out)
    assert isinstance(problem, dnnprov.SpotProblem)
    return problem


def solve(problem: dnnprov.SpotProblem, limit: float, one_region: bool = False) -> tuple[str, float, object]:
    """Status, CPU seconds and plan of one ``milp`` solve (``one_region``: under the one-region rule)."""
    started = time.process_time()
    result = (solve_one_region if one_region else dnnprov.solve)(problem, "milp", time_limit_s=limit)
    cpu = time.process_time() - started
    plan = {k: n for k, n in result.plan.counts.items() if n} if result.plan is not None else None
    return result.status.value, cpu, plan


def synthetic(problem: dnnprov.SpotProblem, columns: int, seed: int) -> dnnprov.SpotProblem:
    """``columns`` pools: the real ones repeated over made-up regions, prices scaled by a seeded factor."""
    rng = np.random.default_rng(seed)
    real = problem.instance_types
    quota = min(real[0].quota, MAX_WORKERS // columns)  # the quotas summed stay within the workers limit
    types = []
    for i in range(columns):
        t = real[i % len(real)]
        copy = i // len(real)
        name = t.name if copy == 0 else f"{t.name.split('@')[0]}@syn{copy}-{t.name.split('@')[1]}"
        price = round(t.spot_price_per_h * rng.uniform(0.7, 1.3), 6)
        types.append(replace(t, name=name, spot_price_per_h=price, quota=min(t.quota, quota)))
    return problem.replace(instance_types=tuple(types), name=f"{problem.name}-{columns}-{seed}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared-data", default=None)
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--ladder", action="store_true", help="also the synthetic 500-2,000-column ladder")
    parser.add_argument("--seeds", type=int, default=2, help="synthetic instances per ladder rung (default 2)")
    parser.add_argument("--allow-skip", action="store_true", help="exit 0 when the shared data is absent")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the ESTIMATED-types warning of every build (the docstring says which)
    if (args.shared_data or default_shared_data()) is None:
        print("skipped: no ../shared/data beside this checkout (pass --shared-data DIR)")
        return 0 if args.allow_skip else 2
    print(f"commit {commit()}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        started = time.process_time()
        try:
            catalog = import_regions(None, args.shared_data)
        except InvalidInputError as exc:
            print(f"skipped: {exc}")
            return 0 if args.allow_skip else 2
        path = write_catalog(catalog, Path(tmp) / "all.json")
        priced = [e for e in catalog.instance_types if e.spot_price_per_h is not None]
        print(
            f"catalog: {len(catalog.regions)} regions, {len(catalog.instance_types)} pools, {len(priced)} spot-priced "
            f"({len({e.base_name for e in priced})} GPU types); import {time.process_time() - started:.2f} CPU s"
        )
        widest = None
        for profile, loss, deadlines in JOBS:
            for deadline in deadlines:
                problem = build(path, profile, loss, deadline, Path(tmp) / "job.json")
                widest = widest or problem
                for rule in ("any region", "one region"):
                    status, cpu, plan = solve(problem, args.time_limit, one_region=rule == "one region")
                    good = status == "optimal" and cpu <= TARGET_CPU_S
                    ok &= good
                    print(
                        f"{profile} loss {loss:g} deadline {deadline:g} s, {rule}: {len(problem.instance_types)} "
                        f"columns, {status}, {cpu:.2f} CPU s{'' if good else '  MISSED'}; {plan}"
                    )
        if args.ladder and widest is not None:
            worst = 0.0
            for columns in LADDER:
                for seed in range(args.seeds):
                    for rule in ("any region", "one region"):
                        status, cpu, _ = solve(synthetic(widest, columns, seed), args.time_limit, rule == "one region")
                        good = status == "optimal" and cpu <= LADDER_TARGET_CPU_S
                        ok &= good
                        worst = max(worst, cpu)
                        print(
                            f"synthetic {columns} columns seed {seed}, {rule}: {status}, {cpu:.2f} CPU s"
                            + ("" if good else "  MISSED")
                        )
            print(f"ladder worst {worst:.2f} CPU s (target {LADDER_TARGET_CPU_S:g})")
    print("all targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
