"""Jobs on a Dask cluster (``dnnprov serve --dask``, ``dnnprov batch --dask``) with the worker pool's lifecycle.

:class:`DaskPool` is a :class:`~dnnprov.execution.pool.WorkerPool` whose slots hand each
work to the cluster (``client.submit``) instead of to a local worker process: one slot per
worker thread of the cluster at start, so admission, the FIFO queue, drain (nothing queued
starts; running work is stopped and re-queued), cancellation and the time budget behave as
with local processes. The job runs in the Dask worker's thread, or with ``supervised`` in a
:class:`~dnnprov.execution.process.WorkerProcess` of that worker (kept for the next job), which
is killed at the work's budget and whose crash is the job's ``("crashed", ...)``, as locally.
Dask cannot stop a job already running in a worker thread: a cancelled or overrunning job is
given up here at once (its slot is free) and ends on the worker at its own time limit.

The cluster's own faults, watched by one thread (:meth:`DaskPool._watch`, every
:data:`WATCH_S` seconds):

- **A worker dies while it runs a task.** The scheduler would run the task again on another
  worker, silently, while the budget clock goes on. The watch asks the scheduler how many
  workers died holding each running task (``TaskState.suspicious``); at the first, the
  task is given up and its work ends ``("crashed", ...)``, so the job is retried as its
  next attempt (counted, up to the attempt limit) with a budget of its own. A task the
  scheduler itself fails (``KilledWorker``) ends the same way.
- **The scheduler is lost.** The client cancels every future; a work that was not
  cancelled by us ends ``("crashed", ...)`` and its job is retried. Slots take no new work
  until the client is connected again: Dask's client reconnects to the same address for
  :data:`RECONNECT_S` seconds, after which the watch makes a new client, every
  :data:`WATCH_S` seconds, until the scheduler answers. A submission that fails because
  the connection is down waits for it and is sent again (no attempt is spent on it).
- **Readiness.** :meth:`DaskPool.problems` names what is wrong (``dask scheduler
  unreachable``, ``dask cluster has no worker``) for ``/readyz``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import logging
import threading
import time
from typing import Any

from dnnprov.execution.pool import Outcome, Slot, Work, WorkerPool
from dnnprov.execution.process import WorkerProcess, resolve, run_once

#: The service's JSON log (`dnnprov serve` configures it; a batch leaves it to Python's defaults).
LOG = logging.getLogger("dnnprov.service")
#: Seconds between two looks of the watch at the client and the running tasks.
WATCH_S = 1.0
#: Seconds Dask's client keeps trying to reconnect to a lost scheduler before it closes.
RECONNECT_S = 10.0
#: Longest wait of a slot for one answer of a future, between two looks at its work.
POLL_S = 0.5
#: Longest start of a supervised worker process on a Dask worker (not counted in the budget).
START_LIMIT_S = 120.0

#: Idle supervised worker processes of this Dask worker, by (runner, warm-up).
_IDLE: dict[tuple[str, str], collections.deque[WorkerProcess]] = collections.defaultdict(collections.deque)
_IDLE_LOCK = threading.Lock()


def call(runner: str, args: tuple[Any, ...]) -> Any:
    """Run on a Dask worker: the job function ``runner`` on ``args``, in the worker's thread."""
    return resolve(runner)(*args)


def call_supervised(runner: str, warm_up: str, args: tuple[Any, ...], budget_s: float) -> Outcome:
    """Run on a Dask worker: the job in a worker process of this Dask worker, killed past ``budget_s``."""
    with _IDLE_LOCK:
        idle = _IDLE[(runner, warm_up)]
        process = idle.popleft() if idle else None
    if process is None or not process.alive():
        if process is not None:
            process.close()
        process = WorkerProcess(runner, warm_up, quiet=True)
    outcome = run_once(process, args, budget_s, START_LIMIT_S)
    if process.alive() and outcome[0] not in ("killed", "crashed"):
        with _IDLE_LOCK:
            _IDLE[(runner, warm_up)].append(process)
    else:
        process.close()
    return outcome


def release() -> int:
    """Run on every Dask worker before the pool closes: stop its idle worker processes (so that
    no Dask worker still waits on one when its nanny stops it); how many."""
    with _IDLE_LOCK:
        processes = [p for idle in _IDLE.values() for p in idle]
        _IDLE.clear()
    for process in processes:
        process.close()
    return len(processes)


def _log(event: str, level: int = logging.INFO, **fields: Any) -> None:
    LOG.log(
        level,
        json.dumps(
            {"ts": round(time.time(), 3), "level": logging.getLevelName(level).lower(), "event": event, **fields}
        ),
    )


class DaskSlot(Slot):
    """One worker thread of the cluster: runs one work at a time there."""

    pool: DaskPool

    def __init__(self, pool: DaskPool, index: int) -> None:
        self.pool, self.index = pool, index
        self.current: Work | None = None
        self.future: Any = None
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, name=f"dnnprov-dask-slot-{index}", daemon=True)
        self.thread.start()

    @property
    def warm(self) -> bool:
        """Always: a slot of the cluster has no warm-up of its own."""
        return True

    def kill(self) -> None:
        """Give up the running work (the cluster is asked to cancel it)."""
        future = self.future
        if future is not None:
            future.cancel()

    def shutdown(self) -> None:
        """Nothing to reap: the cluster's workers are not ours."""

    def _await_ready(self) -> None:
        """Take no work while the client is not connected to the scheduler."""
        while not self.pool.connected and not self.pool.closing:
            time.sleep(0.2)

    def _serve(self, work: Work) -> None:
        if work.cancelled or (work.before_start is not None and not work.before_start()):
            self._end(work, ("cancelled",))
            return
        with self.lock:
            self.current = work
        work.started = time.perf_counter()
        try:
            outcome = self._submit(work) or self._wait(work)
        finally:
            with self.lock:
                self.current, self.future = None, None
        self._end(work, outcome)

    def _submit(self, work: Work) -> Outcome | None:
        """Send the work to the cluster, waiting for a connection if there is none; an outcome if it ended first."""
        while True:
            if work.stopping or self.pool.closing:
                return ("shutdown",)
            if work.cancelled:
                return ("cancelled",)
            try:
                future = self.pool.submit_to_cluster(work)
            except Exception as exc:  # noqa: BLE001 (ClosedClientError, CommClosedError, OSError: the link is down)
                _log("dask_submit_failed", logging.WARNING, error=f"{type(exc).__name__}: {exc}"[:300])
                self.pool.connected = False
                self._await_ready()
                continue
            with self.lock:
                self.future = future
            return None

    def _wait(self, work: Work) -> Outcome:
        """The task's outcome within the budget of this attempt, or why it ended without one."""
        from distributed import KilledWorker

        deadline = time.monotonic() + work.budget_s + (START_LIMIT_S if self.pool.supervised else 0.0)
        future = self.future
        while True:
            try:
                return tuple(future.result(timeout=max(0.01, min(POLL_S, deadline - time.monotonic()))))
            except (concurrent.futures.TimeoutError, TimeoutError):
                if self.pool.worker_died(future.key):
                    future.cancel()
                    return ("crashed", "the Dask worker running the task died; the task was given up")
                if time.monotonic() < deadline:
                    continue
                future.cancel()
                if work.stopping or self.pool.closing:
                    return ("shutdown",)
                if work.cancelled:
                    return ("cancelled",)
                return ("killed", f"the task ran longer than its budget of {work.budget_s:g} s and was given up")
            except concurrent.futures.CancelledError:
                if work.stopping or self.pool.closing:
                    return ("shutdown",)
                if work.cancelled:
                    return ("cancelled",)
                self.pool.connected = False  # cancelled by the client itself: the scheduler was lost
                return ("crashed", "the connection to the Dask scheduler was lost while the task ran")
            except KilledWorker as exc:
                return ("crashed", f"the Dask workers running the task died: {exc}")
            except Exception as exc:  # noqa: BLE001 (the cluster went away, a lost connection, ...)
                if work.stopping or self.pool.closing:
                    return ("shutdown",)
                if work.cancelled:
                    return ("cancelled",)
                return ("crashed", f"the Dask cluster failed the task: {type(exc).__name__}: {exc}")


class DaskPool(WorkerPool):
    """The worker pool's queue and admission, with slots that run on the Dask cluster at ``address``.

    ``supervised``: each job runs in a worker process of the Dask worker (:func:`call_supervised`),
    else in the Dask worker's thread (:func:`call`).
    """

    slot_class = DaskSlot

    def __init__(
        self,
        address: str,
        *,
        runner: str,
        warm_up: str = "",
        args: tuple[Any, ...] = (),
        max_pending: int = 1 << 30,
        supervised: bool = False,
    ) -> None:
        self.address = address
        self.supervised = supervised
        self.client = self._new_client()
        self.connected = True
        self.cluster_threads = sum(self.client.nthreads().values())
        self._deaths: dict[str, int] = {}
        self._stop = threading.Event()
        super().__init__(self.cluster_threads or 1, runner=runner, warm_up=warm_up, args=args, max_pending=max_pending)
        self._watcher = threading.Thread(target=self._watch, name="dnnprov-dask-watch", daemon=True)
        self._watcher.start()

    def _new_client(self) -> Any:
        """A client of the scheduler; its ``timeout`` bounds the first connection and each reconnection."""
        from distributed import Client

        return Client(self.address, timeout=RECONNECT_S, set_as_default=False)

    def submit_to_cluster(self, work: Work) -> Any:
        """Send ``work`` to the cluster; its Dask future."""
        args = (*work.args, *self.args)
        if self.supervised:
            return self.client.submit(call_supervised, self.runner, self.warm_up, args, work.budget_s, pure=False)
        return self.client.submit(call, self.runner, args, pure=False)

    def warm(self) -> bool:
        """Whether the client is connected to the scheduler (else no slot can start work)."""
        return self.connected

    def idle(self) -> int:
        """Slots with no work, while the client is connected."""
        return super().idle() if self.connected else 0

    def problems(self) -> list[str]:
        """What keeps this executor from running work now (``/readyz`` reasons)."""
        if not self.connected:
            return ["dask scheduler unreachable"]
        if not self.cluster_threads:
            return ["dask cluster has no worker"]
        return []

    def worker_died(self, key: str) -> bool:
        """Whether a worker died while it held the task ``key`` (seen by the last look of the watch)."""
        return self._deaths.get(key, 0) > 0

    def _watch(self) -> None:
        """Every :data:`WATCH_S` seconds: the client's link, the cluster's threads, deaths under running tasks."""

        def deaths_of(dask_scheduler: Any, keys: list[str]) -> dict[str, int]:
            """On the scheduler: how many workers died holding each task (a local function: sent by value,
            so the scheduler needs no dnnprov)."""
            return {key: dask_scheduler.tasks[key].suspicious for key in keys if key in dask_scheduler.tasks}

        while not self._stop.wait(WATCH_S):
            client = self.client
            if client.status == "closed" and not self.closing:
                try:
                    self.client = self._new_client()
                    client = self.client
                    _log("dask_reconnected", address=self.address)
                except (OSError, TimeoutError) as exc:
                    self.connected = False
                    _log("dask_unreachable", logging.WARNING, address=self.address, error=str(exc)[:200])
                    continue
            if client.status != "running":
                self.connected = False
                continue
            keys = [slot.future.key for slot in self._slots if getattr(slot, "future", None) is not None]
            try:
                self.cluster_threads = sum(client.nthreads().values())
                self._deaths = client.run_on_scheduler(deaths_of, keys=keys) if keys else {}
            except Exception as exc:  # noqa: BLE001 (a lost link shows here as any of several errors)
                _log("dask_watch_failed", logging.WARNING, error=f"{type(exc).__name__}: {exc}"[:300])
                continue
            if not self.connected:
                _log("dask_connected", address=self.address, threads=self.cluster_threads)
            self.connected = True

    def close(self) -> None:
        """Stop the slots, give up running works (``("shutdown",)``), stop the workers' idle
        worker processes and close the client."""
        self._stop.set()
        super().close()
        self._watcher.join(5)
        if self.supervised and self.connected:
            try:
                self.client.run(release)
            except Exception:  # noqa: BLE001, S110 (a worker already gone: its processes end with it)
                pass
        self.client.close()
