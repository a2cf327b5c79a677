"""Fitting the timing coefficients of both models from profiling runs, with standard errors.

Spot (spotDNN eqs. 6-9), from a CSV with one row per worker of a profiling run,
``run,type,gpus,workers,ps,batch_per_gpu,iteration_s,comm_s`` (mean seconds per iteration
and of its communication, as the worker measured them):

- B_req from the lone-worker rows: 2 S_parm / (comm - 2 g S_parm / B_pcie) (eq. 7 at B_req);
- T_comp per type: iteration - comm (eq. 6, it depends only on the type and batch);
- alpha_1, beta_1 of eq. (9) from the rows of contended clusters (|N| B_req > s B_ps): each
  gives B_wk by eq. (7) and P = (B_req - B_wk) / (B_req - s B_ps / |N|) by eq. (8); a
  linear least-squares line P = alpha_1 sqrt(|N|) + beta_1 through the rows whose P is
  not clamped at 0 or 1.

S_parm (the model's parameter size) is given, not fitted: timings alone cannot tell bytes
from bandwidth.

Serverless (λDNN eqs. 6, 8), from a CSV with one row per profiling run at one memory
size, ``run,memory_mb,functions,samples_per_s,storage_mb_s,failed``: R = alpha_1 m + beta_1
and B_f^s = alpha_2 m + beta_2 by linear least squares over the runs that did not fail
(storage rows at the cap B_s left out), and m_min = the smallest memory above every
failed run.

Every fit returns estimates with standard errors, the validity domain of its data, and a
leave-one-run-out prediction error.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from dnnprov.errors import InvalidInputError, ProfileWarning
from dnnprov.problems.validation.checks import (
    MAX_BATCH,
    MAX_FUNCTIONS,
    MAX_GPUS,
    MAX_MAGNITUDE,
    MAX_MEMORY_MB,
    MAX_PS_COUNT,
    MAX_WORKERS,
)
from dnnprov.profiling.fits.loss import Estimate
from dnnprov.profiling.fits.uncertainty import t_interval
from dnnprov.profiling.readers import csv_rows

SPOT_COLUMNS = ("run", "type", "gpus", "workers", "ps", "batch_per_gpu", "iteration_s", "comm_s")
SERVERLESS_COLUMNS = ("run", "memory_mb", "functions", "samples_per_s", "storage_mb_s", "failed")
#: A measured P this close to 0 or 1 is taken as clamped by eq. (9) and left out of its line.
CLAMPED = 1e-3
#: Lone-worker B_req values further apart than this (relative to their mean) may be warned of.
B_REQ_SPREAD = 0.05


class SpotRow(TypedDict):
    """One checked row of a spot timing CSV (``_where`` is its file:line)."""

    _where: str
    run: str
    type: str
    gpus: int
    workers: int
    ps: int
    batch_per_gpu: int
    iteration_s: float
    comm_s: float


class ServerlessRow(TypedDict):
    """One checked run of a serverless timing CSV that did not fail."""

    run: str
    memory_mb: float
    functions: int
    samples_per_s: float
    storage_mb_s: float


def read_timing_csv(path: str | Path, columns: Sequence[str]) -> list[dict[str, str]]:
    """Rows of a timing CSV whose header is exactly ``columns`` (each row keeps ``_where``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(str(path), f"cannot read file: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InvalidInputError(str(path), "not UTF-8 text") from None
    reader = iter(csv_rows(path, text))
    header = [h.strip() for h in next(reader, (1, []))[1]]
    if header != list(columns):
        raise InvalidInputError(f"{path}:1", f"header must be {','.join(columns)}; got {','.join(header)!r}")
    rows = []
    for number, row in reader:
        if not row or not "".join(row).strip():
            continue
        if len(row) != len(columns):
            raise InvalidInputError(f"{path}:{number}", f"expected {len(columns)} columns, got {len(row)}")
        rows.append({"_where": f"{path}:{number}", **{c: v.strip() for c, v in zip(columns, row)}})
    if not rows:
        raise InvalidInputError(str(path), "has a header but no rows")
    return rows


def timing_kind(path: str | Path) -> str:
    """``"spot"`` or ``"serverless"`` from a timing CSV's header."""
    try:
        with open(path, encoding="utf-8") as f:
            header = [h.strip() for h in f.readline().split(",")]
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(str(path), f"cannot read file: {exc}") from None
    if header == list(SPOT_COLUMNS):
        return "spot"
    if header == list(SERVERLESS_COLUMNS):
        return "serverless"
    raise InvalidInputError(
        f"{path}:1", f"header must be {','.join(SPOT_COLUMNS)} (spot) or {','.join(SERVERLESS_COLUMNS)} (serverless)"
    )


def _num(
    row: dict[str, str],
    key: str,
    *,
    positive: bool = False,
    minimum: float | None = None,
    integer: bool = False,
    maximum: float = MAX_MAGNITUDE,
) -> float:
    """A field as a finite float within the bounds, at most 1e15 in size (``maximum``: lower)."""
    where = f"{row['_where']}.{key}"
    try:
        value = float(row[key])
    except ValueError:
        raise InvalidInputError(where, f"not a number: {row[key]!r}") from None
    if not math.isfinite(value) or (positive and value <= 0) or (minimum is not None and value < minimum):
        raise InvalidInputError(where, f"must be a finite number{' > 0' if positive else ''}, got {row[key]!r}")
    if abs(value) > maximum:
        raise InvalidInputError(where, f"{value:g} is out of range (at most {maximum:g})")
    if integer and value != int(value):
        raise InvalidInputError(where, f"must be an integer, got {row[key]!r}")
    return value


def linear_fit(x: np.ndarray, y: np.ndarray, where: str) -> tuple[Estimate, Estimate, float]:
    """Least-squares line y = a x + b: (a, b, RMSE) with standard errors (None with 2 points)
    and 95 % t-intervals at points - 2 degrees of freedom."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(np.unique(x)) < 2:
        raise InvalidInputError(
            where, f"needs at least two distinct x values to fit a line; got {sorted(set(x.tolist()))}"
        )
    a_mat = np.column_stack([x, np.ones_like(x)])
    coef, *_ = np.linalg.lstsq(a_mat, y, rcond=None)
    res = a_mat @ coef - y
    dof = len(y) - 2
    if dof > 0:
        cov = float((res**2).sum()) / dof * np.linalg.inv(a_mat.T @ a_mat)
        se = np.sqrt(np.maximum(np.diag(cov), 0.0))
        a, b = (Estimate(float(c), float(e), interval=t_interval(float(c), float(e), dof)) for c, e in zip(coef, se))
        return a, b, float(np.sqrt((res**2).mean()))
    return Estimate(float(coef[0]), None), Estimate(float(coef[1]), None), 0.0


def _mean(values: Sequence[float]) -> Estimate:
    v = np.asarray(values, dtype=float)
    return Estimate(float(v.mean()), float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else None)


@dataclass(frozen=True)
class SpotTimingFit:
    """Result of :func:`fit_spot_timing`."""

    param_size_mb: float
    bandwidth_req: Estimate
    alpha_1: Estimate
    beta_1: Estimate
    compute_time: dict[str, Estimate]
    batch_per_gpu: dict[str, int]
    gpus: dict[str, int]
    workers: tuple[int, int]
    rows: int
    contention_rmse: float
    leave_one_out: list[dict[str, Any]]
    #: What in the data makes the fit doubtful (printed as warnings by the CLI).
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``profile fit-timing --json``)."""
        return {
            "kind": "spot",
            "warnings": list(self.warnings),
            "param_size_mb": self.param_size_mb,
            "bandwidth_req_mb_s": self.bandwidth_req.to_dict(),
            "alpha_1": self.alpha_1.to_dict(),
            "beta_1": self.beta_1.to_dict(),
            "contention_rmse": self.contention_rmse,
            "per_type": {
                t: {"gpus": self.gpus[t], "batch_per_gpu": self.batch_per_gpu[t], "compute_time_s": e.to_dict()}
                for t, e in self.compute_time.items()
            },
            "domain": {"workers": list(self.workers)},
            "rows": self.rows,
            "leave_one_run_out": self.leave_one_out,
        }


@dataclass(frozen=True)
class Contention:
    """The contended rows on eq. (9)'s line: sqrt(|N|), measured P, dP/dB_req, and P's noise scale."""

    x: np.ndarray
    p: np.ndarray
    dp_dbreq: np.ndarray
    #: Each P's standard deviation per unit of relative noise in comm_s (the WLS weights' inverse).
    p_noise: np.ndarray
    #: Contended runs whose mean P is clamped at 0 or 1 (left out), and all contended runs.
    clamped_runs: tuple[str, ...]
    contended_runs: tuple[str, ...]


def _network_s(r: SpotRow, s_parm: float, b_pcie: float) -> float:
    """The network part of a row's comm_s (eq. 7 without the PCIe term); refuses <= 0."""
    network = r["comm_s"] - 2 * r["gpus"] * s_parm / b_pcie
    if network <= 0:
        raise InvalidInputError(f"{r['_where']}.comm_s", "is not above the PCIe part of eq. (7)")
    return network


def _contention(rows: list[SpotRow], b_req: float, s_parm: float, b_ps: float, b_pcie: float) -> Contention:
    """Eqs. (7)-(8) solved for P on every contended row of a cluster (|N| >= 2), runs whose
    mean P is clamped left out."""
    by_run: dict[str, list[tuple[float, float, float, float]]] = {}
    for r in rows:
        k, s = r["workers"], r["ps"]
        if k == 1 or k * b_req <= s * b_ps:  # lone workers measure B_req itself
            continue
        network = _network_s(r, s_parm, b_pcie)
        b_wk, shared = 2 * s_parm / network, s * b_ps / k
        prob = (b_req - b_wk) / (b_req - shared)
        noise = b_wk * r["comm_s"] / network / (b_req - shared)  # dP per unit relative error of comm_s
        by_run.setdefault(r["run"], []).append((math.sqrt(k), prob, (b_wk - shared) / (b_req - shared) ** 2, noise))
    kept = [v for run, v in by_run.items() if CLAMPED < np.mean([e[1] for e in v]) < 1 - CLAMPED]
    clamped = tuple(run for run, v in by_run.items() if not CLAMPED < np.mean([e[1] for e in v]) < 1 - CLAMPED)
    cols = np.array([e for v in kept for e in v], dtype=float).reshape(-1, 4)
    return Contention(
        x=cols[:, 0],
        p=cols[:, 1],
        dp_dbreq=cols[:, 2],
        p_noise=cols[:, 3],
        clamped_runs=clamped,
        contended_runs=tuple(by_run),
    )


def _contention_line(c: Contention, b_req: Estimate, b_req_dof: float) -> tuple[Estimate, Estimate, float]:
    """P = alpha_1 sqrt(|N|) + beta_1 by weighted least squares, B_req's error propagated.

    Weights 1 / (P's noise scale) make relative timing noise homoscedastic; cov = s^2
    (X^T W X)^-1 + var(B_req) g g^T with g = d(alpha_1, beta_1)/dB_req (the delta method:
    every P shares the one B_req). Intervals: t at the smaller of the line's and B_req's
    degrees of freedom.
    """
    w = 1.0 / np.maximum(c.p_noise, 1e-12)
    xw = np.column_stack([c.x, np.ones_like(c.x)]) * w[:, None]
    coef, *_ = np.linalg.lstsq(xw, c.p * w, rcond=None)
    res = np.column_stack([c.x, np.ones_like(c.x)]) @ coef - c.p
    rmse = float(np.sqrt((res**2).mean()))
    dof = len(c.p) - 2
    if dof <= 0:
        return Estimate(float(coef[0]), None), Estimate(float(coef[1]), None), 0.0
    inverse = np.linalg.inv(xw.T @ xw)
    cov = float(((res * w) ** 2).sum()) / dof * inverse
    g = inverse @ xw.T @ (c.dp_dbreq * w)
    if b_req.stderr is not None and math.isfinite(b_req.stderr):
        cov = cov + b_req.stderr**2 * np.outer(g, g)
    se = np.sqrt(np.maximum(np.diag(cov), 0.0))
    t_dof = min(dof, b_req_dof)
    return (
        Estimate(float(coef[0]), float(se[0]), interval=t_interval(float(coef[0]), float(se[0]), t_dof)),
        Estimate(float(coef[1]), float(se[1]), interval=t_interval(float(coef[1]), float(se[1]), t_dof)),
        rmse,
    )


def _relative_noise(rows: list[SpotRow]) -> tuple[float, int] | None:
    """Pooled relative standard deviation of comm_s among rows measuring the same thing
    (one run's workers of one type), with its degrees of freedom; None without replicates."""
    groups: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        groups.setdefault((r["run"], r["type"]), []).append(math.log(r["comm_s"]))
    dof = sum(len(v) - 1 for v in groups.values())
    if dof <= 0:
        return None
    squares = sum(float(((np.array(v) - np.mean(v)) ** 2).sum()) for v in groups.values())
    return math.sqrt(squares / dof), dof


def _bandwidth_req(
    lone: list[SpotRow], rows: list[SpotRow], s_parm: float, b_pcie: float
) -> tuple[Estimate, float, list[str]]:
    """B_req = 2 S_parm / network time, the mean over the lone-worker rows, its dof, warnings.

    Its standard error is the larger of the lone rows' own spread (sd / sqrt(n)) and the
    error the pooled replicate noise of comm_s gives them (:func:`_relative_noise`): two
    lone rows that agree by chance do not make B_req exact. Lone rows further apart than
    :data:`B_REQ_SPREAD` and than that noise explains (spread-based error over 3 x the
    noise-based one) are warned of.
    """
    values, scale = [], []
    for r in lone:
        network = _network_s(r, s_parm, b_pcie)
        values.append(2 * s_parm / network)
        scale.append(values[-1] * r["comm_s"] / network)  # dB_req per unit relative error of comm_s
    v, n = np.array(values), len(values)
    candidates = [(float(v.std(ddof=1) / math.sqrt(n)), n - 1)] if n > 1 else []
    pooled = _relative_noise(rows)
    if pooled is not None:
        candidates.append((pooled[0] * float(np.sqrt((np.array(scale) ** 2).sum())) / n, pooled[1]))
    notes = []
    spread = (v.max() - v.min()) / v.mean()
    if n > 1 and spread > B_REQ_SPREAD and (pooled is None or candidates[0][0] > 3 * candidates[-1][0]):
        notes.append(
            f"the lone-worker rows disagree on B_req ({v.min():.4g}-{v.max():.4g} MB/s, {spread:.0%} apart, "
            "more than their timing noise explains): eq. (7) with one S_parm and B_pcie does not fit them "
            "all; every contention probability rests on their mean"
        )
    if not candidates:
        return Estimate(float(v.mean()), None), 0.0, notes
    se, dof = max(candidates)
    return Estimate(float(v.mean()), se, interval=t_interval(float(v.mean()), se, dof)), float(dof), notes


def fit_spot_timing(
    path: str | Path, *, param_size_mb: float, ps_bandwidth_mb_s: float = 1200.0, pcie_bandwidth_mb_s: float = 10000.0
) -> SpotTimingFit:
    """Fit B_req, T_comp per type and alpha_1/beta_1 (eq. 9) from a spot timing CSV.

    Every warning is also issued as a :class:`dnnprov.errors.ProfileWarning`.
    """
    for name, value in (
        ("param_size_mb", param_size_mb),
        ("ps_bandwidth_mb_s", ps_bandwidth_mb_s),
        ("pcie_bandwidth_mb_s", pcie_bandwidth_mb_s),
    ):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise InvalidInputError(name, f"must be a number > 0, got {value!r}")
    rows: list[SpotRow] = []
    for r in read_timing_csv(path, SPOT_COLUMNS):
        row: SpotRow = {
            "_where": r["_where"],
            "run": r["run"],
            "type": r["type"],
            "gpus": int(_num(r, "gpus", positive=True, integer=True, maximum=MAX_GPUS)),
            "workers": int(_num(r, "workers", positive=True, integer=True, maximum=MAX_WORKERS)),
            "ps": int(_num(r, "ps", positive=True, integer=True, maximum=MAX_PS_COUNT)),
            "batch_per_gpu": int(_num(r, "batch_per_gpu", positive=True, integer=True, maximum=MAX_BATCH)),
            "iteration_s": _num(r, "iteration_s", positive=True),
            "comm_s": _num(r, "comm_s", positive=True),
        }
        if row["comm_s"] >= row["iteration_s"]:
            raise InvalidInputError(f"{r['_where']}.comm_s", "must be below iteration_s (eq. 6: T = T_comm + T_comp)")
        rows.append(row)
    s, pcie = float(param_size_mb), float(pcie_bandwidth_mb_s)
    lone = [r for r in rows if r["workers"] == 1]
    if not lone:
        raise InvalidInputError(str(path), "no lone-worker rows (workers = 1): B_req cannot be measured")
    b_req, b_req_dof, notes = _bandwidth_req(lone, rows, s, pcie)
    for message in notes:  # issued now: they may explain an error below
        warnings.warn(message, ProfileWarning, stacklevel=2)
    compute: dict[str, Estimate] = {}
    batch: dict[str, int] = {}
    gpus: dict[str, int] = {}
    for t in dict.fromkeys(r["type"] for r in rows):
        mine = [r for r in rows if r["type"] == t]
        if len({r["batch_per_gpu"] for r in mine}) > 1 or len({r["gpus"] for r in mine}) > 1:
            raise InvalidInputError(f"{mine[0]['_where']}.type", f"{t} appears with different gpus or batch_per_gpu")
        compute[t] = _mean([r["iteration_s"] - r["comm_s"] for r in mine])
        batch[t] = mine[0]["batch_per_gpu"]
        gpus[t] = mine[0]["gpus"]
    contention = _contention(rows, b_req.value, s, ps_bandwidth_mb_s, pcie)
    if len(np.unique(contention.x)) < 2:
        clamped = (
            f"; {len(contention.clamped_runs)} of the {len(contention.contended_runs)} contended runs have P "
            f"clamped at 0 or 1 ({', '.join(contention.clamped_runs[:5])})"
            if contention.clamped_runs
            else ""
        )
        raise InvalidInputError(
            str(path),
            "needs contended runs (|N| B_req > ps B_ps, P strictly between 0 and 1) "
            f"at two or more cluster sizes to fit alpha_1 and beta_1 of eq. (9){clamped}",
        )
    alpha_1, beta_1, rmse = _contention_line(contention, b_req, b_req_dof)

    def predicted_time(r: SpotRow, a1: float, b1: float) -> float:
        k, ps = r["workers"], r["ps"]
        if k * b_req.value > ps * ps_bandwidth_mb_s:
            prob = min(max(a1 * math.sqrt(k) + b1, 0.0), 1.0)
            bw = prob * ps * ps_bandwidth_mb_s / k + (1 - prob) * b_req.value
        else:
            bw = b_req.value
        return compute[r["type"]].value + 2 * s / bw + 2 * r["gpus"] * s / pcie

    loo: list[dict[str, Any]] = []
    for run in dict.fromkeys(r["run"] for r in rows if r["workers"] > 1):
        others = _contention([r for r in rows if r["run"] != run], b_req.value, s, ps_bandwidth_mb_s, pcie)
        if len(np.unique(others.x)) < 2:
            continue
        a1, b1, _ = _contention_line(others, b_req, b_req_dof)
        mine = [r for r in rows if r["run"] == run]
        errors = [abs(predicted_time(r, a1.value, b1.value) - r["iteration_s"]) / r["iteration_s"] * 100 for r in mine]
        loo.append({"run": run, "workers": mine[0]["workers"], "time_error_pct": float(np.mean(errors))})
    later = _spot_timing_problems(contention, alpha_1, loo)
    for message in later:
        warnings.warn(message, ProfileWarning, stacklevel=2)
    notes += later
    sizes = [r["workers"] for r in rows]
    return SpotTimingFit(
        param_size_mb=s,
        bandwidth_req=b_req,
        alpha_1=alpha_1,
        beta_1=beta_1,
        compute_time=compute,
        batch_per_gpu=batch,
        gpus=gpus,
        workers=(min(sizes), max(sizes)),
        rows=len(rows),
        contention_rmse=rmse,
        leave_one_out=loo,
        warnings=tuple(notes),
    )


def _spot_timing_problems(contention: Contention, alpha_1: Estimate, loo: list[dict[str, Any]]) -> list[str]:
    """Warnings about a spot timing fit: clamped runs, a contention falling with |N|, no hold-out."""
    notes = []
    if contention.clamped_runs:
        notes.append(
            f"{len(contention.clamped_runs)} of the {len(contention.contended_runs)} contended runs have P "
            f"clamped at 0 or 1 ({', '.join(contention.clamped_runs[:5])}): eq. (9)'s line goes through "
            "the others only"
        )
    if alpha_1.value < 0:
        notes.append(
            f"alpha_1 = {alpha_1.value:.4g} < 0: eq. (9)'s contention probability falls as the cluster "
            "grows, the opposite of spotDNN's measurements; check B_req, S_parm and the PS bandwidth"
        )
    if not loo:
        notes.append(
            "no cluster run can be left out (too few contended sizes): the fit's prediction error is not measured"
        )
    return notes


@dataclass(frozen=True)
class ServerlessTimingFit:
    """Result of :func:`fit_serverless_timing`."""

    rate_alpha: Estimate
    rate_beta: Estimate
    storage_alpha: Estimate
    storage_beta: Estimate
    min_memory_mb: int
    min_memory_note: str
    memory_mb: tuple[float, float]
    functions: tuple[int, int]
    rows: int
    leave_one_out: list[dict[str, Any]]
    #: What in the data makes the fit doubtful (printed as warnings by the CLI).
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``profile fit-timing --json``)."""
        return {
            "kind": "serverless",
            "warnings": list(self.warnings),
            "rate_alpha": self.rate_alpha.to_dict(),
            "rate_beta": self.rate_beta.to_dict(),
            "storage_alpha": self.storage_alpha.to_dict(),
            "storage_beta": self.storage_beta.to_dict(),
            "min_memory_mb": self.min_memory_mb,
            "min_memory_note": self.min_memory_note,
            "domain": {"memory_mb": list(self.memory_mb), "functions": list(self.functions)},
            "rows": self.rows,
            "leave_one_run_out": self.leave_one_out,
        }


def fit_serverless_timing(path: str | Path, *, storage_cap_mb_s: float = 115.0) -> ServerlessTimingFit:
    """Fit eq. (6)'s and eq. (8)'s lines and m_min from a serverless timing CSV."""
    ok: list[ServerlessRow] = []
    failed: list[float] = []  # the memory of every failed run
    rows = 0
    for r in read_timing_csv(path, SERVERLESS_COLUMNS):
        flag = r["failed"].lower()
        if flag not in ("0", "1", "true", "false"):
            raise InvalidInputError(f"{r['_where']}.failed", f"must be 0 or 1, got {r['failed']!r}")
        memory_mb = _num(r, "memory_mb", positive=True, maximum=MAX_MEMORY_MB)
        count = int(_num(r, "functions", positive=True, integer=True, maximum=MAX_FUNCTIONS))
        rows += 1
        if flag in ("1", "true"):
            failed.append(memory_mb)
            continue
        ok.append(
            {
                "run": r["run"],
                "memory_mb": memory_mb,
                "functions": count,
                "samples_per_s": _num(r, "samples_per_s", positive=True),
                "storage_mb_s": _num(r, "storage_mb_s", positive=True),
            }
        )
    if not ok:
        raise InvalidInputError(str(path), "every run failed: nothing to fit")

    def lines(use: list[ServerlessRow]) -> tuple[Estimate, Estimate, Estimate, Estimate]:
        m = np.array([r["memory_mb"] for r in use])
        ra, rb, _ = linear_fit(m, np.array([r["samples_per_s"] for r in use]), f"{path}: samples_per_s")
        below = [r for r in use if r["storage_mb_s"] < storage_cap_mb_s * (1 - 1e-9)]
        sa, sb, _ = linear_fit(
            np.array([r["memory_mb"] for r in below]),
            np.array([r["storage_mb_s"] for r in below]),
            f"{path}: storage_mb_s (rows below the cap {storage_cap_mb_s:g} MB/s)",
        )
        return ra, rb, sa, sb

    ra, rb, sa, sb = lines(ok)
    if failed:
        above = [r["memory_mb"] for r in ok if r["memory_mb"] > max(failed)]
        if not above:
            raise InvalidInputError(str(path), f"no run succeeded above the largest failed memory {max(failed):g} MB")
        m_min = math.ceil(min(above))
        note = f"smallest memory that ran above the largest failed one ({max(failed):g} MB)"
    else:
        m_min = math.ceil(min(r["memory_mb"] for r in ok))
        note = "no run failed: the smallest memory tested (m_min may be lower)"
    loo: list[dict[str, Any]] = []
    for run in dict.fromkeys(r["run"] for r in ok):
        others = [r for r in ok if r["run"] != run]
        try:
            a, b, c, d = lines(others)
        except InvalidInputError:
            continue
        for held in (r for r in ok if r["run"] == run):
            m = held["memory_mb"]
            rate = a.value * m + b.value
            storage = min(c.value * m + d.value, storage_cap_mb_s)
            loo.append(
                {
                    "run": run,
                    "memory_mb": m,
                    "rate_error_pct": abs(rate - held["samples_per_s"]) / held["samples_per_s"] * 100,
                    "storage_error_pct": abs(storage - held["storage_mb_s"]) / held["storage_mb_s"] * 100,
                }
            )
    memory = [r["memory_mb"] for r in ok]
    functions = [r["functions"] for r in ok]
    notes: list[str] = []
    if ra.value <= 0:
        notes.append(
            f"the training rate falls as memory grows (rate_alpha = {ra.value:.4g}): eq. (6)'s line "
            "expects more memory (more vCPU) to train faster; check the runs"
        )
    if failed and min(memory) < max(failed):
        notes.append(
            f"runs failed above a memory that ran (failed at {', '.join(f'{m:g}' for m in sorted(failed))} "
            f"MB): m_min is taken above the largest failure, {m_min} MB"
        )
    if not loo:
        notes.append("no run can be left out (too few memory sizes): the fit's prediction error is not measured")
    for message in notes:
        warnings.warn(message, ProfileWarning, stacklevel=2)
    return ServerlessTimingFit(
        rate_alpha=ra,
        rate_beta=rb,
        storage_alpha=sa,
        storage_beta=sb,
        min_memory_mb=m_min,
        min_memory_note=note,
        memory_mb=(min(memory), max(memory)),
        functions=(min(functions), max(functions)),
        rows=rows,
        leave_one_out=loo,
        warnings=tuple(notes),
    )


def synthetic_spot_timing(
    path: str | Path,
    *,
    param_size_mb: float,
    bandwidth_req_mb_s: float,
    alpha_1: float,
    beta_1: float,
    types: dict[str, tuple[int, int, float]],
    sizes: Sequence[int],
    lone_repeats: int = 1,
    ps_bandwidth_mb_s: float = 1200.0,
    pcie_bandwidth_mb_s: float = 10000.0,
    noise: float = 0.0,
    seed: int = 0,
) -> None:
    """Write a spot timing CSV generated by eqs. (6)-(9), for tests and benchmarks.

    ``types`` maps a type to ``(gpus, batch_per_gpu, compute_s)``; ``lone_repeats`` lone-worker
    rows per type, then one run per entry of ``sizes`` whose workers cycle through the
    types; one PS. ``noise``: relative standard deviation of every measured time (the
    compute and the communication part independently).
    """
    rng = np.random.default_rng(seed)
    s, b_ps, pcie = param_size_mb, ps_bandwidth_mb_s, pcie_bandwidth_mb_s
    lines = [",".join(SPOT_COLUMNS)]
    names = list(types)
    runs = [(f"lone-{t}-{i}", 1, [t]) for i in range(lone_repeats) for t in names]
    runs += [(f"k{k}-{i}", k, [names[(w + i) % len(names)] for w in range(k)]) for i, k in enumerate(sizes)]
    for run, k, members in runs:
        if k * bandwidth_req_mb_s > b_ps:
            p = min(max(alpha_1 * math.sqrt(k) + beta_1, 0.0), 1.0)
            b_wk = p * b_ps / k + (1 - p) * bandwidth_req_mb_s
        else:
            b_wk = bandwidth_req_mb_s
        for t in members:
            gpus, batch, compute = types[t]
            comm = (2 * s / b_wk + 2 * gpus * s / pcie) * (1 + rng.normal(0.0, noise))
            iteration = compute * (1 + rng.normal(0.0, noise)) + comm
            lines.append(f"{run},{t},{gpus},{k},1,{batch},{iteration!r},{comm!r}")
    Path(path).write_text("\n".join(lines) + "\n")
