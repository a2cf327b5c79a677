"""Solves on a Dask cluster (``dnnprov serve --dask ADDRESS``) with the worker pool's lifecycle.

:class:`DaskExecutor` is a :class:`~dnnprov.service.pool.WorkerPool` whose slots hand each
work to the cluster (``client.submit(tasks.outcome, ...)``) instead of to a local worker
process: one slot per worker thread of the cluster, so admission, the FIFO queue, drain
(nothing queued starts; running work is stopped and re-queued), cancellation and the time
budget behave as with local processes. A work whose Dask worker died more often than the
scheduler's ``allowed-failures`` (``KilledWorker``) ends as ``("crashed", ...)``, which
re-queues its job up to its attempt limit. Dask cannot stop a task already running in a
worker thread: a cancelled or overrunning solve is given up here at once (its slot is free)
and ends on the worker at its own time limit.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

from dnnprov.service.pool import Outcome, Work, WorkerPool, _Slot
from dnnprov.service.tasks import outcome as task_outcome


class _DaskSlot(_Slot):
    """One worker thread of the cluster: runs one work at a time there."""

    def __init__(self, pool: "DaskExecutor", index: int) -> None:
        self.pool, self.index = pool, index
        self.current: Work | None = None
        self.future: Any = None
        self.warm = True
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, name=f"dnnprov-dask-slot-{index}", daemon=True)
        self.thread.start()

    def kill(self) -> None:
        """Give up the running work (the cluster is asked to cancel it)."""
        future = self.future
        if future is not None:
            future.cancel()

    def shutdown(self) -> None:
        """Nothing to reap: the cluster's workers are not ours."""

    def _await_ready(self) -> None:
        return

    def _serve(self, work: Work) -> None:
        if work.cancelled or (work.before_start is not None and not work.before_start()):
            self._end(work, ("cancelled",))
            return
        with self.lock:
            self.current = work
            self.future = self.pool.client.submit(task_outcome, work.kind, work.body, self.pool.max_time_limit_s,
                                                  pure=False)
        try:
            outcome = self._wait(work)
        finally:
            with self.lock:
                self.current, self.future = None, None
        self._end(work, outcome)

    def _wait(self, work: Work) -> Outcome:
        from distributed import KilledWorker

        try:
            return tuple(self.future.result(timeout=work.budget_s))
        except (concurrent.futures.TimeoutError, TimeoutError):
            self.future.cancel()
            if work.stopping or self.pool.closing:
                return ("shutdown",)
            if work.cancelled:
                return ("cancelled",)
            return ("killed", f"the task ran longer than its budget of {work.budget_s:g} s and was given up")
        except concurrent.futures.CancelledError:
            return ("shutdown",) if work.stopping or self.pool.closing else ("cancelled",)
        except KilledWorker as exc:
            return ("crashed", f"the Dask workers running the task died: {exc}")
        except Exception as exc:  # the cluster went away, a lost connection, ...
            if work.stopping or self.pool.closing:
                return ("shutdown",)
            if work.cancelled:
                return ("cancelled",)
            return ("crashed", f"the Dask cluster failed the task: {type(exc).__name__}: {exc}")


class DaskExecutor(WorkerPool):
    """The worker pool's queue and admission, with slots that run on a Dask cluster."""

    slot_class = _DaskSlot

    def __init__(self, address: str, *, max_time_limit_s: float = 300.0, max_pending: int = 1 << 30) -> None:
        from distributed import Client

        self.client = Client(address, timeout=30, set_as_default=False)
        threads = sum(self.client.nthreads().values()) or 1
        super().__init__(threads, max_time_limit_s=max_time_limit_s, max_pending=max_pending)

    def close(self) -> None:
        """Stop the slots, give up running works (``("shutdown",)``) and close the client."""
        super().close()
        self.client.close()
