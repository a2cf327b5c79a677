"""The local cloud: the control loop's cloud interface with the reference job's processes as instances.

``dnnprov run INSTANCE --plan PLAN --policy P --cloud local[:CONFIG]`` trains the reference
job for real under the control loop (docs/training.md):

- **launch** a PS: start the PS process (its address ``127.0.0.1:PORT`` is what the loop hands
  the workers); a worker: start a worker process of the type's batch and emulated GPU time,
  connected to the PS address it was handed (a worker launched after the start first
  waits ``join_s``, a launched instance's boot and join). On-demand launches always succeed;
  spot launches follow :class:`dnnprov.control.clouds.capacity.CapacityBook`, the rule of the trace
  cloud and the EC2 twin, over the pools of the given traces (or of constant capacity);
- **revoke**: at a capacity drop the newest instances get the notice, and 120 s later their
  processes are killed with SIGKILL (a thread applies each event at its time); **terminate**
  kills them at once;
- **clock**: job seconds, ``speed`` per wall second (:mod:`dnnprov.training.job`), the
  traces read at that accelerated time; the PS's progress reports use the same clock.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Self

import numpy as np

from dnnprov.control.cloud import Instance, LaunchOutcome, LaunchRequest
from dnnprov.control.clouds.capacity import CapacityBook, PoolSpec
from dnnprov.control.loop import Controller, Outcome, PoolInfo, RunSettings
from dnnprov.control.trainer import read_report
from dnnprov.errors import InvalidInputError
from dnnprov.json_files import read_json_file
from dnnprov.problems.interruption import Trace, load_trace
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import SpotPlan
from dnnprov.training.cluster import Launcher
from dnnprov.training.job import Job, WorkerType, job_time
from dnnprov.training.ps import PsSettings
from dnnprov.training.worker import WorkerSettings

#: Tick of the constant-capacity traces used for types given no trace.
CONSTANT_GAP_S = 3600.0
CONFIG_FIELDS = ("speed", "job", "types", "traces", "offset", "workdir")


@dataclass
class LocalConfig:
    """What ``--cloud local:CONFIG`` says (every field optional): the job, the emulated
    hardware per type, the traces, and where the processes write."""

    job: Job = field(default_factory=Job)
    types: dict[str, WorkerType] = field(default_factory=dict)  # emulated hardware; default: the instance's
    traces: dict[str, list[Trace]] = field(default_factory=dict)
    offset: int = 0
    workdir: str | None = None

    @classmethod
    def read(cls, path: str) -> LocalConfig:
        """Read a config file; errors name the file and the field."""
        data = read_json_file(path)
        if not isinstance(data, dict):
            raise InvalidInputError(path, "a local-cloud config is a JSON object")
        unknown = sorted(set(data) - set(CONFIG_FIELDS))
        if unknown:
            raise InvalidInputError(f"{path}: {unknown[0]}", f"unknown field (fields: {', '.join(CONFIG_FIELDS)})")
        try:
            job_fields = dict(data.get("job", {}))
            if "speed" in data:
                job_fields["speed"] = data["speed"]
            job = Job(**job_fields)
            types = {
                name: WorkerType(name, int(v["batch"]), float(v["compute_s"]))
                for name, v in dict(data.get("types", {})).items()
            }
        except (TypeError, KeyError, ValueError) as exc:
            raise InvalidInputError(f"{path}: job/types", f"bad value ({exc})") from None
        traces_given = data.get("traces", {})
        if not isinstance(traces_given, dict) or not all(isinstance(v, list) for v in traces_given.values()):
            raise InvalidInputError(f"{path}: traces", "an object {TYPE: [trace file, ...]}")
        traces = {name: [load_trace(Path(path).parent / f) for f in files] for name, files in traces_given.items()}
        offset = data.get("offset", 0)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInputError(f"{path}: offset", f"a whole number of ticks >= 0, got {offset!r}")
        workdir = data.get("workdir")
        if workdir is not None and (not isinstance(workdir, str) or not workdir):
            raise InvalidInputError(f"{path}: workdir", f"a folder path, got {workdir!r}")
        return cls(job=job, types=types, traces=traces, offset=offset, workdir=workdir)


def worker_types(problem: SpotProblem, given: Mapping[str, WorkerType]) -> dict[str, WorkerType]:
    """The emulated hardware of every type: as given (its batch must be the instance's worker
    batch), else the instance's worker batch and compute time T_comp."""
    cols = problem.columns()
    out: dict[str, WorkerType] = {}
    for name, batch, compute in zip(cols.type_names, cols.batch, cols.compute_time):
        if name in out:
            continue
        kind = given.get(name) or WorkerType(name, int(batch), float(compute))
        if kind.batch != int(batch):
            raise InvalidInputError(
                f"types.{name}.batch",
                f"{kind.batch} differs from the instance's worker batch {int(batch)} (gpus x batch_per_gpu)",
            )
        out[name] = kind
    return out


def pools_of(
    problem: SpotProblem, traces: Mapping[str, Sequence[Trace]], offset: int, horizon_s: float
) -> list[PoolSpec]:
    """One pool per trace of a type; a type without traces gets one pool per zone (or one
    ``local`` pool) of constant capacity (the zone's, else the type's quota)."""
    pools = []
    ticks = math.ceil(horizon_s / CONSTANT_GAP_S) + offset + 2
    for name, given in traces.items():
        for trace in given:
            if offset + math.floor(horizon_s / trace.gap_s) >= len(trace.alive):
                raise InvalidInputError(
                    f"traces.{name}",
                    f"{trace.path}: {len(trace.alive)} ticks of {trace.gap_s:g} s "
                    f"from offset {offset} end before the run's horizon "
                    f"({horizon_s:g} s)",
                )
    for t in problem.instance_types:
        if t.name in traces:
            for k, trace in enumerate(traces[t.name]):
                zone = trace.zone or f"zone-{k}"
                prices = {z.zone: z.spot_price_per_h for z in t.zones if z.spot_price_per_h is not None}
                pools.append(PoolSpec(t.name, zone, trace, offset, prices.get(zone, t.spot_price_per_h)))
            continue
        zones = [(z.zone, z.capacity, z.spot_price_per_h) for z in t.zones] or [("local", None, None)]
        for zone, capacity, price in zones:
            alive = np.full(ticks, t.quota if capacity is None else capacity, dtype=np.int64)
            pools.append(
                PoolSpec(
                    t.name,
                    zone,
                    Trace(f"constant-{t.name}-{zone}", CONSTANT_GAP_S, alive),
                    offset,
                    t.spot_price_per_h if price is None else price,
                )
            )
    return pools


class LocalCloud:
    """The cloud interface over local processes (module docstring). Use as a context manager:
    leaving it kills every process of the run."""

    def __init__(
        self,
        book: CapacityBook,
        job: Job,
        kinds: Mapping[str, WorkerType],
        workdir: str | Path,
        *,
        run_id: str,
        join_s: float,
        target_loss: float | None,
        launcher: Launcher | None = None,
    ) -> None:
        self.book, self.job, self.kinds = book, job, dict(kinds)
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.report = str(self.workdir / "progress.json")
        self.run_id, self.join_s, self.target_loss = run_id, join_s, target_loss
        self.launcher = launcher or Launcher()
        self.launcher.warm(job)  # before the clock starts: launches then take milliseconds
        self.key = os.urandom(16)
        # The clock reads 0 until the first sleep (the loop's first poll acts "at the start", as on
        # the trace cloud); the processes read the epoch from shared memory.
        self.epoch = self.launcher.ctx.Value("d", math.nan, lock=False)
        self._instances: dict[str, Instance] = {}
        self._processes: dict[str, BaseProcess] = {}
        self._by_token: dict[str, LaunchOutcome] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._failed: InvalidInputError | None = None  # the clock ran past a trace's end
        self._ticker = threading.Thread(target=self._tick, daemon=True)
        self._ticker.start()

    # ---------------------------------------------------------------- clock
    def now(self) -> float:
        return job_time(self.epoch, self.job.speed)

    def sleep(self, seconds: float) -> None:
        if math.isnan(self.epoch.value):
            self.epoch.value = time.time()
        time.sleep(max(0.0, seconds) / self.job.speed)

    def _tick(self) -> None:
        """Apply notices and reclaims at their times (within a few wall milliseconds)."""
        while not self._stop.is_set():
            with self._lock:
                try:
                    self._sync()
                except InvalidInputError as exc:
                    self._failed = exc
                    return
                wait = (self.book.next_change_s() - self.now()) / self.job.speed
            self._stop.wait(min(max(wait, 0.001), 0.2))

    def _sync(self) -> None:
        if self._failed is not None:
            raise self._failed
        for event in self.book.advance(max(self.book.now_s, self.now())):
            instance = self._instances[event.instance_id]
            if event.kind == "notice":
                instance.notice_s = event.time_s
            elif instance.ended_s is None:
                instance.ended_s = event.time_s
                self.launcher.kill(self._processes[event.instance_id])

    # ---------------------------------------------------------------- actions
    def launch(self, request: LaunchRequest) -> LaunchOutcome:
        with self._lock:
            self._sync()
            if request.token in self._by_token:
                return self._by_token[request.token]
            if request.count < 1:
                raise InvalidInputError("count", f"a launch asks for at least one instance, got {request.count}")
            if request.role == "worker" and request.type_name not in self.kinds:
                raise InvalidInputError(f"plan.{request.type_name}", "no such worker type on the local cloud")
            pool = f"{request.type_name}@{request.zone}"
            granted = request.count
            if request.market == "spot":
                granted = self.book.grant(pool, 1, request.count)
                if granted == 0:
                    outcome = LaunchOutcome(
                        error_code="InsufficientInstanceCapacity", message=f"no spot capacity in {pool} now"
                    )
                    self._by_token[request.token] = outcome
                    return outcome
            made = [self._start(request) for _ in range(granted)]
            if request.market == "spot":
                self.book.add(pool, [i.instance_id for i in made])
            outcome = LaunchOutcome(instances=[Instance.from_dict(i.to_dict()) for i in made])
            self._by_token[request.token] = outcome
            return outcome

    def _start(self, request: LaunchRequest) -> Instance:
        now = self.now()
        instance_id = f"local-{len(self._instances) + 1:04d}"
        address = request.ps_address
        if request.role == "ps":
            settings = PsSettings(
                run_id=self.run_id,
                epoch=self.epoch,
                authkey=self.key,
                report=self.report,
                target_loss=self.target_loss,
                max_wall_s=7 * 24 * 3600.0,
            )
            process, address = self.launcher.start_ps(self.job, settings)
        else:
            if address is None:
                raise InvalidInputError("ps_address", "a worker needs the PS address")
            delay = 0.0 if now == 0 else self.join_s  # the loop's rule (ProgressModel.joined_s)
            process = self.launcher.start_worker(
                self.job,
                WorkerSettings(
                    ps_address=address,
                    authkey=self.key,
                    index=len(self._instances),
                    kind=self.kinds[request.type_name],
                    epoch=self.epoch,
                    log_dir=str(self.workdir),
                    delay_s=delay,
                ),
            )
        instance = Instance(
            instance_id=instance_id,
            type_name=request.type_name,
            zone=request.zone,
            market=request.market,
            role=request.role,
            launched_s=now,
            step=request.step,
            ps_address=address,
        )
        self._instances[instance_id] = instance
        self._processes[instance_id] = process
        return instance

    def terminate(self, instance_ids: Sequence[str]) -> None:
        with self._lock:
            self._sync()
            for instance_id in instance_ids:
                instance = self._instances.get(instance_id)
                if instance is not None and instance.ended_s is None:
                    instance.ended_s = self.now()
                    self.launcher.kill(self._processes[instance_id])
                    self.book.release(instance_id)

    def instances(self, run_id: str) -> list[Instance]:
        with self._lock:
            self._sync()
            return [Instance.from_dict(i.to_dict()) for i in self._instances.values()]

    def close(self) -> None:
        """Stop the clock's thread and kill every process still running."""
        self._stop.set()
        self._ticker.join(5.0)
        for process in self._processes.values():
            self.launcher.kill(process)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_local(
    problem: SpotProblem,
    plan: SpotPlan,
    policy: Any,
    settings: RunSettings,
    config: LocalConfig,
    *,
    run_id: str | None = None,
    max_polls: int | None = None,
    launcher: Launcher | None = None,
) -> tuple[str, Outcome, dict[str, Any]]:
    """Run ``plan`` on the local cloud under ``policy`` (a policy object) until the loop ends;
    returns the run id, the loop's outcome and the run's details (the events, the work folder)."""
    if plan.ps != 1:
        raise InvalidInputError("plan.ps", f"the reference trainer has one PS; the plan asks for {plan.ps}")
    run_id = run_id or f"local-{int(time.time())}"
    horizon_s = settings.horizon * problem.slo.time_s + settings.poll_s
    pools = pools_of(problem, config.traces, config.offset, horizon_s)
    workdir = Path(config.workdir) if config.workdir else Path(tempfile.mkdtemp(prefix="dnnprov-local-"))
    if config.workdir and workdir.exists() and any(workdir.iterdir()):
        raise InvalidInputError(str(workdir), "the local cloud's work folder must be empty or new")
    kinds = worker_types(problem, config.types)
    with LocalCloud(
        CapacityBook(pools),
        config.job,
        kinds,
        workdir,
        run_id=run_id,
        join_s=settings.join_s,
        target_loss=problem.slo.loss,
        launcher=launcher,
    ) as cloud:
        controller = Controller(
            problem,
            plan,
            policy,
            cloud,
            run_id=run_id,
            pools=[PoolInfo(p.type_name, p.zone, p.price_per_h) for p in pools],
            trainer=lambda instances, now: read_report(cloud.report),
            settings=settings,
        )
        outcome = controller.run(max_polls)
        details = {
            "workdir": str(workdir),
            "events": [e.to_dict() for e in controller.events],
            "job": config.job.to_dict(),
            "speed": config.job.speed,
            "instances": [i.to_dict() for i in cloud.instances(run_id)],
        }
    if not config.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    return run_id, outcome, details


def parse_cloud(value: str) -> LocalConfig | None:
    """``--cloud``: ``ec2`` (None), ``local`` (defaults) or ``local:CONFIG.json``."""
    if value == "ec2":
        return None
    if value == "local":
        return LocalConfig()
    if value.startswith("local:"):
        return LocalConfig.read(value.removeprefix("local:"))
    raise InvalidInputError("--cloud", f"ec2, local or local:CONFIG.json; got {value!r}")


def cli_run(
    problem: SpotProblem,
    plan: SpotPlan,
    policy_name: str,
    settings: RunSettings,
    cloud: str,
    *,
    run_id: str | None,
    max_polls: int | None,
    model: object = None,
) -> tuple[str, Outcome]:
    """``dnnprov run ... --cloud local[:CONFIG]``: the run id and the loop's outcome. ``model``:
    ``mpc``'s availability model (as ``--model`` takes it), its table planned as on EC2."""
    from dnnprov.control.api import availability_model, check_policy, mpc_table
    from dnnprov.revocation.policies import make_policy

    check_policy(policy_name, model)
    config = parse_cloud(cloud)
    if config is None:
        raise InvalidInputError("--cloud", "cli_run is for the local cloud")
    table = None if model is None else mpc_table(problem, plan, availability_model(model), settings)
    policy = make_policy(policy_name, table, problem=problem, plan=plan)
    run_id, outcome, _ = run_local(problem, plan, policy, settings, config, run_id=run_id, max_polls=max_polls)
    return run_id, outcome
