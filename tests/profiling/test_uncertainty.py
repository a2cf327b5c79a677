"""Honest profiler uncertainty (issue 23): errors against closed forms, coverage, degenerate fits warned."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from dnnprov.cli import main
from dnnprov.errors import InvalidInputError, ProfileWarning
from dnnprov.profiling.fits.loss import fit_loss, synthetic_log
from dnnprov.profiling.fits.timing import fit_spot_timing, synthetic_spot_timing
from dnnprov.profiling.fits.uncertainty import fit_least_squares, t_interval
from dnnprov.profiling.readers import read_trainer_state

TRUE = {"gamma_1": 876.5, "gamma_2": -0.2, "gamma_3": 2507.6, "gamma_4": 1.0, "gamma_5": 0.5}
CLUSTERS = [(1024, 0.71, 2), (2048, 0.80, 4), (3000, 0.90, 7), (1536, 0.55, 2), (4096, 0.85, 7), (1200, 0.87, 4)]
TYPES = {"p3.2xlarge": (1, 128, 0.30), "g3.16xlarge": (4, 64, 0.55)}
TIMING = dict(param_size_mb=98.0, bandwidth_req_mb_s=700.0, alpha_1=0.3, beta_1=-0.2)
TRAINER_STATE = (
    Path(__file__).resolve().parents[3] / "shared" / "data" / "training-logs" / "whisper-large-v2-ja-trainer_state.json"
)
UNBOUNDED = (np.full(2, -np.inf), np.full(2, np.inf))


def _line_data(seed: int, n: int = 40, noise: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 10.0, n)
    return t, 2.0 * t + 1.0 + (rng.normal(0.0, 0.5, n) if noise is None else noise)


# ---------------------------------------------------------------- the least-squares core
def test_classical_errors_are_the_ols_formula() -> None:
    """A straight line: the classical errors equal sqrt(diag(s^2 (X^T X)^-1)) computed by hand."""
    t, y = _line_data(0)
    fit = fit_least_squares(lambda x: x[0] * t + x[1] - y, np.zeros(2), *UNBOUNDED, covariance="classical")
    x = np.column_stack([t, np.ones_like(t)])
    coef = np.linalg.solve(x.T @ x, x.T @ y)
    s2 = ((x @ coef - y) ** 2).sum() / (len(t) - 2)
    np.testing.assert_allclose(fit.x, coef, rtol=1e-8)
    np.testing.assert_allclose(fit.stderr, np.sqrt(np.diag(s2 * np.linalg.inv(x.T @ x))), rtol=1e-6)


def test_sandwich_errors_are_hc3() -> None:
    """Heteroscedastic noise: the sandwich errors equal HC3 written out with the hat matrix."""
    t = np.linspace(0.0, 10.0, 40)
    t, y = _line_data(1, noise=np.random.default_rng(1).normal(0.0, 0.1, 40) * (1 + t))
    fit = fit_least_squares(lambda x: x[0] * t + x[1] - y, np.zeros(2), *UNBOUNDED, covariance="sandwich")
    x = np.column_stack([t, np.ones_like(t)])
    bread = np.linalg.inv(x.T @ x)
    e = x @ (bread @ x.T @ y) - y
    h = np.einsum("ij,jk,ik->i", x, bread, x)
    meat = x.T @ np.diag((e / (1 - h)) ** 2) @ x
    np.testing.assert_allclose(fit.stderr, np.sqrt(np.diag(bread @ meat @ bread)), rtol=1e-5)


def test_collinear_coefficients_get_nan_not_zero() -> None:
    """y = (a + b) t + c: a and b cannot be told apart (NaN), c keeps the reduced model's error."""
    t, y = _line_data(2)
    fit = fit_least_squares(
        lambda x: (x[0] + x[1]) * t + x[2] - y,
        np.array([1.0, 0.5, 0.0]),
        np.full(3, -np.inf),
        np.full(3, np.inf),
        covariance="classical",
    )
    assert fit.undetermined == (0, 1)
    assert math.isnan(fit.stderr[0]) and math.isnan(fit.stderr[1])
    reduced = fit_least_squares(lambda x: x[0] * t + x[1] - y, np.zeros(2), *UNBOUNDED, covariance="classical")
    assert fit.stderr[2] == pytest.approx(reduced.stderr[1], rel=1e-4)


def test_autocorrelated_residuals_inflate_the_errors() -> None:
    """AR(1) noise with rho = 0.8 is measured near 0.8 and multiplies the errors by sqrt((1+rho)/(1-rho))."""
    rng = np.random.default_rng(3)
    noise = np.zeros(400)
    for i in range(1, 400):
        noise[i] = 0.8 * noise[i - 1] + rng.normal(0.0, 0.3)
    t, y = _line_data(3, n=400, noise=noise)
    fit = fit_least_squares(lambda x: x[0] * t + x[1] - y, np.zeros(2), *UNBOUNDED, blocks=[np.arange(400)])
    assert fit.autocorrelation == pytest.approx(0.8, abs=0.08)
    rho = fit.autocorrelation
    assert fit.inflation == pytest.approx(math.sqrt((1 + rho) / (1 - rho)))
    assert fit.dof == pytest.approx(400 * (1 - rho) / (1 + rho) - 2)


def test_intervals_use_student_t() -> None:
    """At 3 degrees of freedom the 95 % half-width is 3.182 standard errors (the t table's value)."""
    low, high = t_interval(10.0, 1.0, 3)
    assert (high - low) / 2 == pytest.approx(3.1824, abs=1e-4)
    assert t_interval(10.0, math.nan, 3) is None and t_interval(10.0, 1.0, 0.5) is None


# ---------------------------------------------------------------- coverage (the benchmark's, fewer reps)
def test_loss_errors_cover_the_true_gammas_under_relative_noise() -> None:
    """30 seeded logs with 2 % relative noise: each gamma_1..gamma_4 within 2 stderr in >= 80 % of them."""
    hits = dict.fromkeys(TRUE, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfileWarning)
        for seed in range(30):
            fit = fit_loss(synthetic_log(TRUE, "cc", CLUSTERS, noise=0.02, seed=seed, relative=True), "cc")
            for name, e in fit.estimates.items():
                hits[name] += abs(e.value - TRUE[name]) <= 2 * e.stderr
    assert all(hits[name] >= 24 for name in ("gamma_1", "gamma_2", "gamma_3", "gamma_4")), hits


def test_timing_errors_cover_alpha_and_beta(tmp_path: Path) -> None:
    """30 seeded timing sets with 2 % noise: B_req, alpha_1, beta_1 within 2 stderr in >= 80 % of them."""
    truth = {"bandwidth_req": 700.0, "alpha_1": 0.3, "beta_1": -0.2}
    hits = dict.fromkeys(truth, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfileWarning)
        for seed in range(30):
            synthetic_spot_timing(
                tmp_path / "t.csv", types=TYPES, sizes=[2, 4, 7, 2, 4, 7], noise=0.02, seed=seed, **TIMING
            )
            fit = fit_spot_timing(tmp_path / "t.csv", param_size_mb=98.0)
            for name, true in truth.items():
                e = getattr(fit, name)
                hits[name] += abs(e.value - true) <= 2 * e.stderr
    assert min(hits.values()) >= 24, hits


# ---------------------------------------------------------------- degenerate fits are warned of
def test_positive_gamma_2_is_warned() -> None:
    """Logs where a larger batch needs more iterations: gamma_2 > 0 fits, with a ProfileWarning."""
    log = synthetic_log({**TRUE, "gamma_2": 0.3}, "cc", CLUSTERS, noise=0.01, seed=0)
    with pytest.warns(ProfileWarning, match="gamma_2 = .* >= 0"):
        fit = fit_loss(log, "cc")
    assert fit.estimates["gamma_2"].value > 0 and any("gamma_2" in w for w in fit.warnings)


def test_negative_floor_and_negative_predictions_are_warned() -> None:
    """gamma_5 < 0 whose curve crosses zero inside the logged steps: both warnings."""
    log = synthetic_log({**TRUE, "gamma_5": -0.6}, "cc", CLUSTERS, noise=0.01, seed=0)
    with pytest.warns(ProfileWarning) as record:
        fit = fit_loss(log, "cc")
    messages = [str(w.message) for w in record]
    assert any(m.startswith("gamma_5 = ") for m in messages)
    assert any("predicts negative losses" in m and "inside the logged steps" in m for m in messages)
    assert set(fit.warnings) <= set(messages)


@pytest.mark.skipif(not TRAINER_STATE.exists(), reason="../shared/data/training-logs is not present")
def test_real_whisper_log_is_flagged_and_its_errors_inflated() -> None:
    """The real Whisper log: residuals strongly autocorrelated (warned, errors inflated) and
    negative predicted losses inside its 5,000 steps."""
    log = read_trainer_state(TRAINER_STATE, batch_size=50)
    with pytest.warns(ProfileWarning):
        fit = fit_loss(log, "cc")
    assert fit.uncertainty["autocorrelation"] > 0.7 and fit.uncertainty["stderr_inflation"] > 2
    assert any("serially correlated" in w for w in fit.warnings)
    assert any("negative losses" in w and "inside the logged steps" in w for w in fit.warnings)


def _no_nan(text: str) -> dict:
    def refuse(token: str) -> float:
        raise AssertionError(f"{token} in JSON")

    return json.loads(text, parse_constant=refuse)


def test_rank_deficient_fit_reports_nan_and_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs of three steps: coefficients the data cannot tell apart print '± NaN', JSON null + reason."""
    log = synthetic_log(TRUE, "cc", CLUSTERS[:2], steps=3, noise=0.01, seed=0)
    log.write_csv(tmp_path / "six.csv")
    assert main(["profile", "fit-loss", str(tmp_path / "six.csv"), "--json"]) == 0
    captured = capsys.readouterr()
    out = _no_nan(captured.out)
    lost = [n for n, c in out["coefficients"].items() if "undetermined" in c]
    assert lost and all(out["coefficients"][n]["stderr"] is None for n in lost)
    warned = [line for line in captured.err.splitlines() if line.startswith("dnnprov: warning:")]
    assert len(warned) == len(out["warnings"]) and any("not determined" in w for w in warned)
    assert main(["profile", "fit-loss", str(tmp_path / "six.csv")]) == 0
    assert "± NaN" in capsys.readouterr().out


def test_one_run_keeps_the_fit_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One run: the main fit is written, leave-one-run-out is empty and a warning says why."""
    from dnnprov.io.catalogs.catalog import embedded_path, load_spot_profile

    synthetic_log(TRUE, "cc", CLUSTERS[:1], noise=0.01, seed=0).write_csv(tmp_path / "one.csv")
    assert (
        main(
            [
                "profile",
                "fit-loss",
                str(tmp_path / "one.csv"),
                "--json",
                "--base",
                str(embedded_path("workloads", "spot", "vgg19.json")),
                "--out",
                str(tmp_path / "p.json"),
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert _no_nan(captured.out)["leave_one_run_out"] == []
    assert "dnnprov: warning: one run: nothing to leave out" in captured.err
    notes = load_spot_profile(tmp_path / "p.json").notes
    assert "one run" in notes and "per-worker average batch" in notes


def test_negative_alpha_1_is_warned(tmp_path: Path) -> None:
    """A contention probability that falls with |N| (alpha_1 < 0) fits, with a warning."""
    synthetic_spot_timing(
        tmp_path / "t.csv",
        types=TYPES,
        sizes=[2, 4, 7],
        param_size_mb=98.0,
        bandwidth_req_mb_s=700.0,
        alpha_1=-0.1,
        beta_1=0.9,
    )
    with pytest.warns(ProfileWarning, match="alpha_1 = .* < 0"):
        fit = fit_spot_timing(tmp_path / "t.csv", param_size_mb=98.0)
    assert fit.alpha_1.value == pytest.approx(-0.1)


def test_clamped_runs_are_warned_and_all_clamped_is_one_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 20-worker run whose P is clamped at 1 is left out with a warning; all runs clamped is one error."""
    synthetic_spot_timing(tmp_path / "t.csv", types=TYPES, sizes=[2, 4, 7, 20], **TIMING)
    with pytest.warns(ProfileWarning, match="1 of the 4 contended runs have P clamped"):
        fit = fit_spot_timing(tmp_path / "t.csv", param_size_mb=98.0)
    assert (fit.alpha_1.value, fit.beta_1.value) == pytest.approx((0.3, -0.2))
    synthetic_spot_timing(tmp_path / "c.csv", types=TYPES, sizes=[16, 20, 25], **TIMING)
    with pytest.raises(InvalidInputError, match="3 of the 3 contended runs have P clamped"):
        fit_spot_timing(tmp_path / "c.csv", param_size_mb=98.0)
    assert main(["profile", "fit-timing", str(tmp_path / "t.csv"), "--param-size-mb", "98", "--json"]) == 0
    captured = capsys.readouterr()
    assert _no_nan(captured.out)["warnings"] and captured.err.startswith("dnnprov: warning: 1 of the 4")
