"""The ``small`` set: random spot and serverless instances small enough for exhaustive search."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from dnnprov.benchsets.common import (
    DEFAULT_COUNTS,
    DEFAULT_SEED,
    GENERATOR_VERSION,
    PS_PRICE_PER_H,
    SERVERLESS_WORKLOADS,
    SMALL_SPACE_LIMIT,
    STREAMS,
    Deadline,
    Entry,
    best_epoch_time,
    draw_budget,
    draw_existing,
    embedded_catalog,
    gpu_model_key,
    instance_rng,
    log_uniform,
    loss_coefficients,
    random_deadline,
    round_sig,
    round_up,
    serverless_workload,
    speed_from_compute,
    spot_space,
    synthetic_workload,
    workload_gpu_profiles,
)
from dnnprov.io.catalogs.catalog import Catalog
from dnnprov.models.serverless import ServerlessModel
from dnnprov.problems.serverless import ServerlessConstraints, ServerlessPlatform, ServerlessProblem
from dnnprov.problems.spot import (
    InstanceType,
    SpotConstraints,
    SpotPlatform,
    SpotProblem,
    SpotSLO,
    VcpuQuota,
)


# ---------------------------------------------------------------------------- small: spot
def _catalog_types(catalog: Catalog) -> list:
    return [e for e in catalog.instance_types if e.spot_price_per_h is not None]


def _contention(rng: np.random.Generator, regime: str) -> tuple[float, float, float]:
    """(alpha_1, beta_1, B_ps / B_req) of a tight or loose contention regime."""
    if regime == "tight":
        return round_sig(rng.uniform(0.6, 1.0), 4), round_sig(rng.uniform(-1.5, -0.5), 4), rng.uniform(2.0, 5.0)
    return round_sig(rng.uniform(0.08, 0.3), 4), round_sig(rng.uniform(-2.5, -1.2), 4), rng.uniform(8.0, 20.0)


def _shrink_quotas(quotas: list[int], od_quotas: list[int] | None, factor: int, limit: int) -> None:
    """Lower the largest quota (spot first on ties) until the space fits ``limit``."""

    def size() -> int:
        all_q = quotas + (od_quotas or [])
        return math.prod(q + 1 for q in all_q) * factor

    while size() > limit:
        all_q = quotas + (od_quotas or [])
        i = max(range(len(all_q)), key=lambda k: (all_q[k], -k))
        if i < len(quotas):
            quotas[i] -= 1
        else:
            od_quotas[i - len(quotas)] -= 1  # type: ignore[index]


def small_spot_instance(seed: int, index: int) -> Entry:
    """Spot instance ``index`` of the ``small`` set (exhaustive search possible)."""
    rng = instance_rng(seed, STREAMS["small-spot"], index)
    model = str(rng.choice(["paper", "paper", "reference"]))
    variant = "no-cc" if model == "reference" else str(rng.choice(["cc", "cc", "no-cc"]))
    gamma_4 = float(rng.choice([0.1, 1.0]))
    catalog_name = "reference-code-2023" if rng.random() < 0.35 else "aws-table3-2023-01"
    catalog = embedded_catalog(catalog_name)
    offered = _catalog_types(catalog)
    n_types = int(rng.integers(3, len(offered) + 1))
    chosen = sorted(rng.choice(len(offered), size=n_types, replace=False).tolist())
    entries = [offered[i] for i in chosen]
    regime = str(rng.choice(["tight", "loose"]))
    alpha_1, beta_1, ps_ratio = _contention(rng, regime)
    b_req = round_sig(rng.uniform(100, 400), 4)
    platform = SpotPlatform(
        ps_bandwidth_mb_s=round_sig(b_req * ps_ratio, 4), ps_price_per_h=float(rng.choice([0.0, PS_PRICE_PER_H]))
    )
    param_mb = round_sig(log_uniform(rng, 4, 40), 4)
    batch16 = int(rng.choice([256, 512, 1024]))
    per_sample_v100 = log_uniform(rng, 1.5e-4, 1.2e-3)
    _, ratios = workload_gpu_profiles("resnet110-paper")
    on_demand = bool(rng.random() < 0.25)
    ps_low = int(rng.choice([1, 1, 2]))
    ps_high = int(rng.integers(ps_low, 4))
    quotas = [int(rng.integers(0, 11)) for _ in entries]
    od_quotas = [int(rng.integers(0, 4)) for _ in entries] if on_demand else None
    _shrink_quotas(quotas, od_quotas, ps_high - ps_low + 1, SMALL_SPACE_LIMIT)
    batches, compute = [], []
    for e in entries:
        gpu = gpu_model_key(e.gpu_model)
        assert gpu is not None  # the entries are the profiled NVIDIA GPUs
        batch = batch16 // 2 if (e.gpu_memory_gb or 16) < 12 else batch16
        per_sample = per_sample_v100 * ratios[gpu].seconds_per_sample / ratios["V100"].seconds_per_sample
        batches.append(batch)
        compute.append(round_sig(batch * per_sample * math.exp(rng.normal(0, 0.25)), 5))
    max_batch = max(e.gpus * b for e, b in zip(entries, batches))
    workload = synthetic_workload(
        param_size_mb=param_mb,
        bandwidth_req_mb_s=b_req,
        alpha_1=alpha_1,
        beta_1=beta_1,
        gamma_4=gamma_4,
        loss_variant=variant,
        coefficients=loss_coefficients(rng, max_batch),
    )
    by_speed = rng.random(len(entries)) < 0.7
    types = []
    for k, e in enumerate(entries):
        speed = speed_from_compute(model, workload, platform, e.gpus, batches[k], compute[k]) if by_speed[k] else None
        types.append(
            InstanceType(
                name=e.name,
                gpus=e.gpus,
                spot_price_per_h=e.spot_price_per_h,
                quota=quotas[k],
                batch_per_gpu=batches[k],
                gpu_memory_gb=e.gpu_memory_gb,
                vcpus=e.vcpus,
                on_demand_price_per_h=e.on_demand_price_per_h if on_demand else None,
                on_demand_quota=od_quotas[k] if od_quotas else None,
                compute_time_s=None if speed is not None else compute[k],
                speed_samples_per_s=speed,
            )
        )
    cons: dict[str, Any] = {"markets": ("spot", "on-demand") if on_demand else ("spot",), "ps_count": (ps_low, ps_high)}
    labels: dict[str, Any] = {
        "kind": "spot",
        "model": model,
        "loss_variant": variant,
        "gamma_4": gamma_4 if variant == "cc" else None,
        "contention": regime,
        "catalog": catalog_name,
        "types": n_types,
        "markets": list(cons["markets"]),
        "ps_count": [ps_low, ps_high],
    }
    existing = draw_existing(rng, types, 0.25, 2)
    if existing is not None:
        cons["existing"] = existing
    if rng.random() < 0.3:
        t = types[int(rng.integers(0, len(types)))]
        family = t.quota_family
        kept = sum(
            n * next(x.vcpus for x in types if x.name == name)
            for name, n in cons.get("existing", {}).items()
            if next(x for x in types if x.name == name).quota_family == family
        )
        biggest = max(x.vcpus for x in types if x.quota_family == family and x.vcpus is not None)
        cons["vcpu_quotas"] = (VcpuQuota(family=family, market="spot", vcpus=int(kept + biggest * rng.integers(1, 5))),)
    if rng.random() < 0.1:
        cons["workers"] = (int(rng.integers(1, 3)), None if rng.random() < 0.5 else int(rng.integers(3, 9)))
    loss = round_sig(workload.gamma_5 + rng.uniform(0.15, 0.45), 3)
    draft = SpotProblem(
        instance_types=tuple(types),
        workload=workload,
        slo=SpotSLO(loss=loss, time_s=1e9),
        platform=platform,
        constraints=SpotConstraints(**cons),
        model=model,
        name=f"small-spot-{index:03d}",
    )
    deadline = random_deadline(rng, draft, multi_share=0.6)
    budget = draw_budget(rng, 0.25, deadline.cost, 1.0)
    if budget is not None:
        cons["budget_usd"] = budget
    problem = draft.replace(
        slo=SpotSLO(loss=loss, time_s=deadline.time_s),
        constraints=SpotConstraints(**cons),
        notes=_small_spot_notes(catalog_name, deadline),
    )
    labels.update(
        {
            "existing": bool(cons.get("existing")),
            "vcpu_quota": bool(cons.get("vcpu_quotas")),
            "workers_range": "workers" in cons,
            "budget": budget is not None,
            "deadline_rule": deadline.rule,
            "space": spot_space(problem),
        }
    )
    return Entry(f"spot-{index:03d}.json", problem, labels)


def _small_spot_notes(catalog_name: str, deadline: Deadline) -> str:
    return (
        f"dnnprov generate small (generator v{GENERATOR_VERSION}). Types, GPU counts, vCPUs and "
        f"spot/on-demand prices are real (embedded catalog {catalog_name}); the workload and the "
        "per-type profiles are SYNTHETIC: compute time = per-GPU batch x a random per-sample time "
        "on a V100 x the GPU model's ResNet-110 ratio (resnet110-paper profile) x lognormal noise "
        "(sigma 0.25). Deadline rule "
        + deadline.rule
        + (f" (fastest lone worker {deadline.lone_time_s:g} s)" if deadline.lone_time_s else "")
        + "."
    )


# ---------------------------------------------------------------------------- small: serverless
def small_serverless_instance(seed: int, index: int) -> Entry:
    """Serverless instance ``index`` of the ``small`` set (one of the four Table 5 workloads)."""
    rng = instance_rng(seed, STREAMS["small-serverless"], index)
    name = str(rng.choice(SERVERLESS_WORKLOADS))
    workload = serverless_workload(name)
    max_memory = int(rng.choice([3008, 10240]))
    concurrency = int(rng.choice([50, 100, 200, 500, 1000]))
    ps_low = int(rng.choice([1, 1, 2]))
    ps_high = int(rng.integers(ps_low, 4))
    cons: dict[str, Any] = {"ps_count": (ps_low, ps_high)}
    if rng.random() < 0.15:
        cons["functions"] = (int(rng.integers(1, 4)), None if rng.random() < 0.5 else int(rng.integers(8, 41)))
    platform = ServerlessPlatform(max_memory_mb=max_memory, concurrency_limit=concurrency)
    draft = ServerlessProblem(
        workload=workload,
        time_s=1e9,
        platform=platform,
        constraints=ServerlessConstraints(**cons),
        name=f"small-serverless-{index:03d}",
    )
    per_epoch = best_epoch_time(draft)
    max_epochs = max(1, int(2400 // per_epoch))
    epochs = float(min(max_epochs, max(1, round(log_uniform(rng, 1, max_epochs + 0.999) - 0.5))))
    draft = draft.replace(workload=replace(workload, epochs=epochs))
    model = ServerlessModel(draft)
    grid = draft.memory_grid()
    low, high = draft.function_range()
    lone = (
        min(
            (float(t) for t in model.evaluate(np.full(len(grid), 1), np.array(grid), ps_high).time_s if np.isfinite(t)),
            default=math.inf,
        )
        if low == 1
        else math.inf
    )
    samples = 200
    n = np.array([round(log_uniform(rng, low, high + 0.999) - 0.5) for _ in range(samples)])
    n = np.clip(n, low, high)
    m = np.array(grid)[rng.integers(0, len(grid), size=samples)]
    s = rng.integers(ps_low, ps_high + 1, size=samples)
    ev = model.evaluate(n, m, s)
    ok = np.isfinite(ev.time_s) & (ev.time_s > 0)
    rule, cost = "fallback-600s", None
    time_s = 600.0
    if rng.random() < 0.5:
        faster = np.flatnonzero(ok & (n >= 2) & (ev.time_s < lone * 0.999))
        if faster.size:
            i = int(faster[rng.integers(0, faster.size)])
            t = float(ev.time_s[i])
            time_s, cost, rule = round_up(t * rng.uniform(1.0, 1.05), 1), float(ev.cost[i]), "below-lone-function"
    if rule.startswith("fallback"):
        candidates = np.flatnonzero(ok)
        if candidates.size:
            i = int(candidates[rng.integers(0, candidates.size)])
            t = float(ev.time_s[i])
            time_s = round_up(t * rng.uniform(0.8, 1.5), 1)
            cost, rule = (float(ev.cost[i]) if time_s >= t else None), "random-plan"
    budget = draw_budget(rng, 0.2, cost, 1.0)
    if budget is not None:
        cons["budget_usd"] = budget
    problem = draft.replace(
        time_s=time_s,
        constraints=ServerlessConstraints(**cons),
        notes=(
            f"dnnprov generate small (generator v{GENERATOR_VERSION}). Workload {name} of lambdaDNN Table 5 "
            f"(embedded profile) with {epochs:g} epochs drawn log-uniformly up to what the fastest plan "
            f"trains in 2400 s; platform AWS Lambda with m_max {max_memory} MB and a concurrency limit of "
            f"{concurrency}. Deadline rule {rule}"
            + (f" (fastest lone function {round_sig(lone):g} s)" if math.isfinite(lone) else "")
            + "; epochs, T_o and the limits are synthetic."
        ),
    )
    space = (high - low + 1) * len(grid) * (ps_high - ps_low + 1)
    labels = {
        "kind": "serverless",
        "workload": name,
        "epochs": epochs,
        "max_memory_mb": max_memory,
        "concurrency_limit": concurrency,
        "ps_count": [ps_low, ps_high],
        "functions_range": "functions" in cons,
        "budget": budget is not None,
        "deadline_rule": rule,
        "space": space,
    }
    return Entry(f"serverless-{index:03d}.json", problem, labels)


def small_set(seed: int = DEFAULT_SEED, count: int = DEFAULT_COUNTS["small"]) -> list[Entry]:
    """``count`` spot and ``count`` serverless instances for exhaustive search."""
    return [small_spot_instance(seed, i) for i in range(count)] + [
        small_serverless_instance(seed, i) for i in range(count)
    ]
