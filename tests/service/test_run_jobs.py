"""`run` jobs of `dnnprov serve` (issue 28): a spot plan launched and kept training by the control
loop inside the server, against the EC2 twin over moto on loopback, through real HTTP: the job
tells the trace-cloud replay's story, its status shows the run while it trains, a cancel tears the
run down, and bad bodies are one 422 each."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from control.test_resume import (
    POOLS,
    PROBLEM,
    REGION,
    TRACES,
    launched_once,
    reset_moto,
    story,
    twin_bill,
)

from dnnprov.control.loop import RunSettings
from dnnprov.control.replay import run_once
from dnnprov.control.twin.replay import story as replay_story
from dnnprov.control.twin.server import Twin
from dnnprov.errors import InvalidInputError
from dnnprov.result import SpotPlan
from dnnprov.revocation.availability import fit_availability
from dnnprov.revocation.policies import make_policy
from dnnprov.revocation.replay.pool_replay import takeover_table
from dnnprov.service.kinds.run_jobs import run_inputs, runs_folder

httpx = pytest.importorskip("httpx", reason="httpx is in the test extra")
pytest.importorskip("fastapi", reason="the service extra (fastapi, uvicorn) is in the test extra")

from service_helpers import server, wait_for  # noqa: E402 - after the extra's check

pytest_plugins = ["conftest_aws"]
PLAN = {"counts": {"p3.2xlarge": 2}, "ps": 1}
FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "twin",
    "AWS_EC2_METADATA_DISABLED": "true",
    "NO_PROXY": "127.0.0.1,localhost",
}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Path]]:
    """One `dnnprov serve` for the module (fake AWS credentials in its environment): a client
    and its job store."""
    folder = tmp_path_factory.mktemp("run-jobs")
    with pytest.MonkeyPatch.context() as env:
        for name, value in FAKE_AWS.items():
            env.setenv(name, value)
        with server(folder) as (url, _, _), httpx.Client(base_url=url, timeout=60) as client:
            yield client, folder / "jobs.sqlite"


def body(twin: Twin, policy: str = "failover", **more: Any) -> dict[str, Any]:
    return {
        "kind": "run",
        "instance": PROBLEM.to_dict(),
        "plan": PLAN,
        "policy": policy,
        "endpoint_url": twin.url,
        "region": REGION,
        **more,
    }


def live_instances(twin: Twin, run_id: str) -> list[str]:
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=twin.url)
    found = ec2.describe_instances(Filters=[{"Name": "tag:dnnprov:run", "Values": [run_id]}])["Reservations"]
    return [
        i["InstanceId"]
        for r in found
        for i in r["Instances"]
        if i["State"]["Name"] not in ("terminated", "shutting-down")
    ]


def test_a_run_job_tells_the_replays_story(service: tuple[httpx.Client, Path], moto_url: str) -> None:
    client, db = service
    with Twin(POOLS, upstream=moto_url, mode="stepped", region=REGION) as twin:
        accepted = client.post("/v1/jobs", json=body(twin, "uniform-progress"))
        assert accepted.status_code == 202, accepted.text
        job = wait_for(client, accepted.json()["id"], ("done", "failed"), timeout=300)
        bill = twin_bill(twin, job["id"])
        assert live_instances(twin, job["id"]) == []
    reset_moto(moto_url)
    replay = run_once(
        PROBLEM, SpotPlan(counts=PLAN["counts"], ps=1), TRACES, make_policy("uniform-progress"), 0, RunSettings()
    )
    assert job["status"] == "done", job["error"]
    assert replay.outcome.revocations > 0
    assert {k: v for k, v in job["result"].items() if k != "run"} == pytest.approx(replay.outcome.to_dict())
    assert story(runs_folder(db), job["id"]) == replay_story(replay)
    run = job["run"]
    assert run["state"] == replay.outcome.state and run["held"] == {}
    assert run["cost_so_far"] == pytest.approx(bill, rel=1e-9) == job["result"]["cost"]
    assert [e["kind"] for e in run["events"]].count("notice") == replay.outcome.revocations


def test_an_mpc_run_job_takes_its_availability_model(service: tuple[httpx.Client, Path], moto_url: str) -> None:
    """`"policy": "mpc"` with `"model"` (risk fit --zones --out's object): the job runs mpc's
    table planned on it and tells the story of the replay with the same table."""
    client, db = service
    model = fit_availability(TRACES["p3.2xlarge"], cap=2)
    with Twin(POOLS, upstream=moto_url, mode="stepped", region=REGION) as twin:
        accepted = client.post("/v1/jobs", json=body(twin, "mpc", model=model.to_dict()))
        assert accepted.status_code == 202, accepted.text
        job = wait_for(client, accepted.json()["id"], ("done", "failed"), timeout=300)
        assert live_instances(twin, job["id"]) == []
    reset_moto(moto_url)
    plan = SpotPlan(counts=PLAN["counts"], ps=1)
    replay = run_once(PROBLEM, plan, TRACES, make_policy("mpc", takeover_table(PROBLEM, plan, model)), 0, RunSettings())
    assert job["status"] == "done", job["error"]
    assert {k: v for k, v in job["result"].items() if k != "run"} == pytest.approx(replay.outcome.to_dict())
    assert story(runs_folder(db), job["id"]) == replay_story(replay)


def test_status_while_it_trains_and_cancel_tears_it_down(service: tuple[httpx.Client, Path], moto_url: str) -> None:
    client, _ = service
    with Twin(POOLS, upstream=moto_url, mode="accelerated", speed=10, region=REGION) as twin:
        job_id = client.post("/v1/jobs", json=body(twin)).json()["id"]
        job = wait_for(client, job_id, ("running",))
        for _ in range(600):  # until the workers are held and training
            job = client.get(f"/v1/jobs/{job_id}").json()
            run = job.get("run") or {}
            if run.get("progress") and sum(run["held"].values()) >= 3 and run["cost_so_far"]:
                break
            time.sleep(0.1)
        assert job["status"] == "running" and run["state"] == "running", job
        assert 0 < run["progress"]["time_s"] < PROBLEM.slo.time_s and run["progress"]["finish_s"] is None
        assert run["counters"]["launches"] >= 3 and len(live_instances(twin, job_id)) >= 3
        cancelled = client.post(f"/v1/jobs/{job_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        answer = cancelled.json()
        assert answer["status"] == "cancelled" and answer["run"]["state"] == "cancelled"
        assert answer["run"]["held"] == {} and live_instances(twin, job_id) == []
        assert answer["run"]["outcome"]["cost"] >= run["cost_so_far"] > 0  # (accelerated: billed to its own clock)
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 409
    reset_moto(moto_url)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"endpoint_url": None}, "endpoint_url"),
        ({"policy": "mpc"}, "policy"),
        ({"policy": "mpc", "model": "model.json"}, "model"),  # the server reads no file
        ({"policy": "mpc", "model": {"format": "other"}}, "model.format"),
        ({"policy": "failover", "model": {}}, "model"),
        ({"plan": "plan.json"}, "plan"),
        ({"plan": {"counts": {"p3.2xlarge": 9}, "ps": 1}}, "plan.counts.p3.2xlarge"),
        ({"progress": "/etc/hostname"}, "progress"),
        ({"instance": "embedded:serverless/paper-table3-resnet50.json"}, "instance"),
        ({"poll_s": 0}, "poll_s"),
        ({"state": "/tmp"}, "state"),
    ],
)
def test_bad_run_bodies_are_one_error_each(
    service: tuple[httpx.Client, Path], change: dict[str, Any], field: str
) -> None:
    client, _ = service
    sent = {
        "kind": "run",
        "instance": PROBLEM.to_dict(),
        "plan": PLAN,
        "endpoint_url": "http://127.0.0.1:9",
        "region": REGION,
        **change,
    }
    answer = client.post("/v1/jobs", json={k: v for k, v in sent.items() if v is not None})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field
    assert client.post("/v1/run", json=sent).status_code == 404  # jobs only: a run lasts its training


def test_a_restarted_server_resumes_its_runs(moto_url: str, tmp_path: Path) -> None:
    """A stopping server leaves its run running; the next server on the store resumes it from
    the record (`resumed` in its events), launching nothing twice, and can tear it down."""
    db = tmp_path / "jobs.sqlite"
    with (
        pytest.MonkeyPatch.context() as env,
        Twin(POOLS, upstream=moto_url, mode="accelerated", speed=4, region=REGION) as twin,
    ):
        for name, value in FAKE_AWS.items():
            env.setenv(name, value)
        with server(tmp_path, db=db) as (url, _, _), httpx.Client(base_url=url, timeout=60) as client:
            job_id = client.post("/v1/jobs", json=body(twin)).json()["id"]
            for _ in range(600):
                run = client.get(f"/v1/jobs/{job_id}").json().get("run") or {}
                if sum(run.get("held", {}).values()) >= 3:
                    break
                time.sleep(0.1)
            assert run["state"] == "running", run
        before = len(live_instances(twin, job_id))
        assert before >= 3  # the stopped server left them training
        with server(tmp_path, db=db) as (url, _, _), httpx.Client(base_url=url, timeout=60) as client:
            for _ in range(600):
                job = client.get(f"/v1/jobs/{job_id}").json()
                if any(e["kind"] == "resumed" for e in (job.get("run") or {}).get("events", [])):
                    break
                time.sleep(0.1)
            assert job["status"] == "running" and job["attempts"] == 2, job
            answer = client.post(f"/v1/jobs/{job_id}/cancel").json()
            assert answer["status"] == "cancelled" and answer["run"]["state"] == "cancelled", answer
        assert live_instances(twin, job_id) == []
        launched_once(twin, runs_folder(db), job_id)
    reset_moto(moto_url)


def test_a_run_jobs_region_is_the_plans_unless_given() -> None:
    """Without ``region`` the run's region is left to ``create_run`` (the region holding most
    of a multi-region plan's GPUs, else us-east-1), as `dnnprov run` without --region; a given
    one is checked and kept, a bad one is refused naming the field."""
    base = {"instance": PROBLEM.to_dict(), "plan": PLAN, "endpoint_url": "http://127.0.0.1:9"}
    assert run_inputs(base)["region"] is None
    assert run_inputs({**base, "region": "eu-west-1"})["region"] == "eu-west-1"
    with pytest.raises(InvalidInputError) as refused:
        run_inputs({**base, "region": "mars-1"})
    assert refused.value.field == "region"
