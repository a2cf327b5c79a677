"""`dnnprov serve --dask ADDRESS`: solves on a Dask cluster (a `distributed.LocalCluster` on loopback,
threads in this process) with the lifecycle of local workers: answers, jobs, cancel, drain; and on a
cluster of worker processes, one killed with SIGKILL while it runs a job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx", reason="httpx is in the test extra")
pytest.importorskip("fastapi", reason="the service extra (fastapi, uvicorn) is in the test extra")
distributed = pytest.importorskip("distributed", reason="dask[distributed] is in the batch extra")

from service_helpers import DNNPROV, TABLE1, free_port, log_events, server, slow_instance, startup_error, wait_for  # noqa: E402

SLOW = {"instance": slow_instance(10), "method": "enumerate", "max_plans": 10**9, "time_limit_s": 20}


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A LocalCluster with one worker of two threads on 127.0.0.1; yields its scheduler address."""
    with distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=2,
        processes=False,
        protocol="tcp",
        scheduler_kwargs={"host": "127.0.0.1"},
        dashboard_address=None,
    ) as local:
        yield local.scheduler_address


def test_dask_solves_jobs_and_cancel(tmp_path: Path, cluster: str) -> None:
    """A solve answers what the CLI prints; a job runs; a cancelled running job ends cancelled and frees its slot."""
    with server(tmp_path, "--dask", cluster, "--max-pending", "4") as (url, _, log):
        with httpx.Client(base_url=url, timeout=120) as client:
            health = client.get("/healthz").json()
            answer = client.post("/v1/solve", json={"instance": TABLE1})
            job = client.post("/v1/jobs", json={"instance": TABLE1}).json()["id"]
            done = wait_for(client, job, ("done", "failed"), timeout=120)
            slow = client.post("/v1/jobs", json=SLOW).json()["id"]
            wait_for(client, slow, ("running",))
            cancelled = client.post(f"/v1/jobs/{slow}/cancel").json()
            assert client.get("/healthz").json()["queue_depth"] == 0  # its place is free at once
            after = client.post("/v1/solve", json={"instance": TABLE1})
    cli = json.loads(
        subprocess.run([DNNPROV, "solve", TABLE1, "--json"], capture_output=True, text=True, check=True).stdout
    )
    assert health["workers"] == 2 and log_events(log, "started")[0]["executor"] == "dask"
    got = answer.json()
    for out in (got, cli):
        out.pop("solve_seconds")
    assert answer.status_code == 200 and got == cli
    assert done["status"] == "done" and done["result"]["cost"] == pytest.approx(5.448374)
    assert cancelled["status"] == "cancelled" and after.status_code == 200


def test_dask_drain_requeues_without_counting(tmp_path: Path, cluster: str) -> None:
    """SIGTERM while a job runs on the cluster: it is re-queued with its attempt not counted, then finishes."""
    db = tmp_path / "jobs.sqlite"
    with server(tmp_path, "--dask", cluster, "--drain-timeout", "0", db=db) as (url, proc, log):
        with httpx.Client(base_url=url, timeout=60) as client:
            # ~4 s of CPU: still running at the SIGTERM, and within the 20 s limit on a loaded machine
            job = client.post("/v1/jobs", json={**SLOW, "instance": slow_instance(9)}).json()["id"]
            wait_for(client, job, ("running",))
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    assert [e["job_id"] for e in log_events(log, "job_requeued")] == [job]
    with server(tmp_path, "--dask", cluster, db=db) as (url, _, _):
        with httpx.Client(base_url=url, timeout=60) as client:
            final = wait_for(client, job, ("done", "failed"), timeout=120)
    assert (final["status"], final["attempts"]) == ("done", 1), final["error"]


def test_unreachable_dask_scheduler_is_one_error_line(tmp_path: Path) -> None:
    """--dask to an address nobody listens on: exit 2, one JSON line naming --dask."""
    run = subprocess.run(
        [
            DNNPROV,
            "serve",
            "--port",
            str(free_port()),
            "--db",
            str(tmp_path / "j.sqlite"),
            "--dask",
            f"tcp://127.0.0.1:{free_port()}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    error = startup_error(run)
    assert error["field"] == "--dask" and error["message"].startswith("cannot reach")


def test_killed_dask_worker_process_job_is_retried(tmp_path: Path) -> None:
    """A LocalCluster of one worker *process* (its nanny restarts it) whose scheduler allows no
    failure: SIGKILL of that process while it runs a job gives `KilledWorker`, the job is retried
    (`job_retried`) on the restarted worker and finishes on attempt 2."""
    import dask

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        local = distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, protocol="tcp", host="127.0.0.1", dashboard_address=None
        )
    with local, distributed.Client(local.scheduler_address, set_as_default=False) as watcher:
        with server(tmp_path, "--dask", local.scheduler_address) as (url, _, log):
            with httpx.Client(base_url=url, timeout=60) as client:
                # a budget of 75 s: the retry runs on a new worker process that imports the solver first
                job = client.post("/v1/jobs", json={**SLOW, "time_limit_s": 60}).json()["id"]  # ~8 s: killed mid-run
                wait_for(client, job, ("running",), timeout=120)
                (pid,) = watcher.run(os.getpid).values()
                os.kill(pid, signal.SIGKILL)
                final = wait_for(client, job, ("done", "failed"), timeout=180)
    retried = [e for e in log_events(log, "job_retried") if e["job_id"] == job]
    assert (final["status"], final["attempts"]) == ("done", 2), (final["error"], retried)
    assert [e["attempt"] for e in retried] == [1] and "Dask workers" in retried[0]["reason"]
    assert final["result"]["status"] in ("optimal", "limit")
