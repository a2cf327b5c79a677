"""Worker processes of ``dnnprov serve``: every solve runs in one, bounded by its time budget.

Each of the N slots owns one long-lived worker process (started with ``spawn``: the
server has threads) and a thread that feeds it one :class:`Work` at a time from a shared
FIFO queue. A worker that overruns its budget, or whose job is cancelled, is killed and
replaced, so a long solve never blocks the server and never outlives its limit. Workers
die with the server (``PR_SET_PDEATHSIG`` on Linux).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import queue
import signal
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Callable

#: What a worker answers: ("ok", answer, seconds) | ("invalid", field, message) | ("error", message)
#: | ("killed", message) | ("cancelled",) | ("shutdown",) (the server stopped while it ran).
Outcome = tuple


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def worker_main(conn: Connection) -> None:
    """Loop of a worker process: receive ``(kind, body, cap)``, answer an :data:`Outcome`."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the server, which stops us
    from dnnprov.errors import InvalidInputError
    from dnnprov.service import tasks

    while True:
        try:
            kind, body, cap = conn.recv()
        except (EOFError, OSError):
            return
        started = time.perf_counter()
        try:
            answer: Outcome = ("ok", tasks.run(kind, body, cap), time.perf_counter() - started)
        except InvalidInputError as exc:
            answer = ("invalid", exc.field, exc.problem)
        except Exception as exc:  # reported to the client as one line, never a traceback
            answer = ("error", f"{type(exc).__name__}: {exc}")
        conn.send(answer)


@dataclass
class Work:
    """One request for a worker: ``future`` gets its :data:`Outcome`.

    ``before_start`` (for stored jobs) runs when a slot takes the work; when it returns
    ``False`` (the job was cancelled) the work is dropped.
    """

    kind: str
    body: Any
    budget_s: float
    job_id: str | None = None
    before_start: Callable[[], bool] | None = None
    future: Future = field(default_factory=Future)
    cancelled: bool = False


class _Slot:
    def __init__(self, pool: "WorkerPool", index: int) -> None:
        self.pool, self.index = pool, index
        self.process: multiprocessing.process.BaseProcess | None = None
        self.conn: Connection | None = None
        self.current: Work | None = None
        self.lock = threading.Lock()
        self._start_process()
        self.thread = threading.Thread(target=self._loop, name=f"dnnprov-slot-{index}", daemon=True)
        self.thread.start()

    def _start_process(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self.process = ctx.Process(target=worker_main, args=(child,), name=f"dnnprov-worker-{self.index}", daemon=True)
        self.process.start()
        child.close()
        self.conn = parent

    def kill(self) -> None:
        """Kill the worker process (a new one is started for the next work)."""
        if self.process is not None and self.process.is_alive():
            self.process.kill()

    def _loop(self) -> None:
        while True:
            work = self.pool._queue.get()
            if work is None:
                return
            if work.before_start is not None and not work.before_start():
                self.pool._done()
                continue
            with self.lock:
                if self.process is None or not self.process.is_alive():
                    self._start_process()
                self.current = work
            outcome = self._run(work)
            with self.lock:
                self.current = None
                if not self.pool.closing and not self.process.is_alive():
                    self._start_process()  # now, not when the next request is waiting
            self.pool._done()
            work.future.set_result(outcome)

    def _run(self, work: Work) -> Outcome:
        assert self.conn is not None and self.process is not None
        try:
            self.conn.send((work.kind, work.body, self.pool.max_time_limit_s))
            if self.conn.poll(work.budget_s):
                return self.conn.recv()
            self.kill()
            self.process.join(5)
            if self.pool.closing:
                return ("shutdown",)
            return ("killed", f"the task ran longer than its budget of {work.budget_s:g} s and was stopped")
        except (EOFError, OSError, BrokenPipeError):
            self.process.join(5)
            if work.cancelled:
                return ("cancelled",)
            if self.pool.closing:
                return ("shutdown",)
            return ("error", f"the worker process ended unexpectedly (exit code {self.process.exitcode})")


class WorkerPool:
    """N worker processes fed from one FIFO queue."""

    def __init__(self, workers: int, *, max_time_limit_s: float = 300.0) -> None:
        self.max_time_limit_s = max_time_limit_s
        self.closing = False
        self._queue: queue.Queue[Work | None] = queue.Queue()
        self._pending = 0
        self._pending_lock = threading.Lock()
        self._slots = [_Slot(self, i) for i in range(workers)]

    @property
    def workers(self) -> int:
        """Number of worker processes."""
        return len(self._slots)

    def pending(self) -> int:
        """Work queued or running."""
        with self._pending_lock:
            return self._pending

    def running(self) -> int:
        """Work running now."""
        return sum(slot.current is not None for slot in self._slots)

    def submit(self, work: Work) -> Future:
        """Queue ``work``; its future gets the outcome."""
        with self._pending_lock:
            self._pending += 1
        self._queue.put(work)
        return work.future

    def _done(self) -> None:
        with self._pending_lock:
            self._pending -= 1

    def cancel(self, job_id: str) -> bool:
        """Stop the running work of job ``job_id`` (kills its worker); ``False`` if none runs it."""
        for slot in self._slots:
            with slot.lock:
                if slot.current is not None and slot.current.job_id == job_id:
                    slot.current.cancelled = True
                    slot.kill()
                    return True
        return False

    def close(self) -> None:
        """Stop the slots and their worker processes (running work ends as ``("shutdown",)``)."""
        self.closing = True
        for _ in self._slots:
            self._queue.put(None)
        for slot in self._slots:
            slot.kill()
            if slot.conn is not None:
                slot.conn.close()
        for slot in self._slots:
            if slot.process is not None:
                slot.process.join(5)
