"""Step 1 of joint provisioning: the shared limits and every job's exact columns.

The argument (which plans may be dropped, why what remains is the exact cost Pareto front in
shared-resource space) is step 1 of :mod:`dnnprov.solvers.joint.provision`, which solves the column model
these columns make (:mod:`dnnprov.solvers.joint.model`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from dnnprov.formulations.joint import JobColumns
from dnnprov.solvers.search.enumeration import CHUNK, decode_counts

from dnnprov.errors import InvalidInputError
from dnnprov.models.serverless import ServerlessModel
from dnnprov.models.spot import SpotModel
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem, VcpuQuota
from dnnprov.problems.validation import checks as check
from dnnprov.progress import stop_requested

DEFAULT_MAX_PLANS_PER_JOB = 5_000_000
CONCURRENCY_ROW = "concurrency"

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
            quotas[label] = check.integer(f"shared.quotas.{label}", limit, minimum=0)  # at most 2^53
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
        if self.concurrency is not None and (
            isinstance(self.concurrency, bool)
            or not isinstance(self.concurrency, (int, np.integer))
            or self.concurrency < 0
        ):
            raise InvalidInputError("shared.concurrency", f"must be an integer >= 0, got {self.concurrency!r}")
        if self.concurrency is not None:
            object.__setattr__(self, "concurrency", check.integer("shared.concurrency", self.concurrency, minimum=0))

    def rows(self) -> dict[str, float]:
        """Every shared row's name and limit (the ``shared`` of the Pyomo model)."""
        rows: dict[str, float] = {f"quota:{label}": float(n) for label, n in self.quotas.items()}
        rows.update({f"vcpu:{q.family}/{q.market}": float(q.vcpus) for q in self.vcpu_quotas})
        if self.concurrency is not None:
            rows[CONCURRENCY_ROW] = float(self.concurrency)
        return rows


def check_shared_names(problems: Sequence[Problem], shared: SharedLimits) -> None:
    """Refuse shared limits no job uses: quotas naming no spot job's instance type or vCPU
    family, a concurrency limit without a serverless job (each would be ignored)."""
    if shared.concurrency is not None and not any(isinstance(p, ServerlessProblem) for p in problems):
        raise InvalidInputError("shared.concurrency", "no job is serverless: the limit would bound nothing")
    labels: set[str] = set()
    families: set[tuple[str, str]] = set()  # (vCPU family, market)
    for p in problems:
        if isinstance(p, SpotProblem):
            cols = p.columns()
            labels.update(cols.labels)
            families.update(zip(cols.families, cols.markets))
    for label in shared.quotas:
        if label not in labels:
            raise InvalidInputError(
                f"shared.quotas.{label}",
                f"no spot job offers this instance type (offered: {', '.join(sorted(labels)) or 'none'})",
            )
    for q in shared.vcpu_quotas:
        if (q.family, q.market) not in families:
            raise InvalidInputError(
                f"shared.vcpu_quotas.{q.family}", f"no spot job offers a type of this family on the {q.market} market"
            )


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
                raise InvalidInputError(
                    f"{where}.instance_types.{missing[0]}.vcpus",
                    f"needed by the shared vCPU quota of family {q.family} ({q.market})",
                )
            names.append(f"vcpu:{q.family}/{q.market}")
            rows.append(np.where(hit, cols.vcpus, 0).astype(float))
    a = np.array(rows, dtype=float).reshape(len(rows), len(cols))
    return names, a


def spot_box_size(problem: SpotProblem) -> int:
    """Plans (count vectors x PS counts) in a spot job's quota box."""
    cols = problem.columns()
    low, high = problem.constraints.ps_count
    return math.prod(int(up - lo + 1) for lo, up in zip(cols.lower, cols.upper)) * (high - low + 1)


def spot_columns(
    problem: SpotProblem, shared: SharedLimits, *, max_plans: int = DEFAULT_MAX_PLANS_PER_JOB, where: str = "job"
) -> GeneratedColumns:
    """Exact columns of one spot job: the cost Pareto front in shared-resource space.

    Every plan of the quota box is evaluated; see the module docstring for the dominance
    rule. Raises :class:`InvalidInputError` when the box holds more than ``max_plans``
    plans.
    """
    started = time.perf_counter()
    size = spot_box_size(problem)
    if size > max_plans:
        raise InvalidInputError(
            where,
            f"its quota box holds {size:,} plans, more than max_plans_per_job="
            f"{max_plans:,} that joint column generation evaluates; lower its "
            "quotas or raise max_plans_per_job",
        )
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
    plan_ps = best_ps[index]
    cost = best[index]
    usage = counts @ a.T if len(names) else np.zeros((len(index), 0))

    # 4. plans that alone exceed a shared limit can never be chosen
    fits = (usage <= limits + 1e-9).all(axis=1)
    counts, plan_ps, cost, usage = counts[fits], plan_ps[fits], cost[fits], usage[fits]

    # 5. vCPU rows are weighted sums: dominance in row-usage space prunes further
    if any(r.startswith("vcpu:") for r in names):
        kept = pareto_pairwise(cost, usage)
        counts, plan_ps, cost, usage = counts[kept], plan_ps[kept], cost[kept], usage[kept]

    order = np.argsort(cost, kind="stable")
    columns = JobColumns(
        problem.name,
        cost[order],
        {r: usage[order, i] for i, r in enumerate(names)},
        plans=(counts[order], plan_ps[order]),
    )
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
        if kept and (front[: len(kept)] <= usage[i]).all(axis=1).any():
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
    memory, ps = (
        a.ravel()
        for a in np.meshgrid(
            np.array(problem.memory_grid(), dtype=np.int64),
            np.arange(ps_low, ps_high + 1, dtype=np.int64),
            indexing="ij",
        )
    )
    cost = np.empty((len(functions), len(memory)))
    step = max(1, CHUNK // max(len(functions), 1))
    for start in range(0, len(memory), step):
        part = slice(start, start + step)
        ev = model.evaluate(functions[:, None], memory[None, part], ps[None, part])
        cost[:, part] = np.where(ev.feasible, ev.cost, np.inf)
    pair = cost.argmin(axis=1)
    per_n = cost[np.arange(len(functions)), pair]  # cheapest plan of each n
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
    columns = JobColumns(
        problem.name,
        per_n[keep],
        {r: u[order] for r, u in usage.items()},
        plans=(functions[keep], memory[pair[keep]], ps[pair[keep]]),
    )
    return GeneratedColumns(columns, alone, int(np.isfinite(cost).sum()), cost.size, time.perf_counter() - started)


def cache_key(problem: Problem) -> str:
    """Jobs equal up to their name and notes have the same columns."""
    data = problem.to_dict()
    data.pop("name", None)
    data.pop("notes", None)
    return json.dumps(data, sort_keys=True)


def generate_columns(
    problems: Sequence[Problem],
    shared: SharedLimits,
    *,
    max_plans_per_job: int = DEFAULT_MAX_PLANS_PER_JOB,
    deadline: float = math.inf,
    cache: bool = True,
    skip: frozenset[int] = frozenset(),
) -> list[GeneratedColumns] | None:
    """Columns of every job (``None`` if ``deadline``, a ``perf_counter`` value, passed first).

    Jobs identical up to name and notes share one generation when ``cache`` is on.
    Box sizes are checked for every spot job before any is evaluated. Jobs in ``skip`` (priced
    instead, :mod:`dnnprov.solvers.joint.pricing.priced`) get no columns here (an empty placeholder).
    """
    for i, p in enumerate(problems):
        if isinstance(p, SpotProblem) and i not in skip:
            size = spot_box_size(p)
            if size > max_plans_per_job:
                raise InvalidInputError(
                    f"problems[{i}] ({p.name})",
                    f"its quota box holds {size:,} plans, more than max_plans_per_job="
                    f"{max_plans_per_job:,} that joint column generation evaluates; "
                    "lower its quotas or raise max_plans_per_job",
                )
    out: list[GeneratedColumns] = []
    seen: dict[str, GeneratedColumns] = {}
    for i, p in enumerate(problems):
        if time.perf_counter() > deadline or stop_requested():
            return None
        if i in skip:
            out.append(GeneratedColumns(JobColumns(p.name, np.zeros(0)), math.inf, 0, 0))
            continue
        key = cache_key(p) if cache else None
        if key is not None and key in seen:
            g = seen[key]
            out.append(
                GeneratedColumns(
                    JobColumns(p.name, g.columns.cost, g.columns.usage, g.columns.plans),
                    g.alone,
                    g.feasible_plans,
                    0,
                    0.0,
                    cached=True,
                )
            )
            continue
        if isinstance(p, SpotProblem):
            g = spot_columns(p, shared, max_plans=max_plans_per_job, where=f"problems[{i}] ({p.name})")
        else:
            g = serverless_columns(p, shared)
        if key is not None:
            seen[key] = g
        out.append(g)
    return out
