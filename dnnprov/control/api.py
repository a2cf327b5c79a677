"""The Python API of runs: what ``dnnprov run`` and the service's ``run`` jobs call (docs/control.md).

- :func:`run_plan`: launch a spot plan and keep it training to its target loss under a
  policy (:func:`create_run` then :func:`drive_run`); returns the run id and its outcome.
- :func:`run_status`: a run's state, instances held, progress, cost so far and events.
- :func:`cancel_run`: tear a run down (its live controller does it at its next poll; with
  none alive, here).
- :func:`resume_run`: take a run over after its controller stopped (``kill -9`` included).

A run lives in a record folder (``state``, :mod:`dnnprov.control.record`) and owns its
instances by tag; any of these functions may be called from another process than the one
that started the run. λDNN plans run through :func:`dnnprov.control.serverless.run_serverless`;
status, cancel and resume take their runs too.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

from dnnprov.control.cloud import Instance
from dnnprov.control.loop import Controller, Event, Outcome, RunSettings
from dnnprov.control.record import RunRecord
from dnnprov.control.trainer import Report
from dnnprov.errors import InvalidInputError
from dnnprov.problems.spot import ON_DEMAND_SUFFIX, SpotProblem
from dnnprov.result import SpotPlan
from dnnprov.revocation.availability import AvailabilityModel
from dnnprov.revocation.policies import RunningTable, TakeoverTable

#: The record folder when none is given (``dnnprov run --state``'s default).
DEFAULT_STATE = ".dnnprov-runs"
#: The run's region when none is given and the plan names none.
DEFAULT_REGION = "us-east-1"
#: Run states in which a controller still has work to do.
LIVE = ("running", "cancelling")

__all__ = ["DEFAULT_STATE", "cancel_run", "create_run", "drive_run", "resume_run", "run_plan", "run_status"]


def spot_problem(value: SpotProblem | Mapping[str, Any] | str | Path, where: str = "instance") -> SpotProblem:
    """A spot problem from itself, an instance dict, a file or ``embedded:REL``."""
    from dnnprov.io.instances import embedded_instance, problem_from_dict, read_instance

    if isinstance(value, SpotProblem):
        return value
    if isinstance(value, Mapping):
        problem = problem_from_dict(value)
    else:
        text = str(value)
        problem = read_instance(
            embedded_instance(text.removeprefix("embedded:")) if text.startswith("embedded:") else text
        )
    if not isinstance(problem, SpotProblem):
        raise InvalidInputError(where, "a spot run needs a spot instance (λDNN plans: run_serverless)")
    return problem


def spot_plan(value: SpotPlan | Mapping[str, Any] | str | Path, problem: SpotProblem) -> SpotPlan:
    """A plan from itself, its dict ``{"counts", "ps"}``, a plan document (or ``solve --json``
    result) as a dict or a file; checked against ``problem``."""
    from dnnprov.cloud.export import PlanDocument, load_plan

    if isinstance(value, SpotPlan):
        value = {"counts": dict(value.counts), "ps": value.ps}
    if isinstance(value, Mapping) and "counts" in value and not {"format", "status"} & set(value):
        try:
            doc = PlanDocument(result={"kind": "spot", "status": "feasible", "plan": dict(value)}, problem=problem)
        except InvalidInputError as exc:
            raise InvalidInputError("plan" + exc.field.removeprefix("result.plan"), exc.problem) from None
    elif isinstance(value, Mapping):
        try:
            read = PlanDocument.from_dict(value)
            doc = PlanDocument(result=read.result, problem=problem, catalog=read.catalog)
        except InvalidInputError as exc:
            raise InvalidInputError(f"plan.{exc.field}" if exc.field else "plan", exc.problem) from None
    else:
        doc = load_plan(value, problem=problem)
    return SpotPlan(counts=doc.counts(), ps=doc.ps)


def check_policy(policy: str, model: object = None) -> str:
    """A policy a live run can use: any of ``simulate``'s; ``mpc`` with its availability
    ``model`` (one type's, from ``risk fit --zones --out``), the others without one."""
    from dnnprov.revocation.policies import POLICY_NAMES

    if policy not in POLICY_NAMES:
        raise InvalidInputError("--policy", f"must be one of {', '.join(POLICY_NAMES)}; got {policy!r}")
    if policy == "mpc" and model is None:
        raise InvalidInputError(
            "--policy", "mpc needs an availability model: give --model (written by risk fit --zones --out)"
        )
    if policy != "mpc" and model is not None:
        raise InvalidInputError("--model", "goes with --policy mpc")
    return policy


def availability_model(value: object) -> AvailabilityModel:
    """An availability model from itself, its dict or a JSON file (``risk fit --zones --out``)."""
    from dnnprov.json_files import read_json_file

    if isinstance(value, AvailabilityModel):
        return value
    data = value if isinstance(value, Mapping) else read_json_file(str(value))
    try:
        return AvailabilityModel.from_dict(data)
    except InvalidInputError as exc:
        raise InvalidInputError("--" + exc.field if exc.field.startswith("model") else "--model", exc.problem) from None


def create_run(
    instance: SpotProblem | Mapping[str, Any] | str | Path,
    plan: SpotPlan | Mapping[str, Any] | str | Path,
    policy: str = "failover",
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    state: str | Path = DEFAULT_STATE,
    progress: str = "model",
    image_id: str | None = None,
    run_id: str | None = None,
    settings: RunSettings | None = None,
    model: object = None,
) -> str:
    """Write a new run to the record at ``state`` (nothing launched yet); its id.

    ``model``: ``mpc``'s availability model (an :class:`AvailabilityModel`, its dict or a
    file); its table is built here, so a plan or model it cannot cover is refused now.

    ``region``: the run's, where the PS goes (:func:`ps_region`: default the region holding
    most of a multi-region plan's worker GPUs, else us-east-1); each ``TYPE@REGION`` of the
    plan is launched in its own region.

    ``progress``: where the trainer reports (a file, an http(s) URL, or ``model``: the
    stand-in trainer, only against a test endpoint). Every input is checked here, one
    :class:`InvalidInputError` naming it.
    """
    from dnnprov.cloud.aws import check_endpoint_url, check_region
    from dnnprov.control.clouds.ec2 import PLACEHOLDER_IMAGE, RemoteTwinClock, is_twin
    from dnnprov.control.record import check_run_id

    check_policy(policy, model)
    if run_id is not None:
        check_run_id(run_id)
    check_endpoint_url("--endpoint-url", endpoint_url)
    problem = spot_problem(instance)
    run_regions(problem)
    check_zones(problem)
    chosen = spot_plan(plan, problem)
    settings = settings or RunSettings()
    fitted = None if model is None else availability_model(model)
    if fitted is not None:
        mpc_table(problem, chosen, fitted, settings)
    twin = is_twin(endpoint_url)
    if not twin and progress == "model" and not endpoint_url:
        raise InvalidInputError(
            "--progress",
            "the stand-in trainer (model) runs only against a test endpoint "
            "(--endpoint-url): on AWS give the trainer's report file or URL",
        )
    spec = {
        "instance": problem.to_dict(),
        "plan": {"counts": chosen.counts, "ps": chosen.ps},
        "policy": policy,
        "model": None if fitted is None else fitted.to_dict(),
        "region": check_region(ps_region(problem, chosen, region)),
        "endpoint_url": endpoint_url,
        "twin": twin,
        "image_id": image_id or PLACEHOLDER_IMAGE,
        "progress": progress,
        "settings": settings.to_dict(),
        "start_epoch": RemoteTwinClock(endpoint_url).now() if twin and endpoint_url else time.time(),
    }
    with closing(RunRecord(state)) as record:
        return record.create(spec, run_id)


def run_regions(problem: SpotProblem) -> list[str]:
    """The regions the types of a multi-region instance name (``TYPE@REGION``), sorted; empty
    when every type name is plain (a one-region run)."""
    from dnnprov.cloud.aws import check_region
    from dnnprov.io.catalogs.catalog import split_region

    named = {split_region(t.name)[1] for t in problem.instance_types}
    try:
        return sorted(check_region(r) for r in named if r is not None)
    except InvalidInputError as exc:
        raise InvalidInputError("instance.instance_types", f"a TYPE@REGION name: {exc.problem}") from None


def check_zones(problem: SpotProblem) -> None:
    """Refuse a pool whose zone is not an AWS availability zone: a run launches each pool in
    its zone's region (:class:`dnnprov.control.clouds.ec2.Ec2Cloud`), so the zone must name one."""
    from dnnprov.cloud.export.placement import zone_region

    for t in problem.instance_types:
        for i, pool in enumerate(t.zones):
            try:
                zone_region(pool.zone)
            except InvalidInputError as exc:
                raise InvalidInputError(
                    f"instance.instance_types.{t.name}.zones[{i}].zone", f"{exc.problem}: a run launches on EC2"
                ) from None


def ps_region(problem: SpotProblem, plan: SpotPlan, given: str | None) -> str:
    """The run's region, where its PS goes (and its plain type names): ``given``, else for a
    multi-region plan the region holding most of its worker GPUs (ties: the first by name,
    as the exports place the PS: docs/cloud.md), else ``us-east-1``."""
    from dnnprov.io.catalogs.catalog import split_region

    if given is not None:
        return given
    gpus: dict[str, int] = {}
    by_name = {t.name: t for t in problem.instance_types}
    for label, count in plan.counts.items():
        name = label.removesuffix(ON_DEMAND_SUFFIX)
        region = split_region(name)[1]
        if region is not None and count:
            gpus[region] = gpus.get(region, 0) + count * max(1, by_name[name].gpus)
    return min(gpus, key=lambda r: (-gpus[r], r)) if gpus else DEFAULT_REGION


def mpc_table(
    problem: SpotProblem, plan: SpotPlan, model: AvailabilityModel, settings: RunSettings
) -> TakeoverTable | RunningTable:
    """``mpc``'s table of a live run: planned on ``model``'s ticks from the run's start."""
    from dnnprov.revocation.replay.pool_replay import takeover_table

    return takeover_table(problem, plan, model, join_s=settings.join_s)


class _LatestReport:
    """The trainer as the loop calls it, keeping its latest report for the progress snapshot."""

    def __init__(self, trainer: Callable[[list[Instance], float], Report | None]) -> None:
        self.trainer = trainer
        self.report: Report | None = None

    def __call__(self, instances: list[Instance], now: float) -> Report | None:
        report = self.trainer(instances, now)
        if report is not None:
            self.report = report
        return report


def recorded_plan(spec: Mapping[str, Any]) -> SpotPlan:
    """The plan a run's record holds (its spec's ``plan``)."""
    return SpotPlan(counts={k: int(v) for k, v in spec["plan"]["counts"].items()}, ps=int(spec["plan"]["ps"]))


def controller_of(record: RunRecord, run_id: str, spec: Mapping[str, Any]) -> Controller:
    """The controller of a recorded spot run (fresh or to resume), on its cloud."""
    from dnnprov.control.clouds.ec2 import Ec2Cloud, RemoteTwinClock
    from dnnprov.control.loop import PoolInfo
    from dnnprov.control.trainer import ProgressModel, read_report, stand_in
    from dnnprov.io.catalogs.catalog import qualified
    from dnnprov.revocation.policies import make_policy

    problem = spot_problem(spec["instance"])
    plan = recorded_plan(spec)
    settings = RunSettings(**spec["settings"])
    clock = RemoteTwinClock(spec["endpoint_url"], answered=True) if spec.get("twin") else None
    pools = [
        PoolInfo(t.name, z.zone, z.spot_price_per_h if z.spot_price_per_h is not None else t.spot_price_per_h)
        for t in problem.instance_types
        for z in t.zones
    ] or [PoolInfo(t.name, None, t.spot_price_per_h) for t in problem.instance_types]
    ps_type = problem.platform.ps_type
    if run_regions(problem):  # a multi-region plan's PS is named by its region too
        ps_type = qualified(ps_type, spec["region"])
    cloud = Ec2Cloud(
        spec["region"],
        start_epoch=spec["start_epoch"],
        endpoint_url=spec.get("endpoint_url"),
        clock=clock,
        image_id=spec["image_id"],
        known=record.instances(run_id),
        types=[*(t.name for t in problem.instance_types), ps_type],
        zones=[p.zone for p in pools if p.zone is not None],
        zoneless=[p.type_name for p in pools if p.zone is None],
    )
    model = spec.get("model")
    table = None if model is None else mpc_table(problem, plan, availability_model(model), settings)
    policy = make_policy(spec["policy"], table, problem=problem, plan=plan)
    if spec["progress"] == "model":
        trainer: Callable[[list[Instance], float], Report | None] = stand_in(
            ProgressModel(problem, plan, settings.join_s, policy.up_to_quota), run_id
        )
    else:
        source = str(spec["progress"])

        def trainer(instances: list[Instance], now: float) -> Report | None:
            return read_report(source)

    return Controller(
        problem,
        plan,
        policy,
        cloud,
        run_id=run_id,
        pools=pools,
        trainer=_LatestReport(trainer),
        settings=settings,
        record=record,
        ps_type=ps_type,
    )


def _snapshot(record: RunRecord, run_id: str, controller: Controller) -> None:
    """Keep the run's progress after a poll: the trainer's report, the cost so far, the counters."""
    now = controller.cloud.now()
    trainer = controller.trainer
    report = trainer.report if isinstance(trainer, _LatestReport) else None
    record.snapshot(
        run_id,
        {
            "time_s": now,
            "report": None if report is None else report.to_dict(),
            "cost_so_far": controller.cost(record.instances(run_id), now),
            **controller.counters,
        },
    )


def _wait(controller: Controller, seconds: float, interrupt: threading.Event | None) -> bool:
    """Wait one poll in the cloud's time; ``True`` when ``interrupt`` was set meanwhile."""
    clock = getattr(controller.cloud, "clock", None)
    if interrupt is None or getattr(clock, "mode", None) == "stepped":
        controller.cloud.sleep(seconds)
        return interrupt is not None and interrupt.is_set()
    return interrupt.wait(max(0.0, seconds) / float(getattr(clock, "speed", 1.0)))


def drive(
    record: RunRecord,
    run_id: str,
    controller: Controller,
    *,
    max_polls: int | None = None,
    interrupt: threading.Event | None = None,
) -> Outcome | None:
    """Poll until the run ends, honouring a cancel written to the record. ``None`` after
    ``max_polls`` polls, or when ``interrupt`` is set with no cancel asked (the caller stops:
    the run goes on, for :func:`resume_run`)."""
    polls = 0
    while True:
        if record.get(run_id)["state"] == "cancelling":
            controller.cancel()
        outcome = controller.poll()
        if outcome is not None:
            record.set_state(run_id, outcome.state, outcome.to_dict())
            _snapshot(record, run_id, controller)
            return outcome
        _snapshot(record, run_id, controller)
        polls += 1
        if max_polls is not None and polls >= max_polls:
            return None
        if _wait(controller, controller.settings.poll_s, interrupt) and record.get(run_id)["state"] != "cancelling":
            return None


def drive_run(
    run_id: str,
    *,
    state: str | Path = DEFAULT_STATE,
    max_polls: int | None = None,
    interrupt: threading.Event | None = None,
) -> Outcome | None:
    """Own the run and drive it to its end (a run created by :func:`create_run` starts, one
    with steps resumes). ``None`` when it is still running after ``max_polls`` polls or an
    ``interrupt`` without a cancel; an ended run's outcome is returned as recorded."""
    from dnnprov.control.clouds.ec2 import Ec2Cloud

    check_max_polls(max_polls)
    with closing(RunRecord(state, existing=True)) as record:
        row = record.get(run_id)
        if row["state"] not in LIVE:
            return None if row["outcome"] is None else _outcome(row["outcome"])
        if row["spec"].get("kind") == "serverless":
            raise InvalidInputError("RUN", f"{run_id} is a serverless run: resume it with resume_run")
        record.lock(run_id)
        controller = controller_of(record, run_id, row["spec"])
        steps = record.steps(run_id)
        if steps:
            controller.resume(steps, list(record.events(run_id)), record.memory(run_id))
        else:
            cloud = controller.cloud
            assert isinstance(cloud, Ec2Cloud)
            cloud.instances(run_id)  # clients made and endpoint reached before the clock starts
            spec = dict(row["spec"])
            spec["start_epoch"] = cloud.start_epoch = cloud.clock.now()
            record.set_spec(run_id, spec)
        return drive(record, run_id, controller, max_polls=max_polls, interrupt=interrupt)


def check_max_polls(max_polls: int | None) -> None:
    """Refuse a bound of polls below one (a driver polls at least once before it checks it)."""
    if max_polls is not None and (isinstance(max_polls, bool) or not isinstance(max_polls, int) or max_polls < 1):
        raise InvalidInputError("max_polls", f"must be an integer >= 1 or None, got {max_polls!r}")


def _outcome(data: Mapping[str, Any]) -> Outcome:
    return Outcome(
        state=data["state"],
        finish_s=data["finish_s"],
        end_s=data["end_s"],
        cost=data["cost"],
        loss=data["loss"],
        revocations=data["revocations"],
        launches=data["launches"],
        refusals=data["refusals"],
        on_demand_launched=data["on_demand_launched"],
    )


def run_plan(
    instance: SpotProblem | Mapping[str, Any] | str | Path,
    plan: SpotPlan | Mapping[str, Any] | str | Path,
    policy: str = "failover",
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    state: str | Path = DEFAULT_STATE,
    progress: str = "model",
    image_id: str | None = None,
    run_id: str | None = None,
    settings: RunSettings | None = None,
    max_polls: int | None = None,
    model: object = None,
) -> tuple[str, Outcome | None]:
    """Launch ``plan`` of ``instance`` and keep it training under ``policy`` until it ends:
    ``(run id, outcome)`` (outcome ``None``: still running after ``max_polls`` polls; go on
    with :func:`resume_run`). Arguments as ``dnnprov run``'s options (:func:`create_run`)."""
    check_max_polls(max_polls)
    run_id = create_run(
        instance,
        plan,
        policy,
        endpoint_url=endpoint_url,
        region=region,
        state=state,
        progress=progress,
        image_id=image_id,
        run_id=run_id,
        settings=settings,
        model=model,
    )
    return run_id, drive_run(run_id, state=state, max_polls=max_polls)


def resume_run(
    run_id: str,
    *,
    state: str | Path = DEFAULT_STATE,
    max_polls: int | None = None,
    interrupt: threading.Event | None = None,
) -> Any:
    """Take a run over after its controller stopped (adopt, re-send, go on): its outcome
    (``None`` while still running); an ended run's recorded outcome. Serverless runs too."""
    check_max_polls(max_polls)
    with closing(RunRecord(state, existing=True)) as record:
        row = record.get(run_id)
        if row["spec"].get("kind") == "serverless" and row["state"] in LIVE:
            from dnnprov.control.serverless import ServerlessRun

            record.lock(run_id)
            return ServerlessRun(record, run_id).drive(stop_after=max_polls)
    return drive_run(run_id, state=state, max_polls=max_polls, interrupt=interrupt)


def cancel_run(run_id: str, *, state: str | Path = DEFAULT_STATE) -> dict[str, Any]:
    """Tear the run down: ``{"run", "state", "torn_down", "cost"}``. With its controller
    alive (its lock held) the cancel is written to the record and that controller tears down
    at its next poll (``torn_down`` false); with none, this call takes the run over as
    :func:`resume_run` does and terminates every instance of the run (``torn_down`` true)."""
    with closing(RunRecord(state, existing=True)) as record:
        if not record.request_cancel(run_id):  # not live: ended (by its controller, maybe just now)
            row = record.get(run_id)
            cost = row["outcome"]["cost"] if row["outcome"] else None
            return {"run": run_id, "state": row["state"], "torn_down": False, "cost": cost}
        row = record.get(run_id)
        try:
            record.lock(run_id)
        except InvalidInputError:
            return {"run": run_id, "state": "cancelling", "torn_down": False, "cost": None}
        if row["spec"].get("kind") == "serverless":
            from dnnprov.control.serverless import ServerlessRun

            done = ServerlessRun(record, run_id).cancel()
            return {"run": run_id, "state": "cancelled", "torn_down": True, "cost": done.cost}
        if not record.steps(run_id):  # nothing was ever sent (a step is written before it is): nothing to tear down
            ended = _never_started(row["spec"])
            record.set_state(run_id, "cancelled", ended.to_dict())
            record.event(run_id, Event(0.0, "end", ended.to_dict()))
            return {"run": run_id, "state": "cancelled", "torn_down": True, "cost": ended.cost}
        controller = controller_of(record, run_id, row["spec"])
        controller.resume(record.steps(run_id), list(record.events(run_id)), record.memory(run_id))
        controller.cancel()
        outcome = drive(record, run_id, controller, max_polls=1)
        return {
            "run": run_id,
            "state": "cancelled",
            "torn_down": True,
            "cost": None if outcome is None else outcome.cost,
        }


def _never_started(spec: Mapping[str, Any]) -> Outcome:
    """The outcome of a run cancelled before its controller sent anything (its endpoint never
    answered, say): nothing launched, nothing spent, the loss where training starts."""
    from dnnprov.control.trainer import ProgressModel

    problem = spot_problem(spec["instance"])
    plan = recorded_plan(spec)
    model = ProgressModel(problem, plan, RunSettings(**spec["settings"]).join_s)
    return Outcome("cancelled", None, 0.0, 0.0, model.loss(model.start), 0, 0, 0, 0)


def run_status(run_id: str, *, state: str | Path = DEFAULT_STATE, events: bool = True) -> dict[str, Any]:
    """What ``dnnprov run status RUN --json`` prints: ``run``, ``state``, ``policy``, ``held``
    (live instances by role, pool and market), ``progress`` (the trainer's latest report as
    the controller saw it: ``time_s``, ``loss``, ``step``, ``finish_s``; ``None`` before the
    first), ``cost_so_far`` (dollars billed up to the last poll), ``counters`` (revocations,
    launches, refusals, on-demand workers launched), ``outcome`` (once ended) and ``events``."""
    with closing(RunRecord(state, existing=True)) as record:
        row = record.get(run_id)
        journal = list(record.events(run_id))
        held: dict[str, int] = {}
        for i in record.instances(run_id):
            if i.ended_s is None:
                key = f"{i.role} {i.pool} {i.market}"
                held[key] = held.get(key, 0) + 1
        latest = record.latest(run_id)
    status: dict[str, Any] = {
        "run": run_id,
        "state": row["state"],
        "policy": row["spec"].get("policy"),
        "held": held,
        "outcome": row["outcome"],
    }
    report = (latest or {}).get("report")
    ended = [e for e in journal if e["kind"] == "end"]
    if report is not None:
        status["progress"] = {
            "time_s": report["time_s"],
            "loss": report["loss"],
            "step": report.get("step"),
            "finish_s": report.get("finished_s"),
        }
    elif ended:
        end = ended[-1]
        status["progress"] = {
            "time_s": end.get("end_s", end["time_s"]),
            "loss": end.get("loss"),
            "step": None,
            "finish_s": end.get("finish_s"),
        }
    else:
        status["progress"] = None
    if row["outcome"]:
        status["cost_so_far"] = row["outcome"]["cost"]
    else:
        cost = (latest or {}).get("cost_so_far")
        status["cost_so_far"] = None if cost is None or not math.isfinite(cost) else cost
    status["counters"] = {
        k: (latest or {}).get(k, 0) for k in ("revocations", "launches", "refusals", "on_demand_launched")
    }
    if row["spec"].get("kind") == "serverless":
        status["kind"] = "serverless"
        status["plan"] = row["spec"]["plan"]
    if events:
        status["events"] = journal
    return status
