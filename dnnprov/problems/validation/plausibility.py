"""Plausibility warnings: accepted values that no real cloud offer or workload has.

A price typed in cents (42 instead of 0.42 $/h) or a size in bytes passes every field
check and gives a proven-optimal plan of a problem nobody has. :func:`findings` compares
prices, speeds, bandwidths and memory sizes with ranges taken from real data (the AWS price
lists in ``../shared/data``, described in its MANIFEST, and the catalogs and benchmark sets
in ``data/``); problems call :func:`warn` when they are built, which issues one
:class:`~dnnprov.errors.PlausibilityWarning` per finding. They are warnings, never
refusals: the value is used as given. docs/instance-format.md ("Plausibility warnings")
lists the ranges.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from dnnprov.errors import PlausibilityWarning

if TYPE_CHECKING:  # the problems import this module
    from dnnprov.problems.serverless import ServerlessProblem
    from dnnprov.problems.spot import SpotProblem


@dataclass(frozen=True)
class Range:
    """Plausible values of one quantity, what the bounds rest on, and the likely slips;
    ``unit`` formats a number (``"${} per GPU-hour"``)."""

    unit: str
    low: float
    high: float
    basis: str
    too_low: str
    too_high: str


#: Spot and on-demand prices per GPU-hour. Real AWS GPU offers: spot from $0.068
#: (inf1.xlarge, 2022 price history), on demand up to $17.80 (p6-b300.48xlarge, 2026 list).
PRICE_PER_GPU_H = Range(
    "${} per GPU-hour",
    0.01,
    20.0,
    "real AWS GPU offers: $0.068 spot to $17.80 on demand",
    "a price per minute or per second?",
    "a price in cents?",
)
#: Price of a parameter-server node (a CPU instance): the m5 family's spot prices in the
#: 2022 history are at most $12.82/h (m5dn.metal), the defaults $0.096 and $0.192.
PS_PRICE_PER_H = Range("${}/h", 0.0, 15.0, "real m5 nodes cost at most $12.82/h (spot, 2022)", "", "a price in cents?")
#: Lone-worker training speed per GPU; the benchmark sets and paper tables span 5-5,646.
SPEED_PER_GPU = Range(
    "{} samples/s per GPU",
    0.01,
    1e5,
    "the paper tables and benchmark sets measure 5 to 5,646 samples/s per GPU",
    "a time per sample?",
    "samples per minute, or a speed of the whole cluster?",
)
#: Compute time of one iteration; the benchmark sets span 0.0096-23 s.
COMPUTE_TIME_S = Range(
    "{} s per iteration",
    1e-4,
    600.0,
    "the benchmark sets have 0.0096 to 23 s per iteration",
    "a time in hours?",
    "a time in milliseconds?",
)
#: Memory of one GPU: 4 GB (K520) to 288 GB (B300) in AWS's list; benchmark sets 8-141.
GPU_MEMORY_GB = Range(
    "{} GB per GPU",
    1.0,
    512.0,
    "real GPUs have 4 to 288 GB",
    "a size in TB?",
    "a size in MB, or the memory of all the instance's GPUs?",
)
#: Network and bus bandwidths in MB/s: 1 MB/s is 8 Mbit/s; 1e6 MB/s is 8 Tbit/s (an AWS
#: p5 node has 3,200 Gbit/s = 400,000 MB/s).
BANDWIDTH_MB_S = Range(
    "{} MB/s",
    1.0,
    1e6,
    "data-centre links carry 1 MB/s (8 Mbit/s) to 400,000 MB/s",
    "a bandwidth in GB/s or Gbit/s?",
    "a bandwidth in bytes/s or bits/s?",
)
#: Model (parameter) size in MB: GPT-3's 175 B fp32 parameters are 700,000 MB.
MODEL_MB = Range(
    "{} MB", 1e-3, 1e7, "models weigh 1 KB to 10 TB (GPT-3 in fp32: 700,000 MB)", "a size in GB?", "a size in bytes?"
)
#: Data-set size in MB (ImageNet: about 150,000 MB).
DATASET_MB = Range(
    "{} MB",
    1e-3,
    1e8,
    "data sets weigh 1 KB to 100 TB (ImageNet: about 150,000 MB)",
    "a size in GB?",
    "a size in bytes?",
)
#: Function price per GB-second: AWS Lambda charges $1.33e-5 to $1.14e-4 by region and
#: architecture (aws-lambda-duration-prices.json; x86 us-east-1 $1.67e-5).
PRICE_PER_GB_S = Range(
    "${} per GB-s",
    1e-6,
    1e-3,
    "AWS Lambda charges $1.3e-05 to $1.1e-04 per GB-s",
    "a price per GB-ms?",
    "a price in cents, or per GB-minute?",
)
#: Function price per request: AWS Lambda charges $2e-7 ($0.20 per million).
PRICE_PER_REQUEST = Range(
    "${} per request",
    0.0,
    1e-5,
    "AWS Lambda charges $2e-07 ($0.20 per million)",
    "",
    "a price per million requests, or in cents?",
)


def judge(field: str, value: float, rng: Range, *, per: float = 1.0, given: str = "") -> PlausibilityWarning | None:
    """A warning when ``value / per`` lies outside ``rng`` (``given`` words the division)."""
    scaled = value / per
    if rng.low <= scaled <= rng.high:
        return None
    high = scaled > rng.high
    shown = (
        f"{value:g}{given} is {rng.unit.format(f'{scaled:.4g}')}," if given else f"{rng.unit.format(f'{value:g}')} is"
    )
    bound = rng.unit.format(f"{rng.high if high else rng.low:g}")
    return PlausibilityWarning(
        field,
        f"{shown} {'above' if high else 'below'} the plausible {bound} ({rng.basis}): "
        f"{rng.too_high if high else rng.too_low} (a warning: used as given)",
    )


def spot_findings(problem: SpotProblem) -> list[PlausibilityWarning]:
    """Implausible magnitudes of a spot problem, in field order."""
    found: list[PlausibilityWarning | None] = []
    for t in problem.instance_types:
        where, gpus = f"instance_types.{t.name}", t.gpus
        on = f" $/h on {gpus} GPU{'s' if gpus > 1 else ''}"
        found.append(judge(f"{where}.spot_price_per_h", t.spot_price_per_h, PRICE_PER_GPU_H, per=gpus, given=on))
        if t.on_demand_price_per_h is not None:
            found.append(
                judge(f"{where}.on_demand_price_per_h", t.on_demand_price_per_h, PRICE_PER_GPU_H, per=gpus, given=on)
            )
        if t.speed_samples_per_s is not None:
            found.append(
                judge(
                    f"{where}.speed_samples_per_s",
                    t.speed_samples_per_s,
                    SPEED_PER_GPU,
                    per=gpus,
                    given=f" samples/s on {gpus} GPU{'s' if gpus > 1 else ''}",
                )
            )
        if t.compute_time_s is not None:
            found.append(judge(f"{where}.compute_time_s", t.compute_time_s, COMPUTE_TIME_S))
        if t.gpu_memory_gb is not None:
            found.append(judge(f"{where}.gpu_memory_gb", t.gpu_memory_gb, GPU_MEMORY_GB))
    estimated = [t.name for t in problem.instance_types if t.estimate is not None]
    if estimated:
        shown = ", ".join(estimated[:8]) + (f" and {len(estimated) - 8} more" if len(estimated) > 8 else "")
        found.append(
            PlausibilityWarning(
                "instance_types",
                f"ESTIMATED, not measured compute times of {len(estimated)} "
                f"type{'s' if len(estimated) > 1 else ''}: {shown} "
                "(instance_types.T.estimate says how; dnnprov profile plan lists the runs "
                "that would measure them)",
            )
        )
    w, p = problem.workload, problem.platform
    found += [
        judge("workload.param_size_mb", w.param_size_mb, MODEL_MB),
        judge("workload.bandwidth_req_mb_s", w.bandwidth_req_mb_s, BANDWIDTH_MB_S),
        judge("platform.ps_bandwidth_mb_s", p.ps_bandwidth_mb_s, BANDWIDTH_MB_S),
        judge("platform.pcie_bandwidth_mb_s", p.pcie_bandwidth_mb_s, BANDWIDTH_MB_S),
        judge("platform.ps_price_per_h", p.ps_price_per_h, PS_PRICE_PER_H),
    ]
    return [f for f in found if f is not None]


def serverless_findings(problem: ServerlessProblem) -> list[PlausibilityWarning]:
    """Implausible magnitudes of a serverless problem, in field order."""
    w, p = problem.workload, problem.platform
    found = [
        judge("workload.dataset_mb", w.dataset_mb, DATASET_MB),
        judge("workload.model_mb", w.model_mb, MODEL_MB),
        judge("platform.ps_bandwidth_mb_s", p.ps_bandwidth_mb_s, BANDWIDTH_MB_S),
        judge("platform.function_bandwidth_mb_s", p.function_bandwidth_mb_s, BANDWIDTH_MB_S),
        judge("platform.storage_bandwidth_mb_s", p.storage_bandwidth_mb_s, BANDWIDTH_MB_S),
        judge("platform.price_per_gb_s", p.price_per_gb_s, PRICE_PER_GB_S),
        judge("platform.price_per_request", p.price_per_request, PRICE_PER_REQUEST),
        judge("platform.ps_price_per_h", p.ps_price_per_h, PS_PRICE_PER_H),
    ]
    return [f for f in found if f is not None]


def findings(problem: SpotProblem | ServerlessProblem) -> list[PlausibilityWarning]:
    """Implausible magnitudes of ``problem`` (spot or serverless; a spot problem is the one with
    instance types: the problems import this module, so it imports neither of them)."""
    if hasattr(problem, "instance_types"):
        return spot_findings(cast("SpotProblem", problem))
    return serverless_findings(problem)


def warn(found: list[PlausibilityWarning]) -> None:
    """Issue each finding through :mod:`warnings` (category :class:`PlausibilityWarning`)."""
    for finding in found:
        warnings.warn(finding, stacklevel=2)


@contextlib.contextmanager
def reported(write: Callable[[str], None]) -> Iterator[None]:
    """Within the block, hand each distinct :class:`PlausibilityWarning` to ``write`` once,
    as ``FIELD: PROBLEM``; other warnings are shown as before."""
    seen: set[str] = set()
    with warnings.catch_warnings():
        shown_before = warnings.showwarning
        warnings.simplefilter("always", PlausibilityWarning)

        def show(message, category, filename, lineno, file=None, line=None) -> None:
            if not issubclass(category, PlausibilityWarning):
                shown_before(message, category, filename, lineno, file, line)
            elif str(message) not in seen:
                seen.add(str(message))
                write(str(message))

        warnings.showwarning = show
        yield
