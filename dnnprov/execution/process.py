"""One worker process: a fresh interpreter that runs jobs one at a time, killed when told.

The process is started with ``subprocess`` (a new interpreter talking pickles over a socket
pair), not a ``multiprocessing`` child: a Dask worker process is daemonic and may not have
``multiprocessing`` children, and the HTTP server has threads (no ``fork``). It imports the
job function (``"module:function"``), runs the warm-up function if any, says ``("ready",
pid)``, then answers each ``(seq, args)`` with ``(seq, function(*args))``; the sequence
number ties each answer to its job. It dies with its parent (``PR_SET_PDEATHSIG`` on Linux,
and a thread that watches the parent's pid elsewhere).
"""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

#: Longest single wait for an answer, seconds (longer budgets are waited in slices of it).
MAX_POLL_S = 3600.0
#: The command line of a worker process (``ps`` shows it: ``dnnprov.execution.process`` in it).
_MAIN = "import sys; from dnnprov.execution.process import worker_main; worker_main(*sys.argv[1:])"


def resolve(name: str) -> Callable[..., Any]:
    """The function named ``"module:function"``."""
    module, _, function = name.partition(":")
    found: Callable[..., Any] = getattr(importlib.import_module(module), function)
    return found


def _die_with_parent() -> None:
    """End this process when its parent ends (killed or not)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass
    parent = os.getppid()

    def watch_parent() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch_parent, daemon=True).start()


def worker_main(fd: str, runner: str, warm_up: str = "") -> None:
    """Loop of a worker process on socket ``fd``: warm up, say ready, answer each job."""
    conn = Connection(int(fd))
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C and SIGTERM stop the parent, which stops us
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    function = resolve(runner)
    if warm_up:
        resolve(warm_up)()
    conn.send(("ready", os.getpid()))
    while True:
        try:
            seq, args = conn.recv()
        except (EOFError, OSError):
            return
        conn.send((seq, function(*args)))


class WorkerProcess:
    """A started worker process and the parent's end of its socket.

    ``quiet``: its standard output and error go to ``/dev/null`` (else they are the parent's).
    """

    def __init__(self, runner: str, warm_up: str = "", *, quiet: bool = False) -> None:
        ours, theirs = socket.socketpair()
        out = subprocess.DEVNULL if quiet else None
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _MAIN, str(theirs.fileno()), runner, warm_up],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=dict(os.environ, PYTHONHASHSEED="0"),
        )
        theirs.close()
        self.conn = Connection(ours.detach())
        self.ready = False
        self.started_at = time.monotonic()
        self._seq = 0

    @property
    def pid(self) -> int:
        """The process id."""
        return self.proc.pid

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.proc.poll() is None

    def exit_text(self) -> str:
        """How the process ended (``exit code 70``, ``killed by signal 9``), after waiting up to 10 s for it."""
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # closed its socket but lingers: finish it
            self.proc.kill()
            code = self.proc.wait()
        return f"killed by signal {-code}" if code < 0 else f"exit code {code}"

    def await_ready(self, timeout_s: float) -> bool:
        """Read the ``("ready", pid)`` within ``timeout_s``; raises :class:`EOFError` when the process died."""
        if self.ready:
            return True
        if self.conn.poll(timeout_s):
            message = self.conn.recv()
            self.ready = isinstance(message, tuple) and message[:1] == ("ready",)
        return self.ready

    def send(self, args: tuple[Any, ...]) -> int:
        """Start a job with ``args``; its sequence number."""
        self._seq += 1
        self.conn.send((self._seq, args))
        return self._seq

    def receive(self, seq: int, timeout_s: float) -> tuple[bool, Any]:
        """``(True, answer)`` to job ``seq`` within ``timeout_s``, else ``(False, None)``.

        Raises :class:`EOFError` or :class:`OSError` when the process died.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            # waited in slices: poll() refuses a timeout of more than about 24 days (milliseconds in a C int)
            if not self.conn.poll(min(max(0.0, left), MAX_POLL_S)):
                if left <= MAX_POLL_S:
                    return False, None
                continue
            message = self.conn.recv()
            if isinstance(message, tuple) and len(message) == 2 and message[0] == seq:
                return True, message[1]

    def kill(self) -> None:
        """SIGKILL the process (not reaped: see :meth:`close`)."""
        if self.alive():
            self.proc.kill()

    def close(self) -> None:
        """Kill and reap the process, close the socket."""
        self.ready = False
        self.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.conn.close()


def run_once(process: WorkerProcess, args: tuple[Any, ...], budget_s: float, start_limit_s: float) -> tuple:
    """Run one job on ``process`` to its end (blocking): the answer, or ``("killed", message)``
    past ``budget_s`` (the warm-up not counted), or ``("crashed", message)``. A process that did
    not answer is killed (the caller then starts another)."""
    try:
        if not process.await_ready(start_limit_s):
            process.kill()
            return ("crashed", f"the worker process did not start within {start_limit_s:g} s")
        seq = process.send(args)
        answered, answer = process.receive(seq, budget_s)
    except (EOFError, OSError):
        return ("crashed", f"the worker process ended unexpectedly ({process.exit_text()})")
    if answered:
        return tuple(answer)
    process.kill()
    return ("killed", f"the task ran longer than its budget of {budget_s:g} s and was stopped")
