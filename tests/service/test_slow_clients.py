"""No client can stall the others (issue 30, item 2): a slow body holds no admission place and is
cut off at the minimum rate, a trickled head is cut off at its deadline, each tenant has its own
admission and rate limits, and cheap work has a lane of its own. Real servers, raw sockets."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx", reason="httpx is in the test extra")
pytest.importorskip("fastapi", reason="the service extra (fastapi, uvicorn) is in the test extra")

from service_helpers import TABLE1, log_events, server, slow_instance, wait_for  # noqa: E402 - needs the importorskip above

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdefgh"
ADMIN = "admin-token-0123456789abcdef"


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def _closed_by_server(sock: socket.socket, timeout: float) -> bytes | None:
    """What the server sent before closing ``sock`` within ``timeout`` s (``None``: still open)."""
    sock.settimeout(timeout)
    got = b""
    try:
        while chunk := sock.recv(4096):
            got += chunk
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return got


def test_slow_bodies_hold_no_place_and_are_cut_off(tmp_path: Path) -> None:
    """32 clients send a body one byte a second: others are still admitted, /readyz stays 200,
    and the server answers each slow client 408 and closes it."""
    with (
        server(tmp_path, "--workers", "1", "--max-pending", "4", "--body-timeout", "2", "--min-body-rate", "100") as (
            url,
            _proc,
            _log,
        ),
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        slow = []
        for _ in range(32):
            sock = socket.create_connection(_address(url))
            sock.sendall(
                b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
            )
            slow.append(sock)
        stop = threading.Event()

        def trickle() -> None:
            while not stop.wait(1.0):
                for sock in slow:
                    try:
                        sock.send(b" ")
                    except OSError:
                        pass

        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        try:
            accepted = client.post("/v1/jobs", json={"instance": TABLE1})
            assert accepted.status_code == 202, accepted.text
            assert client.get("/readyz").status_code == 200
            answers = [_closed_by_server(sock, 30) for sock in slow]
        finally:
            stop.set()
            thread.join()
            for sock in slow:
                sock.close()
        assert all(a is not None and a.startswith(b"HTTP/1.1 408") for a in answers), answers[:3]
        assert wait_for(client, accepted.json()["id"], ("done", "failed"))["status"] == "done"


def test_trickled_and_silent_heads_are_cut_off(tmp_path: Path) -> None:
    """Request heads sent a byte a second, and connections that send nothing, are closed with 408
    at the head deadline; a normal request meanwhile is answered."""
    with server(tmp_path, "--workers", "1", "--head-timeout", "2") as (url, _proc, _log):
        socks = [socket.create_connection(_address(url)) for _ in range(40)]
        stop = threading.Event()

        def trickle() -> None:
            head = b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 100
            for i in range(len(head)):
                if stop.wait(1.0):
                    return
                for sock in socks[:20]:
                    try:
                        sock.send(head[i : i + 1])
                    except OSError:
                        pass

        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        try:
            assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
            answers = [_closed_by_server(sock, 30) for sock in socks]
        finally:
            stop.set()
            thread.join()
            for sock in socks:
                sock.close()
        assert all(a is not None and a.startswith(b"HTTP/1.1 408") for a in answers), answers[:3]


def test_tenants_have_their_own_admission_and_rate(tmp_path: Path) -> None:
    """With two tenants and --max-pending 4, one tenant holds at most 2 places (its third job 429)
    while the other is still admitted; the per-tenant rate limit refuses one tenant, not the other;
    /metrics is for the admin tenant only."""
    (tmp_path / "tokens").write_text(f"alice {ALICE}\nbob {BOB}\nadmin {ADMIN}\n")
    long_job = {"instance": slow_instance(10), "method": "enumerate", "max_plans": 10**9, "time_limit_s": 30}
    with server(
        tmp_path, "--workers", "1", "--max-pending", "4", "--token-file", str(tmp_path / "tokens"), "--rate-limit", "3"
    ) as (url, _proc, _log):
        alice, bob, admin = (
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {t}"}, timeout=30)
            for t in (ALICE, BOB, ADMIN)
        )
        with alice, bob, admin:
            codes = [alice.post("/v1/jobs", json=long_job).status_code for _ in range(3)]
            assert codes == [202, 202, 429]
            time.sleep(1.5)  # the rate bucket refills
            assert bob.post("/v1/jobs", json=long_job).status_code == 202
            burst = [alice.get("/v1/jobs").status_code for _ in range(12)]
            assert 429 in burst and bob.get("/v1/jobs").status_code == 200
            time.sleep(1.5)
            assert bob.get("/metrics").status_code == 403
            assert admin.get("/metrics").status_code == 200
            for job in alice.get("/v1/jobs").json()["jobs"]:
                alice.delete(f"/v1/jobs/{job['id']}")
            for job in bob.get("/v1/jobs").json()["jobs"]:
                bob.delete(f"/v1/jobs/{job['id']}")


def test_cheap_work_does_not_wait_behind_long_solves(tmp_path: Path) -> None:
    """With the one long-lane worker busy and its queue full, a heuristic solve and a prediction
    are admitted and answered by the short lane while the long solve still runs."""
    long_job = {"instance": slow_instance(10), "method": "enumerate", "max_plans": 10**9, "time_limit_s": 20}
    with (
        server(tmp_path, "--workers", "1", "--short-workers", "1", "--max-pending", "2") as (url, _p, _l),
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        first, second = (client.post("/v1/jobs", json=long_job).json()["id"] for _ in range(2))
        wait_for(client, first, ("running",))
        assert client.post("/v1/jobs", json=long_job).status_code == 429  # the long lane is full
        quick = client.post("/v1/solve", json={"instance": TABLE1, "method": "heuristic"})
        assert quick.status_code == 200 and quick.json()["plan"]
        predicted = client.post("/v1/predict", json={"instance": TABLE1, "counts": {"g3.8xlarge": 5}, "ps": 1})
        assert predicted.status_code == 200, predicted.text
        assert client.get(f"/v1/jobs/{first}").json()["status"] == "running"
        assert client.get(f"/v1/jobs/{second}").json()["status"] == "queued"
        for job_id in (first, second):
            client.delete(f"/v1/jobs/{job_id}")


def test_a_client_that_hangs_up_mid_body_is_no_server_error(tmp_path: Path) -> None:
    """A client closing its connection in the middle of its body is logged as a client that
    went away: no ``internal_error``, no ASGI traceback, and the server goes on answering."""
    with server(tmp_path, "--workers", "1") as (url, _proc, log), httpx.Client(base_url=url, timeout=30) as client:
        for _ in range(3):
            with socket.create_connection(_address(url)) as sock:
                sock.sendall(
                    b"POST /v1/solve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b'Content-Length: 1000\r\n\r\n{"instance": '
                )
                time.sleep(0.2)  # the server is reading the body when the client hangs up
        assert client.get("/healthz").status_code == 200
        deadline = time.monotonic() + 30  # a guard against a hang, not a timing
        while len(log_events(log, "client_disconnected")) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(log_events(log, "client_disconnected")) == 3
        assert log_events(log, "internal_error") == []
        assert "Exception in ASGI application" not in log.read_text()


def test_server_cpu_counts_live_grandchildren(tmp_path: Path) -> None:
    """The benchmarks' server CPU figure sums the whole live process tree below the server,
    not its direct children only (a Dask worker's own processes are grandchildren)."""
    import os
    import signal
    import subprocess
    import sys

    from conftest import benchmark_module

    server_cpu = benchmark_module("service_admission").server_cpu
    done = tmp_path / "burnt"
    burn = (
        "import pathlib, sys, time\n"
        "while time.process_time() < 0.4: pass\n"
        "pathlib.Path(sys.argv[1]).write_text('x')\n"
        "time.sleep(60)\n"
    )
    # server -> child (waits) -> grandchild (burns 0.4 CPU s, then sleeps, alive)
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}, {str(done)!r}])"
    server = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])"
    parent = subprocess.Popen([sys.executable, "-c", server], start_new_session=True)
    try:
        for _ in range(600):
            if done.exists():
                break
            time.sleep(0.1)
        assert done.exists(), "the grandchild did not start"
        assert server_cpu(parent.pid) >= 0.4 - 0.02  # 0.4 s burnt by a grandchild (one clock tick of slack)
    finally:
        os.killpg(parent.pid, signal.SIGKILL)  # the whole tree: its own session
        parent.wait()
