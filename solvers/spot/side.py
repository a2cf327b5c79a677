"""The spot decomposition's view of side rows that use ``used[c]`` or the user's own variables.

:class:`SideColumns` is a part of :class:`~dnnprov.solvers.spot.bounding.bounds.CellBounds` (built from
the ``side`` rows and the columns): the count-only rows such side rows imply (for the LP bounds)
and the extra columns and rows they bring into a cell MILP. The proofs are at each method.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from dnnprov.solvers.spot.cells import Cell

from dnnprov.models.spot import SideRows
from dnnprov.problems.spot import SpotColumns

#: One MILP row: (column indices, coefficients, low, high).
MilpRow = tuple[np.ndarray, np.ndarray, float, float]
#: A box of counts: (lo, hi), one entry per column.
Box = tuple[np.ndarray, np.ndarray]

SUPPORT_BOXES = 256  # a cell is cut by support (at most k columns used) into at most this many parts
STATISTICS_PARTS = 24  # ... and its box statistics taken over at most this many (each costs a Dinkelbach run)
CARDINALITY_SLACK = 1e-6  # a row's integer cap is floor(high - a_s s + this): never below the model's tolerance
SUPPORT_CACHE = 8192  # support boxes kept per solve (the same boxes recur for every K and top; then cleared)


class SideColumns:
    """Side rows on ``used[c]`` and own variables, for the cell LPs and MILPs."""

    def __init__(self, side: SideRows | None, cols: SpotColumns) -> None:
        self.side = side
        self.cols = cols
        self.cardinality = self.cardinality_rows()
        # per cardinality row: which columns each group holds (groups x columns)
        self.members = [self.membership(groups) for groups, _, _ in self.cardinality]
        #: support boxes by (box, caps, limit): a function of these alone, so a repeat is a lookup
        self.cached: dict[tuple[str, bytes, tuple[int, ...], int], list[Box]] = {}

    def membership(self, groups: list[np.ndarray]) -> np.ndarray:
        """A boolean matrix, one row per group: the columns it holds."""
        member = np.zeros((len(groups), len(self.cols)), dtype=bool)
        for j, g in enumerate(groups):
            member[j, g] = True
        return member

    def cardinality_rows(self) -> list[tuple[list[np.ndarray], float, float]]:
        """The side rows "at most k of these groups of columns used": (groups, high, a_s) each.

        Two shapes qualify (their count parts zero, their upper ends finite; only ``high`` is
        used, the lower end is dropped, which only relaxes):

        * ``sum_{c in M} used[c] + a_s s <= high`` (``used`` weights 0 or 1): groups {c}, c in M;
        * ``sum_j y_j + a_s s <= high`` over own variables y_j >= 0 (weights 0 or 1, no
          ``used``), where a row ``used[c] - y_j <= h`` with h <= 0 ties each column c of a
          group G_j to y_j (``side.at_most_types`` with a spot and an on-demand column per
          type). A plan that uses a column of G_j needs y_j >= used[c] = 1, the other y_j
          are >= 0, so the number of groups it uses is at most sum_j y_j. The groups must be
          disjoint (else the row is left out).

        Other rows are left to the cell MILPs and the implied rows.
        """
        side = self.side
        if side is None or side.a_u is None:
            return []
        own = side.own
        plain = np.flatnonzero((side.a_n == 0).all(axis=1) & np.isfinite(side.high))
        found: list[tuple[list[np.ndarray], float, float]] = []
        links: dict[int, list[int]] = {}
        if own is not None:
            for i in np.flatnonzero(own.rows & (side.a_n == 0).all(axis=1) & (side.a_s == 0) & (side.high <= 0)):
                cs, ys = np.flatnonzero(side.a_u[i]), np.flatnonzero(own.a[i])
                if len(cs) == 1 and len(ys) == 1 and side.a_u[i, cs[0]] == 1 and own.a[i, ys[0]] == -1:
                    links.setdefault(int(ys[0]), []).append(int(cs[0]))
        for i in plain:
            a_u = side.a_u[i]
            if own is None or not own.rows[i]:
                if ((a_u == 0) | (a_u == 1)).all() and (a_u == 1).any():
                    found.append(
                        ([np.array([c]) for c in np.flatnonzero(a_u == 1)], float(side.high[i]), float(side.a_s[i]))
                    )
                continue
            a_y = own.a[i]
            ys = np.flatnonzero(a_y == 1)
            if (a_u != 0).any() or not ((a_y == 0) | (a_y == 1)).all() or (own.low[ys] < 0).any():
                continue
            groups = [np.array(links[j]) for j in ys.tolist() if j in links]
            members = np.concatenate(groups) if groups else np.zeros(0, dtype=np.int64)
            if groups and len(np.unique(members)) == len(members):
                found.append((groups, float(side.high[i]), float(side.a_s[i])))
        return found

    def support_boxes(self, lo: np.ndarray, hi: np.ndarray, ps: int, limit: int = SUPPORT_BOXES) -> list[Box]:
        """Boxes whose union holds every count vector of ``lo <= n <= hi`` meeting the cardinality rows.

        Proof, for one row "at most cap = floor(high - a_s s + 1e-6) of the groups used" (the
        rows are applied one after the other, each to every box so far, so the claim
        composes; the slack keeps every plan the model's tolerance lets through, and the
        number of groups used is an integer, :meth:`cardinality_rows`). In a box, the groups
        with a column of lo_c >= 1 (the set F) are used by every plan; a plan meeting the row
        uses at most cap - |F| of the other groups with a column of hi_c >= 1 (the set O),
        so the groups it uses in O lie in some subset S of O of exactly that size (when O has
        more groups than that), and the plan lies in the box with hi_c = 0 for the columns of
        the groups in O but not in S (n_c = 0 there; lo_c = 0 for those columns, the groups
        being disjoint). So the boxes over all such S hold every plan meeting the row;
        cap < |F| leaves none (no box); cap - |F| >= |O| keeps the box whole. A box that
        would be cut into more than ``limit`` pieces is kept whole (a superset of its
        plans, which every bound allows).

        The answer depends on ``lo``, ``hi``, the caps (``ps`` enters only through them) and
        ``limit``: it is kept under that key (read-only copies) and looked up on a repeat.
        """
        caps = tuple(math.floor(high - a_s * ps + CARDINALITY_SLACK) for _, high, a_s in self.cardinality)
        key = (lo.dtype.str + hi.dtype.str, lo.tobytes() + hi.tobytes(), caps, limit)
        known = self.cached.get(key)
        if known is None:
            lo, hi = lo.copy(), hi.copy()
            lo.flags.writeable = hi.flags.writeable = False
            known = self.cut_by_support(lo, hi, caps, limit)
            if len(self.cached) >= SUPPORT_CACHE:
                self.cached.clear()
            self.cached[key] = known
        return list(known)

    def cut_by_support(self, lo: np.ndarray, hi: np.ndarray, caps: tuple[int, ...], limit: int) -> list[Box]:
        """The support boxes of :meth:`support_boxes`, computed (one cap per cardinality row)."""
        boxes: list[Box] = [(lo, hi)]
        for cap, member in zip(caps, self.members):
            cut: list[Box] = []
            for b_lo, b_hi in boxes:
                open_ = (member & (b_hi > 0)).any(axis=1)  # groups with a column of hi_c >= 1
                fixed = (member & (b_lo > 0)).any(axis=1)  # F: groups every plan of the box uses
                other: np.ndarray = np.asarray(open_ & ~fixed)  # O
                others = np.flatnonzero(other)
                spare = cap - int(fixed.sum())
                if spare < 0:
                    continue
                if spare >= len(others) or len(cut) + math.comb(len(others), spare) > limit:
                    cut.append((b_lo, b_hi))
                    continue
                for keep in itertools.combinations(others.tolist(), spare):
                    drop = other.copy()
                    drop[list(keep)] = False
                    narrow = b_hi.copy()
                    narrow[member[drop].any(axis=0)] = 0
                    narrow.flags.writeable = False
                    cut.append((b_lo, narrow))
            boxes = cut
        return boxes

    def implied_rows(self, cell: Cell) -> list[tuple[np.ndarray, float, float]]:
        """Rows in the counts alone implied by the side rows on ``used[c]`` (without own variables).

        Proof: for an integer count 0 <= n_c <= u_c (u_c the quota), used_c = [n_c >= 1]
        satisfies n_c / u_c <= used_c <= n_c. So a term a_c used_c is at least a_c n_c / u_c
        and at most a_c n_c when a_c > 0 (the other way round when a_c < 0), and a row
        ``low <= count part + a . used <= high`` implies ``count part + sum of the least
        terms <= high`` and ``low <= count part + sum of the greatest terms``: every plan
        meeting the row meets both, so they cut no plan (a column with u_c = 0 has n_c = 0).
        """
        side = self.side
        if side is None or side.a_u is None:
            return []
        mixed = ~side.count_only() & (side.a_u != 0).any(axis=1)
        if side.own is not None:
            mixed &= ~side.own.rows
        quota = self.cols.upper.astype(float)
        share = np.divide(1.0, quota, out=np.zeros_like(quota), where=quota > 0)
        rows = []
        for i in np.flatnonzero(mixed):
            a = side.a_u[i]
            least = np.where(a > 0, a * share, a)  # a_c n_c / u_c or a_c n_c
            most = np.where(a > 0, a, a * share)
            shift = side.a_s[i] * cell.ps
            if math.isfinite(side.high[i]):
                rows.append((side.a_n[i] + least, -math.inf, float(side.high[i] - shift)))
            if math.isfinite(side.low[i]):
                rows.append((side.a_n[i] + most, float(side.low[i] - shift), math.inf))
        return rows

    def side_columns(
        self, cell: Cell, allowed: np.ndarray, lo: np.ndarray, hi: np.ndarray, first: int
    ) -> tuple[list[MilpRow], np.ndarray, np.ndarray, np.ndarray] | None:
        """The side rows that use ``used[c]`` or own variables, with those variables as MILP columns.

        Columns from ``first``: one binary u_c per allowed column, then the own variables y
        (their boxes and integrality). Rows: u_c <= n_c and n_c <= hi_c u_c, then every such
        side row over (n, u, y) with s fixed to the cell's. ``None`` when no row needs them.

        Proof that the cell MILP keeps every plan of the cell that meets the side rows: for
        integer n_c in [lo_c, hi_c] (the cell's box), u_c <= n_c forces u_c = 0 when n_c = 0,
        and n_c <= hi_c u_c forces u_c = 1 when n_c >= 1, so u is exactly the model's
        used[c] = [n_c >= 1] (a column outside ``allowed`` has n_c = 0, hence used[c] = 0
        and no term); y ranges over its whole declared box. A plan meets the side rows
        exactly when some y does, and then (n, used(n), y) is a point of the MILP with the
        same objective (u and y cost nothing). So min f over the MILP is at most f at every
        such plan, and a verified min f >= 0 still closes the cell. A point HiGHS returns is
        only a candidate: its counts are evaluated with the side rows by SpotModel.
        """
        side = self.side
        if side is None:
            return None
        mixed = np.flatnonzero(~side.count_only())
        if not len(mixed):
            return None
        m = len(allowed)
        own = side.own
        n_own = 0 if own is None else len(own)
        used_idx = first + np.arange(m)
        own_idx = first + m + np.arange(n_own)
        rows: list[MilpRow] = []
        for j in range(m):
            rows.append((np.array([first + j, j]), np.array([1.0, -1.0]), -math.inf, 0.0))  # u <= n
            rows.append((np.array([j, first + j]), np.array([1.0, -float(hi[allowed[j]])]), -math.inf, 0.0))
        a_u = side.a_u if side.a_u is not None else np.zeros_like(side.a_n)
        for i in mixed:
            coefs = np.concatenate(
                [side.a_n[i][allowed], a_u[i][allowed], own.a[i] if own is not None else np.zeros(0)]
            )
            idx = np.concatenate([np.arange(m), used_idx, own_idx])
            keep = coefs != 0
            shift = side.a_s[i] * cell.ps
            rows.append((idx[keep], coefs[keep], float(side.low[i] - shift), float(side.high[i] - shift)))
        lower = np.concatenate([np.zeros(m), own.low if own is not None else np.zeros(0)])
        upper = np.concatenate([np.ones(m), own.high if own is not None else np.zeros(0)])
        integer = np.concatenate([np.ones(m, dtype=bool), own.integer if own is not None else np.zeros(0, dtype=bool)])
        return rows, lower.astype(float), upper.astype(float), integer
