"""Estimated profiles for instance types nobody measured, and the short runs that would measure them.

A spot workload profile holds per-type numbers measured on a few types (the papers' K80,
M60, T4 and V100). For any other NVIDIA type of a catalog, :func:`estimate_types` derives
the compute time of one iteration from a *measured* type: the measured time per sample
(eq. 6's T_comp over the per-GPU batch) times the ratio of the two GPUs' datasheet memory
bandwidths (:mod:`dnnprov.io.catalogs.gpus`; the rule of the ``aws-2025`` benchmark set),
with the measured per-GPU batch. The FP32-throughput ratio gives a second figure; the two
bound the estimate's interval. Every estimate carries its source text, which the profile,
the instance (``instance_types.T.estimate``) and every result that uses it show.

:func:`profiling_plan` lists the runs that would turn the estimates into measurements,
as spotDNN profiles: per type, 30 iterations of one worker at the per-GPU batch (T_comp,
B_req); given the data set's samples per epoch, 3 epochs on clusters of 2, 4 and 7 workers of
one type (eq. 3's gamma_i, eq. 9's alpha_1 and beta_1). Each run's expected minutes (with a
stated launch overhead) and cost at the catalog's prices, the PS included.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import (
    Catalog,
    CatalogEntry,
    SpotWorkloadProfile,
    embedded_path,
    load_catalog,
)
from dnnprov.io.catalogs.gpus import GPUS, gpu_key
from dnnprov.models.spot import SpotModel
from dnnprov.problems.spot import InstanceType, SpotPlatform, SpotProblem, SpotSLO

#: Where the hardware of a measured type comes from when the catalog lacks it (the papers' types).
PAPER_CATALOG = "aws-table3-2023-01"
#: The GPU a measured type of another model is scaled from, first found first (aws-2025's choice).
REFERENCE_ORDER = ("V100", "T4", "M60", "K80")
ESTIMATE_ENDS = ("point", "fast", "slow")
#: Iterations per type of a profiling run (spotDNN profiles 30 iterations per type).
PROFILE_ITERATIONS = 30
#: Seconds a profiling run spends before its first iteration (launch, image, data, warm-up):
#: an assumption of this plan, stated in its output.
LAUNCH_OVERHEAD_S = 300.0
#: AWS bills Linux instances per second with a one-minute minimum.
MIN_BILLED_S = 60.0
#: spotDNN's loss-model runs: 3 epochs on clusters of 2, 4 and 7 workers (gamma_i, alpha_1, beta_1).
LOSS_CLUSTERS = (2, 4, 7)
LOSS_EPOCHS = 3


@dataclass(frozen=True)
class Measured:
    """A measured type of the profile: its GPU model, per-GPU batch and time per sample."""

    name: str
    gpu: str
    batch_per_gpu: int
    seconds_per_sample: float


@dataclass(frozen=True)
class TypeEstimate:
    """The estimated compute time of one type and where it came from."""

    type_name: str
    gpu: str
    reference: Measured
    batch_per_gpu: int
    compute_time_s: float
    interval: tuple[float, float]
    source: str

    def at(self, end: str) -> float:
        """The compute time at ``end``: ``point``, ``fast`` (interval low) or ``slow`` (interval high)."""
        return {"point": self.compute_time_s, "fast": self.interval[0], "slow": self.interval[1]}[end]

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "type": self.type_name,
            "gpu": self.gpu,
            "reference": self.reference.name,
            "reference_gpu": self.reference.gpu,
            "batch_per_gpu": self.batch_per_gpu,
            "compute_time_s": self.compute_time_s,
            "compute_time_s_interval": list(self.interval),
            "source": self.source,
        }


def _sig(x: float, digits: int = 5) -> float:
    return float(f"{x:.{digits}g}")


def _hardware(name: str, catalog: Catalog) -> CatalogEntry | None:
    """The catalog's entry of ``name``, else the papers' catalog's, else ``None``."""
    for source in (catalog, load_catalog(embedded_path("catalogs", f"{PAPER_CATALOG}.json"))):
        if any(e.name == name for e in source.instance_types):
            return source.entry(name)
    return None


def measured_types(profile: SpotWorkloadProfile, catalog: Catalog) -> list[Measured]:
    """The profile's measured types whose GPU has datasheet figures, with their time per sample."""
    found = []
    for name, prof in profile.per_type.items():
        entry = _hardware(name, catalog)
        gpu = gpu_key(entry.gpu_model, entry.gpu_memory_gb) if entry is not None else None
        if prof.get("estimate") is not None or entry is None or gpu is None:
            continue
        t = InstanceType(
            name=name,
            gpus=entry.gpus,
            spot_price_per_h=1.0,
            quota=1,
            batch_per_gpu=prof.get("batch_per_gpu"),
            gpu_memory_gb=entry.gpu_memory_gb,
            speed_samples_per_s=prof.get("speed_samples_per_s"),
            compute_time_s=prof.get("compute_time_s"),
        )
        w = profile.workload
        probe = SpotProblem(
            instance_types=(t,),
            workload=replace(w, domain=None),
            slo=SpotSLO(loss=w.gamma_5 + 1, time_s=1.0),
            model=profile.model,
        )
        batch = probe.batch_per_gpu(t)
        found.append(Measured(name, gpu, batch, probe.compute_time_s(t) / batch))
    return found


def _reference(gpu: str, measured: list[Measured]) -> Measured:
    """The measured type an estimate for ``gpu`` scales: one of the same GPU, else by :data:`REFERENCE_ORDER`."""
    same = [m for m in measured if m.gpu == gpu]
    if same:
        return same[0]
    for model in REFERENCE_ORDER:
        for m in measured:
            if m.gpu == model:
                return m
    return measured[0]


def estimate_types(
    profile: SpotWorkloadProfile, catalog: Catalog, types: Iterable[str] | None = None
) -> dict[str, TypeEstimate]:
    """Estimates for ``types`` (default: every catalog type the profile does not measure
    whose GPU has datasheet figures). A named type that cannot be estimated is an error."""
    measured = measured_types(profile, catalog)
    if not measured:
        raise InvalidInputError(
            "--profile",
            f"workload {profile.workload.name!r} has no measured type with a known "
            "GPU to estimate from; measure one first (dnnprov profile plan)",
        )
    names = (
        list(types)
        if types is not None
        else [
            e.name
            for e in catalog.instance_types
            if e.name not in profile.per_type and gpu_key(e.gpu_model, e.gpu_memory_gb) is not None
        ]
    )
    out = {}
    for name in names:
        entry = catalog.entry(name)
        gpu = gpu_key(entry.gpu_model, entry.gpu_memory_gb)
        if gpu is None:
            raise InvalidInputError(
                f"instance_types.{name}",
                f"GPU {entry.gpu_model!r} has no datasheet figures in dnnprov.io.catalogs.gpus: no estimate",
            )
        out[name] = _estimate(name, gpu, _reference(gpu, measured))
    return out


def _estimate(name: str, gpu: str, ref: Measured) -> TypeEstimate:
    """One type's estimate from ``ref``."""
    facts, ref_facts = GPUS[gpu], GPUS[ref.gpu]
    per_iteration = ref.seconds_per_sample * ref.batch_per_gpu
    if gpu == ref.gpu:
        point = _sig(per_iteration)
        return TypeEstimate(
            name,
            gpu,
            ref,
            ref.batch_per_gpu,
            point,
            (point, point),
            f"estimated from measured {ref.name} (same GPU, {gpu}): its compute time per iteration "
            f"at {ref.batch_per_gpu} samples per GPU",
        )
    by_bandwidth = per_iteration * ref_facts.memory_bandwidth_gb_s / facts.memory_bandwidth_gb_s
    by_flops = (
        per_iteration * ref_facts.fp32_tflops / facts.fp32_tflops
        if facts.fp32_tflops and ref_facts.fp32_tflops
        else by_bandwidth
    )
    point = _sig(by_bandwidth)
    interval = (_sig(min(by_bandwidth, by_flops)), _sig(max(by_bandwidth, by_flops)))
    flops = (
        f"; FP32 {ref_facts.fp32_tflops:g}/{facts.fp32_tflops:g} TFLOPS gives {_sig(by_flops):g} s"
        if facts.fp32_tflops and ref_facts.fp32_tflops
        else "; no FP32 figure, so the interval is the point"
    )
    return TypeEstimate(
        name,
        gpu,
        ref,
        ref.batch_per_gpu,
        point,
        interval,
        f"estimated from measured {ref.name} ({ref.gpu}, {per_iteration:.4g} s per iteration at {ref.batch_per_gpu} "
        f"samples per GPU) x memory bandwidth {ref_facts.memory_bandwidth_gb_s:g}/{facts.memory_bandwidth_gb_s:g} GB/s"
        f"{flops}; interval [{interval[0]:g}, {interval[1]:g}] s per iteration; figures: {ref_facts.source}, "
        f"{facts.source}",
    )


def with_estimates(
    profile: SpotWorkloadProfile, catalog: Catalog, *, end: str = "point", types: Iterable[str] | None = None
) -> SpotWorkloadProfile:
    """``profile`` with an estimated entry for every type :func:`estimate_types` covers,
    its compute time at ``end`` of the interval (``point``, ``fast`` or ``slow``)."""
    if end not in ESTIMATE_ENDS:
        raise InvalidInputError("--estimate-at", f"must be one of {', '.join(ESTIMATE_ENDS)}, got {end!r}")
    per_type: dict[str, Mapping[str, Any]] = dict(profile.per_type)
    for name, est in estimate_types(profile, catalog, types).items():
        where = "" if end == "point" else f" (this profile takes the interval's {end} end)"
        per_type[name] = {
            "batch_per_gpu": est.batch_per_gpu,
            "compute_time_s": est.at(end),
            "compute_time_s_interval": list(est.interval),
            "estimate": est.source + where,
        }
    return replace(profile, per_type=per_type)


@dataclass(frozen=True)
class ProfilingRun:
    """One short run that measures a type (``timing``: one worker, a few iterations) or the
    loss model (``loss``: a cluster of one type for a few epochs): what to run, how long, what it costs."""

    purpose: str
    type_name: str
    workers: int
    gpus: int
    batch_per_gpu: int
    iterations: int
    expected_s: float
    price_per_h: float | None
    price_source: str
    ps_price_per_h: float
    cost: float | None
    epochs: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "purpose": self.purpose,
            "type": self.type_name,
            "workers": self.workers,
            "gpus": self.gpus,
            "batch_per_gpu": self.batch_per_gpu,
            "batch_size": self.gpus * self.batch_per_gpu,
            "iterations": self.iterations,
            "epochs": self.epochs,
            "expected_minutes": round(self.expected_s / 60, 2),
            "price_per_h": self.price_per_h,
            "price": self.price_source,
            "ps_price_per_h": self.ps_price_per_h,
            "cost": None if self.cost is None else round(self.cost, 4),
        }


def _price(catalog: Catalog, name: str) -> tuple[float | None, str]:
    """A type's hourly price for a profiling run: spot, else on-demand, and where it came from."""
    entry = catalog.entry(name)
    if entry.spot_price_per_h is not None:
        return entry.spot_price_per_h, f"spot, catalog {catalog.name} ({catalog.snapshot})"
    if entry.on_demand_price_per_h is not None:
        return entry.on_demand_price_per_h, f"on-demand, catalog {catalog.name} ({catalog.snapshot})"
    return None, f"no price in catalog {catalog.name}"


def _billed(price: float | None, workers: int, ps_price: float, seconds: float) -> float | None:
    """The cost of ``workers`` instances at ``price`` and one PS for ``seconds``, one-minute minimum."""
    return None if price is None else (workers * price + ps_price) * max(seconds, MIN_BILLED_S) / 3600


def _check_plan_options(iterations: int, overhead_s: float, epoch_samples: int | None, ps_price_per_h: float) -> None:
    if isinstance(iterations, bool) or not isinstance(iterations, int) or not 1 <= iterations <= 100_000:
        raise InvalidInputError("--iterations", f"must be an integer from 1 to 100,000, got {iterations!r}")
    if not (isinstance(overhead_s, (int, float)) and 0 <= overhead_s <= 86_400):
        raise InvalidInputError("--overhead-s", f"must be from 0 to 86,400 s, got {overhead_s!r}")
    if epoch_samples is not None and not (
        isinstance(epoch_samples, int) and not isinstance(epoch_samples, bool) and 1 <= epoch_samples <= 10**10
    ):
        raise InvalidInputError("--epoch-samples", f"must be an integer from 1 to 10^10, got {epoch_samples!r}")
    if not (isinstance(ps_price_per_h, (int, float)) and 0 <= ps_price_per_h <= 1_000):
        raise InvalidInputError("--ps-price-per-h", f"must be from 0 to 1,000 $/h, got {ps_price_per_h!r}")


def profiling_plan(
    profile: SpotWorkloadProfile,
    catalog: Catalog,
    *,
    types: Iterable[str] | None = None,
    iterations: int = PROFILE_ITERATIONS,
    overhead_s: float = LAUNCH_OVERHEAD_S,
    platform: SpotPlatform | None = None,
    ps_price_per_h: float = 0.0,
    epoch_samples: int | None = None,
    loss_type: str | None = None,
) -> list[ProfilingRun]:
    """One lone-worker run per estimated type: ``iterations`` at the per-GPU batch, timed at
    the interval's slow end plus eq. (6)'s communication and ``overhead_s``; its cost at the
    type's spot price (else on-demand) plus the PS's, billed per second with a one-minute
    minimum. With ``epoch_samples``: also :data:`LOSS_EPOCHS` epochs on each cluster of
    :data:`LOSS_CLUSTERS` workers of ``loss_type`` (default: the priced type, measured or
    planned, whose samples cost least on one worker), timed by eqs. (2), (6)-(9)."""
    _check_plan_options(iterations, overhead_s, epoch_samples, ps_price_per_h)
    platform = platform or SpotPlatform()
    w = profile.workload
    communication = 2 * w.param_size_mb / w.bandwidth_req_mb_s
    runs = []
    for name, est in estimate_types(profile, catalog, types).items():
        entry = catalog.entry(name)
        pcie = 2 * entry.gpus * w.param_size_mb / platform.pcie_bandwidth_mb_s
        seconds = overhead_s + iterations * (est.interval[1] + communication + pcie)
        price, how = _price(catalog, name)
        cost = _billed(price, 1, ps_price_per_h, seconds)
        runs.append(
            ProfilingRun(
                "timing", name, 1, entry.gpus, est.batch_per_gpu, iterations, seconds, price, how, ps_price_per_h, cost
            )
        )
    if epoch_samples is not None:
        runs += _loss_runs(profile, catalog, runs, epoch_samples, loss_type, overhead_s, platform, ps_price_per_h)
    return runs


def _timed_type(profile: SpotWorkloadProfile, catalog: Catalog, name: str) -> InstanceType:
    """``name`` as an instance type of the profile's timings (an estimate's slow end where it is not measured)."""
    if not any(e.name == name for e in catalog.instance_types):
        raise InvalidInputError("--loss-type", f"no type {name!r} in catalog {catalog.name!r}")
    measured = profile.per_type.get(name)
    timing = (
        measured
        if measured is not None and measured.get("estimate") is None
        else with_estimates(profile, catalog, end="slow", types=[name]).per_type[name]
    )
    entry = catalog.entry(name)
    return InstanceType(
        name=name,
        gpus=entry.gpus,
        spot_price_per_h=1.0,
        quota=max(LOSS_CLUSTERS),
        batch_per_gpu=timing.get("batch_per_gpu"),
        gpu_memory_gb=entry.gpu_memory_gb,
        speed_samples_per_s=timing.get("speed_samples_per_s"),
        compute_time_s=timing.get("compute_time_s"),
    )


def _loss_runs(
    profile: SpotWorkloadProfile,
    catalog: Catalog,
    timing_runs: list[ProfilingRun],
    epoch_samples: int,
    loss_type: str | None,
    overhead_s: float,
    platform: SpotPlatform,
    ps_price_per_h: float,
) -> list[ProfilingRun]:
    """spotDNN's loss runs: :data:`LOSS_EPOCHS` epochs on each cluster size of :data:`LOSS_CLUSTERS`."""
    w = profile.workload
    candidates = [loss_type] if loss_type is not None else []
    if not candidates:
        measured = [
            m.name for m in measured_types(profile, catalog) if any(e.name == m.name for e in catalog.instance_types)
        ]
        candidates = [
            n
            for n in dict.fromkeys([*measured, *(r.type_name for r in timing_runs)])
            if _price(catalog, n)[0] is not None
        ]
        if not candidates:
            raise InvalidInputError(
                "--loss-type", f"no priced type of catalog {catalog.name!r} to run the loss runs on: name one"
            )
    best: tuple[float, InstanceType, int, np.ndarray] | None = None
    for name in candidates:
        t = _timed_type(profile, catalog, name)
        problem = SpotProblem(
            instance_types=(t,),
            workload=replace(w, domain=None),
            slo=SpotSLO(loss=w.gamma_5 + 1, time_s=1.0),
            platform=platform,
            model=profile.model,
        )
        times = SpotModel(problem).iteration_times(np.array(LOSS_CLUSTERS), np.ones(len(LOSS_CLUSTERS)))[:, 0]
        batch = problem.batch_per_gpu(t)
        price = _price(catalog, name)[0]
        per_sample = math.inf if price is None else price * float(times[0]) / (t.gpus * batch)
        if best is None or per_sample < best[0]:
            best = (per_sample, t, batch, times)
    assert best is not None  # candidates is never empty
    _, t, batch, times = best
    price, how = _price(catalog, t.name)
    worker_batch = t.gpus * batch
    runs = []
    for workers, iteration_s in zip(LOSS_CLUSTERS, times):
        samples = LOSS_EPOCHS * epoch_samples
        seconds = overhead_s + samples * float(iteration_s) / (workers * worker_batch)
        runs.append(
            ProfilingRun(
                "loss",
                t.name,
                workers,
                t.gpus,
                batch,
                math.ceil(samples / worker_batch),
                seconds,
                price,
                how,
                ps_price_per_h,
                _billed(price, workers, ps_price_per_h, seconds),
                LOSS_EPOCHS,
            )
        )
    return runs


def plan_total(runs: list[ProfilingRun]) -> tuple[float, float]:
    """Total minutes and total cost of the runs (priced ones)."""
    return (sum(r.expected_s for r in runs) / 60, math.fsum(r.cost for r in runs if r.cost is not None))


@dataclass(frozen=True)
class HeldOut:
    """A measured type estimated as if it were not: the estimate's error against the measurement."""

    type_name: str
    gpu: str
    reference: str
    measured_s_per_sample: float
    estimated_s_per_sample: float
    interval: tuple[float, float]

    @property
    def error_pct(self) -> float:
        """(estimated - measured) / measured, in %."""
        return 100 * (self.estimated_s_per_sample - self.measured_s_per_sample) / self.measured_s_per_sample

    @property
    def inside(self) -> bool:
        """Whether the measurement lies in the estimate's interval."""
        return self.interval[0] <= self.measured_s_per_sample <= self.interval[1]


def held_out(profile: SpotWorkloadProfile, catalog: Catalog) -> list[HeldOut]:
    """Each measured type of another GPU than the reference (:data:`REFERENCE_ORDER`'s first
    present), estimated from the reference alone and compared with its measurement (per sample)."""
    measured = measured_types(profile, catalog)
    out = []
    for m in measured:
        others = [o for o in measured if o.gpu != m.gpu]
        if not others:
            continue
        ref = _reference(m.gpu, others)
        est = _estimate(m.name, m.gpu, ref)
        per = ref.batch_per_gpu
        out.append(
            HeldOut(
                m.name,
                m.gpu,
                ref.name,
                m.seconds_per_sample,
                est.compute_time_s / per,
                (est.interval[0] / per, est.interval[1] / per),
            )
        )
    return out
