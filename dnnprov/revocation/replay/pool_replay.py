"""The traces of a replay checked against its problem, and the ``mpc`` table planned on them.

``dnnprov simulate`` runs the control loop on the trace cloud (:mod:`dnnprov.control.replay`);
this module holds what that replay, ``risk plan`` and the service check and build before any
run, on the revocation side of the package (it imports nothing of :mod:`dnnprov.control`):

- :class:`TracePools`: the traces of each spot type, aligned (the traces of one type are its
  pools, one per zone, read from one offset), each long enough for a run's window
  (``horizon x T_obj``) inside the replay period: a trace or period shorter than a window is
  refused, never looped;
- the model-predictive table of ``mpc`` (:meth:`TracePools.takeover_table`) and the
  availability models it is planned on, fitted on a period of the traces
  (:meth:`TracePools.fitted_models`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dnnprov.errors import InvalidInputError
from dnnprov.models.spot import SpotModel
from dnnprov.models.training_progress import JOIN_OVERHEAD_S, progress_target
from dnnprov.problems.interruption import Trace
from dnnprov.problems.spot import ON_DEMAND_SUFFIX, SpotProblem
from dnnprov.problems.validation import checks as check
from dnnprov.result import SpotPlan
from dnnprov.revocation.availability import (
    AvailabilityModel,
    aligned,
    fit_availability,
    period_ticks,
    window_starts,
)
from dnnprov.revocation.policies import RunningTable, TakeoverTable
from dnnprov.revocation.replay.simulate import ClusterSpeeds, check_run_ticks


class TracePools:
    """A problem's traces, checked for replays (module docstring); ``period`` bounds the window starts."""

    def __init__(
        self,
        problem: SpotProblem,
        traces: Mapping[str, Sequence[Trace]],
        *,
        join_s: float = JOIN_OVERHEAD_S,
        horizon: float = 3.0,
        period: tuple[float, float] = (0.0, 1.0),
    ) -> None:
        if problem.model != "paper":
            raise InvalidInputError("model", "replays need the paper model (progress linear in time)")
        join_s = check.number("join_s", join_s, minimum=0)
        horizon = check.number("horizon", horizon, minimum=1)
        self.problem, self.join_s, self.period = problem, join_s, period
        self.horizon_s = horizon * problem.slo.time_s
        self.model = SpotModel(problem)
        self.types = [t.name for t in problem.instance_types]
        for name, items in traces.items():
            if name not in self.types:
                raise InvalidInputError(
                    f"--trace {name}", f"not an instance type of the problem ({', '.join(self.types)})"
                )
        every = [t for items in traces.values() for t in items]
        _, self.gap_s = aligned(every)
        for trace in every:
            check_run_ticks(trace, self.horizon_s)
        self.traces = {self.types.index(k): list(v) for k, v in traces.items()}
        for items in self.traces.values():
            self.window_starts(min(items, key=lambda t: len(t.alive)), aligned(items)[0])
        self.spot_col = [self.model.columns.labels.index(n) for n in self.types]
        self._speed = ClusterSpeeds(self.model, self.spot_col)

    # ------------------------------------------------------------------ model lookups
    def speed(self, per_type: np.ndarray, ps: int) -> float:
        """Progress per second of a cluster of workers per type (market does not matter)."""
        return self._speed(per_type, ps)

    def plan_workers(self, plan: SpotPlan) -> tuple[np.ndarray, np.ndarray]:
        """The plan's workers per type (both markets) and its on-demand workers per type."""
        spot = np.array([plan.counts.get(n, 0) for n in self.types], dtype=np.int64)
        od = np.array([plan.counts.get(n + ON_DEMAND_SUFFIX, 0) for n in self.types], dtype=np.int64)
        return spot + od, od

    # ------------------------------------------------------------------ windows
    def window_starts(self, trace: Trace, length: int) -> tuple[int, int]:
        """The ticks a run's window may start at in the replay period of traces of ``length``
        common ticks: the whole window lies in the period, so it never runs past the traces'
        end nor into another period (a fit period before a held-out one)."""
        first, end = period_ticks(length, self.period)
        return window_starts(trace, self.horizon_s, first, end, self.period if self.period != (0.0, 1.0) else None)

    def fitted_models(
        self, plan: SpotPlan, traces: Mapping[str, Sequence[Trace]], fit_period: tuple[float, float]
    ) -> dict[str, AvailabilityModel]:
        """The availability model of each type of ``plan``, fitted on ``fit_period`` of its traces
        (a period holding at least one run's window)."""
        want, _ = self.plan_workers(plan)
        models = {}
        for i in np.flatnonzero(want):
            kind = self.types[int(i)]
            if kind not in traces:
                raise InvalidInputError(f"--trace {kind}", "mpc fits every type of the plan: give this type's traces")
            used = traces[kind]
            length = aligned(used)[0]
            window_starts(
                min(used, key=lambda t: len(t.alive)), self.horizon_s, *period_ticks(length, fit_period), fit_period
            )
            models[kind] = fit_availability(
                used, max(self.problem.instance_types[int(i)].quota, int(want[i])), fit_period
            )
        return models

    # ------------------------------------------------------------------ the mpc table
    def takeover_table(
        self, plan: SpotPlan, model: AvailabilityModel | Mapping[str, AvailabilityModel], *, price_joins: bool = True
    ) -> TakeoverTable | RunningTable:
        """:func:`takeover_table` on the traces' tick (a model fitted on another tick is refused)."""
        return takeover_table(self.problem, plan, model, gap_s=self.gap_s, join_s=self.join_s, price_joins=price_joins)


def takeover_table(
    problem: SpotProblem,
    plan: SpotPlan,
    model: AvailabilityModel | Mapping[str, AvailabilityModel],
    *,
    gap_s: float | None = None,
    join_s: float = JOIN_OVERHEAD_S,
    price_joins: bool = True,
) -> TakeoverTable | RunningTable:
    """The exact model-predictive table of ``plan`` under ``model`` (one type's, or one per
    type of the plan by name) on ticks of ``gap_s`` (default: the model's): clusters of up to
    the plan's workers of each of its types (the clusters its run's start covers), with the
    plan's PS. A one-type plan gets a :class:`RunningTable` (it tracks the holdings and prices
    joins) when that fits its size limit and ``price_joins``; otherwise (several types) a
    :class:`TakeoverTable`. ``dnnprov run --policy mpc`` builds it from a model alone."""
    speed_model = SpotModel(problem)
    types = [t.name for t in problem.instance_types]
    speeds = ClusterSpeeds(speed_model, [speed_model.columns.labels.index(n) for n in types])
    target = progress_target(speed_model)
    od_price = np.array(
        [t.on_demand_price_per_h if t.on_demand_price_per_h is not None else math.nan for t in problem.instance_types]
    )
    want = np.array([plan.counts.get(n, 0) + plan.counts.get(n + ON_DEMAND_SUFFIX, 0) for n in types], dtype=np.int64)
    used = [int(i) for i in np.flatnonzero(want)]
    if not isinstance(model, AvailabilityModel):
        models = []
        for i in used:
            if types[i] not in model:
                raise InvalidInputError("--model", f"no availability model of {types[i]}, a type of the plan")
            models.append(model[types[i]])
    elif len(used) == 1:
        models = [model]
    else:
        raise InvalidInputError(
            "--model",
            f"one availability model covers one type; the plan uses {len(used)}: "
            "fit each type's on --fit-period instead",
        )
    gap = models[0].gap_s if gap_s is None else gap_s
    for i, m in zip(used, models):
        if abs(m.gap_s - gap) > 1e-9:
            raise InvalidInputError("--model", f"fitted on {m.gap_s:g} s ticks; the traces have {gap:g} s")
        if math.isnan(od_price[i]):
            raise InvalidInputError(
                f"instance_types.{types[i]}.on_demand_price_per_h",
                "missing: the mpc policy launches on-demand instances",
            )
    most = tuple(int(want[i]) for i in used)
    u0 = speeds.run_start(want, plan.ps)
    clusters = np.array(list(itertools.product(*[range(w + 1) for w in most])), dtype=np.int64)
    per_cluster = np.zeros(len(clusters))
    for c, cluster in enumerate(clusters):
        workers = np.zeros(len(types), dtype=np.int64)
        workers[used] = cluster
        per_cluster[c] = speeds(workers, plan.ps) / (target - u0) if cluster.any() else 0.0
    spot_price = []
    for i in used:
        t = problem.instance_types[i]
        prices = [z.spot_price_per_h for z in t.zones if z.spot_price_per_h is not None]
        spot_price.append(float(np.mean(prices)) if prices else t.spot_price_per_h)
    args: dict[str, Any] = {
        "types": tuple(used),
        "most": most,
        "gap_s": gap,
        "deadline_s": problem.slo.time_s,
        "join_s": join_s,
        "progress_per_s": per_cluster,
        "spot_price": np.array(spot_price),
        "od_price": od_price[used],
        "fixed_price": plan.ps * problem.platform.ps_price_per_h,
        "models": tuple(models),
    }
    if price_joins and len(used) == 1 and RunningTable.fits(most[0], problem.slo.time_s, gap):
        return RunningTable(**args)
    return TakeoverTable(**args)
