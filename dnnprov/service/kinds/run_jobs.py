"""The service's ``run`` jobs: a spot plan launched and kept training by the control loop.

``POST /v1/jobs`` with ``"kind": "run"`` (fields in :data:`RUN_FIELDS`, as ``dnnprov run``'s
options) stores the job, then :class:`RunJobs` drives it in a thread of the server
(:func:`dnnprov.control.api.drive_run`): a run waits on its cloud most of the time, lasts
as long as its training, and must not hold one of the solver processes or be killed at a
solver's time budget. The run's record is the ``runs.db`` of the folder ``DB.runs`` beside
the job store ``DB`` (:func:`runs_folder`), under the job's id as run id, so ``dnnprov run
status|cancel|resume JOB-ID --state DB.runs`` read it too.

- ``GET /v1/jobs/{id}`` of a run job adds ``"run"``: :func:`dnnprov.control.api.run_status`
  (state, instances held, progress, cost so far, counters, events) while it runs and after.
- ``POST /v1/jobs/{id}/cancel`` (or ``DELETE``) tears the run down: its thread is woken, sees
  the cancel in the record and terminates every instance of the run; with no thread alive
  (the job was queued, or its thread died) the teardown is done at once
  (:func:`dnnprov.control.api.cancel_run`).
- A run that ends makes the job ``done`` with the outcome as its result (``met``, ``missed``,
  ``gave-up``: a missed deadline is a run's outcome, not a job failure); an error of the
  cloud makes it ``failed`` after a teardown is tried.
- A server stopping leaves its runs running (their instances keep training); the next
  server on the store recovers the jobs and each run is resumed from its record, as
  ``dnnprov run resume`` does after ``kill -9``.

The server reads no file for a run: the instance is an object or ``embedded:REL``, the plan
an object, ``progress`` either ``"model"`` (the trainer stand-in at ``endpoint_url``) or an
http(s) URL, and ``model`` (``mpc``'s availability model) an object as ``risk fit --zones --out``
writes it (its table is built when the run is created, so a model that does not cover the plan
fails the job). ``endpoint_url`` is required: a run against AWS itself would spend with the
server's credentials, which no server option allows yet.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

from dnnprov.control.api import (
    availability_model,
    cancel_run,
    check_policy,
    create_run,
    drive_run,
    run_status,
    spot_plan,
)
from dnnprov.control.loop import RunSettings
from dnnprov.control.record import RunRecord
from dnnprov.errors import InvalidInputError
from dnnprov.problems.spot import SpotProblem
from dnnprov.problems.validation import checks as check
from dnnprov.service.events import log_event
from dnnprov.service.kinds.requests import CheckedRequest, body_fields, instance
from dnnprov.service.store import Store

#: The fields of a ``run`` job's body (besides ``kind``).
RUN_FIELDS = {
    "instance",
    "plan",
    "policy",
    "endpoint_url",
    "region",
    "progress",
    "image_id",
    "poll_s",
    "join_s",
    "horizon",
    "model",
}
#: How long a cancel waits for the run's thread to tear the run down before it answers.
CANCEL_WAIT_S = 30.0


def runs_folder(db_path: str | Path) -> Path:
    """The record folder of a job store's runs: ``DB.runs`` beside ``DB``."""
    return Path(f"{db_path}.runs")


def _url(field: str, value: object) -> str:
    text = check.text(field, value)
    if not text.startswith(("http://", "https://")) or len(text) > 2000:
        raise InvalidInputError(field, f"must be an http(s) URL, got {check.short(value)}")
    return text


def run_inputs(body: object) -> dict[str, Any]:
    """A ``run`` job's body checked, as :func:`dnnprov.control.api.create_run`'s arguments."""
    b = body_fields(body, RUN_FIELDS, ("instance", "plan", "endpoint_url"))
    problem = instance(b["instance"])
    if not isinstance(problem, SpotProblem):
        raise InvalidInputError("instance", "a run job needs a spot instance")
    if not isinstance(b["plan"], Mapping):
        raise InvalidInputError("plan", "must be a plan object (a plan document or a solve answer)")
    plan = spot_plan(b["plan"], problem)
    model = b.get("model")
    try:
        policy = check_policy(b.get("policy", "failover"), model)
    except InvalidInputError as exc:
        raise InvalidInputError(exc.field.removeprefix("--"), exc.problem) from None
    if model is not None:
        if not isinstance(model, Mapping):
            raise InvalidInputError("model", "must be an availability model object (risk fit --zones --out)")
        try:
            model = availability_model(model).to_dict()
        except InvalidInputError as exc:
            raise InvalidInputError(exc.field.removeprefix("--"), exc.problem) from None
    endpoint_url = _url("endpoint_url", b["endpoint_url"])
    progress = b.get("progress", "model")
    if progress != "model":
        progress = _url("progress", progress)
    image_id = None if b.get("image_id") is None else check.text("image_id", b["image_id"])
    from dnnprov.cloud.aws import check_region

    defaults = RunSettings()
    settings = RunSettings(
        poll_s=check.number("poll_s", b.get("poll_s", defaults.poll_s), exclusive_minimum=0),
        join_s=check.number("join_s", b.get("join_s", defaults.join_s), minimum=0),
        horizon=check.number("horizon", b.get("horizon", defaults.horizon), minimum=1),
    )
    return {
        "instance": problem,
        "plan": plan,
        "policy": policy,
        "endpoint_url": endpoint_url,
        # None: the region holding most of a multi-region plan's worker GPUs, else us-east-1 (create_run)
        "region": None if b.get("region") is None else check_region(b["region"]),
        "progress": progress,
        "image_id": image_id,
        "settings": settings,
        "model": model,
    }


def _not_in_a_worker() -> dict[str, Any]:
    raise RuntimeError("run jobs are driven by the server's run threads (RunJobs), not by a worker process")


def run_task(body: object, cap: float) -> CheckedRequest:
    """The checked ``run`` job (``prepare("run", ...)``): its run is started by :class:`RunJobs`."""
    inputs = run_inputs(body)
    return CheckedRequest("run", _not_in_a_worker, 0.0, 0.0, inputs["policy"])


class RunJobs:
    """The ``run`` jobs of one server: one thread per running run (module docstring)."""

    def __init__(self, store: Store, folder: Path) -> None:
        self.store, self.folder = store, Path(folder)
        self.closing = False
        self._threads: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self._lock = threading.Lock()

    def submit(self, job_id: str, body: Any, request_id: str | None = None) -> None:
        """Start driving a stored run job (a new run, or one recovered from the record)."""
        interrupt = threading.Event()
        thread = threading.Thread(
            target=self._run, args=(job_id, body, interrupt, request_id), name=f"dnnprov-run-{job_id[:8]}", daemon=True
        )
        with self._lock:
            if self.closing:
                return
            self._threads[job_id] = (thread, interrupt)
        thread.start()

    def owns(self, job_id: str) -> bool:
        """Whether ``job_id`` is a run job of this server or has a run in the record."""
        with self._lock:
            if job_id in self._threads:
                return True
        return self._exists(job_id)

    def _exists(self, job_id: str) -> bool:
        if not (self.folder / "runs.db").exists():
            return False
        with closing(RunRecord(self.folder)) as record:
            try:
                record.get(job_id)
            except InvalidInputError:
                return False
        return True

    def _run(self, job_id: str, body: Any, interrupt: threading.Event, request_id: str | None) -> None:
        try:
            if not self.store.start(job_id):
                return  # cancelled before it started
            log_event(logging.INFO, "job_started", job_id=job_id, kind="run", request_id=request_id)
            if not self._exists(job_id):
                create_run(**run_inputs(body), state=self.folder, run_id=job_id)
            if interrupt.is_set() and not self.closing:  # cancelled while the run was being created
                cancel_run(job_id, state=self.folder)
            outcome = drive_run(job_id, state=self.folder, interrupt=interrupt)
            if outcome is None:
                return  # the server is stopping: the run goes on
            self.store.finish(job_id, "done", result={"run": job_id, **outcome.to_dict()})
            log_event(logging.INFO, "job_finished", job_id=job_id, kind="run", state=outcome.state)
        except Exception as exc:  # noqa: BLE001  (the cloud failed, the record is locked, ...: the job fails)
            field = exc.field if isinstance(exc, InvalidInputError) else ""
            message = exc.problem if isinstance(exc, InvalidInputError) else f"{type(exc).__name__}: {exc}"
            message += self._tear_down_after_failure(job_id)
            try:
                self.store.finish(job_id, "failed", error={"field": field, "message": message})
            except Exception as store_exc:  # noqa: BLE001  (the store closed under a stopping server)
                message += f"; not recorded: {store_exc}"
            log_event(logging.WARNING, "job_failed", job_id=job_id, kind="run", error=message)
        finally:
            with self._lock:
                self._threads.pop(job_id, None)

    def _tear_down_after_failure(self, job_id: str) -> str:
        if not self._exists(job_id):
            return ""
        try:
            done = cancel_run(job_id, state=self.folder)
        except Exception as exc:  # noqa: BLE001  (whatever stops the teardown is reported)
            return (
                f" (the teardown failed too: {type(exc).__name__}: {exc}; "
                f"finish it with `dnnprov run cancel {job_id} --state {self.folder}`)"
            )
        return " (the run was torn down)" if done["torn_down"] else ""

    def cancel(self, job_id: str) -> None:
        """Tear down the run of a job the store has just cancelled (module docstring)."""
        with self._lock:
            running = self._threads.get(job_id)
        if running is not None:
            thread, interrupt = running
            if self._exists(job_id):
                cancel_run(job_id, state=self.folder)  # the thread holds the lock: marks it cancelling
            interrupt.set()
            thread.join(CANCEL_WAIT_S)
            if not thread.is_alive():
                return
        if self._exists(job_id):
            cancel_run(job_id, state=self.folder)  # no controller alive: tear down here

    def status(self, job_id: str) -> dict[str, Any] | None:
        """The run's status (:func:`dnnprov.control.api.run_status`); ``None`` before its run exists."""
        if not self._exists(job_id):
            return None
        return run_status(job_id, state=self.folder)

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop driving (the runs go on, for the next server): wake every run thread and wait."""
        with self._lock:
            self.closing = True
            running = list(self._threads.values())
        for _, interrupt in running:
            interrupt.set()
        for thread, _ in running:
            thread.join(timeout_s)
