"""Exact spot provisioning: cell decomposition, MILP threshold tests, exact evaluation.

Why it is exact. With the worker count K and PS count s fixed, every column has a constant
iteration rate r_c = 1/T_c (eqs. 6-9), speed v_c = b_c r_c and price p_c, so the cluster
aggregates X = sum n r, V = sum n v, P = sum n p are linear in the counts n. The cost
(eq. 11) is ``(P + c0) (j / X + h) / 3600`` (c0 = PS price, h = takeover overhead) and only
the iteration count j (eq. 3) is nonlinear, through b_w = V / X and the CC R (eq. 5).

A *cell* fixes (K, s), the fastest used column t (which fixes v_top in eq. 5) and ranges
[b_lo, b_hi] of b_w, [V_lo, V_hi] of V and [X_lo, X_hi] of X. Over a cell, with
A(b) = gamma_2 b + gamma_3 and c(R) = sqrt((R + gamma_4) K) / (L - gamma_5):

* R >= s_K (1 - v_t / V), s_K = sqrt(K / (K - 1))               (Cauchy-Schwarz on eq. 5)
* j >= j_lb = min over b of c(R_lb(max(V_lo, b X_lo))) A(b) - gamma_1   (V = b_w X couples them)
* cost >= ((P + c0) j_lb / X + (P + c0) h) / 3600 >= (rho_min j_lb + h (P_min + c0)) / 3600

where rho_min = min (P + c0) / X, first over the cell's box by Dinkelbach's method with a
greedy step (a box with one cardinality row is totally unimodular), then, when the cell is
first popped, over the LP relaxation of all its rows (Charnes-Cooper). Price per rate and
b_w are also bounded together, column by column (``CellBounds.vertex_bound``). That bound
orders the cells; when the smallest bound reaches the incumbent U, U is optimal. Ranges are
tightened before any MILP: a plan cheaper than U needs j < (3600 U - h (P_min + c0)) /
rho_min, a plan meeting T_obj needs X >= j_lb / (T_obj - h) and j <= (T_obj - h) X_hi, and
V = b_w X propagates between the three ranges.

A popped cell runs one MILP over integer counts that asks whether a plan may cost less
than U, i.e. f(n) = (P + c0) (j_lb + h X_lo) - 3600 U X < 0 (with the CC term, R's growth
with V enters f through a continuous W bounded by McCormick planes), while meeting the
deadline (13) in relaxed forms that keep b_w, V and X (secants of X^2 and V^2, McCormick
planes of V X, a secant of c(R_lb(V))) and the side constraints. If min f >= 0 the cell is
closed. Otherwise the plan is evaluated exactly with :class:`SpotModel` (possibly
improving U) and cut off by a no-good (n_c >= n*_c + 1 for some c, which with sum n fixed
means n != n*); when a relaxation was loose for that plan, the cell is bisected in b_w, V
or X first. Plans are finite and each is evaluated at most once per cell, so the method
terminates.

The reference model's rounding (b_w to 0.1, j to an integer, T to 0.01 s, cost to 1e-6 $)
is covered by widening every bound by the most the rounding can move it.

What each step must guarantee (the proof obligations, checked by the fuzz harness in
``dnnprov.fuzz`` against exhaustive search):

* a range of a cell is only narrowed to exclude plans that are outside it or that cannot
  beat U or meet T_obj; computed ends are widened outward (:mod:`.cells`);
* a cell is closed only by a lower bound >= U, an infeasible LP/MILP relaxation that
  contains all its plans, a MILP optimum showing f >= 0, or by evaluating all its plans;
* a HiGHS answer other than optimal / infeasible / time limit proves nothing: the cell is
  then enumerated (or the solve ends at ``limit`` with the bound it has);
* worker counts are generated lazily: a *tail* entry bounds every count not generated
  yet (:meth:`CellBounds.tail_bound`), so the bound reported at a limit is valid;
* the clock (:class:`dnnprov.progress.Clock`) covers set-up and the heuristic seed.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable
from functools import partial

import numpy as np
from dnnprov.solvers.highs_driver import MilpStatus, new_highs, solve_milp
from dnnprov.solvers.outcome import spot_result
from dnnprov.solvers.search.heuristics import spot_heuristic
from dnnprov.solvers.side_vars import attach
from dnnprov.solvers.spot.bounding.bounds import CellBounds
from dnnprov.solvers.spot.cells import (
    BoxStats,
    Cell,
    compositions,
    count_compositions,
    down,
    nogood_rows,
    nogoods_inside,
    up,
)
from dnnprov.solvers.spot.incumbents import IncumbentSearch, Judge
from dnnprov.solvers.spot.terms import REF_COST_ROUNDING, SpotTerms

from dnnprov.errors import InvalidInputError
from dnnprov.models.spot import SideRows, SpotModel
from dnnprov.problems.spot import SpotProblem
from dnnprov.progress import Clock, SolverLog
from dnnprov.result import Result, SpotPlan, Status

SPLIT_TOLERANCE = 2e-4  # bisect a cell when its j bound is this much below the plan's j
CLOSE_TOLERANCE = 1e-9  # relative tolerance of the MILP threshold test
CELL_ENUMERATION = 1024  # cells with at most this many count vectors are evaluated outright
FALLBACK_ENUMERATION = 1_000_000  # a cell whose MILP fails is enumerated up to this size
SEARCH_FIRST_AFTER = 3  # cells whose lineage returned this many plans ask the driver's own search first
NOGOOD_ESCALATION = 24  # ... and so is a cell whose MILPs keep returning plans (one no-good each)
V_SPLIT_RATIO = 2.0  # top cells are cut into V ranges of at most this ratio ... (docs/benchmarks.md)
V_SPLIT_MAX = 8  # ... in at most this many pieces
TAIL_CHUNK = 16  # worker counts generated per tail expansion
SEED_AT = 0.8  # the heuristic seed runs only if the search is still going at this share of the limit ...
SEED_SHARE = 0.1  # ... and may use this share of the time limit ...
SEED_CAP_S = 0.5  # ... and at most this: past it the cells find incumbents faster


class SpotDecomposition:
    """State of one exact solve: the search over the cells of its :class:`CellBounds`; :meth:`run` returns a :class:`Result`.

    Composed of parts that receive what they use: the problem's :class:`SpotTerms` (model,
    bound constants, cluster shapes), an :class:`IncumbentSearch` (the incumbent and every
    exact evaluation, with ``judge`` applied if given) and a :class:`CellBounds` (cells and
    their bounds, its cell rows using ``deadline(cell)`` as T_obj if given), which hands the
    plans its LPs round to the incumbent search.
    """

    def __init__(
        self,
        problem: SpotProblem,
        *,
        side: SideRows | None = None,
        time_limit_s: float = 60.0,
        gap: float = 0.0,
        clock: Clock | None = None,
        log: SolverLog | None = None,
        cell_enumeration: int = CELL_ENUMERATION,
        deadline: Callable[[Cell], float] | None = None,
        judge: Judge | None = None,
        split_tolerance: float = SPLIT_TOLERANCE,
    ) -> None:
        self.clock = clock or Clock(time_limit_s)
        self.split_tolerance = split_tolerance  # bisect a cell when a relaxation is this much loose at its plan
        self.terms = terms = SpotTerms(SpotModel(problem, side))
        self.problem, self.model, self.cols, self.side = problem, terms.model, terms.cols, side
        self.reference, self.uses_cc = terms.reference, terms.uses_cc
        self.a0, self.c0_per_ps, self.gamma_3 = terms.a0, terms.c0_per_ps, terms.gamma_3
        self.shape, self.box, self.a_min = terms.shape, terms.box, terms.a_min
        self.stats = {"cells": 0, "milps": 0, "evaluations": 0, "splits": 0, "enumerated_cells": 0}
        self.highs = new_highs()
        self.incumbents = IncumbentSearch(terms, self.stats, judge)
        self.bounds = CellBounds(
            terms, side, self.clock, self.highs, self.stats, self.incumbents.consider, deadline=deadline
        )
        self.log = log or SolverLog(self.clock)
        self.gap = gap
        self.cell_enumeration = cell_enumeration
        self.failures: list[str] = []  # HiGHS failures that ended the search
        self.box_sizes: dict[tuple, int] = {}
        #: boxes (lo, hi) whose every count vector was evaluated, per (K, s): a cell whose
        #: box lies inside one holds no plan left to look at
        self.enumerated_boxes: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray]]] = {}
        #: plans a cell MILP returned that had been evaluated already (a cut-off plan that
        #: HiGHS's tolerances let back through the range rows, or one found by other means):
        #: their no-goods are kept in every child (see nogoods_inside)
        self.returned_again: set[tuple[int, ...]] = set()

    # ------------------------------------------------------------------ generating cells
    def worker_range(self) -> tuple[int, int]:
        """The worker counts K any admissible plan can have (the validity domain's included)."""
        cols, cons = self.cols, self.problem.constraints
        if self.model.slo_refused():
            return 1, 0  # the domain admits no plan for this SLO loss: no K to search
        _, (dom_lo, dom_hi) = self.model.domain_bounds()
        k_lo = max(cons.workers[0], int(cols.lower.sum()), 1, dom_lo)
        k_hi = int(cols.upper.sum())
        for cap in (cons.workers[1], dom_hi):
            if cap is not None:
                k_hi = min(k_hi, cap)
        return k_lo, k_hi

    def groups(self, workers: range) -> list[Cell]:
        """One group per (K, PS count) for the given worker counts (split by top column when popped, with CC).

        PS counts past the first one that adds no bandwidth are skipped: once the PS
        link is not contended (or P = 0) the rates stop changing with s, and an extra
        PS that adds no bandwidth only adds cost (c0 >= 0), unless side rows use s.
        Every group's box is the whole box, so their greedy steps are done together.
        """
        cols, cons = self.cols, self.problem.constraints
        allowed = cols.upper > 0
        if (cols.lower[~allowed] > 0).any():
            return []
        lo, hi = np.where(allowed, cols.lower, 0), np.where(allowed, cols.upper, 0)
        ps_in_side_rows = self.side is not None and bool(np.any(self.side.a_s != 0))
        active = [k for k in workers if int(lo.sum()) <= k <= int(hi.sum())]
        pairs: list[tuple[int, int]] = []
        for s in range(cons.ps_count[0], cons.ps_count[1] + 1):
            self.terms.prefetch_shapes([(k, s) for k in active])
            if s > cons.ps_count[0] and not ps_in_side_rows:
                active = [k for k in active if not np.array_equal(self.shape(k, s).rate, self.shape(k, s - 1).rate)]
            pairs += [(k, s) for k in active]
            if not active or self.clock.expired():
                break
        if not pairs:
            return []
        stats = self.bounds.box_statistics(pairs, lo, hi)
        self.incumbents.try_frontier(pairs, lo, hi, np.array([known.rho_min for known in stats]))
        cells = [self.bounds.new_cell(k, s, None, known=known) for (k, s), known in zip(pairs, stats)]
        return [cell for cell in cells if cell is not None]

    def tail(self, k: int) -> Cell | None:
        """The stand-in for every worker count from ``k`` up, with :meth:`tail_bound`."""
        if k > self.worker_range()[1]:
            return None
        allowed = self.cols.upper > 0
        return Cell(
            self.bounds.tail_bound(k), next(self.bounds.seq), k, 0, None, 0.0, 0.0, 0.0, 0.0, allowed, tail=True
        )

    def expand_tail(self, tail: Cell) -> list[Cell]:
        """Generate the groups of the next few worker counts and the tail after them."""
        end = min(self.worker_range()[1], tail.workers + TAIL_CHUNK - 1) + 1
        cells = self.groups(range(tail.workers, end))
        rest = self.tail(end)
        return cells + ([rest] if rest is not None else [])

    def expand(self, group: Cell) -> list[Cell]:
        """Split a (K, s) group into one cell per possible top column (cut into V ranges when popped).

        R's bound (and with it j's) depends on V through v_top / V, which a wide V range
        blurs: a top cell is marked to be cut into ranges of V whose ends differ by at most
        a factor of V_SPLIT_RATIO, which :meth:`split_v` does when it is popped. Its own
        bound holds for every piece (they hold subsets of its plans), so a top cell whose
        bound reaches the threshold is never cut, and the pieces' bounds are not paid for.
        """
        cells = self.bounds.top_cells(group.workers, group.ps)
        for cell in cells:
            if cell.v_lo > 0 and V_SPLIT_RATIO > 1:
                pieces = math.ceil(math.log(cell.v_hi / cell.v_lo) / math.log(V_SPLIT_RATIO))
                cell.v_pieces = max(1, min(pieces, V_SPLIT_MAX))
        return cells

    def split_v(self, cell: Cell) -> list[Cell]:
        """Cut a top cell into its V ranges (geometric; they cover its range, so no plan is lost).

        Each piece holds a subset of the cell's plans, so the cell's bounds hold for it too.
        """
        ends = np.geomspace(cell.v_lo, cell.v_hi, cell.v_pieces + 1)
        children = []
        for v_lo, v_hi in itertools.pairwise(ends):
            child = self.bounds.new_cell(
                cell.workers,
                cell.ps,
                cell.top,
                b_range=(cell.b_lo, cell.b_hi),
                v_range=(down(float(v_lo)), up(float(v_hi))),
                x_range=(cell.x_lo, cell.x_hi),
                known=BoxStats.of(cell),
                pinned=cell.pinned,
            )
            if child is not None:
                child.pj_lb = max(child.pj_lb, cell.pj_lb)
                child.bound = max(child.bound, cell.bound)
                children.append(child)
        return children

    def split_support(self, cell: Cell) -> list[Cell] | None:
        """The cell cut into its support boxes under "at most k columns" side rows; ``None``: no cut.

        Each part pins the columns its support leaves out to 0 (:attr:`Cell.pinned`). Proof
        that no plan meeting the side rows is lost: the support boxes of the cell's box hold
        all of them (:meth:`SideColumns.support_boxes`), and a part keeps the cell's ranges,
        no-goods of plans inside its box (a no-good of a plan outside it is no cut there) and
        bounds (claims about every plan of the cell, so of a part). A part's box statistics
        are those of its own box. A part's own support boxes are its box alone, so parts are
        not cut again.
        """
        lo, hi = self.box(cell)
        boxes = self.bounds.sides.support_boxes(lo, hi, cell.ps)
        if len(boxes) == 1 and np.array_equal(boxes[0][1], hi):
            return None
        boxes = [(b_lo, b_hi) for b_lo, b_hi in boxes if int(b_lo.sum()) <= cell.workers <= int(b_hi.sum())]
        self.stats["support_splits"] = self.stats.get("support_splits", 0) + 1
        if not boxes:
            return []
        known = self.bounds.greedy_statistics(  # a part is its own support box
            [(cell.workers, cell.ps)] * len(boxes), np.array([b[0] for b in boxes]), np.array([b[1] for b in boxes])
        )
        children, outright = [], []
        for (b_lo, b_hi), stats in zip(boxes, known):
            out = np.flatnonzero((b_hi == 0) & (hi > 0))
            pinned = cell.pinned + tuple((int(c), 0, 0) for c in out)
            nogoods = [plan for plan in cell.nogoods if all(plan[c] == 0 for c in out)]
            child = self.bounds.new_cell(
                cell.workers,
                cell.ps,
                cell.top,
                b_range=(cell.b_lo, cell.b_hi),
                v_range=(cell.v_lo, cell.v_hi),
                x_range=(cell.x_lo, cell.x_hi),
                q_range=(cell.q_lo, cell.q_hi),
                nogoods=nogoods,
                known=stats,
                pinned=pinned,
            )
            if child is not None:
                child.pj_lb = max(child.pj_lb, cell.pj_lb)
                child.bound = max(child.bound, cell.bound)
                child.v_pieces, child.returned = cell.v_pieces, cell.returned
                if self.small(child):
                    outright.append(self.box_plans(child))
                    self.stats["enumerated_cells"] += 1
                else:
                    children.append(child)
        if outright:  # the small parts are evaluated outright, together (one model call)
            self.incumbents.best_of(np.concatenate(outright), cell.ps)
        return children

    def needs_expansion(self, cell: Cell) -> bool:
        """Whether the cell is a (K, s) group still to be split by top column."""
        return self.uses_cc and cell.top is None

    # ------------------------------------------------------------------ the cell MILP
    def cell_milp(self, cell: Cell, threshold: float, time_limit_s: float):
        """Minimize f(n) = (P + c0)(tau j_lb + a0 X_b) - 3600 (U - ac) X over the cell.

        Integer counts n_c of the allowed columns; with the CC term, a continuous W adds
        R's growth with V to j's bound (see :meth:`cc_secant`). Each evaluated plan n* is
        cut off by ``n_c >= n*_c + 1 for some c`` (with sum n fixed, that is n != n*),
        one binary per column and cut.
        """
        cols = self.cols
        shape = self.shape(cell.workers, cell.ps)
        lo, hi = self.box(cell)
        allowed = np.flatnonzero(cell.allowed)
        m = len(allowed)
        tau = self.terms.time_factor(cell)
        x_b = cell.x_lo if self.a0 >= 0 else cell.x_hi
        c0 = cell.ps * self.c0_per_ps
        price, rate, speed = cols.price[allowed], shape.rate[allowed], shape.speed[allowed]
        gain = 3600 * (threshold - self.terms.ac) * rate
        counts_idx = np.arange(m)
        rows = [(counts_idx, np.ones(m), float(cell.workers), float(cell.workers))]  # sum n = K
        rows += [(counts_idx, a[allowed], low, high) for a, low, high in self.bounds.cell_rows(cell)]
        lower, upper = lo[allowed].astype(float), hi[allowed].astype(float)
        secant = self.bounds.cc.cc_secant(cell)
        a_min = self.a_min(cell.b_lo, cell.b_hi)
        if secant is None or a_min <= 0:
            weight = tau * cell.j_lb + self.a0 * x_b
            cost, offset = weight * price - gain, weight * c0
        else:
            # (P + c0) tau j >= (P + c0) tau (k0 A_min - g1) + tau k1 A_min W with W <= (P + c0) V,
            # W bounded by McCormick's under-estimators of the product (P + c0) V.
            k0, k1 = secant
            base = tau * (k0 * a_min - self.terms.gamma_1) + self.a0 * x_b
            cost = np.append(base * price - gain, tau * k1 * a_min)
            offset = base * c0
            p_lo, p_hi = self.bounds.price_range(cell)
            both = np.arange(m + 1)
            rows.append(
                (both, np.append(-cell.v_lo * price - p_lo * speed, 1.0), cell.v_lo * c0 - p_lo * cell.v_lo, math.inf)
            )
            rows.append(
                (both, np.append(-cell.v_hi * price - p_hi * speed, 1.0), cell.v_hi * c0 - p_hi * cell.v_hi, math.inf)
            )
            # W <= (P + c0) V <= p_hi v_hi holds for every plan's point: a finite end the
            # driver's verified bound needs (W's reduced cost may have either sign)
            lower, upper = np.append(lower, -math.inf), np.append(upper, p_hi * cell.v_hi * (1 + 1e-9) + 1e-300)
        integer = np.arange(len(cost)) < m
        extra_side = self.bounds.sides.side_columns(cell, allowed, lo, hi, len(cost))
        if extra_side is not None:
            side_rows, side_lower, side_upper, side_integer = extra_side
            rows += side_rows
            cost = np.append(cost, np.zeros(len(side_lower)))
            lower, upper = np.append(lower, side_lower), np.append(upper, side_upper)
            integer = np.append(integer, side_integer)
        nvar = len(cost)
        for plan in cell.nogoods:  # n != n*: one row and a few binaries each
            cut, binaries = nogood_rows(plan, allowed, lo, hi, nvar)
            rows += cut
            nvar += binaries
        extra = nvar - len(cost)
        cost = np.append(cost, np.zeros(extra))
        lower, upper = np.append(lower, np.zeros(extra)), np.append(upper, np.ones(extra))
        integer = np.append(integer, np.ones(extra, dtype=bool))
        scale = 3600 * max(threshold, 1e-12) * max(cell.x_hi, 1e-12)
        solution = solve_milp(
            self.highs,
            cost,
            lower,
            upper,
            rows,
            integer=integer,
            offset=offset,
            time_limit_s=time_limit_s,
            proof_target=-CLOSE_TOLERANCE * scale,
            first_below_target=True,
            search_first=cell.returned >= SEARCH_FIRST_AFTER,
        )
        counts = None
        if solution.x is not None:
            counts = np.zeros(len(cols), dtype=np.int64)
            counts[allowed] = np.rint(solution.x[:m]).astype(np.int64)
        return solution, counts, scale

    # ------------------------------------------------------------------ main loop
    def enumerate_cell(self, cell: Cell, limit: int) -> bool:
        """Evaluate every count vector of the cell's box (a superset of its plans).

        Returns ``False`` (and does nothing) when the box holds more than ``limit``.
        """
        lo, hi = self.box(cell)
        done = self.enumerated_boxes.setdefault((cell.workers, cell.ps), [])
        if any((lo >= b_lo).all() and (hi <= b_hi).all() for b_lo, b_hi in done):
            return True  # every plan of this box was evaluated already
        if self.box_size(cell, limit) > limit:
            return False
        counts = self.box_plans(cell)
        done.append((lo, hi))
        self.stats["enumerated_cells"] += 1
        if len(counts):
            self.incumbents.best_of(counts, cell.ps)
        return True

    def box_plans(self, cell: Cell) -> np.ndarray:
        """Every count vector of the cell's box, one per row."""
        lo, hi = self.box(cell)
        free = np.flatnonzero(cell.allowed & (hi > lo))  # the other columns are fixed at lo
        sub = compositions(lo[free], hi[free], cell.workers - int(lo.sum() - lo[free].sum()))
        counts = np.repeat(lo[None, :].astype(np.int64), len(sub), axis=0)
        counts[:, free] = sub
        return counts

    def box_size(self, cell: Cell, limit: int) -> int:
        """Count vectors in the cell's box (past ``limit``: ``limit + 1``); cached per box."""
        lo, hi = self.box(cell)
        allowed = cell.allowed
        key = (cell.workers, lo[allowed].tobytes(), hi[allowed].tobytes(), limit)
        if key not in self.box_sizes:
            self.box_sizes[key] = count_compositions(lo[allowed], hi[allowed], cell.workers, limit)
        return self.box_sizes[key]

    def small(self, cell: Cell) -> bool:
        """Whether evaluating the cell outright is cheaper than its LP bound (and MILPs)."""
        return self.cell_enumeration > 0 and self.box_size(cell, self.cell_enumeration) <= self.cell_enumeration

    def bound_now(self, heap: list[Cell]) -> float:
        """The proven lower bound at this moment: the smallest open bound, or the incumbent."""
        return min(heap[0].bound if heap else math.inf, self.incumbents.best_cost)

    def run(self, seed: Callable[[], Result] | None = None) -> Result:
        """Process cells best-bound first until the bound meets the incumbent.

        ``seed`` (a heuristic) is called once if the search is still going at SEED_AT of
        the time limit, and its plan is taken as an incumbent: a search that stops at the
        limit has then tried the heuristic's plan too, and one that ends sooner (a proof)
        has not needed it, so its answer does not depend on the machine's speed.
        """
        seed_at = self.clock.started + SEED_AT * self.clock.limit_s
        ceiling = self.cost_ceiling()
        # the gap only discounts a real incumbent
        self.bounds.threshold = min(self.incumbents.best_cost / (1 + self.gap), ceiling)
        first = self.tail(self.worker_range()[0])
        heap = [first] if first is not None else []
        limited = False
        children: list[Cell] | None
        while heap:
            self.bounds.threshold = min(self.incumbents.best_cost / (1 + self.gap), ceiling)
            cell = heap[0]
            if cell.bound >= self.bounds.threshold:
                break
            self.log.progress(
                self.incumbents.best_cost, self.bound_now(heap), f"{len(heap)} open, {self.stats['milps']} MILPs"
            )
            if self.clock.expired():
                limited = True
                break
            if seed is not None and time.perf_counter() >= seed_at:
                self.incumbents.take(seed())
                seed = None
                self.log.progress(self.incumbents.best_cost, self.bound_now(heap), "heuristic seed", force=True)
                continue  # the threshold may have fallen
            heapq.heappop(heap)
            self.clock.spend()  # one node of work (Clock.work_limit)
            self.stats["nodes"] = self.stats.get("nodes", 0) + 1
            if cell.tail:
                children = self.expand_tail(cell)
            elif not cell.complete:
                completed = self.bounds.complete(cell)
                children = [completed] if completed is not None else []
            elif self.small(cell):
                children = self.process(cell)  # evaluated outright, group or cell
            elif self.needs_expansion(cell):
                children = self.expand(cell)
            elif cell.v_pieces > 1:
                children = self.split_v(cell)
            elif not cell.lp_done:
                strong = self.bounds.strengthen(cell)
                children = [strong] if strong is not None and strong.bound < self.bounds.threshold else []
            elif (parts := self.split_support(cell)) is not None:
                children = parts  # before its MILP: the parts' boxes see the row
            else:
                children = self.process(cell)
            if children is None:  # HiGHS gave no usable answer
                heapq.heappush(heap, cell)
                limited = True
                break
            for child in children:
                heapq.heappush(heap, child)
                self.stats["cells"] += 1
        return self.finish(heap, limited)

    def process(self, cell: Cell) -> list[Cell] | None:
        """Close the cell, or evaluate the plan its MILP finds and refine; ``None``: no answer."""
        # Evaluate the cell outright when it is small, and allow bigger cells the more plans
        # its MILPs have already returned (each one a no-good): where the relaxations are
        # loose, evaluating a few thousand plans (about 1 ms each thousand) beats more MILPs.
        limit = min(FALLBACK_ENUMERATION, self.cell_enumeration << min(cell.returned, 30))
        if cell.returned >= NOGOOD_ESCALATION:
            limit = FALLBACK_ENUMERATION
        if self.enumerate_cell(cell, limit):
            return []
        solution, counts, scale = self.cell_milp(cell, self.bounds.threshold, max(self.clock.remaining(), 1e-3))
        self.stats["milps"] += 1
        if solution.dual_bound >= -CLOSE_TOLERANCE * scale:
            return []  # verified (highs_driver): nothing cheaper than U here, or no plan at all
        if solution.status is MilpStatus.ERROR or (
            counts is not None and tuple(int(v) for v in counts) in cell.nogoods
        ):
            # No proof from HiGHS (a solve error, or a cut-off plan returned again):
            # decide the cell by evaluating all its plans, if there are not too many.
            if self.enumerate_cell(cell, FALLBACK_ENUMERATION):
                return []
            self.failures.append(f"HiGHS could not decide a cell of {cell.workers} workers, {cell.ps} PS")
            return None
        if counts is None:  # a time limit without a plan
            return None
        # A plan below the threshold, or one HiGHS calls optimal without a verified bound:
        # evaluated and cut off either way (the cell is enumerated once no-goods pile up).
        if (tuple(int(v) for v in counts), cell.ps) in self.incumbents.evaluated:
            self.returned_again.add(tuple(int(v) for v in counts))
        self.incumbents.consider(counts, cell.ps)
        return self.refine(cell, counts)

    def refine(self, cell: Cell, counts: np.ndarray) -> list[Cell]:
        """Cut the evaluated plan off; bisect the cell first if a relaxation is loose there.

        Looseness for the plan, per dimension: A(b_w) / A_min (b_w range), the CC factor
        over its best bound with Q's chord replaced by the curve it approximates (V range),
        that bound over the one with the chord (Q range), and the X^2 secant over X^2 in the
        deadline row (X range). A child's ranges cover the part of the parent's range on its
        side of the cut (both include the cut), so no plan is lost.
        """
        plan = tuple(int(v) for v in counts)
        nogoods = cell.nogoods + [plan]
        shape = self.shape(cell.workers, cell.ps)
        x = float(counts @ shape.rate)
        v = float(counts @ shape.speed)
        w = self.problem.workload
        candidates = []
        a_cell = self.a_min(cell.b_lo, cell.b_hi)
        a_plan = w.gamma_2 * v / x + self.gamma_3
        if a_cell > 0 and a_plan / a_cell > 1 + self.split_tolerance:
            candidates.append((a_plan / a_cell, "b"))
        elif a_cell <= 0 < a_plan:
            # eq. (3)'s numerator reaches 0 inside the b_w range, so j's bound is 0 there and no
            # other split helps: only b_w ranges below its root get a bound above 0
            candidates.append((math.inf, "b"))
        if self.uses_cc and cell.workers > 1:
            v_top = float(shape.speed[cell.top])
            q = float(counts @ shape.speed**2)
            cc = math.sqrt(max(1 - 2 * v_top / v + q / v**2, 0.0))
            bound = math.sqrt((self.bounds.cc.cc_lower(cell) + w.gamma_4) * cell.workers) / self.model.loss_gap
            secant = self.bounds.cc.cc_secant(cell)
            if secant is not None:
                bound = max(bound, secant[0] + secant[1] * v)
            # the Q chord's share of the looseness (a narrower Q range tightens it), and the rest
            curve, square = self.bounds.cc.cc_square_curve(cell), self.bounds.cc.cc_square_secant(cell)
            ideal, q_mid = bound, None
            if curve is not None and square is not None:
                ideal = max(bound, curve[0](q))
                bound = max(bound, square[0] + square[1] * q)
                q_mid = (curve[1] + curve[2]) / 2
            exact = math.sqrt((cc + w.gamma_4) * cell.workers) / self.model.loss_gap
            for dim, looseness in (
                ("v", exact / ideal if ideal > 0 else math.inf),
                ("q", ideal / bound if bound > 0 else 1.0),
            ):
                if looseness > 1 + self.split_tolerance:
                    candidates.append((looseness, dim))
        x_secant = (cell.x_lo + cell.x_hi) * x - cell.x_lo * cell.x_hi
        if x_secant / x**2 > 1 + self.split_tolerance:
            candidates.append((x_secant / x**2, "x"))
        if not candidates:
            cell.nogoods = nogoods
            cell.returned += 1
            return [cell]
        _, dim = max(candidates)
        self.stats["splits"] += 1
        ranges = {
            "b": (cell.b_lo, cell.b_hi),
            "v": (cell.v_lo, cell.v_hi),
            "x": (cell.x_lo, cell.x_hi),
            "q": (cell.q_lo, cell.q_hi),
        }
        lo, hi = ranges[dim]
        mid = (lo + hi) / 2
        halves = ((lo, mid), (mid, hi))
        if dim == "q":  # the middle of the chord's range; Q's rows are exact, so widened
            assert q_mid is not None  # "q" is a candidate only where the Q curve exists (looseness 1 otherwise)
            halves = ((lo, up(q_mid)), (down(q_mid), hi))
        children = []
        for part in halves:
            parts = {**ranges, dim: part}
            child = self.bounds.new_cell(
                cell.workers,
                cell.ps,
                cell.top,
                b_range=parts["b"],
                v_range=parts["v"],
                x_range=parts["x"],
                q_range=parts["q"],
                nogoods=nogoods,
                known=BoxStats.of(cell),
                pinned=cell.pinned,
            )
            if child is not None:
                # a child holds a subset of the parent's plans: the parent's bounds hold too
                # (its rho bound came with the box statistics)
                child.pj_lb = max(child.pj_lb, cell.pj_lb)
                child.bound = max(child.bound, cell.bound)
                child.nogoods = nogoods_inside(child, self.shape(cell.workers, cell.ps), self.returned_again)
                child.returned = cell.returned + 1
                children.append(child)
        return children

    def cost_ceiling(self) -> float:
        """A cost every feasible plan stays below: the budget, or all quotas for T_obj."""
        budget = self.problem.constraints.budget_usd
        most = (
            (float(self.cols.upper @ self.cols.price) + self.problem.constraints.ps_count[1] * self.c0_per_ps)
            * self.problem.slo.time_s
            / 3600
        )
        ceiling = most + REF_COST_ROUNDING if self.reference else most
        if budget is not None:
            ceiling = min(ceiling, budget)
        return ceiling * (1 + 1e-9) + 1e-12

    def finish(self, heap: list[Cell], limited: bool) -> Result:
        """Package the outcome with its proven bound and say why a bound is weak."""
        best, best_cost = self.incumbents.best, self.incumbents.best_cost
        open_bound = min((c.bound for c in heap), default=math.inf)
        result = partial(
            spot_result, self.incumbents.model, method="milp", started=self.clock.started, stats=dict(self.stats)
        )
        if limited:
            # closed cells hold nothing below the threshold they were closed at (the
            # threshold only falls), open ones nothing below their bounds
            bound = max(min(open_bound, self.bounds.threshold), 0.0)
            # a bound proven earlier in the search stays proven (the log's bound never goes down)
            bound = max(bound, min(self.log.bound, best_cost))
            why = self.failures[0] if self.failures else self.clock.stop_reason()
            reason = self.weak_bound_reason(heap, bound)
            if best is None:
                message = f"{why} before any feasible plan; {reason}"
                return result(None, 1, status=Status.LIMIT, bound=bound, message=message)
            return result(best[0], best[1], status=Status.LIMIT, bound=bound, message=f"{why}; {reason}")
        if best is None:
            message = "proven: no plan meets every constraint"
            return result(None, 1, status=Status.INFEASIBLE, bound=math.inf, message=message)
        if self.gap > 0:
            bound = max(min(best_cost / (1 + self.gap), open_bound, best_cost), min(self.log.bound, best_cost))
            message = f"stopped within relative gap {self.gap:g}"
            return result(best[0], best[1], status=Status.FEASIBLE, bound=bound, message=message)
        return result(best[0], best[1], status=Status.OPTIMAL, bound=best_cost)

    def weak_bound_reason(self, heap: list[Cell], bound: float) -> str:
        """Why the proven bound is where it is (said whenever a solve stops early)."""
        if not heap:
            return "no open cells"
        weakest = min(heap)
        if weakest.tail:
            return (
                f"worker counts from {weakest.workers} up were not reached; their bound "
                f"${weakest.bound:.6g} comes from the loss model alone"
            )
        if bound <= 0 or weakest.j_lb <= (1.0 if self.reference else 0.0):
            return (
                f"bound ${bound:.6g}: the loss model lets clusters of {weakest.workers} workers "
                "reach the target loss in almost no iterations at their largest batches "
                "(eq. 3's numerator nears 0), so only the price of such plans bounds the cost"
            )
        return (
            f"the weakest open cell ({weakest.workers} workers, {weakest.ps} PS) has bound "
            f"${weakest.bound:.6g}; {len(heap)} cells are open"
        )


def solve_spot_exact(
    problem: SpotProblem,
    *,
    side: SideRows | None = None,
    time_limit_s: float = 60.0,
    gap: float = 0.0,
    clock: Clock | None = None,
    log: SolverLog | None = None,
    cell_enumeration: int = CELL_ENUMERATION,
    start: SpotPlan | None = None,
) -> Result:
    """Proven-optimal spot plan (or the proven bound at the time limit).

    When the search is still going at 80 % of the time limit, the paper heuristic's plan is
    taken as an incumbent (re-checked against every constraint, side rows included); it
    runs under the same clock. Searches that end sooner have proven their answer without it
    (measured: docs/benchmarks.md).
    ``cell_enumeration`` is the largest cell evaluated outright instead of by
    MILPs (0 forces MILPs everywhere: the tests use it to exercise them). ``start`` is a
    warm start: a plan evaluated (every constraint checked) and taken as the first
    incumbent when it is feasible; it changes how fast the search closes, not its answer's
    proof.
    """
    clock = clock or Clock(time_limit_s)
    log = log or SolverLog(clock)
    decomposition = SpotDecomposition(
        problem, side=attach(side), gap=gap, clock=clock, log=log, cell_enumeration=cell_enumeration
    )
    cols = decomposition.cols
    log.header(
        f"dnnprov milp: {problem.name} (spot, model {problem.model}, loss {problem.workload.loss_variant})",
        [
            (
                f"{len(cols)} columns, quotas sum {int(cols.upper.sum())}, PS {problem.constraints.ps_count[0]}"
                f"..{problem.constraints.ps_count[1]}, {clock.limits()}, gap {gap:g}"
            )
        ],
    )

    def seed() -> Result:
        # The sliding window is quadratic in the number of instances (2.9 s on large-003): it
        # gets a tenth of the limit and at most half a second, the rest stays with the search.
        budget = min(clock.limit_s * SEED_SHARE, SEED_CAP_S, clock.remaining())
        return spot_heuristic(problem, clock=Clock(budget))

    if start is not None:
        unknown = sorted(set(start.counts) - set(cols.labels))
        if unknown:
            raise InvalidInputError("start", f"names columns the problem does not have: {', '.join(unknown)}")
        decomposition.incumbents.consider(
            np.array([int(start.counts.get(c, 0)) for c in cols.labels], dtype=np.int64), int(start.ps)
        )
        log.progress(decomposition.incumbents.best_cost, 0.0, "warm start", force=True)
    result = decomposition.run(seed)
    result = Result(**{**result.__dict__, "solve_seconds": clock.elapsed()})
    log.final(result.status.value, result.message)
    return result
