"""A pool of worker processes that always converges back to its configured workers.

Each of the N slots owns one :class:`~dnnprov.execution.process.WorkerProcess` and a thread
that feeds it one :class:`Work` at a time from shared FIFO lanes. A worker that overruns its
work's budget, or whose work is cancelled, is killed and replaced, so a long job never blocks
the pool and never outlives its budget.

Admission is counted here, per lane and per tenant: :meth:`WorkerPool.try_reserve` takes one
of ``max_pending`` places of the work's lane atomically, and the place is given back once when
the work ends or is cancelled (:meth:`WorkerPool.release`). While the pool drains
(:meth:`WorkerPool.drain`) no queued work is started.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from dnnprov.execution.process import WorkerProcess

#: The service's JSON log (`dnnprov serve` configures it; a batch leaves it to Python's defaults).
LOG = logging.getLogger("dnnprov.service")
#: Longest warm-up of a new worker process before it is killed and another started (a loaded machine took 30 s).
WARM_UP_LIMIT_S = 180.0
#: How often an idle slot checks that its worker process is alive (and replaces it when not).
HEALTH_CHECK_S = 1.0
#: The lanes of work, in the order a long-lane slot serves them.
LANES = ("long", "short")

#: What a work ends with: the job function's own tuple when it answered, else ("killed", message)
#: (over budget) | ("crashed", message) (the worker process died) | ("cancelled",) | ("shutdown",)
#: (the pool stopped before or while it ran).
Outcome = tuple


@dataclass(eq=False)
class Work:
    """One job for a worker, the job function's arguments: ``future`` gets its :data:`Outcome`.

    ``before_start`` (for stored jobs) runs when a slot takes the work; when it returns
    ``False`` (the job was cancelled) the work is dropped.
    """

    args: tuple[Any, ...]
    budget_s: float
    job_id: str | None = None
    before_start: Callable[[], bool] | None = None
    future: Future = field(default_factory=Future)
    cancelled: bool = False
    stopping: bool = False  # killed by a drain: the outcome is ("shutdown",)
    reserved: str = ""  # the lane whose place it holds ("": none)
    pid: int | None = None  # of the worker process running it
    started: float = 0.0  # time.perf_counter() when it was sent to its worker process (0: not yet)
    lane: str = "long"
    tenant: str = ""


class Slot:
    """One worker process and the thread that feeds it.

    The thread alone starts, replaces and waits for the process; others only kill it
    (:meth:`kill`, under ``lock`` while it runs their work). The invariant that makes the
    slot converge: no work is sent to a process before its ``("ready", pid)`` has been read, a
    process that may have been killed while it ran a work is reaped and replaced before
    the next one, and an answer is taken only with its work's sequence number.
    """

    #: The lanes the slot serves, in order.
    lanes: tuple[str, ...] = LANES

    def __init__(self, pool: WorkerPool, index: int) -> None:
        self.pool, self.index = pool, index
        self.process: WorkerProcess | None = None
        self.current: Work | None = None
        self.lock = threading.Lock()
        if index >= pool.long_workers:
            self.lanes = ("short",)
        self.restarts = 0  # worker processes started after the first
        self._start_process()
        self.thread = threading.Thread(target=self._loop, name=f"dnnprov-slot-{index}", daemon=True)
        self.thread.start()

    @property
    def warm(self) -> bool:
        """Whether the slot's worker process has said it is ready."""
        return self.process is not None and self.process.ready

    def _start_process(self) -> None:
        if self.process is not None:
            self.restarts += 1
        self.process = WorkerProcess(self.pool.runner, self.pool.warm_up, quiet=self.pool.quiet)
        if self.pool.long_nice and "long" in self.lanes:  # below the short lane's and the server's priority
            niceness = min(19, os.getpriority(os.PRIO_PROCESS, 0) + self.pool.long_nice)
            try:
                os.setpriority(os.PRIO_PROCESS, self.process.pid, niceness)
            except ProcessLookupError:  # it died at once: the slot replaces it like any dead worker
                pass

    def _retire(self) -> None:
        """Kill and reap the worker process (it may be running or dead already); the next is not started yet."""
        if self.process is not None:
            self.process.close()

    def shutdown(self) -> None:
        """Kill and reap the worker process (the pool is closing)."""
        self._retire()

    def _await_ready(self) -> None:
        """Make the slot's worker alive and warm: replace a dead one, read its ``("ready", pid)``.

        A warm-up longer than the pool's ``warm_up_limit_s`` kills the process and starts another.
        """
        while not self.pool.closing:
            assert self.process is not None
            if not self.process.alive():
                self.pool.start_failures += not self.process.ready
                self._retire()
                self._start_process()
                continue
            if self.process.ready:
                return
            try:
                if self.process.await_ready(0.5):
                    self.pool.start_failures = 0
                elif time.monotonic() - self.process.started_at > self.pool.warm_up_limit_s:
                    LOG.error(
                        '{"event": "worker_warm_up_timeout", "slot": %d, "limit_s": %g}',
                        self.index,
                        self.pool.warm_up_limit_s,
                    )
                    self._retire()
                    self._start_process()
            except (EOFError, OSError):
                self.process.kill()  # replaced at the next turn, once seen dead

    def kill(self) -> None:
        """Kill the worker process (the slot's thread replaces it before its next work)."""
        if self.process is not None:
            self.process.kill()

    def _loop(self) -> None:
        while True:
            self._await_ready()
            work = self.pool._take(HEALTH_CHECK_S, self.lanes)
            if work is None:
                if self.pool.closing:
                    return
                continue  # no work for a while: check the worker is still alive
            try:
                self._serve(work)
            except Exception as exc:  # noqa: BLE001  never lose the slot's thread: the work ends, the slot goes on
                LOG.error(
                    '{"event": "slot_error", "slot": %d, "error": %r}', self.index, f"{type(exc).__name__}: {exc}"
                )
                self._end(work, ("error", f"internal error of the worker slot: {type(exc).__name__}"))
                time.sleep(0.5)

    def _serve(self, work: Work) -> None:
        if work.cancelled or (work.before_start is not None and not work.before_start()):
            self._end(work, ("cancelled",))
            return
        self._await_ready()  # the worker may have died while the work waited or its job was started
        with self.lock:
            given_up = work.cancelled or self.pool.closing
            if not given_up:
                assert self.process is not None
                self.current = work
                work.pid = self.process.pid
        if given_up:
            self._end(work, ("shutdown",) if self.pool.closing or work.stopping else ("cancelled",))
            return
        outcome: Outcome = ("crashed", "the worker slot stopped")
        try:
            outcome = self._run(work)
        finally:
            with self.lock:  # from here no cancel can kill the process: whatever killed it did so before
                self.current = None
                stopped = work.cancelled or work.stopping
            if stopped or outcome[0] in ("killed", "crashed", "cancelled", "shutdown"):
                self._retire()  # maybe killed, maybe not yet dead: never send it another work
        self._end(work, outcome)

    def _end(self, work: Work, outcome: Outcome) -> None:
        self.pool.release(work)
        if not work.future.done():
            work.future.set_result(outcome)

    def _run(self, work: Work) -> Outcome:
        process = self.process
        assert process is not None
        try:
            work.started = time.perf_counter()
            seq = process.send((*work.args, *self.pool.args))
            answered, answer = process.receive(seq, work.budget_s)
            if answered:
                return tuple(answer)
            process.kill()
            if work.stopping or self.pool.closing:
                return ("shutdown",)
            if work.cancelled:
                return ("cancelled",)
            return ("killed", f"the task ran longer than its budget of {work.budget_s:g} s and was stopped")
        except (EOFError, OSError):
            how = process.exit_text()
            if work.stopping or self.pool.closing:
                return ("shutdown",)
            if work.cancelled:
                return ("cancelled",)
            return ("crashed", f"the worker process ended unexpectedly ({how})")


class WorkerPool:
    """Worker processes fed from two FIFO lanes, with at most ``max_pending`` works admitted per lane.

    Each slot's process runs ``runner`` (``"module:function"``) with a work's ``args`` followed by
    the pool's ``args``, after ``warm_up`` (``"module:function"``, no arguments) once per process.
    Lane ``long`` and lane ``short`` (the caller sets :attr:`Work.lane`) are queued apart: ``short_workers`` slots serve only the short lane, the others serve the
    long lane first and the short one when the long one is empty. So a cheap request never
    waits behind long solves, and a full long lane refuses nothing short. One tenant holds
    at most ``tenant_max_pending`` places of a lane. The processes of the slots that serve the
    long lane run ``long_nice`` steps nicer than the pool's own process (at most 19), so that on
    a busy machine long solves yield the CPU to short work and to the caller's threads.
    """

    slot_class: type = Slot

    def __init__(
        self,
        workers: int,
        *,
        runner: str,
        warm_up: str = "",
        args: tuple[Any, ...] = (),
        max_pending: int = 1 << 30,
        short_workers: int = 0,
        tenant_max_pending: int | None = None,
        quiet: bool = False,
        warm_up_limit_s: float = WARM_UP_LIMIT_S,
        long_nice: int = 0,
    ) -> None:
        self.runner, self.warm_up, self.args, self.quiet = runner, warm_up, args, quiet
        self.long_nice = long_nice
        self.warm_up_limit_s = warm_up_limit_s
        #: worker processes that died before they were ready, in a row (a broken interpreter)
        self.start_failures = 0
        self.max_pending = max_pending
        self.tenant_max_pending = max_pending if tenant_max_pending is None else tenant_max_pending
        self.closing = False
        self.draining = False
        self._queues: dict[str, collections.deque[Work]] = {lane: collections.deque() for lane in LANES}
        self._ready = threading.Condition()
        self._reserved = dict.fromkeys(LANES, 0)
        self._by_tenant: collections.Counter[tuple[str, str]] = collections.Counter()
        self.peak = 0  # the most works admitted at once
        self._reserved_lock = threading.Lock()
        self.long_workers = workers
        self._slots = [self.slot_class(self, i) for i in range(workers + short_workers)]

    @property
    def workers(self) -> int:
        """Number of worker slots (both lanes)."""
        return len(self._slots)

    def pending(self) -> int:
        """Works admitted: queued, running, or being checked by a request."""
        with self._reserved_lock:
            return sum(self._reserved.values())

    def full(self, lane: str = "long") -> bool:
        """Whether ``lane`` admits nothing more now."""
        with self._reserved_lock:
            return self._reserved[lane] >= self.max_pending

    def running(self) -> int:
        """Work running now."""
        return sum(slot.current is not None for slot in self._slots)

    def idle(self) -> int:
        """Slots whose worker is ready and has no work."""
        return sum(slot.warm and slot.current is None for slot in self._slots)

    def warm(self) -> bool:
        """Whether at least one worker has finished its warm-up."""
        return any(slot.warm for slot in self._slots)

    def dead_slots(self) -> list[int]:
        """Slots whose feeding thread has died (none should)."""
        return [slot.index for slot in self._slots if not slot.thread.is_alive()]

    def restarts(self) -> int:
        """Worker processes started to replace others (killed, crashed, cancelled, over budget)."""
        return sum(getattr(slot, "restarts", 0) for slot in self._slots)

    def try_reserve(self, work: Work) -> str | None:
        """Admit ``work`` in its lane (atomic); ``None`` when admitted, else why not (``"full"``, ``"tenant"``)."""
        key = (work.lane, work.tenant)
        with self._reserved_lock:
            if self._reserved[work.lane] >= self.max_pending:
                return "full"
            if self._by_tenant[key] >= self.tenant_max_pending:
                return "tenant"
            self._count(work)
            return None

    def reserve(self, work: Work) -> None:
        """Admit ``work`` whatever the count (jobs recovered at start, retried jobs)."""
        with self._reserved_lock:
            self._count(work)

    def _count(self, work: Work) -> None:
        self._reserved[work.lane] += 1
        self._by_tenant[(work.lane, work.tenant)] += 1
        self.peak = max(self.peak, sum(self._reserved.values()))
        work.reserved = work.lane

    def release(self, work: Work) -> None:
        """Give ``work``'s place back (once; later calls do nothing)."""
        with self._reserved_lock:
            if work.reserved:
                self._reserved[work.reserved] -= 1
                key = (work.reserved, work.tenant)
                self._by_tenant[key] -= 1
                if self._by_tenant[key] <= 0:
                    del self._by_tenant[key]
                work.reserved = ""

    def submit(self, work: Work) -> Future:
        """Queue admitted ``work`` in its lane; its future gets the outcome."""
        with self._ready:
            if self.closing or self.draining:
                self.release(work)
                work.future.set_result(("shutdown",))
            else:
                self._queues[work.reserved or work.lane].append(work)
                self._ready.notify_all()
        return work.future

    def _take(self, timeout_s: float | None = None, lanes: tuple[str, ...] = LANES) -> Work | None:
        """The next work of ``lanes`` (in that order); ``None`` when the pool closes or nothing came in ``timeout_s``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._ready:
            while not self.closing and (self.draining or not any(self._queues[lane] for lane in lanes)):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._ready.wait(left)
            if self.closing:
                return None
            return next(self._queues[lane] for lane in lanes if self._queues[lane]).popleft()

    def cancel(self, work: Work) -> None:
        """Cancel ``work``: its place is given back now; queued it never starts, running its worker is killed."""
        work.cancelled = True
        self.release(work)
        with self._ready:
            queue = next((q for q in self._queues.values() if work in q), None)
            if queue is not None:
                queue.remove(work)
                if not work.future.done():
                    work.future.set_result(("cancelled",))
                return
        for slot in self._slots:
            with slot.lock:
                if slot.current is work:
                    slot.kill()

    def drain(self) -> None:
        """Start no more work: queued works end now as ``("shutdown",)``; running work goes on."""
        with self._ready:
            self.draining = True
            queued = [work for queue in self._queues.values() for work in queue]
            for queue in self._queues.values():
                queue.clear()
        for work in queued:
            self.release(work)
            if not work.future.done():
                work.future.set_result(("shutdown",))

    def stop_running(self) -> None:
        """Kill the running works; their outcome is ``("shutdown",)``."""
        for slot in self._slots:
            with slot.lock:
                if slot.current is not None:
                    slot.current.stopping = True
                    slot.kill()

    def close(self) -> None:
        """Stop the slots and their workers: running and queued work ends as ``("shutdown",)``."""
        with self._ready:
            self.closing = True
            queued = [work for queue in self._queues.values() for work in queue]
            for queue in self._queues.values():
                queue.clear()
            self._ready.notify_all()
        for work in queued:
            self.release(work)
            if not work.future.done():
                work.future.set_result(("shutdown",))
        for slot in self._slots:
            slot.kill()
        for slot in self._slots:
            slot.thread.join(10)
            slot.shutdown()
