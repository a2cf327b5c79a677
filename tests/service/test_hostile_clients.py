"""What a hostile or careless client found (audit a2): repeated single-valued headers, replays
of accepted jobs while the tenant is full, jobs the worker would refuse, and errors naming
fields the body does not have. The real `dnnprov serve` on a loopback port."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

httpx = pytest.importorskip("httpx", reason="httpx is in the test extra")
pytest.importorskip("fastapi", reason="the service extra (fastapi, uvicorn) is in the test extra")

from service_helpers import TABLE1, server, slow_instance, wait_for  # noqa: E402 - needs the importorskip above

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdefgh"
SERVERLESS = "embedded:serverless/paper-table3-resnet50.json"
SLOW = {"instance": slow_instance(10), "method": "enumerate", "max_plans": 10**9, "time_limit_s": 30}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Tenants alice and bob, one long and one short worker, 2 places a lane (so 1 per tenant)."""
    tmp = tmp_path_factory.mktemp("hostile")
    (tmp / "tokens").write_text(f"alice {ALICE}\nbob {BOB}\n")
    with server(tmp, "--workers", "1", "--max-pending", "2", "--token-file", str(tmp / "tokens")) as (url, _, _):
        yield url


def client_of(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def error_of(answer: httpx.Response) -> tuple[int, str]:
    """The status and the field of an error answer (one JSON error, never a traceback)."""
    assert "Traceback" not in answer.text
    return answer.status_code, answer.json()["error"]["field"]


@pytest.mark.parametrize("tokens", [("wrong-token-0123456789abcdef", ALICE), (ALICE, BOB), (ALICE, ALICE)])
def test_a_repeated_authorization_is_refused(url: str, tokens: tuple[str, str]) -> None:
    """Two Authorization headers: 400, whichever they are. The last one used to count, so a wrong
    token before a good one passed, and alice's and bob's tokens read bob's jobs (a proxy in front
    may have checked the first)."""
    headers = [("Authorization", f"Bearer {token}") for token in tokens]
    answer = httpx.get(f"{url}/v1/jobs", headers=headers)
    assert error_of(answer) == (400, "Authorization")


def test_a_repeated_idempotency_key_is_refused(url: str) -> None:
    """Two Idempotency-Key headers: 422 on it, no job (the first used to count, the second was ignored)."""
    with client_of(url, ALICE) as alice:
        body = json.dumps({"kind": "predict", "instance": TABLE1, "counts": {"g3.8xlarge": 5}})
        headers = [("Content-Type", "application/json"), ("Idempotency-Key", "k1"), ("Idempotency-Key", "k2")]
        answer = alice.post("/v1/jobs", content=body, headers=headers)
        assert error_of(answer) == (422, "Idempotency-Key")
        assert alice.get("/v1/jobs").json()["jobs"] == []


def test_a_replay_is_answered_while_the_tenant_is_full(url: str) -> None:
    """The client of an accepted job whose 202 was lost retries under its key while its job holds
    the tenant's only place: it gets its job (it used to get 429 until the job ended). A new job
    is still 429; another body under the key is still 422."""
    with client_of(url, BOB) as bob:
        first = bob.post("/v1/jobs", json=SLOW, headers={"Idempotency-Key": "slow"})
        assert first.status_code == 202
        job_id = first.json()["id"]
        try:
            replay = bob.post("/v1/jobs", json=SLOW, headers={"Idempotency-Key": "slow"})
            assert replay.status_code == 202 and replay.headers["Idempotent-Replayed"] == "true"
            assert replay.json()["id"] == job_id and replay.headers["Location"] == f"/v1/jobs/{job_id}"
            assert bob.post("/v1/jobs", json=SLOW, headers={"Idempotency-Key": "other"}).status_code == 429
            other_body = bob.post("/v1/jobs", json={**SLOW, "time_limit_s": 29}, headers={"Idempotency-Key": "slow"})
            assert error_of(other_body) == (422, "Idempotency-Key")
        finally:
            bob.post(f"/v1/jobs/{job_id}/cancel")
        wait_for(bob, job_id, ("cancelled",))


@pytest.mark.parametrize(
    "body, field",
    [
        ({"instance": TABLE1, "plan": {"counts": {"g3.8xlarge": 0}}}, "plan.counts"),
        ({"instance": TABLE1, "plan": {"counts": {"zz": 1}}}, "plan.counts.zz"),
        ({"instance": TABLE1, "counts": {"zz": 1}}, "counts.zz"),
        ({"instance": TABLE1, "plan": {"functions": 2, "memory_mb": 2048}}, "plan.functions"),
        ({"instance": TABLE1, "ps": 1}, "counts"),
        ({"instance": SERVERLESS, "functions": 8}, "memory_mb"),
        ({"instance": SERVERLESS, "functions": 8, "memory_mb": 2560, "counts": {"x": 1}}, "counts"),
    ],
)
def test_predictions_predict_refuses_are_refused_at_once(url: str, body: dict, field: str) -> None:
    """A prediction job that predict() refuses is 422 at once, as /v1/predict is, naming the body's
    field (the plan's own as plan.*); it used to be queued (202) and then failed."""
    with client_of(url, ALICE) as alice:
        sync = alice.post("/v1/predict", json=body)
        job = alice.post("/v1/jobs", json={"kind": "predict", **body})
    assert error_of(sync) == error_of(job) == (422, field)


def test_integral_numbers_of_a_prediction_are_integers(url: str) -> None:
    """`5.0` workers is 5, as in every other integer field (it passed the check, then predict() refused it)."""
    with client_of(url, ALICE) as alice:
        ints = alice.post("/v1/predict", json={"instance": TABLE1, "plan": {"counts": {"g3.8xlarge": 5}, "ps": 1}})
        floats = alice.post(
            "/v1/predict", json={"instance": TABLE1, "plan": {"counts": {"g3.8xlarge": 5.0}, "ps": 1.0}}
        )
        serverless = alice.post("/v1/predict", json={"instance": SERVERLESS, "functions": 8.0, "memory_mb": 2560.0})
    assert ints.status_code == floats.status_code == serverless.status_code == 200
    assert floats.json() == ints.json()
    assert serverless.json()["kind"] == "serverless" and serverless.json()["cost"] > 0


def test_a_solve_many_job_with_unknown_shared_names_is_refused_at_once(url: str) -> None:
    """Shared quotas that name no job's type or family: 422 at once (it used to be queued, then failed)."""
    with client_of(url, ALICE) as alice:
        for shared, field in (
            ({"quotas": {"zz": 3}}, "shared.quotas.zz"),
            ({"vcpu_quotas": [{"family": "zz", "vcpus": 3}]}, "shared.vcpu_quotas.zz"),
        ):
            body = {"instances": [TABLE1], "shared": shared, "time_limit_s": 2}
            assert error_of(alice.post("/v1/jobs", json={"kind": "solve-many", **body})) == (422, field)
            assert error_of(alice.post("/v1/solve-many", json=body)) == (422, field)


def test_errors_of_a_plan_name_the_plan_field(url: str) -> None:
    """/v1/replan and /v1/export name the body's `plan` in its errors (`plan.format`, not `format`),
    as /v1/simulate does."""
    bare = {"counts": {"g3.8xlarge": 5}, "ps": 1}
    document = {"format": "dnnprov/plan", "version": 2}
    result = {"kind": "serverless", "status": "optimal", "plan": {"functions": 8, "memory_mb": 2560, "ps": 1}}
    serverless = {"format": "dnnprov/plan", "version": 1, "result": result}
    takeover = {"instance": TABLE1, "revoked": {"g3.8xlarge": 5}, "elapsed_s": 1788, "loss_reached": 0.92}
    with client_of(url, ALICE) as alice:
        for plan, field in ((bare, "plan.format"), (document, "plan.version"), ([], "plan")):
            assert error_of(alice.post("/v1/replan", json={**takeover, "plan": plan})) == (422, field)
            export = alice.post("/v1/export", json={"plan": plan, "target": "json", "instance": TABLE1})
            assert error_of(export) == (422, field)
        assert error_of(alice.post("/v1/replan", json={**takeover, "plan": serverless})) == (422, "plan.result.kind")


@pytest.mark.parametrize(
    "head",
    [
        b"GET /livez HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        b"GET /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"POST /v1/solve HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"GET /livez HTTP/1.1\r\n\r\n",
    ],
    ids=["negative-length", "two-lengths", "bad-chunk", "no-host"],
)
def test_a_request_http_cannot_parse_gets_a_json_400(url: str, head: bytes) -> None:
    """What h11 refuses before the app sees it is answered in the service's error shape, not uvicorn's plain text."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status, _, rest = answer.partition(b"\r\n")
    headers, _, body = rest.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 400")
    assert b"content-type: application/json" in headers.lower()
    assert json.loads(body)["error"]["message"].startswith("malformed HTTP request")


def test_an_encoded_body_is_refused(url: str) -> None:
    """A gzip body was read as if it were plain JSON (and then refused as not JSON, or worse, a
    plain body labelled gzip was solved): Content-Encoding other than identity is 415."""
    import gzip

    body = json.dumps({"instance": TABLE1}).encode()
    with client_of(url, ALICE) as alice:
        for encoded, label in ((gzip.compress(body), "gzip"), (body, "gzip"), (body, "br")):
            answer = alice.post(
                "/v1/solve", content=encoded, headers={"Content-Type": "application/json", "Content-Encoding": label}
            )
            assert error_of(answer) == (415, "Content-Encoding")
        plain = alice.post(
            "/v1/solve", content=body, headers={"Content-Type": "application/json", "Content-Encoding": "identity"}
        )
        assert plain.status_code == 200, plain.text
