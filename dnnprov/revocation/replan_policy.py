"""The ``replan`` launch policy: dnnprov's takeover solved at every event the controller sees.

At every event of the run (a notice or reclaim, a refused launch, a back-off that ran out, and
the first poll when the plan's spot workers do not fit the capacity there; a plan that can be
launched as it is, is launched as it is) the policy solves the takeover problem of
:func:`dnnprov.revocation.replan.replanned_problem` from the moment its launches would train
(now plus the join; now at the first poll): the loss the run is sure to reach by then (the
workers held, and the notified ones until their reclaim two minutes after the notice, train
meanwhile: no takeover overhead on top), the time left after it, the workers held now kept (a
notified one counts as lost), the plan's PS count, and each type's spot quota capped at the
capacity the controller takes its pools to have (held plus room where no launch was refused
lately). The
takeover is solved exactly (``method="exact"``: dnnprov's ``milp``) or by spotDNN's
Algorithm 1 (``"heuristic"``) under the problem's quotas, as spotDNN re-provisions: it may hold
more workers of a type than the plan (``up_to_quota``: the loop and its trainer then train up
to the quotas, :func:`~dnnprov.revocation.policy_view.most_workers`). When the exact takeover
finds no plan on the instance's markets and these leave out on-demand, it is solved again with
on-demand workers allowed where every type has an on-demand price (to finish by T_obj, as
``failover`` falls back to on-demand; spotDNN's stays on spot). Its spot workers are
placed cheapest pool first; its on-demand workers are held until the next takeover. When no
takeover meets T_obj (or none can be solved any more: too little time left), the missing spot
workers are relaunched where capacity allows.

It decides only on what a live controller observes (:class:`dnnprov.revocation.policy_view.View`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from dnnprov.errors import InvalidInputError
from dnnprov.models.spot import SpotModel
from dnnprov.problems.spot import ON_DEMAND_SUFFIX, SpotProblem
from dnnprov.result import SpotPlan
from dnnprov.revocation.policy_view import Holdings, Policy, View, fill_spot, most_workers, per_type

#: ``--replan-method`` -> the method of :func:`dnnprov.solve`.
SOLVE_METHOD = {"exact": "milp", "heuristic": "heuristic"}


@dataclass
class Replan(Policy):
    """``replan`` (module docstring); one object per run."""

    problem: SpotProblem
    plan: SpotPlan
    method: str = "exact"
    name = "replan"
    up_to_quota = True  # takeovers re-provision under the quotas, as spotDNN's do
    spot_want: np.ndarray | None = None  # spot workers per type of the last takeover
    od: np.ndarray | None = None  # on-demand workers per type of the last takeover
    takeovers: int = 0
    _base: SpotProblem | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.method not in SOLVE_METHOD:
            raise InvalidInputError("--replan-method", f"must be one of {', '.join(SOLVE_METHOD)}; got {self.method!r}")
        from dnnprov.models.training_progress import progress_target
        from dnnprov.revocation.replay.simulate import ClusterSpeeds

        self.types = [t.name for t in self.problem.instance_types]
        od_plan = [self.plan.counts.get(n + ON_DEMAND_SUFFIX, 0) for n in self.types]
        self.want = np.array([self.plan.counts.get(n, 0) + o for n, o in zip(self.types, od_plan)], dtype=np.int64)
        model = SpotModel(self.problem)
        labels = model.columns.labels
        self.target = progress_target(model)
        self.start = ClusterSpeeds(model, [labels.index(n) for n in self.types]).run_start(self.want, self.plan.ps)
        self.most = most_workers(self.problem, self.plan, self.up_to_quota)
        # the takeover keeps the plan's PS count
        self._base = self.problem.replace(
            constraints=replace(self.problem.constraints, ps_count=(self.plan.ps, self.plan.ps))
        )

    def decide(self, view: View) -> Holdings:
        if self.spot_want is None or self.od is None:
            self.od = view.od_floor.copy()
            self.spot_want = view.want - self.od
        if view.event and not (view.first and self._launchable(view)):
            chosen = self._takeover(view)
            if chosen is not None:
                self.spot_want, self.od = chosen
                self.takeovers += 1
        assert self.spot_want is not None and self.od is not None
        spot = fill_spot(view, self.spot_want, np.ones(len(view.caps), dtype=bool))
        return Holdings(spot, self.od.copy())

    def _launchable(self, view: View) -> bool:
        """Whether the plan's spot workers of every type fit the capacity its pools have now.

        The plan was chosen by the user (an on-demand or a robust plan included): re-solving it
        at the start would only trade it for the cheapest takeover."""
        assert self.spot_want is not None
        return bool((per_type(view, view.caps) >= self.spot_want).all())

    def _takeover(self, view: View) -> tuple[np.ndarray, np.ndarray] | None:
        """Spot and on-demand workers per type of the takeover's optimum, ``None`` when none meets T_obj."""
        from dnnprov.dispatch import solve
        from dnnprov.revocation.replan import replanned_problem

        assert self._base is not None
        joins = view.t + view.delay()  # when the takeover's launches train
        done = view.progress_by(Holdings(view.spot, view.od), joins)
        if done >= 1 or joins >= view.deadline_s:
            return None
        u = self.start + done * (self.target - self.start)
        loss = 1.0 / u + self.problem.workload.gamma_5
        spot_held = np.minimum(per_type(view, np.minimum(view.spot, view.caps)), self.most)
        od_held = np.minimum(view.od, self.most - spot_held)
        running = {n: int(s) for n, s in zip(self.types, spot_held) if s}
        running.update({n + ON_DEMAND_SUFFIX: int(o) for n, o in zip(self.types, od_held) if o})
        capacity = {n: int(c) for n, c in zip(self.types, per_type(view, view.caps))}
        base = self._base
        if od_held.any() and self._on_demand_fallback(base):  # held since an earlier fallback
            base = with_on_demand(base)
        try:
            takeover = replanned_problem(
                base,
                running,
                {},
                joins,
                loss,
                takeover_overhead_s=0.0,
                ps=self.plan.ps,
                capacity=capacity,
            )
            result = solve(takeover, SOLVE_METHOD[self.method])
            if not isinstance(result.plan, SpotPlan) and self._on_demand_fallback(takeover):
                result = solve(with_on_demand(takeover), SOLVE_METHOD[self.method])
        except InvalidInputError:
            return None
        if not isinstance(result.plan, SpotPlan):
            return None
        counts = result.plan.counts
        od = np.array([counts.get(n + ON_DEMAND_SUFFIX, 0) for n in self.types], dtype=np.int64)
        spot = np.array([counts.get(n, 0) for n in self.types], dtype=np.int64)
        return spot, od  # within the quotas, so within ``most``: the loop trains them all

    def _on_demand_fallback(self, takeover: SpotProblem) -> bool:
        """Whether a takeover that found no plan on the instance's markets is tried again with
        on-demand workers: dnnprov's exact takeover, when the instance does not offer that market
        and every type has an on-demand price (spotDNN's, ``"heuristic"``, stays on spot)."""
        return (
            self.method == "exact"
            and "on-demand" not in takeover.constraints.markets
            and all(t.on_demand_price_per_h is not None for t in takeover.instance_types)
        )


def with_on_demand(problem: SpotProblem) -> SpotProblem:
    """``problem`` with the on-demand market offered too."""
    return problem.replace(
        constraints=replace(problem.constraints, markets=(*problem.constraints.markets, "on-demand"))
    )
