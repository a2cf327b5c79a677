"""The worker slots always come back: whatever the order of deaths, cancels and abandons,
``dnnprov serve`` converges to its configured workers and queued jobs start (issue 30, item 1).

Real servers (``dnnprov serve`` subprocesses), real worker processes, real HTTP.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx", reason="httpx is in the test extra")
pytest.importorskip("fastapi", reason="the service extra (fastapi, uvicorn) is in the test extra")

from service_helpers import TABLE1, server, wait_for, worker_pids  # noqa: E402 - needs the importorskip above


def converged(client: httpx.Client, workers: int, timeout: float = 120.0) -> dict:
    """Wait until every slot has a warm, idle worker; the last /healthz answer."""
    deadline = time.monotonic() + timeout
    while True:
        health = client.get("/healthz").json()
        if health["idle"] == workers and health["running"] == 0:
            return health
        assert time.monotonic() < deadline, f"the pool did not come back to {workers} workers: {health}"
        time.sleep(0.1)


def test_idle_worker_killed_then_jobs_still_run(tmp_path: Path) -> None:
    """kill -9 of an idle worker (no work running): the next jobs run and end ``done``.

    The old slot took the replacement's warm-up message as the job's answer and then waited
    for a warm-up message already read: every later job stayed queued.
    """
    with (
        server(tmp_path, "--workers", "1", "--max-pending", "4") as (url, proc, _log),
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        for _ in range(2):
            for pid in worker_pids(proc.pid):  # the long and the short lane's workers
                os.kill(pid, signal.SIGKILL)
            ids = [client.post("/v1/jobs", json={"instance": TABLE1}).json()["id"] for _ in range(2)]
            jobs = [wait_for(client, job_id, ("done", "failed", "cancelled"), timeout=120) for job_id in ids]
            assert [job["status"] for job in jobs] == ["done", "done"], jobs
            assert jobs[0]["result"]["status"] == "optimal"
        converged(client, 2)


def _abandoned_solve(url: str, hang_up_after: float) -> None:
    """POST /v1/solve on a raw socket and hang up after ``hang_up_after`` seconds."""
    body = b'{"instance": "embedded:spot/paper-table1.json"}'
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/solve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        time.sleep(hang_up_after)


def test_cancels_abandons_and_deaths_in_any_order_converge(tmp_path: Path) -> None:
    """Cancels right after the start, abandoned synchronous solves, deletes of running jobs and
    kill -9 of workers, interleaved at varied delays: afterwards every slot is back and jobs run."""
    with (
        server(tmp_path, "--workers", "1", "--max-pending", "4") as (url, proc, _log),
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        for i in range(24):
            delay = (i % 6) * 0.01
            step = i % 4
            if step == 0:
                job_id = client.post("/v1/jobs", json={"instance": TABLE1}).json()["id"]
                time.sleep(delay)
                client.post(f"/v1/jobs/{job_id}/cancel")
            elif step == 1:
                _abandoned_solve(url, delay)
            elif step == 2:
                job_id = client.post("/v1/jobs", json={"instance": TABLE1}).json()["id"]
                time.sleep(delay)
                client.delete(f"/v1/jobs/{job_id}")
            else:
                for pid in worker_pids(proc.pid):
                    os.kill(pid, signal.SIGKILL)
                time.sleep(delay)
        converged(client, 2)
        ids = [client.post("/v1/jobs", json={"instance": TABLE1}).json()["id"] for _ in range(3)]
        assert [wait_for(client, j, ("done", "failed", "cancelled"), timeout=120)["status"] for j in ids] == [
            "done"
        ] * 3
        assert client.get("/readyz").status_code == 200


def niceness(pid: int) -> int:
    """The niceness of a process (field 19 of /proc/PID/stat)."""
    return int((Path(f"/proc/{pid}/stat")).read_text().rsplit(")", 1)[1].split()[16])


def test_long_lane_workers_run_nicer_than_the_short_lane(tmp_path: Path) -> None:
    """The long lane's worker runs ``--long-nice`` steps nicer than the server (at most 19), the
    short lane's at the server's own, also after the long one is killed and replaced.

    (Under ``nice -n 19`` the server is at 19 already, and so are both workers.)
    """
    with (
        server(tmp_path, "--workers", "1", "--short-workers", "1", "--long-nice", "7") as (url, proc, _log),
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        base, killed = niceness(proc.pid), 0
        for _ in range(2):
            deadline = time.monotonic() + 120
            while (pids := worker_pids(proc.pid)) and (len(pids) != 2 or killed in pids):
                assert time.monotonic() < deadline, f"no replacement of worker {killed}: {pids}"
                time.sleep(0.1)
            converged(client, 2)
            found = sorted(niceness(pid) for pid in pids)
            assert found == sorted([base, min(19, base + 7)]), (base, found)
            killed = max(pids, key=niceness)
            os.kill(killed, signal.SIGKILL)
