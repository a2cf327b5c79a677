"""The ``large`` set: spot instances with 15-40 synthetic types and quotas up to 64 (no enumeration)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dnnprov.benchsets.common import (
    _STREAM,
    DEFAULT_COUNTS,
    DEFAULT_SEED,
    GENERATOR_VERSION,
    PS_PRICE_PER_H,
    Deadline,
    Entry,
    _log_uniform,
    _lone_time,
    _rng,
    _sig,
    _up,
    greedy_curve,
)
from dnnprov.benchsets.sets.small import _loss_coefficients, _space
from dnnprov.models.spot import SpotModel
from dnnprov.problems.spot import (
    InstanceType,
    SpotConstraints,
    SpotPlatform,
    SpotProblem,
    SpotSLO,
    SpotWorkload,
    VcpuQuota,
)


# ---------------------------------------------------------------------------- large
def _target_deadline(
    rng: np.random.Generator, draft: SpotProblem, k_low: int, k_high: int, k_cap: int = 400
) -> tuple[Deadline, int, int] | None:
    """A deadline met by the fastest-first plan of a drawn size K* (tens of workers).

    Fastest-first plans (:func:`greedy_curve`, per size the best PS count) stand in for the
    fastest plan of each size. K* is drawn log-uniformly in ``[k_low, k_high]`` among the
    *record* sizes, whose fastest-first plan is at least 1 % faster than every smaller one
    and than every lone worker; the deadline lies between that plan's time and the best
    smaller record, so smaller clusters are (by this proxy) too slow. Returns the deadline,
    K* and the size at which fastest-first plans are fastest; ``None`` when no record size
    reaches ``k_low`` (a lone worker or a small cluster is as fast as any big one).
    """
    model = SpotModel(draft)
    low, high = draft.constraints.ps_count
    best = None
    for ps in range(low, high + 1):
        workers, counts, times = greedy_curve(model, ps, k_cap)
        if best is None:
            best = (workers, counts, times, np.full(len(times), ps))
        else:  # keep, per size, the PS count that is fastest
            faster = times < best[2]
            best = (
                workers,
                np.where(faster[:, None], counts, best[1]),
                np.where(faster, times, best[2]),
                np.where(faster, ps, best[3]),
            )
    if best is None:  # no PS count (ps_count is never empty)
        return None
    workers, counts, times, ps_of = best
    if not len(times) or not np.isfinite(times).any():
        return None
    lone = _lone_time(model, range(low, high + 1))
    previous = np.minimum.accumulate(np.concatenate([[lone], times]))[:-1]
    records = np.flatnonzero(np.isfinite(times) & (times < previous * 0.99) & (workers >= max(k_low, 2)))
    if not records.size:
        return None
    k_fastest = int(workers[int(np.argmin(times))])
    top = max(min(k_high, int(workers[records].max())), k_low)
    target = _log_uniform(rng, k_low, top) if top > k_low else float(k_low)
    i = int(records[int(np.argmin(np.abs(np.log(workers[records] / target))))])
    t = float(times[i])
    ceiling = float(previous[i]) * 0.995 if math.isfinite(previous[i]) else t * 1.03
    ev = model.evaluate(counts[i][None, :], int(ps_of[i]))
    deadline = Deadline(
        _up(max(t, min(t * rng.uniform(1.0, 1.03), ceiling))),
        counts[i],
        int(ps_of[i]),
        float(ev.cost[0]),
        "fastest-first-target",
        None if math.isinf(lone) else _sig(lone),
    )
    return deadline, int(workers[i]), k_fastest


def large_instance(seed: int, index: int) -> Entry:
    """Instance ``index`` of the ``large`` set: 15-40 synthetic types, quotas up to 64.

    Draws are repeated (from the same generator) until fastest-first clusters of 15 or more
    workers beat every smaller one and every lone worker, so that the deadline can ask for
    tens of workers.
    """
    rng = _rng(seed, _STREAM["large"], index)
    for _ in range(200):
        entry = _large_attempt(rng, index)
        if entry is not None:
            return entry
    raise RuntimeError(f"large instance {index}: no draw needs tens of workers")  # pragma: no cover


def _large_attempt(rng: np.random.Generator, index: int) -> Entry | None:
    n_types = int(rng.integers(15, 41))
    variant = str(rng.choice(["cc", "cc", "no-cc"]))
    gamma_4 = float(rng.choice([0.1, 1.0]))
    b_req = _sig(rng.uniform(80, 250), 4)
    platform = SpotPlatform(ps_bandwidth_mb_s=_sig(b_req * rng.uniform(15, 50), 4), ps_price_per_h=PS_PRICE_PER_H)
    param_mb = _sig(_log_uniform(rng, 3, 30), 4)
    batch16 = int(rng.choice([128, 256, 512]))
    per_sample_v100 = _log_uniform(rng, 2e-4, 1.5e-3)
    on_demand = bool(rng.random() < 0.2)
    ps_high = int(rng.integers(1, 5))
    ps_low = int(rng.integers(1, ps_high + 1)) if rng.random() < 0.3 else 1
    specs: list[dict[str, Any]] = []  # keyword arguments of InstanceType
    for j in range(n_types):
        letter = "p" if rng.random() < 0.35 else "g"
        gpus = int(rng.choice([1, 1, 2, 4, 8]))
        speed = _log_uniform(rng, 0.12, 4.0)  # relative to a V100
        batch = batch16 // 2 if speed < 0.3 and rng.random() < 0.5 else batch16
        compute = _sig(batch * per_sample_v100 / speed * math.exp(rng.normal(0, 0.15)), 5)
        price = _sig(gpus * rng.uniform(0.35, 0.75) * speed**0.85 * math.exp(rng.normal(0, 0.15)), 4)
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
                on_demand_price_per_h=_sig(price * rng.uniform(2.5, 3.5), 4) if on_demand else None,
                on_demand_quota=int(rng.integers(0, 17)) if on_demand else None,
            )
        )
    max_batch = max(s["gpus"] * s["batch_per_gpu"] for s in specs)
    alpha_1, beta_1 = _sig(rng.uniform(0.05, 0.25), 4), _sig(rng.uniform(-3.0, -1.0), 4)
    # A longer training (more normalized iterations: a bigger data set) than the small set's.
    stretch = _log_uniform(rng, 5, 40)
    loss_coefficients = _loss_coefficients(rng, max_batch)
    for key in ("gamma_1", "gamma_2", "gamma_3"):
        loss_coefficients[key] = _sig(loss_coefficients[key] * stretch, 5)
    workload = SpotWorkload(
        name="synthetic",
        param_size_mb=param_mb,
        bandwidth_req_mb_s=b_req,
        alpha_1=alpha_1,
        beta_1=beta_1,
        gamma_4=gamma_4,
        loss_variant=variant,
        **loss_coefficients,
        estimated=("alpha_1", "beta_1", "gamma_1", "gamma_2", "gamma_3", "gamma_4", "gamma_5"),
    )
    types = tuple(InstanceType(**s) for s in specs)
    cons: dict[str, Any] = {"markets": ("spot", "on-demand") if on_demand else ("spot",), "ps_count": (ps_low, ps_high)}
    stocked = [t for t in types if t.quota > 0]
    if rng.random() < 0.2 and stocked:
        t = stocked[int(rng.integers(0, len(stocked)))]
        cons["existing"] = {t.name: int(rng.integers(1, min(4, t.quota) + 1))}
    loss = _sig(workload.gamma_5 + rng.uniform(0.15, 0.45), 3)
    draft = SpotProblem(
        instance_types=types,
        workload=workload,
        slo=SpotSLO(loss=loss, time_s=1e9),
        platform=platform,
        constraints=SpotConstraints(**cons),
        model="paper",
        name=f"large-{index:03d}",
    )
    found = _target_deadline(rng, draft, 15, 150)
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
    budget = rng.random() < 0.2 and deadline.cost is not None
    if budget and deadline.cost is not None:
        cons["budget_usd"] = _up(deadline.cost * rng.uniform(1.05, 1.5), 4)
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
        "budget": bool(budget),
        "deadline_rule": deadline.rule,
        "target_workers": k_star,
        "fastest_first_workers": k_fastest,
        "space_log10": round(math.log10(_space(problem)), 1),
    }
    return Entry(f"large-{index:03d}.json", problem, labels)


def large_set(seed: int = DEFAULT_SEED, count: int = DEFAULT_COUNTS["large"]) -> list[Entry]:
    """``count`` spot instances far beyond exhaustive search."""
    return [large_instance(seed, i) for i in range(count)]
