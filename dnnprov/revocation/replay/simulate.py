"""Pieces every trace replay shares (``dnnprov simulate``, ``risk plan``, the hindsight bound).

``dnnprov simulate`` is the control loop of :mod:`dnnprov.control.loop` on the trace cloud
(:mod:`dnnprov.control.replay`); the tick and event engines that lived here are gone (issue
28: one engine). What stays is what the loop, its stand-in trainer and the bounds share:

- the progress model's speeds (:class:`ClusterSpeeds`, :func:`domain_speed`): progress
  ``u = 1 / (L - g5)`` grows at the cluster's speed; training ends at ``u* = 1 / (L_obj - g5)``;
  a cluster outside the loss model's validity domain does not train;
- the checks of a replay's inputs (:func:`check_plan_traces`, :func:`check_plan_trains`,
  :func:`check_run_ticks`) and the names of its policies (:data:`POLICIES`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np

from dnnprov.errors import InvalidInputError
from dnnprov.models.spot import SpotModel
from dnnprov.models.training_progress import progress_speed
from dnnprov.problems.interruption import Trace
from dnnprov.problems.spot import ON_DEMAND_SUFFIX, SpotProblem
from dnnprov.result import SpotPlan
from dnnprov.revocation.policy_view import POLICY_NAMES

#: The policies of ``simulate`` and ``run`` (:mod:`dnnprov.revocation.policies`; named in :mod:`dnnprov.revocation.policy_view`).
POLICIES = POLICY_NAMES
#: How the ``replan`` policy solves a takeover: exactly, or by spotDNN's Algorithm 1.
REPLAN_METHODS = ("exact", "heuristic")


#: Most trace ticks one run may cover (horizon / gap_seconds): bounds a run's work and memory.
MAX_RUN_TICKS = 1_000_000


def check_run_ticks(trace: Trace, horizon_s: float) -> int:
    """Ticks of ``trace`` a run of ``horizon_s`` covers; refused beyond :data:`MAX_RUN_TICKS`."""
    ticks = horizon_s / trace.gap_s
    if not ticks <= MAX_RUN_TICKS:
        raise InvalidInputError(
            f"{trace.path}: metadata.gap_seconds",
            f"{trace.gap_s:g} s ticks: a run of {horizon_s:g} s covers {ticks:.3g} ticks, more "
            f"than the limit of {MAX_RUN_TICKS:,} (use a coarser trace or a shorter --horizon)",
        )
    return math.ceil(ticks) + 1


#: Most sub-clusters of a plan whose loss curves :meth:`ClusterSpeeds.run_start` compares.
MAX_SUBCLUSTERS = 200_000


def domain_speed(model: SpotModel, counts: np.ndarray, ps: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """``(sigma, u0)`` of clusters ``counts`` as the replays run them: a cluster outside the
    loss model's validity domain does not train (speed 0, no start), as the solver plans none
    there (docs/revocation.md, the progress model)."""
    counts = np.atleast_2d(np.asarray(counts, dtype=np.int64))
    sigma, start = progress_speed(model, counts, ps)
    inside = model.evaluate(counts, ps).inside_domain
    return np.where(inside, sigma, 0.0), np.where(inside, start, np.inf)


class ClusterSpeeds:
    """Progress speed of clusters given by workers per type (market does not matter), cached:
    the loop's view, its stand-in trainer and the bounds ask for the same few clusters again and again."""

    def __init__(self, model: SpotModel, spot_col: Sequence[int]) -> None:
        self.model, self.spot_col = model, list(spot_col)
        self._cache: dict[tuple, float] = {}

    def run_start(self, per_type: np.ndarray, ps: int) -> float:
        """Progress ``u0`` at time 0 of a run of the plan with ``per_type`` workers.

        One start for the whole run, whatever cluster trains first: ``g1 / max_c N_c`` over
        the plan's sub-clusters c (docs/revocation.md, the progress model). With g1 >= 0 that
        is the earliest start any of them has on its own loss curve, ``min_c g1 / N_c``; with
        g1 < 0 (a fit of the curves' tails, whose pole is at j = -g1 > 0) it is the latest,
        ``max_c g1 / N_c``: the earliest would charge the plan |g1| (N_plan / N_c - 1)
        iterations it does not take undisturbed. For one type it is the plan's own start
        (``N_c`` grows with the workers); mixes are checked over every sub-cluster up to
        :data:`MAX_SUBCLUSTERS`, beyond which the plan's own start is used.
        """
        per_type = np.asarray(per_type, dtype=np.int64)
        whole = np.zeros((1, len(self.model.columns)), dtype=np.int64)
        whole[0, self.spot_col] = per_type
        sigma, start = domain_speed(self.model, whole, ps)
        if not sigma[0] > 0:
            return 0.0
        if int(np.prod(per_type + 1)) > MAX_SUBCLUSTERS:
            return float(start[0])
        subs = np.array(list(itertools.product(*[range(int(n) + 1) for n in per_type])), dtype=np.int64)
        counts = np.zeros((len(subs), len(self.model.columns)), dtype=np.int64)
        counts[:, self.spot_col] = subs
        sigma, start = domain_speed(self.model, counts, ps)
        starts = start[sigma > 0]
        return float(np.min(starts) if self.model.problem.workload.gamma_1 >= 0 else np.max(starts))

    def __call__(self, per_type: np.ndarray, ps: int) -> float:
        key = (tuple(int(v) for v in per_type), ps)
        if key not in self._cache:
            counts = np.zeros(len(self.model.columns), dtype=np.int64)
            counts[self.spot_col] = per_type
            self._cache[key] = float(domain_speed(self.model, counts[None, :], ps)[0][0])
        return self._cache[key]


def check_plan_trains(speed: float) -> None:
    """Refuse a plan whose cluster does not train (``speed``: its progress speed), e.g. one
    outside the loss model's validity domain, where the solver plans none."""
    if not speed > 0:
        raise InvalidInputError(
            "plan.counts",
            "the plan's cluster does not train under the loss model (outside "
            "its validity domain, or its loss curve never reaches slo.loss)",
        )


def check_plan_traces(problem: SpotProblem, plan: SpotPlan, traces: Mapping[str, Sequence[Trace]]) -> None:
    """Refuse traces of unknown types, plan columns the problem lacks, spot types without traces."""
    names = [t.name for t in problem.instance_types]
    for name in traces:
        if name not in names:
            raise InvalidInputError(f"--trace {name}", f"not an instance type of the problem ({', '.join(names)})")
    labels = set(problem.columns().labels)
    for label, n in plan.counts.items():
        if label not in labels:
            raise InvalidInputError(f"plan.counts.{label}", problem.why_not_a_column(label, labels))
        if n and not label.endswith(ON_DEMAND_SUFFIX) and label not in traces:
            raise InvalidInputError(f"--trace {label}", "the plan uses this spot type but no trace is given for it")
    if plan.workers == 0:
        raise InvalidInputError("plan.counts", "the plan has no worker")
