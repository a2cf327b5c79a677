"""`dnnprov serve --dask` when the cluster fails: a real `dask scheduler` and `dask worker` (with its
nanny) in their own processes on loopback, killed with SIGKILL while a job runs on them.

- the scheduler killed: the running job is not left `running`; `/readyz` names the lost
  scheduler; once a scheduler is back on the address the job runs again as attempt 2 and
  answers what the CLI prints, and `/readyz` is ready again;
- synchronous requests while the scheduler is lost: the one running gets 503 naming the lost
  scheduler (not 500, not a hang), a new one gets 503 at once, and once a scheduler is back
  they are answered again;
- a worker process killed under a task, the scheduler allowing failures (Dask's default: it
  would re-run the task silently while the budget clock went on): the job is retried as its
  next attempt (`job_retried`, counted), with a budget of its own, and finishes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx", reason="httpx is in the test extra")
pytest.importorskip("fastapi", reason="the service extra (fastapi, uvicorn) is in the test extra")
distributed = pytest.importorskip("distributed", reason="dask[distributed] is in the batch extra")

from service_helpers import DNNPROV, TABLE1, free_port, kill_group, log_events, server, slow_instance, wait_for  # noqa: E402 - needs the importorskip above

DASK = str(Path(sys.executable).with_name("dask"))


@contextmanager
def dask_process(tmp_path: Path, name: str, *args: str) -> Iterator[subprocess.Popen]:
    """`dask ARGS...` in its own process group, logging to a file; killed (the whole group) afterwards."""
    with open(tmp_path / f"{name}.log", "a") as log:
        proc = subprocess.Popen([DASK, *args], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        kill_group(proc.pid)
        proc.wait()


def scheduler(tmp_path: Path, port: int) -> AbstractContextManager[subprocess.Popen]:
    """A `dask scheduler` on 127.0.0.1:PORT."""
    return dask_process(
        tmp_path, f"scheduler-{port}", "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"
    )


def worker(tmp_path: Path, address: str) -> AbstractContextManager[subprocess.Popen]:
    """One `dask worker` process of one thread (under its nanny, which restarts it when it dies)."""
    return dask_process(
        tmp_path,
        "worker",
        "worker",
        address,
        "--nthreads",
        "1",
        "--nworkers",
        "1",
        "--host",
        "127.0.0.1",
        "--no-dashboard",
    )


def wait_workers(address: str, count: int, timeout: float = 120) -> None:
    """Until the scheduler at ``address`` has ``count`` workers."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with distributed.Client(address, timeout=5, set_as_default=False) as client:
                if len(client.nthreads()) >= count:
                    return
        except (OSError, TimeoutError):
            pass
        assert time.monotonic() < deadline, f"no {count} Dask workers at {address}"
        time.sleep(0.5)


def readyz(url: str) -> tuple[int, list[str]]:
    """`/readyz`: status code and reasons."""
    answer = httpx.get(f"{url}/readyz", timeout=10)
    return answer.status_code, answer.json().get("reasons", [])


def until(condition, timeout: float, what: str) -> None:
    """Poll ``condition()`` until true."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


def test_scheduler_killed_job_runs_again_when_it_is_back(tmp_path: Path) -> None:
    """SIGKILL of the scheduler while a job runs: not ready meanwhile; the job ends done on attempt 2."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    slow = {"instance": slow_instance(9), "method": "enumerate", "max_plans": 10**9, "time_limit_s": 60}
    with scheduler(tmp_path, port) as first, worker(tmp_path, address) as first_worker:
        wait_workers(address, 1)
        with server(tmp_path, "--dask", address) as (url, _, log), httpx.Client(base_url=url, timeout=60) as client:
            job = client.post("/v1/jobs", json=slow).json()["id"]
            wait_for(client, job, ("running",), timeout=120)
            os.kill(first.pid, signal.SIGKILL)
            until(
                lambda: "dask scheduler unreachable" in readyz(url)[1],
                60,
                "/readyz did not say the scheduler is unreachable",
            )
            assert readyz(url)[0] == 503 and client.get(f"/v1/jobs/{job}").json()["status"] in ("queued", "running")
            assert client.get("/livez").status_code == 200
            kill_group(first_worker.pid)
            with scheduler(tmp_path, port), worker(tmp_path, address):
                wait_workers(address, 1)
                final = wait_for(client, job, ("done", "failed", "cancelled"), timeout=240)
                until(lambda: readyz(url)[0] == 200, 60, "/readyz not ready after the scheduler came back")
                answer = client.post("/v1/solve", json={"instance": TABLE1})
    retried = [e for e in log_events(log, "job_retried") if e["job_id"] == job]
    assert (final["status"], final["attempts"]) == ("done", 2), (final["error"], retried)
    assert [e["attempt"] for e in retried] == [1] and "scheduler was lost" in retried[0]["reason"]
    cli = json.loads(
        subprocess.run([DNNPROV, "solve", TABLE1, "--json"], capture_output=True, text=True, check=True).stdout
    )
    got = answer.json()
    for out in (got, cli):
        out.pop("solve_seconds")
    assert answer.status_code == 200 and got == cli


def test_killed_worker_counts_an_attempt_with_a_budget_of_its_own(tmp_path: Path) -> None:
    """SIGKILL of the worker process under a job (the scheduler allows 3 failures): retried as attempt 2."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    slow = {"instance": slow_instance(9), "method": "enumerate", "max_plans": 10**9, "time_limit_s": 60}
    with scheduler(tmp_path, port), worker(tmp_path, address):
        wait_workers(address, 1)
        with (
            distributed.Client(address, set_as_default=False) as watcher,
            server(tmp_path, "--dask", address) as (url, _, log),
            httpx.Client(base_url=url, timeout=60) as client,
        ):
            job = client.post("/v1/jobs", json=slow).json()["id"]
            wait_for(client, job, ("running",), timeout=120)
            until(lambda: any(watcher.processing().values()), 60, "the task never reached the worker")
            (pid,) = watcher.run(os.getpid).values()
            os.kill(pid, signal.SIGKILL)
            final = wait_for(client, job, ("done", "failed"), timeout=240)
    retried = [e for e in log_events(log, "job_retried") if e["job_id"] == job]
    assert (final["status"], final["attempts"]) == ("done", 2), (final["error"], retried)
    assert [e["attempt"] for e in retried] == [1] and "worker running the task died" in retried[0]["reason"]
    assert final["result"]["status"] == "optimal"


def test_sync_requests_get_503_while_the_scheduler_is_lost(tmp_path: Path) -> None:
    """SIGKILL of the scheduler under a synchronous solve: 503 for it and for new ones; 200 once it is back."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    slow = {"instance": slow_instance(9), "method": "enumerate", "max_plans": 10**9, "time_limit_s": 60}
    with scheduler(tmp_path, port) as first, worker(tmp_path, address) as first_worker:
        wait_workers(address, 1)
        with (
            server(tmp_path, "--dask", address) as (url, _, log),
            httpx.Client(base_url=url, timeout=120) as client,
            ThreadPoolExecutor(1) as pool,
        ):
            in_flight = pool.submit(client.post, "/v1/solve", json=slow)
            until(lambda: client.get("/healthz").json()["running"] == 1, 60, "the solve never started")
            os.kill(first.pid, signal.SIGKILL)
            cut = in_flight.result(timeout=120)
            refused = client.post("/v1/solve", json={"instance": TABLE1})
            status, reasons = readyz(url)
            kill_group(first_worker.pid)
            with scheduler(tmp_path, port), worker(tmp_path, address):
                wait_workers(address, 1)
                until(lambda: readyz(url)[0] == 200, 60, "/readyz not ready after the scheduler came back")
                answer = client.post("/v1/solve", json={"instance": TABLE1})
        internal = [line for line in log.read_text().splitlines() if '"internal_error"' in line]
    for lost in (cut, refused):
        assert lost.status_code == 503, lost.text
        assert "dask scheduler unreachable" in lost.json()["error"]["message"]
        assert int(lost.headers["Retry-After"]) >= 1
    assert status == 503 and "dask scheduler unreachable" in reasons
    assert answer.status_code == 200 and answer.json()["status"] == "optimal"
    assert not internal
