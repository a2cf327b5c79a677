"""The fault table of docs/service.md, one test per row: no job lost, none run twice, none stuck.

Each test starts real servers (``dnnprov serve`` subprocesses on free loopback ports) and
injects the fault from outside: signals, ``kill -9`` of a worker process, another process
holding the SQLite write lock, a second server on the same file, a client that hangs up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx", reason="httpx is in the test extra")
pytest.importorskip("fastapi", reason="the service extra (fastapi, uvicorn) is in the test extra")

from service_helpers import (  # noqa: E402
    DNNPROV,
    TABLE1,
    free_port,
    log_events,
    server,
    slow_instance,
    startup_error,
    wait_for,
    worker_pids,
)

#: A solve of ~8 s (enumerate on the 7 x 10 instance, quotas 10) that stops at its own limit.
SLOW = {"instance": slow_instance(10), "method": "enumerate", "max_plans": 10**9, "time_limit_s": 30}


def started_jobs(log: Path, job_id: str) -> list[dict]:
    """The ``job_started`` events of one job."""
    return [e for e in log_events(log, "job_started") if e["job_id"] == job_id]


def test_killed_worker_process_job_is_retried_then_failed_at_its_limit(tmp_path: Path) -> None:
    """kill -9 of the worker running a job: the job runs again (logged) until its third attempt, then fails."""
    with server(tmp_path, "--workers", "1", "--short-workers", "0") as (url, proc, log):
        with httpx.Client(base_url=url, timeout=30) as client:
            once = client.post("/v1/jobs", json=SLOW).json()["id"]
            wait_for(client, once, ("running",))
            (pid,) = worker_pids(proc.pid)
            os.kill(pid, signal.SIGKILL)
            for attempt in (2, 3):  # a kill per attempt; the third one is the last
                deadline = time.monotonic() + 60
                while client.get(f"/v1/jobs/{once}").json()["attempts"] < attempt:
                    assert time.monotonic() < deadline, "the job was not tried again"
                    time.sleep(0.1)
                wait_for(client, once, ("running",))
                (pid,) = worker_pids(proc.pid)
                os.kill(pid, signal.SIGKILL)
            job = wait_for(client, once, ("done", "failed"))
            retried = [e for e in log_events(log, "job_retried") if e["job_id"] == once]
            quick = client.post("/v1/jobs", json={"instance": TABLE1}).json()["id"]
            assert wait_for(client, quick, ("done", "failed"))["status"] == "done"  # the slot goes on
    assert (job["status"], job["attempts"]) == ("failed", 3) and "worker process ended" in job["error"]["message"]
    assert [e["attempt"] for e in retried] == [1, 2]
    assert len(started_jobs(log, once)) == 3


def test_sigterm_drains_requeues_without_counting_and_answers_503(tmp_path: Path) -> None:
    """SIGTERM with a job running, one queued and a synchronous solve waiting: new requests get a JSON 503,
    the queued job never starts, the running one is re-queued with its attempt not counted; three
    graceful restarts later it still finishes, on attempt 1."""
    db = tmp_path / "jobs.sqlite"
    answers: dict[str, httpx.Response] = {}
    with server(tmp_path, "--workers", "1", "--drain-timeout", "2", db=db) as (url, proc, log):
        with httpx.Client(base_url=url, timeout=30) as client:
            running = client.post("/v1/jobs", json=SLOW).json()["id"]
            queued = client.post("/v1/jobs", json={"instance": TABLE1}).json()["id"]
            wait_for(client, running, ("running",))
            waiting = threading.Thread(
                target=lambda: answers.update(sync=httpx.post(f"{url}/v1/solve", json={"instance": TABLE1}, timeout=30))
            )
            waiting.start()
            deadline = time.monotonic() + 10
            while client.get("/healthz").json()["queue_depth"] < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            while client.get("/healthz").json()["status"] != "draining":
                assert time.monotonic() < deadline
                time.sleep(0.02)
            refused = client.post("/v1/jobs", json={"instance": TABLE1})
            ready = client.get("/readyz")
            waiting.join(30)
            proc.wait(30)
    assert refused.status_code == 503 and refused.json()["error"]["message"].startswith("the server is shutting down")
    assert refused.headers["retry-after"] and ready.status_code == 503 and "draining" in ready.json()["reasons"]
    assert answers["sync"].status_code == 503 and answers["sync"].json()["error"]["message"]
    assert started_jobs(log, queued) == []
    assert [e["job_id"] for e in log_events(log, "job_requeued")] == [running]
    for _ in range(2):  # two more graceful restarts while it runs
        with server(tmp_path, "--workers", "1", "--drain-timeout", "0", db=db) as (url, proc, log):
            with httpx.Client(base_url=url, timeout=30) as client:
                wait_for(client, running, ("running",), timeout=90)
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
    with server(tmp_path, "--workers", "1", db=db) as (url, proc, log):
        with httpx.Client(base_url=url, timeout=30) as client:
            first = wait_for(client, running, ("done", "failed"), timeout=120)
            second = wait_for(client, queued, ("done", "failed"), timeout=60)
    assert (first["status"], first["attempts"]) == ("done", 1) and first["result"]["status"] in ("optimal", "limit")
    assert (second["status"], second["attempts"]) == ("done", 1)


LOCKER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("COMMIT")
"""


def test_store_locked_20_s_by_another_process_delays_but_loses_nothing(tmp_path: Path) -> None:
    """Another process holds the SQLite write lock for 20 s while a job runs and two wait: new jobs get
    503 (not 500), /readyz says the store is unavailable, and once the lock is gone every job
    finishes, each started once; the worker slots are alive (/readyz ready)."""
    with server(tmp_path, "--workers", "1") as (url, _proc, log):
        with httpx.Client(base_url=url, timeout=30) as client:
            short_slow = {**SLOW, "instance": slow_instance(7)}
            ids = [
                client.post("/v1/jobs", json=body).json()["id"]
                for body in (short_slow, {"instance": TABLE1}, {"instance": TABLE1})
            ]
            wait_for(client, ids[0], ("running",))
            locker = subprocess.Popen(
                [sys.executable, "-c", LOCKER, str(tmp_path / "jobs.sqlite"), "20"], stdout=subprocess.PIPE, text=True
            )
            try:
                assert locker.stdout.readline().strip() == "locked"
                refused = client.post("/v1/jobs", json={"instance": TABLE1})
                ready = client.get("/readyz")
                seen = client.get(f"/v1/jobs/{ids[1]}")  # reads go on under a write lock (WAL)
                assert locker.wait(60) == 0
            finally:
                locker.kill()
            jobs = [wait_for(client, job_id, ("done", "failed"), timeout=120) for job_id in ids]
            after = client.get("/readyz")
    assert (
        refused.status_code == 503 and refused.headers["retry-after"] and "store" in refused.json()["error"]["message"]
    )
    assert ready.status_code == 503 and "store busy" in ready.json()["reasons"]
    assert seen.status_code == 200 and seen.json()["status"] == "queued"
    assert [(j["status"], j["attempts"]) for j in jobs] == [("done", 1)] * 3
    assert after.status_code == 200, after.json()
    assert log_events(log, "store_busy") and all(len(started_jobs(log, i)) == 1 for i in ids)


def test_second_server_on_one_store_refuses_to_start(tmp_path: Path) -> None:
    """One owner per store file: a second `dnnprov serve --db` on it exits 2 with one error line."""
    db = tmp_path / "jobs.sqlite"
    with server(tmp_path, "--workers", "1", db=db) as (url, proc, _):
        run = subprocess.run(
            [DNNPROV, "serve", "--port", str(free_port()), "--db", str(db)], capture_output=True, text=True, timeout=60
        )
        assert httpx.get(f"{url}/readyz").status_code == 200
    error = startup_error(run)
    assert error["field"] == "--db"
    assert error["message"].startswith(f"{db} is in use by another dnnprov serve (pid {proc.pid})")
    with server(tmp_path, "--workers", "1", db=db) as (url, _, _):  # free again once the first has stopped
        assert httpx.get(f"{url}/readyz").status_code == 200


def test_client_disconnect_cancels_its_synchronous_solve(tmp_path: Path) -> None:
    """A client that hangs up while its solve runs: the worker is stopped (logged), its place freed."""
    with server(tmp_path, "--workers", "1", "--max-pending", "1") as (url, _, log):
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/v1/solve", json=SLOW, timeout=httpx.Timeout(30, read=2))
        with httpx.Client(base_url=url, timeout=30) as client:
            deadline = time.monotonic() + 30
            while client.get("/healthz").json()["queue_depth"]:
                assert time.monotonic() < deadline, "the abandoned solve still holds its place"
                time.sleep(0.1)
            assert client.post("/v1/solve", json={"instance": TABLE1}).status_code == 200
    assert len(log_events(log, "request_abandoned")) == 1
    assert not log_events(log, "internal_error")
