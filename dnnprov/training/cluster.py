"""Starting the reference job's processes, and static runs (profiling, held-out clusters).

Processes start from a fork server that has imported torch once (``forkserver`` with a
preload), so a worker starts in milliseconds and costs no torch import; a worker is killed
with SIGKILL (a revocation: no goodbye to the PS, whose handler sees the connection break).

:func:`run_cluster` trains one static cluster until the loss reaches ``stop_loss`` or the
PS has applied ``max_steps`` updates, and returns what the papers' profiler needs: the
folder of worker logs (``dnnprov profile fit-loss FOLDER``), each worker's mean iteration
and communication times (:func:`timing_rows`: ``dnnprov profile fit-timing``'s CSV rows),
and the measured time to the target loss.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from dnnprov.errors import InvalidInputError
from dnnprov.training.job import Job, WorkerType, initial_params
from dnnprov.training.ps import PsSettings, ps_main
from dnnprov.training.worker import WorkerSettings, worker_main

#: Wall seconds a PS may take to start and say its port.
START_TIMEOUT_S = 300.0


def _noop() -> None:
    """A process that does nothing (starts the fork server)."""


class Launcher:
    """Starts PS and worker processes of the reference job (one fork server per Python process)."""

    def __init__(self) -> None:
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(["torch", "dnnprov.training.worker"])

    def start_ps(self, job: Job, settings: PsSettings) -> tuple[BaseProcess, str]:
        """A PS process and its address ``127.0.0.1:PORT`` (the warm start is computed here, once per job)."""
        if settings.initial is None:
            settings = replace(settings, initial=initial_params(job))
        mine, theirs = self.ctx.Pipe(duplex=False)
        process = self.ctx.Process(target=ps_main, args=(job, settings, theirs), daemon=True)
        process.start()
        theirs.close()
        if not mine.poll(START_TIMEOUT_S):
            self.kill(process)
            raise InvalidInputError("ps", f"the PS did not start within {START_TIMEOUT_S:g} s")
        try:
            port = int(mine.recv())
        except EOFError:
            self.kill(process)
            raise InvalidInputError(
                "ps",
                f"the PS process died at start (exit code {process.exitcode}); a script that "
                "starts processes must guard its work with `if __name__ == '__main__':`",
            ) from None
        finally:
            mine.close()
        return process, f"127.0.0.1:{port}"

    def start_worker(self, job: Job, settings: WorkerSettings) -> BaseProcess:
        """A worker process (it connects to ``settings.ps_address`` and trains)."""
        process = self.ctx.Process(target=worker_main, args=(job, settings), daemon=True)
        process.start()
        return process

    def warm(self, job: Job) -> None:
        """Start the fork server (its torch import) and compute the job's warm start now, so
        that later launches take milliseconds of CPU, not seconds."""
        initial_params(job)
        process = self.ctx.Process(target=_noop, daemon=True)
        process.start()
        process.join(START_TIMEOUT_S)

    @staticmethod
    def kill(process: BaseProcess) -> None:
        """SIGKILL and reap (an already ended process is left as it is)."""
        if process.is_alive():
            process.kill()
        process.join(5.0)


@dataclass(frozen=True)
class ClusterRun:
    """One static run: its workers, what the PS saw, the workers' timings and the log folder."""

    name: str
    kinds: tuple[WorkerType, ...]
    log_dir: str
    started_s: float | None
    finished_s: float | None  # when the loss reached the target (None: not reached)
    steps: int
    images: int
    loss: float
    timings: tuple[dict[str, Any], ...]

    @property
    def time_to_target_s(self) -> float | None:
        """Job seconds from the first update to the target loss."""
        if self.finished_s is None or self.started_s is None:
            return None
        return self.finished_s - self.started_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "workers": [k.name for k in self.kinds],
            "log_dir": self.log_dir,
            "time_to_target_s": self.time_to_target_s,
            "steps": self.steps,
            "images": self.images,
            "loss": self.loss,
            "timings": list(self.timings),
        }


def run_cluster(
    kinds: Sequence[WorkerType],
    job: Job,
    log_dir: str | Path,
    *,
    target_loss: float,
    stop_loss: float | None = None,
    max_steps: int | None = None,
    name: str | None = None,
    launcher: Launcher | None = None,
    max_wall_s: float = 600.0,
) -> ClusterRun:
    """Train one static cluster of ``kinds`` until ``stop_loss`` (default: the target) or
    ``max_steps`` updates; logs in ``log_dir`` (created; it must hold no earlier logs)."""
    if not kinds:
        raise InvalidInputError("workers", "a cluster needs at least one worker")
    folder = Path(log_dir)
    folder.mkdir(parents=True, exist_ok=True)
    if any(folder.glob("worker*")):
        raise InvalidInputError(str(folder), "already holds worker logs: give a fresh folder per run")
    launcher = launcher or Launcher()
    epoch, key = time.time(), os.urandom(16)
    name = name or folder.name
    settings = PsSettings(
        run_id=name,
        epoch=epoch,
        authkey=key,
        report=str(folder / "progress.json"),
        summary=str(folder / "summary.json"),
        target_loss=target_loss,
        stop_loss=target_loss if stop_loss is None else stop_loss,
        max_steps=max_steps,
        max_wall_s=max_wall_s,
    )
    ps, address = launcher.start_ps(job, settings)
    workers = [
        launcher.start_worker(
            job, WorkerSettings(ps_address=address, authkey=key, index=i, kind=k, epoch=epoch, log_dir=str(folder))
        )
        for i, k in enumerate(kinds)
    ]
    try:
        ps.join(max_wall_s + 30)
        for w in workers:
            w.join(30)
    finally:
        for process in [ps, *workers]:
            launcher.kill(process)
    summary_path = folder / "summary.json"
    if not summary_path.exists():
        raise InvalidInputError(str(folder), f"the PS of run {name} ended without a summary (exit code {ps.exitcode})")
    summary = json.loads(summary_path.read_text())
    timings = tuple(json.loads(p.read_text()) for p in sorted(folder.glob("timing_*.json")))
    return ClusterRun(
        name=name,
        kinds=tuple(kinds),
        log_dir=str(folder),
        started_s=summary["started_s"],
        finished_s=summary["finished_s"],
        steps=int(summary["step"]),
        images=int(summary["images"]),
        loss=float(summary["loss"]),
        timings=timings,
    )


def timing_rows(run: ClusterRun) -> list[str]:
    """``dnnprov profile fit-timing``'s CSV rows (``run,type,gpus,workers,ps,batch_per_gpu,iteration_s,comm_s``)
    of a run, one per worker that reported its timing."""
    n = len(run.kinds)
    return [
        f"{run.name},{t['type']},1,{n},1,{t['batch']},{t['iteration_s']!r},{t['comm_s']!r}"
        for t in run.timings
        if t.get("iteration_s")
    ]
