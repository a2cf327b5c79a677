"""Helpers of the service tests: the real `dnnprov serve` in a subprocess on a free loopback port."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

import dnnprov

DNNPROV = str(Path(sys.executable).with_name("dnnprov"))
TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TABLE1 = "embedded:spot/paper-table1.json"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server(tmp_path: Path, *options: str, db: Path | None = None) -> Iterator[tuple[str, subprocess.Popen, Path]]:
    """`dnnprov serve` on a free port: yields (base URL, process, log file); stopped afterwards."""
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [DNNPROV, "serve", "--port", str(port), "--db", str(db or tmp_path / "jobs.sqlite"), *options],
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # the workers' warm-up, on a loaded machine
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:  # a worker is warm
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, f"server exited: {log.read_text()}"
            assert time.monotonic() < deadline, "server was not ready in 120 s"
            time.sleep(0.2)
        yield url, proc, log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        kill_group(proc.pid)


def slow_instance(quota: int) -> dict:
    """The 7 x 10 instance with every quota set to ``quota``: enumerate takes ~0.4 s at 7, ~4 s at 9, ~8 s at 10."""
    data = json.loads(dnnprov.embedded_instance("spot/paper-table3-overhead-7x10.json").read_text())
    for entry in data["instance_types"].values():
        entry["quota"] = quota
    return data


def wait_for(client, job_id: str, states: tuple[str, ...], timeout: float = 60.0) -> dict:
    """Poll GET /v1/jobs/{id} until its status is one of ``states``."""
    deadline = time.monotonic() + timeout
    while True:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in states:
            return job
        assert time.monotonic() < deadline, f"job {job_id} still {job['status']}"
        time.sleep(0.05)


def kill_group(pid: int) -> None:
    """SIGKILL what is left of a server's process group (its workers), so no test leaves an orphan."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def worker_pids(server_pid: int) -> list[int]:
    """The worker processes (dnnprov.execution.process interpreters) of a server."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == server_pid and "dnnprov.execution.process" in cmdline:
            found.append(int(entry.name))
    return found


def startup_error(run: subprocess.CompletedProcess) -> dict:
    """The one JSON line of a refused `dnnprov serve` start (exit 2): ``{"field", "message", ...}``."""
    assert run.returncode == 2, (run.returncode, run.stderr)
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    line = json.loads(lines[0])
    assert (line["level"], line["event"]) == ("error", "startup_failed") and line.keys() >= {"ts", "field", "message"}
    return line


def log_events(log: Path, event: str) -> list[dict]:
    """The JSON lines of a server log with ``"event": event``."""
    return [r for r in map(json.loads, log.read_text().splitlines()) if r.get("event") == event]
