"""Fitting spotDNN's loss model (eq. 3) to loss logs, with standard errors and a domain.

    f_loss(b_w, R, |N|, j) = (gamma_2 b_w + gamma_3) sqrt((R + gamma_4) |N|) / (j + gamma_1) + gamma_5

(``no-cc``: sqrt(|N|) in place of sqrt((R + gamma_4) |N|)). For fixed gamma_1 and gamma_4
the model is linear in (gamma_2, gamma_3, gamma_5), so :func:`fit_loss` first scans a grid
of gamma_1 and gamma_4 solving that linear least-squares problem (no starting guess
needed), then polishes all free coefficients together with
:func:`scipy.optimize.least_squares`, reweighted by a power of the fitted loss
(:data:`WEIGHTINGS`). Standard errors come from
:func:`dnnprov.profiling.fits.uncertainty.fit_least_squares`: the larger of the classical and
the HC3 sandwich error, NaN where the Jacobian is rank-deficient, inflated for the
residuals' lag-1 autocorrelation within runs, with 95 % t-intervals.

Coefficients the data cannot determine by design are fixed and say why: gamma_2 when
every run has the same b_w, gamma_4 for ``no-cc`` (unused) and when every run has the
same R. The fit's validity domain is the range of b_w, |N| and R its runs covered, and the
logged losses and steps (the loss/iteration axis).

``tail_from`` fits each run's *tail* only: its points from the first step where its
smoothed loss reaches that loss (:func:`tail_of`). A prediction asks when a curve crosses a
target loss; where one hyperbola cannot follow a whole curve (a fast early fall and a slow
tail), the tail near the target is what decides the iterations to it (docs/profiler.md).
Doubtful data and fits are warned of (:func:`data_problems`, :func:`fit_problems`).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dnnprov.errors import InvalidInputError, ProfileWarning
from dnnprov.problems.spot import LOSS_VARIANTS
from dnnprov.problems.validation.domain import SpotDomain
from dnnprov.profiling.fits.uncertainty import MAX_EVALUATIONS, fit_least_squares
from dnnprov.profiling.readers import LossLog

PARAMS = ("gamma_1", "gamma_2", "gamma_3", "gamma_4", "gamma_5")
#: gamma_4 values scanned before polishing (gamma_4 >= 0).
GAMMA_4_GRID = (0.0, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
#: gamma_1 values scanned, as multiples of the step span above the smallest allowed.
GAMMA_1_GRID = tuple(np.geomspace(1e-4, 10.0, 60))


@dataclass(frozen=True)
class Estimate:
    """One fitted coefficient: value and standard error, or the reason it was fixed.

    ``stderr`` is NaN (JSON: null with ``undetermined``) when the data cannot determine
    the value; ``interval`` is its 95 % confidence interval (Student's t) when known.
    """

    value: float
    stderr: float | None
    fixed: str = ""
    interval: tuple[float, float] | None = None
    undetermined: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (no NaN: an undetermined error is null and says why)."""
        finite = self.stderr is not None and math.isfinite(self.stderr)
        out: dict[str, Any] = {"value": self.value, "stderr": self.stderr if finite else None}
        if self.interval is not None:
            out["interval_95"] = list(self.interval)
        if self.undetermined:
            out["undetermined"] = self.undetermined
        if self.fixed:
            out["fixed"] = self.fixed
        return out


def spread(variant: str, cc: np.ndarray, workers: np.ndarray, gamma_4: float) -> np.ndarray:
    """The sqrt(...) factor of eq. (3): sqrt((R + gamma_4) |N|), or sqrt(|N|) for no-cc."""
    k = np.asarray(workers, dtype=float)
    return np.sqrt(k) if variant == "no-cc" else np.sqrt((np.asarray(cc, dtype=float) + gamma_4) * k)


def loss_curve(
    coefficients: dict[str, float],
    variant: str,
    batch_wa: np.ndarray,
    cc: np.ndarray,
    workers: np.ndarray,
    step: np.ndarray,
) -> np.ndarray:
    """Eq. (3): the predicted loss after ``step`` normalized iterations."""
    g = coefficients
    s = spread(variant, cc, workers, g["gamma_4"])
    return (g["gamma_2"] * np.asarray(batch_wa, dtype=float) + g["gamma_3"]) * s / (
        np.asarray(step, dtype=float) + g["gamma_1"]
    ) + g["gamma_5"]


def iterations_to(
    coefficients: dict[str, float], variant: str, batch_wa: float, cc: float, workers: int, loss: float
) -> float:
    """Eq. (3) solved for j at ``loss``; NaN when unreachable (loss <= gamma_5 or numerator <= 0)."""
    g = coefficients
    numerator = g["gamma_2"] * batch_wa + g["gamma_3"]
    if loss <= g["gamma_5"] or numerator <= 0:
        return math.nan
    return float(
        numerator * spread(variant, np.array([cc]), np.array([workers]), g["gamma_4"])[0] / (loss - g["gamma_5"])
        - g["gamma_1"]
    )


@dataclass(frozen=True)
class LossFit:
    """Result of :func:`fit_loss`."""

    variant: str
    estimates: dict[str, Estimate]
    rmse: float
    points: int
    runs: tuple[str, ...]
    domain: SpotDomain
    residuals: np.ndarray
    #: What in the data makes the fit less meaningful (printed as warnings by the CLI).
    warnings: tuple[str, ...] = ()
    #: How the standard errors were made: residual weighting, covariance, lag-1
    #: autocorrelation, stderr inflation, degrees of freedom (see :data:`WEIGHTINGS`).
    uncertainty: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: The loss from which each run's tail was fitted (None: the whole curves).
    tail_from: float | None = None

    def coefficients(self) -> dict[str, float]:
        """gamma_1..gamma_5 by name."""
        return {k: e.value for k, e in self.estimates.items()}

    def predict(self, log: LossLog) -> np.ndarray:
        """The fitted loss at every row of ``log``."""
        return loss_curve(self.coefficients(), self.variant, log.batch_wa, log.cc, log.workers, log.step)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the ``profile fit-loss --json`` output)."""
        return {
            "variant": self.variant,
            "coefficients": {k: e.to_dict() for k, e in self.estimates.items()},
            "rmse": self.rmse,
            "max_abs_residual": float(np.abs(self.residuals).max()),
            "points": self.points,
            "runs": list(self.runs),
            "domain": self.domain.to_dict(),
            "uncertainty": dict(self.uncertainty),
            "tail_from": self.tail_from,
            "warnings": list(self.warnings),
        }


def fit_with_errors(
    residual: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, low: np.ndarray, high: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The profiler's least squares: (x, standard errors, residuals) of ``min |residual(x)|^2``.

    :func:`dnnprov.profiling.fits.uncertainty.fit_least_squares` with the classical covariance
    cov = s^2 (J^T J)^-1, s^2 = SSR / (points - free coefficients). A coefficient at a
    bound, one the data cannot determine (rank-deficient Jacobian), or without spare
    points gets NaN as its standard error.
    """
    fit = fit_least_squares(residual, x0, low, high, covariance="classical")
    return fit.x, fit.stderr, fit.residuals


def _distinct(values: np.ndarray) -> int:
    return len(np.unique(np.round(np.asarray(values, dtype=float), 9)))


#: A run's loss "falls" when its rank correlation with the step is below this.
FALLING = -0.5


def _rank_correlation(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (ties by order); 0 when either side is constant."""
    rx, ry = np.argsort(np.argsort(x, kind="stable")), np.argsort(np.argsort(y, kind="stable"))
    if _distinct(x) < 2 or _distinct(y) < 2:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def data_problems(log: LossLog) -> list[str]:
    """Warnings about loss data eq. (3) fits poorly; raises when it cannot be fitted at all.

    Eq. (3) is a loss that falls with the normalized iterations j toward gamma_5. It cannot
    be fitted when no run logs two different steps, or when the loss falls in no run
    (constant, noisy constant or increasing logs): refused with one error. A run whose loss
    does not fall, and losses below 0, are warnings.
    """
    runs = log.runs()
    stepped = [r for r in runs if _distinct(log.step[log.run == r]) >= 2]
    if not stepped:
        raise InvalidInputError(
            "loss log", "no run logs the loss at two different steps: eq. (3) needs how the loss falls with the steps"
        )
    falling = {r: _rank_correlation(log.step[log.run == r], log.loss[log.run == r]) < FALLING for r in stepped}
    if not any(falling.values()):
        raise InvalidInputError(
            "loss log",
            "the loss falls with the steps in no run (it is constant, noise or "
            "rising): eq. (3), a falling curve, would fit nothing meaningful",
        )
    notes = []
    flat = [r for r, ok in falling.items() if not ok]
    if flat:
        notes.append(
            f"the loss does not fall with the steps in {len(flat)} of {len(stepped)} runs "
            f"({', '.join(map(str, flat[:5]))}{', ...' if len(flat) > 5 else ''}): they pull the fit"
        )
    if (log.loss < 0).any():
        notes.append(
            f"{int((log.loss < 0).sum())} losses are below 0: eq. (3)'s floor gamma_5 may be fitted "
            "below 0, which no cross-entropy loss reaches"
        )
    if len(runs) == 1:
        notes.append("one run: nothing to leave out, so the fit's prediction error is not measured")
    return notes


#: Residual weightings of :func:`fit_loss`: each residual is divided by the fitted loss to
#: the power theta (the loss floored at :data:`WEIGHT_FLOOR` x the largest |loss|).
#: ``auto`` estimates theta in [0, 1] from the unweighted fit (the slope of log |residual|
#: on log |fitted loss|: a power-of-the-mean variance model); ``relative`` is theta = 1,
#: for noise proportional to the loss; ``absolute`` is theta = 0, ordinary least squares.
WEIGHTINGS = ("auto", "relative", "absolute")
WEIGHT_FLOOR = 0.01
#: Reweighting passes of the relative fit (weights from the previous pass's fitted curve).
REWEIGHT_PASSES = 3
#: A lag-1 residual autocorrelation above this (and above 2 / sqrt(points)) is warned of.
AUTOCORRELATION_WARNING = 0.2
#: Negative predicted losses within this multiple of the last logged step are warned of.
NEGATIVE_LOSS_HORIZON = 10.0


def _design_start(
    variant: str,
    free: list[str],
    fixed: dict[str, tuple[float, str]],
    b: np.ndarray,
    cc: np.ndarray,
    k: np.ndarray,
    j: np.ndarray,
    y: np.ndarray,
) -> dict[str, float]:
    """A starting point: the best (gamma_1, gamma_4) grid point, solved linearly for the rest."""
    j_low = float(j.min())
    span = max(float(j.max()) - j_low, 1.0)

    def design(g1: float, g4: float) -> np.ndarray:
        s = spread(variant, cc, k, g4) / (j + g1)
        cols = [b * s] if "gamma_2" in free else []
        return np.column_stack(cols + [s, np.ones_like(s)])

    best: tuple[float, float, float, np.ndarray] | None = None
    g4_grid = GAMMA_4_GRID if "gamma_4" in free else (fixed["gamma_4"][0],)
    for g4 in g4_grid:
        for share in GAMMA_1_GRID:
            g1 = -j_low + share * span
            a = design(g1, g4)
            coef, *_ = np.linalg.lstsq(a, y, rcond=None)
            ssr = float(((a @ coef - y) ** 2).sum())
            if best is None or ssr < best[0]:
                best = (ssr, g1, g4, coef)
    if best is None:
        raise ValueError("the gamma_1/gamma_4 start grids are empty")
    _, g1, g4, coef = best
    start = {"gamma_1": g1, "gamma_4": g4}
    names = (["gamma_2"] if "gamma_2" in free else []) + ["gamma_3", "gamma_5"]
    start.update(zip(names, coef))
    return start


def _run_blocks(log: LossLog) -> list[np.ndarray]:
    """Row indices of each run in step order (the residuals' logging order)."""
    out = []
    for r in log.runs():
        rows = np.flatnonzero(log.run == r)
        out.append(rows[np.argsort(log.step[rows], kind="stable")])
    return out


def _variance_power(level: np.ndarray, residuals: np.ndarray, floor: float) -> float:
    """theta in [0, 1] of var(residual) ~ level^(2 theta): the slope of log |e| on log level."""
    use = (level > floor) & (residuals != 0)
    if use.sum() < 10 or np.ptp(np.log(level[use])) < 1e-6:
        return 0.0
    slope = np.polyfit(np.log(level[use]), np.log(np.abs(residuals[use])), 1)[0]
    return float(min(max(slope, 0.0), 1.0))


def fit_problems(fit: LossFit, log: LossLog) -> list[str]:
    """Warnings about a fitted eq. (3): signs the papers' fits never have, undetermined
    coefficients, correlated residuals, negative predicted losses."""
    g = fit.coefficients()
    notes = []
    if not fit.uncertainty.get("converged", True):
        notes.append(
            f"the least-squares solver stopped at its {MAX_EVALUATIONS:,} evaluations before converging: "
            "the values are not an optimum and their errors not to be trusted (the data hardly fit eq. (3))"
        )
    lost = [p for p, e in fit.estimates.items() if e.undetermined]
    if lost:
        notes.append(
            f"{', '.join(lost)} not determined by the data (rank-deficient fit: their effects cannot be "
            "told apart from the other coefficients'); standard error NaN"
        )
    if not fit.estimates["gamma_2"].fixed and g["gamma_2"] >= 0:
        notes.append(
            f"gamma_2 = {g['gamma_2']:.4g} >= 0: a larger per-worker batch b_w does not cut the iterations "
            "(spotDNN's fits have gamma_2 < 0); the batch term may be fitting noise"
        )
    if g["gamma_5"] < 0:
        notes.append(
            f"gamma_5 = {g['gamma_5']:.4g} < 0: eq. (3)'s floor is below zero, which no cross-entropy loss reaches"
        )
    rho = fit.uncertainty.get("autocorrelation")
    if rho is not None and rho > max(AUTOCORRELATION_WARNING, 2 / math.sqrt(fit.points)):
        notes.append(
            f"the residuals are serially correlated (lag-1 autocorrelation {rho:.2f}): eq. (3) misses "
            f"part of the curve's shape; standard errors are inflated x{fit.uncertainty['stderr_inflation']:.2f} "
            "(effective sample size)"
        )
    last = float(log.step.max())
    for b_w, cc, k in dict.fromkeys(zip(log.batch_wa.tolist(), log.cc.tolist(), log.workers.tolist())):
        zero = iterations_to(g, fit.variant, b_w, cc, k, 0.0) if g["gamma_5"] < 0 else math.nan
        if math.isfinite(zero) and zero <= NEGATIVE_LOSS_HORIZON * last:
            where = (
                "inside the logged steps"
                if zero <= last
                else f"within {NEGATIVE_LOSS_HORIZON:g} x the last logged step"
            )
            notes.append(
                f"the fitted model predicts negative losses from step {max(zero, 0.0):,.0f} ({where}, which end "
                f"at {last:,.0f}; b_w {b_w:g}, |N| {k}): its iterations to a low loss are not to be trusted"
            )
            break
    return notes


def tail_of(log: LossLog, loss: float) -> tuple[LossLog, list[str]]:
    """Each run's points from the first step where its 3-point moving-average loss is at or
    below ``loss``; and the runs that never get there (left out)."""
    if not math.isfinite(loss):
        raise InvalidInputError("tail_from", f"must be a finite loss; got {loss!r}")
    keep = np.zeros(len(log), dtype=bool)
    missing = []
    for name in log.runs():
        mine = log.run == name
        start = _first_step_at(log.step[mine], log.loss[mine], loss)
        if start is None:
            missing.append(name)
            continue
        keep |= mine & (log.step >= start)
    if not keep.any():
        raise InvalidInputError(
            "tail_from", f"no run's loss reaches {loss:g} (the lowest logged is {log.loss.min():g})"
        )
    return log.select(keep), missing


def fit_loss(log: LossLog, variant: str = "cc", weighting: str = "auto", tail_from: float | None = None) -> LossFit:
    """Fit gamma_1..gamma_5 of eq. (3) to ``log`` by (weighted) nonlinear least squares.

    ``weighting`` is one of :data:`WEIGHTINGS`. Standard errors: sandwich covariance,
    inflated for the residuals' lag-1 autocorrelation within runs, with 95 % t-intervals
    (:mod:`dnnprov.profiling.fits.uncertainty`). ``tail_from``: fit the runs' tails only
    (:func:`tail_of`; a run that never reaches it is left out, with a warning). Every
    warning is also issued as a :class:`dnnprov.errors.ProfileWarning`.
    """
    if variant not in LOSS_VARIANTS:
        raise InvalidInputError("variant", f"must be one of {', '.join(LOSS_VARIANTS)}; got {variant!r}")
    if weighting not in WEIGHTINGS:
        raise InvalidInputError("weighting", f"must be one of {', '.join(WEIGHTINGS)}; got {weighting!r}")
    tail_notes = []
    if tail_from is not None:
        log, missing = tail_of(log, tail_from)
        if missing:
            tail_notes.append(
                f"{len(missing)} run(s) never reach the tail's loss {tail_from:g} and are left out of the fit: "
                + ", ".join(missing[:5])
                + (", ..." if len(missing) > 5 else "")
            )
    notes = tail_notes + data_problems(log)
    b, cc, k, j, y = log.batch_wa, log.cc, log.workers, log.step, log.loss
    fixed: dict[str, tuple[float, str]] = {}
    if _distinct(b) < 2:
        fixed["gamma_2"] = (0.0, "every run has the same b_w: the batch term cannot be told from gamma_3")
    if variant == "no-cc":
        fixed["gamma_4"] = (0.0, "unused by the no-cc variant")
    elif len({(round(float(r), 9), int(n)) for r, n in zip(cc, k)}) < 2:
        fixed["gamma_4"] = (1.0, "every run has the same R and |N|: gamma_4 cannot be told from gamma_3 (set to 1)")
    elif _distinct(cc) < 2:
        fixed["gamma_4"] = (
            1.0,
            ("every run has the same R: sqrt(R + gamma_4) only rescales gamma_2 and gamma_3 (set to 1)"),
        )
    free = [p for p in PARAMS if p not in fixed]
    if len(y) <= len(free):
        raise InvalidInputError("loss log", f"{len(y)} rows cannot determine {len(free)} coefficients")
    start = _design_start(variant, free, fixed, b, cc, k, j, y)

    def unpack(x: np.ndarray) -> dict[str, float]:
        values = {p: v for p, (v, _) in fixed.items()}
        values.update(zip(free, x))
        return values

    floor = WEIGHT_FLOOR * max(float(np.abs(y).max()), 1e-300)
    scale = np.ones_like(y)

    def residual(x: np.ndarray) -> np.ndarray:
        return (loss_curve(unpack(x), variant, b, cc, k, j) - y) / scale

    x = np.array([start[p] for p in free])
    low = np.array(
        [
            -float(j.min()) + 1e-9 * max(float(j.max() - j.min()), 1.0)
            if p == "gamma_1"
            else 0.0
            if p == "gamma_4"
            else -np.inf
            for p in free
        ]
    )
    high = np.full(len(free), np.inf)
    blocks = _run_blocks(log)
    solved = fit_least_squares(residual, x, low, high, blocks=blocks)
    level = np.maximum(np.abs(loss_curve(unpack(solved.x), variant, b, cc, k, j)), floor)
    theta = (
        {"relative": 1.0, "absolute": 0.0}[weighting]
        if weighting != "auto"
        else _variance_power(level, solved.residuals, floor)
    )
    for _ in range(REWEIGHT_PASSES if theta > 0 and solved.converged else 0):
        scale = level**theta
        solved = fit_least_squares(residual, solved.x, low, high, blocks=blocks)
        level = np.maximum(np.abs(loss_curve(unpack(solved.x), variant, b, cc, k, j)), floor)
    values = unpack(solved.x)
    estimates = {}
    for p in PARAMS:
        if p in fixed:
            estimates[p] = Estimate(fixed[p][0], None, fixed[p][1])
            continue
        i = free.index(p)
        if i in solved.at_bound:
            bound = "gamma_1 > -min(j)" if p == "gamma_1" else "gamma_4 >= 0"
            estimates[p] = Estimate(float(values[p]), None, f"stopped at its bound {bound}")
        elif i in solved.undetermined:
            estimates[p] = Estimate(
                float(values[p]),
                math.nan,
                undetermined="rank-deficient: the data cannot tell it from the other coefficients",
            )
        else:
            estimates[p] = Estimate(float(values[p]), float(solved.stderr[i]), interval=solved.interval(i))
    runs = tuple(log.runs())
    domain = SpotDomain(
        batch_wa=(float(b.min()), float(b.max())),
        workers=(int(k.min()), int(k.max())),
        cc=(float(cc.min()), float(cc.max())),
        loss=(float(y.min()), float(y.max())),
        iterations=(float(j.min()), float(j.max())),
        source=f"dnnprov profile fit-loss: {len(y)} logged steps of {len(runs)} runs "
        f"({', '.join(runs[:8])}{', ...' if len(runs) > 8 else ''}), loss variant {variant}"
        + ("" if tail_from is None else f", each run's tail from loss {tail_from:g}")
        + "; "
        "b_w is the per-worker average batch of eq. (4), not the cluster's global batch",
    )
    res = loss_curve(values, variant, b, cc, k, j) - y
    uncertainty = {
        "weighting": weighting,
        "weight_power": theta,
        "converged": solved.converged,
        "covariance": "larger of classical and sandwich (HC3)",
        "autocorrelation": solved.autocorrelation,
        "stderr_inflation": solved.inflation,
        "dof": solved.dof,
        "interval": "95 % Student t",
    }
    fit = LossFit(
        variant=variant,
        estimates=estimates,
        rmse=float(math.sqrt((res**2).mean())),
        points=len(y),
        runs=runs,
        domain=domain,
        residuals=res,
        uncertainty=uncertainty,
        tail_from=tail_from,
    )
    notes += fit_problems(fit, log)
    for note in notes:
        warnings.warn(note, ProfileWarning, stacklevel=2)
    return dataclasses.replace(fit, warnings=tuple(notes))


def _first_step_at(step: np.ndarray, loss: np.ndarray, target: float) -> float | None:
    """First step at which the run's 3-point moving-average loss is at or below ``target`` (None: never)."""
    order = np.argsort(step)
    s, y = step[order], loss[order]
    smooth = np.convolve(y, np.ones(3) / 3, mode="same") if len(y) >= 3 else y.copy()
    smooth[0], smooth[-1] = y[0], y[-1]
    hit = np.flatnonzero(smooth <= target)
    return float(s[hit[0]]) if hit.size else None


def _observed_iterations(step: np.ndarray, loss: np.ndarray, target: float) -> float:
    """First step at which the run's 3-point moving-average loss is at or below ``target`` (else its last)."""
    first = _first_step_at(step, loss, target)
    return float(np.max(step)) if first is None else first


def leave_one_run_out(
    log: LossLog, variant: str = "cc", weighting: str = "auto", tail_from: float | None = None
) -> list[dict[str, Any]]:
    """Fit without each run in turn and predict it, as the papers report prediction error.

    Per held-out run: ``loss_error_pct``, the mean |predicted - logged| / logged loss over
    its steps, and ``iterations_error_pct``, the error of the predicted iterations to
    reach the run's final loss (mean of its last three logged losses) against the first
    step where its smoothed loss got there (``None`` where undefined, e.g. a logged loss of
    0). A run whose leaving out leaves data eq. (3) cannot fit is skipped, with a
    :class:`dnnprov.errors.ProfileWarning`. Needs at least two runs. With ``tail_from``
    the fits and the losses compared are the runs' tails (:func:`tail_of`); a run that
    never reaches it is skipped.
    """
    runs = log.runs()
    if len(runs) < 2:
        raise InvalidInputError("loss log", "leave-one-run-out needs at least two runs")
    out, skipped = [], []
    for name in runs:
        held = log.run == name
        try:
            with warnings.catch_warnings():  # the sub-fits' warnings are not the main fit's
                warnings.simplefilter("ignore", ProfileWarning)
                fit = fit_loss(log.select(~held), variant, weighting, tail_from)
        except InvalidInputError:
            skipped.append(name)  # the other runs alone cannot be fitted (e.g. none of them falls)
            continue
        test = log.select(held)
        if tail_from is not None:
            try:
                test, _ = tail_of(test, tail_from)
            except InvalidInputError:
                skipped.append(name)  # its loss never reaches the tail
                continue
        predicted = fit.predict(test)
        logged = test.loss
        with np.errstate(divide="ignore", invalid="ignore"):
            loss_err = float(np.mean(np.abs(predicted - logged) / np.abs(logged)) * 100)
        order = np.argsort(test.step)
        target = float(np.mean(logged[order][-3:]))
        j_obs = _observed_iterations(test.step, logged, target)
        j_pred = iterations_to(
            fit.coefficients(), variant, float(test.batch_wa[0]), float(test.cc[0]), int(test.workers[0]), target
        )
        it_err = abs(j_pred - j_obs) / j_obs * 100 if j_obs > 0 and math.isfinite(j_pred) else math.nan
        out.append(
            {
                "run": name,
                "workers": int(test.workers[0]),
                "batch_wa": float(test.batch_wa[0]),
                "cc": float(test.cc[0]),
                "loss_error_pct": loss_err if math.isfinite(loss_err) else None,
                "target_loss": target,
                "iterations_logged": j_obs,
                "iterations_predicted": j_pred if math.isfinite(j_pred) else None,
                "iterations_error_pct": it_err if math.isfinite(it_err) else None,
            }
        )
    if skipped:
        warnings.warn(
            f"leave-one-run-out skipped {len(skipped)} of {len(runs)} runs ({', '.join(map(str, skipped[:5]))}"
            f"{', ...' if len(skipped) > 5 else ''}): the other runs alone cannot be fitted; the main fit "
            "is kept",
            ProfileWarning,
            stacklevel=2,
        )
    return out


def synthetic_log(
    coefficients: dict[str, float],
    variant: str,
    clusters: Sequence[tuple[float, float, int]],
    *,
    steps: int = 60,
    max_step: float = 20000.0,
    noise: float = 0.01,
    seed: int = 0,
    relative: bool = False,
) -> LossLog:
    """Loss logs generated by eq. (3) with Gaussian noise: one run per ``(b_w, R, |N|)``.

    Each run logs ``steps`` evenly spaced points in [0, ``max_step``]; ``noise`` is the
    standard deviation added to the loss (``relative``: as a fraction of the loss). For
    tests, benchmarks and for checking a fit's setup.
    """
    rng = np.random.default_rng(seed)
    rows = []
    grid = np.linspace(0.0, max_step, steps)
    for i, (b_w, cc, workers) in enumerate(clusters):
        clean = loss_curve(
            coefficients, variant, np.full(steps, b_w), np.full(steps, cc), np.full(steps, workers), grid
        )
        noisy = clean + rng.normal(0.0, noise, steps) * (clean if relative else 1.0)
        rows += [(f"run{i}", int(workers), float(b_w), float(cc), float(s), float(v)) for s, v in zip(grid, noisy)]
    return LossLog.from_rows(rows)
