"""Admission and health of `dnnprov serve` under concurrency, and the input defects of issue 20."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx", reason="httpx is in the test extra")
pytest.importorskip("fastapi", reason="the service extra (fastapi, uvicorn) is in the test extra")

from service_helpers import TABLE1, server, slow_instance  # noqa: E402

SLOW = {"instance": slow_instance(10), "method": "enumerate", "max_plans": 10**9, "time_limit_s": 30}


@pytest.fixture(scope="module")
def full_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server with 1 worker and room for 4 tasks."""
    with server(
        tmp_path_factory.mktemp("admission"), "--workers", "1", "--max-pending", "4", "--max-body-bytes", str(3 << 20)
    ) as (url, _, _):
        yield url


def test_fifty_concurrent_requests_admit_exactly_the_limit(full_url: str) -> None:
    """50 job submissions at once with --max-pending 4: 4 admitted, 46 refused with 429 and Retry-After;
    cancelling queued jobs gives their places back at once; /readyz says full meanwhile."""
    barrier = threading.Barrier(50)

    def submit(_: int) -> httpx.Response:
        with httpx.Client(base_url=full_url, timeout=60) as client:
            barrier.wait()
            return client.post("/v1/jobs", json=SLOW)

    with ThreadPoolExecutor(50) as threads:
        answers = list(threads.map(submit, range(50)))
    codes = sorted(a.status_code for a in answers)
    assert codes == [202] * 4 + [429] * 46
    refusals = [a for a in answers if a.status_code == 429]
    assert all(int(a.headers["retry-after"]) >= 1 and "full" in a.json()["error"]["message"] for a in refusals)
    ids = [a.json()["id"] for a in answers if a.status_code == 202]
    with httpx.Client(base_url=full_url, timeout=60) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 503 and "full" in ready.json()["reasons"]
        assert client.head("/readyz").status_code == 503
        queued = [i for i in ids if client.get(f"/v1/jobs/{i}").json()["status"] == "queued"]
        assert len(queued) >= 3  # one worker: at most one runs
        for job_id in queued[:2]:
            assert client.post(f"/v1/jobs/{job_id}/cancel").json()["status"] == "cancelled"
        again = [client.post("/v1/jobs", json=SLOW) for _ in range(3)]
        assert [a.status_code for a in again] == [202, 202, 429]
        for job_id in set(ids) - set(queued[:2]) | {a.json()["id"] for a in again[:2]}:
            assert client.post(f"/v1/jobs/{job_id}/cancel").json()["status"] == "cancelled"
        assert client.get("/healthz").json()["queue_depth"] == 0


def test_health_endpoints_answer_get_and_head(full_url: str) -> None:
    """/healthz, /livez, /readyz answer GET and HEAD (no body for HEAD)."""
    with httpx.Client(base_url=full_url, timeout=30) as client:
        for path in ("/healthz", "/livez", "/readyz"):
            head = client.head(path)
            assert head.status_code in (200, 503) and head.content == b""
            assert client.get(path).status_code == head.status_code
        assert client.get("/livez").json() == {"status": "ok"}


def test_forty_large_bodies_do_not_hold_health_checks(tmp_path: Path) -> None:
    """40 bodies of 1 MB parsed at once (in threads, off the event loop): a health check sent after
    they have all been sent is answered while most of them are still being parsed."""
    with server(tmp_path, "--workers", "1", "--max-pending", "64", "--max-body-bytes", str(3 << 20)) as (url, _, _):
        _forty_large_bodies(url)


def _forty_large_bodies(full_url: str) -> None:
    body = json.dumps({"instance": TABLE1, "padding": [[1, 2.5, "x"]] * 70000}).encode()
    assert len(body) > 1 << 20
    done: list[float] = []
    lock = threading.Lock()
    sent = threading.Barrier(41)

    def upload(_: int) -> int:
        with httpx.Client(base_url=full_url, timeout=120) as client:
            sent.wait()
            status = client.post("/v1/solve", content=body, headers={"Content-Type": "application/json"}).status_code
        with lock:
            done.append(status)
        return status

    with ThreadPoolExecutor(40) as threads:
        futures = [threads.submit(upload, i) for i in range(40)]
        sent.wait()
        with httpx.Client(base_url=full_url, timeout=120) as client:
            client.get("/livez")  # the uploads are on their way
            answered_before = len(done)
            assert client.get("/healthz").status_code == 200
        statuses = [f.result() for f in futures]
    assert answered_before < 20, f"{answered_before} of 40 bodies were answered before the health check"
    assert statuses == [422] * 40  # "padding": an unknown field, named


@pytest.mark.parametrize("path", ["/v1/solve", "/v1/jobs", "/v1/solve-many"])
def test_nul_in_an_embedded_name_is_a_field_error(full_url: str, path: str) -> None:
    """`"embedded:\\u0000"` is refused naming the field (it was a 500)."""
    body = {"instances": ["embedded:\u0000"]} if path.endswith("many") else {"instance": "embedded:\u0000"}
    answer = httpx.post(f"{full_url}{path}", json=body, timeout=30)
    assert answer.status_code == 422
    assert answer.json()["error"]["field"] == ("instances.0" if path.endswith("many") else "instance")


def test_host_header_never_reaches_a_location(full_url: str) -> None:
    """A trailing slash is not redirected (a redirect named the client's Host); job creation's Location is relative."""
    answer = httpx.post(f"{full_url}/v1/jobs/", json={"instance": TABLE1}, headers={"Host": "evil.example"}, timeout=30)
    assert "evil" not in answer.headers.get("location", "") and answer.status_code == 404
    created = httpx.post(f"{full_url}/v1/jobs", json={"instance": TABLE1}, headers={"Host": "evil.example"}, timeout=30)
    assert created.status_code == 202 and created.headers["location"] == f"/v1/jobs/{created.json()['id']}"


def test_long_job_ids_are_not_echoed(full_url: str) -> None:
    """A 60,000-character job id gets a short 404; a 100,000-character request line a short refusal."""
    answer = httpx.get(f"{full_url}/v1/jobs/{'a' * 60_000}", timeout=30)
    assert answer.status_code == 404 and len(answer.content) < 200 and answer.json()["error"]["field"] == "job_id"
    host, port = full_url.removeprefix("http://").split(":")
    reply = b""
    with socket.create_connection((host, int(port)), timeout=30) as raw:
        try:  # the server may refuse the line and close before it is all sent or read
            raw.sendall(f"GET /v1/jobs/{'a' * 100_000} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            while chunk := raw.recv(65536):
                reply += chunk
        except (ConnectionResetError, BrokenPipeError):
            pass
    assert (reply == b"" or reply.startswith(b"HTTP/1.1 4")) and len(reply) < 1000 and b"a" * 100 not in reply


def test_a_long_url_sent_in_pieces_is_parsed_like_one_sent_at_once(full_url: str) -> None:
    """A 60,000-character job id written in 4 KiB pieces still gets the 404 (h11's 16 KiB default
    refused a head that arrived split with 400, so the answer depended on the network)."""
    host, port = full_url.removeprefix("http://").split(":")
    request = f"GET /v1/jobs/{'a' * 60_000} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    reply = b""
    with socket.create_connection((host, int(port)), timeout=30) as raw:
        for start in range(0, len(request), 4096):
            raw.sendall(request[start : start + 4096])
            time.sleep(0.005)
        while chunk := raw.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 404") and b'"field":"job_id"' in reply


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", "application/x-www-form-urlencoded", None])
def test_bodies_that_are_not_json_get_415(full_url: str, content_type: str | None) -> None:
    """Content-Type is checked: a body sent as anything but JSON is refused with 415 naming the header."""
    headers = {"Content-Type": content_type} if content_type else {}
    answer = httpx.post(f"{full_url}/v1/solve", content=json.dumps({"instance": TABLE1}), headers=headers, timeout=30)
    assert answer.status_code == 415 and answer.json()["error"]["field"] == "Content-Type"
    assert (
        httpx.post(
            f"{full_url}/v1/solve",
            json={"instance": TABLE1},
            timeout=30,
            headers={"Content-Type": "application/json; charset=utf-8"},
        ).status_code
        == 200
    )


@pytest.mark.parametrize("depth", [33, 100, 1000, 100_000])
def test_too_deep_nesting_is_400_at_any_depth(full_url: str, depth: int) -> None:
    """One status for nesting too deep, whatever the depth (docs/service.md says 400)."""
    body = b'{"instance": ' + b"[" * depth + b"]" * depth + b"}"
    answer = httpx.post(f"{full_url}/v1/solve", content=body, headers={"Content-Type": "application/json"}, timeout=30)
    assert answer.status_code == 400 and "nested more than" in answer.json()["error"]["message"]


def test_wrong_method_gets_405_with_allow(full_url: str) -> None:
    """405 names the methods a path takes."""
    answer = httpx.put(f"{full_url}/v1/jobs", json={}, timeout=30)
    assert answer.status_code == 405 and set(answer.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST"}
    assert answer.json()["error"]
