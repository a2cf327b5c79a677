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
from dnnprov.solvers.highs_driver import MilpStatus, SparseRows, implied_box, new_highs, solve_milp

from dnnprov.errors import InvalidInputError
from dnnprov.models.serverless import ServerlessSideRows
from dnnprov.models.side import OwnVariables
from dnnprov.models.spot import SideRows

Rows = TypeVar("Rows", SideRows, ServerlessSideRows)
ENUMERATE_AT_MOST = 4096  # integer boxes up to this many points are checked point by point
#: Seconds HiGHS may search integer own variables without finite bounds: an infeasible lattice
#: (``2 y + 4 z == 3``) has no end of branches, and no verified "none" can come of it.
OPEN_INTEGER_SECONDS = 2.0
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


def _boxed(own: OwnVariables, rows: list) -> OwnVariables:
    """``own`` with the infinite ends of its box replaced by the bounds its rows imply.

    :func:`~dnnprov.solvers.highs_driver.implied_box` moves every computed end outward by
    more than its rounding error, so every y meeting the rows lies in the new box: an
    answer over it is an answer over the old one (``n == 2 y`` with y unbounded becomes a
    box of one or no integer, then checked point by point).
    """
    if np.isfinite(own.low).all() and np.isfinite(own.high).all():
        return own
    low, high = implied_box(own.low, own.high, SparseRows.of(rows))
    return OwnVariables(own.a, low, high, own.integer, own.names)


def _separable(own: OwnVariables, a: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray | None | bool:
    """The answer when every row holds one own variable: y (a witness), ``None`` (proven none), or ``False``.

    Each y_j then only has to meet its own rows, an interval: the candidates at its ends
    (and next to them: the quotients are rounded) are checked against the rows as
    :func:`_meets` checks a point. None fitting proves nothing unless the interval is
    empty beyond rounding (no integer in it, widened by 1e-9; for a continuous y its ends
    apart by more than 1e-12 relative); otherwise ``False``: undecided. HiGHS is not asked:
    its absolute tolerances (1e-7) call rows of 1e-7-sized terms met that are not.
    """
    if not ((a != 0).sum(axis=1) == 1).all():
        return False
    y = np.zeros(len(own))
    for j in range(len(own)):
        mine = np.flatnonzero(a[:, j])
        aj = a[mine, j]
        with np.errstate(divide="ignore", invalid="ignore"):
            ends = np.stack([low[mine] / aj, high[mine] / aj])
        lo = float(max(own.low[j], np.where(aj > 0, ends[0], ends[1]).max(initial=-math.inf)))
        hi = float(min(own.high[j], np.where(aj > 0, ends[1], ends[0]).min(initial=math.inf)))
        if math.isnan(lo) or math.isnan(hi):
            return False
        near = [v for v in (lo, hi) if math.isfinite(v)] or [0.0]
        if own.integer[j]:
            candidates = [float(math.ceil(v) + k) for v in near for k in (-1, 0, 1)]
            candidates += [float(math.floor(v) + k) for v in near for k in (-1, 0, 1)]
        else:
            candidates = [float(np.nextafter(v, d)) for v in near for d in (-math.inf, math.inf)] + near
            if len(near) == 2:
                candidates.append(0.5 * (lo + hi))
        fit = [
            v
            for v in candidates
            if own.low[j] <= v <= own.high[j] and bool(((aj * v >= low[mine]) & (aj * v <= high[mine])).all())
        ]
        if fit:
            y[j] = fit[0]
            continue
        if own.integer[j]:
            empty = math.ceil(lo - 1e-9 * max(1.0, abs(lo))) > math.floor(hi + 1e-9 * max(1.0, abs(hi)))
        else:
            empty = lo - hi > 1e-12 * max(1.0, abs(lo), abs(hi))
        if not empty:
            return False
        return None
    return y


def decide(own: OwnVariables, low: np.ndarray, high: np.ndarray) -> bool:
    """Whether some y of ``own``'s box meets ``low <= a y <= high`` on the rows that use y."""
    return witness(own, low, high) is not None


def witness(own: OwnVariables, low: np.ndarray, high: np.ndarray) -> np.ndarray | None:
    """A y of ``own``'s box meeting ``low <= a y <= high`` on the rows that use y (``None``: proven none)."""
    global _highs
    a = own.a[own.rows]
    rows = []
    for i in range(len(a)):
        idx = np.flatnonzero(a[i])
        rows.append((idx, a[i, idx], float(low[i]), float(high[i])))
    separable = _separable(own, a, low, high)
    if separable is None or isinstance(separable, np.ndarray):
        return separable
    declared = own
    own = _boxed(own, rows)
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
    open_integers = bool((own.integer & ~(np.isfinite(own.low) & np.isfinite(own.high))).any())
    solution = solve_milp(
        _highs,
        np.zeros(len(own)),
        own.low.astype(float),
        own.high.astype(float),
        rows,
        integer=own.integer,
        proof_target=1.0,
        time_limit_s=OPEN_INTEGER_SECONDS if open_integers else math.inf,
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
    open_ended = [
        name for name, lo, hi in zip(own.names, own.low, own.high) if not (math.isfinite(lo) and math.isfinite(hi))
    ]
    if open_ended:  # the verifying branch and bound needs a box: the user can give one
        raise InvalidInputError(
            ", ".join(open_ended),
            "has no finite bounds, and whether some value of the own variables "
            f"{', '.join(declared.names)} fits a plan could not be proven without them: give them bounds",
        )
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
