"""Several `dnnprov serve` replicas on one PostgreSQL database: real servers, real kills.

The replicas are subprocesses on free loopback ports sharing a fresh database of a real
PostgreSQL server (started from the machine's binaries; skipped without them), with
leases of 5 s (renewed every second). Jobs come from several clients at once, to every
replica; a replica is killed with SIGKILL while it runs a job. What must hold: every job
ends ``done`` (0 lost), each is recorded finished once over all the replicas' logs (0 run
twice), only the killed attempt is repeated, and every answer is what the CLI prints.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Any

import pytest

httpx = pytest.importorskip("httpx", reason="httpx is in the test extra")
pytest.importorskip("fastapi", reason="the service extra (fastapi, uvicorn) is in the test extra")
pytest.importorskip("psycopg", reason="the postgres extra (psycopg) is in the test extra")

from pg_server import LocalPostgres, missing  # noqa: E402 - needs the importorskip above
from service_helpers import DNNPROV, TABLE1, TOKEN, log_events, server, slow_instance, startup_error, wait_for  # noqa: E402 - needs the importorskip above

#: Distinct fast jobs (answers compared with the CLI's) and the slow one killed mid-run.
FAST = [
    (TABLE1, "milp"),
    (TABLE1, "heuristic"),
    ("embedded:spot/paper-table5-resnet110-0.8-2400.json", "milp"),
    ("embedded:spot/paper-table5-inception-v3-1.0-6700.json", "milp"),
    ("embedded:serverless/paper-table3-resnet50.json", "milp"),
]


@pytest.fixture(scope="module")
def pg() -> Iterator[LocalPostgres]:
    """One PostgreSQL server for the module (skipped without the binaries)."""
    reason = missing()
    if reason is not None:
        pytest.skip(reason)
    server_ = LocalPostgres()
    yield server_
    server_.stop()


def replica(tmp_path: Path, *options: str, db: str) -> AbstractContextManager[tuple[str, subprocess.Popen, Path]]:
    """`dnnprov serve --db URL` (service_helpers.server, which passes ``db`` on as text)."""
    return server(tmp_path, *options, db=db)  # type: ignore[arg-type]


def cli_answer(instance: str | Path, method: str, *extra: str) -> dict:
    """What `dnnprov solve INSTANCE --method M --json` prints, without its timing."""
    out = json.loads(
        subprocess.run(
            [DNNPROV, "solve", str(instance), "--method", method, "--json", *extra],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    out.pop("solve_seconds", None)
    return out


def comparable(result: dict) -> dict:
    """A job's result without its timing."""
    return {k: v for k, v in result.items() if k != "solve_seconds"}


def runs_on(job_id: str, logs: list[Path]) -> int:
    """The index of the log whose replica started the job (its line may follow the commit by a moment)."""
    deadline = time.monotonic() + 20
    while True:
        found = [i for i, log in enumerate(logs) if job_id in {e["job_id"] for e in log_events(log, "job_started")}]
        if found or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(found) == 1, found
    return found[0]


def finished_per_job(logs: list[Path]) -> Counter:
    """How often each job was recorded as ended (``job_finished`` or ``job_failed``) over all logs."""
    return Counter(
        e["job_id"] for log in logs for event in ("job_finished", "job_failed") for e in log_events(log, event)
    )


def test_replicas_kill_9_mid_job_lose_nothing_and_run_nothing_twice(pg: LocalPostgres, tmp_path: Path) -> None:
    """3 replicas, 4 clients, a replica killed (SIGKILL) while it runs a job: the job is adopted and finishes."""
    db = pg.new_database() + "?lease_s=5"
    slow_file = tmp_path / "slow.json"
    slow_file.write_text(json.dumps(slow_instance(9)))
    slow_body = {"instance": slow_instance(9), "method": "enumerate", "max_plans": 100000000, "time_limit_s": 120}
    with ExitStack() as stack:
        replicas = [
            stack.enter_context(replica(tmp_path, "--workers", "1", "--max-time-limit", "120", db=db)) for _ in range(3)
        ]
        clients = [stack.enter_context(httpx.Client(base_url=url, timeout=60)) for url, _, _ in replicas]
        slow = clients[0].post("/v1/jobs", json=slow_body).json()["id"]
        wait_for(clients[0], slow, ("running",))
        ids: list[str] = []
        lock = threading.Lock()

        def send(client_index: int) -> None:
            """One client: each job to the next replica; on a dead one, the same job (same key) to another."""
            for n, (instance, method) in enumerate(FAST * 2):
                for attempt in range(3):
                    client = clients[(client_index + n + attempt) % 3]
                    try:
                        job = client.post(
                            "/v1/jobs",
                            json={"instance": instance, "method": method},
                            headers={"Idempotency-Key": f"client{client_index}-{n}"},
                        ).json()["id"]
                        break
                    except httpx.TransportError:
                        continue
                with lock:
                    ids.append(job)

        senders = [threading.Thread(target=send, args=(i,)) for i in range(4)]
        for sender in senders:
            sender.start()
        assert clients[0].get(f"/v1/jobs/{slow}").json()["status"] == "running"
        victim = runs_on(slow, [log for _, _, log in replicas])  # the replica that accepted it, unless one stole it
        os.kill(replicas[victim][1].pid, signal.SIGKILL)  # its worker dies with it (PR_SET_PDEATHSIG)
        for sender in senders:
            sender.join()
        killed_at = time.monotonic()
        jobs = {
            job_id: wait_for(clients[(victim + 1) % 3], job_id, ("done", "failed", "cancelled"), timeout=300)
            for job_id in [slow, *ids]
        }
        # a new replica on the same database takes work again
        with (
            replica(tmp_path, "--workers", "1", db=db) as (url, _, restarted_log),
            httpx.Client(base_url=url, timeout=60) as client,
        ):
            again = client.post("/v1/jobs", json={"instance": TABLE1}).json()["id"]
            assert client.get(f"/v1/jobs/{again}?wait=60").json()["status"] == "done"
        logs = [log for _, _, log in replicas] + [restarted_log]
    assert time.monotonic() - killed_at < 300
    assert len(jobs) == 1 + 4 * 2 * len(FAST)
    assert {job["status"] for job in jobs.values()} == {"done"}, "0 lost"
    ended = finished_per_job(logs)
    assert all(ended[job_id] == 1 for job_id in jobs), "each job recorded finished exactly once"
    assert jobs[slow]["attempts"] == 2  # the killed attempt, then the adopted one
    adopted = [e for log in logs if log != logs[victim] for e in log_events(log, "job_adopted") if e["job_id"] == slow]
    assert [e["was"] for e in adopted].count("running") == 1  # (an idle replica may steal it afterwards)
    started = Counter(e["job_id"] for log in logs for e in log_events(log, "job_started"))
    assert started[slow] == 2 and all(started[i] == 1 for i in ids if jobs[i]["attempts"] == 1)
    expected = {spec: cli_answer(*spec) for spec in FAST}
    by_id = {}
    for job_id in ids:  # the bodies' order is per sender; match each answer by its instance and method
        by_id[job_id] = comparable(jobs[job_id]["result"])
    assert all(any(answer == want for want in expected.values()) for answer in by_id.values())
    assert Counter(json.dumps(a, sort_keys=True) for a in by_id.values()) == Counter(
        {json.dumps(want, sort_keys=True): 8 for want in expected.values()}
    )
    cli_slow = cli_answer(slow_file, "enumerate", "--max-plans", "100000000", "--time-limit", "120")
    assert comparable(jobs[slow]["result"]) == cli_slow


def test_replicas_share_idempotency_tenants_and_cancels(pg: LocalPostgres, tmp_path: Path) -> None:
    """Keys and tenants hold across replicas; a cancel sent to one replica stops the job running on another."""
    db = pg.new_database() + "?lease_s=5"
    other_token = "other-tenant-token-0123456789"
    (tmp_path / "tokens").write_text(f"alpha {TOKEN}\nbeta {other_token}\n")
    options = ("--workers", "1", "--token-file", str(tmp_path / "tokens"))
    with (
        replica(tmp_path, *options, db=db) as (url_a, _, log_a),
        replica(tmp_path, *options, db=db) as (url_b, _, log_b),
    ):
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with (
            httpx.Client(base_url=url_a, headers=auth, timeout=60) as a,
            httpx.Client(base_url=url_b, headers=auth, timeout=60) as b,
            httpx.Client(base_url=url_b, headers={"Authorization": f"Bearer {other_token}"}, timeout=60) as beta,
        ):
            key = {"Idempotency-Key": "nightly-1"}
            first = a.post("/v1/jobs", json={"instance": TABLE1}, headers=key)
            replay = b.post("/v1/jobs", json={"instance": TABLE1}, headers=key)
            assert first.status_code == replay.status_code == 202
            assert replay.json()["id"] == first.json()["id"] and replay.headers["Idempotent-Replayed"] == "true"
            clash = b.post("/v1/jobs", json={"instance": TABLE1, "gap": 0.5}, headers=key)
            assert clash.status_code == 422 and clash.json()["error"]["field"] == "Idempotency-Key"
            assert beta.get(f"/v1/jobs/{first.json()['id']}").status_code == 404
            assert beta.post(f"/v1/jobs/{first.json()['id']}/cancel").status_code == 404
            assert beta.get("/v1/jobs").json()["jobs"] == []
            # a long job running on a, cancelled through b
            slow = a.post(
                "/v1/jobs",
                json={
                    "instance": slow_instance(10),
                    "method": "enumerate",
                    "max_plans": 100000000,
                    "time_limit_s": 120,
                },
            ).json()["id"]
            wait_for(a, slow, ("running",))
            running, other = (a, b) if runs_on(slow, [log_a, log_b]) == 0 else (b, a)
            cancelled = other.post(f"/v1/jobs/{slow}/cancel")
            assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
            deadline = time.monotonic() + 30
            while running.get("/healthz").json()["running"] and time.monotonic() < deadline:
                time.sleep(0.2)
            assert running.get("/healthz").json()["running"] == 0, "the cancelled job's worker was stopped"
            running_log = log_a if running is a else log_b
            assert slow in [e["job_id"] for e in log_events(running_log, "job_lost")]
            assert a.get(f"/v1/jobs/{slow}").json()["status"] == "cancelled"
            after = a.post("/v1/jobs", json={"instance": TABLE1}).json()["id"]
            assert a.get(f"/v1/jobs/{after}?wait=60").json()["status"] == "done"
            assert b.get(f"/v1/jobs/{slow}").json()["status"] == "cancelled"  # nothing wrote over the cancel


def test_unreachable_database_is_one_startup_error(tmp_path: Path) -> None:
    """`--db postgresql://...` that cannot be reached: exit 2, one JSON line naming --db."""
    run = subprocess.run(
        [DNNPROV, "serve", "--port", "0", "--db", "postgresql://postgres@127.0.0.1:1/nope"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    line = startup_error(run)
    assert line["field"] == "--db" and "127.0.0.1" in line["message"]


def test_a_job_its_replica_lost_track_of_is_queued_again(pg: LocalPostgres, tmp_path: Path) -> None:
    """Jobs the database says a replica owns but its runner lacks (a start or a re-queue committed just as
    the connection broke): after a few seconds the replica queues them again and runs them."""
    import psycopg

    db = pg.new_database()
    with (
        replica(tmp_path, "--workers", "1", db=db + "?lease_s=2") as (url, _, log),
        httpx.Client(base_url=url, timeout=60) as client,
        psycopg.connect(db, autocommit=True) as conn,
    ):
        names = conn.execute(
            "SELECT DISTINCT application_name FROM pg_stat_activity WHERE application_name LIKE 'dnnprov %'"
        ).fetchall()
        assert len(names) == 1, names
        owner = names[0][0].removeprefix("dnnprov ")
        body = json.dumps({"instance": TABLE1})
        for job_id, status, attempts in (("a" * 32, "queued", 0), ("b" * 32, "running", 1)):
            conn.execute(
                "INSERT INTO dnnprov_jobs (id, kind, body, status, attempts, created, started, owner, "
                "lease_until) VALUES (%s, 'solve', %s, %s, %s, extract(epoch from now()), "
                "extract(epoch from now()), %s, extract(epoch from now()) + 2)",
                (job_id, body, status, attempts, owner),
            )
        queued = wait_for(client, "a" * 32, ("done", "failed"), timeout=120)
        running = wait_for(client, "b" * 32, ("done", "failed"), timeout=120)
    assert (queued["status"], queued["attempts"]) == ("done", 1)
    assert (running["status"], running["attempts"]) == ("done", 2)
    again = {e["job_id"]: e for e in log_events(log, "job_adopted")}
    assert again["a" * 32]["previous_owner"] == again["b" * 32]["previous_owner"] == owner
    assert (again["a" * 32]["was"], again["b" * 32]["was"]) == ("queued", "running")


def test_database_restart_delays_but_loses_nothing(tmp_path: Path) -> None:
    """PostgreSQL restarted (every connection cut, 5 s down: longer than the 3 s leases) while 2 replicas run
    jobs: new jobs get 202 or 503 with Retry-After (never 500); afterwards every job is done, each ended
    once, none ran again (the live owners renew before anyone trusts an expired lease), answers the CLI's."""
    reason = missing()
    if reason is not None:
        pytest.skip(reason)
    pg = LocalPostgres()
    try:
        db = pg.new_database() + "?lease_s=3"
        with (
            replica(tmp_path, "--workers", "1", db=db) as (url_a, _, log_a),
            replica(tmp_path, "--workers", "1", db=db) as (url_b, _, log_b),
            httpx.Client(base_url=url_a, timeout=60) as a,
            httpx.Client(base_url=url_b, timeout=60) as b,
        ):
            ids = [
                (a if n % 2 else b).post("/v1/jobs", json={"instance": instance, "method": method}).json()["id"]
                for n, (instance, method) in enumerate(FAST * 2)
            ]
            slow = a.post(
                "/v1/jobs",
                json={"instance": slow_instance(9), "method": "enumerate", "max_plans": 100000000, "time_limit_s": 120},
            ).json()["id"]
            wait_for(a, slow, ("running",), timeout=120)  # runs across the outage
            ids.append(slow)
            answers: list[Any] = []  # httpx.Response
            reasons: set[str] = set()  # /readyz reasons of replica b during the outage
            restart = threading.Thread(target=pg.restart, kwargs={"down_s": 5.0})
            restart.start()
            while restart.is_alive():
                answers.append(a.post("/v1/jobs", json={"instance": TABLE1}))
                reasons.update(httpx.get(f"{url_b}/readyz", timeout=10).json()["reasons"])
                time.sleep(0.3)
            restart.join()
            ids += [answer.json()["id"] for answer in answers if answer.status_code == 202]
            jobs = {job_id: wait_for(a, job_id, ("done", "failed", "cancelled"), timeout=300) for job_id in ids}
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not all(
                httpx.get(f"{u}/readyz", timeout=10).status_code == 200 for u in (url_a, url_b)
            ):
                time.sleep(0.5)
            ready = [httpx.get(f"{u}/readyz", timeout=10).status_code for u in (url_a, url_b)]
    finally:
        pg.stop()
    assert {answer.status_code for answer in answers} <= {202, 503}
    assert "store unavailable" in reasons, reasons  # the name docs/service.md gives
    assert all(answer.headers.get("Retry-After") for answer in answers if answer.status_code == 503)
    assert {job["status"] for job in jobs.values()} == {"done"}
    assert {job["attempts"] for job in jobs.values()} == {1}
    ended = finished_per_job([log_a, log_b])
    assert all(ended[job_id] == 1 for job_id in jobs)
    for event in ("internal_error", "thread_error", "slot_error", "job_end_not_recorded"):
        assert not log_events(log_a, event) and not log_events(log_b, event), event
    expected = {json.dumps(cli_answer(*spec), sort_keys=True) for spec in FAST}
    expected.add(json.dumps(comparable(jobs[slow]["result"]), sort_keys=True))
    slow_file = tmp_path / "slow.json"
    slow_file.write_text(json.dumps(slow_instance(9)))
    assert comparable(jobs[slow]["result"]) == cli_answer(
        slow_file, "enumerate", "--max-plans", "100000000", "--time-limit", "120"
    )
    assert {json.dumps(comparable(job["result"]), sort_keys=True) for job in jobs.values()} <= expected
    assert ready == [200, 200]


def test_run_jobs_are_refused_on_postgresql(pg: LocalPostgres, tmp_path: Path) -> None:
    """A run's record lives beside a SQLite store: a replica on PostgreSQL refuses `run` jobs
    by the field `kind` (and still takes the other kinds)."""
    db = pg.new_database() + "?lease_s=5"
    (tmp_path / "tokens").write_text(f"alpha {TOKEN}\n")
    with replica(tmp_path, "--workers", "1", "--token-file", str(tmp_path / "tokens"), db=db) as (url, _, _log):
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as client:
            body = {
                "kind": "run",
                "instance": TABLE1,
                "plan": {"counts": {"p3.2xlarge": 1}, "ps": 1},
                "endpoint_url": "http://127.0.0.1:1",
            }
            refused = client.post("/v1/jobs", json=body)
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"]["field"] == "kind" and "PostgreSQL" in refused.json()["error"]["message"]
            assert client.post("/v1/jobs", json={"instance": TABLE1}).status_code == 202
