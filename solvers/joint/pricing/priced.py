"""Joint provisioning of spot jobs whose quota boxes are too large to enumerate: priced columns.

The enumerated path (:mod:`dnnprov.solvers.joint.columns`) evaluates every plan of a box; a
job of the large or 80 x 16 sets has 10^20 and more. Such a job is *priced* instead: its
columns are plans the exact single-job solver finds in usage-capped regions of its box
(:class:`~dnnprov.solvers.joint.pricing.regions.SpotPricer`), and other jobs keep enumerated columns.
The method, with what each step proves:

1. Roots. Each priced job is solved alone (its own optimum, ``alone``) and within the shared
   limits (the region R(u0)); a proven-empty region makes the job (or the shared limits)
   infeasible exactly as an empty enumerated front does.
2. Column generation with a Lagrangian bound. The restricted master LP over the columns so
   far (:meth:`ColumnModel.solve_lp`, artificial slacks keep its duals when it is still
   infeasible) gives shared-row duals pi <= 0 (clipped). Each priced job is priced under
   w = -pi (:meth:`SpotPricer.price`: a proven lower bound LB_j on min_n c_j(n) - pi . v_j(n)
   and the plans met, added as columns); an enumerated job's LB_j is the least of its columns'
   c - pi . v, less their rounding error (as :meth:`ColumnModel.lagrangian`). For ANY pi <= 0
   and any joint plan x (one plan n_j per job, within the limits b):

       cost(x) >= sum_j (c_j(n_j) - pi . v_j(n_j)) + pi . b >= L + (g_j(n_j) - LB_j)  for each j,
       L = sum_j LB_j + pi . b,   g_j = c_j - pi . v_j,

   so L (summed and rounded down, :func:`~dnnprov.solvers.joint.pricing.regions.down`) is a proven
   lower bound at every round, not only when pricing finds no negative reduced cost; the
   best round's L and pi are kept. A job whose bound from its last pricing, shifted to the
   new duals (a proven bound at any weights, :meth:`PricedJob.shifted`), already reaches its
   convexity dual mu_j is not priced again: no plan of it has a negative reduced cost. Rounds stop when pricing adds no plan (the LP over all
   plans is then solved, up to the pricing's proof) or after ``MAX_ROUNDS``.
3. Incumbent. :func:`~dnnprov.solvers.joint.provision.solve_columns` on the generated
   columns: a joint plan (every column is a real plan of its job) and a *verified* bound
   over those columns only.
4. Closing the gap. If L does not meet the incumbent U within the tolerance, every priced job
   gets every plan with g_j <= LB_j + (U - L) (:meth:`SpotPricer.front`: found, or dominated by
   a found plan in cost and every shared row). By step 2, a joint plan using any other plan
   costs more than L + (U - L) = U; a joint plan using only dominated plans is matched by one
   over the columns. So OPT >= min(B, U) for B the verified bound of ``solve_columns`` over
   all columns, and the answer is ``optimal`` when B meets its incumbent. If a front is not
   complete (a single-job solve reached the time limit) the answer is ``limit`` with bound L.

Infeasibility with every job feasible on its own: when the columns hold no joint plan, the
proof is per row: sum over jobs of the least use of row r that any plan within the limits
can have (exact, :meth:`SpotPricer.least_use` for priced jobs) exceeds its limit. Without
such a proof the answer is ``limit``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from dnnprov.formulations.joint import JobColumns
from dnnprov.solvers.highs_driver import TINY, UNIT_ROUNDOFF
from dnnprov.solvers.joint.columns import GeneratedColumns, Problem, SharedLimits, cache_key, spot_usage_rows
from dnnprov.solvers.joint.master import ColumnSolution, closes, solve_columns
from dnnprov.solvers.joint.model import ColumnModel
from dnnprov.solvers.joint.pricing.regions import CapSolve, SpotPricer, down

from dnnprov.problems.spot import SpotProblem
from dnnprov.progress import SolverLog, stop_requested
from dnnprov.result import Status

MAX_ROUNDS = 40  # column generation rounds at most (the Lagrangian bound is valid at each)
RESERVE_SHARE = 0.1  # of the time left when pricing starts, kept for the MILP over the columns
SKIP_TOLERANCE = 1e-9  # a job is not priced again when its shifted bound is within this of mu_j


@dataclass
class PricedJob:
    """A priced job's pricer and its columns so far (plans keyed by (counts, PS))."""

    pricer: SpotPricer
    alone: float  # the job's own optimum (a proven lower bound on it if its solve stopped)
    keys: dict[tuple[tuple[int, ...], int], int] = field(default_factory=dict)
    counts: list[np.ndarray] = field(default_factory=list)
    ps: list[int] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)
    usage: list[np.ndarray] = field(default_factory=list)
    anchor: tuple[float, np.ndarray] | None = None  # (LB_j, w) of the last pricing that ran
    skipped: int = 0  # rounds not priced (its shifted bound reached mu_j)

    def shifted(self, w: np.ndarray) -> float:
        """A proven lower bound on min_n c(n) + w . v(n) from the last pricing (-inf: none yet).

        The last pricing proved LB0 <= c(n) + w0 . v(n) for every plan n within the shared
        limits, and every such plan has low <= v(n) <= u0 (the kept instances' usage, the cap).
        With d = w - w0, c(n) + w . v(n) = c(n) + w0 . v(n) + d . v(n) and each term d_r v_r(n)
        is at least min(d_r low_r, d_r u0_r) (linear in v_r on [low_r, u0_r]), so
        LB0 + sum_r min(d_r low_r, d_r u0_r) is a lower bound at w. It is rounded down past
        the float error of its handful of terms (:func:`down`).
        """
        if self.anchor is None:
            return -math.inf
        lb0, w0 = self.anchor
        if not math.isfinite(lb0):
            return lb0  # inf: no plan within the limits, at any weights
        d = w - w0
        low = self.pricer.low.astype(float)
        cap = np.array(self.pricer.u0, dtype=float)
        terms = np.minimum(d * low, d * cap)
        magnitude = abs(lb0) + float(np.abs(d) @ np.maximum(np.abs(low), np.abs(cap)))
        return down(lb0 + math.fsum(terms), magnitude, len(w) + 2)

    def add(self, plans: Sequence[CapSolve]) -> int:
        """Add the plans not there yet; returns how many were new."""
        new = 0
        for s in plans:
            if s.counts is None or s.usage is None:
                continue
            key = (tuple(int(v) for v in s.counts), s.ps)
            if key in self.keys:
                continue
            self.keys[key] = len(self.cost)
            self.counts.append(s.counts)
            self.ps.append(s.ps)
            self.cost.append(s.cost)
            self.usage.append(s.usage)
            new += 1
        return new

    def generated(self, name: str) -> GeneratedColumns:
        """The columns as the provision module keeps them (``plans``: counts and PS arrays)."""
        rows = self.pricer.rows
        usage = np.array(self.usage, dtype=float).reshape(len(self.cost), len(rows))
        columns = JobColumns(
            name,
            np.array(self.cost, dtype=float),
            {r: usage[:, i] for i, r in enumerate(rows)},
            plans=(
                np.array(self.counts, dtype=np.int64).reshape(len(self.cost), len(self.pricer.cols)),
                np.array(self.ps, dtype=np.int64),
            ),
        )
        generated = GeneratedColumns(columns, self.alone, len(self.cost), 0, self.pricer.solve_seconds)
        return generated


def start_priced(pricer: SpotPricer, deadline: float) -> PricedJob | None:
    """Step 1 for one job: its own optimum and its cheapest plan within the limits as columns.

    ``None`` when the time ran out before the job's own optimum was bounded.
    """
    top = tuple(int(v) for v in pricer.top)
    alone = pricer.solve(top, deadline)
    if alone.status is Status.INFEASIBLE:
        return PricedJob(pricer, math.inf)
    if alone.counts is None and not math.isfinite(alone.bound):
        return None
    job = PricedJob(pricer, alone.cost if alone.optimal else alone.bound)
    if alone.usage is not None and (alone.usage <= np.array(pricer.u0)).all():
        job.add([alone])
    if (np.array(pricer.u0) >= pricer.low).all():
        job.add([pricer.solve(pricer.u0, deadline)])
    return job


def start_jobs(
    problems: Sequence[Problem],
    shared: SharedLimits,
    skip: frozenset[int],
    generated: list[GeneratedColumns],
    deadline: float,
    cache: bool,
    log: SolverLog | None = None,
) -> dict[int, PricedJob]:
    """Step 1 for the jobs in ``skip`` (their ``generated`` entries set); fewer when the time ran out.

    Jobs equal up to name and notes share one pricer (and its cache of solves) when ``cache`` is on.
    """
    limits = shared.rows()
    pricers: dict[str, SpotPricer] = {}
    out: dict[int, PricedJob] = {}
    for i in sorted(skip):
        problem = cast(SpotProblem, problems[i])
        key = cache_key(problem) if cache else str(i)
        if key not in pricers:
            rows, a = spot_usage_rows(problem, shared, f"problems[{i}] ({problem.name})")
            pricers[key] = SpotPricer(problem, rows, a, np.array([limits[r] for r in rows], dtype=float))
        job = start_priced(pricers[key], deadline)
        if job is None:
            break
        out[i] = job
        if log is not None:  # at most a line a second: a large job's roots take seconds each
            log.progress(math.inf, -math.inf, f"  roots: job {i} ({problem.name}) alone and within the limits")
        generated[i] = job.generated(problem.name)
    return out


def _job_caps(generated: Sequence[GeneratedColumns], priced: Mapping[int, PricedJob]) -> list[dict[str, float]]:
    """Each job's most use of every shared row it touches: a priced job's cap u0, an enumerated
    job's largest column use."""
    caps = []
    for j, g in enumerate(generated):
        job = priced.get(j)
        if job is None:
            caps.append({row: float(use.max()) for row, use in g.columns.usage.items() if len(use)})
        else:
            caps.append({row: float(u) for row, u in zip(job.pricer.rows, job.pricer.u0)})
    return caps


def _cheapest_within(
    g: GeneratedColumns, job: PricedJob | None, room: Mapping[str, float], deadline: float
) -> dict[str, float] | None:
    """The use of the job's cheapest plan within ``room`` of each shared row (a priced job's plan
    added as a column), or ``None`` when it has none there (or none found in time)."""
    if job is None:
        columns = g.columns
        fits = np.ones(len(columns), dtype=bool)
        for row, use in columns.usage.items():
            if row in room:
                fits &= use <= room[row] + 1e-9
        if not fits.any():
            return None
        k = int(np.argmin(np.where(fits, columns.cost, np.inf)))
        return {row: float(use[k]) for row, use in columns.usage.items()}
    pricer = job.pricer
    cap = tuple(min(u, math.floor(room.get(row, u) + 1e-9)) for row, u in zip(pricer.rows, pricer.u0))
    if (np.array(cap) < pricer.low).any():
        return None
    found = pricer.solve(cap, deadline)
    if found.counts is None or found.usage is None:
        return None
    job.add([found])
    return {row: float(use) for row, use in zip(pricer.rows, found.usage)}


def seed_joint_plan(
    generated: Sequence[GeneratedColumns], priced: Mapping[int, PricedJob], limits: Mapping[str, float], deadline: float
) -> bool:
    """Look for a joint plan among cheap single-job solves; their plans become columns. Whether one was found.

    First every job within its share of each shared row (the limit split in proportion to
    the jobs' caps, when their caps together exceed it), then the jobs with no plan in their
    share in turn, each within what the others left. A heuristic: its plans are real plans
    of their jobs (columns prove nothing). Without a joint plan among the roots, the first
    restricted LPs keep artificial slacks whose duals (BIG_M times the largest cost) make
    every job's first pricing explore its box down to each row's least use.
    """
    caps = _job_caps(generated, priced)
    total: dict[str, float] = {}
    for cap in caps:
        for row, u in cap.items():
            total[row] = total.get(row, 0.0) + u
    used: dict[int, dict[str, float]] = {}
    for j, g in enumerate(generated):
        share = {
            row: (u if total[row] <= limits[row] else math.floor(limits[row] * u / total[row]))
            for row, u in caps[j].items()
            if row in limits
        }
        found = _cheapest_within(g, priced.get(j), share, deadline)
        if found is not None:
            used[j] = found
    for j, g in enumerate(generated):
        if j in used:
            continue
        left = {row: limit - sum(u.get(row, 0.0) for u in used.values()) for row, limit in limits.items()}
        found = _cheapest_within(g, priced.get(j), left, deadline)
        if found is None:
            return False
        used[j] = found
    return True


def lagrangian(
    model: ColumnModel,
    row_dual: np.ndarray,
    priced: Mapping[int, PricedJob],
    deadline: float,
    log: SolverLog | None = None,
) -> tuple[float, np.ndarray, list[float], int]:
    """Step 2 for one set of duals: (L, pi, LB_j per job, plans added by pricing).

    A priced job is not priced again when its bound shifted from its last pricing
    (:meth:`PricedJob.shifted`, proven at any weights) already reaches its convexity dual
    mu_j: then no plan has a negative reduced cost g_j - mu_j, pricing would add nothing that
    the LP needs, and the shifted bound serves as LB_j (valid, so L stays a proven bound; and
    since some column of the job has g_j = mu_j, min g_j <= mu_j <= the shifted bound, which
    loses at most the skip tolerance against exact pricing).
    """
    j_count = model.jobs
    mu = np.asarray(row_dual[:j_count], dtype=float)
    pi = np.minimum(np.asarray(row_dual[j_count:], dtype=float), 0.0)
    pi[~np.isfinite(pi)] = 0.0
    shared = model.matrix[j_count:, :].tocsc()
    reduced = model.cost - shared.T @ pi
    magnitude = np.abs(model.cost) + abs(shared).T @ np.abs(pi)
    error = 2.0 * (np.diff(shared.indptr) + 3) * UNIT_ROUNDOFF * magnitude + TINY
    low = np.nextafter(reduced - error, -np.inf)
    column_lb = np.minimum.reduceat(low, model.starts[:-1])
    row_of = {r: i for i, r in enumerate(model.row_names)}
    bounds: list[float] = []
    added = 0
    for j in range(j_count):
        job = priced.get(j)
        if job is None:
            bounds.append(float(column_lb[j]))
            continue
        w = np.array([-pi[row_of[r]] if r in row_of else 0.0 for r in job.pricer.rows])
        shifted = job.shifted(w)
        if math.isfinite(mu[j]) and shifted >= mu[j] - SKIP_TOLERANCE * max(1.0, abs(mu[j])):
            bounds.append(shifted)
            job.skipped += 1
            continue
        explored = job.pricer.price(w, deadline, float(mu[j]) if math.isfinite(mu[j]) else math.inf)
        added += job.add(explored.plans)
        if log is not None:  # at most a line a second: a round can take minutes
            log.progress(math.inf, -math.inf, f"  priced job {j} ({job.pricer.problem.name}): {added} new plans so far")
        bounds.append(explored.lower_bound)
        if explored.lower_bound > -math.inf:
            job.anchor = (explored.lower_bound, w)
    pb = pi * model.limits
    total = math.fsum(bounds) + math.fsum(pb)
    size = math.fsum(abs(b) for b in bounds) + math.fsum(np.abs(pb))
    bound = down(total, size, j_count + len(pi)) if math.isfinite(total) else total
    return bound, pi, bounds, added


@dataclass
class PricedOutcome:
    """What :func:`generate_priced` leaves for the final MILPs: columns, the best bound, its duals."""

    bound: float  # the best Lagrangian bound L (proven)
    pi: np.ndarray | None  # its shared-row duals (in ``row_names`` order)
    row_names: list[str]
    job_bounds: list[float]  # LB_j at those duals
    stats: dict[str, Any]


def generate_priced(
    generated: list[GeneratedColumns],
    priced: Mapping[int, PricedJob],
    names: Sequence[str],
    limits: Mapping[str, float],
    deadline: float,
    incumbent: float = math.inf,
    log: SolverLog | None = None,
) -> PricedOutcome:
    """Step 2: column generation rounds (``generated`` updated in place for priced jobs); a
    progress line per round on ``log``."""
    seeded = seed_joint_plan(generated, priced, limits, deadline)
    stats: dict[str, Any] = {"cg_rounds": 0, "seeded": seeded}
    if log is not None:
        log.progress(
            incumbent, -math.inf, "seed: " + ("a joint plan among the columns" if seeded else "none"), force=True
        )
    best = PricedOutcome(-math.inf, None, [], [], stats)
    for _ in range(MAX_ROUNDS):
        if time.perf_counter() >= deadline or stop_requested():
            break
        for j, job in priced.items():
            generated[j] = job.generated(names[j])
        model = ColumnModel.build([g.columns for g in generated], limits)
        lp = model.solve_lp({}, time_limit_s=deadline - time.perf_counter(), keep_duals=True)
        if lp.row_dual is None:
            break
        stats["cg_rounds"] += 1
        bound, pi, bounds, added = lagrangian(model, lp.row_dual, priced, deadline, log)
        if bound > best.bound:
            best = PricedOutcome(bound, pi, list(model.row_names), bounds, stats)
        if log is not None:
            solves = _pricing_stats(priced)["pricing_solves"]
            columns = sum(len(g.columns) for g in generated) + added
            text = f"pricing round {stats['cg_rounds']}: {added} new plans, {columns} columns, {solves} region solves"
            log.progress(incumbent, bound, text, force=True)
        if not added or closes(bound, incumbent):
            break
    for j, job in priced.items():
        generated[j] = job.generated(names[j])
    stats["lagrangian_bound"] = best.bound if math.isfinite(best.bound) else None
    return best


def close_fronts(
    generated: list[GeneratedColumns],
    priced: Mapping[int, PricedJob],
    names: Sequence[str],
    outcome: PricedOutcome | None,
    gap: float,
    deadline: float,
) -> bool:
    """Step 4: every priced job's plans within ``gap`` of its LB_j added; whether all fronts are complete.

    ``outcome`` ``None`` (with ``gap`` inf): the whole fronts, weights 0.
    """
    if outcome is not None and outcome.pi is None:
        return False
    row_of = {} if outcome is None else {r: i for i, r in enumerate(outcome.row_names)}
    complete = True
    for j, job in priced.items():
        if outcome is None or outcome.pi is None:
            w, threshold = np.zeros(len(job.pricer.rows)), math.inf
        else:
            w = np.array([-outcome.pi[row_of[r]] if r in row_of else 0.0 for r in job.pricer.rows])
            threshold = outcome.job_bounds[j] + gap
        threshold = float(np.nextafter(threshold + 4 * UNIT_ROUNDOFF * abs(threshold) + TINY, np.inf))
        explored = job.pricer.front(w, threshold, deadline)
        job.add(explored.plans)
        complete &= explored.complete
        generated[j] = job.generated(names[j])
    return complete


def least_use_infeasible(
    generated: Sequence[GeneratedColumns], priced: Mapping[int, PricedJob], limits: Mapping[str, float], deadline: float
) -> str | None:
    """A shared row that the jobs' least uses alone exceed (proven), or ``None``."""
    for row, limit in limits.items():
        total = 0
        for j, g in enumerate(generated):
            if j in priced:
                job = priced[j]
                if row not in job.pricer.rows:
                    continue
                least = job.pricer.least_use(job.pricer.rows.index(row), deadline)
                if least is None:
                    return None  # not proven in time
                total += least
            elif row in g.columns.usage and len(g.columns):
                total += round(float(g.columns.usage[row].min()))
        if total > limit:
            return row
    return None


def own_optima_bound(generated: Sequence[GeneratedColumns]) -> float:
    """The sum of the jobs' own optima (each proven, or its proven bound): a lower bound on every
    joint plan, whose plans each cost at least their job's own optimum (the shared limits only
    remove plans); rounded down past its float error. -inf when a job has none."""
    alone = [g.alone for g in generated]
    if not alone or not all(math.isfinite(a) for a in alone):
        return -math.inf
    return down(math.fsum(alone), math.fsum(abs(a) for a in alone), len(alone))


def solve_priced(
    generated: list[GeneratedColumns],
    priced: Mapping[int, PricedJob],
    names: Sequence[str],
    limits: Mapping[str, float],
    deadline: float,
    fixing: bool = True,
    log: SolverLog | None = None,
) -> ColumnSolution:
    """Steps 2-4 of the module docstring; ``generated`` ends holding every job's final columns
    (progress lines on ``log``).

    Column generation stops :data:`RESERVE_SHARE` of the remaining time before ``deadline``,
    which is left to the MILP over the columns: a run that reaches its limit while pricing
    still answers with the best joint plan its columns hold."""
    reserve = RESERVE_SHARE * max(deadline - time.perf_counter(), 0.0) if math.isfinite(deadline) else 0.0
    outcome = generate_priced(generated, priced, names, limits, deadline - reserve, log=log)
    lower = outcome.bound
    solved = solve_columns([g.columns for g in generated], limits, deadline=deadline, fixing=fixing)
    if log is not None:
        log.progress(solved.cost if solved.cost is not None else math.inf, lower, "MILP over the columns", force=True)
    stats = {**solved.stats, **outcome.stats}
    if solved.picked is None or solved.cost is None:
        row = least_use_infeasible(generated, priced, limits, deadline)
        if row is not None:
            stats.update(_pricing_stats(priced))
            return ColumnSolution(
                Status.INFEASIBLE,
                None,
                None,
                math.inf,
                f"proven infeasible: the least use of {row} that each job can have sums beyond its limit",
                stats=stats,
            )
        # Every priced job's whole front (T = inf): every plan is then dominated by a column,
        # so the verified MILP over the columns answers for all plans, infeasible included.
        complete = close_fronts(generated, priced, names, None, math.inf, deadline)
        stats["fronts_complete"] = complete
        solved = solve_columns([g.columns for g in generated], limits, deadline=deadline, fixing=fixing)
        stats.update(solved.stats)
        stats.update(_pricing_stats(priced))
        if complete:
            return dataclasses.replace(solved, stats=stats)
        if solved.picked is None or solved.cost is None:
            return ColumnSolution(
                Status.LIMIT,
                None,
                None,
                lower if math.isfinite(lower) else None,
                "no joint plan among the priced columns (and no proof that none exists)",
                stats=stats,
            )
    if not closes(lower, solved.cost):
        gap = float(np.nextafter((solved.cost - lower) * (1 + 4 * UNIT_ROUNDOFF) + TINY, np.inf))
        if log is not None:
            log.progress(solved.cost, lower, f"closing: every plan within {gap:.6g} of its pricing bound", force=True)
        complete = close_fronts(generated, priced, names, outcome, gap, deadline)
        stats["fronts_complete"] = complete
        again = solve_columns([g.columns for g in generated], limits, deadline=deadline, fixing=fixing)
        if again.picked is not None and again.cost is not None:
            stats.update(again.stats)
            solved = again
            if complete and again.bound is not None:
                # OPT >= min(B, L + gap) and L + gap >= U >= the incumbent (module docstring, step 4)
                lower = max(lower, min(again.bound, down(lower + gap, abs(lower) + gap, 2)))
    stats.update(_pricing_stats(priced))
    assert solved.cost is not None
    # after the closing step, whose front threshold needs the Lagrangian bound itself
    # the jobs' own optima bound the total; so does 0: a plan meeting its deadline trains j > 0
    # iterations (SpotModel refuses j <= 0) at prices and overheads >= 0, so it costs >= 0
    lower = max(lower, own_optima_bound(generated), 0.0)
    if closes(lower, solved.cost):
        return ColumnSolution(Status.OPTIMAL, solved.picked, solved.cost, solved.cost, "", solved.usage, stats)
    return ColumnSolution(
        Status.LIMIT,
        solved.picked,
        solved.cost,
        min(lower, solved.cost),
        "limit: incumbent and proven bound (the pricing proof did not close in time)",
        solved.usage,
        stats,
    )


def _pricing_stats(priced: Mapping[int, PricedJob]) -> dict[str, Any]:
    """Single-job solves of the pricing and their time (pricers shared by equal jobs counted once)."""
    pricers = {id(job.pricer): job.pricer for job in priced.values()}.values()
    return {
        "pricing_solves": sum(p.solves for p in pricers),
        "pricing_seconds": sum(p.solve_seconds for p in pricers),
        "pricing_skipped": sum(job.skipped for job in priced.values()),
    }
