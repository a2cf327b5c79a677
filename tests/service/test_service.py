"""dnnprov serve: the real server in a subprocess on a free loopback port, over HTTP (httpx)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import dnnprov

httpx = pytest.importorskip("httpx", reason="httpx is in the test extra")
pytest.importorskip("fastapi", reason="the service extra (fastapi, uvicorn) is in the test extra")
openapi_spec_validator = pytest.importorskip("openapi_spec_validator", reason="in the test extra")

from service_helpers import AUTH, DNNPROV, TABLE1, TOKEN, free_port, server, slow_instance, startup_error, wait_for  # noqa: E402 - needs the importorskip above


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Path]]:
    """One server with a token, 2 workers and room for 4 tasks, and a client that sends the token."""
    tmp = tmp_path_factory.mktemp("serve")
    (tmp / "token").write_text(TOKEN + "\n")
    with server(
        tmp,
        "--workers",
        "2",
        "--max-pending",
        "4",
        "--max-time-limit",
        "30",
        "--max-body-bytes",
        "200000",
        "--token-file",
        str(tmp / "token"),
    ) as (url, _, log):
        with httpx.Client(base_url=url, headers=AUTH, timeout=60) as client:
            yield client, log


def test_solve_answers_what_the_cli_prints(api) -> None:
    """POST /v1/solve with an instance object gives the object `dnnprov solve --json` prints."""
    client, _ = api
    instance = json.loads(dnnprov.embedded_instance("spot/paper-table1.json").read_text())
    answer = client.post("/v1/solve", json={"instance": instance, "method": "milp", "time_limit_s": 10})
    assert answer.status_code == 200
    cli = json.loads(
        subprocess.run([DNNPROV, "solve", TABLE1, "--json"], capture_output=True, text=True, check=True).stdout
    )
    got = answer.json()
    for out in (got, cli):
        out.pop("solve_seconds")
    assert got == cli and got["cost"] == pytest.approx(5.448374)


def test_auth_health_openapi_and_metrics(api) -> None:
    """No token: 401 (healthz stays open); OpenAPI embeds data/schema; metrics count solves."""
    client, log = api
    url = str(client.base_url)
    assert httpx.get(f"{url}/healthz").json()["status"] == "ok"
    refused = httpx.post(f"{url}/v1/solve", json={"instance": TABLE1})
    assert refused.status_code == 401 and refused.json()["error"]["field"] == "Authorization"
    assert httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    spec = client.get("/openapi.json").json()
    openapi_spec_validator.validate(spec)  # a valid OpenAPI 3.1 document
    schema = json.loads(
        Path(dnnprov.__file__).parent.joinpath("..", "data", "schema", "spot-v1.schema.json").resolve().read_text()
    )
    assert spec["components"]["schemas"]["SpotInstance"]["properties"].keys() == schema["properties"].keys()
    refs = {v for v in json.dumps(spec).split('"') if v.startswith("#/components/schemas/")}
    assert refs and all(r.removeprefix("#/components/schemas/") in spec["components"]["schemas"] for r in refs)
    assert {"/v1/solve", "/v1/jobs", "/v1/jobs/{job_id}", "/v1/sweep", "/v1/export"} <= spec["paths"].keys()
    assert client.post("/v1/solve", json={"instance": TABLE1}).status_code == 200
    metrics = client.get("/metrics").text
    assert 'dnnprov_solves_total{kind="solve",method="milp",status="optimal"}' in metrics
    assert "dnnprov_queue_depth " in metrics and "dnnprov_solve_seconds_bucket" in metrics
    records = [json.loads(line) for line in log.read_text().splitlines()]  # every log line is JSON
    assert any(r.get("event") == "started" and r["level"] == "info" for r in records)
    lines = [r for r in records if "request_id" in r]
    assert lines[-1].keys() >= {"ts", "method", "path", "route", "status", "duration_ms"}
    assert any(line["status"] == 401 and line["path"] == "/v1/solve" for line in lines)


@pytest.mark.parametrize(
    "content, code, field",
    [
        (b"{not json", 400, "body"),
        (b"[" * 5000 + b"]" * 5000, 400, "body"),
        (b'{"instance": ' + b"[" * 40 + b"]" * 40 + b"}", 400, "instance"),  # too deep: 400 at any depth
        (b'{"instance": "embedded:spot/paper-table1.json", "max_plans": ' + b"9" * 5000 + b"}", 422, "max_plans"),
        (b'{"instance": "embedded:spot/paper-table1.json", "method": "milp", "method": "heuristic"}', 422, "method"),
        (b'{"instance": "embedded:spot/paper-table1.json", "methods": "milp"}', 422, "methods"),
        (b'{"instance": "embedded:../../../../etc/passwd"}', 422, "instance"),
        (b'{"instance": "/etc/passwd"}', 422, "instance"),
        (b'{"instance": "embedded:spot/paper-table1.json", "time_limit_s": 31}', 422, "time_limit_s"),
        (b'{"instance": "embedded:spot/paper-table1.json", "method": "simplex"}', 422, "method"),
        (b"[1, 2]", 422, "body"),
        (b'{"instance": {"format": "dnnprov/spot", "version": 1, "name": "x"}}', 422, "instance.instance_types"),
        (b'{"instance": "' + b"x" * 300000 + b'"}', 413, "body"),
    ],
)
def test_bad_bodies_get_one_error_naming_the_field(api, content: bytes, code: int, field: str) -> None:
    """Bad bodies: 400/413/422 with {"error": {"field", "message"}}, never a 500 or a traceback."""
    client, _ = api
    answer = client.post("/v1/solve", content=content, headers={"Content-Type": "application/json"})
    assert answer.status_code == code
    error = answer.json()["error"]
    assert error["field"] == field and error["message"] and "Traceback" not in answer.text


def test_jobs_queue_run_and_cancel(api) -> None:
    """202 at once, then done with the solve result; /cancel stops a running job (409 once ended); DELETE deletes."""
    client, _ = api
    accepted = client.post("/v1/jobs", json={"instance": TABLE1})
    assert accepted.status_code == 202 and accepted.json()["status"] == "queued"
    job = wait_for(client, accepted.json()["id"], ("done", "failed"))
    assert job["status"] == "done" and job["result"]["cost"] == pytest.approx(5.448374)
    assert client.post(f"/v1/jobs/{job['id']}/cancel").status_code == 409
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 204
    assert client.get(f"/v1/jobs/{job['id']}").status_code == 404
    sweep = client.post("/v1/jobs", json={"kind": "sweep", "instance": TABLE1, "deadlines": "2600:3600:3"}).json()["id"]
    rows = wait_for(client, sweep, ("done", "failed"))["result"]["rows"]
    assert [r["deadline_s"] for r in rows] == [2600, 3100, 3600] and rows[0]["cost"] == pytest.approx(5.448374)
    slow = client.post(
        "/v1/jobs", json={"instance": slow_instance(10), "method": "enumerate", "max_plans": 10**9, "time_limit_s": 30}
    ).json()["id"]
    wait_for(client, slow, ("running",))
    cancelled = client.post(f"/v1/jobs/{slow}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    time.sleep(0.5)
    assert client.get(f"/v1/jobs/{slow}").json()["status"] == "cancelled"
    assert client.get("/v1/jobs/nope").status_code == 404
    bad = client.post("/v1/jobs", json={"kind": "solve", "instance": TABLE1, "gap": -1})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "gap"
    assert any(j["id"] == slow for j in client.get("/v1/jobs", params={"status": "cancelled"}).json()["jobs"])


def test_long_solve_blocks_nothing(api) -> None:
    """While a solve of 8 s (its limit) runs in one worker, health checks and another solve are answered
    before it ends (an order of events, not a wall time: CI machines are loaded)."""
    client, _ = api
    answers: dict[str, httpx.Response] = {}
    # 62.7 million plans, about 25 s of enumeration: the 8 s limit ends it (`limit`) however fast the machine
    body = {"instance": slow_instance(12), "method": "enumerate", "max_plans": 10**9, "time_limit_s": 8}
    deadline = time.monotonic() + 60  # a worker killed by an earlier test is warming up again
    while (health := client.get("/healthz").json())["idle"] < health["workers"] and time.monotonic() < deadline:
        time.sleep(0.1)
    thread = threading.Thread(target=lambda: answers.update(long=client.post("/v1/solve", json=body)))
    thread.start()
    time.sleep(0.5)
    assert client.get("/healthz").json()["running"] == 1
    assert client.post("/v1/solve", json={"instance": TABLE1}).status_code == 200
    assert "long" not in answers and client.get("/healthz").json()["running"] == 1
    thread.join(60)
    assert answers["long"].status_code == 200 and answers["long"].json()["status"] == "limit"


def test_worker_overrunning_its_budget_is_killed_and_replaced() -> None:
    """The pool kills a worker past its task's budget (a solver that ignored its limit), then goes on."""
    from dnnprov.execution.pool import Work
    from dnnprov.service.pool import make_executor

    pool = make_executor(workers=1, max_time_limit_s=300.0, max_pending=1 << 30)
    try:
        body = {"instance": slow_instance(10), "method": "enumerate", "max_plans": 10**9, "time_limit_s": 30}
        warm_by = time.monotonic() + 120  # the worker's warm-up is not the budget's business
        while not pool.idle() and time.monotonic() < warm_by:
            time.sleep(0.1)
        started = time.monotonic()
        outcome = pool.submit(Work(("solve", body), budget_s=1.0)).result(60)
        assert outcome[0] == "killed" and "budget of 1 s" in outcome[1]
        assert time.monotonic() - started < 10
        status, answer, _ = pool.submit(Work(("solve", {"instance": TABLE1}), budget_s=60)).result(60)
        assert status == "ok" and answer["cost"] == pytest.approx(5.448374)
        invalid = pool.submit(Work(("solve", {"instance": TABLE1, "gap": 2}), budget_s=60)).result(60)
        assert invalid[:2] == ("invalid", "gap")
    finally:
        pool.close()


def test_full_server_answers_429(api) -> None:
    """With 4 tasks queued or running (--max-pending 4) the next request gets 429; nothing is stored for it."""
    client, _ = api
    slow = {"instance": slow_instance(10), "method": "enumerate", "max_plans": 10**9, "time_limit_s": 30}
    ids = [client.post("/v1/jobs", json=slow).json()["id"] for _ in range(4)]
    refused = client.post("/v1/jobs", json={"instance": TABLE1})
    assert refused.status_code == 429 and "full" in refused.json()["error"]["message"]
    assert client.post("/v1/solve", json={"instance": TABLE1}).status_code == 429
    for job_id in ids:
        assert client.post(f"/v1/jobs/{job_id}/cancel").json()["status"] == "cancelled"
    deadline = time.monotonic() + 30
    while client.get("/healthz").json()["queue_depth"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert client.post("/v1/solve", json={"instance": TABLE1}).status_code == 200


def test_replan_export_solve_many_and_sweep_mirror_the_cli(api) -> None:
    """The other endpoints answer as their CLI commands do."""
    client, _ = api
    plan = client.post("/v1/solve", json={"instance": TABLE1}).json()
    takeover = client.post(
        "/v1/replan",
        json={"instance": TABLE1, "plan": plan, "revoked": {"g3.8xlarge": 5}, "elapsed_s": 1788, "loss_reached": 0.92},
    )
    assert takeover.status_code == 200
    doc = takeover.json()
    assert doc["format"] == "dnnprov/plan" and doc["instance"]["constraints"]["existing"]
    sky = client.post("/v1/export", json={"plan": plan, "target": "skypilot"})  # no catalog region (issue 21)
    assert sky.status_code == 422 and sky.json()["error"]["field"] == "region"
    kueue = client.post("/v1/export", json={"plan": plan, "target": "kueue", "instance": TABLE1})
    assert kueue.status_code == 200 and "kueue.x-k8s.io/v1beta2" in kueue.json()["files"]["kueue.yaml"]
    refused = client.post("/v1/export", json={"plan": plan, "target": "kueue"})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "catalog"
    many = client.post(
        "/v1/solve-many", json={"instances": [TABLE1, TABLE1], "shared": {"quotas": {"g4dn.4xlarge": 3}}}
    )
    assert many.status_code == 200
    assert sum(j["plan"]["counts"].get("g4dn.4xlarge", 0) for j in many.json()["jobs"]) <= 3
    sweep = client.post("/v1/sweep", json={"instance": TABLE1, "deadlines": [2400, 2600, 3600]})
    assert sweep.status_code == 200
    rows = sweep.json()["rows"]
    assert [r["deadline_s"] for r in rows] == [2400, 2600, 3600]
    assert rows[1]["cost"] == pytest.approx(5.448374) and rows[0]["cost"] >= rows[1]["cost"] >= rows[2]["cost"]


def test_killed_server_loses_no_accepted_job(tmp_path: Path) -> None:
    """SIGKILL mid-job, restart on the same database: the running and the queued job both finish."""
    db = tmp_path / "jobs.sqlite"
    with server(tmp_path, "--workers", "1", db=db) as (url, proc, _):
        with httpx.Client(base_url=url, timeout=30) as client:
            running = client.post(
                "/v1/jobs", json={"instance": slow_instance(9), "method": "enumerate", "max_plans": 10**9}
            ).json()["id"]
            queued = client.post("/v1/jobs", json={"instance": TABLE1}).json()["id"]
            wait_for(client, running, ("running",))
            assert client.get(f"/v1/jobs/{queued}").json()["status"] == "queued"
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
    with server(tmp_path, "--workers", "1", db=db) as (url, _, log):
        with httpx.Client(base_url=url, timeout=30) as client:
            first = wait_for(client, running, ("done", "failed"), timeout=90)
            second = wait_for(client, queued, ("done", "failed"))
        assert '"requeued": 2' in log.read_text()
    # the enumeration runs under the job's wall-clock limit: a loaded machine may end it at `limit`
    assert (first["status"], first["attempts"]) == ("done", 2) and first["result"]["status"] in ("optimal", "limit")
    assert second["status"] == "done" and second["result"]["cost"] == pytest.approx(5.448374)


def test_predict_one_plan(api) -> None:
    """POST /v1/predict predicts the plan a solve returned: its time and cost as the solve says."""
    client, _ = api
    solved = client.post("/v1/solve", json={"instance": TABLE1}).json()
    answer = client.post("/v1/predict", json={"instance": TABLE1, "plan": solved["plan"]})
    assert answer.status_code == 200
    got = answer.json()
    assert got["feasible"] is True and got["cost"] == pytest.approx(solved["cost"])
    assert got["time_s"] == pytest.approx(solved["time_s"])
    bad = client.post("/v1/predict", json={"instance": TABLE1, "plan": {"counts": {"p9.huge": 1}}})
    assert bad.status_code == 422 and bad.json()["error"]["field"]


def test_bad_serve_options_give_one_error_line(tmp_path: Path) -> None:
    """An unusable job store, token file or port: exit 2 and one JSON line naming the option (all-JSON stderr)."""
    (tmp_path / "not.sqlite").write_text("not a database\n")
    (tmp_path / "short").write_text("abc\n")
    (tmp_path / "folder").mkdir()
    for options, option in (
        (["--db", str(tmp_path / "not.sqlite")], "--db"),
        (["--db", str(tmp_path / "j.sqlite"), "--token-file", str(tmp_path / "short")], "--token-file"),
        (["--db", str(tmp_path / "j.sqlite"), "--workers", "0"], "--workers"),
        (["--db", str(tmp_path / "folder")], "--db"),
        (["--db", str(tmp_path / "short" / "j.sqlite")], "--db"),
    ):
        run = subprocess.run(
            [DNNPROV, "serve", "--port", str(free_port()), *options], capture_output=True, text=True, timeout=60
        )
        assert startup_error(run)["field"] == option
    # a folder, or a file where a folder should be: refused before a lock file is made beside it
    assert not (tmp_path / "folder.lock").exists() and not (tmp_path / "short" / "j.sqlite.lock").exists()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        run = subprocess.run(
            [DNNPROV, "serve", "--port", str(taken.getsockname()[1]), "--db", str(tmp_path / "j.sqlite")],
            capture_output=True,
            text=True,
            timeout=60,
        )
    error = startup_error(run)
    assert error["field"] == "--port" and error["message"].startswith("cannot listen on 127.0.0.1:")
