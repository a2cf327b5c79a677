"""A worker of the reference job: pull, compute a gradient, wait out the emulated GPU time, push.

Each iteration, in job seconds (:mod:`dnnprov.training.job`):

1. **compute**: forward and backward on a batch of ``batch`` samples drawn from the training
   set at the parameters last received, for real; then the worker waits until
   ``compute_s`` job seconds have passed since the iteration began (the emulated GPU: 2
   CPU cores are never the bottleneck, and types differ as GPUs do). When the real work
   takes longer than ``compute_s`` there is no wait;
2. **communicate**: push the gradient, receive the new parameters (the PS applies each push
   at once: asynchronous). With an emulated link (:attr:`Job.bandwidth_req_mb_s`) the worker
   waits until a push and a pull of ``param_size_mb`` would have taken at that bandwidth.

Besides the measured times it keeps each iteration's **emulated** time: ``compute_s`` plus the
longer of its own link's time and the time the PS's answer spent queueing for and holding the
PS's link (eqs. 7-9). That is what the iteration takes on a quiet machine: the load of other
processes stretches the real CPU and loopback parts, not the emulated waits.

It logs one line per iteration in the spotDNN authors' TF format, which ``dnnprov profile``
reads from a folder: ``datetime, global step, global images, loss, examples/s, s/batch``
(the datetime in job time from :data:`dnnprov.training.job.LOG_BASE`). When the PS says stop,
it writes its mean iteration and communication times, measured and emulated
(``timing_<index>.json``), and exits;
when the PS is gone (killed at a run's teardown) it exits too.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dnnprov.training.job import (
    Job,
    WorkerType,
    dataset,
    grad_flat,
    job_time,
    log_time,
    make_model,
    set_flat,
)
from dnnprov.training.ps import connect

#: Iterations left out at the start of a worker's timing means (connection, first batches).
WARMUP = 3


@dataclass(frozen=True)
class WorkerSettings:
    """One worker's run: the PS, its index and type, its clock epoch and log folder."""

    ps_address: str
    authkey: bytes
    index: int
    kind: WorkerType
    epoch: Any  # a wall time, or a shared Value holding one (job.job_time)
    log_dir: str | None = None
    delay_s: float = 0.0  # job seconds before it starts training (a launched instance's boot)


def log_name(index: int, kind: WorkerType) -> str:
    """``worker<i>_b<batch>_<type>.log``: the ``_b<batch>_`` token gives ``dnnprov profile`` the batch."""
    return f"worker{index}_b{kind.batch}_{kind.name}.log"


def worker_main(job: Job, settings: WorkerSettings) -> None:
    """The worker process: train until the PS says stop or the process is killed."""
    import torch

    torch.set_num_threads(1)
    speed, kind = job.speed, settings.kind
    time.sleep(settings.delay_s / speed)
    x, y = dataset(job)
    xs, ys = torch.from_numpy(x), torch.from_numpy(y)
    rng = np.random.default_rng([job.seed, settings.index, os.getpid()])
    model = make_model(job)
    own_link_s = job.transfer_s(job.bandwidth_req_mb_s)
    link_s = own_link_s / speed
    log = None
    if settings.log_dir is not None:
        log = (Path(settings.log_dir) / log_name(settings.index, kind)).open("a", buffering=1)
    iteration_s: list[float] = []
    comm_s: list[float] = []
    emulated_comm_s: list[float] = []
    with connect(settings.ps_address, settings.authkey) as conn:
        answer = conn.recv()
        while answer[0] == "go":
            began = time.perf_counter()
            set_flat(model, answer[1])
            pick = torch.from_numpy(rng.integers(0, len(y), size=kind.batch))
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(xs[pick]), ys[pick]).backward()
            grad = grad_flat(model)
            wait = kind.compute_s / speed - (time.perf_counter() - began)
            if wait > 0:
                time.sleep(wait)
            sent = time.perf_counter()
            try:
                conn.send(("push", grad, kind.batch))
                answer = conn.recv()
            except (EOFError, OSError):  # the PS is gone (the run's teardown): stop
                break
            wait = link_s - (time.perf_counter() - sent)
            if wait > 0:
                time.sleep(wait)
            done = time.perf_counter()
            took = (done - began) * speed
            iteration_s.append(took)
            comm_s.append((done - sent) * speed)
            emulated_comm_s.append(max(own_link_s, float(answer[5]) if len(answer) > 5 else 0.0))
            if log is not None and answer[0] == "go":
                now = job_time(settings.epoch, speed)
                log.write(
                    f"{log_time(now)}\t{answer[2]}\t{answer[3]}\t{answer[4]:.6f}\t{kind.batch / took:.3f}\t{took:.6f}\n"
                )
    if log is not None:
        log.close()
        keep = slice(WARMUP, None) if len(iteration_s) > 2 * WARMUP else slice(None)
        timing = {
            "index": settings.index,
            "type": kind.name,
            "batch": kind.batch,
            "iterations": len(iteration_s),
            "iteration_s": float(np.mean(iteration_s[keep])) if iteration_s else None,
            "comm_s": float(np.mean(comm_s[keep])) if comm_s else None,
            "emulated_iteration_s": kind.compute_s + float(np.mean(emulated_comm_s[keep])) if comm_s else None,
            "emulated_comm_s": float(np.mean(emulated_comm_s[keep])) if comm_s else None,
        }
        (Path(settings.log_dir or ".") / f"timing_{settings.index}.json").write_text(json.dumps(timing))
