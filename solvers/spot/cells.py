"""Cells of the spot decomposition, the boxes of counts they stand on, and safe arithmetic.

A box is lo <= n <= hi with sum n = K. One linear objective over it is minimized by a
greedy (one cardinality row and a box are totally unimodular), for one box or many at
once; :func:`compositions` lists a small box's count vectors; :func:`nogood_rows` cuts one
count vector off a cell MILP and :func:`nogoods_inside` keeps the cuts a cell still needs.

A cell's ranges are *claims about every plan in it*: a plan is only ever dropped because
it lies outside a range or because a bound shows it cannot beat the incumbent. Ranges are
computed in floating point, so each computed end is widened outward by :data:`SAFETY`
(relative), which dominates the rounding error of the few operations behind it (each
about 1e-16 relative): a plan sitting exactly on an end (a single-type cell has
V_lo = V_hi = K v, computed two ways) stays inside. Emptiness tests then compare widened
ends, so they never discard a plan that rounding put one ulp outside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import overload

import numpy as np

SAFETY = 1e-9


@overload
def down(x: float) -> float: ...
@overload
def down(x: np.ndarray) -> np.ndarray: ...
def down(x: float | np.ndarray) -> float | np.ndarray:
    """``x`` lowered by the safety margin: use for every computed lower end."""
    if isinstance(x, np.ndarray):
        return x - SAFETY * np.abs(x)
    return x - SAFETY * abs(x)


@overload
def up(x: float) -> float: ...
@overload
def up(x: np.ndarray) -> np.ndarray: ...
def up(x: float | np.ndarray) -> float | np.ndarray:
    """``x`` raised by the safety margin: use for every computed upper end."""
    if isinstance(x, np.ndarray):
        return x + SAFETY * np.abs(x)
    return x + SAFETY * abs(x)


@dataclass
class ClusterShape:
    """Per-column rates for one (K, s): what the linear aggregates are built from."""

    rate: np.ndarray  # r_c = 1 / T_c
    speed: np.ndarray  # v_c = b_c / T_c


@dataclass(frozen=True)
class BoxStats:
    """What the greedy steps give for a cell's box (see ``CellBounds.box_statistics``)."""

    x_lo: float  # min X over the box
    x_hi: float  # max X over the box
    rho_min: float  # a lower bound on min (P + c0) / X
    price_bound: float  # min P + c0 (max when the overhead a0 is negative)

    @staticmethod
    def of(cell: Cell) -> BoxStats:
        """A cell's current (possibly tightened) statistics: they hold for any part of it."""
        return BoxStats(cell.x_lo, cell.x_hi, cell.rho_min, cell.price_bound)


@dataclass(order=True)
class Cell:
    """A region of the plan space; ``bound`` is a lower bound on the cost of its plans.

    ``tail`` marks the stand-in for every worker count from ``workers`` up that has not
    been generated yet; its bound holds for all of them (see ``tail_bound``).
    """

    bound: float
    seq: int
    workers: int = field(compare=False)
    ps: int = field(compare=False)
    top: int | None = field(compare=False)  # fastest used column; None: not yet split by it
    b_lo: float = field(compare=False)
    b_hi: float = field(compare=False)
    v_lo: float = field(compare=False)
    v_hi: float = field(compare=False)
    allowed: np.ndarray = field(compare=False, repr=False)
    x_lo: float = field(compare=False, default=0.0)
    x_hi: float = field(compare=False, default=0.0)
    rho_min: float = field(compare=False, default=0.0)
    j_lb: float = field(compare=False, default=0.0)
    nogoods: list[tuple[int, ...]] = field(compare=False, default_factory=list)
    returned: int = field(compare=False, default=0)  # plans its MILPs (and its ancestors') returned
    lp_done: bool = field(compare=False, default=False)  # LP bound computed (lazily)
    complete: bool = field(compare=False, default=True)  # False: CellBounds.complete still to run
    pj_lb: float = field(compare=False, default=0.0)  # lower bound on (P + c0) j / X
    price_bound: float = field(compare=False, default=0.0)  # P + c0 on the side finalize needs
    tail: bool = field(compare=False, default=False)
    q_lo: float = field(compare=False, default=0.0)  # range of Q = sum n v^2 (CC cells with a top);
    q_hi: float = field(compare=False, default=math.inf)  # the defaults claim nothing
    #: (column, lo, hi): count bounds narrower than the quotas, kept by every part of the cell
    #: (the revocation-aware search pins the top column's count and the next column this way)
    pinned: tuple[tuple[int, int, int], ...] = field(compare=False, default=())
    v_pieces: int = field(compare=False, default=1)  # V ranges to cut it into when popped (1: none)


def propagate_v(cell: Cell) -> None:
    """Interval propagation through V = b_w X on the cell's three ranges.

    A group's V_lo (top column not fixed) is not a bound on V: it only serves the CC
    bound, where raising it to b_lo X_lo stays valid; nothing else is tightened there.
    """
    cell.v_lo = max(cell.v_lo, down(cell.b_lo * cell.x_lo))
    if cell.top is None:
        return
    cell.v_hi = min(cell.v_hi, up(cell.b_hi * cell.x_hi))
    if cell.b_hi > 0:
        cell.x_lo = max(cell.x_lo, down(cell.v_lo / cell.b_hi))
    if cell.b_lo > 0:
        cell.x_hi = min(cell.x_hi, up(cell.v_hi / cell.b_lo))
    if cell.x_hi > 0:
        cell.b_lo = max(cell.b_lo, down(cell.v_lo / cell.x_hi))
    if cell.x_lo > 0:
        cell.b_hi = min(cell.b_hi, up(cell.v_hi / cell.x_lo))


def count_compositions(lo: np.ndarray, hi: np.ndarray, total: int, limit: int) -> int:
    """How many integer vectors lo <= n <= hi have sum ``total`` (stops counting past ``limit``)."""
    rest = total - int(lo.sum())
    if rest < 0 or rest > int((hi - lo).sum()):
        return 0
    ways = np.zeros(rest + 1, dtype=np.float64)
    ways[0] = 1.0
    for cap in (hi - lo).astype(np.int64):
        if cap <= 0:
            continue
        prefix = np.concatenate([[0.0], np.cumsum(ways)])
        idx = np.arange(rest + 1)
        ways = prefix[idx + 1] - prefix[np.maximum(idx - cap, 0)]
        ways = np.minimum(ways, float(limit) + 1)  # saturate: only "above limit" matters
        if ways[rest] > limit:
            # Adding a column never lowers a count (x = 0 keeps every old vector), so the
            # final count is past ``limit`` too: the answer is already known.
            return limit + 1
    return int(min(ways[rest], limit + 1))


def compositions(lo: np.ndarray, hi: np.ndarray, total: int) -> np.ndarray:
    """Every integer vector lo <= n <= hi with sum ``total``, one per row.

    Each partial vector kept can still be completed (the remaining columns can absorb
    what is left), so no intermediate array is larger than the answer.
    """
    lo = lo.astype(np.int64)
    caps = (hi - lo).astype(np.int64)
    rest = total - int(lo.sum())
    m = len(lo)
    if rest < 0 or rest > int(caps.sum()):
        return np.zeros((0, m), dtype=np.int64)
    suffix = np.concatenate([np.cumsum(caps[::-1])[::-1], [0]])
    partial = np.zeros((1, 0), dtype=np.int64)
    sums = np.zeros(1, dtype=np.int64)
    for j in range(m):
        xs = np.arange(caps[j] + 1)
        new = sums[:, None] + xs[None, :]
        ok = (new <= rest) & (rest - new <= suffix[j + 1])
        rows, choice = np.nonzero(ok)
        partial = np.column_stack([partial[rows], xs[choice]])
        sums = new[rows, choice]
    return partial + lo


def greedy(weight: np.ndarray, lo: np.ndarray, hi: np.ndarray, total: int) -> np.ndarray:
    """Counts minimizing ``weight @ n`` over lo <= n <= hi, sum n = total (exact: TU).

    One box at a time, stopping once ``total`` is reached (several times faster than
    :func:`greedy_many` on a single row, which pays numpy's per-call cost).
    """
    n = lo.copy()
    left = total - int(lo.sum())
    for c in np.argsort(weight, kind="stable"):
        if left <= 0:
            break
        add = min(left, int(hi[c] - lo[c]))
        n[c] += add
        left -= add
    return n


def greedy_many(weight: np.ndarray, lo: np.ndarray, hi: np.ndarray, total: int | np.ndarray) -> np.ndarray:
    """Row i: counts minimizing ``weight[i] @ n`` over lo[i] <= n <= hi[i], sum n = total.

    ``lo`` and ``hi`` have one row per box (or one row for all); ``weight`` is one row
    per box or a single vector for all; ``total`` one number, or one per box (a column).
    Each row is the greedy that fills the columns cheapest first up to their caps until
    ``total`` is reached, which is exact because one cardinality row and a box are totally
    unimodular. When lo already sums past ``total`` (an empty box) the row is ``lo``.
    """
    lo2 = lo if lo.ndim == 2 else lo[None, :]
    hi2 = hi if hi.ndim == 2 else hi[None, :]
    m = lo2.shape[1]
    boxes = max(weight.shape[0] if weight.ndim == 2 else 1, lo2.shape[0], hi2.shape[0], np.size(total))
    caps = hi2 - lo2
    # caps in each row's greedy order; ``flat`` indexes the flattened (boxes, m) arrays
    # (one-dimensional gathers and scatters: several times cheaper than 2-d fancy indexing)
    flat = None
    if weight.ndim == 1:
        order = np.argsort(weight, kind="stable")
        caps = caps[:, order]
        if caps.shape[0] != boxes:
            caps = np.repeat(caps, boxes, axis=0)
    else:
        order = np.argsort(weight, axis=1, kind="stable")
        flat = order + (np.arange(boxes) * m)[:, None]
        caps = caps[0][order] if caps.shape[0] != boxes else caps.ravel()[flat]
    left = np.asarray(total).reshape(-1, 1) - lo2.sum(axis=1, keepdims=True)
    before = np.cumsum(caps, axis=1)
    before -= caps  # what the cheaper columns can take
    add = np.minimum(np.maximum(left - before, 0), caps)
    counts = np.empty((boxes, m) if flat is None else boxes * m, dtype=add.dtype)
    if flat is None:
        counts[:, order] = add
    else:
        counts[flat.ravel()] = add.ravel()
        counts = counts.reshape(boxes, m)
    counts += lo2
    return counts


def row_ranges(a: np.ndarray, lo: np.ndarray, hi: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Min and max of each row ``a[i] @ n`` over lo <= n <= hi, sum n = total (exact: TU).

    Both greedy fills run on one sort of each row (the maximum fills it from the other end:
    among equal coefficients the order changes no value); the sums are taken in the sorted
    order, so they may differ from ``a @ n`` in the last bits (callers widen the ends).
    """
    a = np.atleast_2d(np.asarray(a, dtype=float))
    order = np.argsort(a, axis=1, kind="stable")
    caps = (hi - lo)[order]
    values = np.take_along_axis(a, order, axis=1)
    left = total - int(lo.sum())
    base = (a * lo).sum(axis=1)

    def fill(caps: np.ndarray) -> np.ndarray:  # what the greedy adds, column by column in order
        before = np.cumsum(caps, axis=1)
        before -= caps
        return np.minimum(np.maximum(left - before, 0), caps)

    least = base + (values * fill(caps)).sum(axis=1)
    most = base + (values[:, ::-1] * fill(caps[:, ::-1])).sum(axis=1)
    return least, most


def nogood_rows(
    plan: tuple[int, ...], allowed: np.ndarray, lo: np.ndarray, hi: np.ndarray, first: int
) -> tuple[list[tuple[np.ndarray, np.ndarray, float, float]], int]:
    """The rows cutting ``plan`` off, and how many binaries they add.

    The cut is sum_{c: n*_c = lo_c} (n_c - lo_c) + sum_{interior c} z_c >= 1 over the
    counts (the first ``len(allowed)`` variables) and one binary z_c (numbered from
    ``first``) per column with lo_c < n*_c < hi_c, tied by n_c >= lo_c + (n*_c + 1 - lo_c) z_c.
    Proof: with sum n = K fixed, n != n* iff n_c >= n*_c + 1 for some c, which cannot be
    a column at its quota. If that c has n*_c = lo_c, its term is >= 1; if it is interior,
    z_c = 1 is allowed; either way the cut holds. For n = n*, every term at lo is 0 and
    every z_c must be 0: cut off. The LP relaxation is that of one binary per raisable
    column (b_c <= (n_c - lo_c) / (n*_c + 1 - lo_c), i.e. n_c - lo_c at lo), with binaries
    only for the few interior columns instead of all of them.
    """
    at_lo = [i for i, c in enumerate(allowed) if plan[c] == lo[c] < hi[c]]
    interior = [i for i, c in enumerate(allowed) if lo[c] < plan[c] < hi[c]]
    links = [
        (
            np.array([i, first + j]),
            np.array([1.0, -float(plan[allowed[i]] + 1 - lo[allowed[i]])]),
            float(lo[allowed[i]]),
            math.inf,
        )
        for j, i in enumerate(interior)
    ]
    idx = np.concatenate([np.array(at_lo, dtype=np.int64), first + np.arange(len(interior))])
    low = 1.0 + float(sum(lo[allowed[i]] for i in at_lo))
    return links + [(idx, np.ones(len(idx)), low, math.inf)], len(interior)


def nogoods_inside(cell: Cell, shape: ClusterShape, returned_again: set[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The cell's no-goods whose plans lie in (or within 1e-6 of) its b_w, X, V and Q ranges.

    A no-good only removes its plan from a MILP, and a plan outside one of the ranges is
    outside the MILP's range rows, so dropping its no-good never adds a proof and keeps the
    MILPs small. HiGHS's absolute tolerances can still let such a plan through (seen at costs
    of 1e-4 $); one that comes back is cut off again like any returned plan, and from then on
    kept in every cell (the search's ``returned_again``), so no plan loops.
    """
    if not cell.nogoods:
        return []
    plans = np.array(cell.nogoods, dtype=float)
    x, v = plans @ shape.rate, plans @ shape.speed
    ranges = [(v / x, cell.b_lo, cell.b_hi), (x, cell.x_lo, cell.x_hi)]
    if cell.top is not None:  # V and Q are rows of top cells only (a group's V_lo is no bound)
        ranges += [(v, cell.v_lo, cell.v_hi), (plans @ shape.speed**2, cell.q_lo, cell.q_hi)]
    keep = np.ones(len(plans), dtype=bool)
    for value, low, high in ranges:
        keep &= (value >= low - 1e-6 * abs(low)) & (value <= high + 1e-6 * abs(high))
    return [plan for plan, kept in zip(cell.nogoods, keep) if kept or plan in returned_again]
