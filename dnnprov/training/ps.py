"""The parameter server of the reference job: asynchronous SGD over loopback TCP.

The PS holds the model's parameters. Each worker connects (``host:port``, a challenge on a
per-run key, then pickled messages over ``multiprocessing.connection.Connection``) and loops:
it pulls the parameters, computes a gradient on its batch, pushes it; the PS applies every
pushed gradient at once (``params -= lr * grad``, ASP: no barrier, so a gradient may be
computed on parameters other workers have moved since: real staleness) and answers with the
new parameters, the global step, the samples trained so far, the loss and the time the
answer spent on the PS's emulated link.

The loss is the training loss of the current parameters on a fixed subset of the training
set (:attr:`Job.eval_samples`), evaluated every :attr:`Job.eval_every` updates and averaged
over the last :attr:`Job.smooth` evaluations. At each evaluation the PS publishes the control
loop's progress report (:func:`dnnprov.control.trainer.write_report`), with ``finished_s``
the first time the loss reached the target.

The PS's link can be limited (:attr:`Job.ps_bandwidth_mb_s`): each answer then holds one
shared link for the emulated transfer time of a push and a pull, so workers queue for it as
they contend for a real PS's bandwidth (eqs. 8-9). Every answer also carries the job seconds
it spent queueing for and holding that link (0 without a limit): the worker's emulated
communication time, which the machine's load hardly changes.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge
from pathlib import Path
from typing import Any

import numpy as np

from dnnprov.control.trainer import Report, write_report
from dnnprov.training.job import (
    Job,
    dataset,
    initial_params,
    job_time,
    make_model,
    set_flat,
)


@dataclass(frozen=True)
class PsSettings:
    """One PS's run: its id, clock epoch (wall time of job time 0), where it reports, when it stops."""

    run_id: str
    epoch: Any  # a wall time, or a shared Value holding one (job.job_time)
    authkey: bytes
    report: str | None = None  # progress report file
    summary: str | None = None  # final summary file (written when it stops)
    target_loss: float | None = None
    stop_loss: float | None = None  # stop training at this loss (profiling runs)
    max_steps: int | None = None  # stop training after this many updates
    max_wall_s: float = 3600.0  # a safety net: give up after this many wall seconds
    initial: np.ndarray | None = None  # the parameters to start from (default: the job's warm start)


def connect(address: str, authkey: bytes, timeout_s: float = 30.0) -> Connection:
    """A worker's connection to the PS at ``host:port`` (retried while the PS starts)."""
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            sock = socket.create_connection((host, int(port)), timeout=timeout_s)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    sock.settimeout(None)
    conn = Connection(sock.detach())
    answer_challenge(conn, authkey)
    deliver_challenge(conn, authkey)
    return conn


class ParameterServer:
    """The PS's state and its handlers (one thread per worker connection)."""

    def __init__(self, job: Job, settings: PsSettings) -> None:
        import torch

        torch.set_num_threads(1)
        self.job, self.settings = job, settings
        self.model = make_model(job)
        self.params = (initial_params(job) if settings.initial is None else settings.initial).copy()
        x, y = dataset(job)
        pick = np.random.default_rng(job.seed + 1).choice(len(y), size=min(job.eval_samples, len(y)), replace=False)
        self.x_eval, self.y_eval = torch.from_numpy(x[pick]), torch.from_numpy(y[pick])
        self.step, self.images = 0, 0
        self.recent: deque[float] = deque(maxlen=job.smooth)
        self.loss = self._evaluate()
        self.started_s: float | None = None
        self.finished_s: float | None = None
        self.stopping = False
        self.lock, self.link = threading.Lock(), threading.Lock()
        self.handlers: list[threading.Thread] = []

    def now(self) -> float:
        """Job seconds since the run's epoch."""
        return job_time(self.settings.epoch, self.job.speed)

    def _evaluate(self) -> float:
        import torch

        set_flat(self.model, self.params)
        with torch.no_grad():
            loss = float(torch.nn.functional.cross_entropy(self.model(self.x_eval), self.y_eval))
        self.recent.append(loss)
        return float(np.mean(self.recent))

    def _publish(self) -> None:
        if self.settings.report:
            write_report(
                self.settings.report,
                Report(
                    run=self.settings.run_id,
                    time_s=self.now(),
                    loss=self.loss,
                    step=self.step,
                    finished_s=self.finished_s,
                ),
            )

    def apply(self, grad: np.ndarray, batch: int) -> tuple[str, np.ndarray, int, int, float]:
        """Apply one pushed gradient; the answer to its worker."""
        with self.lock:
            if self.stopping:
                return "stop", self.params, self.step, self.images, self.loss
            if self.started_s is None:
                self.started_s = self.now()
            self.params -= self.job.lr * grad
            self.step += 1
            self.images += batch
            if self.step % self.job.eval_every == 0:
                self.loss = self._evaluate()
                target = self.settings.target_loss
                if self.finished_s is None and target is not None and self.loss <= target:
                    self.finished_s = self.now()
                stop_loss = self.settings.stop_loss
                self.stopping = (self.settings.max_steps is not None and self.step >= self.settings.max_steps) or (
                    stop_loss is not None and self.loss <= stop_loss
                )
                self._publish()
            return "go", self.params.copy(), self.step, self.images, self.loss

    def handle(self, conn: Connection) -> None:
        """Serve one worker until it leaves (or dies: its connection breaks)."""
        hold = self.job.transfer_s(self.job.ps_bandwidth_mb_s) / self.job.speed
        try:
            with conn:
                deliver_challenge(conn, self.settings.authkey)
                answer_challenge(conn, self.settings.authkey)
                with self.lock:
                    conn.send(("go", self.params.copy(), self.step, self.images, self.loss))
                while True:
                    message = conn.recv()
                    answer = self.apply(np.asarray(message[1], dtype=np.float32), int(message[2]))
                    link_s = 0.0
                    if hold > 0:
                        queued = time.perf_counter()
                        with self.link:
                            time.sleep(hold)
                        link_s = (time.perf_counter() - queued) * self.job.speed
                    conn.send((*answer, link_s))
                    if answer[0] == "stop":
                        return
        except (EOFError, OSError):
            return

    def serve(self, port_conn: Connection | None) -> None:
        """Accept workers until stopped (profiling runs) or killed (the local cloud)."""
        server = socket.create_server(("127.0.0.1", 0))
        server.settimeout(0.1)
        if port_conn is not None:
            port_conn.send(server.getsockname()[1])
            port_conn.close()
        self._publish()
        give_up = time.monotonic() + self.settings.max_wall_s
        while time.monotonic() < give_up:
            if self.stopping and not any(h.is_alive() for h in self.handlers):
                break
            try:
                sock, _ = server.accept()
            except TimeoutError:
                continue
            sock.settimeout(None)
            handler = threading.Thread(target=self.handle, args=(Connection(sock.detach()),), daemon=True)
            handler.start()
            self.handlers.append(handler)
        server.close()
        if self.settings.summary:
            self.write_summary(self.settings.summary)

    def write_summary(self, path: str) -> None:
        """The run as the PS saw it: when training started and reached the target, steps, samples, loss."""
        summary: dict[str, Any] = {
            "run": self.settings.run_id,
            "started_s": self.started_s,
            "finished_s": self.finished_s,
            "stopped_s": self.now(),
            "step": self.step,
            "images": self.images,
            "loss": self.loss,
            "stopped": self.stopping,
        }
        tmp = Path(path + ".tmp")
        tmp.write_text(json.dumps(summary))
        os.replace(tmp, path)


def ps_main(job: Job, settings: PsSettings, port_conn: Connection | None) -> None:
    """The PS process: serve, then exit."""
    ParameterServer(job, settings).serve(port_conn)
