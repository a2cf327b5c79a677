"""The ``aws-2022`` and ``aws-2025`` sets: spot instances on the real us-east-1 GPU types of ``../shared/data``.

The real third-party data are read where they lie and never copied; only our generated
numbers are written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dnnprov.benchsets.common import (
    AWS_WORKLOADS,
    DEFAULT_SEED,
    GENERATOR_VERSION,
    GPU_MEMORY_BANDWIDTH_GB_S,
    PROFILED_GPUS,
    PS_PRICE_PER_H,
    REGION,
    STREAMS,
    Entry,
    GpuProfile,
    gpu_model_key,
    instance_rng,
    random_deadline,
    resolve_shared_data,
    round_sig,
    spot_space,
    target_deadline,
    workload_gpu_profiles,
)
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.importing import ADVISOR_FILE, BUCKETS, import_shared_data
from dnnprov.problems.spot import (
    InstanceType,
    SpotConstraints,
    SpotPlatform,
    SpotProblem,
    SpotSLO,
    VcpuQuota,
)

# ---------------------------------------------------------------------------- aws sets


@dataclass(frozen=True)
class AwsType:
    """One real GPU type as the aws sets use it."""

    name: str
    gpus: int
    vcpus: int
    gpu: str
    gpu_memory_gb: float
    spot_price_per_h: float
    on_demand_price_per_h: float
    family: str
    interruption_bucket: int | None
    spot_source: str


def aws_types(year: int, shared_data: str | Path | None = None) -> list[AwsType]:
    """The NVIDIA GPU types of us-east-1 with real prices for the ``aws-<year>`` set.

    2022: spot price from the 2022-05-31 history (latest per AZ, cheapest AZ, Linux/UNIX)
    through :func:`dnnprov.io.catalogs.importing.import_shared_data`. 2025: spot price = on-demand
    x (1 - savings %) of the 2025-06-28 Spot Instance Advisor, with its interruption bucket.
    On-demand prices, GPUs and vCPUs come from the on-demand GPU list in both. K80 types
    count GPUs as vCPUs / 4 (the list counts K80 boards: p2.8xlarge 4, AWS says 8).
    """
    folder = resolve_shared_data(shared_data)
    catalog = import_shared_data(REGION, folder, snapshot="2022", mix_dates=True)  # the sets' data since v1
    advice: Mapping[str, Any] = {}
    if year == 2025:
        advisor = json.loads((folder / ADVISOR_FILE).read_text())
        advice = advisor.get("spot_advisor", {}).get(REGION, {}).get("Linux", {})
    out = []
    for e in catalog.instance_types:
        gpu = gpu_model_key(e.gpu_model, e.gpu_memory_gb)
        if gpu is None or (gpu not in PROFILED_GPUS and gpu not in GPU_MEMORY_BANDWIDTH_GB_S):
            continue
        if e.on_demand_price_per_h is None or e.vcpus is None or e.gpu_memory_gb is None:
            continue
        gpus = e.vcpus // 4 if gpu == "K80" else e.gpus
        bucket = None
        if year == 2022:
            if e.spot_price_per_h is None:
                continue
            spot, source = e.spot_price_per_h, e.sources.get("spot_price_per_h", "")
        else:
            tip = advice.get(e.name)
            if not isinstance(tip, Mapping) or not isinstance(tip.get("s"), (int, float)):
                continue
            spot = round(e.on_demand_price_per_h * (1 - tip["s"] / 100), 4)
            bucket = tip.get("r") if tip.get("r") in range(len(BUCKETS)) else None
            source = f"{ADVISOR_FILE}: on-demand x (1 - {tip['s']}%)"
        out.append(
            AwsType(
                name=e.name,
                gpus=gpus,
                vcpus=e.vcpus,
                gpu=gpu,
                gpu_memory_gb=e.gpu_memory_gb,
                spot_price_per_h=spot,
                on_demand_price_per_h=e.on_demand_price_per_h,
                family=e.family or e.name[:1].upper(),
                interruption_bucket=bucket,
                spot_source=source,
            )
        )
    if not out:
        raise InvalidInputError("shared_data", f"no NVIDIA GPU type with prices found in {folder}")
    return out


def aws_instance(year: int, seed: int, index: int, offered: Sequence[AwsType]) -> Entry:
    """Instance ``index`` of ``aws-<year>``: real types and prices, derived workload profiles."""
    rng = instance_rng(seed, STREAMS[f"aws-{year}"], index)
    profile_name = str(rng.choice(list(AWS_WORKLOADS)))
    base, gpu_profiles = workload_gpu_profiles(profile_name)
    variant = str(rng.choice(["cc", "cc", "no-cc"]))
    gamma_4 = float(rng.choice([0.1, 1.0]))
    pool = list(offered)
    max_bucket = None
    if year == 2025 and rng.random() < 0.5:
        max_bucket = int(rng.choice([2, 3]))
        calm = [t for t in pool if t.interruption_bucket is not None and t.interruption_bucket <= max_bucket]
        if len(calm) >= 3:
            pool = calm
        else:
            max_bucket = None
    n_types = int(rng.integers(min(6, len(pool)), len(pool) + 1))
    chosen = [pool[i] for i in sorted(rng.choice(len(pool), size=n_types, replace=False).tolist())]
    on_demand = bool(rng.random() < 0.3)
    family_limits = {}
    for f in sorted({t.family for t in chosen}):  # at least one type of the family fits
        smallest = min(t.vcpus for t in chosen if t.family == f)
        family_limits[f] = max(int(rng.choice([64, 128, 256, 512, 1024])), smallest)
    od_limits = {f: int(rng.choice([64, 128, 256])) for f in family_limits} if on_demand else {}
    ps_high = int(rng.integers(1, 5))
    platform = SpotPlatform(ps_price_per_h=PS_PRICE_PER_H)
    types = []
    for t in chosen:
        prof = gpu_profiles[t.gpu]
        types.append(
            InstanceType(
                name=t.name,
                gpus=t.gpus,
                spot_price_per_h=t.spot_price_per_h,
                quota=min(32, family_limits[t.family] // t.vcpus),
                batch_per_gpu=prof.batch_per_gpu,
                gpu_memory_gb=t.gpu_memory_gb,
                compute_time_s=round_sig(prof.batch_per_gpu * prof.seconds_per_sample, 5),
                vcpus=t.vcpus,
                on_demand_price_per_h=t.on_demand_price_per_h if on_demand else None,
                on_demand_quota=min(16, od_limits[t.family] // t.vcpus) if on_demand else None,
            )
        )
    workload = replace(
        base, loss_variant=variant, gamma_4=gamma_4, estimated=tuple(sorted(set(base.estimated) | {"gamma_4"}))
    )
    cons: dict[str, Any] = {
        "markets": ("spot", "on-demand") if on_demand else ("spot",),
        "ps_count": (1, ps_high),
        "vcpu_quotas": tuple(VcpuQuota(family=f, market="spot", vcpus=v) for f, v in family_limits.items())
        + tuple(VcpuQuota(family=f, market="on-demand", vcpus=v) for f, v in od_limits.items()),
    }
    lo, hi = AWS_WORKLOADS[profile_name]
    loss = round(float(rng.uniform(lo, hi)), 2)
    draft = SpotProblem(
        instance_types=tuple(types),
        workload=workload,
        slo=SpotSLO(loss=loss, time_s=1e9),
        platform=platform,
        constraints=SpotConstraints(**cons),
        model="paper",
        name=f"aws-{year}-{index:03d}",
    )
    found = target_deadline(rng, draft, 3, 40) if rng.random() < 0.5 else None
    if found is not None:
        deadline, k_star, _ = found
        rule = f"{deadline.rule} (K* = {k_star})"
    else:
        deadline = random_deadline(rng, draft, multi_share=0.6)
        rule = deadline.rule
    problem = draft.replace(
        slo=SpotSLO(loss=loss, time_s=deadline.time_s),
        notes=_aws_notes(year, profile_name, chosen, gpu_profiles, max_bucket, rule),
    )
    labels = {
        "kind": "spot",
        "model": "paper",
        "workload": profile_name,
        "loss_variant": variant,
        "gamma_4": gamma_4 if variant == "cc" else None,
        "types": n_types,
        "markets": list(cons["markets"]),
        "ps_count": [1, ps_high],
        "vcpu_quotas": {f"{q.family}/{q.market}": q.vcpus for q in cons["vcpu_quotas"]},
        "max_interruption_bucket": max_bucket,
        "deadline_rule": rule,
        "space_log10": round(math.log10(spot_space(problem)), 1),
    }
    return Entry(f"aws-{year}-{index:03d}.json", problem, labels)


def _aws_notes(
    year: int,
    profile_name: str,
    chosen: Sequence[AwsType],
    gpu_profiles: Mapping[str, GpuProfile],
    max_bucket: int | None,
    rule: str,
) -> str:
    spot = (
        "spot = cheapest-AZ latest Linux/UNIX price of the 2022-05-31 EC2 spot price history"
        if year == 2022
        else "spot = on-demand x (1 - savings %) of the 2025-06-28 Spot Instance Advisor"
    )
    gpus = sorted({t.gpu for t in chosen})
    profile_text = "; ".join(
        f"{g}: batch {gpu_profiles[g].batch_per_gpu}/GPU, "
        f"{gpu_profiles[g].seconds_per_sample * 1e3:.4g} ms/sample ({gpu_profiles[g].basis})"
        for g in gpus
    )
    text = (
        f"dnnprov generate aws-{year} (generator v{GENERATOR_VERSION}). REAL us-east-1 types and prices: "
        f"{spot}; on-demand price, GPUs and vCPUs from the 2026-01-21 on-demand GPU list (read from "
        "../shared/data, not copied). Per-type quota = min(32, family vCPU quota // vCPUs). "
        f"Workload {profile_name} (embedded profile) with DERIVED per-GPU-model numbers: {profile_text}; "
        f"compute time = batch x time per sample. Deadline rule {rule}."
    )
    if year == 2025:
        buckets = ", ".join(f"{t.name} {t.interruption_bucket}" for t in chosen if t.interruption_bucket is not None)
        text += f" Interruption buckets (0 <5%, 1 5-10%, 2 10-15%, 3 15-20%, 4 >20% per month): {buckets}." + (
            f" Only types with bucket <= {max_bucket} are offered." if max_bucket is not None else ""
        )
    return text


def aws_set(year: int, seed: int = DEFAULT_SEED, count: int = 20, shared_data: str | Path | None = None) -> list[Entry]:
    """``count`` spot instances of ``aws-<year>`` (2022 or 2025) from the shared real data."""
    if year not in (2022, 2025):
        raise InvalidInputError("set", f"aws sets exist for 2022 and 2025, not {year}")
    offered = aws_types(year, shared_data)
    return [aws_instance(year, seed, i, offered) for i in range(count)]
