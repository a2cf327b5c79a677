"""Published per-GPU figures (vendors' datasheets) that relate the speed of one GPU model to another's.

An instance type nobody profiled gets an *estimated* speed from a profiled one through
these figures (:mod:`dnnprov.profiling.estimate`): the time per sample scales with the
inverse ratio of memory bandwidth (the rule of the ``aws-2025`` benchmark set,
docs/benchmarks-sets.md) or of FP32 throughput, and the two ratios bound an interval.
Figures are per GPU as AWS counts GPUs (a K80 or M60 board holds two). ``None``: no figure
we could tie to a datasheet.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuFacts:
    """One GPU model's datasheet figures and where they come from."""

    memory_bandwidth_gb_s: float
    fp32_tflops: float | None
    source: str


_NV = "NVIDIA datasheet"
#: Per-GPU figures, keyed as :func:`gpu_key` names the models of the AWS GPU list.
GPUS: dict[str, GpuFacts] = {
    "K80": GpuFacts(240.0, 4.37, f"{_NV} Tesla K80 (board: 480 GB/s, 8.73 TFLOPS with boost; two GPUs)"),
    "M60": GpuFacts(160.0, 4.83, f"{_NV} Tesla M60 (board: 320 GB/s, 9.65 TFLOPS; two GPUs)"),
    "T4": GpuFacts(320.0, 8.1, f"{_NV} T4"),
    "V100": GpuFacts(900.0, 15.7, f"{_NV} V100 (SXM2)"),
    "A10G": GpuFacts(600.0, 31.2, f"AWS G5 page (A10G: 600 GB/s) and {_NV} A10 (31.2 TFLOPS FP32)"),
    "L4": GpuFacts(300.0, 30.3, f"{_NV} L4"),
    "L40": GpuFacts(864.0, 90.5, f"{_NV} L40"),
    "L40S": GpuFacts(864.0, 91.6, f"{_NV} L40S"),
    "A100": GpuFacts(1555.0, 19.5, f"{_NV} A100 40 GB SXM"),
    "A100-80GB": GpuFacts(2039.0, 19.5, f"{_NV} A100 80 GB SXM"),
    "H100": GpuFacts(3350.0, 67.0, f"{_NV} H100 SXM"),
    "H200": GpuFacts(4800.0, 67.0, f"{_NV} H200 SXM"),
    "B200 Blackwell": GpuFacts(8000.0, None, f"{_NV} HGX B200 (memory bandwidth)"),
    "RTX PRO 6000 Blackwell": GpuFacts(1597.0, None, f"{_NV} RTX PRO 6000 Blackwell Server Edition (memory bandwidth)"),
}


def gpu_key(gpu_model: str | None, gpu_memory_gb: float | None = None) -> str | None:
    """``"NVIDIA A100"`` with 80 GB -> ``"A100-80GB"``; a model without figures -> ``None``."""
    if not gpu_model:
        return None
    name = gpu_model.strip().removeprefix("NVIDIA ").strip()
    if name == "A100" and gpu_memory_gb is not None and gpu_memory_gb >= 80:
        name = "A100-80GB"
    return name if name in GPUS else None
