"""What a scheduler integrator expects of `dnnprov serve`: idempotency keys, cursor pages, retention,
request ids in answers and logs, long-poll, tenants, throttled failed auth, JSON-only stderr."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx", reason="httpx is in the test extra")
pytest.importorskip("fastapi", reason="the service extra (fastapi, uvicorn) is in the test extra")

from service_helpers import TABLE1, log_events, server, wait_for  # noqa: E402

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdefgh"


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A server with two tenants (a token file of `TENANT TOKEN` lines) and a 3 s job TTL."""
    tmp = tmp_path_factory.mktemp("tenants")
    (tmp / "tokens").write_text(f"# tenants\nalice {ALICE}\nbob {BOB}\n")
    with server(tmp, "--workers", "1", "--token-file", str(tmp / "tokens"), "--job-ttl", "3") as (url, _, log):
        yield url, log


def client_of(url: str, token: str) -> httpx.Client:
    """A client that sends ``token``."""
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def test_idempotency_key_gives_the_same_job_for_the_same_body(tenants) -> None:
    """Same key and body: the same job (no second one); same key, other body: 422 naming the header."""
    url, _ = tenants
    with client_of(url, ALICE) as alice, client_of(url, BOB) as bob:
        first = alice.post("/v1/jobs", json={"instance": TABLE1}, headers={"Idempotency-Key": "k-1"})
        again = alice.post("/v1/jobs", json={"instance": TABLE1}, headers={"Idempotency-Key": "k-1"})
        other = alice.post("/v1/jobs", json={"instance": TABLE1, "gap": 0.1}, headers={"Idempotency-Key": "k-1"})
        bobs = bob.post(
            "/v1/jobs", json={"instance": TABLE1}, headers={"Idempotency-Key": "k-1"}
        )  # keys are per tenant
    assert first.status_code == again.status_code == 202 and first.json()["id"] == again.json()["id"]
    assert again.headers["idempotent-replayed"] == "true"
    assert other.status_code == 422 and other.json()["error"]["field"] == "Idempotency-Key"
    assert bobs.status_code == 202 and bobs.json()["id"] != first.json()["id"]


def test_jobs_are_seen_only_by_their_tenant_and_pages_follow_cursors(tenants) -> None:
    """Bob cannot see, list or cancel Alice's jobs; /v1/jobs pages with next_cursor, newest first, no repeats."""
    url, _ = tenants
    with client_of(url, ALICE) as alice, client_of(url, BOB) as bob:
        ids = [
            alice.post(
                "/v1/jobs", json={"kind": "predict", "instance": TABLE1, "counts": {"g3.8xlarge": n}, "ps": 1}
            ).json()["id"]
            for n in range(1, 6)
        ]
        assert bob.get(f"/v1/jobs/{ids[0]}").status_code == 404
        assert bob.delete(f"/v1/jobs/{ids[0]}").status_code == 404
        assert bob.post(f"/v1/jobs/{ids[0]}/cancel").status_code == 404
        assert not {j["id"] for j in bob.get("/v1/jobs").json()["jobs"]} & set(ids)
        seen, cursor = [], None
        while True:
            page = alice.get("/v1/jobs", params={"limit": 2, **({"cursor": cursor} if cursor else {})}).json()
            seen += [j["id"] for j in page["jobs"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert alice.get("/v1/jobs", params={"cursor": "x"}).status_code == 422
    assert seen[:5] == ids[::-1] and len(seen) == len(set(seen))


def test_long_poll_retention_and_delete(tenants) -> None:
    """?wait=S answers when the job ends; an ended job is deleted by DELETE or after the TTL."""
    url, log = tenants
    with client_of(url, ALICE) as alice:
        job_id = alice.post("/v1/jobs", json={"instance": TABLE1}).json()["id"]
        job = alice.get(f"/v1/jobs/{job_id}", params={"wait": 30}).json()
        assert job["status"] == "done" and job["result"]["cost"] == pytest.approx(5.448374)
        assert alice.get(f"/v1/jobs/{job_id}", params={"wait": 61}).status_code == 422
        other = alice.post("/v1/jobs", json={"instance": TABLE1}).json()["id"]
        alice.get(f"/v1/jobs/{other}", params={"wait": 30})
        assert alice.delete(f"/v1/jobs/{other}").status_code == 204
        assert alice.get(f"/v1/jobs/{other}").status_code == 404
        deadline = time.monotonic() + 30  # the TTL is 3 s; the purge runs every second
        while alice.get(f"/v1/jobs/{job_id}").status_code == 200:
            assert time.monotonic() < deadline, "an ended job outlived its TTL"
            time.sleep(0.5)
    assert log_events(log, "jobs_purged")


def test_request_ids_and_traceparent_reach_answers_and_logs(tenants) -> None:
    """A caller's X-Request-Id and traceparent trace id come back and are in the access and job log lines."""
    url, log = tenants
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    with client_of(url, ALICE) as alice:
        answer = alice.post(
            "/v1/jobs",
            json={"instance": TABLE1},
            headers={"X-Request-Id": "req-42", "traceparent": f"00-{trace}-00f067aa0ba902b7-01"},
        )
        wait_for(alice, answer.json()["id"], ("done",))
        bad = alice.get("/livez", headers={"X-Request-Id": "x" * 500})
    assert answer.headers["x-request-id"] == "req-42" and answer.headers["traceparent"].startswith(f"00-{trace}-")
    assert len(bad.headers["x-request-id"]) == 16
    access = [e for e in log_events(log, "request") if e["request_id"] == "req-42"]
    assert access and access[0]["trace_id"] == trace and access[0]["tenant"] == "alice"
    for event in ("job_queued", "job_started", "job_finished"):
        assert any(e["request_id"] == "req-42" for e in log_events(log, event)), event


def test_failed_auth_is_throttled_and_stderr_is_json(tenants) -> None:
    """After 10 failures of one wrong token a client gets 429 with Retry-After for it, while a right
    token from the same address (another client behind one ingress) is served; an address that
    tries 100 tokens gets 429 whatever it sends. Every log line is JSON."""
    url, log = tenants
    with httpx.Client(base_url=url, timeout=30) as client:
        codes = [
            client.get("/v1/jobs", headers={"Authorization": "Bearer wrong-token-xyz"}).status_code for _ in range(12)
        ]
        neighbour = client.get("/v1/jobs", headers={"Authorization": f"Bearer {ALICE}"})
        guesses = [
            client.get("/v1/jobs", headers={"Authorization": f"Bearer guess-{i:03d}"}).status_code for i in range(100)
        ]
        blocked = client.get("/v1/jobs", headers={"Authorization": f"Bearer {ALICE}"})
        assert client.get("/healthz").status_code == 200  # health checks need no token
    assert codes[:10] == [401] * 10 and codes[10:] == [429, 429]
    assert neighbour.status_code == 200
    assert 429 in guesses and guesses[-1] == 429
    assert blocked.status_code == 429 and int(blocked.headers["retry-after"]) >= 1
    assert all(isinstance(json.loads(line), dict) for line in log.read_text().splitlines())
