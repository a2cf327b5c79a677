"""The progress model of training under changing clusters (used by the revocation-aware planners,
the replay and the control loop's trainer stand-in; docs/revocation.md). Write
``u = 1 / (L - g5)`` for the training loss L. On a cluster c, eq. (3) gives
``L - g5 = N_c / (j + g1)`` with ``N_c = (g2 b_w + g3) sqrt((R + g4) |c|)``, so u grows at the
constant *progress speed* ``sigma_c = x_c / N_c`` per second (x_c the iterations per second,
eq. 2), and training ends when u reaches ``u* = 1 / (L_obj - g5)``. A plan starting from
scratch begins at ``u0 = g1 / N_c``; then ``(u* - u0) / sigma_c = j / x_c`` is eq. (1)'s time.
A takeover (:func:`dnnprov.revocation.replan.replanned_problem`) continues from the reached u on the
new cluster's speed: the same model, so plans, replans and the simulator agree.
"""

from __future__ import annotations

import numpy as np

from dnnprov.errors import InvalidInputError
from dnnprov.models.spot import SpotModel
from dnnprov.problems.spot import SpotProblem

#: The paper's measured join time of takeover instances (2.1 min, spec/spot.md section 5).
JOIN_OVERHEAD_S = 126.0


def require_paper_model(problem: SpotProblem) -> None:
    """The progress model needs eq. (3) without rounding: refuse the reference model."""
    if not isinstance(problem, SpotProblem):
        raise InvalidInputError("problem", "revocation-aware planning needs a spot problem")
    if problem.model != "paper":
        raise InvalidInputError(
            "model",
            "revocation-aware planning needs the paper model (the reference "
            "model rounds j and T, so progress is not linear in time)",
        )


def progress_target(model: SpotModel) -> float:
    """``u* = 1 / (L_obj - g5)``: the progress at which training reaches the target loss."""
    return 1.0 / model.loss_gap


def progress_speed(model: SpotModel, counts: np.ndarray, ps: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """``(sigma, u0)`` of clusters ``counts``: progress per second and the start progress.

    A cluster without workers, or one whose loss curve never reaches the target (eq. 3
    has no root), has speed 0.
    """
    counts = np.atleast_2d(np.asarray(counts, dtype=np.int64))
    ev = model.evaluate(counts, ps)
    g1 = model.problem.workload.gamma_1
    with np.errstate(divide="ignore", invalid="ignore"):
        numerator = (ev.iterations + g1) * model.loss_gap  # N_c
        sigma = ev.iteration_rate / numerator
        start = g1 / numerator
    ok = (ev.workers > 0) & np.isfinite(sigma) & (sigma > 0)
    return np.where(ok, sigma, 0.0), np.where(ok, start, np.inf)
