"""The service's replay kinds (issue 18): `simulate` and `choose-plan`, synchronous and as jobs,
against the CLI's `dnnprov simulate --json` and `dnnprov risk plan --json`; and `/v1/replan`
keeping the plan's PS count as `dnnprov replan` does."""

from __future__ import annotations

import glob
import json
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import resnet110_problem

import dnnprov
from dnnprov.io.catalogs.importing import default_shared_data

httpx = pytest.importorskip("httpx", reason="httpx is in the test extra")
pytest.importorskip("fastapi", reason="the service extra (fastapi, uvicorn) is in the test extra")

from service_helpers import DNNPROV, TABLE1, server, wait_for  # noqa: E402

SHARED = default_shared_data()
V100_ZONES = (
    sorted(glob.glob(str(SHARED / "spot-traces/availability/16-node/aws-08-27-2023/*_v100_1.json")))
    if SHARED is not None
    else []
)


def one_type_problem(quota: int, slack: float = 1.5) -> dnnprov.SpotProblem:
    """ResNet-110 (paper model) on p3.2xlarge only (on-demand $3.06/h, PS $0.192/h), T_obj =
    ``slack`` x the nominal time of 4 workers (as tests/revocation/test_pool_replay.py)."""
    problem = resnet110_problem(
        [quota, 0, 0, 0, 0], model="paper", loss=0.8, time_s=1.0, gamma_4=1.0, ps_price_per_h=0.192
    )
    types = tuple(replace(t, on_demand_price_per_h=3.06) for t in problem.instance_types if t.name == "p3.2xlarge")
    problem = problem.replace(instance_types=types, constraints=dnnprov.SpotConstraints(ps_count=(1, 1)))
    nominal = float(dnnprov.SpotModel(problem).evaluate([[4]], 1).time_s[0])
    return problem.replace(slo=replace(problem.slo, time_s=slack * nominal))


def files_of(tmp: Path, problem: dnnprov.SpotProblem) -> tuple[Path, Path]:
    """The instance file and the plan `dnnprov solve --method enumerate --json` prints for it."""
    instance = tmp / f"{problem.name}-{problem.instance_types[0].quota}.json"
    dnnprov.write_instance(problem, instance)
    plan = tmp / f"{instance.stem}-plan.json"
    plan.write_text(
        subprocess.run(
            [DNNPROV, "solve", str(instance), "--method", "enumerate", "--json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    return instance, plan


def inline(paths: list[str], kind: str = "p3.2xlarge") -> list[dict]:
    """The body's `traces` for `--trace KIND=PATH` of each path: named by the file name."""
    return [{"type": kind, "name": Path(p).name, "trace": json.loads(Path(p).read_text())} for p in paths]


def cli_json(*args: str, paths: list[str]) -> dict:
    """A CLI command's JSON, its trace paths written as the file names the service was given."""
    text = subprocess.run([DNNPROV, *args], capture_output=True, text=True, check=True).stdout
    for p in paths:
        text = text.replace(json.dumps(p)[1:-1], Path(p).name)
    return json.loads(text)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Path]]:
    """One server (2 workers, room for 4 tasks) and a folder with a small instance, its plan and two traces."""
    tmp = tmp_path_factory.mktemp("replay")
    problem = one_type_problem(quota=4)
    _instance, _plan = files_of(tmp, problem)
    for zone, data in (("us-east-1a", [2, 2, 0, 1] * 30), ("us-east-1b", [0, 1, 2, 2] * 30)):
        (tmp / f"{zone}_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 300}, "data": data}))
    with server(tmp, "--workers", "2", "--max-pending", "4", "--max-time-limit", "120") as (url, _, _log):
        with httpx.Client(base_url=url, timeout=120) as client:
            yield client, tmp


def small_body(tmp: Path, **extra: object) -> dict:
    """A simulate body on the fixture's instance, plan and two synthetic zones."""
    instance = json.loads(next(tmp.glob("resnet110-paper-4.json")).read_text())
    plan = json.loads(next(tmp.glob("resnet110-paper-4-plan.json")).read_text())
    traces = inline(sorted(str(p) for p in tmp.glob("us-east-1*_v100_1.json")))
    return {"instance": instance, "plan": plan, "traces": traces, "zones": True, **extra}


@pytest.mark.skipif(len(V100_ZONES) != 3, reason="../shared/data/spot-traces (the three 16-node V100 zones) is absent")
@pytest.mark.parametrize("policy", ["uniform-progress", "mpc"])
def test_simulate_answers_what_the_cli_prints_on_real_traces(api, policy: str) -> None:
    """The three real 16-node V100 zones, aligned: the service's simulate (sync and as a job) gives
    the object `dnnprov simulate ... --zones --policy P --runs 10 --seed 3 --hindsight --json` prints."""
    client, tmp = api
    instance, plan = files_of(tmp, one_type_problem(quota=16))
    options = ["--zones", "--policy", policy, "--runs", "10", "--seed", "3", "--hindsight", "--json"]
    body = {
        "instance": json.loads(instance.read_text()),
        "plan": json.loads(plan.read_text()),
        "traces": inline(V100_ZONES),
        "zones": True,
        "policy": policy,
        "runs": 10,
        "seed": 3,
        "hindsight": True,
        "time_limit_s": 120,
    }
    if policy == "mpc":  # fit on the first half, replay on the held-out second half
        options += ["--fit-period", "0:0.5", "--period", "0.5:1"]
        body |= {"fit_period": "0:0.5", "period": "0.5:1"}
    cli = cli_json(
        "simulate",
        str(instance),
        "--plan",
        str(plan),
        *[a for p in V100_ZONES for a in ("--trace", f"p3.2xlarge={p}")],
        *options,
        paths=V100_ZONES,
    )
    sync = client.post("/v1/simulate", json=body)
    job = client.post("/v1/jobs", json={"kind": "simulate", **body})
    assert sync.status_code == 200, sync.text
    assert job.status_code == 202, job.text
    done = wait_for(client, job.json()["id"], ("done", "failed", "cancelled"), timeout=120)
    assert done["status"] == "done" and done["kind"] == "simulate", done
    assert sync.json() == cli and done["result"] == cli
    assert cli["runs"] == 10 and cli["settings"]["hindsight_scope"] == "plan" and cli["hindsight_unreachable_runs"] == 0
    assert cli["hindsight_cost_mean"] > 0


@pytest.mark.skipif(len(V100_ZONES) != 3, reason="../shared/data/spot-traces (the three 16-node V100 zones) is absent")
def test_choose_plan_answers_what_risk_plan_prints(api) -> None:
    """`choose-plan` as a job gives the object `dnnprov risk plan ... --zones --fit-period 0:0.5 --json` prints,
    a plan whose mean cost is the least of the candidates that meet the deadlines."""
    client, tmp = api
    problem = one_type_problem(quota=3)  # 3 candidates, each priced by 40 runs of the loop
    instance = tmp / "choose.json"
    dnnprov.write_instance(problem, instance)
    cli = cli_json(
        "risk",
        "plan",
        str(instance),
        *[a for p in V100_ZONES for a in ("--trace", f"p3.2xlarge={p}")],
        "--zones",
        "--fit-period",
        "0:0.5",
        "--time-limit",
        "120",
        "--json",
        paths=V100_ZONES,
    )
    job = client.post(
        "/v1/jobs",
        json={
            "kind": "choose-plan",
            "instance": json.loads(instance.read_text()),
            "traces": inline(V100_ZONES),
            "zones": True,
            "fit_period": "0:0.5",
            "time_limit_s": 120,
        },
    )
    assert job.status_code == 202, job.text
    done = wait_for(client, job.json()["id"], ("done", "failed", "cancelled"), timeout=240)
    assert done["status"] == "done", done
    got = done["result"]
    for out in (got, cli):
        out.pop("solve_seconds")
    assert got == cli and got["status"] == "feasible"
    met = [c["expected_cost"] for c in got["details"]["candidates"] if c["expected_cost"] is not None]
    assert len(got["details"]["candidates"]) == 3 and got["cost"] == min(met)


def test_simulate_stops_at_its_time_limit_and_a_running_job_cancels(api) -> None:
    """time_limit_s (wall-clock seconds, as --time-limit) ends a long replay with the runs done; a
    running simulate job is cancelled (its worker stopped) and the next replay still answers."""
    client, tmp = api
    short = client.post("/v1/simulate", json=small_body(tmp, policy="failover", runs=10**6, time_limit_s=0.3))
    assert short.status_code == 200, short.text
    assert short.json()["settings"]["stopped_by_time_limit"] is True and 1 <= short.json()["runs"] < 10**6
    job = client.post(
        "/v1/jobs", json={"kind": "simulate", **small_body(tmp, policy="failover", runs=10**7, time_limit_s=100)}
    ).json()["id"]
    wait_for(client, job, ("running",))
    assert client.post(f"/v1/jobs/{job}/cancel").json()["status"] == "cancelled"
    after = client.post("/v1/simulate", json=small_body(tmp, policy="none", runs=5))
    assert after.status_code == 200 and after.json()["runs"] == 5
    assert wait_for(client, job, ("cancelled",))["result"] is None


BAD_SIMULATE = [
    ({"traces": None}, "traces"),
    ({"traces": "/etc/passwd"}, "traces"),
    ({"traces": [{"type": "p3.2xlarge", "trace": "us-east-1a_v100_1.json"}]}, "traces.0.trace.metadata"),
    (
        {"traces": [{"type": "p3.2xlarge", "trace": {"metadata": {"gap_seconds": 300}, "data": [1, 2], "x": 0}}]},
        "traces.0.trace.x",
    ),
    (
        {"traces": [{"type": "p3.2xlarge", "trace": {"metadata": {"gap_seconds": 300}, "data": [1]}}]},
        "traces.0.trace.data",
    ),
    (
        {"traces": [{"type": "p3.2xlarge", "trace": {"metadata": {"gap_seconds": 1e-9}, "data": [1, 2]}}]},
        "traces.0.trace.metadata.gap_seconds",
    ),
    ({"traces": [{"type": "g3.8xlarge", "trace": {"metadata": {"gap_seconds": 300}, "data": [1, 2]}}]}, "traces"),
    (
        {
            "traces": [
                {"type": "p3.2xlarge", "name": "x" * 201, "trace": {"metadata": {"gap_seconds": 300}, "data": [1, 2]}}
            ]
        },
        "traces.0.name",
    ),
    ({"period": "0.7:0.2"}, "period"),
    ({"period": [0, 1]}, "period"),
    ({"policy": "bogus"}, "policy"),
    ({"policy": "mpc", "replan_method": "heuristic"}, "replan_method"),
    ({"model": {"format": "dnnprov/availability"}}, "model.cap"),
    ({"policy": "none", "fit_period": "0:0.5"}, "fit_period"),
    ({"runs": 0}, "runs"),
    ({"time_limit_s": 1000}, "time_limit_s"),
    ({"zones": "yes"}, "zones"),
    ({"path": "/tmp/x"}, "path"),
]


@pytest.mark.parametrize("change, field", BAD_SIMULATE, ids=[f for _, f in BAD_SIMULATE])
def test_bad_simulate_bodies_name_their_field(api, change: dict, field: str) -> None:
    """A bad body is one 422 naming the field in the body, synchronous or as a job, never a path read."""
    client, tmp = api
    body = {k: v for k, v in {**small_body(tmp), **change}.items() if v is not None}
    for path, extra in (("/v1/simulate", {}), ("/v1/jobs", {"kind": "simulate"})):
        answer = client.post(path, json={**extra, **body})
        assert answer.status_code == 422, (path, answer.text)
        assert answer.json()["error"]["field"] == field, answer.json()


def test_plans_and_instances_the_replay_refuses(api) -> None:
    """A plan over the instance's quota, and an instance of the reference model (no replays): one 422 each."""
    client, tmp = api
    body = small_body(tmp)
    over = json.loads(json.dumps(body["plan"]))
    over["plan"]["counts"] = {"p3.2xlarge": 50}
    answer = client.post("/v1/simulate", json={**body, "plan": over})
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "plan.result.plan.counts.p3.2xlarge"
    reference = {
        **body["instance"],
        "model": "reference",
        "workload": {**body["instance"]["workload"], "loss_variant": "no-cc"},
    }
    for kind, extra in (("simulate", {"plan": body["plan"]}), ("choose-plan", {})):
        answer = client.post(
            f"/v1/{kind}", json={"instance": reference, "traces": body["traces"], "zones": True, **extra}
        )
        assert answer.status_code == 422 and answer.json()["error"]["field"] == "instance.model", answer.text
    bad = client.post(
        "/v1/choose-plan", json={"instance": body["instance"], "traces": body["traces"], "fit_period": "x"}
    )
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "fit_period"


def test_replan_keeps_the_running_ps_count_like_the_cli(api) -> None:
    """A plan running 2 PS: /v1/replan's takeover keeps both (its PS range starts at 2) and equals
    `dnnprov replan --json`; a plan whose PS count is outside the instance's range is refused."""
    client, tmp = api
    data = json.loads(dnnprov.embedded_instance("spot/paper-table1.json").read_text())
    data["constraints"]["ps_count"] = [1, 3]
    instance = tmp / "table1-ps.json"
    instance.write_text(json.dumps(data))
    plan = client.post("/v1/solve", json={"instance": data}).json()
    plan["plan"]["ps"] = 2
    (tmp / "plan-ps2.json").write_text(json.dumps(plan))
    cli = json.loads(
        subprocess.run(
            [
                DNNPROV,
                "replan",
                str(instance),
                "--plan",
                str(tmp / "plan-ps2.json"),
                "--revoked",
                "g3.8xlarge=5",
                "--elapsed",
                "1788",
                "--loss-reached",
                "0.92",
                "--json",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    answer = client.post(
        "/v1/replan",
        json={"instance": data, "plan": plan, "revoked": {"g3.8xlarge": 5}, "elapsed_s": 1788, "loss_reached": 0.92},
    )
    assert answer.status_code == 200, answer.text
    got = answer.json()
    assert got["instance"]["constraints"]["ps_count"] == [2, 3]
    assert got["result"]["plan"]["ps"] >= 2 and "new_ps" in got["result"]["details"]
    for out in (got, cli):
        out["result"].pop("solve_seconds")
    assert got == cli
    plan["plan"]["ps"] = 4
    refused = client.post(
        "/v1/replan",
        json={"instance": data, "plan": plan, "revoked": {"g3.8xlarge": 5}, "elapsed_s": 1788, "loss_reached": 0.92},
    )
    assert refused.status_code == 422, refused.text
    plan["plan"]["ps"] = 1
    one = client.post(
        "/v1/replan",
        json={"instance": TABLE1, "plan": plan, "revoked": {"g3.8xlarge": 5}, "elapsed_s": 1788, "loss_reached": 0.92},
    )
    assert one.status_code == 200 and one.json()["instance"]["constraints"]["ps_count"] == [1, 1]
