"""Standard errors the profiler can defend: rank, heteroscedasticity, serial correlation, t-quantiles.

:func:`fit_least_squares` solves ``min |r(x)|^2`` within bounds and reports, for every
coefficient, a standard error that says what the data support:

- **rank**: the Jacobian's columns are scaled to unit length and decomposed (SVD); a
  coefficient with weight in a direction whose singular value is below
  :data:`RANK_TOLERANCE` times the largest is *undetermined* (the data cannot tell it from
  a combination of the others) and gets NaN, never the tiny figure a pseudo-inverse gives;
- **covariance**: ``"sandwich"`` (HC3, ``(J^T J)^-1 J^T diag(r_i^2 / (1 - h_i)^2) J (J^T J)^-1``
  with h_i the leverages), valid whatever the residuals' variance pattern and, unlike
  White's HC0/HC1, not too small where a few points (the first logged steps) carry much
  leverage; ``"classical"`` (``s^2 (J^T J)^-1``, right when the residual weights are); or
  ``"larger"`` (the default): each coefficient's larger standard error of the two, so
  neither a wrong weighting (which the classical one misses) nor the sandwich's own
  sampling noise at small samples makes an interval too narrow;
- **serial correlation**: residuals logged one after another (``blocks``, e.g. one run's
  steps in order) are often correlated. The pooled lag-1 autocorrelation rho is measured
  and, when positive, every standard error is multiplied by ``sqrt((1 + rho) / (1 - rho))``
  and the degrees of freedom use the effective sample size ``n (1 - rho) / (1 + rho)``
  (the AR(1) correction for a slowly varying regressor);
- **intervals**: 95 % intervals use Student's t at those degrees of freedom.

A coefficient stopped at a bound gets NaN too (its error is not Gaussian there).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares
from scipy.stats import t as student_t

#: Scaled singular values below this fraction of the largest count as zero (rank deficiency).
RANK_TOLERANCE = 1e-6
#: The lag-1 autocorrelation is capped here (so the inflation stays finite).
MAX_AUTOCORRELATION = 0.99
#: Lag pairs needed before the autocorrelation is measured at all.
MIN_LAG_PAIRS = 8
#: Residual evaluations one solve may take (well-posed fits need well under a hundred;
#: this bounds the time on pathological data, which then reports ``converged=False``).
MAX_EVALUATIONS = 2000


@dataclass(frozen=True)
class LeastSquaresFit:
    """Result of :func:`fit_least_squares`."""

    x: np.ndarray
    #: Standard errors, NaN where undetermined (rank), at a bound, or without spare points.
    stderr: np.ndarray
    residuals: np.ndarray
    #: Degrees of freedom of the intervals (effective sample size minus free coefficients).
    dof: float
    #: Pooled lag-1 autocorrelation of the residuals within blocks (None: too few pairs).
    autocorrelation: float | None
    #: Factor applied to every standard error for the autocorrelation (1: none).
    inflation: float
    #: Indices of coefficients the data do not determine.
    undetermined: tuple[int, ...]
    #: Indices of coefficients stopped at a bound.
    at_bound: tuple[int, ...]
    #: False when the solver stopped at :data:`MAX_EVALUATIONS` before its tolerances.
    converged: bool = True

    def interval(self, i: int, level: float = 0.95) -> tuple[float, float] | None:
        """The ``level`` confidence interval of coefficient ``i`` (t-quantile), or None."""
        return t_interval(float(self.x[i]), float(self.stderr[i]), self.dof, level)


def t_interval(value: float, stderr: float | None, dof: float, level: float = 0.95) -> tuple[float, float] | None:
    """``value ± t_{(1+level)/2, dof} stderr``; None without a finite error or degrees of freedom."""
    if stderr is None or not math.isfinite(stderr) or dof < 1:
        return None
    half = float(student_t.ppf(0.5 + level / 2, dof)) * stderr
    return value - half, value + half


def lag1_autocorrelation(residuals: np.ndarray, blocks: Sequence[np.ndarray]) -> float | None:
    """Pooled lag-1 autocorrelation: sum of e_t e_(t+1) within each block over sum of e^2."""
    pairs = sum(max(len(b) - 1, 0) for b in blocks)
    total = float(sum((residuals[b] ** 2).sum() for b in blocks))
    if pairs < MIN_LAG_PAIRS or total <= 0:
        return None
    lagged = float(sum((residuals[b][1:] * residuals[b][:-1]).sum() for b in blocks))
    return lagged / total


def _variances(jac: np.ndarray, res: np.ndarray, covariance: str) -> tuple[np.ndarray, list[int], int]:
    """(variance of each column's coefficient, indices undetermined, rank) via a scaled SVD.

    The classical s^2 divides by points - rank (the free directions the data determine)."""
    norms = np.linalg.norm(jac, axis=0)
    dead = norms <= 0
    scaled = jac / np.where(dead, 1.0, norms)
    u, s, vt = np.linalg.svd(scaled, full_matrices=False)
    keep = s > RANK_TOLERANCE * (s[0] if s.size else 0.0)
    null = vt[~keep]
    undetermined = [i for i in range(jac.shape[1]) if dead[i] or (null[:, i] ** 2).sum() > 1e-6]
    v, s_keep, u_keep = vt[keep].T, s[keep], u[:, keep]
    rank = int(keep.sum())
    classical = float((res**2).sum()) / max(len(res) - rank, 1) * ((v / s_keep) ** 2).sum(axis=1)
    a = (v / s_keep) @ u_keep.T  # (J^T J)^+ J^T in scaled terms
    leverage = np.minimum((u_keep**2).sum(axis=1), 1 - 1e-9)
    sandwich = ((a * (res / (1 - leverage))) ** 2).sum(axis=1)  # HC3
    chosen = {"classical": classical, "sandwich": sandwich}.get(covariance, np.maximum(classical, sandwich))
    return chosen / np.where(dead, 1.0, norms) ** 2, undetermined, rank


def fit_least_squares(
    residual: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    *,
    blocks: Sequence[np.ndarray] = (),
    covariance: str = "larger",
) -> LeastSquaresFit:
    """``min |residual(x)|^2`` within ``[low, high]`` from ``x0``, with the errors of the module doc.

    ``blocks``: index arrays of residuals in logging order (one per run) for the
    autocorrelation check; empty means no check.
    """
    x0 = np.array(x0, dtype=float)
    inside = 1e-12 * np.maximum(1.0, np.abs(x0))
    x0 = np.minimum(
        np.maximum(x0, np.where(np.isfinite(low), low + inside, x0)), np.where(np.isfinite(high), high - inside, x0)
    )
    result = least_squares(
        residual,
        x0,
        bounds=(low, high),
        x_scale="jac",
        jac="3-point",
        xtol=1e-14,
        ftol=1e-14,
        gtol=1e-14,
        max_nfev=MAX_EVALUATIONS,
    )
    res = result.fun
    span = np.maximum(1.0, np.abs(result.x))
    active = (np.abs(result.x - low) <= 1e-9 * span) | (np.abs(high - result.x) <= 1e-9 * span)
    stderr = np.full(len(result.x), np.nan)
    free = np.flatnonzero(~active)
    rank = len(free)
    undetermined: list[int] = []
    rho = lag1_autocorrelation(res, blocks) if blocks else None
    inflation, n_eff = 1.0, float(len(res))
    if rho is not None and rho > 0:
        r = min(rho, MAX_AUTOCORRELATION)
        inflation = math.sqrt((1 + r) / (1 - r))
        n_eff = len(res) * (1 - r) / (1 + r)
    if len(res) > len(free) and free.size:
        variances, dead, rank = _variances(result.jac[:, free], res, covariance)
        undetermined = [int(free[i]) for i in dead]
        stderr[free] = np.sqrt(np.maximum(variances, 0.0)) * inflation
        stderr[undetermined] = np.nan
    return LeastSquaresFit(
        x=result.x,
        stderr=stderr,
        residuals=res,
        dof=max(n_eff - rank, 0.0),
        autocorrelation=rho,
        inflation=inflation,
        undetermined=tuple(undetermined),
        at_bound=tuple(int(i) for i in np.flatnonzero(active)),
        converged=result.status != 0,
    )
