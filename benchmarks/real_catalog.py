"""A real catalog (issue 10): every GPU offer of us-east-1 in the 2025 data, two workloads.

    .venv/bin/python benchmarks/real_catalog.py [--shared-data DIR] [--time-limit 60] [--allow-skip]

Builds, for the ResNet-110 (paper) and VGG-19 profiles, one instance with every NVIDIA GPU
type of us-east-1 that ``../shared/data`` prices for 2025 (spot = on-demand x (1 - Spot
Advisor savings), the Spot Advisor interruption bucket kept), both markets as columns
(spot quota min(32, family vCPUs / type vCPUs), on-demand min(16, ...)), and the default
AWS-style vCPU quotas per family and market (spot G 256, P 512; on-demand G 128, P 256).
The deadline makes a cluster of several workers (up to the profile's |N| range) necessary (``dnnprov generate``'s rule).
Prints each instance's size and the CPU seconds of ``heuristic`` and ``milp``, and writes
the instances to ``--dump DIR`` when given. Without the shared data it says why and exits 2
(0 with ``--allow-skip``); it exits 1 when a ``milp`` solve is not proven optimal.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from dnnprov.solvers.search.enumeration import spot_space_size

import dnnprov
from dnnprov.benchsets.common import target_deadline
from dnnprov.benchsets.generate import PS_PRICE_PER_H, aws_types, workload_gpu_profiles
from dnnprov.errors import InvalidInputError

WORKLOADS = {"resnet110-paper": 0.8, "vgg19": 4.0}
SPOT_VCPUS = {"G": 256, "P": 512}
ON_DEMAND_VCPUS = {"G": 128, "P": 256}


def catalog_instance(profile: str, loss: float, shared_data: str | None) -> dnnprov.SpotProblem:
    """Every us-east-1 GPU offer of 2025 as columns of one instance of ``profile``."""
    offered = aws_types(2025, shared_data)
    base, gpu_profiles = workload_gpu_profiles(profile)
    families = sorted({t.family for t in offered})
    spot_limits = {f: SPOT_VCPUS.get(f, 256) for f in families}
    od_limits = {f: ON_DEMAND_VCPUS.get(f, 128) for f in families}
    types = []
    for t in offered:
        prof = gpu_profiles[t.gpu]
        spot_quota = min(32, spot_limits[t.family] // t.vcpus)
        od_quota = min(16, od_limits[t.family] // t.vcpus)
        if spot_quota == 0 and od_quota == 0:
            continue
        types.append(
            dnnprov.InstanceType(
                name=t.name,
                gpus=t.gpus,
                spot_price_per_h=t.spot_price_per_h,
                quota=spot_quota,
                batch_per_gpu=prof.batch_per_gpu,
                gpu_memory_gb=t.gpu_memory_gb,
                compute_time_s=float(f"{prof.batch_per_gpu * prof.seconds_per_sample:.5g}"),
                vcpus=t.vcpus,
                on_demand_price_per_h=t.on_demand_price_per_h,
                on_demand_quota=od_quota,
            )
        )
    quotas = tuple(dnnprov.VcpuQuota(family=f, market="spot", vcpus=v) for f, v in spot_limits.items()) + tuple(
        dnnprov.VcpuQuota(family=f, market="on-demand", vcpus=v) for f, v in od_limits.items()
    )
    draft = dnnprov.SpotProblem(
        instance_types=tuple(types),
        workload=base,
        slo=dnnprov.SpotSLO(loss=loss, time_s=1e9),
        platform=dnnprov.SpotPlatform(ps_price_per_h=PS_PRICE_PER_H),
        constraints=dnnprov.SpotConstraints(markets=("spot", "on-demand"), ps_count=(1, 3), vcpu_quotas=quotas),
        model="paper",
        name=f"us-east-1-2025-{profile}",
    )
    _, (_, k_cap) = dnnprov.SpotModel(draft).domain_bounds()  # the profile's |N| range
    found = target_deadline(np.random.default_rng(2025), draft, 3, k_cap or 24)
    deadline = found[0].time_s if found is not None else 3600.0
    return draft.replace(slo=dnnprov.SpotSLO(loss=loss, time_s=deadline))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared-data", default=None)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--dump", type=Path, default=None)
    parser.add_argument("--allow-skip", action="store_true", help="exit 0 when the shared data is absent")
    args = parser.parse_args()
    proven = True
    for profile, loss in WORKLOADS.items():
        try:
            problem = catalog_instance(profile, loss, args.shared_data)
        except InvalidInputError as exc:
            print(f"skipped: {exc}")
            return 0 if args.allow_skip else 2
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            dnnprov.write_instance(problem, args.dump / f"{problem.name}.json")
        cols = problem.columns()
        size = spot_space_size(problem)
        print(
            f"{problem.name}: {len(problem.instance_types)} types, {len(cols)} columns (spot + on-demand), "
            f"quotas sum {int(cols.upper.sum())}, PS 1-3, {len(problem.constraints.vcpu_quotas)} vCPU quotas, "
            f"10^{math.log10(size):.0f} plans; SLO loss {loss:g} within {problem.slo.time_s:g} s"
        )
        for method in ("heuristic", "milp"):
            started = time.process_time()
            result = dnnprov.solve(problem, method, time_limit_s=args.time_limit)
            cpu = time.process_time() - started
            gap = "" if result.gap is None else f", gap {100 * result.gap:.2f} %"
            print(
                f"  {method:<9} {result.status.value:<8} cost {result.cost if result.cost is None else round(result.cost, 6)}"
                f"{gap}, {cpu:.2f} CPU s; {result.plan}"
            )
            proven &= method != "milp" or result.status.value == "optimal"
    return 0 if proven else 1


if __name__ == "__main__":
    sys.exit(main())
