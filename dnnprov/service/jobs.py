"""The life of a stored job: queued, running, then done, failed or cancelled, whatever fails.

:class:`JobRunner` hands stored jobs to the executor (local worker processes or Dask) and
records their ends. Store errors are retried (a store locked by another process delays a
job, it never kills a slot); a worker process that dies takes one attempt and the job is
tried again up to :data:`MAX_ATTEMPTS`; a drain (SIGTERM) starts nothing new and puts a
running job it has to stop back in the queue without counting the attempt. Every step is
one JSON log event (``job_started``, ``job_finished``, ``job_failed``, ``job_retried``,
``job_requeued``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from dnnprov.errors import InvalidInputError
from dnnprov.execution.pool import Outcome, Work
from dnnprov.service.events import log_event
from dnnprov.service.kinds.tasks import prepare
from dnnprov.service.pool import lane_of
from dnnprov.service.store import Job, Store, StoreBusy, StoreFailed

#: A job is failed after this many attempts ended by a crash (a worker or the server killed).
MAX_ATTEMPTS = 3
#: How long a worker thread retries one store operation before it logs and tries again.
STORE_RETRY_S = 10.0
#: Tries of one step of a job when the store fails (disk full, ...), a pause apart; then the step is skipped.
STORE_FAILED_TRIES = 3
STORE_FAILED_PAUSE_S = 1.0


class Executor(Protocol):
    """What runs works: :class:`~dnnprov.execution.pool.WorkerPool` or :class:`~dnnprov.execution.dask.DaskPool`."""

    closing: bool
    draining: bool

    def reserve(self, work: Work) -> None: ...
    def release(self, work: Work) -> None: ...
    def submit(self, work: Work) -> Any: ...
    def cancel(self, work: Work) -> None: ...


class JobRunner:
    """Stored jobs on an executor, and what happens at each of their ends."""

    def __init__(
        self,
        store: Store,
        executor: Executor,
        *,
        max_time_limit_s: float,
        record: Callable[[str, str, Outcome], None],
        runs: Any = None,
    ) -> None:
        self.store, self.executor = store, executor
        #: the ``run`` jobs' driver (:class:`dnnprov.service.kinds.run_jobs.RunJobs`): they run in its threads
        self.runs = runs
        self.max_time_limit_s = max_time_limit_s
        self.record = record
        self._works: dict[str, Work] = {}
        self._lock = threading.Lock()

    def active(self, job_id: str) -> Work | None:
        """The work of a queued or running job of this server."""
        with self._lock:
            return self._works.get(job_id)

    def submit(
        self,
        job_id: str,
        kind: str,
        body: Any,
        budget_s: float,
        method: str,
        *,
        work: Work | None = None,
        request_id: str | None = None,
        tenant: str = "",
    ) -> None:
        """Queue a stored job (``work``: already admitted; else admitted whatever the count)."""
        if kind == "run" and self.runs is not None:  # no worker process: the run's thread
            if work is not None:
                self.executor.release(work)
            self.runs.submit(job_id, body, request_id)
            return
        if work is None:
            work = Work((kind, body), budget_s, lane=lane_of(kind, method), tenant=tenant)
            self.executor.reserve(work)
        work.args, work.budget_s, work.job_id = (kind, body), budget_s, job_id
        work.before_start = lambda: self._start(job_id, request_id)
        with self._lock:
            self._works[job_id] = work
        self.executor.submit(work).add_done_callback(
            lambda future: self._ended_logged(job_id, kind, method, request_id, future.result())
        )

    def cancel(self, job_id: str) -> None:
        """Stop the work of a job cancelled in the store (queued: never starts; running: killed;
        a run: torn down)."""
        if self.runs is not None and self.runs.owns(job_id):
            self.runs.cancel(job_id)
            return
        work = self.active(job_id)
        if work is not None:
            self.executor.cancel(work)

    def recover(self) -> int:
        """Queue every job the store has left queued or running (at start); returns how many."""
        jobs = self._store_call(self.store.recover) or []
        for job in jobs:
            if job.attempts >= MAX_ATTEMPTS:
                self._fail_now(
                    job, f"stopped {job.attempts} times while it ran (server or worker killed); not tried again"
                )
                continue
            try:
                task = prepare(job.kind, job.body, max_time_limit_s=self.max_time_limit_s)
            except InvalidInputError as exc:
                self._fail_now(job, exc.problem, exc.field)
                continue
            self.submit(job.id, job.kind, job.body, task.budget_s, task.method, tenant=job.tenant)
        return len(jobs)

    # ------------------------------------------------------------------ inside worker threads
    def _start(self, job_id: str, request_id: str | None) -> bool:
        started = self._store_call(
            lambda: self.store.start(job_id, retry_s=STORE_RETRY_S),
            give_up=lambda: self.executor.draining or self.executor.closing,
        )
        if started:
            job = self._store_call(lambda: self.store.get(job_id))
            log_event(
                logging.INFO,
                "job_started",
                job_id=job_id,
                kind=job.kind if job else None,
                attempt=job.attempts if job else None,
                request_id=request_id,
            )
        return bool(started)

    def _ended_logged(self, job_id: str, kind: str, method: str, request_id: str | None, outcome: Outcome) -> None:
        try:
            self._ended(job_id, kind, method, request_id, outcome)
        except Exception as exc:  # noqa: BLE001 - e.g. the store closed under a stopping server; a restart recovers the job
            log_event(logging.ERROR, "job_end_not_recorded", job_id=job_id, error=f"{type(exc).__name__}: {exc}")

    def _ended(self, job_id: str, kind: str, method: str, request_id: str | None, outcome: Outcome) -> None:
        with self._lock:
            work = self._works.pop(job_id, None)
        ids = {"job_id": job_id, "kind": kind, "request_id": request_id}
        status = outcome[0]
        if status == "cancelled":
            return  # the store already says cancelled (or, drained before it started, still queued)
        if status == "shutdown":
            if self._store_call(lambda: self.store.requeue(job_id, refund=True, retry_s=STORE_RETRY_S)):
                log_event(logging.INFO, "job_requeued", reason="server stopping; the attempt is not counted", **ids)
            return
        if status == "crashed":
            job = self._store_call(lambda: self.store.get(job_id))
            if job is not None and job.status == "running" and job.attempts < MAX_ATTEMPTS:
                log_event(logging.WARNING, "job_retried", reason=outcome[1], attempt=job.attempts, **ids)
                if self._store_call(lambda: self.store.requeue(job_id, refund=False, retry_s=STORE_RETRY_S)):
                    self.submit(
                        job_id,
                        kind,
                        work.args[1] if work else job.body,
                        work.budget_s if work else 60.0,
                        method,
                        request_id=request_id,
                        tenant=job.tenant,
                    )
                return
        self.record(kind, method, outcome)
        if status == "ok":
            result, error, final = outcome[1], None, "done"
        elif status == "invalid":
            result, error, final = None, {"field": outcome[1], "message": outcome[2]}, "failed"
        else:
            result, error, final = None, {"field": "", "message": outcome[1]}, "failed"
        try:
            stored = self._store_call(
                lambda: self.store.finish(job_id, final, result=result, error=error, retry_s=STORE_RETRY_S)
            )
        except (TypeError, ValueError) as exc:  # an answer JSON cannot hold: the job must still end
            error = {"field": "", "message": f"the answer could not be stored: {exc}"}
            final = "failed"
            stored = self._store_call(lambda: self.store.finish(job_id, "failed", error=error, retry_s=STORE_RETRY_S))
        if stored:
            seconds = round(outcome[2], 3) if status == "ok" else None
            log_event(
                logging.INFO if final == "done" else logging.WARNING,
                "job_finished" if final == "done" else "job_failed",
                seconds=seconds,
                error=error,
                **ids,
            )

    def _fail_now(self, job: Job, message: str, field: str = "") -> None:
        self._store_call(lambda: self.store.start(job.id))
        self._store_call(lambda: self.store.finish(job.id, "failed", error={"field": field, "message": message}))
        log_event(logging.WARNING, "job_failed", job_id=job.id, kind=job.kind, error=message, attempts=job.attempts)

    def _store_call(self, call: Callable[[], Any], give_up: Callable[[], bool] = lambda: False) -> Any:
        """``call()`` until the store takes it; ``None`` when ``give_up()`` turns true, the server closes,
        or the store failed (:class:`StoreFailed`) :data:`STORE_FAILED_TRIES` times (the job keeps its
        stored state, which the next start recovers)."""
        failures = 0
        while True:
            try:
                return call()
            except StoreBusy as exc:
                log_event(logging.WARNING, "store_busy", error=str(exc))
                if give_up() or self.executor.closing:
                    return None
            except StoreFailed as exc:  # disk full, corrupt, file gone: a few more tries, then the step is skipped
                failures += 1
                log_event(logging.ERROR, "store_failed", reason=exc.reason, error=str(exc), tries=failures)
                if failures >= STORE_FAILED_TRIES or give_up() or self.executor.closing:
                    return None
                time.sleep(STORE_FAILED_PAUSE_S)
