"""The profiler: from measurements to workload profiles (the API behind ``dnnprov profile``).

Both papers' systems start by profiling: spotDNN fits its loss model (eq. 3) to short runs
on clusters of 2, 4 and 7 workers and measures S_parm, B_req and the contention
coefficients; λDNN profiles a few iterations per memory size to get its rate and storage
lines and the minimum memory. This module reads such measurements
(:mod:`dnnprov.profiling.readers`), fits them (:mod:`dnnprov.profiling.fits.loss`,
:mod:`dnnprov.profiling.fits.timing`) and writes the results into the existing profile formats,
with the fitted validity domain, every fitted number's standard error in the notes, and
fitted fields removed from ``estimated``. See docs/profiler.md.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import SpotWorkloadProfile
from dnnprov.io.paper import SERVERLESS_WORKLOAD_FORMAT
from dnnprov.problems.serverless import ServerlessWorkload
from dnnprov.problems.validation.domain import ServerlessDomain, SpotDomain
from dnnprov.profiling.fits.loss import Estimate, LossFit, fit_loss, leave_one_run_out, synthetic_log
from dnnprov.profiling.fits.timing import (
    ServerlessTimingFit,
    SpotTimingFit,
    fit_serverless_timing,
    fit_spot_timing,
    timing_kind,
)
from dnnprov.profiling.readers import LossLog, read_loss_csv, read_tf_worker_logs, read_trainer_state

__all__ = [
    "LossFit",
    "LossLog",
    "ServerlessTimingFit",
    "SpotTimingFit",
    "fit_loss",
    "fit_serverless_timing",
    "fit_spot_timing",
    "format_estimate",
    "format_uncertainty",
    "leave_one_run_out",
    "read_loss_logs",
    "serverless_workload_dict",
    "synthetic_log",
    "timing_kind",
    "with_loss_fit",
    "with_serverless_timing_fit",
    "with_spot_timing_fit",
]


def read_loss_logs(
    paths: Sequence[str | Path],
    *,
    batch_size: float | None = None,
    workers: int | None = None,
    worker_batch: int | None = None,
) -> LossLog:
    """Read loss logs of any supported kind and join them.

    A directory is one run of the spotDNN authors' TF trainer (its ``worker*`` files, or
    every non-hidden file when none is so named, one log per worker); a ``.json`` file a Hugging Face ``trainer_state.json`` (needs
    ``batch_size``; ``workers`` identical workers, default 1); anything else the CSV contract.
    An option for a kind of log none of ``paths`` is (``batch_size`` or ``workers`` without a
    trainer_state.json, ``worker_batch`` without a TF folder) is refused: it would be ignored.
    """
    if not paths:
        raise InvalidInputError("files", "give at least one loss log")
    kinds = {"folder" if Path(p).is_dir() else Path(p).suffix for p in paths}
    for option, value, kind, what in (
        ("--batch-size", batch_size, ".json", "a trainer_state.json"),
        ("--workers", workers, ".json", "a trainer_state.json"),
        ("--worker-batch", worker_batch, "folder", "a folder of TF worker logs"),
    ):
        if value is not None and kind not in kinds:
            raise InvalidInputError(option, f"applies to {what}, and no FILE is one: it would be ignored")
    logs = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
            worker_files = [p for p in files if p.name.startswith("worker")]
            files = worker_files or files  # the authors' folders also hold a merge.txt
            logs.append(read_tf_worker_logs(files, run=path.name, worker_batch=worker_batch))
        elif path.suffix == ".json":
            if batch_size is None:
                raise InvalidInputError("--batch-size", f"needed for {path}: a trainer_state.json does not record it")
            logs.append(read_trainer_state(path, batch_size=batch_size, workers=1 if workers is None else workers))
        else:
            logs.append(read_loss_csv(path))
    return LossLog.concat(logs)


def format_estimate(name: str, e: Estimate) -> str:
    """``name = value ± stderr [95 % CI low, high]`` (or ``fixed at value: reason``; NaN when undetermined)."""
    if e.fixed.startswith("stopped"):
        return f"{name} = {e.value:.6g} ({e.fixed}; no standard error)"
    if e.fixed:
        return f"{name} fixed at {e.value:.6g} ({e.fixed})"
    if e.undetermined:
        return f"{name} = {e.value:.6g} ± NaN ({e.undetermined})"
    if e.stderr is None:
        return f"{name} = {e.value:.6g} (no standard error: as many points as coefficients)"
    interval = f" [95 % CI {e.interval[0]:.6g}, {e.interval[1]:.6g}]" if e.interval is not None else ""
    return f"{name} = {e.value:.6g} ± {e.stderr:.3g}{interval}"


def format_uncertainty(u: dict[str, Any]) -> str:
    """One line: how a loss fit's standard errors were made."""
    if not u:
        return "errors: method not recorded"
    rho = u.get("autocorrelation")
    return (
        f"errors: {u['weighting']} weights (loss^{u['weight_power']:.2f}), {u['covariance']} covariance, "
        + (f"lag-1 autocorrelation {rho:.2f}" if rho is not None else "autocorrelation not measured")
        + (f" (stderr x{u['stderr_inflation']:.2f})" if u["stderr_inflation"] > 1 else "")
        + f", {u['dof']:.1f} degrees of freedom"
    )


def _notes(old: str, line: str) -> str:
    return f"{old} {line}".strip() if old else line


def _without(estimated: Sequence[str], fitted: Sequence[str]) -> tuple[str, ...]:
    return tuple(e for e in estimated if e not in fitted)


def with_loss_fit(
    base: SpotWorkloadProfile,
    fit: LossFit,
    source: str,
    loo: list[dict[str, Any]] | None = None,
    extrapolation: float = 1.0,
) -> SpotWorkloadProfile:
    """``base`` with gamma_1..gamma_5, the loss variant and the domain of ``fit``.

    ``extrapolation`` is the factor the written domain allows (1: the fitted ranges only).
    """
    coefficients = fit.coefficients()
    fitted = [p for p, e in fit.estimates.items() if not e.fixed or e.fixed.startswith("stopped")]
    line = (
        f"Loss model fitted by dnnprov profile fit-loss from {source} ({fit.points} steps, runs "
        f"{', '.join(fit.runs)}; variant {fit.variant}): "
        + "; ".join(format_estimate(p, e) for p, e in fit.estimates.items())
        + f"; RMSE {fit.rmse:.4g}; "
        + format_uncertainty(fit.uncertainty)
        + ". batch_wa (b_w) is the per-worker average batch of eq. (4), "
        "not the cluster's global batch."
    )
    held_out = loo or []
    losses = [r["loss_error_pct"] for r in held_out if r["loss_error_pct"] is not None]
    if losses:
        errors = [r["iterations_error_pct"] for r in held_out if r["iterations_error_pct"] is not None]
        line += f" Leave-one-run-out: loss error {min(losses):.1f}-{max(losses):.1f} %" + (
            f", iterations error {min(errors):.1f}-{max(errors):.1f} %." if errors else "."
        )
    if fit.warnings:
        line += " Warnings: " + "; ".join(fit.warnings) + "."
    domain = dataclasses.replace(fit.domain, extrapolation=extrapolation)
    changes: dict[str, Any] = {
        "loss_variant": fit.variant,
        "domain": domain,
        "estimated": _without(base.workload.estimated, fitted + ["loss_variant"]),
        **coefficients,
    }  # gamma_1..gamma_5: names known only at run time
    workload = dataclasses.replace(base.workload, **changes)
    return dataclasses.replace(base, workload=workload, notes=_notes(base.notes, line))


def with_spot_timing_fit(base: SpotWorkloadProfile, fit: SpotTimingFit, source: str) -> SpotWorkloadProfile:
    """``base`` with S_parm, B_req, alpha_1, beta_1 and per-type compute times of ``fit``.

    The domain's |N| range becomes the overlap of ``base``'s and the contention fit's; its
    b_w range stays ``base``'s (or, without one, spans the profiled worker batches).
    """
    per_type = dict(base.per_type)
    for t, e in fit.compute_time.items():
        per_type[t] = {"batch_per_gpu": fit.batch_per_gpu[t], "compute_time_s": e.value}
    old = base.workload.domain
    if old is not None:
        low, high = max(old.workers[0], fit.workers[0]), min(old.workers[1], fit.workers[1])
        if low > high:
            raise InvalidInputError(
                "workload.domain.workers",
                f"the loss fit covers |N| {old.workers[0]}-{old.workers[1]}, "
                f"the timing runs {fit.workers[0]}-{fit.workers[1]}: no overlap",
            )
        domain = dataclasses.replace(
            old,
            workers=(low, high),
            source=f"{old.source} |N| narrowed to the timing runs' {fit.workers[0]}-{fit.workers[1]}.".strip(),
        )
    else:
        batches = [fit.gpus[t] * fit.batch_per_gpu[t] for t in fit.compute_time]
        domain = SpotDomain(
            batch_wa=(float(min(batches)), float(max(batches))),
            workers=fit.workers,
            source=f"dnnprov profile fit-timing: |N| {fit.workers[0]}-{fit.workers[1]} of the timing runs; "
            "b_w between the profiled worker batches (no loss fit yet)",
        )
    line = (
        f"Timing fitted by dnnprov profile fit-timing from {source} ({fit.rows} worker rows, |N| "
        f"{fit.workers[0]}-{fit.workers[1]}; S_parm {fit.param_size_mb:g} MB given): "
        + "; ".join(
            [
                format_estimate("bandwidth_req_mb_s", fit.bandwidth_req),
                format_estimate("alpha_1", fit.alpha_1),
                format_estimate("beta_1", fit.beta_1),
            ]
            + [format_estimate(f"compute_time_s[{t}]", e) for t, e in fit.compute_time.items()]
        )
        + f"; contention RMSE {fit.contention_rmse:.3g}."
    )
    if fit.leave_one_out:
        errs = [r["time_error_pct"] for r in fit.leave_one_out]
        line += f" Leave-one-run-out iteration-time error {min(errs):.1f}-{max(errs):.1f} %."
    if fit.warnings:
        line += " Warnings: " + "; ".join(fit.warnings) + "."
    fitted = ["param_size_mb", "bandwidth_req_mb_s", "alpha_1", "beta_1"]
    workload = dataclasses.replace(
        base.workload,
        param_size_mb=fit.param_size_mb,
        bandwidth_req_mb_s=fit.bandwidth_req.value,
        alpha_1=fit.alpha_1.value,
        beta_1=fit.beta_1.value,
        domain=domain,
        estimated=_without(base.workload.estimated, fitted),
    )
    return dataclasses.replace(base, workload=workload, per_type=per_type, notes=_notes(base.notes, line))


def with_serverless_timing_fit(base: ServerlessWorkload, fit: ServerlessTimingFit) -> ServerlessWorkload:
    """``base`` with the rate and storage lines, m_min and the memory domain of ``fit``."""
    fitted = ["rate_alpha", "rate_beta", "storage_alpha", "storage_beta", "min_memory_mb"]
    return dataclasses.replace(
        base,
        rate_alpha=fit.rate_alpha.value,
        rate_beta=fit.rate_beta.value,
        storage_alpha=fit.storage_alpha.value,
        storage_beta=fit.storage_beta.value,
        min_memory_mb=fit.min_memory_mb,
        estimated=_without(base.estimated, fitted),
        domain=ServerlessDomain(
            memory_mb=fit.memory_mb,
            functions=fit.functions,
            source=f"dnnprov profile fit-timing: runs at {fit.memory_mb[0]:g}-{fit.memory_mb[1]:g} MB "
            f"with {fit.functions[0]}-{fit.functions[1]} functions",
        ),
    )


def serverless_workload_dict(workload: ServerlessWorkload, notes: str) -> dict[str, Any]:
    """The ``dnnprov/serverless-workload`` v1 file dict of ``workload``."""
    data = {f.name: getattr(workload, f.name) for f in dataclasses.fields(workload)}
    data["estimated"] = list(workload.estimated)
    if workload.domain is None:
        del data["domain"]
    else:
        data["domain"] = workload.domain.to_dict()
    return {"format": SERVERLESS_WORKLOAD_FORMAT, "version": 1, "workload": data, "notes": notes}


def serverless_timing_notes(old: str, fit: ServerlessTimingFit, source: str) -> str:
    """``old`` notes plus one sentence with every fitted number and its standard error."""
    line = (
        f"Fitted by dnnprov profile fit-timing from {source} ({fit.rows} runs): "
        + "; ".join(
            format_estimate(n, getattr(fit, n)) for n in ("rate_alpha", "rate_beta", "storage_alpha", "storage_beta")
        )
        + f"; min_memory_mb {fit.min_memory_mb} ({fit.min_memory_note})."
    )
    if fit.leave_one_out:
        rate = [r["rate_error_pct"] for r in fit.leave_one_out]
        line += f" Leave-one-run-out rate error {min(rate):.1f}-{max(rate):.1f} %."
    if fit.warnings:
        line += " Warnings: " + "; ".join(fit.warnings) + "."
    return _notes(old, line)


def write_json(data: dict[str, Any], path: str | Path) -> None:
    """Write ``data`` as indented JSON (the embedded files' layout)."""
    try:
        Path(path).write_text(json.dumps(data, indent=2) + "\n")
    except OSError as exc:
        raise InvalidInputError(str(path), f"cannot write file: {exc.strerror or exc}") from None
