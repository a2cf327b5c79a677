"""Plans and policies chosen together: the plan cheapest under ``mpc`` on the fit period.

The nominal optimum prices a plan as if its spot instances ran undisturbed. Here every
single-type plan (type with traces, workers ``W`` within the quota, PS count in range,
inside the loss model's validity domain, as the solver requires) is priced by replaying the ``mpc`` policy, planned on the availability model fitted on
``fit_period``, over windows drawn in that same period (:func:`replay_pools`): the mean
cost of its runs, with the joins, revocations and safety net the table leaves out. A
candidate counts only when at least :data:`MIN_MET` of those runs meet T_obj; the
cheapest counts (ties: the smaller plan). The choice is judged elsewhere, on another
period. ``W`` is the most workers the policy may hold (it resizes within ``0..W``), and a
run of the plan starts where the W-worker loss curve starts (docs/revocation.md, the
progress model): more workers give the policy more room but more normalized iterations
to train. The choice is an estimate on the fit period, so the result says ``feasible``,
never ``optimal``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from dnnprov.revocation.availability import fit_availability
from dnnprov.revocation.pool_replay import PoolReplay, replay_pools
from dnnprov.errors import InvalidInputError
from dnnprov.problems.interruption import Trace
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import Result, SpotPlan, Status
from dnnprov.solvers.robust import JOIN_OVERHEAD_S

MAX_CANDIDATES = 512
#: Share of the fit period's runs a candidate must finish by T_obj.
MIN_MET = 0.99
DEFAULT_RUNS = 100


@dataclass(frozen=True)
class PlanChoice:
    """The chosen plan and every candidate's expected cost."""

    problem: SpotProblem
    plan: SpotPlan | None
    expected_cost: float | None
    candidates: tuple[dict[str, Any], ...]
    source: str
    #: Candidates left unpriced because the time limit came first (0: every one priced).
    unpriced: int = 0
    time_limit_s: float | None = None

    def stopped(self) -> str:
        """What the time limit left out ("" when every candidate was priced)."""
        if not self.unpriced:
            return ""
        return (f"time limit of {self.time_limit_s:g} s reached: {len(self.candidates)} candidates priced, "
                f"{self.unpriced} not priced")

    def result(self) -> Result:
        """A solve-style result (a plan document for ``simulate``, ``export``); status
        ``limit`` when the time limit left candidates unpriced."""
        stopped = self.stopped()
        status = Status.LIMIT if stopped else Status.FEASIBLE if self.plan is not None else Status.UNKNOWN
        details = {"policy": "mpc", "model": self.source, "candidates": list(self.candidates),
                   "unpriced_candidates": self.unpriced}
        if self.plan is None:
            message = "; ".join(filter(None, ["no candidate plan priced meets T_obj under the model", stopped]))
            return Result(status=status, method="risk-plan", kind="spot", model=self.problem.model,
                          instance=self.problem.name, message=message, details=details)
        message = "; ".join(filter(None, ["cheapest mean cost under the mpc policy replayed on the fit period",
                                          stopped]))
        return Result(status=status, method="risk-plan", kind="spot", model=self.problem.model,
                      instance=self.problem.name, plan=self.plan, cost=self.expected_cost,
                      message=message, details=details)

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the result's."""
        return self.result().to_dict()

    def summary(self) -> str:
        """Human-readable lines."""
        stopped = [f"  {self.stopped()} (the cheapest of those priced is shown)"] if self.unpriced else []
        if self.plan is None:
            return "\n".join([f"{self.problem.name}: no plan priced meets T_obj under the fitted model", *stopped])
        lines = [f"{self.problem.name}: {self.plan} under mpc, expected ${self.expected_cost:.4f} ({self.source})",
                 *stopped]
        ranked = sorted(self.candidates, key=lambda c: c["expected_cost"] if c["expected_cost"] is not None else math.inf)
        for c in ranked[:5]:
            cost = "cannot meet T_obj" if c["expected_cost"] is None else f"${c['expected_cost']:.4f}"
            lines.append(f"  {c['workers']} x {c['type']}, {c['ps']} PS: {cost}")
        return "\n".join(lines)


def choose_plan(problem: SpotProblem, traces: Mapping[str, Sequence[Trace]], *, zones: bool,
                fit_period: tuple[float, float] = (0.0, 1.0), join_s: float = JOIN_OVERHEAD_S,
                runs: int = DEFAULT_RUNS, seed: int = 0, time_limit_s: float | None = None) -> PlanChoice:
    """Price every single-type plan by ``mpc`` replayed on the fit period (module docstring).

    ``time_limit_s`` (wall-clock seconds from this call): a candidate whose replay the limit
    cuts short is left out, and none is started after it; the choice then holds the
    cheapest of those priced and counts the rest (``unpriced``).
    """
    started = time.perf_counter()
    if not traces:
        raise InvalidInputError("--trace", "give the traces of at least one spot type")
    replay = PoolReplay(problem, traces, zones=zones, join_s=join_s, period=fit_period)   # windows fit the period
    low, high = problem.constraints.ps_count
    count = sum(problem.instance_types[replay.types.index(n)].quota for n in traces) * (high - low + 1)
    if count > MAX_CANDIDATES:
        raise InvalidInputError("--trace", f"{count:,} candidate plans are more than the limit of {MAX_CANDIDATES}")
    best: tuple[float, SpotPlan] | None = None
    candidates, sources, unpriced = [], [], 0
    for name, items in traces.items():
        quota = problem.instance_types[replay.types.index(name)].quota
        model = None
        for ps in range(low, high + 1):
            for workers in range(1, quota + 1):
                plan = SpotPlan(counts={name: workers}, ps=ps)
                cluster = _one_type(replay, name, workers)
                if replay.speed(cluster, ps) <= 0:
                    continue                             # no progress (e.g. outside the loss model's domain)
                left = None if time_limit_s is None else time_limit_s - (time.perf_counter() - started)
                if left is not None and left <= 0:
                    unpriced += 1
                    continue
                if model is None:
                    model = fit_availability(items if zones else items[:1], quota, fit_period)
                    sources.append(model.source)
                priced = replay_pools(problem, plan, {name: items}, policy="mpc", zones=zones, runs=runs, seed=seed,
                                      join_s=join_s, period=fit_period, model=model, time_limit_s=left)
                if priced.settings["stopped_by_time_limit"]:
                    unpriced += 1                        # priced on fewer runs than the others: left out
                    continue
                summary = priced.summary()
                ok = summary["met_deadline"] >= MIN_MET
                cost = float(summary["cost_mean"])
                candidates.append({"type": name, "workers": workers, "ps": ps, "met_deadline": summary["met_deadline"],
                                   "expected_cost": cost if ok else None})
                if ok and (best is None or cost < best[0]):
                    best = (cost, plan)
    return PlanChoice(problem=problem, plan=best[1] if best else None, expected_cost=best[0] if best else None,
                      candidates=tuple(candidates), source="; ".join(sources), unpriced=unpriced,
                      time_limit_s=time_limit_s)


def _one_type(replay: PoolReplay, name: str, workers: int) -> np.ndarray:
    """Workers per type of a plan of ``workers`` instances of ``name``."""
    out = np.zeros(len(replay.types), dtype=np.int64)
    out[replay.types.index(name)] = workers
    return out
