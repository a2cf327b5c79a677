"""`dnnprov run` as an operator uses it, against moto's EC2 on loopback: a throttled PS launch,
run ids, endpoints, options and verbs that must be refused or told plainly
(the loop's stories: test_resume.py, test_kill_resume.py)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import boto3
import pytest
from control.test_resume import REGION, files  # noqa: F401

from dnnprov.cli import main

pytest_plugins = ["conftest_aws"]
THROTTLED = (
    b'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>RequestLimitExceeded</Code>'
    b"<Message>Request limit exceeded.</Message></Error></Errors><RequestID>t</RequestID></Response>"
)


@pytest.fixture
def throttling(moto_url: str) -> Iterator[tuple[str, dict[str, int]]]:
    """A loopback proxy to moto answering ``RequestLimitExceeded`` (HTTP 503, as EC2 does) to
    the next ``left[ACTION]`` calls of each action; its URL and ``left``."""
    left: dict[str, int] = {}
    lock = threading.Lock()

    class Proxy(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            action = parse_qs(body.decode(errors="replace")).get("Action", [""])[0]
            with lock:
                throttle = left.get(action, 0) > 0
                if throttle:
                    left[action] -= 1
            if throttle:
                status, data = 503, THROTTLED
            else:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                request = urllib.request.Request(moto_url + self.path, data=body, method="POST", headers=headers)
                try:
                    with urllib.request.urlopen(request, timeout=60) as answer:
                        status, data = answer.status, answer.read()
                except urllib.error.HTTPError as exc:
                    status, data = exc.code, exc.read()
            self.send_response(status)
            self.send_header("Content-Type", "text/xml")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", left
    server.shutdown()
    server.server_close()


def run_argv(given: tuple[Path, Path], url: str, state: Path, *more: str) -> list[str]:
    return [
        "run",
        str(given[0]),
        "--plan",
        str(given[1]),
        "--endpoint-url",
        url,
        "--region",
        REGION,
        "--state",
        str(state),
        "--poll",
        "0.01",
        *more,
    ]


def tagged(url: str, run_id: str) -> list[dict[str, Any]]:
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=url)
    return [
        i
        for r in ec2.describe_instances(Filters=[{"Name": "tag:dnnprov:run", "Values": [run_id]}])["Reservations"]
        for i in r["Instances"]
    ]


def test_a_throttled_ps_launch_is_tried_again_before_any_worker(
    throttling: tuple[str, dict[str, int]],
    files: tuple[Path, Path],  # noqa: F811 - test_resume's fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, left = throttling
    left["RunInstances"] = 1  # the first launch (the PS) is throttled
    state = tmp_path / "runs"
    assert main(run_argv(files, url, state, "--run-id", "thr", "--max-polls", "3")) == 0
    capsys.readouterr()
    live = [i for i in tagged(url, "thr") if i["State"]["Name"] == "running"]
    roles = [{t["Key"]: t["Value"] for t in i["Tags"]} for i in live]
    ps = [r for r in roles if r["dnnprov:role"] == "ps"]
    workers = [r for r in roles if r["dnnprov:role"] == "worker"]
    assert len(ps) == 1 and workers  # the PS was launched again, then the workers
    assert all("dnnprov:ps" in w for w in workers)  # every worker was handed the PS's address
    assert main(["run", "cancel", "thr", "--state", str(state)]) == 0
    assert all(i["State"]["Name"] in ("terminated", "shutting-down") for i in tagged(url, "thr"))


def one_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    err = [line for line in err if not line.startswith("run ")]  # the "run ID started" line
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("run_id", ["../x", "a/b", "L" * 60, "ünïcode", "-x", " "])
def test_a_run_id_that_cannot_name_a_run_is_refused_before_anything_is_recorded(
    run_id: str,
    moto_url: str,
    files: tuple[Path, Path],  # noqa: F811 - test_resume's fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Its lock file would leave the state folder (``../x``) or not be made (``a/b``, too long), and
    its launches' ClientTokens (``RUN-STEP``) would break EC2's 64 ASCII characters."""
    state = tmp_path / "deep" / "runs"
    assert main(run_argv(files, moto_url, state, f"--run-id={run_id}", "--max-polls", "1")) == 2
    assert "--run-id" in one_error(capsys)
    assert not (tmp_path / "deep").exists() and tagged(moto_url, run_id) == []


@pytest.mark.parametrize("url", ["junk", "", "http://[::1", "http://127.0.0.1:99999", "ftp://127.0.0.1:9"])
def test_an_endpoint_that_is_no_url_is_refused_before_anything_is_recorded(
    url: str,
    aws_env: None,
    files: tuple[Path, Path],  # noqa: F811 - test_resume's fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(run_argv(files, url, tmp_path / "runs", "--max-polls", "1")) == 2
    assert "--endpoint-url" in one_error(capsys)
    assert not (tmp_path / "runs").exists()


def test_an_endpoint_that_is_not_ec2_is_one_error(
    moto_url: str,
    files: tuple[Path, Path],  # noqa: F811 - test_resume's fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A URL with a path answers moto's 404 page, which botocore cannot parse: an error, not a bug."""
    assert main(run_argv(files, moto_url + "/not/ec2", tmp_path / "runs", "--max-polls", "1")) == 2
    assert "endpoint" in one_error(capsys)


@pytest.mark.parametrize(
    "more, option",
    [(("--max-polls", "0"), "--max-polls"), (("--max-polls", "-3"), "--max-polls"), (("--poll", "0"), "--poll")],
)
def test_bad_loop_options_are_named_as_given_and_launch_nothing(
    more: tuple[str, ...],
    option: str,
    moto_url: str,
    files: tuple[Path, Path],  # noqa: F811 - test_resume's fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = run_argv(files, moto_url, tmp_path / "runs", "--run-id", "opt")
    argv.remove("--poll")  # run_argv's --poll 0.01 out of the way
    argv.remove("0.01")
    assert main([*argv, *more]) == 2
    assert one_error(capsys).startswith(f"dnnprov: error: {option}:")
    assert tagged(moto_url, "opt") == []


def test_a_run_whose_endpoint_never_answered_can_be_cancelled(
    aws_env: None,
    files: tuple[Path, Path],  # noqa: F811 - test_resume's fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Nothing was sent (a step is written before it is), so there is nothing to tear down: the
    cancel needs no endpoint; cancelled twice, it says the run ended already."""
    import socket

    with socket.socket() as sock:  # a port with nothing listening
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    state = tmp_path / "runs"
    assert main(run_argv(files, closed, state, "--run-id", "never", "--max-polls", "1")) == 2
    assert "cannot reach the endpoint" in one_error(capsys)
    assert main(["run", "cancel", "never", "--state", str(state)]) == 0
    assert "cancelled" in capsys.readouterr().out
    assert main(["run", "status", "never", "--state", str(state), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["state"] == "cancelled" and status["outcome"]["cost"] == 0 and status["held"] == {}
    assert main(["run", "cancel", "never", "--state", str(state)]) == 0
    assert capsys.readouterr().out.strip() == "never: already ended (cancelled)"


def test_a_twin_that_went_away_is_named_so_and_the_run_resumes_when_it_is_back(
    moto_url: str,
    files: tuple[Path, Path],  # noqa: F811 - test_resume's fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from control.test_resume import POOLS

    from dnnprov.control.twin.server import Twin

    state = tmp_path / "runs"
    twin = Twin(POOLS, upstream=moto_url, mode="stepped", region=REGION).start()
    port = int(twin.url.rsplit(":", 1)[1])
    try:
        assert main(run_argv(files, twin.url, state, "--run-id", "away", "--max-polls", "2")) == 0
    finally:
        twin.stop()
    capsys.readouterr()
    assert main(["run", "resume", "away", "--state", str(state), "--max-polls", "1"]) == 2
    error = one_error(capsys)
    assert "stopped answering" in error and "run resume" in error and "not an EC2 twin" not in error
    with Twin(POOLS, upstream=moto_url, mode="stepped", region=REGION, port=port) as back:
        assert main(["run", "resume", "away", "--state", str(state), "--max-polls", "1"]) == 0
        assert main(["run", "cancel", "away", "--state", str(state)]) == 0
        assert all(i["State"]["Name"] in ("terminated", "shutting-down") for i in tagged(back.url, "away"))


@pytest.mark.parametrize("verb", ["status", "cancel", "resume"])
def test_a_verb_on_a_state_folder_without_runs_makes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    """`run status X --state DIR` of a DIR that holds no run record made DIR and a runs.db
    (a reading verb left files behind); now one error (no such run), nothing made."""
    state = tmp_path / "nowhere" / "runs"
    assert main(["run", verb, "r1", "--state", str(state)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dnnprov: error: RUN: no run in ") and "holds no run record" in err[0]
    assert not (tmp_path / "nowhere").exists()


def test_a_cancel_never_overwrites_an_end(tmp_path: Path) -> None:
    """cancel_run read the run, then wrote `cancelling` unconditionally: a run its controller
    ended in between lost its `met`. The move to `cancelling` is now one conditional statement."""
    from dnnprov.control.record import open_record

    with open_record(tmp_path) as record:
        for run_id, state in (("live", "running"), ("ended", "met")):
            record.create({"kind": "test"}, run_id)
            record.set_state(run_id, state)
        assert record.request_cancel("live") and record.get("live")["state"] == "cancelling"
        assert record.request_cancel("live")  # asked again: still live
        assert not record.request_cancel("ended") and record.get("ended")["state"] == "met"
        assert not record.request_cancel("nosuch")
