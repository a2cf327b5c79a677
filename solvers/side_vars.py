"""Whether some value of the user's own side variables y fits a plan (:mod:`dnnprov.models.side`).

:func:`decide` answers "is there a y in its box, integer where declared, with
``low <= a y <= high``?" for the rows that use y, once the plan has fixed everything else:

* the integer y with a box of at most :data:`ENUMERATE_AT_MOST` points, and at most one
  continuous y: every point is checked (exact, as the plain rows are checked; the one
  continuous y by intersecting the intervals each row allows it);
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
ENUMERATE_AT_MOST = 4096  # integer boxes up to this many points are checked point by point
_highs = None


def _points(own: OwnVariables) -> np.ndarray | None:
    """Every point of the integer variables' box when it is small and finite (else ``None``)."""
    ints = own.integer
    if not (np.isfinite(own.low[ints]).all() and np.isfinite(own.high[ints]).all()):
        return None
    lo, hi = np.ceil(own.low[ints] - 1e-9).astype(np.int64), np.floor(own.high[ints] + 1e-9).astype(np.int64)
    sizes = np.maximum(hi - lo + 1, 0)
    if math.prod(int(v) for v in sizes) > ENUMERATE_AT_MOST:
        return None
    grid = list(itertools.product(*(range(int(a), int(b) + 1) for a, b in zip(lo, hi))))
    return np.array(grid, dtype=float).reshape(len(grid), int(ints.sum()))


def _meets(a: np.ndarray, y: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Which points y (rows of the array) meet ``low <= a y <= high`` (the intervals are already widened)."""
    lhs = (y[:, None, :] * a).sum(axis=-1)
    return ((lhs >= low) & (lhs <= high)).all(axis=1)


def _with_one_continuous(
    own: OwnVariables, a: np.ndarray, points: np.ndarray, low: np.ndarray, high: np.ndarray
) -> np.ndarray | None:
    """A point (integer part from ``points``, one continuous z) meeting the rows, or ``None``.

    With the integer part fixed, each row bounds z to an interval ((low - s) / a_z, (high - s) / a_z),
    swapped when a_z < 0) or, without z, holds or not; some z fits when the intervals and z's box meet.
    """
    ints = own.integer
    z = int(np.flatnonzero(~ints)[0])
    s = (points[:, None, :] * a[:, ints]).sum(axis=-1)
    a_z = a[:, z]
    with np.errstate(divide="ignore", invalid="ignore"):
        one, two = (low - s) / a_z, (high - s) / a_z
    with_z = a_z != 0
    z_lo = np.where(with_z, np.where(a_z > 0, one, two), -np.inf).max(axis=1, initial=-np.inf)
    z_hi = np.where(with_z, np.where(a_z > 0, two, one), np.inf).min(axis=1, initial=np.inf)
    z_lo, z_hi = np.maximum(z_lo, own.low[z]), np.minimum(z_hi, own.high[z])
    plain = ((s >= low) & (s <= high)) | with_z
    fits = np.flatnonzero(plain.all(axis=1) & (z_lo <= z_hi))
    if not len(fits):
        return None
    y = np.empty(len(own))
    y[ints] = points[fits[0]]
    value = z_lo[fits[0]] if math.isfinite(z_lo[fits[0]]) else z_hi[fits[0]]
    y[z] = value if math.isfinite(value) else 0.0
    return y


def _least_point(own: OwnVariables, a: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray | None:
    """The least y the one-variable rows allow, when it meets every row (else ``None``: undecided).

    Each row with one y_j bounds y_j from below; y_j is put at the greatest such bound (rounded
    up where integer, at least its box's low end, 0 when nothing bounds it and the box allows).
    Only a point that is checked to meet every row and its box is returned (the
    ``at_most_types`` form: ``used[c] - y_t <= 0`` and ``sum y_t <= k`` is met by the least
    y whenever it is met at all), so the answer is as exact as the enumeration's.
    """
    single = (a != 0).sum(axis=1) == 1
    y = np.where(np.isfinite(own.low), own.low, np.minimum(0.0, own.high)).astype(float)
    for i in np.flatnonzero(single):
        j = int(np.flatnonzero(a[i])[0])
        bound = low[i] / a[i, j] if a[i, j] > 0 else high[i] / a[i, j]
        if math.isfinite(bound):
            y[j] = max(y[j], bound)
    y = np.where(own.integer, np.ceil(y - 1e-9), y)
    if not np.isfinite(y).all() or (y < own.low).any() or (y > own.high).any():
        return None
    return y if bool(_meets(a, y[None, :], low, high)[0]) else None


def decide(own: OwnVariables, low: np.ndarray, high: np.ndarray) -> bool:
    """Whether some y of ``own``'s box meets ``low <= a y <= high`` on the rows that use y."""
    return witness(own, low, high) is not None


def witness(own: OwnVariables, low: np.ndarray, high: np.ndarray) -> np.ndarray | None:
    """A y of ``own``'s box meeting ``low <= a y <= high`` on the rows that use y (``None``: proven none)."""
    global _highs
    a = own.a[own.rows]
    points = _points(own)
    if points is not None and own.integer.all():
        fits = np.flatnonzero(_meets(a, points, low, high)) if len(points) else np.zeros(0, dtype=np.int64)
        return points[fits[0]] if len(fits) else None
    if points is not None and int((~own.integer).sum()) == 1:
        return _with_one_continuous(own, a, points, low, high) if len(points) else None
    least = _least_point(own, a, low, high)
    if least is not None:
        return least
    if _highs is None:
        _highs = new_highs()
    rows = []
    for i in range(len(a)):
        idx = np.flatnonzero(a[i])
        rows.append((idx, a[i, idx], float(low[i]), float(high[i])))
    solution = solve_milp(
        _highs,
        np.zeros(len(own)),
        own.low.astype(float),
        own.high.astype(float),
        rows,
        integer=own.integer,
        proof_target=1.0,
    )
    if solution.x is not None:
        y = np.where(own.integer, np.round(solution.x), solution.x)
        size = np.abs(a * y).sum(axis=1) + 1.0
        inside = bool(
            (
                (y >= own.low - 1e-9 * np.maximum(np.abs(own.low), 1))
                & (y <= own.high + 1e-9 * np.maximum(np.abs(own.high), 1))
            ).all()
        )
        lhs = a @ y
        if inside and bool(((lhs >= low - 1e-9 * size) & (lhs <= high + 1e-9 * size)).all()):
            return y
    if solution.status is MilpStatus.INFEASIBLE:
        return None
    raise RuntimeError(
        f"could not decide whether the own variables {', '.join(own.names)} fit a plan (HiGHS: {solution.status.value})"
    )


def own_values(side: SideRows | ServerlessSideRows, fixed: np.ndarray) -> dict[str, float] | None:
    """Values of the own variables that fit a plan whose rows' values without y are ``fixed``."""
    own = side.own
    if own is None or not len(own):
        return None
    if not own.rows.any():
        return {name: float(min(max(0.0, lo), hi)) for name, lo, hi in zip(own.names, own.low, own.high)}
    which = own.rows
    low, high = side.low[which] - fixed[which], side.high[which] - fixed[which]
    y = witness(own, low, high)  # exactly, if it can be
    if y is None:
        y = witness(own, low - 1e-9, high + 1e-9)  # within the rows' tolerance
    return None if y is None else dict(zip(own.names, (float(v) for v in y)))


def attach(side: Rows | None) -> Rows | None:
    """``side`` with :func:`decide` answering for its own variables (unchanged without any)."""
    if side is None or side.own is None or side.own.decide is not None:
        return side
    return dataclasses.replace(side, own=side.own.with_decider(decide))
