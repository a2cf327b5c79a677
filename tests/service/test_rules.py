"""The contract and the guards of issue 30 (items 5, 6): the schema states the checks' rules, jobs
are refused like synchronous requests, odd cursors are 4xx, metric labels are bounded, a wrong
token throttles itself and not its neighbours, and every create, cancel and delete is audited."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import dnnprov

httpx = pytest.importorskip("httpx", reason="httpx is in the test extra")
pytest.importorskip("fastapi", reason="the service extra (fastapi, uvicorn) is in the test extra")

from service_helpers import TABLE1, log_events, server, slow_instance, wait_for  # noqa: E402 - needs the importorskip above

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdefgh"
ADMIN = "admin-token-0123456789abcdef"


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A server with tenants alice, bob and admin, 3 failed tokens allowed per minute."""
    tmp = tmp_path_factory.mktemp("rules")
    (tmp / "tokens").write_text(f"alice {ALICE}\nbob {BOB}\nadmin {ADMIN}\n")
    with server(tmp, "--workers", "1", "--token-file", str(tmp / "tokens"), "--max-auth-failures", "3") as (
        url,
        _,
        log,
    ):
        yield url, log


def client_of(url: str, token: str) -> httpx.Client:
    """A client that sends ``token``."""
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def test_schema_states_the_checks_minimum_and_magnitudes(tenants) -> None:
    """`param_size_mb: 5e-324` is refused by the checks, so the schema's minimum is 1e-9, not an
    exclusive 0 (`dataset_mb` alike); numbers without a bound get the checks' magnitude."""
    url, _ = tenants
    with client_of(url, ALICE) as alice:
        spec = alice.get("/openapi.json").json()
        instance = json.loads(dnnprov.embedded_instance("spot/paper-table1.json").read_text())
        instance["workload"]["param_size_mb"] = 5e-324
        refused = alice.post("/v1/solve", json={"instance": instance})
    schemas = spec["components"]["schemas"]
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "instance.workload.param_size_mb"
    for where, name in (("SpotInstance_workload", "param_size_mb"), ("ServerlessInstance_workload", "dataset_mb")):
        field = schemas[where]["properties"][name]
        assert field["minimum"] == 1e-9 and "exclusiveMinimum" not in field
    assert schemas["ReplanRequest"]["properties"]["loss_reached"] == {
        "type": "number",
        "minimum": -1e15,
        "maximum": 1e15,
    }
    gap = schemas["SolveRequest"]["properties"]["gap"]
    assert gap["exclusiveMaximum"] == 1 and gap["minimum"] == 0


def test_input_warnings_are_json_lines(tenants) -> None:
    """An implausible magnitude (a warning, used as given) is answered, and the server's and its
    workers' standard error stays one JSON object per line (`input_warning`)."""
    url, log = tenants
    instance = json.loads(dnnprov.embedded_instance("spot/paper-table1.json").read_text())
    instance["workload"]["param_size_mb"] = 1e-6
    with client_of(url, ALICE) as alice:
        assert alice.post("/v1/solve", json={"instance": instance, "method": "heuristic"}).status_code == 200
    time.sleep(0.5)
    lines = log.read_text().splitlines()
    assert all(isinstance(json.loads(line), dict) for line in lines), [x for x in lines if not x.startswith("{")][:3]
    assert any(e["category"] == "PlausibilityWarning" for e in log_events(log, "input_warning"))


def test_jobs_refuse_what_solve_refuses_and_cursors_are_ascii(tenants) -> None:
    """`gap: 1` is 422 on /v1/jobs as on /v1/solve; a cursor of non-ASCII digits is 422, not 500."""
    url, _ = tenants
    with client_of(url, ALICE) as alice:
        sync = alice.post("/v1/solve", json={"instance": TABLE1, "gap": 1})
        job = alice.post("/v1/jobs", json={"instance": TABLE1, "gap": 1})
        cursor = alice.get("/v1/jobs", params={"cursor": "²"})
    assert (sync.status_code, job.status_code) == (422, 422)
    assert sync.json()["error"]["field"] == job.json()["error"]["field"] == "gap"
    assert cursor.status_code == 422 and cursor.json()["error"]["field"] == "cursor"
    with client_of(url, ALICE) as alice:  # schemathesis ST201: a null `counts` was queued (202)
        null_counts = alice.post(
            "/v1/jobs",
            json={"kind": "predict", "instance": TABLE1, "counts": None, "functions": 1, "memory_mb": 1, "ps": 1},
        )
        overridden = alice.post(
            "/v1/jobs",
            json={
                "kind": "predict",
                "instance": TABLE1,
                "ps": 1,
                "functions": 1,
                "memory_mb": 1,
                "plan": {"functions": 1, "memory_mb": 1, "local_batch": 1, "ps": 2**53 + 1},
            },
        )
    assert null_counts.status_code == 422 and null_counts.json()["error"]["field"] == "counts"
    assert overridden.status_code == 422 and overridden.json()["error"]["field"] == "plan.ps"  # ST201 too


def test_invented_methods_do_not_grow_the_metrics(tenants) -> None:
    """500 requests with invented HTTP methods: /metrics counts them under one label."""
    url, _ = tenants
    host, port = url.removeprefix("http://").split(":")
    with client_of(url, ADMIN) as admin:
        before = len(admin.get("/metrics").text)
        for i in range(500):
            with socket.create_connection((host, int(port))) as sock:
                sock.sendall(f"M{i:04d} /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
                while sock.recv(4096):
                    pass
        text = admin.get("/metrics").text
    assert "M0001" not in text and 'method="OTHER"' in text
    assert len(text) < before + 5000


def test_a_wrong_token_throttles_itself_not_other_tenants(tenants) -> None:
    """A misconfigured client (wrong token) behind the same address as the tenants: it gets 429
    after 3 failures; alice and bob from the same address are still served."""
    url, _ = tenants
    with (
        client_of(url, "wrong-token-0123456789abcdef") as wrong,
        client_of(url, ALICE) as alice,
        client_of(url, BOB) as bob,
    ):
        codes = [wrong.get("/v1/jobs").status_code for _ in range(5)]
        assert codes[:3] == [401] * 3 and codes[3:] == [429, 429]
        assert alice.get("/v1/jobs").status_code == 200 and bob.get("/v1/jobs").status_code == 200


def test_creates_cancels_and_deletes_are_audited(tenants) -> None:
    """The audit log names the tenant, the client and the job of each create, cancel and delete."""
    url, log = tenants
    slow = {"instance": slow_instance(10), "method": "enumerate", "max_plans": 10**9, "time_limit_s": 20}
    with client_of(url, BOB) as bob:
        job_id = bob.post("/v1/jobs", json=slow).json()["id"]
        assert bob.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        assert bob.delete(f"/v1/jobs/{job_id}").status_code == 204
        done = bob.post("/v1/jobs", json={"instance": TABLE1}).json()["id"]
        wait_for(bob, done, ("done",))
    time.sleep(0.2)
    lines = [e for e in log_events(log, "audit") if e["job_id"] == job_id]
    assert [e["action"] for e in lines] == ["create", "cancel", "delete"]
    assert all(e["tenant"] == "bob" and e["client"] == "127.0.0.1" and e["request_id"] for e in lines)
    assert lines[0]["kind"] == "solve" and lines[1]["was"] in ("queued", "running")


def test_a_predictions_plan_is_what_its_schema_says(tenants) -> None:
    """schemathesis ST201: a `plan` without `ps` was queued while the schema required a whole plan.
    The schema states the checks' rule (a partial plan, the body's fields override it, no other
    field), and a field the plan cannot have is refused by name instead of ignored."""
    url, _ = tenants
    with client_of(url, ALICE) as alice:
        schema = alice.get("/openapi.json").json()["components"]["schemas"]["PredictRequest"]["properties"]["plan"]
        partial = alice.post("/v1/predict", json={"instance": TABLE1, "plan": {"counts": {"g3.8xlarge": 5}}, "ps": 1})
        unknown = alice.post(
            "/v1/jobs",
            json={"kind": "predict", "instance": TABLE1, "plan": {"counts": {"g3.8xlarge": 5}, "ps": 1, "x": 1}},
        )
    assert "required" not in schema and schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"counts", "ps", "functions", "memory_mb", "local_batch"}
    assert partial.status_code == 200 and partial.json()["feasible"] in (True, False)
    assert unknown.status_code == 422 and unknown.json()["error"]["field"] == "plan.x"
