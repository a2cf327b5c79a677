"""Calibrating unpublished parameters to published run times (λDNN Table 3, spotDNN Table I).

λDNN publishes its Table 3 plans with measured times but not the sample count n_t nor the
storage line B_f^s = alpha_2 m + beta_2 (eq. 8). :func:`calibrate_serverless` fits those
with the profiler's least squares (:func:`dnnprov.profiling.fits.loss.fit_with_errors`) on the
relative time errors of given plans, keeping the storage line inside the band the paper
measured (one function reads 4-9 MB/s whatever its memory: the line's values at the
smallest and largest memory are bounded to that band). Plans held out of the fit are
predicted for validation. :func:`calibrate_gamma_4` does the same for spotDNN's gamma_4
(eq. 3, not published) against measured plan times.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from dnnprov.errors import InvalidInputError
from dnnprov.models.predict import predict
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.profiling.fits.loss import Estimate, fit_with_errors

#: One function's storage read rate the paper measured, MB/s (spec/serverless.md section 6).
STORAGE_BAND_MB_S = (4.0, 9.0)
#: Memory sizes the band was measured between: Lambda's smallest and largest at the time, MB.
STORAGE_BAND_MEMORY_MB = (128.0, 3008.0)


@dataclass(frozen=True)
class PublishedRun:
    """A published plan and its measured time: ``n`` functions of ``memory_mb``, local batch (None: eq. 9)."""

    functions: int
    memory_mb: int
    local_batch: float | None
    time_s: float
    label: str = ""


@dataclass(frozen=True)
class Calibration:
    """Result of :func:`calibrate_serverless`."""

    samples: Estimate
    storage_alpha: float
    storage_beta: float
    storage_at: dict[str, Estimate]
    fitted: list[dict[str, Any]]

    def apply(self, problem: ServerlessProblem, *, samples: bool = True) -> ServerlessProblem:
        """``problem`` with the calibrated storage line (and sample count unless ``samples=False``)."""
        w = problem.workload
        changes: dict[str, Any] = {"storage_alpha": self.storage_alpha, "storage_beta": self.storage_beta}
        if samples:
            changes["samples"] = round(float(self.samples.value))
        return problem.replace(workload=dataclasses.replace(w, **changes))

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "samples": self.samples.to_dict(),
            "storage_alpha": self.storage_alpha,
            "storage_beta": self.storage_beta,
            "storage_mb_s_at": {k: v.to_dict() for k, v in self.storage_at.items()},
            "fitted": self.fitted,
        }


def compare(problem: ServerlessProblem, runs: Sequence[PublishedRun]) -> list[dict[str, Any]]:
    """Predicted against published time for every run (error in % of the published time)."""
    out = []
    for r in runs:
        p = predict(problem, functions=r.functions, memory_mb=r.memory_mb, local_batch=r.local_batch)
        out.append(
            {
                "label": r.label,
                "functions": r.functions,
                "memory_mb": r.memory_mb,
                "local_batch": p["plan"]["local_batch"],
                "published_s": r.time_s,
                "predicted_s": p["time_s"],
                "error_pct": None if p["time_s"] is None else (p["time_s"] - r.time_s) / r.time_s * 100,
            }
        )
    return out


def calibrate_serverless(problem: ServerlessProblem, runs: Sequence[PublishedRun]) -> Calibration:
    """Fit n_t and the storage line to ``runs`` (relative time errors, least squares)."""
    if not runs:
        raise InvalidInputError("runs", "give at least one published run")
    (m_low, m_high), (band_low, band_high) = STORAGE_BAND_MEMORY_MB, STORAGE_BAND_MB_S

    def with_params(x: np.ndarray) -> ServerlessProblem:
        samples, s_low, s_high = x
        alpha = (s_high - s_low) / (m_high - m_low)
        w = dataclasses.replace(
            problem.workload,
            samples=max(1, round(float(samples))),
            storage_alpha=alpha,
            storage_beta=s_low - alpha * m_low,
        )
        return problem.replace(workload=w)

    def residual(x: np.ndarray) -> np.ndarray:
        # n_t enters eq. (2) linearly; scale the rounded count back to the continuous one so
        # that the least squares sees a smooth function of it.
        q = with_params(x)
        scale = x[0] / q.workload.samples
        out = []
        for r in runs:
            p = predict(q, functions=r.functions, memory_mb=r.memory_mb, local_batch=r.local_batch)
            if p["time_s"] is None:
                raise InvalidInputError("runs", f"{r.label or r}: the model gives no time for this plan")
            load = p["load_s"]
            out.append(((p["training_s"] - load) * scale + load - r.time_s) / r.time_s)
        return np.array(out)

    w = problem.workload
    start = np.array([float(w.samples), band_low, band_high])
    low = np.array([1.0, band_low, band_low])
    high = np.array([np.inf, band_high, band_high])
    x, stderr, _ = fit_with_errors(residual, start, low, high)
    q = with_params(x)

    def est(i: int) -> Estimate:
        se = stderr[i]
        at_bound = x[i] <= low[i] * (1 + 1e-9) or x[i] >= high[i] * (1 - 1e-9)
        return Estimate(
            float(x[i]),
            None if np.isnan(se) else float(se),
            f"at the bound of the measured {band_low:g}-{band_high:g} MB/s band" if at_bound else "",
        )

    return Calibration(
        samples=est(0),
        storage_alpha=q.workload.storage_alpha,
        storage_beta=q.workload.storage_beta,
        storage_at={f"{m_low:g}": est(1), f"{m_high:g}": est(2)},
        fitted=compare(q, runs),
    )


@dataclass(frozen=True)
class SpotRun:
    """A published spot plan (counts per column label, PS count) and its measured time."""

    counts: dict[str, int]
    time_s: float
    label: str = ""
    ps: int = 1


def compare_spot(problem: SpotProblem, runs: Sequence[SpotRun]) -> list[dict[str, Any]]:
    """Predicted against published time for every spot run (error in % of the published time)."""
    out = []
    for r in runs:
        p = predict(problem, counts=r.counts, ps=r.ps)
        out.append(
            {
                "label": r.label,
                "counts": dict(r.counts),
                "published_s": r.time_s,
                "predicted_s": p["time_s"],
                "error_pct": None if p["time_s"] is None else (p["time_s"] - r.time_s) / r.time_s * 100,
            }
        )
    return out


def calibrate_gamma_4(problem: SpotProblem, runs: Sequence[SpotRun]) -> tuple[Estimate, list[dict[str, Any]]]:
    """Fit gamma_4 of eq. (3) (>= 0) to published plan times; returns it and the fitted comparison."""
    if problem.workload.loss_variant != "cc" or problem.model != "paper":
        raise InvalidInputError("workload.loss_variant", "gamma_4 exists in the paper model's cc variant only")

    def with_g4(g4: float) -> SpotProblem:
        return problem.replace(workload=dataclasses.replace(problem.workload, gamma_4=float(g4)))

    def residual(x: np.ndarray) -> np.ndarray:
        q = with_g4(x[0])
        return np.array([(predict(q, counts=r.counts, ps=r.ps)["time_s"] - r.time_s) / r.time_s for r in runs])

    x, stderr, _ = fit_with_errors(residual, np.array([problem.workload.gamma_4]), np.array([0.0]), np.array([np.inf]))
    estimate = Estimate(float(x[0]), None if np.isnan(stderr[0]) else float(stderr[0]))
    return estimate, compare_spot(with_g4(x[0]), runs)


def leave_one_out_serverless(problem: ServerlessProblem, runs: Sequence[PublishedRun]) -> list[dict[str, Any]]:
    """Each run predicted by the calibration fitted to the other runs (its hold-out error)."""
    return [
        compare(calibrate_serverless(problem, [*runs[:i], *runs[i + 1 :]]).apply(problem), [run])[0]
        for i, run in enumerate(runs)
    ]


def leave_one_out_gamma_4(problem: SpotProblem, runs: Sequence[SpotRun]) -> list[dict[str, Any]]:
    """Each spot run predicted with gamma_4 fitted to the other runs (its hold-out error)."""
    out = []
    for i, run in enumerate(runs):
        g4, _ = calibrate_gamma_4(problem, [*runs[:i], *runs[i + 1 :]])
        held_out = problem.replace(workload=dataclasses.replace(problem.workload, gamma_4=g4.value))
        out.append({**compare_spot(held_out, [run])[0], "gamma_4": g4.value})
    return out


# ------------------------------------------------------------------ the papers' calibration
#: λDNN Table 3 (ResNet50, 1 epoch, T_o 600 s): naive, Siren and λDNN plans and measured times.
TABLE3_RUNS = (
    PublishedRun(8, 3008, 64, 703.95, "naive"),
    PublishedRun(9, 2816, 128, 528.96, "Siren"),
    PublishedRun(8, 2560, None, 573.34, "lambdaDNN"),
)
#: λDNN Fig. 10 results held out of the calibration: (instance, run).
HOLDOUT_RUNS = (
    ("serverless/paper-fig10-1dcnn-90s.json", PublishedRun(10, 1088, None, 86.2, "1DCNN lambdaDNN")),
    ("serverless/paper-fig10-mobilenet-1200s.json", PublishedRun(7, 1728, None, 967.5, "MobileNet lambdaDNN")),
)


class _ServerlessEstimates(TypedDict):
    """The serverless workload fields the authors estimated rather than measured."""

    samples: int
    storage_alpha: float
    storage_beta: float


#: The estimates calibration starts from (docs/data.md): CIFAR-10's 50,000 training images
#: and the line through 4 MB/s at 128 MB and 9 MB/s at 3,008 MB.
ESTIMATED_SERVERLESS: _ServerlessEstimates = {"samples": 50000, "storage_alpha": 0.00173611, "storage_beta": 3.77778}
#: spotDNN Table I plans on the paper's testbed with their measured times.
TABLE1_RUNS = (
    SpotRun({"g3.8xlarge": 5, "g3.16xlarge": 3}, 2549.02, "spotDNN"),
    SpotRun({"g3.8xlarge": 4, "g3.16xlarge": 3}, 2710.85, "CM-DARE+"),
    SpotRun({"g4dn.4xlarge": 2, "g3.8xlarge": 5, "g3.16xlarge": 2}, 2597.34, "Srifty+"),
)
#: gamma_4 before calibration (the earlier estimate, docs/data.md).
ESTIMATED_GAMMA_4 = 1.0


def table1_paper_problem(gamma_4: float | None = None) -> SpotProblem:
    """Table I on the paper model: the code's catalog, quotas [0,5,5,5,5], ResNet-110 paper profile."""
    from dnnprov.io.catalogs.catalog import build_spot_problem, embedded_path, load_catalog, load_spot_profile
    from dnnprov.io.paper import TABLE5_TYPES, UNPRICED_PS
    from dnnprov.problems.spot import SpotSLO

    catalog = load_catalog(embedded_path("catalogs", "reference-code-2023.json"))
    profile = load_spot_profile(embedded_path("workloads", "spot", "resnet110-paper.json"))
    if gamma_4 is not None:
        profile = dataclasses.replace(profile, workload=dataclasses.replace(profile.workload, gamma_4=gamma_4))
    return build_spot_problem(
        catalog,
        profile,
        SpotSLO(loss=0.8, time_s=2600),
        platform=UNPRICED_PS,
        quotas=dict(zip(TABLE5_TYPES, (0, 5, 5, 5, 5))),
        name="table1-paper-model",
    )


def _serverless_instance(relative: str) -> ServerlessProblem:
    """The embedded instance ``relative``, which must be a serverless one."""
    from dnnprov.io.instances import embedded_instance, read_instance

    problem = read_instance(embedded_instance(relative))
    if not isinstance(problem, ServerlessProblem):
        raise TypeError(f"{relative}: expected a serverless instance, got {type(problem).__name__}")
    return problem


def paper_calibration() -> dict[str, Any]:
    """Calibrate λDNN's n_t and storage line to Table 3 and spotDNN's gamma_4 to Table I.

    Returns the calibrated numbers, every comparison before and after ("after" on the fitted
    runs is the fit's residual, not a validation) and the leave-one-out hold-out errors (the
    figures of docs/reproduction.md; ``python -m dnnprov.profiling.calibrate`` prints them).
    """
    table3 = _serverless_instance("serverless/paper-table3-resnet50.json")
    before = table3.replace(workload=dataclasses.replace(table3.workload, **ESTIMATED_SERVERLESS))
    calibration = calibrate_serverless(before, TABLE3_RUNS)
    holdout = []
    for relative, run in HOLDOUT_RUNS:
        problem = _serverless_instance(relative)
        start = problem.replace(
            workload=dataclasses.replace(
                problem.workload,
                storage_alpha=ESTIMATED_SERVERLESS["storage_alpha"],
                storage_beta=ESTIMATED_SERVERLESS["storage_beta"],
            )
        )
        same_data = "mobilenet" in relative  # CIFAR-10, as ResNet50
        row = {
            "label": run.label,
            "before": compare(start, [run])[0],
            "after_storage": compare(calibration.apply(start, samples=False), [run])[0],
        }
        if same_data:
            row["after_storage_and_samples"] = compare(calibration.apply(start), [run])[0]
        holdout.append(row)
    g4, table1_after = calibrate_gamma_4(table1_paper_problem(ESTIMATED_GAMMA_4), TABLE1_RUNS)
    return {
        "serverless": {
            "calibration": calibration.to_dict(),
            "before": compare(before, TABLE3_RUNS),
            "after": calibration.fitted,
            "leave_one_out": leave_one_out_serverless(before, TABLE3_RUNS),
            "holdout": holdout,
        },
        "spot": {
            "gamma_4": g4.to_dict(),
            "before": compare_spot(table1_paper_problem(ESTIMATED_GAMMA_4), TABLE1_RUNS),
            "after": table1_after,
            "leave_one_out": leave_one_out_gamma_4(table1_paper_problem(ESTIMATED_GAMMA_4), TABLE1_RUNS),
        },
    }


def main() -> int:
    """``python -m dnnprov.profiling.calibrate``: print the calibration as JSON."""
    import json

    print(json.dumps(paper_calibration(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
