"""The service's executor: the worker pool of :mod:`dnnprov.execution` running the service's kinds.

Every solve runs in a worker process (or on a Dask cluster with ``--dask``), bounded by its
time budget: :func:`make_executor` builds a :class:`~dnnprov.execution.pool.WorkerPool` (or
:class:`~dnnprov.execution.dask.DaskPool`) whose job function is
:func:`dnnprov.service.kinds.tasks.outcome` with the server's time-limit cap. Each new worker process
warms up (:func:`warm_up`) before it takes work. :func:`lane_of` sorts work into the pool's lanes.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
import warnings
from typing import Any

from dnnprov.execution.pool import WorkerPool

#: The job function of every worker (``"module:function"``): ``(kind, body, cap) -> outcome``.
RUNNER = "dnnprov.service.kinds.tasks:outcome"
#: Solved once by each new worker process, so that its first request does not pay for the imports.
WARM_UP_INSTANCE = "embedded:spot/paper-table1.json"
#: Imported by each new worker process after its warm-up solve, for the same reason: the
#: modules the other kinds load on first use (the joint solver's alone took 6 s of wall time
#: on a loaded machine, more than a 1 s request's budget).
WARM_UP_MODULES = (
    "dnnprov.solvers.joint.provision",
    "dnnprov.batch.sweep",
    "dnnprov.models.predict",
    "dnnprov.revocation.replay.pool_replay",
    "dnnprov.revocation.plan_choice",
    "dnnprov.revocation.replay.hindsight",
)
#: Niceness steps added to the worker processes of the long lane (``--long-nice``): a proven
#: solve takes a whole core for as long as it runs; below the server's priority it leaves the
#: CPU to the event loop and the short lane on a busy machine, and loses nothing on an idle one.
LONG_NICE = 10
#: Solve methods fast enough for the short lane (no proof: a heuristic answers in milliseconds).
SHORT_METHODS = ("heuristic", "reference-heuristic")


def lane_of(kind: str, method: str) -> str:
    """``"short"`` for the cheap kinds of work (a prediction, a heuristic solve), else ``"long"``."""
    return "short" if kind == "predict" or (kind == "solve" and method in SHORT_METHODS) else "long"


def warning_as_json(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """``warnings.showwarning`` of the server and its workers: one JSON line on standard error
    (``{"ts", "level": "warning", "event": "input_warning", "category", "message"}``), as every line is."""
    sys.stderr.write(
        json.dumps(
            {
                "ts": round(time.time(), 3),
                "level": "warning",
                "event": "input_warning",
                "category": category.__name__,
                "message": str(message),
            }
        )
        + "\n"
    )


def warm_up() -> None:
    """Run once by each new worker process before it says it is ready: warnings as JSON lines,
    one solve and the imports of the other kinds (so that the first request does not pay for them)."""
    warnings.showwarning = warning_as_json
    from dnnprov.service.kinds import tasks

    tasks.outcome("solve", {"instance": WARM_UP_INSTANCE}, 10.0)
    for module in WARM_UP_MODULES:
        importlib.import_module(module)


def make_executor(
    *,
    workers: int,
    max_time_limit_s: float,
    max_pending: int,
    short_workers: int = 0,
    long_nice: int = 0,
    tenant_max_pending: int | None = None,
    dask_address: str | None = None,
) -> WorkerPool:
    """The pool of ``dnnprov serve``: local worker processes, or the Dask cluster at ``dask_address``."""
    if dask_address is not None:
        from dnnprov.execution.dask import DaskPool

        return DaskPool(dask_address, runner=RUNNER, args=(max_time_limit_s,), max_pending=max_pending)
    return WorkerPool(
        workers,
        runner=RUNNER,
        warm_up="dnnprov.service.pool:warm_up",
        args=(max_time_limit_s,),
        max_pending=max_pending,
        short_workers=short_workers,
        tenant_max_pending=tenant_max_pending,
        long_nice=long_nice,
    )
