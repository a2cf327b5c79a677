"""Seeded benchmark instance sets: ``dnnprov generate SET`` (see docs/benchmarks-sets.md).

Every set is produced bit for bit from its seed (see :mod:`dnnprov.benchsets.common`). Sets
(written to ``data/benchmarks/<set>/`` with an ``index.json``), one module each:

- ``paper``: the published experiments (:func:`dnnprov.io.paper.paper_instances`), here;
- ``small``: random spot and serverless instances small enough for exhaustive search
  (:mod:`dnnprov.benchsets.sets.small`);
- ``large``: spot instances with 15-40 types and quotas up to 64, no enumeration
  (:mod:`dnnprov.benchsets.sets.large`);
- ``aws-2022``, ``aws-2025``: spot instances from the real AWS data in ``../shared/data``
  (:mod:`dnnprov.benchsets.sets.aws`);
- ``trace``: serverless jobs from the Philly GPU-cluster trace, as JSON lines
  (:mod:`dnnprov.benchsets.sets.trace`; the JSON-lines reader and writer are in
  :mod:`dnnprov.benchsets.lines`).

This module writes a set and its index; the names callers use (``generate``, ``build_set``,
``read_instance_lines``, ``trace_jobs``, the set builders and constants) stay importable from it.
The shared seeded streams, rounding, GPU profiles and deadline rules are in
:mod:`dnnprov.benchsets.common`. The real third-party data are read where they lie and never
copied; only our generated numbers are written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dnnprov.benchsets.common import (
    DEFAULT_COUNTS,
    DEFAULT_SEED,
    GENERATOR_VERSION,
    INDEX_FILE,
    LARGE_MIN_SPACE,
    PHILLY_FILE,
    PS_PRICE_PER_H,
    REGION,
    SETS,
    SMALL_SPACE_LIMIT,
    TRACE_GENERATED_DIR,
    TRACE_SAMPLE_FILE,
    Entry,
    check_count,
    check_seed,
    resolve_shared_data,
    workload_gpu_profiles,
)
from dnnprov.benchsets.lines import dumps_line, read_instance_lines, write_instance_lines
from dnnprov.benchsets.sets.aws import aws_instance, aws_set, aws_types
from dnnprov.benchsets.sets.large import large_instance, large_set
from dnnprov.benchsets.sets.small import small_serverless_instance, small_set, small_spot_instance
from dnnprov.benchsets.sets.trace import TRACE_MAPPING, TRACE_TIME_RANGE_S, read_philly_runtimes, trace_jobs
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import embedded_path
from dnnprov.io.catalogs.importing import ADVISOR_FILE
from dnnprov.io.instances import dumps_instance
from dnnprov.io.paper import paper_instances
from dnnprov.problems.spot import SpotProblem


# ---------------------------------------------------------------------------- paper
def paper_set() -> list[Entry]:
    """The published experiments, one file each (``spot/x.json`` becomes ``spot-x.json``)."""
    out = []
    for relative, problem in sorted(paper_instances().items()):
        kind = "spot" if isinstance(problem, SpotProblem) else "serverless"
        labels: dict[str, Any] = {"kind": kind, "source": f"dnnprov/data/instances/{relative}"}
        if isinstance(problem, SpotProblem):
            labels.update(
                model=problem.model, loss_variant=problem.workload.loss_variant, workload=problem.workload.name
            )
        else:
            labels.update(workload=problem.workload.name)
        out.append(Entry(relative.replace("/", "-"), problem, labels))
    return out


# ---------------------------------------------------------------------------- writing sets
SET_DESCRIPTIONS = {
    "paper": "The published experiments of spotDNN and lambdaDNN (dnnprov.io.paper.paper_instances), one file each.",
    "small": "Random spot and serverless instances small enough for exhaustive search (spot: <= 2 million "
    "(counts, PS) plans; serverless: the whole (n, m, PS) grid).",
    "large": "Random spot instances with 15-40 synthetic types and quotas up to 64, deadlines that need "
    "tens to 100+ workers; far beyond exhaustive search.",
    "aws-2022": "Spot instances on the real us-east-1 NVIDIA GPU types with 2022-05-31 spot prices.",
    "aws-2025": "Spot instances on the real us-east-1 NVIDIA GPU types with 2025-06-28 advisor spot prices "
    "and interruption buckets.",
    "trace": "Serverless jobs derived from the Philly GPU-cluster trace as lambdaDNN's simulation drew them "
    "(JSON lines, one instance dict per line).",
}
SET_VARIES = {
    "paper": {"experiment": "one per published table row / experiment"},
    "small": {
        "spot.model": "paper or reference (2:1)",
        "spot.loss_variant": "cc or no-cc (reference: no-cc)",
        "spot.gamma_4": "0.1 or 1.0",
        "spot.contention": "tight (alpha_1 0.6-1, beta_1 -1.5..-0.5, B_ps = 2-5 B_req) "
        "or loose (alpha_1 0.08-0.3, beta_1 -2.5..-1.2, B_ps = 8-20 B_req)",
        "spot.types": "3-7 real types of an embedded catalog, quota 0-10 (lowered until the space <= 2 million)",
        "spot.ps_count": "ranges within 1-3",
        "spot.markets": "spot, or spot and on-demand (25 %)",
        "spot.existing": "kept instances (25 %)",
        "spot.vcpu_quota": "one vCPU-family quota (30 %)",
        "spot.budget": "25 %",
        "spot.workers": "worker-count range (10 %)",
        "spot.deadline_rule": "below-lone-worker (60 %: a sampled multi-worker plan meets it, no lone worker "
        "does) or random-plan (a sampled plan's time x U(0.8, 1.6))",
        "serverless.workload": "espcn, 1dcnn, mobilenet, resnet50 (lambdaDNN Table 5)",
        "serverless.epochs": "log-uniform 1 .. what the fastest plan trains in 2400 s",
        "serverless.max_memory_mb": "3008 or 10240",
        "serverless.concurrency_limit": "50-1000",
        "serverless.ps_count": "ranges within 1-3",
        "serverless.functions": "function-count range (15 %)",
        "serverless.budget": "20 %",
        "serverless.deadline_rule": "below-lone-function (half the time when possible) or random-plan (x U(0.8, 1.5))",
    },
    "large": {
        "types": "15-40 synthetic types (1-8 GPUs, 0.12-4 x V100 speed), quotas 0-64",
        "loss_variant": "cc or no-cc",
        "gamma_4": "0.1 or 1.0",
        "ps_count": "ranges within 1-4",
        "markets": "spot, or spot and on-demand (20 %)",
        "existing": "20 %",
        "vcpu_quota": "per-family quotas just above the target plan's use (60 %)",
        "budget": "20 %",
        "target_workers": "K*: log-uniform in 15-150, capped at the size where fastest-first plans are fastest",
    },
    "aws": {
        "workload": "resnet110-paper, inception-v3, vgg19, esperberto (embedded profiles)",
        "types": "6 .. all real NVIDIA types of the year's price data, in name order",
        "loss_variant": "cc or no-cc",
        "gamma_4": "0.1 or 1.0",
        "ps_count": "1 .. 1-4",
        "vcpu_quotas": "G and P spot quotas 64-1024 vCPUs (on-demand 64-256 when on-demand is offered)",
        "markets": "spot, or spot and on-demand (30 %)",
        "max_interruption_bucket": "aws-2025 only: half the instances offer only types with bucket <= 2 or 3",
        "deadline_rule": "fastest-first-target (K* 3-40) or the small set's random rules",
    },
    "trace": {
        "workload": "uniform over espcn, 1dcnn, mobilenet, resnet50",
        "time_s": "uniform in [600, 1200] s (0.1 s)",
        "epochs": "share x T_o / (fastest time per epoch), share = 0.02^(1-q) 0.9^q, q = rank quantile of the "
        "Philly runtime",
    },
}


def _default_out(set_name: str, count: int) -> Path:
    base = embedded_path("benchmarks", set_name)
    if set_name == "trace" and count != DEFAULT_COUNTS["trace"]:
        return base / TRACE_GENERATED_DIR
    return base


def _clean_previous(out: Path) -> None:
    """Remove the files a previous index in ``out`` listed (and only those)."""
    index = out / INDEX_FILE
    if not index.is_file():
        return
    try:
        previous = json.loads(index.read_text())
    except (OSError, ValueError):  # unreadable, not JSON, not UTF-8: not an index of ours
        return
    items = previous.get("files") if isinstance(previous, dict) else None
    for item in items if isinstance(items, list) else ():
        name = item.get("file") if isinstance(item, dict) else None
        # only a file of this folder: never "", ".", "..", a path, or a folder
        if not isinstance(name, str) or name in ("", ".", "..", INDEX_FILE) or Path(name).name != name:
            continue
        if (out / name).is_file() or (out / name).is_symlink():
            (out / name).unlink()


def _index(
    set_name: str, seed: int | None, count: Any, files: list[dict[str, Any]], extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    varies = SET_VARIES["aws" if set_name.startswith("aws") else set_name]
    command = f"dnnprov generate {set_name}"
    if seed is not None:
        command += f" --seed {seed}"
    if set_name == "paper":
        pass  # a fixed list: no seed, no count
    elif isinstance(count, int):
        command += f" --count {count}"
    elif isinstance(count, dict) and "spot" in count:
        command += f" --count {count['spot']}"
    data: dict[str, Any] = {
        "set": set_name,
        "generator": "dnnprov.benchsets.generate",
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "count": count,
        "command": command,
        "description": SET_DESCRIPTIONS[set_name],
        "varies": varies,
    }
    data.update(extra or {})
    data["files"] = files
    return data


def build_set(
    set_name: str, *, seed: int = DEFAULT_SEED, count: int | None = None, shared_data: str | Path | None = None
) -> tuple[list[Entry], dict[str, Any]]:
    """The entries of an instance set and the ``index.json`` extras (not for ``trace``)."""
    seed = check_seed(seed)
    if set_name == "paper":
        if count is not None:
            raise InvalidInputError("count", "the paper set is the fixed list of published experiments")
        return paper_set(), {}
    count = DEFAULT_COUNTS[set_name] if count is None else count
    count = check_count(count)
    if set_name == "small":
        return small_set(seed, count), {}
    if set_name == "large":
        return large_set(seed, count), {}
    if set_name in ("aws-2022", "aws-2025"):
        year = int(set_name[-4:])
        sources = [
            "aws-spot-price-history-2022-05-31.tsv.gz" if year == 2022 else ADVISOR_FILE,
            "aws-gpu-instances-ondemand-2026-01-21.json",
        ]
        return aws_set(year, seed, count, shared_data), {"sources": sources, "region": REGION}
    raise InvalidInputError("set", f"unknown set {set_name!r}; choose from {', '.join(SETS)}")


def generate(
    set_name: str,
    out: str | Path | None = None,
    *,
    seed: int = DEFAULT_SEED,
    count: int | None = None,
    shared_data: str | Path | None = None,
) -> list[Path]:
    """Write instance set ``set_name`` and its ``index.json`` into ``out``.

    Parameters
    ----------
    set_name
        One of :data:`SETS`.
    out
        Folder for the set's files (default ``data/benchmarks/<set>``; the trace with a
        job count other than the committed sample's goes to ``data/benchmarks/trace/generated``).
    seed
        Every number follows from it (``numpy.random.default_rng``); the same seed gives
        identical bytes.
    count
        Instances (``small``: per kind; ``trace``: jobs). Default :data:`DEFAULT_COUNTS`.
    shared_data
        The real-data folder for ``aws-*`` and ``trace`` (default ``<repo>/../shared/data``).

    Returns the paths written, the index last.
    """
    if set_name not in SETS:
        raise InvalidInputError("set", f"unknown set {set_name!r}; choose from {', '.join(SETS)}")
    seed = check_seed(seed)
    if set_name == "trace":
        return _generate_trace(out, seed, count, shared_data)
    entries, extra = build_set(set_name, seed=seed, count=count, shared_data=shared_data)
    counted: Any = len(entries)
    if set_name == "small":
        counted = {kind: sum(e.labels["kind"] == kind for e in entries) for kind in ("spot", "serverless")}
    folder = Path(out) if out is not None else _default_out(set_name, 0)
    folder.mkdir(parents=True, exist_ok=True)
    _clean_previous(folder)
    paths = []
    for e in entries:
        path = folder / e.file
        path.write_text(dumps_instance(e.problem))
        paths.append(path)
    files = [{"file": e.file, "name": e.problem.name, **e.labels} for e in entries]
    index = _index(set_name, None if set_name == "paper" else seed, counted, files, extra)
    index_path = folder / INDEX_FILE
    index_path.write_text(json.dumps(index, indent=2) + "\n")
    return paths + [index_path]


def _generate_trace(out: str | Path | None, seed: int, count: int | None, shared_data: str | Path | None) -> list[Path]:
    count = DEFAULT_COUNTS["trace"] if count is None else count
    count = check_count(count)
    runtimes = read_philly_runtimes(shared_data)
    folder = Path(out) if out is not None else _default_out("trace", count)
    folder.mkdir(parents=True, exist_ok=True)
    _clean_previous(folder)
    name = TRACE_SAMPLE_FILE if count == DEFAULT_COUNTS["trace"] else f"trace-{count}.jsonl"
    path = folder / name
    written = write_instance_lines(trace_jobs(seed, count, runtimes), path)
    index = _index(
        "trace",
        seed,
        written,
        [{"file": name, "jobs": written, "format": "jsonl"}],
        {
            "sources": [PHILLY_FILE],
            "trace_jobs": len(runtimes),
            "mapping": TRACE_MAPPING,
        },
    )
    index_path = folder / INDEX_FILE
    index_path.write_text(json.dumps(index, indent=2) + "\n")
    return [path, index_path]


__all__ = [
    "DEFAULT_COUNTS",
    "DEFAULT_SEED",
    "INDEX_FILE",
    "LARGE_MIN_SPACE",
    "PS_PRICE_PER_H",
    "SETS",
    "SMALL_SPACE_LIMIT",
    "TRACE_SAMPLE_FILE",
    "TRACE_TIME_RANGE_S",
    "aws_instance",
    "aws_set",
    "aws_types",
    "build_set",
    "dumps_line",
    "generate",
    "large_instance",
    "large_set",
    "paper_set",
    "read_instance_lines",
    "read_philly_runtimes",
    "resolve_shared_data",
    "small_serverless_instance",
    "small_set",
    "small_spot_instance",
    "trace_jobs",
    "workload_gpu_profiles",
    "write_instance_lines",
]
