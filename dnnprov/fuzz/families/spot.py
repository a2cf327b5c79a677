"""Seeded families of tiny instances for the certificate fuzzer (:mod:`dnnprov.fuzz`).

Every family is a function ``(rng) -> problem`` registered in :data:`FAMILIES`. The
instances are small enough that exhaustive search (``enumerate``) is the oracle: at most
:data:`MAX_PLANS` plans, most of them a few dozen to a few thousand (``large-box``: up to
:data:`LARGE_MAX_PLANS`, see :func:`plan_cap`). Each family stresses one place where an
exact method's reasoning can go wrong (ties, zero prices, deadlines or budgets met with
equality, ranges, quotas, j <= 0 regions, the reference model's rounding); ``mixed``
combines several of them per instance.

A spot instance is built as a :class:`SpotDraft` (keyword arguments of the public
dataclasses), changed by *features*, then finished: the box is capped (quotas lowered), and
the objective time (and budget) are taken from random plans evaluated with
:class:`~dnnprov.SpotModel`, either with a random slack or exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from importlib import resources
from typing import Any

import numpy as np

from dnnprov.errors import InvalidInputError
from dnnprov.fuzz.families.ranges import (
    BANDWIDTH_RANGE,
    COMPUTE_TIME_RANGE,
    PARAM_SIZE_RANGE,
    PLAN_TRIES,
    PRICE_RANGE,
    log_uniform,
)
from dnnprov.fuzz.families.regions import f_regions
from dnnprov.fuzz.families.serverless import serverless_family, serverless_mixed
from dnnprov.io.instances import embedded_instance, read_instance
from dnnprov.models.spot import SpotModel
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import (
    InstanceType,
    SpotConstraints,
    SpotPlatform,
    SpotProblem,
    SpotSLO,
    SpotWorkload,
    VcpuQuota,
    column_label,
)

Problem = SpotProblem | ServerlessProblem
Family = Callable[[np.random.Generator], Problem]

MAX_PLANS = 50_000
#: The cap of the ``large-box`` family (issue 8: "every instance with at most a million
#: plans is proven within the default time limit").
LARGE_MAX_PLANS = 1_000_000


# ------------------------------------------------------------------ spot drafts
@dataclass
class SpotDraft:
    """A spot instance under construction: keyword arguments of the public dataclasses."""

    types: list[dict[str, Any]]
    workload: dict[str, Any]
    platform: dict[str, Any]
    slo: dict[str, Any]
    constraints: dict[str, Any] = field(default_factory=dict)
    model: str = "paper"

    def build(self, name: str) -> SpotProblem:
        """The :class:`SpotProblem` of this draft (validated)."""
        cons = dict(self.constraints)
        if "vcpu_quotas" in cons:
            cons["vcpu_quotas"] = tuple(VcpuQuota(**q) for q in cons["vcpu_quotas"])
        return SpotProblem(
            instance_types=tuple(InstanceType(**t) for t in self.types),
            workload=SpotWorkload(**self.workload),
            slo=SpotSLO(**self.slo),
            platform=SpotPlatform(**self.platform),
            constraints=SpotConstraints(**cons),
            model=self.model,
            name=name,
        )


#: Workload coefficients of the spotDNN paper's profiles (embedded data/workloads/spot,
#: eqs. 3 and 9): param MB, B_req, alpha_1, beta_1, gamma_1, gamma_2, gamma_3, gamma_5,
#: the range of objective losses of its tables, and per-GPU batches that keep eq. (3) valid.
PAPER_PROFILES: dict[str, dict[str, Any]] = {
    "resnet110": dict(
        coef=(11.5, 142.0, 0.8, -1.92, 876.5, -0.2, 2507.6, 0.5), loss=(0.7, 0.9), batches=(256, 512, 1024)
    ),
    "vgg19": dict(
        coef=(574.0, 620.0, 1.672, -1.92, 87.65, -0.8, 1253.8, 2.6), loss=(3.6, 4.6), batches=(16, 32, 64, 128)
    ),
    "inception-v3": dict(
        coef=(98.0, 562.0, 1.592, -1.92, 683.67, -1.248, 1955.928, 0.8), loss=(1.0, 1.2), batches=(16, 32, 64, 128)
    ),
    "esperberto": dict(
        coef=(336.0, 543.0, 1.564, -1.92, 131.475, -3.84, 3009.12, 3.2), loss=(4.8, 6.4), batches=(8, 16, 32, 64)
    ),
}


def spot_draft(
    rng: np.random.Generator,
    *,
    n_types: int | None = None,
    max_quota: int = 6,
    model: str | None = None,
    variant: str | None = None,
    gamma_4: tuple[float, float] | None = None,
    j_nonpositive: bool = False,
    contention: str | None = None,
) -> SpotDraft:
    """A random draft; options left ``None`` are drawn (``gamma_4``: a range to draw from).

    One draft in three uses a paper profile's coefficients (:data:`PAPER_PROFILES`); the
    others draw them, with mostly mild PS contention and a parameter size from 5 to 600 MB.
    ``j_nonpositive`` draws gamma_1 so that clusters below a random size need j <= 0
    normalized iterations (under no-cc), i.e. small clusters cannot meet the loss SLO.
    ``contention="strong"`` forces strong PS contention (drawn coefficients, a slow PS),
    so that clusters beyond some size get slower again.
    """
    model = model or str(rng.choice(["paper", "reference"]))
    variant = "no-cc" if model == "reference" else (variant or str(rng.choice(["cc", "no-cc"])))
    g4_range = gamma_4 or ((0.05, 0.2), (0.85, 1.15))[int(rng.integers(0, 2))]
    g4 = float(rng.uniform(*g4_range))
    n_types = int(rng.integers(1, 6)) if n_types is None else n_types
    profile = (
        PAPER_PROFILES[str(rng.choice(list(PAPER_PROFILES)))] if rng.random() < 1 / 3 and contention is None else None
    )
    if profile is not None:
        param_mb, b_req, alpha_1, beta_1, gamma_1, gamma_2, gamma_3, gamma_5 = profile["coef"]
        loss, batches = float(rng.uniform(*profile["loss"])), profile["batches"]
    else:
        param_mb, b_req = log_uniform(rng, 5, 600), float(rng.uniform(100, 800))
        strong = contention == "strong" or rng.random() < 0.2
        alpha_1 = float(rng.uniform(0.2, 1.0) if strong else rng.uniform(0.02, 0.3))
        beta_1 = float(rng.uniform(-2.0, 0.0) if strong else rng.uniform(-0.5, 0.0))
        gamma_2, gamma_5 = float(rng.uniform(-0.9, -0.1)), float(rng.uniform(0.1, 2.0))
        loss, batches = gamma_5 + float(rng.uniform(0.1, 1.5)), (64, 128, 256, 512, 1024)
    pcie = float(rng.uniform(5000, 16000))
    types = []
    for i in range(n_types):
        gpus = int(rng.choice([1, 2, 4, 8]))
        batch = int(rng.choice(batches))
        tcomp = float(rng.uniform(0.1, 2.0))
        entry: dict[str, Any] = dict(
            name=f"{'gp'[i % 2]}{i}.{gpus}x",
            gpus=gpus,
            quota=int(rng.integers(0, max_quota + 1)),
            spot_price_per_h=float(rng.uniform(0.1, 1.0)) * gpus**0.8,
            batch_per_gpu=batch,
            vcpus=int(rng.choice([4, 8])) * gpus,
        )
        # Give the lone-worker speed (eq. 6 backwards) or the compute time directly.
        net, bus = 2 * param_mb / b_req, 2 * gpus * param_mb / pcie
        t0 = tcomp + (net + bus if model == "paper" else net - bus)
        if rng.random() < 0.6 and t0 > 0:
            entry["speed_samples_per_s"] = gpus * batch / t0
        else:
            entry["compute_time_s"] = tcomp
        types.append(entry)
    sizes = [t["gpus"] * t["batch_per_gpu"] for t in types]
    if profile is None:
        # Mostly a positive numerator of eq. (3); sometimes the largest batches cannot converge.
        gamma_3 = -gamma_2 * max(sizes) * float(rng.uniform(0.7, 3.0)) + float(rng.uniform(100, 1500))
    scale = max(gamma_2 * float(np.mean(sizes)) + gamma_3, 1.0) / (loss - gamma_5)  # j + gamma_1, lone no-cc worker
    if j_nonpositive:  # j <= 0 below a cluster size between 1.5 and most of the box
        most = max(3.0, 0.6 * sum(t["quota"] for t in types))
        gamma_1 = scale * math.sqrt(float(rng.uniform(1.5, most)))
    elif profile is None:
        gamma_1 = scale * (math.sqrt(g4) if variant == "cc" else 1.0) * float(rng.uniform(0.0, 0.5))
    workload = dict(
        name="fuzz",
        param_size_mb=param_mb,
        bandwidth_req_mb_s=b_req,
        alpha_1=alpha_1,
        beta_1=beta_1,
        gamma_1=gamma_1,
        gamma_2=gamma_2,
        gamma_3=gamma_3,
        gamma_4=g4,
        gamma_5=gamma_5,
        loss_variant=variant,
    )
    ps_bandwidth = float(rng.uniform(200, 1500) if contention == "strong" else rng.uniform(500, 5000))
    platform = dict(ps_bandwidth_mb_s=ps_bandwidth, pcie_bandwidth_mb_s=pcie, ps_price_per_h=0.0)
    return SpotDraft(types=types, workload=workload, platform=platform, slo=dict(loss=loss, time_s=1e9), model=model)


# ------------------------------------------------------------------ spot features
def f_ties(rng: np.random.Generator, d: SpotDraft) -> None:
    """Identical types (copies under other names), or a tie in price per lone-worker rate."""
    base = d.types[0]
    for i in range(int(rng.integers(1, 3))):
        copy = dict(base, name=f"t{i}{base['name']}", quota=int(rng.integers(0, 4)))
        if rng.random() < 0.5 and "compute_time_s" in base:
            factor = float(rng.uniform(0.5, 2.0))  # slower or faster, priced by the same rate
            copy["compute_time_s"] = base["compute_time_s"] * factor
            copy["spot_price_per_h"] = base["spot_price_per_h"] / factor
        d.types.append(copy)


def f_price_decades(rng: np.random.Generator, d: SpotDraft) -> None:
    """Prices log-uniform over 1e-4..1e2 $/h, some exactly zero (PS price too)."""
    for t in d.types:
        t["spot_price_per_h"] = 0.0 if rng.random() < 0.2 else log_uniform(rng, 1e-4, 1e2)
    d.platform["ps_price_per_h"] = float(rng.choice([0.0, log_uniform(rng, 1e-4, 1e1)]))


def f_price_magnitudes(rng: np.random.Generator, d: SpotDraft) -> None:
    """Prices over 24 decades (1e-9 to 1e15 $/h, some zero); one time in three a huge price
    next to tiny ones (the pattern of issue 19's false optimal)."""
    for t in d.types:
        t["spot_price_per_h"] = 0.0 if rng.random() < 0.1 else log_uniform(rng, *PRICE_RANGE)
    if rng.random() < 1 / 3 and len(d.types) >= 2:
        d.types[0]["spot_price_per_h"] = log_uniform(rng, 1e5, PRICE_RANGE[1])
        for t in d.types[1:]:
            t["spot_price_per_h"] = log_uniform(rng, PRICE_RANGE[0], 1e-3)
    d.platform["ps_price_per_h"] = float(rng.choice([0.0, log_uniform(rng, *PRICE_RANGE)]))


def f_speed_magnitudes(rng: np.random.Generator, d: SpotDraft) -> None:
    """Per-type compute times over 12 decades (1e-6 to 1e6 s), so per-type rates and speeds
    span as many; batches from 1 to 4,096 per GPU."""
    for t in d.types:
        t.pop("speed_samples_per_s", None)
        t["compute_time_s"] = log_uniform(rng, *COMPUTE_TIME_RANGE)
        if "batch_per_gpu" in t:
            t["batch_per_gpu"] = int(2 ** rng.integers(0, 13))


def f_bandwidth_magnitudes(rng: np.random.Generator, d: SpotDraft) -> None:
    """PS and PCIe bandwidths, B_req and the parameter size over 9-12 decades."""
    d.platform["ps_bandwidth_mb_s"] = log_uniform(rng, *BANDWIDTH_RANGE)
    d.platform["pcie_bandwidth_mb_s"] = log_uniform(rng, *BANDWIDTH_RANGE)
    d.workload["bandwidth_req_mb_s"] = log_uniform(rng, *BANDWIDTH_RANGE)
    d.workload["param_size_mb"] = log_uniform(rng, *PARAM_SIZE_RANGE)


def f_zero_quota(rng: np.random.Generator, d: SpotDraft) -> None:
    """Quota 0 on all types but one or two (more types offered); one time in ten on all."""
    while len(d.types) < 5:
        d.types.append(
            dict(
                d.types[-1], name=f"z{len(d.types)}{d.types[-1]['name']}", spot_price_per_h=float(rng.uniform(0.1, 3.0))
            )
        )
    kept = 0 if rng.random() < 0.1 else int(rng.integers(1, 3))
    keep = set(rng.choice(len(d.types), size=kept, replace=False).tolist())
    for i, t in enumerate(d.types):
        t["quota"] = int(rng.integers(1, 8)) if i in keep else 0


def f_eq10(rng: np.random.Generator, d: SpotDraft) -> None:
    """Per-GPU batches from GPU memory by eq. (10) on some types."""
    d.workload["alpha_2"], d.workload["beta_2"] = float(rng.choice([8.0, 16.0, 32.0])), float(rng.uniform(-4, 4))
    for t in d.types:
        if rng.random() < 0.5 and "compute_time_s" in t:
            del t["batch_per_gpu"]
            t["gpu_memory_gb"] = float(rng.choice([8.0, 12.0, 16.0, 24.0]))


def f_loss_floor(rng: np.random.Generator, d: SpotDraft) -> None:
    """The loss SLO just above gamma_5 (eq. 3's denominator near 0: many iterations)."""
    w = d.workload
    gap = d.slo["loss"] - w["gamma_5"]
    d.slo["loss"] = w["gamma_5"] + gap * float(rng.uniform(0.002, 0.05))
    w["gamma_1"] *= float(rng.uniform(0.0, 1.0))


def f_on_demand(rng: np.random.Generator, d: SpotDraft) -> None:
    """Spot and on-demand columns; on-demand prices above (rarely below) spot."""
    d.constraints["markets"] = ("spot", "on-demand")
    for t in d.types:
        t["on_demand_price_per_h"] = t["spot_price_per_h"] * float(
            rng.choice([rng.uniform(1.5, 4.0), rng.uniform(0.5, 1.0)], p=[0.8, 0.2])
        )
        if rng.random() < 0.5:
            t["on_demand_quota"] = int(rng.integers(0, 4))


def f_vcpu(rng: np.random.Generator, d: SpotDraft) -> None:
    """vCPU-family quotas (AWS style) on one or two families and markets."""
    markets = d.constraints.get("markets", ("spot",))
    families = sorted({t["name"][0].upper() for t in d.types})
    quotas = {}
    for _ in range(int(rng.integers(1, 3))):
        key = (str(rng.choice(families)), str(rng.choice(markets)))
        quotas[key] = int(rng.integers(0, 97))
    d.constraints["vcpu_quotas"] = [dict(family=f, market=m, vcpus=v) for (f, m), v in quotas.items()]


def f_workers(rng: np.random.Generator, d: SpotDraft) -> None:
    """A worker-count range inside the box: a minimum, a maximum, both, or an exact count."""
    most = max(2, sum(t["quota"] for t in d.types))
    low = int(rng.integers(1, most + 1))
    shape = int(rng.integers(0, 4))  # min only, max only, both, exact
    high = None if shape == 0 else low if shape == 3 else low + int(rng.integers(0, 5))
    d.constraints["workers"] = (1 if shape == 1 else low, high)


def f_ps_range(rng: np.random.Generator, d: SpotDraft) -> None:
    """A PS-count range (the PS count is enumerated by the exact method)."""
    low = int(rng.integers(1, 4))
    d.constraints["ps_count"] = (low, low + int(rng.integers(0, 3)))


def f_overhead(rng: np.random.Generator, d: SpotDraft) -> None:
    """A takeover overhead added to T and a PS price added to the hourly price."""
    d.slo["takeover_overhead_s"] = float(rng.uniform(1, 300))
    d.platform["ps_price_per_h"] = float(rng.uniform(0.01, 1.0))


def f_domain(rng: np.random.Generator, d: SpotDraft) -> None:
    """A validity domain on the workload: b_w and |N| ranges, sometimes extrapolated."""
    sizes = sorted(t["gpus"] * t.get("batch_per_gpu", 32) for t in d.types)
    low = sizes[0] * float(rng.uniform(0.8, 2.0))
    high = max(low, sizes[-1] * float(rng.uniform(0.4, 1.2)))
    k_low = int(rng.integers(1, 4))
    d.workload["domain"] = dict(
        batch_wa=(low, high),
        workers=(k_low, k_low + int(rng.integers(0, 10))),
        extrapolation=float(rng.choice([1.0, rng.uniform(1.0, 1.5)])),
    )


def f_domain_axes(rng: np.random.Generator, d: SpotDraft) -> None:
    """A validity domain with the axes of issue 23: per-axis factors, an iteration floor, logged loss and steps.

    The floor and the logged step range are drawn around the iterations a lone worker needs
    (eq. 3 at the mean batch, no cc), so the floor and an enforced loss axis sometimes bind.
    """
    f_domain(rng, d)
    dom, w = d.workload["domain"], d.workload
    sizes = [t["gpus"] * t.get("batch_per_gpu", 32) for t in d.types]
    numerator = max(w["gamma_2"] * float(np.mean(sizes)) + w["gamma_3"], 1.0)
    lone = max(numerator / max(d.slo["loss"] - w["gamma_5"], 1e-9) - w["gamma_1"], 1.0)
    for axis in ("extrapolation_workers", "extrapolation_batch_wa"):
        if rng.random() < 0.5:
            dom[axis] = float(rng.uniform(1.0, 2.5))
    dom["min_iterations"] = float(rng.choice([0.0, 100.0, lone * float(rng.uniform(0.05, 1.5))]))
    if rng.random() < 0.6:
        dom["loss"] = (d.slo["loss"] * float(rng.uniform(0.7, 1.2)), d.slo["loss"] * float(rng.uniform(1.5, 4.0)))
        dom["iterations"] = (0.0, lone * float(rng.uniform(0.1, 3.0)))
        dom["extrapolation_iterations"] = float(rng.choice([1.0, rng.uniform(1.0, 2.0)]))
        dom["loss_axis"] = str(rng.choice(["flag", "enforce"]))


def f_existing(rng: np.random.Generator, d: SpotDraft) -> None:
    """Kept (already running) instances on one or two columns, spot or on-demand."""
    markets = d.constraints.get("markets", ("spot",))
    kept = {}
    for _ in range(int(rng.integers(1, 3))):
        t = d.types[int(rng.integers(0, len(d.types)))]
        market = str(rng.choice(markets))
        quota = t["quota"] if market == "spot" else t.get("on_demand_quota", t["quota"])
        if quota > 0:
            kept[column_label(t["name"], market)] = int(rng.integers(1, min(quota, 2) + 1))
    if kept:
        d.constraints["existing"] = kept


#: Spot features in the order they are applied (types first, then markets, then constraints).
FEATURES: dict[str, Callable[[np.random.Generator, SpotDraft], None]] = {
    "ties": f_ties,
    "price-decades": f_price_decades,
    "zero-quota": f_zero_quota,
    "eq10": f_eq10,
    "loss-floor": f_loss_floor,
    "on-demand": f_on_demand,
    "vcpu": f_vcpu,
    "workers": f_workers,
    "ps-range": f_ps_range,
    "overhead": f_overhead,
    "domain": f_domain,
    "existing": f_existing,
}
#: Features only their own families draw (kept out of FEATURES so that ``mixed`` draws stay as they were).
DOMAIN_FEATURES: dict[str, Callable[[np.random.Generator, SpotDraft], None]] = {
    "domain-axes": f_domain_axes,
    "regions": f_regions,
}
#: Features that move numbers across the accepted range (applied before the others).
MAGNITUDE_FEATURES: dict[str, Callable[[np.random.Generator, SpotDraft], None]] = {
    "price-magnitudes": f_price_magnitudes,
    "speed-magnitudes": f_speed_magnitudes,
    "bandwidth-magnitudes": f_bandwidth_magnitudes,
}


# ------------------------------------------------------------------ finishing spot
def _cap_box(rng: np.random.Generator, d: SpotDraft, max_plans: int) -> None:
    """Lower quotas (largest first) until the plan box has at most ``max_plans`` plans."""
    kept = d.constraints.get("existing", {})
    markets = d.constraints.get("markets", ("spot",))
    low, high = d.constraints.get("ps_count", (1, 1))
    while True:
        slots = []  # (free count, type, key of the quota, kept instances)
        for t in d.types:
            for m in markets:
                key = "quota" if m == "spot" or "on_demand_quota" not in t else "on_demand_quota"
                slots.append(
                    (t[key] - kept.get(column_label(t["name"], m), 0), t, key, kept.get(column_label(t["name"], m), 0))
                )
        if math.prod(s[0] + 1 for s in slots) * (high - low + 1) <= max_plans:
            return
        free, t, key, floor = max(slots, key=lambda s: s[0])
        t[key] = floor + int(rng.integers(free // 2, free))


def _random_plan(
    rng: np.random.Generator, model: SpotModel, ps: tuple[int, int], *, feasible_only: bool = False, best_of: int = 1
) -> tuple[float, float] | None:
    """(time, cost) of a random plan in the box with a finite positive time, or ``None``.

    The plan's worker count is drawn first (uniform over the box's sizes, or at most 3
    workers one time in four) and filled with random columns; of ``best_of`` such fills
    the fastest is returned, so that deadlines taken from these plans call for clusters
    of about that size.
    """
    cols = model.columns
    low, high = int(cols.lower.sum()), int(cols.upper.sum())
    if high == 0:
        return None
    for _ in range(PLAN_TRIES):
        size = int(rng.integers(max(low, 1), high + 1))
        if rng.random() < 0.25:
            size = min(size, max(low, int(rng.integers(1, 4))))
        best = None
        for _ in range(best_of):
            counts = cols.lower.copy()
            while counts.sum() < size:
                free = np.flatnonzero(counts < cols.upper)
                counts[free[int(rng.integers(0, len(free)))]] += 1
            ev = model.evaluate(counts[None, :], int(rng.integers(ps[0], ps[1] + 1)))
            time_s, cost = float(ev.time_s[0]), float(ev.cost[0])
            usable = math.isfinite(time_s) and time_s > 0 and math.isfinite(cost)
            if usable and (ev.feasible[0] or not feasible_only) and (best is None or time_s < best[0]):
                best = (time_s, cost)
        if best is not None:
            return best
    return None


def finish_spot(
    rng: np.random.Generator,
    d: SpotDraft,
    name: str,
    *,
    slo: str = "slack",
    budget: str | None = None,
    max_plans: int = MAX_PLANS,
) -> SpotProblem:
    """Cap the box, set T_obj from a random plan's time and optionally a budget.

    ``slo``: ``"slack"`` multiplies the fastest of eight random plans' time (all of one
    random size) by a factor in [0.95, 1.1], ``"exact"``
    uses it as it is. ``budget``: ``"slack"`` is a random plan's cost times [0.7, 1.5],
    ``"exact"`` a feasible plan's cost exactly (when it is positive).
    """
    _cap_box(rng, d, max_plans)
    draft = d.build(name)
    ps = draft.constraints.ps_count
    found = _random_plan(rng, SpotModel(draft), ps, best_of=8)
    overhead = d.slo.get("takeover_overhead_s", 0.0)
    if found is None:
        d.slo["time_s"] = overhead + float(rng.uniform(100, 5000))
    else:
        d.slo["time_s"] = found[0] if slo == "exact" else found[0] * float(rng.uniform(0.95, 1.1))
        d.slo["time_s"] = max(d.slo["time_s"], overhead * (1 + 1e-9) + 1e-9)
    problem = d.build(name)
    if budget is not None:
        priced = _random_plan(rng, SpotModel(problem), ps, feasible_only=budget == "exact")
        if priced is not None and priced[1] > 0:
            d.constraints["budget_usd"] = priced[1] * (1.0 if budget == "exact" else float(rng.uniform(0.7, 1.5)))
            problem = d.build(name)
    return problem


def _spot_family(
    name: str, features: tuple[str, ...] = (), *, slo: str = "slack", budget: str | None = None, **draft: Any
) -> Family:
    """A family applying ``features`` to a random draft with the options ``draft``."""

    def family(rng: np.random.Generator) -> SpotProblem:
        d = spot_draft(rng, **draft)
        for feature in features:
            {**MAGNITUDE_FEATURES, **FEATURES, **DOMAIN_FEATURES}[feature](rng, d)
        return finish_spot(rng, d, name, slo=slo, budget=budget)

    family.__doc__ = f"Spot family {name!r}: features {', '.join(features) or 'none'}, SLO {slo}, budget {budget}."
    return family


def _mixed(
    rng: np.random.Generator,
    name: str,
    features: tuple[int, int],
    *,
    base: SpotDraft | None = None,
    max_plans: int = MAX_PLANS,
    **draft: Any,
) -> SpotProblem:
    """Between ``features[0]`` and ``features[1]`` features at once, random SLO/budget modes.

    The features change ``base`` if given, else a random draft with the options ``draft``;
    the box is capped at ``max_plans``.
    """
    d = base or spot_draft(rng, j_nonpositive=bool(rng.random() < 0.2), **draft)
    chosen = set(rng.choice(list(FEATURES), size=int(rng.integers(*features)), replace=False).tolist())
    for feature_name, feature in FEATURES.items():
        if feature_name in chosen:
            feature(rng, d)
    return finish_spot(
        rng,
        d,
        name,
        slo=("slack", "exact")[int(rng.integers(0, 2))],
        budget=(None, "slack", "exact")[int(rng.integers(0, 3))],
        max_plans=max_plans,
    )


def mixed(rng: np.random.Generator) -> SpotProblem:
    """Three to five features at once, a random model and loss variant, random SLO/budget modes."""
    return _mixed(rng, "mixed", (3, 6))


#: The spot instances shipped with dnnprov (the paper's settings), by file name.
EMBEDDED_SPOT = tuple(
    sorted(
        p.name
        for p in resources.files("dnnprov.data").joinpath("instances", "spot").iterdir()
        if p.name.endswith(".json")
    )
)


def draft_of(problem: SpotProblem) -> SpotDraft:
    """The draft of an existing problem (field values as they are; kept instances dropped)."""
    c = problem.constraints
    return SpotDraft(
        types=[
            {f.name: getattr(t, f.name) for f in fields(t) if getattr(t, f.name) is not None}
            for t in problem.instance_types
        ],
        workload={f.name: getattr(problem.workload, f.name) for f in fields(problem.workload)},
        platform={f.name: getattr(problem.platform, f.name) for f in fields(problem.platform)},
        slo={f.name: getattr(problem.slo, f.name) for f in fields(problem.slo)},
        constraints=dict(
            ps_count=c.ps_count,
            workers=c.workers,
            markets=c.markets,
            vcpu_quotas=[dict(family=q.family, market=q.market, vcpus=q.vcpus) for q in c.vcpu_quotas],
        ),
        model=problem.model,
    )


def embedded(rng: np.random.Generator) -> SpotProblem:
    """A paper instance shipped with dnnprov, quotas redrawn (0-6), zero to two features."""
    name = EMBEDDED_SPOT[int(rng.integers(0, len(EMBEDDED_SPOT)))]
    problem = read_instance(embedded_instance(f"spot/{name}"))
    assert isinstance(problem, SpotProblem)  # EMBEDDED_SPOT names spot instances
    d = draft_of(problem)
    for t in d.types:
        t["quota"] = int(rng.integers(0, 7))
    return _mixed(rng, "embedded", (0, 3), base=d)


def large_box(rng: np.random.Generator) -> SpotProblem:
    """Five to eight types with quotas up to 12, boxes up to a million plans, zero to two features."""
    return _mixed(rng, "large-box", (0, 3), n_types=int(rng.integers(5, 9)), max_quota=12, max_plans=LARGE_MAX_PLANS)


def magnitudes_mixed(rng: np.random.Generator) -> SpotProblem:
    """Prices, speeds and bandwidths over their whole ranges, plus zero to two other features."""
    d = spot_draft(rng, j_nonpositive=bool(rng.random() < 0.2))
    for feature in MAGNITUDE_FEATURES.values():
        feature(rng, d)
    return _mixed(rng, "magnitudes-mixed", (0, 3), base=d)


def multi_region_mixed(rng: np.random.Generator) -> SpotProblem:
    """Two to four regions' columns (:func:`f_regions`), then zero to two other features."""
    d = spot_draft(rng, n_types=int(rng.integers(1, 4)), j_nonpositive=bool(rng.random() < 0.2))
    f_regions(rng, d)
    return _mixed(rng, "multi-region-mixed", (0, 3), base=d)


def mid_size(rng: np.random.Generator) -> SpotProblem:
    """Four to six types with quotas up to 10 (boxes near the plan cap), zero to two features."""
    return _mixed(rng, "mid-size", (0, 3), n_types=int(rng.integers(4, 7)), max_quota=10)


#: Every family by name.
FAMILIES: dict[str, Family] = {
    "single-type": _spot_family("single-type", n_types=1, max_quota=60),
    "tied-types": _spot_family("tied-types", ("ties",), n_types=1, max_quota=6),
    "price-decades": _spot_family("price-decades", ("price-decades",)),
    "zero-quota": _spot_family("zero-quota", ("zero-quota",)),
    "slo-at-plan": _spot_family("slo-at-plan", slo="exact"),
    "budget-at-plan": _spot_family("budget-at-plan", budget="exact"),
    "worker-ranges": _spot_family("worker-ranges", ("workers",), max_quota=8),
    "ps-ranges": _spot_family("ps-ranges", ("ps-range",)),
    "vcpu-quotas": _spot_family("vcpu-quotas", ("vcpu",), max_quota=6),
    "on-demand": _spot_family("on-demand", ("on-demand",), max_quota=3),
    "existing": _spot_family("existing", ("existing",)),
    "no-cc-j-nonpositive": _spot_family("no-cc-j-nonpositive", variant="no-cc", j_nonpositive=True, max_quota=6),
    "cc-gamma4-small": _spot_family("cc-gamma4-small", model="paper", variant="cc", gamma_4=(0.05, 0.2)),
    "cc-gamma4-near1": _spot_family("cc-gamma4-near1", model="paper", variant="cc", gamma_4=(0.85, 1.15)),
    "reference-model": _spot_family("reference-model", ("overhead",), model="reference"),
    "paper-no-cc": _spot_family("paper-no-cc", model="paper", variant="no-cc"),
    "overhead-ps-price": _spot_family("overhead-ps-price", ("overhead",)),
    "eq10-batches": _spot_family("eq10-batches", ("eq10",)),
    "validity-domain": _spot_family("validity-domain", ("domain",)),
    "validity-domain-axes": _spot_family("validity-domain-axes", ("domain-axes",)),
    "loss-near-floor": _spot_family("loss-near-floor", ("loss-floor",)),
    "mixed": mixed,
    "mid-size": mid_size,
    "embedded": embedded,
    "large-box": large_box,
    "wide-quota": _spot_family("wide-quota", ("ps-range",), n_types=2, max_quota=300),
    "single-type-wide": _spot_family("single-type-wide", ("ps-range",), n_types=1, max_quota=3000),
    "strong-contention": _spot_family("strong-contention", ("ps-range",), contention="strong", max_quota=12),
    "serverless-timeout": serverless_family("serverless-timeout", timeout=True),
    "serverless-concurrency": serverless_family("serverless-concurrency", concurrency=True),
    "serverless-deadline": serverless_family("serverless-deadline", deadline="exact"),
    "serverless-memory": serverless_family("serverless-memory", memory=True),
    "serverless-domain": serverless_family("serverless-domain", domain=True),
    "serverless-many": serverless_family("serverless-many", many=True),
    "serverless-mixed": serverless_mixed,
    "price-magnitudes": _spot_family("price-magnitudes", ("price-magnitudes",)),
    "speed-magnitudes": _spot_family("speed-magnitudes", ("speed-magnitudes",)),
    "bandwidth-magnitudes": _spot_family("bandwidth-magnitudes", ("bandwidth-magnitudes",)),
    "all-magnitudes": _spot_family("all-magnitudes", tuple(MAGNITUDE_FEATURES)),
    "magnitudes-mixed": magnitudes_mixed,
    "serverless-magnitudes": serverless_family("serverless-magnitudes", magnitudes=True),
    "multi-region": _spot_family("multi-region", ("regions",)),
    "multi-region-magnitudes": _spot_family("multi-region-magnitudes", ("price-magnitudes", "regions")),
    "multi-region-mixed": multi_region_mixed,
}


def plan_cap(family: str) -> int:
    """The most plans an instance of ``family`` has (spot boxes; serverless grids are smaller)."""
    return LARGE_MAX_PLANS if family == "large-box" else MAX_PLANS


def draw(family: str, rng: np.random.Generator, *, attempts: int = 20) -> Problem:
    """One instance of ``family``; a draw the dataclasses reject is drawn again.

    Rejections are rare (e.g. eq. 10 giving a batch below 1); after ``attempts`` the last
    :class:`InvalidInputError` is raised.
    """
    if family not in FAMILIES:
        raise InvalidInputError("family", f"unknown family {family!r} (known: {', '.join(FAMILIES)})")
    for _ in range(attempts - 1):
        try:
            return FAMILIES[family](rng)
        except InvalidInputError:
            continue
    return FAMILIES[family](rng)
