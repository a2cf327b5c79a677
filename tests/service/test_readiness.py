"""Readiness that tells the truth about the job store (issue 30, item 4): one owner per store
file whatever its name, a deleted or replaced file refuses writes, a disk that takes no write
is reported and not retried without end, a corrupt file is a 503 and a reason, not a 500."""

from __future__ import annotations

import os
import resource
import subprocess
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx", reason="httpx is in the test extra")
pytest.importorskip("fastapi", reason="the service extra (fastapi, uvicorn) is in the test extra")

from service_helpers import (  # noqa: E402 - needs the importorskip above
    DNNPROV,
    TABLE1,
    free_port,
    log_events,
    server,
    slow_instance,
    startup_error,
    wait_for,
)


def _ready(client: httpx.Client, reason: str | None, timeout: float = 30.0) -> dict:
    """Wait until /readyz names ``reason`` (``None``: until it is 200); its last answer."""
    deadline = time.monotonic() + timeout
    while True:
        answer = client.get("/readyz")
        body = answer.json()
        if (reason is None and answer.status_code == 200) or (reason is not None and reason in body["reasons"]):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.2)


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_a_link_to_a_served_store_cannot_start_a_second_server(tmp_path: Path, link: str) -> None:
    """The owner's lock is on the store file itself: the same file under another name is refused."""
    db = tmp_path / "jobs.sqlite"
    other = tmp_path / "other" / "alias.sqlite"
    other.parent.mkdir()
    with server(tmp_path, "--workers", "1", "--short-workers", "0", db=db) as (url, _proc, _log):
        (os.symlink if link == "symlink" else os.link)(db, other)
        run = subprocess.run(
            [DNNPROV, "serve", "--port", str(free_port()), "--db", str(other)],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert httpx.get(f"{url}/readyz").status_code == 200
    error = startup_error(run)
    assert error["field"] == "--db" and "in use by another dnnprov serve" in error["message"]


def test_deleted_store_file_refuses_jobs_and_readiness(tmp_path: Path) -> None:
    """The store file deleted under a running server: no 202 that a restart would lose, a 503 naming
    the cause, and /readyz not ready with the reason."""
    db = tmp_path / "jobs.sqlite"
    with (
        server(tmp_path, "--workers", "1", "--short-workers", "0", db=db) as (url, _proc, log),
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        assert client.post("/v1/jobs", json={"instance": TABLE1}).status_code == 202
        db.unlink()
        refused = client.post("/v1/jobs", json={"instance": TABLE1})
        assert refused.status_code == 503 and "store file missing" in refused.json()["error"]["message"]
        ready = _ready(client, "store file missing")
        assert "deleted" in ready["store_error"]
        assert client.post("/v1/solve", json={"instance": TABLE1}).status_code == 200  # solving needs no store
    assert log_events(log, "store_failed")


def test_disk_that_takes_no_write_is_reported_and_not_retried_forever(tmp_path: Path) -> None:
    """Writes fail (the server's file size limit set to 1 byte, as a full disk): a new job gets 503
    and /readyz names it; a job whose end cannot be written does not hold the only worker slot
    (a synchronous solve is answered); with the limit lifted the server is ready and jobs run."""
    db = tmp_path / "jobs.sqlite"
    job = {"instance": slow_instance(6), "method": "enumerate", "max_plans": 10**9, "time_limit_s": 30}
    with (
        server(tmp_path, "--workers", "1", "--short-workers", "0", db=db) as (url, proc, _log),
        httpx.Client(base_url=url, timeout=120) as client,
    ):
        running = client.post("/v1/jobs", json=job).json()["id"]
        wait_for(client, running, ("running", "done"))
        before = resource.prlimit(proc.pid, resource.RLIMIT_FSIZE)
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (1, before[1]))
        try:
            refused = client.post("/v1/jobs", json={"instance": TABLE1})
            ready = _ready(client, "store not writable")
            solved = client.post("/v1/solve", json={"instance": TABLE1})
        finally:
            resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, before)
        assert refused.status_code == 503 and "store not writable" in refused.json()["error"]["message"]
        assert ready["store_error"]
        assert solved.status_code == 200 and solved.json()["status"] == "optimal"
        _ready(client, None)
        again = client.post("/v1/jobs", json={"instance": TABLE1}).json()["id"]
        assert wait_for(client, again, ("done", "failed"))["status"] == "done"


def test_corrupt_store_file_is_a_503_and_a_reason(tmp_path: Path) -> None:
    """Pages of the store overwritten with garbage: requests that touch them get 503 naming the
    store (never a 500), and /readyz is not ready."""
    db = tmp_path / "jobs.sqlite"
    with (
        server(tmp_path, "--workers", "1", "--short-workers", "0", db=db) as (url, _proc, _log),
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        for _ in range(20):
            client.post("/v1/jobs", json={"instance": TABLE1})
        # the WAL into the file, so that what is overwritten below is what the server reads; a
        # checkpoint while the worker reads is busy (first field 1) and leaves pages in the
        # WAL, which served them intact: retried until it is complete
        for _ in range(100):
            done = subprocess.run(
                ["sqlite3", str(db), "PRAGMA wal_checkpoint(TRUNCATE)"], check=False, capture_output=True, text=True
            )
            if done.stdout.startswith("0|"):
                break
            time.sleep(0.05)
        assert done.stdout.startswith("0|"), done.stdout + done.stderr
        with open(db, "r+b") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(4096)
            f.write(os.urandom(size - 4096))
        answers = [client.post("/v1/jobs", json={"instance": TABLE1}) for _ in range(3)]
        answers += [client.get("/v1/jobs"), client.get("/metrics")]
        codes = [a.status_code for a in answers]
        assert 500 not in codes, [a.text for a in answers]
        assert 503 in codes, [a.text for a in answers]
        _ready(client, "store corrupt")
