"""How a trainer reports progress to the control loop, and the stand-in trainer of the tests.

**The protocol** (docs/control.md): the trainer publishes one JSON object, its latest report,

    {"run": "RUN", "time_s": 812.4, "loss": 1.93, "step": 1200, "finished_s": null}

``time_s`` is seconds since the run's start on the run's clock, ``loss`` the training loss
reached, ``step`` the iterations so far (optional), ``finished_s`` the time the target loss was
reached (``null`` until then). It publishes it either as a file, rewritten atomically
(write a temporary file, rename it over the report), or at an HTTP URL answering ``GET`` with
the object. The loop reads it at every poll (:func:`read_report`).

**The stand-in** (:class:`ModelTrainer`): a trainer whose loss follows the spot model's
eq. (3) under the live membership: a worker trains from ``join_s`` after its launch (at once
when launched at the start) until it is gone, and only if it was handed the run's PS address;
progress ``u = 1 / (L - g5)`` grows at the cluster's speed, exactly between membership
changes, as the replays' progress model says (docs/revocation.md).
"""

from __future__ import annotations

import json
import math
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dnnprov.control.cloud import Instance
from dnnprov.errors import InvalidInputError
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import SpotPlan
from dnnprov.revocation.policy_view import most_workers


@dataclass(frozen=True)
class Report:
    """One progress report of the protocol."""

    run: str
    time_s: float
    loss: float
    step: int | None = None
    finished_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The protocol's JSON object."""
        return {
            "run": self.run,
            "time_s": self.time_s,
            "loss": self.loss,
            "step": self.step,
            "finished_s": self.finished_s,
        }

    @classmethod
    def from_dict(cls, data: object, where: str) -> Report:
        """A report from parsed JSON; errors name ``where`` and the field."""
        if not isinstance(data, dict):
            raise InvalidInputError(where, "a progress report is a JSON object {run, time_s, loss, step, finished_s}")
        try:
            time_s, loss = float(data["time_s"]), float(data["loss"])
            step = None if data.get("step") is None else int(data["step"])
            finished = None if data.get("finished_s") is None else float(data["finished_s"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInputError(where, f"a progress report needs numbers time_s and loss ({exc})") from None
        if not (math.isfinite(time_s) and time_s >= 0 and not math.isnan(loss)):
            raise InvalidInputError(where, f"time_s must be finite and >= 0 and loss a number, got {data!r}")
        return cls(run=str(data.get("run", "")), time_s=time_s, loss=loss, step=step, finished_s=finished)


def write_report(path: str | Path, report: Report) -> None:
    """Publish ``report`` as a file, atomically (the protocol's file transport)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report.to_dict()))
    os.replace(tmp, path)


def read_report(source: str, timeout_s: float = 5.0) -> Report | None:
    """The latest report at ``source`` (a file path or an http(s) URL); ``None`` while there is none."""
    if source.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(source, timeout=timeout_s) as answer:
                body = answer.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise InvalidInputError("--progress", f"{source}: HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise InvalidInputError("--progress", f"{source}: {exc}") from None
    else:
        try:
            body = Path(source).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise InvalidInputError("--progress", f"{source}: {exc.strerror}") from None
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise InvalidInputError("--progress", f"{source}: not a JSON object") from None
    return Report.from_dict(data, f"--progress {source}")


#: Progress within this relative distance of the target counts as reached (the float sums of
#: two equal histories may differ in their last bits).
TARGET_TOLERANCE = 1e-12


class ProgressModel:
    """Progress of a plan's run under the spot model (the replays' progress model). At most
    ``most`` workers of a type train (:func:`~dnnprov.revocation.policy_view.most_workers`: the
    plan's, or its quotas for a policy that takes over up to them)."""

    def __init__(self, problem: SpotProblem, plan: SpotPlan, join_s: float, up_to_quota: bool = False) -> None:
        from dnnprov.models.spot import SpotModel
        from dnnprov.models.training_progress import progress_target
        from dnnprov.problems.spot import ON_DEMAND_SUFFIX
        from dnnprov.revocation.replay.simulate import ClusterSpeeds

        self.problem, self.join_s = problem, join_s
        self.types = [t.name for t in problem.instance_types]
        model = SpotModel(problem)
        labels = model.columns.labels
        self._speeds = ClusterSpeeds(model, [labels.index(n) for n in self.types])
        self.target = progress_target(model)
        self.want = np.array(
            [plan.counts.get(n, 0) + plan.counts.get(n + ON_DEMAND_SUFFIX, 0) for n in self.types], dtype=np.int64
        )
        self.start = self._speeds.run_start(self.want, plan.ps)
        self.most = most_workers(problem, plan, up_to_quota)  # the most workers of a type that train

    def speed(self, per_type: np.ndarray, ps: int) -> float:
        """Progress per second of ``per_type`` workers with ``ps`` parameter servers."""
        return self._speeds(per_type, ps) if ps > 0 else 0.0

    def loss(self, u: float) -> float:
        """Training loss at progress ``u``."""
        return 1.0 / u + self.problem.workload.gamma_5 if u > 0 else math.inf

    def progress_of(self, loss: float) -> float:
        """Progress ``u`` of a reported loss."""
        gap = loss - self.problem.workload.gamma_5
        return 1.0 / gap if gap > 0 else math.inf

    def joined_s(self, instance: Instance) -> float:
        """When a worker starts training: at once at the start, else ``join_s`` after launch."""
        return instance.launched_s + (0.0 if instance.launched_s == 0 else self.join_s)

    def members(self, instances: Sequence[Instance], ps_address: str | None, t: float) -> tuple[np.ndarray, int]:
        """Workers per type training at ``t`` (joined, not gone, handed ``ps_address``; at most
        ``most`` of a type: the extra ones the controller stops at its next poll do not
        count) and live PS."""
        per_type = np.zeros(len(self.types), dtype=np.int64)
        ps = 0
        for i in instances:
            if i.role == "ps":
                ps += i.alive_at(t)
            elif i.alive_at(t) and self.joined_s(i) <= t and i.ps_address == ps_address and i.type_name in self.types:
                per_type[self.types.index(i.type_name)] += 1
        return np.minimum(per_type, self.most), ps

    def advance(
        self, instances: Sequence[Instance], ps_address: str | None, t0: float, u0: float, t1: float
    ) -> tuple[float, float | None]:
        """Progress at ``t1`` from ``u0`` at ``t0``, integrated exactly over membership changes,
        and the time the target was reached on the way (``None`` if not)."""
        cuts = sorted(
            {t for i in instances for t in (self.joined_s(i), i.ended_s, i.launched_s) if t is not None and t0 < t < t1}
        )
        u, t = u0, t0
        for nxt in [*cuts, t1]:
            per_type, ps = self.members(instances, ps_address, t)
            sigma = self.speed(per_type, ps)
            if sigma > 0 and u + sigma * (nxt - t) >= self.target * (1 - TARGET_TOLERANCE):
                return self.target, min(nxt, t + (self.target - u) / sigma)
            u += sigma * (nxt - t)
            t = nxt
        return u, None


class ModelTrainer:
    """The stand-in trainer of one run: eq. (3) progress under the instances it is shown; its PS
    is the first live PS it sees (its address is the one workers must be handed). Callers that
    want one answer per history (both clouds, restarts) use a fresh trainer per report
    (:func:`stand_in`): it integrates the whole history from the start."""

    def __init__(self, model: ProgressModel, run_id: str) -> None:
        self.model, self.run_id = model, run_id
        self.ps_address: str | None = None
        self.time_s, self.u = 0.0, model.start
        self.finished_s: float | None = None

    def observe(self, instances: Sequence[Instance], now: float) -> Report:
        """Train until ``now`` with ``instances`` (their launches, joins and ends) and report."""
        if self.ps_address is None:
            ps = [i for i in instances if i.role == "ps" and i.ended_s is None]
            self.ps_address = ps[0].ps_address if ps else None
        if self.finished_s is None and now > self.time_s:
            self.u, self.finished_s = self.model.advance(instances, self.ps_address, self.time_s, self.u, now)
        self.time_s = max(self.time_s, now)
        return Report(run=self.run_id, time_s=self.time_s, loss=self.model.loss(self.u), finished_s=self.finished_s)


def stand_in(model: ProgressModel, run_id: str) -> Callable[[Sequence[Instance], float], Report]:
    """The stand-in trainer as the loop calls it: each report integrated from the run's start
    over the whole instance history, so the same history gives the same report whatever the
    cloud, the polls before it, or a controller's restart."""
    return lambda instances, now: ModelTrainer(model, run_id).observe(instances, now)
