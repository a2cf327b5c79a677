"""Joint provisioning of many jobs sharing quotas, solved to proven optimality.

Why this module is long (975 lines): the column generation for both job kinds, the exact
LP with reduced-cost fixing and the final MILP share one data layout and one proof
(below); they are split into sections, not modules, so the argument reads in one place.

A scheduler hands over many spot and serverless jobs at once. :func:`solve_many` picks one
plan per job so that every job meets its own SLOs and constraints, the jobs together stay
within the shared limits, and the total cost is minimal:

* spot jobs: a shared quota per instance column (the total count of ``p3.2xlarge`` over all
  jobs <= N; each job's own quota stays its own upper bound) and shared vCPU-family quotas
  (vCPUs of a family and market summed over all jobs <= N). Kept (``existing``) instances
  count. PS nodes are not shared.
* serverless jobs: the account concurrency limit. **Assumption: all jobs run at the same
  time**, so the sum of the function counts of all serverless jobs must stay within it (a
  safe over-approximation when jobs are in fact staggered).

The method has three exact steps.

1. Columns (per job, exact). *Spot*: every count vector of the job's quota box and every
   PS count is evaluated with the vectorized :class:`~dnnprov.models.spot.SpotModel`
   (refused beyond ``max_plans_per_job``, 5 million by default). Per count vector only the
   cheapest PS count is kept (PS nodes are not shared). A plan is then dropped when another
   feasible plan of the same job costs no more and uses no more of every shared resource:
   swapping it in keeps any joint solution feasible and no dearer, so some optimal joint
   solution uses only undominated plans. On the count grid this is a prefix minimum:
   with P(n) = min {cost(m) : m <= n} (a cumulative minimum along every axis), n survives
   iff cost(n) < min_i P(n - e_i). Columns in no shared row are minimized out first, and
   with vCPU rows (usage = weighted sums) a pairwise filter in row-usage space follows.
   What remains is the exact cost Pareto front in shared-resource space; plans that alone
   exceed a shared limit are dropped too. *Serverless*: every (n, m, s) plan is evaluated
   (what :func:`~dnnprov.solvers.serverless_exact.feasible_columns` does with no upper
   bound, in one broadcast call), and the feasible ones are reduced to the Pareto front in
   (functions, cost) (the rule of ``ServerlessColumns.pareto``), or to the cheapest plan
   when no concurrency limit is shared.

2. LP bound and reduced costs (exact). The LP relaxation of the column model
   (:mod:`dnnprov.formulations.joint`) over all columns is solved with HiGHS by column
   generation: a small restricted LP, all columns priced at once with numpy, the negative
   ones added, until none is left (:meth:`ColumnModel.solve_lp`); beyond 5,000 jobs, or
   as the fallback, the full LP by interior point with crossover. Let pi_r <= 0 be the (clipped) duals of the shared rows ``A_r x <= b_r``
   and ``c~_jk = c_jk - sum_r pi_r a_rjk``. For ANY integer-feasible x:

       cost(x) = sum_j c_j,k(j) >= sum_j c_j,k(j) + sum_r pi_r (b_r - A_r x)     (pi <= 0, slack >= 0)
               = sum_j c~_j,k(j) + pi . b
               >= L + (c~_jk - min_k' c~_jk')   for each chosen (j, k),
       where L = sum_j min_k c~_jk + pi . b      (Lagrangian bound; = LP* at LP-optimal duals).

   So any joint solution that uses column (j, k) costs at least L + delta_jk, with
   delta_jk = c~_jk - min_k' c~_jk' >= 0 (the LP reduced cost). The argument holds for
   any pi <= 0, so L and delta are recomputed here from the duals instead of being
   trusted from the LP solver's tolerances.

3. Reduced-cost fixing and exact MILPs. Every optimal solution costs OPT <= U for any
   incumbent U, so it only uses columns with L + delta_jk <= U: the columns with
   delta > U - L can be dropped (a 1e-9 relative margin covers float rounding). More
   generally, with S(tau) = {columns with delta <= tau}: if the MILP over S(tau), solved
   with ``mip_rel_gap = 0``, has optimum V and V - L <= tau, then V is the joint optimum
   (an optimal solution's columns have delta <= OPT - L <= V - L <= tau, so it lies in
   S(tau)). The solver therefore starts with a small tau (about four columns per job,
   capped at U - L for the LP-rounding incumbent U), and if the test fails or S(tau) is
   infeasible it widens tau fourfold in columns, never beyond U - L (the classic fixing
   set, which contains the incumbent and settles it in one more MILP). The result is ``optimal`` with
   bound = cost; at the time limit it is ``limit`` with the incumbent and a proven bound
   (L, or the MILP's dual bound once S(tau) provably holds every optimal solution).
   MILPs are solved cold: see :meth:`ColumnModel.solve` on start solutions.

Per-job results: a job whose plan costs what the job alone would cost at best (its
cheapest feasible plan, known exactly from step 1) is ``optimal``; a job that the shared
limits pushed to a dearer plan is ``feasible`` with ``bound`` = its stand-alone optimum.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import highspy
import numpy as np
import scipy.sparse as sp

from dnnprov.errors import InvalidInputError
from dnnprov.formulations.joint import JobColumns
from dnnprov.result import Result, Status, finite_or_none
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.models.serverless import ServerlessModel
from dnnprov.solvers.enumeration import CHUNK, decode_counts
from dnnprov.solvers.highs_driver import new_highs
from dnnprov.solvers.outcome import serverless_result, spot_result
from dnnprov.problems.spot import SpotProblem, VcpuQuota
from dnnprov.models.spot import SpotModel

DEFAULT_MAX_PLANS_PER_JOB = 5_000_000
FIX_MARGIN = 1e-9            # relative margin of the reduced-cost test (float rounding only)
SUPPORT_TOLERANCE = 1e-7     # LP values above this count as the LP's support
INCUMBENT_WIDTHS = (4, 32)   # smallest-delta columns per job tried by the incumbent MILP
INCUMBENT_SECONDS = 1.0      # time limit of each incumbent MILP
INITIAL_WIDTH = 4            # the first exact MILP sees about this many columns per job
INCUMBENT_GAP = 1e-6         # relative gap at which an incumbent MILP may stop
CONCURRENCY_ROW = "concurrency"
BIG_M = 1e4                  # cost of one unit of artificial slack in the LP's column generation, x max |cost|
PRICING_TOLERANCE = 1e-9     # columns enter the restricted LP below -this x max |cost|
# Column generation wins while restricted LPs are small: 1,000 spot jobs x 40 columns 0.05 s
# (full LP by IPM 1.5 s), 100 x 1,500 columns 0.04 s (IPM 4 s). With 10,000-20,000 jobs
# every round re-solves an LP with as many rows, and sharing one row makes every job swap
# columns as its dual moves: 2.5-10 s against 1.1-2.6 s for IPM on the full LP.
PRICING_MAX_JOBS = 5000

Problem = SpotProblem | ServerlessProblem


# ---------------------------------------------------------------------- shared limits
@dataclass(frozen=True)
class SharedLimits:
    """Limits the jobs share.

    ``quotas`` maps a spot column label (a type name for the spot market, or
    ``name:on-demand``) to the most instances of it all spot jobs together may run.
    ``vcpu_quotas`` caps vCPUs per (family, market) over all spot jobs. ``concurrency``
    caps the functions of all serverless jobs together (they are assumed to run at the
    same time). Anything not listed is not shared.
    """

    quotas: Mapping[str, int] = field(default_factory=dict)
    vcpu_quotas: tuple[VcpuQuota, ...] = ()
    concurrency: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.quotas, Mapping):
            raise InvalidInputError("shared.quotas", "must map instance types to counts")
        quotas = {}
        for label, limit in self.quotas.items():
            if not isinstance(label, str) or not label:
                raise InvalidInputError("shared.quotas", f"keys must be instance type names, got {label!r}")
            if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 0:
                raise InvalidInputError(f"shared.quotas.{label}", f"must be an integer >= 0, got {limit!r}")
            quotas[label] = int(limit)
        object.__setattr__(self, "quotas", quotas)
        vcpu = tuple(self.vcpu_quotas)
        seen = set()
        for q in vcpu:
            if not isinstance(q, VcpuQuota):
                raise InvalidInputError("shared.vcpu_quotas", f"entries must be VcpuQuota, got {q!r}")
            if (q.family, q.market) in seen:
                raise InvalidInputError(f"shared.vcpu_quotas.{q.family}", f"listed twice for market {q.market}")
            seen.add((q.family, q.market))
        object.__setattr__(self, "vcpu_quotas", vcpu)
        if self.concurrency is not None and (isinstance(self.concurrency, bool)
                                             or not isinstance(self.concurrency, (int, np.integer))
                                             or self.concurrency < 0):
            raise InvalidInputError("shared.concurrency", f"must be an integer >= 0, got {self.concurrency!r}")

    def rows(self) -> dict[str, float]:
        """Every shared row's name and limit (the ``shared`` of the Pyomo model)."""
        rows: dict[str, float] = {f"quota:{label}": float(n) for label, n in self.quotas.items()}
        rows.update({f"vcpu:{q.family}/{q.market}": float(q.vcpus) for q in self.vcpu_quotas})
        if self.concurrency is not None:
            rows[CONCURRENCY_ROW] = float(self.concurrency)
        return rows


# ---------------------------------------------------------------------- result
@dataclass(frozen=True)
class JointResult:
    """Outcome of :func:`solve_many`: one :class:`Result` per job plus the joint figures.

    ``status`` is ``optimal`` (total cost proven minimal: ``bound == cost``), ``limit``
    (time limit: incumbent and proven bound, or no plan), or ``infeasible`` (proven: some
    job has no feasible plan, or the shared limits cannot all be met at once).
    ``usage`` and ``limits`` give each shared row's total use and its limit.
    """

    status: Status
    results: tuple[Result, ...]
    cost: float | None = None
    bound: float | None = None
    solve_seconds: float = 0.0
    message: str = ""
    usage: dict[str, float] = field(default_factory=dict)
    limits: dict[str, float] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def gap(self) -> float | None:
        """Relative gap ``(cost - bound) / cost`` where both are known."""
        if self.cost is None or self.bound is None:
            return None
        return 0.0 if self.cost == 0 else max(0.0, (self.cost - self.bound) / self.cost)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the CLI's ``--json`` output)."""
        return {"status": self.status.value, "cost": finite_or_none(self.cost), "bound": finite_or_none(self.bound),
                "gap": finite_or_none(self.gap), "solve_seconds": self.solve_seconds, "message": self.message,
                "shared": {r: {"limit": self.limits[r], "used": self.usage.get(r)} for r in self.limits},
                "stats": dict(self.stats), "jobs": [r.to_dict() for r in self.results]}

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), **kwargs)

    def summary(self) -> str:
        """Readable summary: one line per job, then totals and shared rows."""
        lines = [f"{len(self.results)} jobs solved jointly: {self.status.value}"]
        width = max((len(r.instance) for r in self.results), default=0)
        for i, r in enumerate(self.results):
            cost = f"${r.cost:.6f}" if r.cost is not None else "-"
            lines.append(f"  [{i}] {r.instance:<{width}} {r.kind:<10} {r.status.value:<10} {cost:>13}  "
                         f"{r.plan if r.plan is not None else r.message}")
        if self.cost is not None:
            lines.append(f"  total cost: ${self.cost:.6f}")
        if self.bound is not None:
            lines.append(f"  bound     : ${self.bound:.6f} (gap {100 * (self.gap or 0):.4f} %)")
        for r, limit in self.limits.items():
            used = self.usage.get(r)
            lines.append(f"  {r:<28} {'-' if used is None else f'{used:g}':>8} of {limit:g}")
        s = self.stats
        if "columns" in s:
            lines.append(f"  columns {s['columns']:,} -> {s.get('columns_after_fixing', s['columns']):,} after "
                         f"reduced-cost fixing; times: columns {s.get('columns_seconds', 0):.2f} s, "
                         f"LP {s.get('lp_seconds', 0):.2f} s, incumbent {s.get('incumbent_seconds', 0):.2f} s, "
                         f"MILP {s.get('milp_seconds', 0):.2f} s")
        lines.append(f"  solve: {self.solve_seconds:.3f} s")
        if self.message:
            lines.append(f"  note : {self.message}")
        return "\n".join(lines)

    __str__ = summary


# ---------------------------------------------------------------------- column generation
@dataclass
class GeneratedColumns:
    """One job's columns (costs, shared-row usage, plans) and what the generation learned.

    ``alone`` is the job's own optimum (its cheapest feasible plan; ``inf`` if none), exact
    because every plan was evaluated. ``plans`` is ``(counts, ps)`` for spot jobs and
    ``(functions, memory_mb, ps)`` for serverless jobs, aligned with ``columns.cost``.
    """

    columns: JobColumns
    alone: float
    feasible_plans: int
    plans_evaluated: int
    seconds: float = 0.0
    cached: bool = False


def spot_usage_rows(problem: SpotProblem, shared: SharedLimits, where: str) -> tuple[list[str], np.ndarray]:
    """The shared rows a spot job touches and its per-column usage matrix (rows x columns)."""
    cols = problem.columns()
    labels = np.array(cols.labels)
    names, rows = [], []
    for label in shared.quotas:
        hit = labels == label
        if hit.any():
            names.append(f"quota:{label}")
            rows.append(hit.astype(float))
    for q in shared.vcpu_quotas:
        hit = np.array([(f, m) == (q.family, q.market) for f, m in zip(cols.families, cols.markets)])
        if hit.any():
            missing = [cols.type_names[i] for i in np.flatnonzero(hit & (cols.vcpus == 0))]
            if missing:
                raise InvalidInputError(f"{where}.instance_types.{missing[0]}.vcpus",
                                        f"needed by the shared vCPU quota of family {q.family} ({q.market})")
            names.append(f"vcpu:{q.family}/{q.market}")
            rows.append(np.where(hit, cols.vcpus, 0).astype(float))
    a = np.array(rows, dtype=float).reshape(len(rows), len(cols))
    return names, a


def spot_box_size(problem: SpotProblem) -> int:
    """Plans (count vectors x PS counts) in a spot job's quota box."""
    cols = problem.columns()
    low, high = problem.constraints.ps_count
    return math.prod(int(u - l + 1) for l, u in zip(cols.lower, cols.upper)) * (high - low + 1)


def spot_columns(problem: SpotProblem, shared: SharedLimits, *, max_plans: int = DEFAULT_MAX_PLANS_PER_JOB,
                 where: str = "job") -> GeneratedColumns:
    """Exact columns of one spot job: the cost Pareto front in shared-resource space.

    Every plan of the quota box is evaluated; see the module docstring for the dominance
    rule. Raises :class:`InvalidInputError` when the box holds more than ``max_plans``
    plans.
    """
    started = time.perf_counter()
    size = spot_box_size(problem)
    if size > max_plans:
        raise InvalidInputError(where, f"its quota box holds {size:,} plans, more than max_plans_per_job="
                                       f"{max_plans:,} that joint column generation evaluates; lower its "
                                       "quotas or raise max_plans_per_job")
    model = SpotModel(problem)
    cols = model.columns
    names, a = spot_usage_rows(problem, shared, where)
    limits = np.array([shared.rows()[r] for r in names])
    radix = (cols.upper - cols.lower + 1).astype(np.int64)
    per_ps = int(np.prod(radix))
    ps_low, ps_high = problem.constraints.ps_count

    # 1. the cheapest PS count of every count vector (PS nodes are not shared)
    best = np.full(per_ps, np.inf)
    best_ps = np.full(per_ps, ps_low, dtype=np.int64)
    for ps in range(ps_low, ps_high + 1):
        for start in range(0, per_ps, CHUNK):
            index = np.arange(start, min(start + CHUNK, per_ps), dtype=np.int64)
            ev = model.evaluate(decode_counts(index, cols.lower, radix), ps)
            cost = np.where(ev.feasible, ev.cost, np.inf)
            better = cost < best[index]
            best[index[better]] = cost[better]
            best_ps[index[better]] = ps
    feasible = int(np.isfinite(best).sum())
    alone = float(best.min()) if per_ps else math.inf

    # 2. minimize out the columns that no shared row sees (axis c of the grid = column c)
    grid = best.reshape(tuple(radix), order="F")
    flat = np.arange(per_ps, dtype=np.int64).reshape(tuple(radix), order="F")
    shared_axes = [c for c in range(len(cols)) if a.shape[0] and np.any(a[:, c] != 0)]
    other_axes = [c for c in range(len(cols)) if c not in shared_axes]
    if other_axes:
        kept_shape = tuple(int(radix[c]) for c in shared_axes)
        grid = np.moveaxis(grid, other_axes, range(-len(other_axes), 0)).reshape(kept_shape + (-1,))
        flat = np.moveaxis(flat, other_axes, range(-len(other_axes), 0)).reshape(kept_shape + (-1,))
        pick = grid.argmin(axis=-1)[..., None]
        grid = np.take_along_axis(grid, pick, axis=-1)[..., 0]
        flat = np.take_along_axis(flat, pick, axis=-1)[..., 0]

    # 3. count-space dominance by prefix minima: keep n iff cost(n) < min_i P(n - e_i)
    keep = pareto_grid(grid)
    index = np.atleast_1d(flat[keep]) if grid.ndim else np.atleast_1d(flat)[np.atleast_1d(keep)]
    counts = decode_counts(index, cols.lower, radix)
    ps = best_ps[index]
    cost = best[index]
    usage = counts @ a.T if len(names) else np.zeros((len(index), 0))

    # 4. plans that alone exceed a shared limit can never be chosen
    fits = (usage <= limits + 1e-9).all(axis=1)
    counts, ps, cost, usage = counts[fits], ps[fits], cost[fits], usage[fits]

    # 5. vCPU rows are weighted sums: dominance in row-usage space prunes further
    if any(r.startswith("vcpu:") for r in names):
        kept = pareto_pairwise(cost, usage)
        counts, ps, cost, usage = counts[kept], ps[kept], cost[kept], usage[kept]

    order = np.argsort(cost, kind="stable")
    columns = JobColumns(problem.name, cost[order], {r: usage[order, i] for i, r in enumerate(names)},
                         plans=(counts[order], ps[order]))
    return GeneratedColumns(columns, alone, feasible, size, time.perf_counter() - started)


def pareto_grid(cost: np.ndarray) -> np.ndarray:
    """Cells of a cost grid no componentwise-smaller cell matches or beats (finite only).

    P = cumulative minimum along every axis is min {cost(m) : m <= n}; a cell survives iff
    its cost is below min_i P(n - e_i), the cheapest strictly smaller cell.
    """
    if cost.ndim == 0:
        return np.isfinite(cost)
    prefix = cost
    for ax in range(cost.ndim):
        prefix = np.minimum.accumulate(prefix, axis=ax)
    below = np.full(cost.shape, np.inf)
    for ax in range(cost.ndim):
        dst = [slice(None)] * cost.ndim
        src = [slice(None)] * cost.ndim
        dst[ax], src[ax] = slice(1, None), slice(None, -1)
        below[tuple(dst)] = np.minimum(below[tuple(dst)], prefix[tuple(src)])
    return np.isfinite(cost) & (cost < below)


def pareto_pairwise(cost: np.ndarray, usage: np.ndarray) -> np.ndarray:
    """Indices of plans that no other plan matches or beats in cost and every usage row."""
    order = np.lexsort((usage.sum(axis=1), cost))
    front = np.empty((len(order), usage.shape[1]))
    kept: list[int] = []
    for i in order:
        if kept and (front[:len(kept)] <= usage[i]).all(axis=1).any():
            continue
        front[len(kept)] = usage[i]
        kept.append(int(i))
    return np.array(sorted(kept), dtype=np.int64)


def serverless_columns(problem: ServerlessProblem, shared: SharedLimits) -> GeneratedColumns:
    """Exact columns of one serverless job: its (functions, cost) Pareto front, or its cheapest plan.

    Every (n, m, s) plan of the job is evaluated, as ``feasible_columns(model, upper=inf)``
    does, but in one broadcast call over an (n, (m, s)) grid, which is several times
    faster for many small jobs; the front is then read off per function count: the
    cheapest plan of each n, kept when it beats every smaller n (``ServerlessColumns.pareto``).
    """
    started = time.perf_counter()
    model = ServerlessModel(problem)
    low, high = problem.function_range()
    functions = np.arange(low, high + 1, dtype=np.int64)
    ps_low, ps_high = problem.constraints.ps_count
    memory, ps = (a.ravel() for a in np.meshgrid(np.array(problem.memory_grid(), dtype=np.int64),
                                                  np.arange(ps_low, ps_high + 1, dtype=np.int64), indexing="ij"))
    cost = np.empty((len(functions), len(memory)))
    step = max(1, CHUNK // max(len(functions), 1))
    for start in range(0, len(memory), step):
        part = slice(start, start + step)
        ev = model.evaluate(functions[:, None], memory[None, part], ps[None, part])
        cost[:, part] = np.where(ev.feasible, ev.cost, np.inf)
    pair = cost.argmin(axis=1)
    per_n = cost[np.arange(len(functions)), pair]                    # cheapest plan of each n
    alone = float(per_n.min()) if len(per_n) else math.inf
    usage: dict[str, np.ndarray] = {}
    if shared.concurrency is None:
        keep = np.flatnonzero(np.isfinite(per_n))[:0]
        if math.isfinite(alone):
            keep = np.array([int(np.argmin(per_n))])
    else:
        previous = np.concatenate([[np.inf], np.minimum.accumulate(per_n)[:-1]])
        keep = np.flatnonzero(np.isfinite(per_n) & (per_n < previous) & (functions <= shared.concurrency))
        usage[CONCURRENCY_ROW] = functions[keep].astype(float)
    order = np.argsort(per_n[keep], kind="stable")
    keep = keep[order]
    columns = JobColumns(problem.name, per_n[keep], {r: u[order] for r, u in usage.items()},
                         plans=(functions[keep], memory[pair[keep]], ps[pair[keep]]))
    return GeneratedColumns(columns, alone, int(np.isfinite(cost).sum()), cost.size,
                            time.perf_counter() - started)


def _cache_key(problem: Problem) -> str:
    """Jobs equal up to their name and notes have the same columns."""
    data = problem.to_dict()
    data.pop("name", None)
    data.pop("notes", None)
    return json.dumps(data, sort_keys=True)


def generate_columns(problems: Sequence[Problem], shared: SharedLimits, *,
                     max_plans_per_job: int = DEFAULT_MAX_PLANS_PER_JOB,
                     deadline: float = math.inf, cache: bool = True) -> list[GeneratedColumns] | None:
    """Columns of every job (``None`` if ``deadline``, a ``perf_counter`` value, passed first).

    Jobs identical up to name and notes share one generation when ``cache`` is on.
    Box sizes are checked for every spot job before any is evaluated.
    """
    for i, p in enumerate(problems):
        if isinstance(p, SpotProblem):
            size = spot_box_size(p)
            if size > max_plans_per_job:
                raise InvalidInputError(f"problems[{i}] ({p.name})",
                                        f"its quota box holds {size:,} plans, more than max_plans_per_job="
                                        f"{max_plans_per_job:,} that joint column generation evaluates; "
                                        "lower its quotas or raise max_plans_per_job")
    out: list[GeneratedColumns] = []
    seen: dict[str, GeneratedColumns] = {}
    for i, p in enumerate(problems):
        if time.perf_counter() > deadline:
            return None
        key = _cache_key(p) if cache else None
        if key is not None and key in seen:
            g = seen[key]
            out.append(GeneratedColumns(JobColumns(p.name, g.columns.cost, g.columns.usage, g.columns.plans),
                                        g.alone, g.feasible_plans, 0, 0.0, cached=True))
            continue
        if isinstance(p, SpotProblem):
            g = spot_columns(p, shared, max_plans=max_plans_per_job, where=f"problems[{i}] ({p.name})")
        else:
            g = serverless_columns(p, shared)
        if key is not None:
            seen[key] = g
        out.append(g)
    return out


# ---------------------------------------------------------------------- the column model on highspy
@dataclass
class ColumnModel:
    """All columns of all jobs in one sparse matrix: J convexity rows, then the shared rows."""

    cost: np.ndarray          # (N,)
    job_of: np.ndarray        # (N,) job index of each column
    starts: np.ndarray        # (J + 1,) first column of each job (columns are grouped by job)
    matrix: sp.csc_matrix     # (J + R, N)
    row_names: list[str]      # the R shared rows
    limits: np.ndarray        # (R,)

    @property
    def jobs(self) -> int:
        return len(self.starts) - 1

    @classmethod
    def build(cls, columns: Sequence[JobColumns], shared: Mapping[str, float]) -> "ColumnModel":
        """Stack the jobs' columns; rows no job touches are left out."""
        sizes = np.array([len(c) for c in columns], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)])
        n, j_count = int(starts[-1]), len(columns)
        used_rows = [r for r in shared if any(r in c.usage for c in columns)]
        row_index = {r: j_count + i for i, r in enumerate(used_rows)}
        job_of = np.repeat(np.arange(j_count), sizes)
        rows, cols, vals = [job_of], [np.arange(n)], [np.ones(n)]
        for j, c in enumerate(columns):
            for r, a in c.usage.items():
                if r in row_index:
                    nz = np.flatnonzero(a)
                    rows.append(np.full(len(nz), row_index[r]))
                    cols.append(starts[j] + nz)
                    vals.append(a[nz])
        matrix = sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                               shape=(j_count + len(used_rows), n))
        cost = np.concatenate([c.cost for c in columns]) if columns else np.zeros(0)
        return cls(cost, job_of, starts, matrix, used_rows,
                   np.array([shared[r] for r in used_rows], dtype=float))

    def solve(self, subset: np.ndarray | None = None, *, integer: bool,
              time_limit_s: float = math.inf, gap: float = 0.0) -> dict[str, Any]:
        """Solve the LP (``integer=False``) or the MILP over the columns ``subset`` (default: all).

        Returns a dict with ``status`` (a HiGHS model status), ``x`` (full length, zeros
        outside ``subset``), ``objective`` (recomputed from ``x``), ``dual_bound`` and, for
        the LP, ``row_dual``. No start solution is passed: with presolve on, HiGHS 1.16
        returned the start vector while reporting a better objective (seen on a 15-column
        instance), so the MILP runs cold and its objective is checked against its vector.
        """
        idx = np.arange(len(self.cost)) if subset is None else np.asarray(subset, dtype=np.int64)
        a = self.matrix[:, idx]
        j_count, r_count = self.jobs, len(self.row_names)
        h = new_highs()
        lp = highspy.HighsLp()
        lp.num_col_ = len(idx)
        lp.num_row_ = j_count + r_count
        lp.col_cost_ = self.cost[idx]
        lp.col_lower_ = np.zeros(len(idx))
        lp.col_upper_ = np.ones(len(idx)) if integer else np.full(len(idx), highspy.kHighsInf)
        lp.row_lower_ = np.concatenate([np.ones(j_count), np.full(r_count, -highspy.kHighsInf)])
        lp.row_upper_ = np.concatenate([np.ones(j_count), self.limits])
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = a.indptr.astype(np.int32)
        lp.a_matrix_.index_ = a.indices.astype(np.int32)
        lp.a_matrix_.value_ = a.data.astype(float)
        if integer:
            lp.integrality_ = [highspy.HighsVarType.kInteger] * len(idx)
        h.passModel(lp)
        if not integer:
            # Interior point + crossover: dual simplex needed minutes on 10,000 one-of-k
            # convexity rows with a single shared row; IPM takes seconds and still returns
            # a basic solution (few fractional jobs) and its duals.
            h.setOptionValue("solver", "ipm")
        if math.isfinite(time_limit_s):
            h.setOptionValue("time_limit", max(float(time_limit_s), 0.01))
        if gap:
            h.setOptionValue("mip_rel_gap", float(gap))  # incumbents only; the final MILP keeps 0
        h.run()
        status = h.getModelStatus()
        info = h.getInfo()
        has_x = info.primal_solution_status == 2  # kSolutionStatusFeasible
        x = np.zeros(len(self.cost))
        out: dict[str, Any] = {"status": status, "x": None, "objective": math.inf, "dual_bound": -math.inf}
        if has_x:
            x[idx] = np.array(h.getSolution().col_value)
            out["x"] = x
            out["objective"] = float(self.cost @ x)
            reported = float(info.objective_function_value)
            out["consistent"] = abs(out["objective"] - reported) <= 1e-7 * max(1.0, abs(reported))
        if integer:
            infeasible = status == highspy.HighsModelStatus.kInfeasible
            out["dual_bound"] = math.inf if infeasible else float(info.mip_dual_bound)
            out["nodes"] = int(info.mip_node_count)
        elif status == highspy.HighsModelStatus.kOptimal:
            out["row_dual"] = np.array(h.getSolution().row_dual)
            out["dual_bound"] = out["objective"]
        return out

    def solve_lp(self, *, time_limit_s: float = math.inf) -> dict[str, Any]:
        """The LP relaxation over all columns by column generation (``solve`` with ``integer=False`` on big sets).

        A restricted LP holds each job's cheapest column and one artificial column per
        shared row (``A_r x - s_r <= b_r``, cost ``BIG_M`` per unit); every round prices all
        columns at once with numpy, ``d = c - y_job - A^T pi``, and adds each job's most
        negative one, until none is negative: then the restricted optimum is the full LP's
        (HiGHS re-solves from the previous basis after ``addCols``). If artificials stay
        positive (the LP may be infeasible, or ``BIG_M`` too small) or the limit strikes,
        the result has no ``row_dual`` and the caller solves the full LP instead.
        One-of-k rows by the thousand made HiGHS's dual simplex slow on the full LP and
        interior point slow on jobs with a thousand columns each; the restricted LPs are
        small either way.
        """
        started = time.perf_counter()
        j_count, r_count, n = self.jobs, len(self.row_names), len(self.cost)
        scale = max(1.0, float(np.abs(self.cost).max()) if n else 1.0)
        base = highspy.Highs.__mro__[1]  # the pybind class: plain array addRows/addCols
        h = new_highs()
        h.setOptionValue("presolve", "off")
        none_i, none_f = np.empty(0, dtype=np.int32), np.empty(0)
        base.addRows(h, j_count + r_count, np.concatenate([np.ones(j_count), np.full(r_count, -highspy.kHighsInf)]),
                     np.concatenate([np.ones(j_count), self.limits]), 0, none_i, none_i, none_f)
        base.addCols(h, r_count, np.full(r_count, BIG_M * scale), np.zeros(r_count),
                     np.full(r_count, highspy.kHighsInf),
                     r_count, np.arange(r_count, dtype=np.int32), (j_count + np.arange(r_count)).astype(np.int32),
                     -np.ones(r_count))
        shared_t = self.matrix[j_count:, :].T.tocsr()
        in_lp = np.zeros(n, dtype=bool)
        order: list[np.ndarray] = []

        def add(columns: np.ndarray) -> None:
            a = self.matrix[:, columns]
            base.addCols(h, len(columns), self.cost[columns], np.zeros(len(columns)),
                         np.full(len(columns), highspy.kHighsInf), a.nnz, a.indptr[:-1].astype(np.int32),
                         a.indices.astype(np.int32), a.data.astype(float))
            in_lp[columns] = True
            order.append(columns)

        add(self.initial_columns())
        rounds = 0
        while True:
            rounds += 1
            remaining = time_limit_s - (time.perf_counter() - started)
            if remaining <= 0:
                return {"status": highspy.HighsModelStatus.kTimeLimit, "x": None, "rounds": rounds}
            h.setOptionValue("time_limit", max(remaining, 0.01) if math.isfinite(remaining) else highspy.kHighsInf)
            h.run()
            if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
                return {"status": h.getModelStatus(), "x": None, "rounds": rounds}
            row_dual = np.array(h.getSolution().row_dual)
            reduced = self.cost - row_dual[:j_count][self.job_of] - shared_t @ row_dual[j_count:]
            reduced[in_lp] = np.inf
            best = np.minimum.reduceat(reduced, self.starts[:-1])
            entering = np.flatnonzero((reduced < -PRICING_TOLERANCE * scale) & (reduced <= best[self.job_of]))
            if not len(entering):
                break
            add(entering)
        values = np.array(h.getSolution().col_value)
        if values[:r_count].max(initial=0.0) > 1e-9:
            return {"status": highspy.HighsModelStatus.kNotset, "x": None, "rounds": rounds}
        x = np.zeros(n)
        x[np.concatenate(order)] = values[r_count:]
        objective = float(self.cost @ x)
        return {"status": highspy.HighsModelStatus.kOptimal, "x": x, "objective": objective,
                "dual_bound": objective, "row_dual": row_dual, "rounds": rounds, "lp_columns": int(in_lp.sum())}

    def initial_columns(self) -> np.ndarray:
        """Each job's cheapest column and, per shared row, its cheapest column using the least of it.

        Starting the column generation from the least-use columns too keeps the first
        restricted LPs off the artificial slacks (whose huge duals would make every job
        swap columns round after round).
        """
        def cheapest_where(mask: np.ndarray) -> np.ndarray:
            cost = np.where(mask, self.cost, np.inf)
            best = np.minimum.reduceat(cost, self.starts[:-1])
            hit = np.flatnonzero(mask & (cost <= best[self.job_of]))
            return hit[np.concatenate([[True], self.job_of[hit][1:] != self.job_of[hit][:-1]])]

        picks = [cheapest_where(np.ones(len(self.cost), dtype=bool))]
        shared = self.matrix[self.jobs:, :].tocsr()
        for r in range(len(self.row_names)):
            use = shared.getrow(r).toarray().ravel()
            least = np.minimum.reduceat(use, self.starts[:-1])
            picks.append(cheapest_where(use <= least[self.job_of]))
        return np.unique(np.concatenate(picks))

    def lagrangian(self, row_dual: np.ndarray) -> tuple[float, np.ndarray]:
        """(L, delta): the bound and per-column reduced costs for shared-row duals pi <= 0.

        Valid for any pi <= 0 (see the module docstring); the duals are clipped to that.
        """
        pi = np.minimum(np.asarray(row_dual[self.jobs:], dtype=float), 0.0)
        shared = self.matrix[self.jobs:, :]
        reduced = self.cost - shared.T @ pi
        mins = np.minimum.reduceat(reduced, self.starts[:-1])
        bound = float(mins.sum() + pi @ self.limits)
        return bound, reduced - mins[self.job_of]

    def choice(self, x: np.ndarray) -> np.ndarray:
        """The chosen column of every job from a MILP solution (checked: exactly one each)."""
        picked = np.flatnonzero(x > 0.5)
        if len(picked) != self.jobs or not np.array_equal(self.job_of[picked], np.arange(self.jobs)):
            raise AssertionError("the MILP solution does not pick exactly one column per job")
        return picked

    def usage(self, picked: np.ndarray) -> np.ndarray:
        """Total use of every shared row by the chosen columns."""
        return np.asarray(self.matrix[self.jobs:, picked].sum(axis=1)).ravel()


# ---------------------------------------------------------------------- the solve
def solve_many(problems: Sequence[Problem], *, shared: SharedLimits | None = None,
               time_limit_s: float = 300.0, max_plans_per_job: int = DEFAULT_MAX_PLANS_PER_JOB,
               fixing: bool = True, cache: bool = True) -> JointResult:
    """One plan per job, minimizing total cost under every job's SLOs and the shared limits.

    Parameters
    ----------
    problems
        Spot and serverless problems (any mix), one per job.
    shared
        The shared quotas and concurrency limit (default: nothing shared, so each job gets
        its own optimum).
    time_limit_s
        Wall-clock limit of the whole solve; at the limit the status is ``limit``.
    max_plans_per_job
        Largest spot quota box (count vectors x PS counts) a job may have; larger boxes are
        refused with :class:`InvalidInputError` before anything is evaluated.
    fixing
        Reduced-cost fixing (on by default; off solves the MILP over every column, for
        cross-checks).
    cache
        Share column generation between jobs equal up to name and notes.
    """
    started = time.perf_counter()
    deadline = started + time_limit_s
    shared = shared if shared is not None else SharedLimits()
    problems = list(problems)
    if not problems:
        raise InvalidInputError("problems", "at least one job is needed")
    for i, p in enumerate(problems):
        if not isinstance(p, (SpotProblem, ServerlessProblem)):
            raise InvalidInputError(f"problems[{i}]",
                                    f"expected SpotProblem or ServerlessProblem, got {type(p).__name__}")
    if not isinstance(shared, SharedLimits):
        raise InvalidInputError("shared", f"expected SharedLimits, got {type(shared).__name__}")
    if time_limit_s <= 0:
        raise InvalidInputError("time_limit_s", f"must be > 0, got {time_limit_s!r}")
    _check_shared_names(problems, shared)
    limits = shared.rows()
    stats: dict[str, Any] = {"jobs": len(problems),
                             "spot_jobs": sum(isinstance(p, SpotProblem) for p in problems),
                             "serverless_jobs": sum(isinstance(p, ServerlessProblem) for p in problems)}

    t0 = time.perf_counter()
    generated = generate_columns(problems, shared, max_plans_per_job=max_plans_per_job,
                                 deadline=deadline, cache=cache)
    stats["columns_seconds"] = time.perf_counter() - t0
    if generated is None:
        return _without_plans(problems, None, Status.LIMIT, started, limits, stats,
                              "time limit reached during column generation")
    stats["plans_evaluated"] = sum(g.plans_evaluated for g in generated)
    stats["cached_jobs"] = sum(g.cached for g in generated)
    stats["columns"] = sum(len(g.columns) for g in generated)
    empty = [i for i, g in enumerate(generated) if not len(g.columns)]
    if empty:
        i = empty[0]
        why = ("has no plan meeting its own constraints" if not math.isfinite(generated[i].alone)
               else "has no plan within the shared limits")
        return _without_plans(problems, generated, Status.INFEASIBLE, started, limits, stats,
                              f"proven infeasible: job {i} ({problems[i].name}) {why}"
                              + (f" (and {len(empty) - 1} more jobs)" if len(empty) > 1 else ""))

    solved = solve_columns([g.columns for g in generated], limits, deadline=deadline, fixing=fixing)
    stats.update(solved.stats)
    if solved.picked is None:
        return _without_plans(problems, generated, solved.status, started, limits, stats, solved.message,
                              bound=solved.bound)
    results = tuple(_job_result(p, g, int(k), started) for p, g, k in zip(problems, generated, solved.picked))
    stats["total_seconds"] = time.perf_counter() - started
    return JointResult(solved.status, results, solved.cost, solved.bound, time.perf_counter() - started,
                       solved.message, solved.usage, limits, stats)


@dataclass
class ColumnSolution:
    """Outcome of :func:`solve_columns`: the column chosen for each job (``None``: no plan)."""

    status: Status
    picked: np.ndarray | None
    cost: float | None
    bound: float | None
    message: str = ""
    usage: dict[str, float] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    kept: np.ndarray | None = None     # global indices of the columns the last MILP saw


def solve_columns(columns: Sequence[JobColumns], shared: Mapping[str, float], *,
                  deadline: float = math.inf, fixing: bool = True) -> ColumnSolution:
    """Steps 2 and 3 of the module docstring on given columns: LP, fixing, exact MILP.

    ``columns`` holds one :class:`JobColumns` per job (each with at least one column),
    ``shared`` the limit of every shared row; ``deadline`` is a ``perf_counter`` value.
    """
    stats: dict[str, Any] = {}
    model = ColumnModel.build(columns, shared)
    stats["shared_rows"] = len(model.row_names)
    t0 = time.perf_counter()
    lp: dict[str, Any] = {}
    if model.jobs <= PRICING_MAX_JOBS:
        lp = model.solve_lp(time_limit_s=deadline - time.perf_counter())
        stats["lp_rounds"] = lp.get("rounds")
        stats["lp_columns"] = lp.get("lp_columns")
    if "row_dual" not in lp and time.perf_counter() < deadline:
        lp = model.solve(integer=False, time_limit_s=deadline - time.perf_counter())  # the full LP
        stats["lp_full"] = True
    stats["lp_seconds"] = time.perf_counter() - t0
    if lp["status"] == highspy.HighsModelStatus.kInfeasible:
        return ColumnSolution(Status.INFEASIBLE, None, None, math.inf,
                              "proven infeasible: the shared limits cannot be met by all jobs at once "
                              "(even the LP relaxation is infeasible)", stats=stats)
    if "row_dual" not in lp:
        return ColumnSolution(Status.LIMIT, None, None, None,
                              f"the LP relaxation ended {h_status(lp['status'])}", stats=stats)
    bound, delta = model.lagrangian(lp["row_dual"])
    stats["lp_objective"] = lp["objective"]
    stats["lp_bound"] = bound

    t0 = time.perf_counter()
    best, upper = _incumbent(model, lp["x"], delta, deadline) if fixing else (None, math.inf)
    stats["incumbent_seconds"] = time.perf_counter() - t0
    stats["incumbent"] = upper if math.isfinite(upper) else None

    # Step 3: exact MILPs on S(tau) = {columns with delta <= tau}. An optimal solution uses
    # only columns with L + delta <= OPT <= U, so once U - L <= tau the MILP over S(tau) is
    # the whole problem. tau starts small (about INITIAL_WIDTH columns per job, and never
    # above U - L) and grows to U - L when needed: at most a few MILPs, the first small.
    t0 = time.perf_counter()
    n = len(model.cost)
    margin = FIX_MARGIN * max(1.0, abs(bound), abs(upper) if math.isfinite(upper) else 0.0)
    def threshold(width: int) -> float:
        """tau giving about ``width`` columns per job, capped at U - L (inf: keep everything)."""
        if not fixing:
            return math.inf
        k = min(n, width * model.jobs)
        tau = float(np.partition(delta, k - 1)[k - 1]) if k < n else math.inf
        return min(tau, upper - bound) if math.isfinite(upper) else tau

    width = INITIAL_WIDTH
    tau = threshold(width)
    proven, status, dual_bound, rounds = False, None, -math.inf, 0
    kept = np.arange(n)
    milp: dict[str, Any] = {}
    while time.perf_counter() < deadline:
        rounds += 1
        kept = np.flatnonzero(delta <= tau + margin) if math.isfinite(tau) else np.arange(n)
        milp = model.solve(kept, integer=True, time_limit_s=deadline - time.perf_counter())
        status = milp["status"]
        if milp["x"] is not None and milp.get("consistent", False) and milp["objective"] < upper:
            best, upper = milp["x"], milp["objective"]
        complete = len(kept) == n or (math.isfinite(upper) and upper - bound <= tau)
        if status == highspy.HighsModelStatus.kOptimal and milp.get("consistent", False):
            if complete:
                proven = True                       # S(tau) holds every optimal solution
                break
            width *= 4                              # widen; capped at U - L, the classic fixing
            tau = threshold(width)                  # set, which is proven in one more round
            continue
        if status == highspy.HighsModelStatus.kInfeasible:
            if len(kept) == n:
                break                               # no joint solution at all
            width *= 4                              # S(tau) too small to be feasible: widen
            tau = threshold(width)
            continue
        if complete:
            dual_bound = max(bound, milp["dual_bound"])
        break                                       # time limit (or a HiGHS failure)
    stats["columns_after_fixing"] = int(len(kept))
    stats["fixing_rounds"] = rounds
    stats["fixing_threshold"] = float(tau) if rounds and math.isfinite(tau) else None
    stats["milp_seconds"] = time.perf_counter() - t0
    stats["milp_nodes"] = milp.get("nodes")
    if best is None:
        if status == highspy.HighsModelStatus.kInfeasible and len(kept) == n:
            return ColumnSolution(Status.INFEASIBLE, None, None, math.inf,
                                  "proven infeasible: the shared limits cannot be met by all jobs at once",
                                  stats=stats)
        return ColumnSolution(Status.LIMIT, None, None, bound, "time limit: no joint plan found yet",
                              stats=stats)
    picked = model.choice(best)
    used = model.usage(picked)
    if (used > model.limits + 1e-9).any():
        raise AssertionError("the chosen plans exceed a shared limit")
    total = float(model.cost[picked].sum())
    usage = {r: float(u) for r, u in zip(model.row_names, used)}
    usage.update({r: 0.0 for r in shared if r not in usage})
    if proven:
        return ColumnSolution(Status.OPTIMAL, picked - model.starts[:-1], total, total, "", usage, stats, kept)
    return ColumnSolution(Status.LIMIT, picked - model.starts[:-1], total, min(max(bound, dual_bound), total),
                          "time limit: incumbent and proven bound", usage, stats, kept)


def h_status(status: highspy.HighsModelStatus) -> str:
    """A HiGHS model status in words."""
    return str(status).split(".")[-1].removeprefix("k").lower()


def _incumbent(model: ColumnModel, x_lp: np.ndarray, delta: np.ndarray,
               deadline: float) -> tuple[np.ndarray | None, float]:
    """A quick feasible joint solution by rounding the LP (``None``, inf if none found fast).

    Every job the LP assigns integrally keeps its column; the (few, at most one per
    shared row in a basic solution) fractional jobs choose among their smallest-delta
    columns, then among all their columns, in short MILPs that need not be proven.
    """
    n = len(model.cost)
    support = np.flatnonzero(x_lp > SUPPORT_TOLERANCE)
    by_delta = np.lexsort((delta, model.job_of))
    rank = np.empty(n, dtype=np.int64)
    rank[by_delta] = np.arange(n) - model.starts[model.job_of[by_delta]]   # 0 = smallest delta of its job
    fractional = np.zeros(model.jobs, dtype=bool)
    fractional[model.job_of[support[x_lp[support] < 1 - SUPPORT_TOLERANCE]]] = True
    near = fractional[model.job_of]
    if not near.any():
        x = np.zeros(n)
        x[model.choice(np.where(x_lp > 0.5, 1.0, 0.0))] = 1.0
        return x, float(model.cost @ x)     # the LP optimum is integral
    attempts = [np.union1d(support, np.flatnonzero(near & (rank < width))) for width in INCUMBENT_WIDTHS]
    attempts.append(np.union1d(support, np.flatnonzero(near)))
    tried: set[bytes] = set()
    for subset in attempts:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            break
        if subset.tobytes() in tried:
            continue  # the same columns as an earlier attempt
        tried.add(subset.tobytes())
        result = model.solve(subset, integer=True, time_limit_s=min(remaining / 10, INCUMBENT_SECONDS),
                             gap=INCUMBENT_GAP)
        if result["x"] is not None:
            x = np.zeros(n)
            x[model.choice(result["x"])] = 1.0
            return x, float(model.cost @ x)
    return None, math.inf


def _job_result(problem: Problem, generated: GeneratedColumns, k: int, started: float) -> Result:
    """The chosen column of one job as a re-evaluated :class:`Result`."""
    cost = float(generated.columns.cost[k])
    alone = generated.alone
    alone_best = cost <= alone * (1 + 1e-12) + 1e-15
    status = Status.OPTIMAL if alone_best else Status.FEASIBLE
    bound = cost if alone_best else alone
    message = "" if alone_best else (f"chosen jointly: the shared limits rule out this job's cheapest "
                                     f"plan (${alone:.6f} alone)")
    stats = {"columns": len(generated.columns), "feasible_plans": generated.feasible_plans,
             "column_seconds": generated.seconds, "cached": generated.cached}
    if isinstance(problem, SpotProblem):
        counts, ps = generated.columns.plans
        return spot_result(SpotModel(problem), counts[k], int(ps[k]), status=status, method="joint",
                           started=started, bound=bound, message=message, stats=stats)
    functions, memory, ps = generated.columns.plans
    return serverless_result(ServerlessModel(problem), (functions[k], memory[k], ps[k]), status=status,
                             method="joint", started=started, bound=bound, message=message, stats=stats)


def _without_plans(problems: Sequence[Problem], generated: list[GeneratedColumns] | None, status: Status,
                   started: float, limits: dict[str, float], stats: dict[str, Any], message: str,
                   bound: float | None = None) -> JointResult:
    """A joint result with no plans (infeasible or stopped); per-job bounds where known."""
    results = []
    for i, p in enumerate(problems):
        kind = "spot" if isinstance(p, SpotProblem) else "serverless"
        model = p.model if isinstance(p, SpotProblem) else "lambda-dnn"
        alone = generated[i].alone if generated is not None else None
        job_status = Status.INFEASIBLE if alone is not None and not math.isfinite(alone) else (
            Status.LIMIT if status is Status.LIMIT else Status.UNKNOWN)
        results.append(Result(status=job_status, method="joint", kind=kind, model=model, instance=p.name,
                              bound=alone, solve_seconds=time.perf_counter() - started,
                              message="no plan meets this job's own constraints"
                              if job_status is Status.INFEASIBLE else message))
    stats["total_seconds"] = time.perf_counter() - started
    return JointResult(status, tuple(results), None, math.inf if status is Status.INFEASIBLE else bound,
                       time.perf_counter() - started, message, {}, limits, stats)


def _check_shared_names(problems: Sequence[Problem], shared: SharedLimits) -> None:
    """Refuse shared quotas that name no spot job's instance type or vCPU family."""
    labels, families = set(), set()
    for p in problems:
        if isinstance(p, SpotProblem):
            cols = p.columns()
            labels.update(cols.labels)
            families.update(zip(cols.families, cols.markets))
    for label in shared.quotas:
        if label not in labels:
            raise InvalidInputError(f"shared.quotas.{label}", "no spot job offers this instance type "
                                    f"(offered: {', '.join(sorted(labels)) or 'none'})")
    for q in shared.vcpu_quotas:
        if (q.family, q.market) not in families:
            raise InvalidInputError(f"shared.vcpu_quotas.{q.family}",
                                    f"no spot job offers a type of this family on the {q.market} market")


__all__ = ["DEFAULT_MAX_PLANS_PER_JOB", "ColumnSolution", "GeneratedColumns", "JointResult", "SharedLimits",
           "generate_columns", "serverless_columns", "solve_columns", "solve_many", "spot_columns"]
