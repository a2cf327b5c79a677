"""The ``large`` set: spot instances with 15-40 synthetic types and quotas up to 64 (no enumeration)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dnnprov.benchsets.common import (
    DEFAULT_COUNTS,
    DEFAULT_SEED,
    GENERATOR_VERSION,
    PS_PRICE_PER_H,
    STREAMS,
    Entry,
    draw_budget,
    draw_existing,
    instance_rng,
    log_uniform,
    loss_coefficients,
    round_sig,
    spot_space,
    synthetic_workload,
    target_deadline,
)
from dnnprov.problems.spot import (
    InstanceType,
    SpotConstraints,
    SpotPlatform,
    SpotProblem,
    SpotSLO,
    VcpuQuota,
)


# ---------------------------------------------------------------------------- large
def large_instance(seed: int, index: int) -> Entry:
    """Instance ``index`` of the ``large`` set: 15-40 synthetic types, quotas up to 64.

    Draws are repeated (from the same generator) until fastest-first clusters of 15 or more
    workers beat every smaller one and every lone worker, so that the deadline can ask for
    tens of workers.
    """
    rng = instance_rng(seed, STREAMS["large"], index)
    for _ in range(200):
        entry = _large_attempt(rng, index)
        if entry is not None:
            return entry
    raise RuntimeError(f"large instance {index}: no draw needs tens of workers")  # pragma: no cover


def _large_attempt(rng: np.random.Generator, index: int) -> Entry | None:
    n_types = int(rng.integers(15, 41))
    variant = str(rng.choice(["cc", "cc", "no-cc"]))
    gamma_4 = float(rng.choice([0.1, 1.0]))
    b_req = round_sig(rng.uniform(80, 250), 4)
    platform = SpotPlatform(ps_bandwidth_mb_s=round_sig(b_req * rng.uniform(15, 50), 4), ps_price_per_h=PS_PRICE_PER_H)
    param_mb = round_sig(log_uniform(rng, 3, 30), 4)
    batch16 = int(rng.choice([128, 256, 512]))
    per_sample_v100 = log_uniform(rng, 2e-4, 1.5e-3)
    on_demand = bool(rng.random() < 0.2)
    ps_high = int(rng.integers(1, 5))
    ps_low = int(rng.integers(1, ps_high + 1)) if rng.random() < 0.3 else 1
    specs: list[dict[str, Any]] = []  # keyword arguments of InstanceType
    for j in range(n_types):
        letter = "p" if rng.random() < 0.35 else "g"
        gpus = int(rng.choice([1, 1, 2, 4, 8]))
        speed = log_uniform(rng, 0.12, 4.0)  # relative to a V100
        batch = batch16 // 2 if speed < 0.3 and rng.random() < 0.5 else batch16
        compute = round_sig(batch * per_sample_v100 / speed * math.exp(rng.normal(0, 0.15)), 5)
        price = round_sig(gpus * rng.uniform(0.35, 0.75) * speed**0.85 * math.exp(rng.normal(0, 0.15)), 4)
        quota = 0 if rng.random() < 0.08 else int(rng.integers(1, 65))
        specs.append(
            dict(
                name=f"{letter}x{j:02d}.{gpus}gpu",
                gpus=gpus,
                spot_price_per_h=price,
                quota=quota,
                batch_per_gpu=batch,
                compute_time_s=compute,
                vcpus=gpus * int(rng.choice([4, 8, 12])),
                on_demand_price_per_h=round_sig(price * rng.uniform(2.5, 3.5), 4) if on_demand else None,
                on_demand_quota=int(rng.integers(0, 17)) if on_demand else None,
            )
        )
    max_batch = max(s["gpus"] * s["batch_per_gpu"] for s in specs)
    alpha_1, beta_1 = round_sig(rng.uniform(0.05, 0.25), 4), round_sig(rng.uniform(-3.0, -1.0), 4)
    # A longer training (more normalized iterations: a bigger data set) than the small set's.
    stretch = log_uniform(rng, 5, 40)
    coefficients = loss_coefficients(rng, max_batch)
    for key in ("gamma_1", "gamma_2", "gamma_3"):
        coefficients[key] = round_sig(coefficients[key] * stretch, 5)
    workload = synthetic_workload(
        param_size_mb=param_mb,
        bandwidth_req_mb_s=b_req,
        alpha_1=alpha_1,
        beta_1=beta_1,
        gamma_4=gamma_4,
        loss_variant=variant,
        coefficients=coefficients,
    )
    types = tuple(InstanceType(**s) for s in specs)
    cons: dict[str, Any] = {"markets": ("spot", "on-demand") if on_demand else ("spot",), "ps_count": (ps_low, ps_high)}
    existing = draw_existing(rng, types, 0.2, 4)
    if existing is not None:
        cons["existing"] = existing
    loss = round_sig(workload.gamma_5 + rng.uniform(0.15, 0.45), 3)
    draft = SpotProblem(
        instance_types=types,
        workload=workload,
        slo=SpotSLO(loss=loss, time_s=1e9),
        platform=platform,
        constraints=SpotConstraints(**cons),
        model="paper",
        name=f"large-{index:03d}",
    )
    found = target_deadline(rng, draft, 15, 150)
    if found is None:
        return None
    deadline, k_star, k_fastest = found
    vcpu = rng.random() < 0.6 and deadline.plan is not None
    if vcpu and deadline.plan is not None:
        cols = draft.columns()
        used: dict[str, int] = {}
        for c in range(len(cols)):
            if cols.markets[c] == "spot":
                used[cols.families[c]] = used.get(cols.families[c], 0) + int(deadline.plan[c] * cols.vcpus[c])
        family_limit = {f: int(math.ceil(v * rng.uniform(1.0, 1.5) / 8) * 8) for f, v in sorted(used.items()) if v}
        cons["vcpu_quotas"] = tuple(VcpuQuota(family=f, market="spot", vcpus=v) for f, v in family_limit.items())
    budget = draw_budget(rng, 0.2, deadline.cost, 1.05)
    if budget is not None:
        cons["budget_usd"] = budget
    problem = draft.replace(
        slo=SpotSLO(loss=loss, time_s=deadline.time_s),
        constraints=SpotConstraints(**cons),
        notes=(
            f"dnnprov generate large (generator v{GENERATOR_VERSION}). SYNTHETIC types (names xNN.Ggpu; "
            "family G or P from the first letter), speeds log-uniform 0.12-4 x a V100, spot price per GPU-hour "
            "0.35-0.75 $ x speed^0.85 with noise, quotas up to 64. Deadline: 1.00-1.03 x the predicted time of "
            f"the fastest-first plan of {k_star} workers (fastest-first plans are fastest at {k_fastest} "
            "workers), so the optimum needs tens of workers."
        ),
    )
    labels = {
        "kind": "spot",
        "model": "paper",
        "loss_variant": variant,
        "gamma_4": gamma_4 if variant == "cc" else None,
        "types": n_types,
        "markets": list(cons["markets"]),
        "ps_count": [ps_low, ps_high],
        "existing": "existing" in cons,
        "vcpu_quota": bool(vcpu),
        "budget": budget is not None,
        "deadline_rule": deadline.rule,
        "target_workers": k_star,
        "fastest_first_workers": k_fastest,
        "space_log10": round(math.log10(spot_space(problem)), 1),
    }
    return Entry(f"large-{index:03d}.json", problem, labels)


def large_set(seed: int = DEFAULT_SEED, count: int = DEFAULT_COUNTS["large"]) -> list[Entry]:
    """``count`` spot instances far beyond exhaustive search."""
    return [large_instance(seed, i) for i in range(count)]
