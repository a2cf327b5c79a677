"""Re-planning after spot revocations (spotDNN's detector and takeover, spec/spot.md section 5).

On a revocation the provisioner runs again with the surviving instances kept
(``constraints.existing``), the remaining time ``T_obj - elapsed`` and the same target
loss, and the takeover overhead added to the predicted time.

Loss model after the takeover (the assumption this module makes): training continues on
the new cluster's own loss curve, eq. (3), from the point where that curve equals the loss
already reached ``L_r``. The normalized iterations still needed are then

    j_rem = N / (L_obj - g5) - N / (L_r - g5)
          = s * N / (L_obj - g5),   s = (L_r - L_obj) / (L_r - g5),

with ``N = (g2 b_w + g3) sqrt(...)`` of the new cluster. This is eq. (3) again with
``gamma_2``, ``gamma_3`` scaled by ``s`` and ``gamma_1 = 0``, so every solver handles the
re-planned problem unchanged. Always pass the *original* problem, the plan running now,
the time elapsed since training started and the loss reached now: that also covers a
second revocation.

The PS nodes running now are kept (they hold the parameters): the takeover's
``constraints.ps_count`` starts at the running count, so a takeover needing more PS says
so in ``details["new_ps"]`` of :func:`replan`'s result, and what was spent counts every PS.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from dnnprov.dispatch import solve
from dnnprov.errors import InvalidInputError
from dnnprov.json_files import read_json_file
from dnnprov.models.spot import SpotModel
from dnnprov.problems.spot import SpotProblem, check_existing
from dnnprov.problems.validation import checks as check
from dnnprov.result import Result, SpotPlan
from dnnprov.revocation.policy_view import cheapest_first

#: Seconds added to the predicted time after a takeover. The survivors keep training
#: while new instances join (~2.1 min in the paper); the measured degradation lasted
#: ~30 s and Algorithm 1 adds a revocation overhead below 30 s (spec section 5).
DEFAULT_TAKEOVER_OVERHEAD_S = 30.0
METADATA_URL = "http://169.254.169.254"
POLL_INTERVAL_S = 15.0


def _counts(problem: SpotProblem, plan: SpotPlan | Mapping[str, int], where: str = "plan.counts") -> dict[str, int]:
    counts = check_existing(where, plan.counts if isinstance(plan, SpotPlan) else plan)
    labels = problem.columns().labels
    for label in counts:
        if label not in labels:
            # an offered type's label is missing only when its market is disabled: say so (issue 21)
            raise InvalidInputError(f"{where}.{label}", problem.why_not_a_column(label, set(labels)))
    return counts


def predicted_loss(problem: SpotProblem, plan: SpotPlan | Mapping[str, int], elapsed_s: float, ps: int = 1) -> float:
    """The loss eq. (3) predicts after ``elapsed_s`` seconds of training with ``plan``.

    Uses the plan's normalized iterations j (reaching ``slo.loss``) and its time T:
    ``L = (j + g1)(L_obj - g5) / (j * elapsed / T + g1) + g5``. Meant for a plan that has
    run since the start of training (no takeover in between).
    """
    counts = _counts(problem, plan)
    model = SpotModel(problem)
    ev = model.evaluate(np.array([[counts.get(label, 0) for label in model.columns.labels]]), ps)
    j, total = float(ev.iterations[0]), float(ev.time_s[0]) - problem.slo.takeover_overhead_s
    if not j > 0 or not total > 0:
        raise InvalidInputError("plan", "the model predicts no training progress for this plan")
    done = j * min(check.number("elapsed_s", elapsed_s, minimum=0), total) / total
    w = problem.workload
    return (j + w.gamma_1) * (problem.slo.loss - w.gamma_5) / (done + w.gamma_1) + w.gamma_5


def replanned_problem(
    problem: SpotProblem,
    plan: SpotPlan | Mapping[str, int],
    revoked: Mapping[str, int],
    elapsed_s: float,
    loss_reached: float,
    *,
    takeover_overhead_s: float = DEFAULT_TAKEOVER_OVERHEAD_S,
    avoid_revoked: bool = False,
    ps: int | None = None,
    capacity: Mapping[str, int] | None = None,
) -> SpotProblem:
    """The takeover problem after ``revoked`` instances of ``plan`` were reclaimed.

    Parameters
    ----------
    problem
        The original problem (the running plan's SLOs, types, quotas, workload).
    plan
        Workers running just before the revocation (a :class:`SpotPlan` or label counts).
    revoked
        Revoked workers per column label (spot columns only).
    elapsed_s
        Seconds since training started; the remaining objective time is ``time_s - elapsed_s``.
    loss_reached
        Training loss reached so far (above ``slo.loss``); the loss model restarts from it.
    takeover_overhead_s
        Added to the predicted time of the takeover plan (``slo.takeover_overhead_s``).
    avoid_revoked
        Buy no new instance of a revoked type (its spot pool just reclaimed capacity).
    ps
        PS nodes running now (default: the plan's ``ps``, else 1); they are kept and
        count in the money spent.
    capacity
        Most spot instances of each type the cloud offers now, survivors included (a
        type's spot quota becomes ``min(quota, capacity)``); types not named keep theirs.
    """
    if not isinstance(problem, SpotProblem):
        raise InvalidInputError("problem", "re-planning needs a spot problem")
    counts = _counts(problem, plan)
    revoked = _counts(problem, revoked, "revoked")
    for label, n in revoked.items():
        if label.endswith(":on-demand"):
            raise InvalidInputError(f"revoked.{label}", "on-demand instances are not revoked")
        if n > counts.get(label, 0):
            raise InvalidInputError(f"revoked.{label}", f"{n} revoked but the plan runs {counts.get(label, 0)}")
    elapsed_s = check.number("elapsed_s", elapsed_s, minimum=0)
    running_ps = running_ps_count(problem, plan, ps)
    overhead = check.number("takeover_overhead_s", takeover_overhead_s, minimum=0)
    slo, w = problem.slo, problem.workload
    remaining = slo.time_s - elapsed_s
    if remaining <= overhead:
        raise InvalidInputError(
            "elapsed_s",
            f"{elapsed_s:g} s of {slo.time_s:g} s leave {remaining:g} s, "
            f"not more than the takeover overhead {overhead:g} s",
        )
    loss_reached = check.number("loss_reached", loss_reached)
    if loss_reached <= slo.loss:
        raise InvalidInputError(
            "loss_reached", f"{loss_reached:g} already meets the target loss {slo.loss:g}: nothing to re-plan"
        )
    scale = (loss_reached - slo.loss) / (loss_reached - w.gamma_5)
    workload = replace(w, gamma_1=0.0, gamma_2=w.gamma_2 * scale, gamma_3=w.gamma_3 * scale)
    survivors = {k: n - revoked.get(k, 0) for k, n in counts.items() if n - revoked.get(k, 0) > 0}
    types = problem.instance_types
    if avoid_revoked:
        types = tuple(
            replace(
                t,
                quota=survivors.get(t.name, 0),
                on_demand_quota=t.on_demand_quota if t.on_demand_quota is not None else t.quota,
            )
            if revoked.get(t.name)
            else t
            for t in types
        )
    if capacity is not None:
        caps = check_existing("capacity", capacity)
        for name in caps:
            if name not in {t.name for t in types}:
                raise InvalidInputError(f"capacity.{name}", "not an instance type of the problem")
        # Capacity limits the spot market only: the on-demand quota (which defaults to the
        # spot quota) keeps its value.
        types = tuple(
            replace(
                t,
                quota=min(t.quota, max(caps[t.name], survivors.get(t.name, 0))),
                on_demand_quota=t.on_demand_quota if t.on_demand_quota is not None else t.quota,
            )
            if t.name in caps
            else t
            for t in types
        )
    constraints = replace(
        problem.constraints,
        existing=survivors,
        ps_count=(running_ps, problem.constraints.ps_count[1]),
        budget_usd=_remaining_budget(problem, counts, elapsed_s, running_ps),
    )
    lost = ", ".join(f"{n} x {k}" for k, n in revoked.items() if n) or "nothing"
    notes = (
        f"Takeover of {problem.name!r} after revoking {lost} at {elapsed_s:g} s (loss reached "
        f"{loss_reached:g}): remaining time {remaining:g} s including a {overhead:g} s takeover "
        f"overhead; loss curve restarted from the reached loss (gamma_1 = 0, gamma_2 and "
        f"gamma_3 scaled by {scale:.6g})."
    )
    return problem.replace(
        instance_types=types,
        workload=workload,
        constraints=constraints,
        slo=replace(slo, time_s=remaining, takeover_overhead_s=overhead),
        name=f"{problem.name}-takeover",
        notes=notes,
    )


def zone_capacity(
    problem: SpotProblem, free: Mapping[str, Mapping[str, int]], survivors: Mapping[str, int]
) -> dict[str, int]:
    """Spot capacity per type from free capacity per zone now: survivors plus the zones' free
    instances (``free`` maps a type to ``{zone: count}``; each zone must be one of the type's)."""
    out = {}
    for name, zones in free.items():
        t = next((t for t in problem.instance_types if t.name == name), None)
        if t is None:
            raise InvalidInputError(f"capacity.{name}", "not an instance type of the problem")
        for zone, n in zones.items():
            if zone not in t.pool_names:
                raise InvalidInputError(
                    f"capacity.{name}@{zone}",
                    f"not a zone of {name} ({', '.join(t.pool_names) or 'the type lists no zones'})",
                )
            check.count(f"capacity.{name}@{zone}", n, minimum=0, limit=check.MAX_QUOTA)
        out[name] = survivors.get(name, 0) + sum(zones.values())
    return out


def zone_placement(
    problem: SpotProblem, new_spot: Mapping[str, int], free: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, int]]:
    """Where to launch new spot instances: per type, the zones with free capacity now,
    cheapest first (the zone's ``spot_price_per_h``, else the type's), within each zone's
    ``capacity`` field, as the ``failover`` policy places them."""
    out: dict[str, dict[str, int]] = {}
    for t in problem.instance_types:
        if not new_spot.get(t.name) or t.name not in free:
            continue
        room = [
            min(int(free[t.name].get(z.zone, 0)), z.capacity if z.capacity is not None else check.MAX_QUOTA)
            for z in t.zones
        ]
        prices = [z.spot_price_per_h if z.spot_price_per_h is not None else t.spot_price_per_h for z in t.zones]
        placed = {z.zone: n for z, n in zip(t.zones, cheapest_first(int(new_spot[t.name]), room, prices)) if n}
        if placed:
            out[t.name] = placed
    return out


def running_ps_count(problem: SpotProblem, plan: SpotPlan | Mapping[str, int], ps: int | None) -> int:
    """PS nodes running now: ``ps``, else the plan's, else 1; within the problem's PS range."""
    if ps is None:
        ps = plan.ps if isinstance(plan, SpotPlan) else 1
    low, high = problem.constraints.ps_count
    return check.integer("ps", ps, minimum=low, maximum=high)


def _remaining_budget(problem: SpotProblem, counts: Mapping[str, int], elapsed_s: float, ps: int) -> float | None:
    """The budget minus what the running plan (its workers and all ``ps`` PS) has spent so far."""
    budget = problem.constraints.budget_usd
    if budget is None:
        return None
    cols = problem.columns()
    rate = sum(counts.get(label, 0) * price for label, price in zip(cols.labels, cols.price, strict=True))
    spent = (rate + ps * problem.platform.ps_price_per_h) * elapsed_s / 3600
    if spent >= budget:
        raise InvalidInputError("constraints.budget_usd", f"${spent:.2f} already spent of the ${budget:g} budget")
    return budget - spent


def replan(
    problem: SpotProblem,
    plan: SpotPlan | Mapping[str, int],
    revoked: Mapping[str, int],
    elapsed_s: float,
    loss_reached: float,
    *,
    takeover_overhead_s: float = DEFAULT_TAKEOVER_OVERHEAD_S,
    avoid_revoked: bool = False,
    ps: int | None = None,
    capacity: Mapping[str, int] | None = None,
    method: str = "milp",
    **solve_options: Any,
) -> Result:
    """Solve the takeover problem (:func:`replanned_problem`); the plan keeps the survivors.

    ``details["new_instances"]`` of the result are the takeover workers to launch and
    ``details["new_ps"]`` the PS nodes to launch beside the running ones.
    """
    takeover = replanned_problem(
        problem,
        plan,
        revoked,
        elapsed_s,
        loss_reached,
        takeover_overhead_s=takeover_overhead_s,
        avoid_revoked=avoid_revoked,
        ps=ps,
        capacity=capacity,
    )
    return solve_takeover(takeover, method, **solve_options)


def solve_takeover(takeover: SpotProblem, method: str = "milp", **solve_options: Any) -> Result:
    """Solve a takeover problem and add ``details["new_ps"]``: PS to launch beside the running ones.

    The running PS count is the takeover's lowest allowed PS count (:func:`replanned_problem`).
    """
    result = solve(takeover, method, **solve_options)
    if result.plan is not None:
        result.details["new_ps"] = max(0, int(result.plan.ps) - takeover.constraints.ps_count[0])
    return result


def takeover_document(result: Result, takeover: SpotProblem, catalog: Any = None) -> dict[str, Any]:
    """The ``dnnprov/plan`` v1 dict of a takeover, also when the solve found no plan.

    ``catalog`` is a :class:`~dnnprov.io.catalogs.catalog.Catalog` or ``None``.
    """
    out: dict[str, Any] = {
        "format": "dnnprov/plan",
        "version": 1,
        "result": result.to_dict(),
        "instance": takeover.to_dict(),
    }
    if catalog is not None:
        out["catalog"] = catalog.to_dict()
    return out


# --------------------------------------------------------------------- interruption notices
#: HTTP answers of the metadata service worth retrying (it restarts, or throttles a busy instance).
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
NOTICES_FORMAT = "dnnprov/notices"


@dataclass(frozen=True)
class InterruptionNotice:
    """An EC2 spot interruption notice (``action``: terminate, stop or hibernate)."""

    action: str
    time: str
    instance_id: str | None = None
    instance_type: str | None = None


class _Metadata:
    """Instance metadata reads with an IMDSv2 session token (renewed on 401)."""

    def __init__(self, base_url: str, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.token: str | None = None

    def _token(self) -> str:
        request = urllib.request.Request(
            f"{self.base_url}/latest/api/token", method="PUT", headers={"X-aws-ec2-metadata-token-ttl-seconds": "21600"}
        )
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return response.read().decode()

    def get(self, path: str) -> str | None:
        """The text at ``/latest/meta-data/<path>``, or ``None`` on 404."""
        for _ in range(2):
            self.token = self.token or self._token()
            request = urllib.request.Request(
                f"{self.base_url}/latest/meta-data/{path}", headers={"X-aws-ec2-metadata-token": self.token}
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return response.read().decode()
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return None
                if exc.code != 401:
                    raise
                self.token = None  # expired token: fetch a new one once
        raise InvalidInputError("metadata", "the instance metadata service refused two fresh tokens")

    def notice(self) -> InterruptionNotice | None:
        """The spot interruption notice now, with the instance's id and type, or ``None``."""
        text = self.get("spot/instance-action")
        if text is None:
            return None
        try:
            body = json.loads(text)
            action, time = str(body["action"]), str(body["time"])
        except (ValueError, KeyError, TypeError):
            raise InvalidInputError("spot/instance-action", f"unexpected notice {text[:200]!r}") from None
        return InterruptionNotice(
            action=action, time=time, instance_id=self.get("instance-id"), instance_type=self.get("instance-type")
        )


def _transient(exc: BaseException) -> bool:
    """Whether a metadata read failed for a reason that may pass: a 5xx or 429 answer, a refused,
    reset or dropped connection, a timeout."""
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code in TRANSIENT_STATUS or exc.code >= 500
    return isinstance(exc, (OSError, http.client.HTTPException))


class NoticeLog:
    """The notices already reported, kept in a JSON file across restarts of the watcher.

    A notice is known by its action and time (AWS gives a reclaim one notice; its time is
    when the action happens). The file is rewritten whole (a temporary file renamed over it)
    after each notice is reported, so a crash leaves the old or the new list, never half.
    """

    def __init__(self, path: str | Path | None) -> None:
        self.path = None if path is None else Path(path)
        self.reported: list[dict[str, Any]] = []
        if self.path is not None and self.path.exists():
            data = read_json_file(self.path)
            if (
                not isinstance(data, Mapping)
                or data.get("format") != NOTICES_FORMAT
                or data.get("version") != 1
                or not isinstance(data.get("reported"), list)
                or not all(
                    isinstance(n, Mapping) and isinstance(n.get("action"), str) and isinstance(n.get("time"), str)
                    for n in data["reported"]
                )
            ):
                raise InvalidInputError(
                    str(self.path),
                    f"not a {NOTICES_FORMAT} v1 file of reported notices (remove it to report every notice again)",
                )
            self.reported = [dict(n) for n in data["reported"]]

    def __contains__(self, notice: InterruptionNotice) -> bool:
        return any((n["action"], n["time"]) == (notice.action, notice.time) for n in self.reported)

    def add(self, notice: InterruptionNotice) -> None:
        """Remember ``notice`` (in the file too, when there is one)."""
        self.reported.append({"action": notice.action, "time": notice.time, "instance_id": notice.instance_id})
        if self.path is None:
            return
        text = json.dumps({"format": NOTICES_FORMAT, "version": 1, "reported": self.reported}, indent=2) + "\n"
        try:
            with tempfile.NamedTemporaryFile(
                "w", dir=self.path.parent, prefix=f".{self.path.name}.", delete=False
            ) as handle:
                handle.write(text)
            os.replace(handle.name, self.path)
        except OSError as exc:
            raise InvalidInputError(
                str(self.path), f"cannot write the reported notices: {exc.strerror or exc}"
            ) from None


def watch_interruptions(
    on_notice: Callable[[InterruptionNotice], None],
    *,
    metadata_url: str = METADATA_URL,
    interval_s: float = POLL_INTERVAL_S,
    stop: threading.Event | None = None,
    timeout_s: float = 2.0,
    state_file: str | Path | None = None,
    retry_s: float = 1.0,
    max_failures: int | None = None,
) -> None:
    """Poll the spot interruption notice every ``interval_s`` and call ``on_notice`` once per notice.

    Reads ``/latest/meta-data/spot/instance-action`` (404 until AWS schedules the
    interruption, ~2 minutes ahead) with an IMDSv2 token. Runs until ``stop`` is set.
    ``on_notice`` typically calls :func:`replan`.

    Transient failures (a 5xx or 429 answer, a refused, reset or dropped connection, a
    timeout) are retried with exponential backoff and jitter: ``retry_s`` after the first,
    doubling, never longer than ``interval_s``; ``max_failures`` consecutive ones (default:
    no limit, a watcher keeps trying) end it with :class:`InvalidInputError`. Other answers
    (403, a malformed notice) end it at once.

    With ``state_file`` the notices reported are kept in that file (:class:`NoticeLog`), so a
    restarted watcher does not report one again. A notice counts as reported once
    ``on_notice`` returns: a crash inside the callback reports it again after the restart.
    """
    stop = stop or threading.Event()
    check.number("interval_s", interval_s, exclusive_minimum=0)
    check.number("retry_s", retry_s, exclusive_minimum=0)
    if max_failures is not None:
        check.integer("max_failures", max_failures, minimum=1)
    metadata = _Metadata(metadata_url, timeout_s)
    log = NoticeLog(state_file)
    failures = 0
    while not stop.is_set():
        try:
            notice = metadata.notice()
        except Exception as exc:
            if isinstance(exc, InvalidInputError):
                raise
            if not _transient(exc):
                raise InvalidInputError("metadata", f"reading {metadata_url} failed: {exc}") from None
            failures += 1
            if max_failures is not None and failures >= max_failures:
                raise InvalidInputError(
                    "metadata", f"{metadata_url} failed {failures} times in a row, the last: {exc}"
                ) from None
            delay = min(interval_s, retry_s * 2.0 ** min(failures - 1, 60))  # no overflow on a long outage
            stop.wait(random.uniform(delay / 2, delay))
            continue
        failures = 0
        if notice is not None and notice not in log:
            on_notice(notice)
            log.add(notice)
        stop.wait(interval_s)
