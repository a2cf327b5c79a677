"""Joint provisioning of many jobs sharing quotas, solved to proven optimality.

The whole argument reads here; the code is split by role: the shared limits and the column
generation (step 1) in :mod:`dnnprov.solvers.joint.columns`, the column model on highspy with
its LP and MILPs (:class:`~dnnprov.solvers.joint.model.ColumnModel`) in
:mod:`dnnprov.solvers.joint.model`, and the solve (steps 2 and 3, the per-job results) here.
The public names of both stay importable from this module.

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
   trusted from the LP solver's tolerances, in floats with a rigorous error term
   (:meth:`ColumnModel.lagrangian`: L is a safe dual bound <= the exact L, and every
   computed delta is <= the exact one), so the fixing below never drops an optimal
   column, whatever the magnitudes (issue 19).

3. Reduced-cost fixing and verified MILPs. With S(tau) = {columns with delta <= tau}:
   a joint solution using a column outside S(tau) costs >= L + delta > L + tau, so

       OPT >= min(B_S, L + tau)

   for B_S a *verified* lower bound on the MILP over S(tau): the HiGHS driver's
   ``solve_milp`` (HiGHS finds the point; its own branch and bound over safe dual bounds
   proves it; HiGHS's ``optimal`` and ``mip_dual_bound`` are never a proof). The result
   is ``optimal`` once the best bound so far (L alone, or a round's) meets the incumbent U
   within OPTIMAL_TOLERANCE (relative 1e-8, inside the 1e-6 contract of docs/solvers.md).
   tau starts small (about four columns per job, capped at U - L for the LP-rounding
   incumbent U) and widens fourfold in columns, never beyond U - L, where L + tau >= U
   and a verified B_S settles it. If the proof does not close it is ``limit`` with the
   incumbent and the verified bound. ``infeasible`` needs a verified Farkas certificate
   of the LP relaxation or a verified branch and bound of the full MILP that closes
   every node; HiGHS's ``infeasible`` alone gives ``limit``.
   Incumbent MILPs are solved cold: see :meth:`ColumnModel.solve` on start solutions.

Per-job results: a job whose plan costs what the job alone would cost at best (its
cheapest feasible plan, known exactly from step 1) is ``optimal``; a job that the shared
limits pushed to a dearer plan is ``feasible`` with ``bound`` = its stand-alone optimum.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from dnnprov.solvers.explain.infeasibility import explain
from dnnprov.solvers.explain.joint import shared_limit_reasons
from dnnprov.solvers.joint.columns import (
    DEFAULT_MAX_PLANS_PER_JOB,
    GeneratedColumns,
    Problem,
    SharedLimits,
    check_shared_names,
    generate_columns,
    pareto_grid,
    serverless_columns,
    spot_box_size,
    spot_columns,
)
from dnnprov.solvers.joint.master import ColumnSolution, solve_columns
from dnnprov.solvers.joint.model import ColumnModel
from dnnprov.solvers.joint.pricing.priced import PricedJob, own_optima_bound, solve_priced, start_jobs
from dnnprov.solvers.outcome import serverless_result, spot_result

from dnnprov.errors import InvalidInputError
from dnnprov.models.serverless import ServerlessModel
from dnnprov.models.spot import SpotModel
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.problems.validation.checks import integer as checked_integer, number as checked_number
from dnnprov.progress import JOINT_LOGGER_NAME, Clock, SolverLog
from dnnprov.result import Reason, Result, Status, finite_or_none


# ---------------------------------------------------------------------- result
@dataclass(frozen=True)
class JointResult:
    """Outcome of :func:`solve_many`: one :class:`Result` per job plus the joint figures.

    ``status`` is ``optimal`` (total cost proven minimal: ``bound == cost``), ``limit``
    (time limit: incumbent and proven bound, or no plan), or ``infeasible`` (proven: some
    job has no feasible plan, or the shared limits cannot all be met at once).
    ``usage`` and ``limits`` give each shared row's total use and its limit;
    ``infeasibility`` says which shared limits cannot hold when jobs with plans of their own
    have no joint plan (:mod:`dnnprov.solvers.explain.joint`).
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
    infeasibility: tuple[Reason, ...] = ()

    @property
    def gap(self) -> float | None:
        """Relative gap ``(cost - bound) / cost`` where both are known."""
        if self.cost is None or self.bound is None:
            return None
        return 0.0 if self.cost == 0 else max(0.0, (self.cost - self.bound) / self.cost)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the CLI's ``--json`` output)."""
        return {
            "status": self.status.value,
            "cost": finite_or_none(self.cost),
            "bound": finite_or_none(self.bound),
            "gap": finite_or_none(self.gap),
            "solve_seconds": self.solve_seconds,
            "message": self.message,
            "shared": {r: {"limit": self.limits[r], "used": self.usage.get(r)} for r in self.limits},
            "stats": dict(self.stats),
            "jobs": [r.to_dict() for r in self.results],
            "infeasibility": [reason.to_dict() for reason in self.infeasibility],
        }

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), **kwargs)

    def summary(self) -> str:
        """Readable summary: one line per job, then totals and shared rows."""
        lines = [f"{len(self.results)} jobs solved jointly: {self.status.value}"]
        width = max((len(r.instance) for r in self.results), default=0)
        for i, r in enumerate(self.results):
            cost = f"${r.cost:.6f}" if r.cost is not None else "-"
            lines.append(
                f"  [{i}] {r.instance:<{width}} {r.kind:<10} {r.status.value:<10} {cost:>13}  "
                f"{r.plan if r.plan is not None else r.message}"
            )
            lines.extend(f"      - {reason.text}" for reason in r.infeasibility)
        lines.extend(f"  why: {reason.text}" for reason in self.infeasibility)
        if self.cost is not None:
            lines.append(f"  total cost: ${self.cost:.6f}")
        if self.bound is not None and math.isfinite(self.bound):
            lines.append(f"  bound     : ${self.bound:.6f} (gap {100 * (self.gap or 0):.4f} %)")
        for row, limit in self.limits.items():
            used = self.usage.get(row)
            lines.append(f"  {row:<28} {'-' if used is None else f'{used:g}':>8} of {limit:g}")
        s = self.stats
        if "columns" in s:
            lines.append(
                f"  columns {s['columns']:,} -> {s.get('columns_after_fixing', s['columns']):,} after "
                f"reduced-cost fixing; times: columns {s.get('columns_seconds', 0):.2f} s, "
                f"LP {s.get('lp_seconds', 0):.2f} s, incumbent {s.get('incumbent_seconds', 0):.2f} s, "
                f"MILP {s.get('milp_seconds', 0):.2f} s"
            )
        lines.append(f"  solve: {self.solve_seconds:.3f} s")
        if self.message:
            lines.append(f"  note : {self.message}")
        return "\n".join(lines)

    __str__ = summary


# ---------------------------------------------------------------------- the solve
def solve_many(
    problems: Sequence[Problem],
    *,
    shared: SharedLimits | None = None,
    time_limit_s: float = 300.0,
    max_plans_per_job: int = DEFAULT_MAX_PLANS_PER_JOB,
    fixing: bool = True,
    cache: bool = True,
    explain: bool = True,
    pricing: bool | None = None,
) -> JointResult:
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
        Largest spot quota box (count vectors x PS counts) whose plans are enumerated; a job
        with a larger box is priced by the exact single-job solver instead
        (:mod:`dnnprov.solvers.joint.pricing.priced`), or refused with :class:`InvalidInputError`
        when ``pricing`` is ``False``.
    fixing
        Reduced-cost fixing (on by default; off solves the MILP over every column, for
        cross-checks).
    cache
        Share column generation between jobs equal up to name and notes.
    pricing
        ``None`` (default): spot jobs with boxes beyond ``max_plans_per_job`` are priced, the
        others enumerated; ``True``: every spot job is priced; ``False``: none is.
    explain
        A proven-infeasible answer says why (``infeasibility``, :mod:`dnnprov.solvers.explain.joint`), in the
        time left; off, it does not (the relaxed solves of the explanation turn it off).

    Progress goes to the ``dnnprov.joint`` logger at INFO (``solve-many --log`` sends it to
    stderr; silent otherwise): a header, then the incumbent and the proven bound after the
    columns, each pricing round, the MILP over the columns and the closing step, and the end.
    """
    started = time.perf_counter()
    shared = shared if shared is not None else SharedLimits()
    problems = list(problems)
    if not problems:
        raise InvalidInputError("problems", "at least one job is needed")
    for i, p in enumerate(problems):
        if not isinstance(p, (SpotProblem, ServerlessProblem)):
            raise InvalidInputError(
                f"problems[{i}]", f"expected SpotProblem or ServerlessProblem, got {type(p).__name__}"
            )
    if not isinstance(shared, SharedLimits):
        raise InvalidInputError("shared", f"expected SharedLimits, got {type(shared).__name__}")
    time_limit_s = checked_number("time_limit_s", time_limit_s, exclusive_minimum=0)
    max_plans_per_job = checked_integer("max_plans_per_job", max_plans_per_job, minimum=0)
    deadline = started + time_limit_s
    check_shared_names(problems, shared)
    limits = shared.rows()
    clock = Clock(time_limit_s)
    journal = SolverLog(clock, logging.getLogger(JOINT_LOGGER_NAME))
    stats: dict[str, Any] = {
        "jobs": len(problems),
        "spot_jobs": sum(isinstance(p, SpotProblem) for p in problems),
        "serverless_jobs": sum(isinstance(p, ServerlessProblem) for p in problems),
    }

    t0 = time.perf_counter()
    skip = frozenset(
        i
        for i, p in enumerate(problems)
        if isinstance(p, SpotProblem) and (pricing or (pricing is None and spot_box_size(p) > max_plans_per_job))
    )
    journal.header(
        f"dnnprov solve-many: {len(problems)} jobs ({stats['spot_jobs']} spot, {len(skip)} of them priced; "
        f"{stats['serverless_jobs']} serverless)",
        [f"{len(limits)} shared rows, time limit {time_limit_s:g} s"],
    )
    generated = generate_columns(
        problems, shared, max_plans_per_job=max_plans_per_job, deadline=deadline, cache=cache, skip=skip
    )
    priced: dict[int, PricedJob] = {}
    if generated is not None:
        priced = start_jobs(problems, shared, skip, generated, deadline, cache, journal)
    stats["columns_seconds"] = time.perf_counter() - t0
    if generated is None or len(priced) < len(skip):
        journal.final(Status.LIMIT.value, "time limit reached during column generation")
        return _without_plans(
            problems, None, Status.LIMIT, started, limits, stats, "time limit reached during column generation"
        )
    stats["priced_jobs"] = len(priced)
    stats["plans_evaluated"] = sum(g.plans_evaluated for g in generated)
    stats["cached_jobs"] = sum(g.cached for g in generated)
    stats["columns"] = sum(len(g.columns) for g in generated)
    journal.progress(math.inf, own_optima_bound(generated), f"{stats['columns']} columns", force=True)
    empty = [i for i, g in enumerate(generated) if not len(g.columns)]
    if empty:
        i = empty[0]
        why = (
            "has no plan meeting its own constraints"
            if not math.isfinite(generated[i].alone)
            else "has no plan within the shared limits"
        )
        shared_cause = all(math.isfinite(generated[j].alone) for j in empty)
        journal.final(Status.INFEASIBLE.value, f"job {i} ({problems[i].name}) {why}")
        return _without_plans(
            problems,
            generated,
            Status.INFEASIBLE,
            started,
            limits,
            stats,
            f"proven infeasible: job {i} ({problems[i].name}) {why}"
            + (f" (and {len(empty) - 1} more jobs)" if len(empty) > 1 else ""),
            deadline=deadline,
            reasons=_shared_reasons(problems, shared, deadline, explain and shared_cause),
        )

    if priced:
        solved = solve_priced(generated, priced, [p.name for p in problems], limits, deadline, fixing, journal)
    else:
        solved = solve_columns([g.columns for g in generated], limits, deadline=deadline, fixing=fixing)
    stats.update(solved.stats)
    journal.progress(
        solved.cost if solved.cost is not None else math.inf,
        solved.bound if solved.bound is not None else -math.inf,
        "final",
        force=True,
    )
    journal.final(solved.status.value, solved.message)
    if solved.picked is None:
        return _without_plans(
            problems,
            generated,
            solved.status,
            started,
            limits,
            stats,
            solved.message,
            bound=solved.bound,
            reasons=_shared_reasons(problems, shared, deadline, explain and solved.status is Status.INFEASIBLE),
        )
    results = tuple(_job_result(p, g, int(k), started) for p, g, k in zip(problems, generated, solved.picked))
    stats["total_seconds"] = time.perf_counter() - started
    return JointResult(
        solved.status,
        results,
        solved.cost,
        solved.bound,
        time.perf_counter() - started,
        solved.message,
        solved.usage,
        limits,
        stats,
    )


def _job_result(problem: Problem, generated: GeneratedColumns, k: int, started: float) -> Result:
    """The chosen column of one job as a re-evaluated :class:`Result`."""
    cost = float(generated.columns.cost[k])
    alone = generated.alone
    alone_best = cost <= alone * (1 + 1e-12) + 1e-15
    status = Status.OPTIMAL if alone_best else Status.FEASIBLE
    bound = cost if alone_best else alone
    message = (
        ""
        if alone_best
        else (f"chosen jointly: the shared limits rule out this job's cheapest plan (${alone:.6f} alone)")
    )
    stats = {
        "columns": len(generated.columns),
        "feasible_plans": generated.feasible_plans,
        "column_seconds": generated.seconds,
        "cached": generated.cached,
    }
    # the formulation keeps plans opaque; the column generation stored these arrays there
    if isinstance(problem, SpotProblem):
        counts, ps = cast("tuple[np.ndarray, np.ndarray]", generated.columns.plans)
        return spot_result(
            SpotModel(problem),
            counts[k],
            int(ps[k]),
            status=status,
            method="joint",
            started=started,
            bound=bound,
            message=message,
            stats=stats,
        )
    functions, memory, ps = cast("tuple[np.ndarray, np.ndarray, np.ndarray]", generated.columns.plans)
    return serverless_result(
        ServerlessModel(problem),
        (functions[k], memory[k], ps[k]),
        status=status,
        method="joint",
        started=started,
        bound=bound,
        message=message,
        stats=stats,
    )


def _shared_reasons(
    problems: Sequence[Problem], shared: SharedLimits, deadline: float, wanted: bool
) -> tuple[Reason, ...]:
    """The shared limits that cannot hold (:mod:`dnnprov.solvers.explain.joint`), when ``wanted``."""
    return shared_limit_reasons(problems, shared, deadline, solve_many) if wanted else ()


def _without_plans(
    problems: Sequence[Problem],
    generated: list[GeneratedColumns] | None,
    status: Status,
    started: float,
    limits: dict[str, float],
    stats: dict[str, Any],
    message: str,
    bound: float | None = None,
    deadline: float | None = None,
    reasons: tuple[Reason, ...] = (),
) -> JointResult:
    """A joint result with no plans (infeasible or stopped); per-job bounds where known.

    A job infeasible on its own gets its reasons (:mod:`infeasibility`) in the time left before
    ``deadline``; ``reasons`` are the joint ones (the shared limits that cannot hold).
    """

    results = []
    for i, p in enumerate(problems):
        kind = "spot" if isinstance(p, SpotProblem) else "serverless"
        model = p.model if isinstance(p, SpotProblem) else "lambda-dnn"
        alone = generated[i].alone if generated is not None else None
        job_status = (
            Status.INFEASIBLE
            if alone is not None and not math.isfinite(alone)
            else (Status.LIMIT if status is Status.LIMIT else Status.UNKNOWN)
        )
        job = Result(
            status=job_status,
            method="joint",
            kind=kind,
            model=model,
            instance=p.name,
            bound=alone,
            solve_seconds=time.perf_counter() - started,
            message="no plan meets this job's own constraints" if job_status is Status.INFEASIBLE else message,
        )
        if deadline is not None:
            job = explain(job, p, clock=Clock(max(deadline - time.perf_counter(), 0.0)))
        results.append(job)
    stats["total_seconds"] = time.perf_counter() - started
    return JointResult(
        status,
        tuple(results),
        None,
        math.inf if status is Status.INFEASIBLE else bound,
        time.perf_counter() - started,
        message,
        {},
        limits,
        stats,
        infeasibility=reasons,
    )


__all__ = [
    "DEFAULT_MAX_PLANS_PER_JOB",
    "ColumnModel",
    "ColumnSolution",
    "GeneratedColumns",
    "JointResult",
    "SharedLimits",
    "generate_columns",
    "pareto_grid",
    "serverless_columns",
    "solve_columns",
    "solve_many",
    "spot_columns",
]
