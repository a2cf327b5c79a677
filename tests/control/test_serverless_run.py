"""λDNN plans run: the PS on moto's EC2, the functions on the Lambda twin, both on loopback."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

import dnnprov
from dnnprov.cli import main
from dnnprov.control.record import RunRecord, open_record
from dnnprov.control.serverless import prediction, run_serverless
from dnnprov.control.twin.lambda_endpoint import LambdaTwin
from dnnprov.io.instances import write_instance
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.result import ServerlessPlan

pytest_plugins = ["conftest_aws"]
REGION = "us-east-1"
PLAN = ServerlessPlan(functions=8, memory_mb=2432, local_batch=128.0, ps=1)


def problem() -> ServerlessProblem:
    """Table 3's ResNet-50 with a 300 s function timeout: the plan needs two restarts."""
    base = dnnprov.read_instance(dnnprov.embedded_instance("serverless/paper-table3-resnet50.json"))
    assert isinstance(base, ServerlessProblem)
    return base.replace(platform=dataclasses.replace(base.platform, timeout_s=300.0), time_s=1500.0)


@pytest.fixture
def twin(aws_env: None) -> Iterator[LambdaTwin]:
    with LambdaTwin(problem(), speed=2000, region=REGION) as twin:
        boto3.client("lambda", region_name=REGION, endpoint_url=twin.url).create_function(
            FunctionName="dnnprov-worker",
            Runtime="python3.11",
            Role="arn:aws:iam::123456789012:role/w",
            Handler="worker.handler",
            Code={"ZipFile": b"stand-in"},
        )
        yield twin


def left_over(moto_server: str, run_id: str) -> list[str]:
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto_server)
    return [
        i["InstanceId"]
        for r in ec2.describe_instances(Filters=[{"Name": "tag:dnnprov:run", "Values": [run_id]}])["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] not in ("terminated", "shutting-down")
    ]


def test_restarts_time_and_cost_as_the_model_predicts(moto_server: str, twin: LambdaTwin, tmp_path: Path) -> None:
    time_s, launches, cost = prediction(problem(), PLAN)
    assert launches == 3  # 609 s of training, 270 s per function launch
    run_id, outcome = run_serverless(
        problem(),
        PLAN,
        lambda_endpoint_url=twin.url,
        endpoint_url=moto_server,
        region=REGION,
        state=str(tmp_path / "runs"),
        run_id="sl-1",
    )
    assert outcome.state == "met" and outcome.errors == []
    assert outcome.segments == launches and outcome.restarts == launches - 1
    assert outcome.finish_s == pytest.approx(time_s, rel=1e-9) and outcome.cost == pytest.approx(cost, rel=1e-9)
    assert outcome.invocations == PLAN.functions * launches
    state = twin.state()
    assert len(state["executions"]) == PLAN.functions * launches and set(state["executions"].values()) == {1}
    assert state["functions"]["dnnprov-worker"]["MemorySize"] == 2432
    assert state["functions"]["dnnprov-worker"]["Timeout"] == 300
    with open_record(tmp_path / "runs") as record:
        kinds = [e["kind"] for e in record.events(run_id)]
        assert kinds == ["launch", "segment", "restart", "restart", "end"]
        assert record.get(run_id)["state"] == "met"


def test_teardown_leaves_nothing(moto_server: str, twin: LambdaTwin, tmp_path: Path) -> None:
    client = boto3.client("lambda", region_name=REGION, endpoint_url=twin.url)
    run_id, outcome = run_serverless(
        problem(),
        PLAN,
        lambda_endpoint_url=twin.url,
        endpoint_url=moto_server,
        region=REGION,
        state=str(tmp_path / "runs"),
        run_id="sl-2",
    )
    assert outcome.state == "met"
    assert left_over(moto_server, run_id) == []
    assert "ReservedConcurrentExecutions" not in client.get_function_concurrency(FunctionName="dnnprov-worker")
    assert twin.state()["in_flight"] == []
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto_server)
    ps = [
        i
        for r in ec2.describe_instances(Filters=[{"Name": "tag:dnnprov:run", "Values": [run_id]}])["Reservations"]
        for i in r["Instances"]
    ]
    assert len(ps) == 1 and ps[0]["InstanceType"] == "m5.large"


def test_a_killed_controller_resumes_without_running_an_invocation_twice(
    moto_server: str, twin: LambdaTwin, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    twin.speed = 150.0  # a 270 s segment takes 1.8 s: time to kill inside one
    instance, plan = tmp_path / "resnet50.json", tmp_path / "plan.json"
    write_instance(problem(), instance)
    plan.write_text(json.dumps(dnnprov.solve(problem(), "milp").to_dict()))
    state = tmp_path / "runs"
    command = [
        sys.executable,
        "-m",
        "dnnprov",
        "run",
        str(instance),
        "--plan",
        str(plan),
        "--lambda-endpoint-url",
        twin.url,
        "--endpoint-url",
        moto_server,
        "--region",
        REGION,
        "--state",
        str(state),
        "--run-id",
        "sl-kill",
        "--json",
    ]
    controller = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
    record = RunRecord(state)
    try:
        deadline, pending = time.monotonic() + 60, None
        while time.monotonic() < deadline and pending is None:  # the 2nd segment written, sent, not recorded
            time.sleep(0.05)
            steps = record.steps("sl-kill") if "sl-kill" in record.runs() else []
            intents = [
                s for s in steps if s["kind"] == "invoke" and s["status"] == "intent" and s["payload"]["segment"] == 1
            ]
            if intents and any(t.startswith(f"sl-kill-{intents[0]['step']}-") for t in twin.state()["in_flight"]):
                pending = intents[0]
        assert pending is not None, "the controller never reached its second segment"
        controller.send_signal(signal.SIGKILL)
        controller.wait(timeout=30)
        assert [s["status"] for s in record.steps("sl-kill") if s["step"] == pending["step"]] == ["intent"]
    finally:
        if controller.poll() is None:
            controller.kill()
        record.close()
    twin.speed = 2000.0
    assert main(["run", "resume", "sl-kill", "--state", str(state), "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    time_s, launches, cost = prediction(problem(), PLAN)
    assert outcome["state"] == "met" and outcome["restarts"] == launches - 1
    assert outcome["finish_s"] == pytest.approx(time_s, rel=1e-9) and outcome["cost"] == pytest.approx(cost, rel=1e-9)
    executions = twin.state()["executions"]
    assert len(executions) == PLAN.functions * launches and set(executions.values()) == {1}
    assert left_over(moto_server, "sl-kill") == []


def test_bad_input_is_one_clear_error(
    moto_server: str, twin: LambdaTwin, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    instance, plan = tmp_path / "resnet50.json", tmp_path / "plan.json"
    write_instance(problem(), instance)
    result = dnnprov.solve(problem(), "milp").to_dict()
    result["plan"]["memory_mb"] = 2400  # off the 64 MB grid
    plan.write_text(json.dumps(result))
    args = [
        "run",
        str(instance),
        "--plan",
        str(plan),
        "--lambda-endpoint-url",
        twin.url,
        "--endpoint-url",
        moto_server,
        "--state",
        str(tmp_path / "runs"),
    ]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "memory_mb" in err[0] and "grid" in err[0]

    spot = tmp_path / "spot.json"
    write_instance(dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json")), spot)
    assert main(["run", str(spot), "--plan", str(plan), "--lambda-endpoint-url", twin.url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "serverless" in err[0]

    with pytest.raises(dnnprov.InvalidInputError, match="ps"):
        run_serverless(
            problem(),
            dataclasses.replace(PLAN, ps=3),
            lambda_endpoint_url=twin.url,
            endpoint_url=moto_server,
            state=str(tmp_path / "runs"),
        )


def test_a_missing_function_fails_clearly_and_tears_down(moto_server: str, twin: LambdaTwin, tmp_path: Path) -> None:
    run_id, outcome = run_serverless(
        problem(),
        PLAN,
        lambda_endpoint_url=twin.url,
        endpoint_url=moto_server,
        region=REGION,
        state=str(tmp_path / "runs"),
        function="no-such-worker",
    )
    assert outcome.state == "failed" and outcome.segments == 0
    assert len(outcome.errors) == 1 and "Function not found: no-such-worker" in outcome.errors[0]
    assert left_over(moto_server, run_id) == []


def test_the_docs_example_prints_what_the_page_shows(
    aws_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "control.md").read_text()
    section = page[page.index("## Serverless runs") :]
    example = section[section.index("```python\n") + 10 :]
    example, rest = example[: example.index("```\n")], example[example.index("```\n") + 4 :]
    shown = rest[rest.index("```text\n") + 8 :]
    shown = shown[: shown.index("```\n")]
    # the docs page's own example, run as the page shows it
    exec(compile(example.replace('"/tmp/serverless-runs"', repr(str(tmp_path / "runs"))), "control.md", "exec"), {})  # noqa: S102
    assert capsys.readouterr().out == shown


def test_stop_status_and_cancel(
    moto_server: str, twin: LambdaTwin, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = str(tmp_path / "runs")
    run_id, outcome = run_serverless(
        problem(),
        PLAN,
        lambda_endpoint_url=twin.url,
        endpoint_url=moto_server,
        region=REGION,
        state=state,
        run_id="sl-cancel",
        stop_after=1,
    )
    assert outcome.state == "running" and outcome.segments == 1 and len(left_over(moto_server, run_id)) == 1
    assert main(["run", "status", run_id, "--state", state, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["state"] == "running" and status["kind"] == "serverless" and status["plan"]["functions"] == 8
    assert main(["run", "cancel", run_id, "--state", state]) == 0
    assert "cancelled" in capsys.readouterr().out
    assert left_over(moto_server, run_id) == []
    client = boto3.client("lambda", region_name=REGION, endpoint_url=twin.url)
    assert "ReservedConcurrentExecutions" not in client.get_function_concurrency(FunctionName="dnnprov-worker")
    assert main(["run", "status", run_id, "--state", state, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "cancelled"


def test_the_twin_answers_as_lambda(twin: LambdaTwin) -> None:
    client = boto3.client("lambda", region_name=REGION, endpoint_url=twin.url)
    body = {"run": "r", "functions": 8, "batch": 128, "ps": 1, "ps_address": "10.0.0.1:2222", "segment": 0}
    assert (
        client.update_function_configuration(FunctionName="dnnprov-worker", MemorySize=2432, Timeout=300)["Timeout"]
        == 300
    )
    first = client.invoke(FunctionName="dnnprov-worker", Payload=json.dumps({**body, "token": "t1"}).encode())
    again = client.invoke(FunctionName="dnnprov-worker", Payload=json.dumps({**body, "token": "t1"}).encode())
    report = json.loads(first["Payload"].read())
    assert "FunctionError" not in first and json.loads(again["Payload"].read()) == report
    assert report["time_s"] == report["billed_s"] == 270.0 and report["finished_s"] is None
    assert twin.state()["executions"] == {"t1": 1}
    no_ps = client.invoke(FunctionName="dnnprov-worker", Payload=json.dumps({**body, "ps_address": None}).encode())
    assert no_ps["FunctionError"] == "Unhandled" and "PS address" in json.loads(no_ps["Payload"].read())["errorMessage"]
    client.update_function_configuration(FunctionName="dnnprov-worker", Timeout=20)  # no time before the 30 s margin
    late = client.invoke(FunctionName="dnnprov-worker", Payload=json.dumps({**body, "segment": 1}).encode())
    assert json.loads(late["Payload"].read())["errorMessage"] == "Task timed out after 20.00 seconds"
    with pytest.raises(client.exceptions.ResourceNotFoundException):
        client.invoke(FunctionName="nothing-here", Payload=b"{}")
    with pytest.raises(client.exceptions.InvalidParameterValueException):
        client.update_function_configuration(FunctionName="dnnprov-worker", Timeout=901)


def test_a_plan_that_cannot_make_its_deadline_gives_up_at_the_horizon(
    moto_server: str, twin: LambdaTwin, tmp_path: Path
) -> None:
    tight = problem().replace(time_s=500.0)  # the plan needs 609 s
    run_id, outcome = run_serverless(
        tight, PLAN, lambda_endpoint_url=twin.url, endpoint_url=moto_server, region=REGION, state=str(tmp_path / "runs")
    )
    assert outcome.state == "gave-up" and outcome.finish_s is None
    assert outcome.segments == 2 and outcome.time_s == pytest.approx(546.0)  # 270 + 6 + 270: past 500 s
    assert left_over(moto_server, run_id) == []


def test_the_lambda_twin_command_serves_a_cli_run(
    moto_server: str, aws_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    instance, plan = tmp_path / "resnet50.json", tmp_path / "plan.json"
    write_instance(problem(), instance)
    plan.write_text(json.dumps(dnnprov.solve(problem(), "milp").to_dict()))
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dnnprov",
            "lambda-twin",
            str(instance),
            "--speed",
            "2000",
            "--function",
            "dnnprov-worker",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        assert server.stdout is not None
        ready = json.loads(server.stdout.readline())
        assert ready["url"].startswith("http://127.0.0.1:") and ready["functions"] == ["dnnprov-worker"]
        code = main(
            [
                "run",
                str(instance),
                "--plan",
                str(plan),
                "--lambda-endpoint-url",
                ready["url"],
                "--endpoint-url",
                moto_server,
                "--state",
                str(tmp_path / "runs"),
                "--run-id",
                "sl-cli",
                "--json",
            ]
        )
        outcome = json.loads(capsys.readouterr().out)
        assert code == 0 and outcome["state"] == "met" and outcome["restarts"] == 2
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)
    bad = subprocess.run(
        [sys.executable, "-m", "dnnprov", "lambda-twin", "embedded:spot/paper-table1.json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "serverless" in bad.stderr


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--lambda-endpoint-url", "notaurl"),
        ("--lambda-endpoint-url", "http://"),
        ("--lambda-endpoint-url", "http://[::1"),
        ("--lambda-endpoint-url", "http://127.0.0.1:99999"),
        ("--lambda-endpoint-url", "ftp://127.0.0.1:8080"),
        ("--endpoint-url", "notaurl"),
        ("--function", ""),
        ("--function", "a b"),
        ("--function", "../../x"),
        ("--function", "worker?x=1"),
    ],
)
def test_a_bad_endpoint_or_function_name_is_refused_before_anything_runs(
    moto_server: str, twin: LambdaTwin, tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    """One error naming the option, exit 2, and no run recorded (so no PS launched)."""
    instance, plan, state = tmp_path / "resnet50.json", tmp_path / "plan.json", tmp_path / "runs"
    write_instance(problem(), instance)
    plan.write_text(json.dumps(dnnprov.solve(problem(), "milp").to_dict()))
    urls = {"--lambda-endpoint-url": twin.url, "--endpoint-url": moto_server, option: value}
    args = ["run", str(instance), "--plan", str(plan), "--state", str(state), "--run-id", "sl-bad"]
    args += [a for pair in urls.items() for a in pair]
    if option == "--function":
        args += ["--function", value]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and option in err[0] and "internal error" not in err[0], err
    with open_record(state) as record:
        assert record.runs() == []


@pytest.mark.parametrize("run_id", ["../escape", "a/b", ".hidden", ""])
def test_a_run_id_that_is_a_path_is_refused(
    moto_server: str, twin: LambdaTwin, tmp_path: Path, capsys: pytest.CaptureFixture[str], run_id: str
) -> None:
    """The id names the lock file RUN.lock in --state: '../escape' wrote tmp_path/escape.lock and ran."""
    instance, plan, state = tmp_path / "resnet50.json", tmp_path / "plan.json", tmp_path / "runs"
    write_instance(problem(), instance)
    plan.write_text(json.dumps(dnnprov.solve(problem(), "milp").to_dict()))
    args = ["run", str(instance), "--plan", str(plan), "--lambda-endpoint-url", twin.url, "--endpoint-url", moto_server]
    assert main([*args, "--state", str(state), "--run-id", run_id]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--run-id" in err[0], err
    assert not (tmp_path / "escape.lock").exists() and twin.state()["executions"] == {}
    with open_record(state) as record:
        assert record.runs() == []
        with pytest.raises(dnnprov.InvalidInputError, match="is not a valid name here"):
            record.lock("../escape")
    assert not (tmp_path / "escape.lock").exists()


def test_max_polls_stops_with_exit_0_and_refuses_a_negative_count(
    moto_server: str, twin: LambdaTwin, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/control.md: exit 0 when still running after --max-polls (as a spot run); -1 is bad input."""
    instance, plan, state = tmp_path / "resnet50.json", tmp_path / "plan.json", tmp_path / "runs"
    write_instance(problem(), instance)
    plan.write_text(json.dumps(dnnprov.solve(problem(), "milp").to_dict()))
    args = ["run", str(instance), "--plan", str(plan), "--lambda-endpoint-url", twin.url, "--endpoint-url", moto_server]
    args += ["--state", str(state), "--json"]
    assert main([*args, "--run-id", "neg", "--max-polls", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--max-polls" in err[0]
    assert main([*args, "--run-id", "one", "--max-polls", "1"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["state"] == "running" and outcome["segments"] == 1
    assert main(["run", "resume", "one", "--state", str(state), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "met"
    with open_record(state) as record:
        assert record.runs() == ["one"]


@pytest.mark.parametrize("option", [["--policy", "replan"], ["--policy", "failover"]])
def test_a_launch_policy_is_refused_on_a_serverless_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str]
) -> None:
    """--policy was ignored without a word on a serverless run (its --progress was refused):
    it has no launch policy, so naming one is one error, nothing recorded."""
    instance, plan, state = tmp_path / "resnet50.json", tmp_path / "plan.json", tmp_path / "runs"
    write_instance(problem(), instance)
    plan.write_text(json.dumps(dnnprov.solve(problem(), "milp").to_dict()))
    argv = ["run", str(instance), "--plan", str(plan), "--lambda-endpoint-url", "http://127.0.0.1:9", *option]
    assert main([*argv, "--state", str(state)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dnnprov: error: --policy: a serverless run has no launch policy")
    assert not (state / "runs.db").exists()


def test_a_lambda_endpoint_that_does_not_answer_fails_the_run_and_says_why(
    moto_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Lambda's endpoint refuses connections: the configure step fails, the teardown still
    terminates the PS, and the run ends `failed` with the configure error and the concurrency it
    could not release. It stayed `running`, its teardown pending, and only the release's error
    was shown (the configure error, the cause, was lost)."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    instance, plan, state = tmp_path / "resnet50.json", tmp_path / "plan.json", tmp_path / "runs"
    write_instance(problem(), instance)
    plan.write_text(json.dumps(dnnprov.solve(problem(), "milp").to_dict()))
    argv = ["run", str(instance), "--plan", str(plan), "--lambda-endpoint-url", dead, "--endpoint-url", moto_url]
    assert main([*argv, "--state", str(state), "--run-id", "dead-lambda", "--json"]) == 1
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["state"] == "failed"
    assert "UpdateFunctionConfiguration" in outcome["errors"][0]
    assert "reserved concurrency of dnnprov-worker was not released" in outcome["errors"][1]
    with open_record(state) as record:
        assert record.get("dead-lambda")["state"] == "failed"
        assert [e["kind"] for e in record.events("dead-lambda")] == ["launch", "end"]  # the PS was launched
    assert left_over(moto_url, "dead-lambda") == []  # and terminated
