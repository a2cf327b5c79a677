"""Whether some value of the user's own side variables y fits a plan (:mod:`dnnprov.models.side`).

:func:`decide` answers "is there a y in its box, integer where declared, with
``low <= a y <= high``?" for the rows that use y, once the plan has fixed everything else:

* all y integer with a box of at most :data:`ENUMERATE_AT_MOST` points: every point is
  checked (exact, as the plain rows are checked);
* otherwise a MILP over y alone (:func:`~dnnprov.solvers.highs_driver.solve_milp`, zero
  objective): a point HiGHS returns counts only once it meets every row and its box after
  its integer entries are rounded (within the same 1e-9 the plain rows are given, relative
  to the terms' size); "no point" counts only when the driver verified it (every node of
  its branch and bound emptied by a checked Farkas ray). Anything else is an error, never
  a guess.

:func:`attach` gives side rows with own variables this decider.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import TypeVar

import numpy as np
from dnnprov.solvers.highs_driver import MilpStatus, new_highs, solve_milp

from dnnprov.models.serverless import ServerlessSideRows
from dnnprov.models.side import OwnVariables
from dnnprov.models.spot import SideRows

Rows = TypeVar("Rows", SideRows, ServerlessSideRows)
ENUMERATE_AT_MOST = 4096          # integer boxes up to this many points are checked point by point
_highs = None


def _points(own: OwnVariables) -> np.ndarray | None:
    """Every point of the box when it is integer and small (else ``None``)."""
    if not own.integer.all() or not (np.isfinite(own.low).all() and np.isfinite(own.high).all()):
        return None
    lo, hi = np.ceil(own.low - 1e-9).astype(np.int64), np.floor(own.high + 1e-9).astype(np.int64)
    sizes = np.maximum(hi - lo + 1, 0)
    if math.prod(int(v) for v in sizes) > ENUMERATE_AT_MOST:
        return None
    grid = list(itertools.product(*(range(int(a), int(b) + 1) for a, b in zip(lo, hi))))
    return np.array(grid, dtype=float).reshape(len(grid), len(own))


def _meets(a: np.ndarray, y: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Which points y (rows of the array) meet ``low <= a y <= high`` (the intervals are already widened)."""
    lhs = (y[:, None, :] * a).sum(axis=-1)
    return ((lhs >= low) & (lhs <= high)).all(axis=1)


def decide(own: OwnVariables, low: np.ndarray, high: np.ndarray) -> bool:
    """Whether some y of ``own``'s box meets ``low <= a y <= high`` on the rows that use y."""
    return witness(own, low, high) is not None


def witness(own: OwnVariables, low: np.ndarray, high: np.ndarray) -> np.ndarray | None:
    """A y of ``own``'s box meeting ``low <= a y <= high`` on the rows that use y (``None``: proven none)."""
    global _highs
    a = own.a[own.rows]
    points = _points(own)
    if points is not None:
        fits = np.flatnonzero(_meets(a, points, low, high)) if len(points) else np.zeros(0, dtype=np.int64)
        return points[fits[0]] if len(fits) else None
    if _highs is None:
        _highs = new_highs()
    rows = []
    for i in range(len(a)):
        idx = np.flatnonzero(a[i])
        rows.append((idx, a[i, idx], float(low[i]), float(high[i])))
    solution = solve_milp(_highs, np.zeros(len(own)), own.low.astype(float), own.high.astype(float), rows,
                          integer=own.integer, proof_target=1.0)
    if solution.x is not None:
        y = np.where(own.integer, np.round(solution.x), solution.x)
        size = np.abs(a * y).sum(axis=1) + 1.0
        inside = bool(((y >= own.low - 1e-9 * np.maximum(np.abs(own.low), 1))
                       & (y <= own.high + 1e-9 * np.maximum(np.abs(own.high), 1))).all())
        lhs = a @ y
        if inside and bool(((lhs >= low - 1e-9 * size) & (lhs <= high + 1e-9 * size)).all()):
            return y
    if solution.status is MilpStatus.INFEASIBLE:
        return None
    raise RuntimeError(f"could not decide whether the own variables {', '.join(own.names)} fit a plan "
                       f"(HiGHS: {solution.status.value})")


def own_values(side: SideRows | ServerlessSideRows, fixed: np.ndarray) -> dict[str, float] | None:
    """Values of the own variables that fit a plan whose rows' values without y are ``fixed``."""
    own = side.own
    if own is None or not len(own):
        return None
    if not own.rows.any():
        return {name: float(min(max(0.0, lo), hi)) for name, lo, hi in zip(own.names, own.low, own.high)}
    which = own.rows
    low, high = side.low[which] - fixed[which], side.high[which] - fixed[which]
    y = witness(own, low, high)                                   # exactly, if it can be
    if y is None:
        y = witness(own, low - 1e-9, high + 1e-9)                 # within the rows' tolerance
    return None if y is None else dict(zip(own.names, (float(v) for v in y)))


def attach(side: Rows | None) -> Rows | None:
    """``side`` with :func:`decide` answering for its own variables (unchanged without any)."""
    if side is None or side.own is None or side.own.decide is not None:
        return side
    return dataclasses.replace(side, own=side.own.with_decider(decide))
