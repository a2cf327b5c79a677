"""A thin driver for the many small MILPs of the exact methods, on highspy directly.

Pyomo is the modelling layer users see; inner loops that solve thousands of tiny MILPs
are several times faster on highspy (spec/solver-notes.md). Every MILP here is solved to
``mip_rel_gap = 0`` and the feasibility-jump heuristic is off (it costs ~4 ms per tiny
MILP with identical answers).

HiGHS's tolerances are absolute and its answers are floating point: at large magnitudes
(one price of 1e5 $/h next to prices of 1e-5) it has reported ``optimal`` for an LP value
20 % above the true optimum (issue 19). So no value HiGHS reports is a proof here. The
``dual_bound`` of a :class:`MilpSolution` is *verified in unscaled terms*:

* an LP's bound is the safe dual bound of Neumaier and Shcherbina (2004),
  :func:`safe_dual_bound`, computed from HiGHS's row duals with a proven error term;
* a MILP's bound is re-derived by :func:`verified_milp_bound`: a small branch and bound
  whose every node bound is such a safe dual bound (HiGHS's own tree is not visible,
  so its ``mip_dual_bound`` is never used as a proof).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction

import highspy
import numpy as np

from dnnprov.progress import stop_requested

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
    """HiGHS's status, its point (``None`` without one), the objective there, a verified bound.

    ``dual_bound`` is the only proof: a lower bound on the objective over every point of
    the model, verified in unscaled terms (module doc); ``-inf`` when nothing could be
    verified, ``inf`` for a verified infeasible model. ``objective`` is the value at ``x``.
    """

    status: MilpStatus
    x: np.ndarray | None
    objective: float
    dual_bound: float
    #: an LP's row duals as HiGHS gave them (unverified: a caller derives its own bound from them)
    row_dual: np.ndarray | None = None


def milp_status(status: highspy.HighsModelStatus) -> MilpStatus:
    """HiGHS's model status in the driver's terms (its word only: nothing here is verified)."""
    if status == highspy.HighsModelStatus.kOptimal:
        return MilpStatus.OPTIMAL
    if status == highspy.HighsModelStatus.kInfeasible:
        return MilpStatus.INFEASIBLE
    return MilpStatus.LIMIT if status == highspy.HighsModelStatus.kTimeLimit else MilpStatus.ERROR


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


# ------------------------------------------------------------------ verified bounds
UNIT_ROUNDOFF = 2.0**-53
#: Covers underflow: every product of two floats is within 2^-1074 of its rounded value.
TINY = 1e-300


@dataclass(frozen=True)
class SparseRows:
    """Rows ``low <= a @ x <= high`` as flat arrays: one entry per nonzero (row, column, value)."""

    row: np.ndarray
    col: np.ndarray
    value: np.ndarray
    low: np.ndarray
    high: np.ndarray

    @classmethod
    def of(cls, rows: list[tuple[np.ndarray, np.ndarray, float, float]] | SparseRows) -> SparseRows:
        """From the ``(idx, a, low, high)`` rows of :func:`solve_milp` (a ``SparseRows`` is returned as it is)."""
        if isinstance(rows, SparseRows):
            return rows
        sizes = [len(r[0]) for r in rows]
        return cls(
            np.repeat(np.arange(len(rows)), sizes).astype(np.int64),
            (np.concatenate([r[0] for r in rows]) if rows else np.zeros(0)).astype(np.int64),
            (np.concatenate([r[1] for r in rows]) if rows else np.zeros(0)).astype(float),
            np.array([r[2] for r in rows], dtype=float),
            np.array([r[3] for r in rows], dtype=float),
        )

    @classmethod
    def stack(cls, parts: list[SparseRows]) -> SparseRows:
        """The rows of ``parts`` one after the other (row numbers shifted)."""
        shift = np.cumsum([0] + [len(part.low) for part in parts[:-1]])
        return cls(
            np.concatenate([part.row + offset for part, offset in zip(parts, shift)]),
            np.concatenate([part.col for part in parts]),
            np.concatenate([part.value for part in parts]),
            np.concatenate([part.low for part in parts]),
            np.concatenate([part.high for part in parts]),
        )

    def starts(self) -> np.ndarray:
        """Row-wise (CSR) starts of the entries: the rows' entries are stored row after row."""
        return np.concatenate([[0], np.cumsum(np.bincount(self.row, minlength=len(self.low)))]).astype(np.int32)


def _down(value: float) -> float:
    return float(np.nextafter(value, -np.inf))


#: Columns whose reduced cost is recomputed exactly (fractions) when its float interval
#: meets an infinite end of the box; past this many the dual gives no bound.
EXACT_COLUMNS = 8


def _exact_term(cost: float, a: np.ndarray, y: np.ndarray, lower: float, upper: float) -> float:
    """min of r x over [lower, upper] with r = cost - a y computed exactly, rounded down."""
    r = Fraction(cost) - sum((Fraction(float(v)) * Fraction(float(w)) for v, w in zip(a, y)), Fraction(0))
    if r == 0:
        return 0.0
    end = lower if r > 0 else upper
    if not math.isfinite(end):
        return -math.inf
    exact = r * Fraction(end)
    value = float(exact)
    return value if Fraction(value) <= exact else _down(value)


class DualBounds:
    """Safe dual bounds of one objective and rows over any box; what the nodes share is computed once."""

    def __init__(self, cost: np.ndarray, offset: float, rows: SparseRows) -> None:
        self.cost = np.asarray(cost, dtype=float)
        self.offset = float(offset)
        self.rows = rows
        # each r_j = c_j - sum_i a_ij y_i is a sum of k_j + 1 products (k_j entries in column j)
        self.error_factor = 2.0 * (np.bincount(rows.col, minlength=len(self.cost)) + 3) * UNIT_ROUNDOFF
        self.abs_cost = np.abs(self.cost)
        self.low_open, self.high_open = ~np.isfinite(rows.low), ~np.isfinite(rows.high)

    def terms(self, lower: np.ndarray, upper: np.ndarray, row_dual: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """:func:`safe_dual_bound` and the proven interval ``[r_low, r_high]`` of every reduced cost.

        The exact reduced cost ``c - A' y`` of the dual y used (``row_dual`` with the wrong-sign
        duals of infinite row sides set to 0) lies in the interval, column by column.
        """
        rows, n = self.rows, len(self.cost)
        y = np.asarray(row_dual, dtype=float)
        y = np.where(np.isfinite(y) & ~((y > 0) & self.low_open) & ~((y < 0) & self.high_open), y, 0.0)
        products = rows.value * y[rows.row]
        aty = np.bincount(rows.col, weights=products, minlength=n)
        magnitude = np.bincount(rows.col, weights=np.abs(products), minlength=n) + self.abs_cost
        reduced = self.cost - aty
        delta = self.error_factor * magnitude + TINY
        r_low, r_high = np.nextafter(reduced - delta, -np.inf), np.nextafter(reduced + delta, np.inf)
        with np.errstate(invalid="ignore", over="ignore"):
            # min of r x over r in [r_low, r_high], x in [lower, upper]: a bilinear form's least
            # value is at a corner (fmin skips the nan of 0 * inf: r = 0 there adds nothing)
            col_terms = np.fmin(np.fmin(r_low * lower, r_low * upper), np.fmin(r_high * lower, r_high * upper))
            row_terms = np.where(y > 0, y * rows.low, np.where(y < 0, y * rows.high, 0.0))
        unbounded = np.flatnonzero(~np.isfinite(col_terms))
        if len(unbounded) > EXACT_COLUMNS:
            return -math.inf, r_low, r_high
        for j in unbounded:  # an infinite end: r_j exactly (a basic free column has r_j = 0)
            col_terms[j] = _exact_term(
                float(self.cost[j]),
                rows.value[rows.col == j],
                y[rows.row[rows.col == j]],
                float(lower[j]),
                float(upper[j]),
            )
        terms = np.concatenate([[self.offset], row_terms, col_terms])
        if not np.isfinite(terms).all():
            return -math.inf, r_low, r_high
        total = math.fsum(terms.tolist())
        error = 2.0 * (len(terms) + 2) * UNIT_ROUNDOFF * float(np.abs(terms).sum()) + TINY
        return (_down(total - error) if math.isfinite(total - error) else -math.inf), r_low, r_high


def safe_dual_bound(
    cost: np.ndarray, offset: float, lower: np.ndarray, upper: np.ndarray, rows: SparseRows, row_dual: np.ndarray
) -> float:
    """A rigorous lower bound on ``cost @ x + offset`` over ``rows`` and the box, from any ``row_dual``.

    Neumaier and Shcherbina (2004). For every y and every x with ``low <= A x <= high``
    and ``lower <= x <= upper``, exactly (real arithmetic):
    ``c x = y (A x) + r x`` with ``r = c - A' y``, and
    ``y_i (A x)_i >= y_i low_i`` (y_i > 0) or ``y_i high_i`` (y_i < 0), and
    ``r_j x_j >= r_j lower_j`` (r_j > 0) or ``r_j upper_j`` (r_j < 0). So any y gives a bound;
    a good one (HiGHS's duals) gives a tight one. Floating point enters twice, both covered:

    * r is computed in floats: each r_j is a sum of k_j + 1 products, so its error is at
      most gamma_{k+1} sum |c_j| + |a_ij y_i| (Higham, Thm 3.1 and Lemma 3.1, any order of
      summation, FMA included), with gamma_n = n u / (1 - n u) < 2 n u; r_j is then only
      known to lie in [r_j - delta_j, r_j + delta_j], and ``min_x r x`` is concave in r, so
      its minimum over that interval is at an end (both are tried);
    * the final sum of N terms has error at most gamma_N sum |terms|, and each product one
      rounding more, so the result is lowered by 2 (N + 2) u sum |terms| (that sum itself
      computed in floats, within gamma_N of its value: the factor 2 covers it).

    A dual of the wrong sign on a row side that is infinite is set to 0 first (any y is
    allowed); an r_j that may be negative on an infinite upper bound (or positive on an
    infinite lower one) gives ``-inf``: no bound from this dual. (:class:`DualBounds` does
    the same for many boxes of one model and also returns the reduced costs' intervals.)
    """
    return DualBounds(cost, offset, rows).terms(lower, upper, row_dual)[0]


def implied_box(
    lower: np.ndarray, upper: np.ndarray, rows: SparseRows, passes: int = 3
) -> tuple[np.ndarray, np.ndarray]:
    """The box with its infinite ends replaced by bounds that every point of the rows implies.

    For a row ``low <= sum a_k x_k <= high`` whose other terms have a finite least value
    m (greatest value M) over the box, ``a_j x_j <= high - m`` and ``a_j x_j >= low - M``;
    divided by a_j these bound x_j. Every point satisfying the rows and the box satisfies
    the new box, so a bound over it holds for the model. Computed ends are moved outward
    by more than their rounding error: (k + 4) 4u relative to the magnitudes summed
    (k terms, Higham's gamma_k as in :func:`safe_dual_bound`), plus TINY. Rows naming a
    column twice are skipped. All rows are handled at once, ``passes`` times.
    """
    lo, hi = np.asarray(lower, dtype=float).copy(), np.asarray(upper, dtype=float).copy()
    r, c, a = rows.row, rows.col, rows.value
    m = len(rows.low)
    if not len(a) or (np.isfinite(lo).all() and np.isfinite(hi).all()):
        return lo, hi
    touching = np.zeros(m, dtype=bool)  # only rows naming a column with an infinite end give one
    touching[r[~(np.isfinite(lo) & np.isfinite(hi))[c]]] = True
    r, c, a = r[touching[r]], c[touching[r]], a[touching[r]]
    pairs = r * (len(lo) + 1) + c
    twice = np.zeros(m, dtype=bool)
    sorted_pairs = np.sort(pairs)
    twice[(sorted_pairs[1:][sorted_pairs[1:] == sorted_pairs[:-1]]) // (len(lo) + 1)] = True
    usable = ~twice[r] & (a != 0)
    length = np.bincount(r, minlength=m)
    slack = (length + 4) * 4 * UNIT_ROUNDOFF
    for _ in range(passes):
        changed = False
        with np.errstate(invalid="ignore", over="ignore"):
            least = np.where(a > 0, a * lo[c], a * hi[c])
            most = np.where(a > 0, a * hi[c], a * lo[c])
        # (row side, the terms' extreme values, whether the row bounds x_c above when a > 0)
        for side, spans, above_if_positive in ((rows.high, least, True), (rows.low, most, False)):
            finite = np.isfinite(spans)
            total = np.bincount(r, weights=np.where(finite, spans, 0.0), minlength=m)
            size = np.abs(side) + np.bincount(r, weights=np.where(finite, np.abs(spans), 0.0), minlength=m)
            open_terms = np.bincount(r, weights=(~finite).astype(float), minlength=m)
            others_finite = (open_terms[r] - (~finite)) == 0
            bounds_above = (a > 0) == above_if_positive
            end_open = np.where(bounds_above, ~np.isfinite(hi[c]), ~np.isfinite(lo[c]))
            take = usable & others_finite & end_open & np.isfinite(side[r])
            if not take.any():
                continue
            e = np.flatnonzero(take)
            others = total[r[e]] - np.where(finite[e], spans[e], 0.0)
            value = (side[r[e]] - others) / a[e]
            margin = slack[r[e]] * size[r[e]] / np.abs(a[e]) + TINY
            up_e, down_e = e[bounds_above[e]], e[~bounds_above[e]]
            new_hi, new_lo = hi.copy(), lo.copy()
            np.minimum.at(new_hi, c[up_e], (value + margin)[bounds_above[e]])
            np.maximum.at(new_lo, c[down_e], (value - margin)[~bounds_above[e]])
            finite_now = np.isfinite(new_hi) & ~np.isfinite(hi) | np.isfinite(new_lo) & ~np.isfinite(lo)
            hi = np.where(np.isfinite(hi), hi, new_hi)
            lo = np.where(np.isfinite(lo), lo, new_lo)
            changed = changed or bool(finite_now.any())
        if not changed:
            break
    return lo, hi


def _farkas_proves_empty(h: highspy.Highs, empty: DualBounds, lower: np.ndarray, upper: np.ndarray) -> bool:
    """Whether HiGHS's dual ray, checked as a safe bound with cost 0 (``empty``), proves the LP empty.

    With c = 0, :func:`safe_dual_bound` bounds 0 from below for every feasible point; a
    bound above 0 means there is none.
    """
    _, has_ray, ray = h.getDualRay()  # type: ignore[attr-defined]  # (bound at run time; missing from highspy's stubs)
    if not has_ray:
        return False
    ray = np.asarray(ray, dtype=float)
    return any(empty.terms(lower, upper, sign * ray)[0] > 0 for sign in (1.0, -1.0))


def reduced_cost_box(
    lower: np.ndarray,
    upper: np.ndarray,
    box_lo: np.ndarray,
    box_hi: np.ndarray,
    r_low: np.ndarray,
    r_high: np.ndarray,
    bound: float,
    aim: float,
    integer: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The box ``[lower, upper]`` less points that cost ``aim`` or more, by reduced costs.

    ``bound``, ``r_low`` and ``r_high`` come from :meth:`DualBounds.terms` over
    ``[box_lo, box_hi]`` (the box, or a smaller one that holds every point of the rows).
    Proof: in the decomposition of :func:`safe_dual_bound`, exactly, for every point x
    of the rows in the box, ``c x + offset >= L + sum_j e_j`` where ``L = bound`` and e_j
    is what r_j x_j exceeds its term by: with r_j >= r_low_j > 0 the term is at most
    r_j box_lo_j, so e_j >= r_j (x_j - box_lo_j) >= r_low_j (x_j - box_lo_j) >= 0; with
    r_j <= r_high_j < 0 likewise e_j >= r_high_j (x_j - box_hi_j) >= 0. Every e_j is
    nonnegative, so a point below ``aim`` has each e_j < aim - L, hence
    ``x_j < box_lo_j + (aim - L) / r_low_j`` (or ``x_j > box_hi_j - (aim - L) / -r_high_j``).
    Each of the three roundings (the difference, the quotient, the sum) is followed by a
    step outward (``nextafter``), so the computed end lies beyond the exact one (an
    overflow gives an infinite end: no cut). Integer columns round it inward (floor, ceil):
    an integer below a number is at most its floor.
    """
    gap = float(np.nextafter(aim - bound, np.inf))
    if not math.isfinite(gap):
        return lower, upper
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rise = np.nextafter(gap / r_low, np.inf)
        fall = np.nextafter(gap / -r_high, np.inf)
        new_hi = np.where((r_low > 0) & np.isfinite(box_lo), np.nextafter(box_lo + rise, np.inf), np.inf)
        new_lo = np.where((r_high < 0) & np.isfinite(box_hi), np.nextafter(box_hi - fall, -np.inf), -np.inf)
    new_hi = np.where(integer, np.floor(new_hi), new_hi)
    new_lo = np.where(integer, np.ceil(new_lo), new_lo)
    return np.maximum(lower, new_lo), np.minimum(upper, new_hi)


NODE_LIMIT = 2000  # nodes of the verifying branch and bound before it gives up
FIRST_NODES = 300  # nodes it may take to decide a threshold MILP before HiGHS's MILP runs


@dataclass(frozen=True)
class BranchAndBound:
    """What :func:`verified_milp_bound` found: the bound, a point below the aim (or ``None``), nodes solved."""

    bound: float
    point: np.ndarray | None
    nodes: int


def verified_milp_bound(
    h: highspy.Highs,
    cost: np.ndarray,
    offset: float,
    scale: float,
    lower: np.ndarray,
    upper: np.ndarray,
    rows: SparseRows,
    integer: np.ndarray,
    aim: float,
    deadline: float,
    node_limit: int = NODE_LIMIT,
    *,
    cutoff: float | None = None,
    tighten: bool = True,
) -> BranchAndBound:
    """A lower bound on the MILP, re-derived: a branch and bound over verified LP bounds.

    HiGHS holds the MILP's LP relaxation (objective divided by ``scale``). A node (a box)
    is closed when its :func:`safe_dual_bound` (over the box tightened by
    :func:`implied_box`) reaches ``aim`` or a dual ray proves it empty; otherwise its box
    loses, by :func:`reduced_cost_box`, the points that cost ``cutoff`` (default ``aim``)
    or more (``tighten``; a box left empty closes the node), and it is split at an integer
    column, x_j <= floor(v) or x_j >= floor(v) + 1 (every integer point stays in one child).
    The minimum over closed and open nodes (an open node keeps its parent's bound), and
    ``cutoff`` once a box lost points, is a lower bound on every integer point. It gives up
    after ``node_limit`` nodes or at ``deadline`` (a ``time.perf_counter()`` value).

    ``point``: a node's LP optimum that is an integer point below ``aim`` (HiGHS's MILP
    missed it); then ``aim`` cannot be reached and the search stops.
    """
    n = len(cost)
    cutoff = aim if cutoff is None else max(cutoff, aim)
    # bounds the rows imply over the whole box hold in every node (a node's box lies inside)
    implied_lo, implied_hi = implied_box(lower, upper, rows)
    duals, empty = DualBounds(cost, offset, rows), DualBounds(np.zeros(n), 0.0, rows)
    stack: list[tuple[np.ndarray, np.ndarray, float]] = [(lower.copy(), upper.copy(), -math.inf)]
    # binaries without cost (used[c] and own indicators of side rows): branched on first
    switch = integer & (cost == 0) & (lower >= 0) & (upper <= 1)
    closed = math.inf
    held: tuple[np.ndarray, np.ndarray] | None = None  # the box HiGHS holds

    def so_far(*more: float) -> float:
        return min(closed, *more, min((b for _, _, b in stack), default=math.inf))

    for node in range(node_limit):
        if not stack:
            return BranchAndBound(closed, None, node)
        if time.perf_counter() > deadline or stop_requested():
            return BranchAndBound(so_far(), None, node)
        lo, hi, parent = stack.pop()
        changed = np.arange(n) if held is None else np.flatnonzero((lo != held[0]) | (hi != held[1]))
        h.changeColsBounds(len(changed), changed.astype(np.int32), lo[changed], hi[changed])
        held = (lo, hi)
        h.run()
        status = h.getModelStatus()
        box_lo, box_hi = np.maximum(lo, implied_lo), np.minimum(hi, implied_hi)
        if status != highspy.HighsModelStatus.kOptimal:
            if status == highspy.HighsModelStatus.kInfeasible and _farkas_proves_empty(h, empty, box_lo, box_hi):
                continue  # no point: closed at bound inf
            return BranchAndBound(so_far(parent), None, node + 1)
        solution = h.getSolution()
        value, r_low, r_high = duals.terms(box_lo, box_hi, np.asarray(solution.row_dual, dtype=float) * scale)
        bound = max(parent, value)
        if bound >= aim:
            closed = min(closed, bound)
            continue
        x = np.asarray(solution.col_value, dtype=float)
        fraction = np.where(integer, np.abs(x - np.round(x)), 0.0)
        if fraction.max(initial=0.0) <= 1e-9:
            point = np.where(integer, np.round(x), x)
            if float(cost @ point + offset) < aim:
                return BranchAndBound(so_far(bound), point, node + 1)
        if tighten and value > -math.inf:
            lo, hi = reduced_cost_box(lo, hi, box_lo, box_hi, r_low, r_high, value, cutoff, integer)
            if not (np.array_equal(lo, held[0]) and np.array_equal(hi, held[1])):
                closed = min(closed, cutoff)  # points at cutoff or above left the box
                if (lo > hi).any():
                    continue
        free = integer & (hi > lo)
        if not free.any():
            if (integer & (held[1] > held[0])).any():  # the tightening fixed the last ones: solve there
                stack.append((lo, hi, bound))
                continue
            return BranchAndBound(so_far(bound), None, node + 1)
        # split where rounding to the nearest integer moves the cost most: |c_j| dist(x_j, Z)
        # (40 % fewer nodes than the most fractional column, docs/benchmarks.md, issue 19 session 4)
        fractional = free & (fraction > 1e-9)
        indicators = fractional & switch
        if indicators.any():  # indicators first: the side rows on them are what the LP misses
            j = int(np.argmax(np.where(indicators, fraction, -1.0)))
        elif fractional.any():
            j = int(np.argmax(np.where(fractional, fraction * np.abs(cost), -1.0)))
        else:  # integral: split the widest free range
            j = int(np.argmax(np.where(free, hi - lo, -1.0)))
        cut = min(max(math.floor(x[j]), lo[j]), hi[j] - 1)
        left_hi, right_lo = hi.copy(), lo.copy()
        left_hi[j], right_lo[j] = cut, cut + 1
        children = [(right_lo, hi, bound), (lo, left_hi, bound)]
        if x[j] - cut > 0.5:  # dive first towards the nearer integer
            children.reverse()
        stack.extend(children)
    return BranchAndBound(so_far() if stack else closed, None, node_limit)


def solve_milp(
    h: highspy.Highs,
    cost: np.ndarray,
    col_lower: np.ndarray,
    col_upper: np.ndarray,
    rows: list[tuple[np.ndarray, np.ndarray, float, float]] | SparseRows,
    *,
    integer: np.ndarray | None = None,
    offset: float = 0.0,
    time_limit_s: float = INF,
    presolve: bool = False,
    proof_target: float | None = None,
    first_below_target: bool = False,
    search_first: bool = True,
    bases: dict | None = None,
) -> MilpSolution:
    """Minimize ``cost @ x + offset`` subject to ``low <= a @ x[idx] <= high`` for each row.

    ``rows`` holds ``(idx, a, low, high)`` with sparse indices and values (or is a
    :class:`SparseRows`, entries stored row after row); ``integer``
    flags integer columns (default: all). With ``first_below_target`` the MILP stops at the
    first point below ``proof_target`` HiGHS finds (not its optimum: callers that only test
    whether such a point exists), and ``search_first`` asks the verifying branch and bound
    first (:func:`_threshold_first`; faster where no point is likely, slower at finding one).
    ``bases`` (LPs only): optimal bases by model shape (columns, rows); an LP of a shape solved
    before starts from that basis, and its own optimal basis is kept (the exact methods' cell
    LPs of one cell's relatives share their shape: a fifth of the simplex iterations).
    ``status`` is HiGHS's outcome; the returned
    ``dual_bound`` is verified (module doc) and is the only proof. For a MILP it is re-derived up to ``proof_target`` (default: HiGHS's own
    claim): callers that only need "no point below t" say so and save nodes. A HiGHS
    ``infeasible`` that cannot be verified comes back as ``ERROR``.

    Presolve is off by default: on the exact methods' tiny, nearly degenerate models
    HiGHS 1.16's presolve has declared a feasible LP infeasible (a cell holding one
    plan, ranges of relative width 1e-9) and ended MILPs in a solve error with a
    solution that violates a row; without it the same models solve correctly, and the
    large set runs 25 % faster.
    """
    started = time.perf_counter()
    n = len(cost)
    cost = np.asarray(cost, dtype=float)
    lower, upper = np.asarray(col_lower, dtype=float), np.asarray(col_upper, dtype=float)
    # HiGHS's tolerances are absolute: with prices of 1e-4 $/h an objective's differences
    # would sit below them. The objective is solved scaled to a largest coefficient of 1;
    # the bounds are verified unscaled, so the scale only affects how tight they are.
    scale = float(np.abs(cost).max()) if n and np.abs(cost).max() > 0 else 1.0
    sparse = SparseRows.of(rows)
    flags = np.ones(n, dtype=bool) if integer is None else np.asarray(integer, dtype=bool)
    h.clearModel()
    h.setOptionValue("time_limit", max(float(time_limit_s), 1e-3))
    h.setOptionValue("presolve", "on" if presolve else "off")
    # with first_below_target, HiGHS stops at the first point below proof_target (kObjectiveTarget)
    stop_early = first_below_target and proof_target is not None and bool(flags.any())
    relaxation_first = stop_early and search_first
    h.setOptionValue("objective_target", -INF)
    # the arrays passed as they are (a HighsLp's fields are copied element by element: ~4x slower)
    h.passModel(
        n,
        len(sparse.low),
        len(sparse.value),
        int(highspy.MatrixFormat.kRowwise),
        int(highspy.ObjSense.kMinimize),
        float(offset) / scale,
        cost / scale,
        lower,
        upper,
        sparse.low,
        sparse.high,
        sparse.starts(),
        sparse.col.astype(np.int32),
        sparse.value,
        np.zeros(n, dtype=np.int32) if relaxation_first else flags.astype(np.int32),
    )
    if relaxation_first:  # the relaxation first (no integrality yet)
        assert proof_target is not None  # (stop_early requires it)
        deadline = started + max(float(time_limit_s), 1e-3)
        decided = _threshold_first(h, cost, offset, scale, lower, upper, sparse, flags, proof_target, deadline)
        if decided is not None:
            return decided
        h.setOptionValue("objective_target", proof_target / scale)
        h.setOptionValue("time_limit", max(deadline - time.perf_counter(), 1e-3))
        h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), flags.astype(np.uint8))
    elif stop_early:
        assert proof_target is not None
        h.setOptionValue("objective_target", proof_target / scale)
    shape = (n, len(sparse.low))
    if bases is not None and shape in bases and not flags.any():
        h.setBasis(bases[shape])  # a warm start only: the bound is verified all the same
    h.run()
    status = h.getModelStatus()
    if not flags.any():
        if bases is not None and status == highspy.HighsModelStatus.kOptimal:
            bases[shape] = h.getBasis()
        return _lp_solution(h, cost, offset, scale, lower, upper, sparse)
    info = h.getInfo()
    x = None
    if status in (highspy.HighsModelStatus.kOptimal, highspy.HighsModelStatus.kObjectiveTarget) or (
        status == highspy.HighsModelStatus.kTimeLimit and info.primal_solution_status == 2
    ):
        x = np.array(h.getSolution().col_value)
    objective = float(cost @ x + offset) if x is not None else INF
    if status == highspy.HighsModelStatus.kObjectiveTarget and x is not None:
        return MilpSolution(MilpStatus.OPTIMAL, x, objective, -INF)  # a point, and no proof needed
    if status not in (highspy.HighsModelStatus.kOptimal, highspy.HighsModelStatus.kInfeasible):
        kind = MilpStatus.LIMIT if status == highspy.HighsModelStatus.kTimeLimit else MilpStatus.ERROR
        return MilpSolution(
            kind, x if kind is MilpStatus.LIMIT else None, objective if kind is MilpStatus.LIMIT else INF, -INF
        )
    if x is not None and proof_target is not None and objective < proof_target:
        return MilpSolution(MilpStatus.OPTIMAL, x, objective, -INF)  # the caller needs no proof
    claim = objective if x is not None else INF
    aim = claim if proof_target is None else min(claim, proof_target)
    if x is not None and proof_target is None:  # HiGHS's claim, less its tolerance
        aim -= 1e-9 * (abs(claim) + float(np.abs(cost * x).sum()) + abs(offset))
    h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), np.zeros(n, dtype=np.uint8))
    deadline = started + max(float(time_limit_s), 1e-3)
    # boxes may lose the points at HiGHS's claim or above (the bound is capped there anyway)
    searched = verified_milp_bound(
        h,
        cost,
        offset,
        scale,
        lower,
        upper,
        sparse,
        flags,
        aim,
        deadline,
        cutoff=claim if proof_target is None else aim,
    )
    bound, better = searched.bound, searched.point
    if better is not None:  # HiGHS's answer was not optimal: a point below it
        return MilpSolution(MilpStatus.OPTIMAL, better, float(cost @ better + offset), bound)
    if x is None:
        return MilpSolution(MilpStatus.INFEASIBLE if bound >= aim else MilpStatus.ERROR, None, INF, bound)
    return MilpSolution(MilpStatus.OPTIMAL, x, objective, min(bound, objective))


def _threshold_first(
    h: highspy.Highs,
    cost: np.ndarray,
    offset: float,
    scale: float,
    lower: np.ndarray,
    upper: np.ndarray,
    rows: SparseRows,
    integer: np.ndarray,
    target: float,
    deadline: float,
) -> MilpSolution | None:
    """Decide "is there a point below ``target``?" by the verifying branch and bound alone.

    Most threshold MILPs are decided in a few dozen nodes of :func:`verified_milp_bound`,
    which the HiGHS MILP route runs anyway after HiGHS's own search: a verified bound at
    ``target`` or above closes the question (no point below it; status ``INFEASIBLE`` in the
    sense of the objective target); an integer LP optimum below it is returned as the point
    (status ``OPTIMAL``, no bound needed), once it meets every row and bound within 1e-9 of
    their magnitudes after rounding its integer columns. ``None`` (more than
    :data:`FIRST_NODES` nodes, or a point that fails that check): undecided, HiGHS's MILP
    takes over (``h`` holds the relaxation, its box restored, its integrality still to be set).
    """
    n = len(cost)
    searched = verified_milp_bound(
        h, cost, offset, scale, lower, upper, rows, integer, target, deadline, node_limit=FIRST_NODES
    )
    bound, point = searched.bound, searched.point
    if bound >= target:
        return MilpSolution(MilpStatus.INFEASIBLE, None, INF, bound)
    if point is not None and _meets_rows(point, lower, upper, rows):
        return MilpSolution(MilpStatus.OPTIMAL, point, float(cost @ point + offset), -INF)
    h.changeColsBounds(n, np.arange(n, dtype=np.int32), lower, upper)
    return None


def _meets_rows(x: np.ndarray, lower: np.ndarray, upper: np.ndarray, rows: SparseRows) -> bool:
    """Whether ``x`` meets its box and every row within 1e-9 of the terms' magnitudes."""
    activity = np.bincount(rows.row, weights=rows.value * x[rows.col], minlength=len(rows.low))
    size = np.bincount(rows.row, weights=np.abs(rows.value * x[rows.col]), minlength=len(rows.low))
    slack = (
        1e-9
        * (
            size
            + np.abs(np.where(np.isfinite(rows.low), rows.low, 0.0))
            + np.abs(np.where(np.isfinite(rows.high), rows.high, 0.0))
        )
        + 1e-12
    )
    return bool(
        (x >= lower - 1e-9 * np.abs(lower) - 1e-12).all()
        and (x <= upper + 1e-9 * np.abs(upper) + 1e-12).all()
        and (activity >= rows.low - slack).all()
        and (activity <= rows.high + slack).all()
    )


def _lp_solution(
    h: highspy.Highs,
    cost: np.ndarray,
    offset: float,
    scale: float,
    lower: np.ndarray,
    upper: np.ndarray,
    rows: SparseRows,
) -> MilpSolution:
    """The outcome of an LP (no integer column) with its verified bound (``inf``: proven empty)."""
    status = h.getModelStatus()
    box_lo, box_hi = implied_box(lower, upper, rows)
    if status == highspy.HighsModelStatus.kOptimal:
        solution = h.getSolution()
        x = np.array(solution.col_value)
        y = np.asarray(solution.row_dual, dtype=float) * scale
        return MilpSolution(
            MilpStatus.OPTIMAL, x, float(cost @ x + offset), safe_dual_bound(cost, offset, box_lo, box_hi, rows, y)
        )
    if status == highspy.HighsModelStatus.kInfeasible:
        if _farkas_proves_empty(h, DualBounds(np.zeros(len(cost)), 0.0, rows), box_lo, box_hi):
            return MilpSolution(MilpStatus.INFEASIBLE, None, INF, INF)
        return MilpSolution(MilpStatus.ERROR, None, INF, -INF)
    if status == highspy.HighsModelStatus.kTimeLimit:
        return MilpSolution(MilpStatus.LIMIT, None, INF, -INF)
    return MilpSolution(MilpStatus.ERROR, None, INF, -INF)
