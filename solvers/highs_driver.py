"""A thin driver for the many small MILPs of the exact methods, on highspy directly.

Pyomo is the modelling layer users see; inner loops that solve thousands of tiny MILPs
are several times faster on highspy (spec/solver-notes.md). Every MILP here is solved to
``mip_rel_gap = 0`` and the feasibility-jump heuristic is off (it costs ~4 ms per tiny
MILP with identical answers).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from enum import Enum

import highspy
import numpy as np

INF = highspy.kHighsInf
_banner_shown = False


class MilpStatus(Enum):
    """Outcome of one MILP, in the terms the exact methods need.

    ``LIMIT`` is only the time limit; every other HiGHS outcome (solve error,
    unbounded, ...) is ``ERROR``, which proves nothing: callers must fall back to a
    method that does not depend on this MILP.
    """

    OPTIMAL = "optimal"
    INFEASIBLE = "infeasible"
    LIMIT = "limit"
    ERROR = "error"


@dataclass(frozen=True)
class MilpSolution:
    """Status, primal values (``None`` without a solution), objective and dual bound."""

    status: MilpStatus
    x: np.ndarray | None
    objective: float
    dual_bound: float


@contextlib.contextmanager
def _quiet_stdout():
    """Silence file descriptor 1 (HiGHS prints a banner on the first ``Highs()``)."""
    fd = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(fd, 1)
        os.close(fd)


def new_highs(*, threads: int = 1) -> highspy.Highs:
    """A silent Highs object configured for exact small MILPs."""
    global _banner_shown
    if _banner_shown:
        h = highspy.Highs()
    else:
        with _quiet_stdout():
            h = highspy.Highs()
        _banner_shown = True
    h.setOptionValue("output_flag", False)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", 0.0)
    h.setOptionValue("mip_heuristic_run_feasibility_jump", False)
    h.setOptionValue("threads", threads)
    h.setOptionValue("random_seed", 0)
    return h


def solve_milp(h: highspy.Highs, cost: np.ndarray, col_lower: np.ndarray, col_upper: np.ndarray,
               rows: list[tuple[np.ndarray, np.ndarray, float, float]], *,
               integer: np.ndarray | None = None, offset: float = 0.0,
               time_limit_s: float = INF, presolve: bool = False) -> MilpSolution:
    """Minimize ``cost @ x + offset`` subject to ``low <= a @ x[idx] <= high`` for each row.

    ``rows`` holds ``(idx, a, low, high)`` with sparse indices and values; ``integer``
    flags integer columns (default: all).

    Presolve is off by default: on the exact methods' tiny, nearly degenerate models
    HiGHS 1.16's presolve has declared a feasible LP infeasible (a cell holding one
    plan, ranges of relative width 1e-9) and ended MILPs in a solve error with a
    solution that violates a row; without it the same models solve correctly, and the
    large set runs 25 % faster.
    """
    n = len(cost)
    cost = np.asarray(cost, dtype=float)
    # HiGHS's tolerances are absolute: with prices of 1e-4 $/h an objective's differences
    # would sit below them. The objective is solved scaled to a largest coefficient of 1.
    scale = float(np.abs(cost).max()) if n and np.abs(cost).max() > 0 else 1.0
    lp = highspy.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = len(rows)
    lp.offset_ = float(offset) / scale
    lp.col_cost_ = cost / scale
    lp.col_lower_ = np.asarray(col_lower, dtype=float)
    lp.col_upper_ = np.asarray(col_upper, dtype=float)
    lp.row_lower_ = np.array([r[2] for r in rows], dtype=float)
    lp.row_upper_ = np.array([r[3] for r in rows], dtype=float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.concatenate([[0], np.cumsum([len(r[0]) for r in rows])]).astype(np.int32)
    lp.a_matrix_.index_ = (np.concatenate([r[0] for r in rows]) if rows else np.zeros(0)).astype(np.int32)
    lp.a_matrix_.value_ = (np.concatenate([r[1] for r in rows]) if rows else np.zeros(0)).astype(float)
    flags = np.ones(n, dtype=bool) if integer is None else np.asarray(integer, dtype=bool)
    lp.integrality_ = [highspy.HighsVarType.kInteger if f else highspy.HighsVarType.kContinuous for f in flags]
    h.clearModel()
    h.setOptionValue("time_limit", max(float(time_limit_s), 1e-3))
    h.setOptionValue("presolve", "on" if presolve else "off")
    h.passModel(lp)
    h.run()
    status = h.getModelStatus()
    info = h.getInfo()
    if status == highspy.HighsModelStatus.kOptimal:
        x = np.array(h.getSolution().col_value)
        bound = info.mip_dual_bound if flags.any() else info.objective_function_value
        return MilpSolution(MilpStatus.OPTIMAL, x, info.objective_function_value * scale, bound * scale)
    if status == highspy.HighsModelStatus.kInfeasible:
        return MilpSolution(MilpStatus.INFEASIBLE, None, INF, INF)
    if status != highspy.HighsModelStatus.kTimeLimit:
        return MilpSolution(MilpStatus.ERROR, None, INF, -INF)
    has_x = info.primal_solution_status == 2  # kSolutionStatusFeasible
    x = np.array(h.getSolution().col_value) if has_x else None
    return MilpSolution(MilpStatus.LIMIT, x, info.objective_function_value * scale if has_x else INF,
                        info.mip_dual_bound * scale)
