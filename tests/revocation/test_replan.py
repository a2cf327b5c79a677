"""Re-planning after revocations (takeover) and the spot interruption-notice poller."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

import dnnprov
from dnnprov.cli import main
from dnnprov.errors import InvalidInputError
from dnnprov.models.spot import SpotModel
from dnnprov.revocation.replan import (
    DEFAULT_TAKEOVER_OVERHEAD_S,
    InterruptionNotice,
    predicted_loss,
    replan,
    replanned_problem,
    watch_interruptions,
)

pytest_plugins = ["conftest_aws"]

REVOKED_AT_S = 29.8 * 60  # the paper's story: 5 g3.8xlarge revoked after 29.8 minutes
TABLE1_PLAN = {"g3.8xlarge": 5, "g3.16xlarge": 3}


def test_table1_revocation_takeover(ref_resnet110) -> None:
    """Table I plan loses its 5 g3.8xlarge at 29.8 min: the takeover keeps the 3 g3.16xlarge,
    meets the remaining SLOs and is the cheapest (milp agrees with exhaustive search)."""
    problem = ref_resnet110()
    start = dnnprov.solve(problem, "reference-heuristic")
    assert start.plan.to_dict()["counts"] == TABLE1_PLAN  # the paper's spotDNN plan
    loss = predicted_loss(problem, start.plan, REVOKED_AT_S)
    assert 0.8 < loss < 1.0
    takeover = replanned_problem(problem, start.plan, {"g3.8xlarge": 5}, REVOKED_AT_S, loss)
    assert takeover.constraints.existing == {"g3.16xlarge": 3}
    assert takeover.slo.time_s == pytest.approx(2600 - REVOKED_AT_S)
    assert takeover.slo.takeover_overhead_s == DEFAULT_TAKEOVER_OVERHEAD_S
    result = replan(problem, start.plan, {"g3.8xlarge": 5}, REVOKED_AT_S, loss)
    oracle = dnnprov.solve(takeover, "enumerate")
    assert result.status is dnnprov.Status.OPTIMAL and result.method == "milp"
    assert result.plan.counts["g3.16xlarge"] >= 3
    assert result.details["new_instances"].get("g3.16xlarge", 0) == result.plan.counts["g3.16xlarge"] - 3
    assert 0 < result.time_s <= takeover.slo.time_s
    assert result.cost == pytest.approx(oracle.cost, rel=1e-9)
    assert result.cost < start.cost  # only the remaining third of the run is paid for


def test_loss_model_continues_where_training_stopped(ref_resnet110) -> None:
    """Assumption check: for an unchanged cluster (nothing revoked) the takeover needs exactly the
    iterations the original run had left (paper model, no rounding)."""
    problem = ref_resnet110(model="paper")
    counts = np.array([[0, 0, 5, 3, 0]])
    before = SpotModel(problem).evaluate(counts)
    plan = dict(zip(problem.columns().labels, counts[0].tolist(), strict=True))
    elapsed = 0.4 * float(before.time_s[0])
    loss = predicted_loss(problem, plan, elapsed)
    takeover = replanned_problem(problem, plan, {}, elapsed, loss, takeover_overhead_s=45.0)
    after = SpotModel(takeover).evaluate(counts)
    done = float(before.iterations[0]) * 0.4
    assert float(after.iterations[0]) == pytest.approx(float(before.iterations[0]) - done, rel=1e-9)
    assert float(after.time_s[0]) == pytest.approx(0.6 * float(before.time_s[0]) + 45.0, rel=1e-9)


def test_avoid_revoked_buys_no_new_instance_of_that_type(ref_resnet110) -> None:
    """With avoid_revoked the revoked type's quota drops to its survivors."""
    problem = ref_resnet110()
    loss = predicted_loss(problem, TABLE1_PLAN, REVOKED_AT_S)
    result = replan(
        problem, TABLE1_PLAN, {"g3.8xlarge": 5}, REVOKED_AT_S, loss, avoid_revoked=True, takeover_overhead_s=0.0
    )
    assert result.status is dnnprov.Status.OPTIMAL and result.plan.counts["g3.8xlarge"] == 0


def test_reference_model_adds_takeover_overhead(ref_resnet110) -> None:
    """SpotSLO says the takeover overhead is added to T; it should be under either model."""
    problem = ref_resnet110()
    slower = problem.replace(slo=dnnprov.SpotSLO(loss=0.8, time_s=2600, takeover_overhead_s=30.0))
    counts = np.array([[0, 0, 5, 3, 0]])
    assert SpotModel(slower).evaluate(counts).time_s[0] == pytest.approx(
        SpotModel(problem).evaluate(counts).time_s[0] + 30
    )


@pytest.mark.parametrize(
    ("revoked", "elapsed", "loss", "message"),
    [
        ({"g3.8xlarge": 6}, REVOKED_AT_S, 0.9, "6 revoked but the plan runs 5"),
        ({"g3.8xlarge": 5}, REVOKED_AT_S, 0.8, "already meets the target loss"),
        ({"g3.8xlarge": 5}, 2590.0, 0.9, "not more than the takeover overhead"),
        ({"p9.xlarge": 1}, REVOKED_AT_S, 0.9, "unknown instance type"),
    ],
)
def test_replan_refuses_bad_input(ref_resnet110, revoked, elapsed, loss, message) -> None:
    """Impossible revocations, a reached target and no time left are refused clearly."""
    with pytest.raises(InvalidInputError, match=message):
        replanned_problem(ref_resnet110(), TABLE1_PLAN, revoked, elapsed, loss)


def test_cli_replan_then_export_launches_takeover_only(
    ref_resnet110, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`dnnprov replan` writes a plan document whose EC2 export launches only the new workers."""
    problem = ref_resnet110()
    instance = tmp_path / "table1.json"
    dnnprov.write_instance(problem, instance)
    assert main(["solve", str(instance), "--method", "reference-heuristic", "--json"]) == 0
    plan = tmp_path / "plan.json"
    plan.write_text(capsys.readouterr().out)
    loss = predicted_loss(problem, TABLE1_PLAN, REVOKED_AT_S)
    assert (
        main(
            [
                "replan",
                str(instance),
                "--plan",
                str(plan),
                "--revoked",
                "g3.8xlarge=5",
                "--elapsed",
                str(REVOKED_AT_S),
                "--loss-reached",
                str(loss),
                "--json",
            ]
        )
        == 0
    )
    takeover = tmp_path / "takeover.json"
    takeover.write_text(capsys.readouterr().out)
    doc = json.loads(takeover.read_text())
    assert doc["format"] == "dnnprov/plan" and doc["instance"]["constraints"]["existing"] == {"g3.16xlarge": 3}
    assert main(["export", str(takeover), "--to", "ec2-run-instances", "--image-id", "ami-11111111"]) == 0
    calls = json.loads(capsys.readouterr().out)["calls"]
    new = doc["result"]["details"]["new_instances"]
    assert {c["params"]["InstanceType"]: c["params"]["MinCount"] for c in calls} == new
    assert (
        main(
            [
                "replan",
                str(instance),
                "--plan",
                str(plan),
                "--revoked",
                "g3.8xlarge",
                "--elapsed",
                "1",
                "--loss-reached",
                "1",
            ]
        )
        == 2
    )
    assert "expected TYPE=COUNT" in capsys.readouterr().err


# ----------------------------------------------------------------------------- notices
class MetadataHandler(BaseHTTPRequestHandler):
    """A tiny IMDSv2: token by PUT, 401 without a valid token, the notice after a few polls."""

    polls = 0
    tokens_issued = 0

    def do_PUT(self) -> None:
        """Issue a session token."""
        if self.path != "/latest/api/token" or "X-aws-ec2-metadata-token-ttl-seconds" not in self.headers:
            return self._reply(400, "")
        type(self).tokens_issued += 1
        self._reply(200, f"token-{self.tokens_issued}")

    def do_GET(self) -> None:
        """Metadata; the first token expires after one use to exercise renewal."""
        if self.headers.get("X-aws-ec2-metadata-token") != f"token-{self.tokens_issued}" or (
            self.tokens_issued == 1 and type(self).polls >= 1
        ):
            return self._reply(401, "")
        if self.path == "/latest/meta-data/spot/instance-action":
            type(self).polls += 1
            if self.polls < 3:
                return self._reply(404, "")
            return self._reply(200, json.dumps({"action": "terminate", "time": "2022-05-31T18:20:00Z"}))
        paths = {
            "/latest/meta-data/instance-id": "i-0123456789abcdef0",
            "/latest/meta-data/instance-type": "g3.8xlarge",
        }
        if self.path in paths:
            return self._reply(200, paths[self.path])
        self._reply(404, "")

    def _reply(self, status: int, body: str) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        """Keep the test output quiet."""


@pytest.fixture
def metadata_url() -> Iterator[str]:
    """A local metadata server on 127.0.0.1 (free port), in a thread."""
    MetadataHandler.polls = MetadataHandler.tokens_issued = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), MetadataHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_watch_interruptions_calls_back_once(metadata_url: str) -> None:
    """Polling with IMDSv2 tokens (renewed on 401) reports the notice once, with type and id."""
    notices: list[InterruptionNotice] = []
    stop = threading.Event()

    def on_notice(notice: InterruptionNotice) -> None:
        notices.append(notice)
        if len(notices) == 1:
            threading.Timer(0.1, stop.set).start()  # a few more polls must not repeat it

    watcher = threading.Thread(
        target=watch_interruptions,
        args=(on_notice,),
        kwargs={"metadata_url": metadata_url, "interval_s": 0.01, "stop": stop},
    )
    watcher.start()
    watcher.join(timeout=10)
    stop.set()
    assert not watcher.is_alive()
    assert notices == [InterruptionNotice("terminate", "2022-05-31T18:20:00Z", "i-0123456789abcdef0", "g3.8xlarge")]
    assert MetadataHandler.tokens_issued >= 2 and MetadataHandler.polls > 3


# ------------------------------------------------------------------ PS and capacity (issue 12.5)
def _low_ps_bandwidth(resnet110_problem_paper, time_s: float, budget: float | None = None) -> dnnprov.SpotProblem:
    from dataclasses import replace

    problem = resnet110_problem_paper.replace(
        slo=dnnprov.SpotSLO(0.8, time_s), constraints=dnnprov.SpotConstraints(ps_count=(1, 3), budget_usd=budget)
    )
    return problem.replace(platform=replace(problem.platform, ps_bandwidth_mb_s=300.0))


def test_money_spent_counts_every_ps(resnet110_paper) -> None:
    """A 2-PS plan has spent workers + 2 PS: the takeover's budget is lowered by both PS."""
    problem = _low_ps_bandwidth(resnet110_paper, 3000.0, budget=20.0)
    plan = dnnprov.SpotPlan(counts={"p3.2xlarge": 2, "g3.8xlarge": 5}, ps=2)
    elapsed = 1200.0
    loss = predicted_loss(problem, plan, elapsed, ps=2)
    takeover = replanned_problem(problem, plan, {"g3.8xlarge": 2}, elapsed, loss)
    workers = 2 * 0.918 + 5 * 0.684
    assert takeover.constraints.budget_usd == pytest.approx(20.0 - (workers + 2 * 0.192) * elapsed / 3600, rel=1e-12)
    assert takeover.constraints.ps_count == (2, 3)  # the running PS are kept
    one_ps = replanned_problem(problem, plan, {"g3.8xlarge": 2}, elapsed, loss, ps=1)
    assert one_ps.constraints.budget_usd - takeover.constraints.budget_usd == pytest.approx(0.192 * elapsed / 3600)


def test_takeover_needing_more_ps_reports_them(resnet110_paper) -> None:
    """With a 300 MB/s PS, the takeover of a 1-PS run wants 3 PS: details.new_ps says 2 to launch."""
    problem = _low_ps_bandwidth(resnet110_paper, 3000.0)
    plan = dnnprov.SpotPlan(counts={"p3.2xlarge": 2, "g3.8xlarge": 5, "g3.16xlarge": 2}, ps=1)
    loss = predicted_loss(problem, plan, 300.0, ps=1)
    result = replan(problem, plan, {"g3.8xlarge": 5}, 300.0, loss, method="enumerate")
    assert result.status is dnnprov.Status.OPTIMAL and result.plan.ps == 3
    assert result.details["new_ps"] == 2
    kept = replan(
        problem, dnnprov.SpotPlan(counts=plan.counts, ps=3), {"g3.8xlarge": 5}, 300.0, loss, method="enumerate"
    )
    assert kept.plan.ps == 3 and kept.details["new_ps"] == 0


def test_capacity_caps_the_spot_market_only(resnet110_paper) -> None:
    """capacity limits spot quotas (not below the survivors); on-demand quotas keep their value."""
    from dataclasses import replace

    problem = resnet110_paper.replace(
        instance_types=tuple(
            replace(t, on_demand_price_per_h=3 * t.spot_price_per_h) for t in resnet110_paper.instance_types
        ),
        constraints=dnnprov.SpotConstraints(markets=("spot", "on-demand")),
    )
    plan = {"p3.2xlarge": 2, "g3.8xlarge": 4}
    loss = predicted_loss(problem, plan, 600.0)
    takeover = replanned_problem(
        problem, plan, {"g3.8xlarge": 1}, 600.0, loss, capacity={"g3.8xlarge": 0, "p3.2xlarge": 5}
    )
    cols = takeover.columns()
    upper = dict(zip(cols.labels, cols.upper.tolist()))
    assert upper["g3.8xlarge"] == 3 and upper["p3.2xlarge"] == 2  # survivors kept, quota 2 kept
    assert upper["g3.8xlarge:on-demand"] == 5 and upper["p3.2xlarge:on-demand"] == 2
    avoid = replanned_problem(problem, plan, {"g3.8xlarge": 1}, 600.0, loss, avoid_revoked=True).columns()
    upper = dict(zip(avoid.labels, avoid.upper.tolist()))
    assert upper["g3.8xlarge"] == 3 and upper["g3.8xlarge:on-demand"] == 5
    with pytest.raises(InvalidInputError, match="capacity.p9"):
        replanned_problem(problem, plan, {"g3.8xlarge": 1}, 600.0, loss, capacity={"p9": 1})


def test_takeover_document_without_a_plan(ref_resnet110) -> None:
    """An infeasible takeover still gives the plan document (result, instance), not a bare result."""
    from dnnprov.revocation.replan import solve_takeover, takeover_document

    problem = ref_resnet110()
    loss = predicted_loss(problem, TABLE1_PLAN, REVOKED_AT_S)
    takeover = replanned_problem(problem, TABLE1_PLAN, {"g3.8xlarge": 5}, REVOKED_AT_S, loss, takeover_overhead_s=700.0)
    result = solve_takeover(takeover, "enumerate")
    assert result.status is dnnprov.Status.INFEASIBLE
    doc = takeover_document(result, takeover)
    assert doc["format"] == "dnnprov/plan" and doc["result"]["status"] == "infeasible"
    assert doc["instance"]["constraints"]["existing"] == {"g3.16xlarge": 3}


def test_cli_takeover_launches_the_new_ps(resnet110_paper, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`replan --json` of a 1-PS plan whose takeover wants 3 PS: exports launch the 2 new PS only;
    an infeasible takeover still prints the plan document."""
    problem = _low_ps_bandwidth(resnet110_paper, 3000.0)
    instance = tmp_path / "i.json"
    dnnprov.write_instance(problem, instance)
    running = {
        "format": "dnnprov/plan",
        "version": 1,
        "instance": problem.to_dict(),
        "result": {
            "status": "feasible",
            "method": "given",
            "kind": "spot",
            "model": "paper",
            "instance": problem.name,
            "plan": {"counts": {"p3.2xlarge": 2, "g3.8xlarge": 5, "g3.16xlarge": 2}, "ps": 1},
        },
    }
    plan = tmp_path / "running.json"
    plan.write_text(json.dumps(running))
    loss = predicted_loss(problem, dnnprov.SpotPlan(running["result"]["plan"]["counts"], 1), 300.0, ps=1)
    args = [
        "replan",
        str(instance),
        "--plan",
        str(plan),
        "--revoked",
        "g3.8xlarge=5",
        "--elapsed",
        "300",
        "--loss-reached",
        str(loss),
        "--method",
        "enumerate",
        "--json",
    ]
    assert main(args) == 0
    takeover = tmp_path / "takeover.json"
    takeover.write_text(capsys.readouterr().out)
    doc = json.loads(takeover.read_text())
    assert doc["result"]["plan"]["ps"] == 3 and doc["result"]["details"]["new_ps"] == 2
    assert main(["export", str(takeover), "--to", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["launch"]["ps"]["count"] == 2
    assert main(["export", str(takeover), "--to", "ec2-run-instances", "--image-id", "ami-11111111"]) == 0
    calls = json.loads(capsys.readouterr().out)["calls"]
    assert [c["params"]["MinCount"] for c in calls if c["params"]["InstanceType"] == "m5.xlarge"] == [2]
    assert main(args[:-3] + ["--takeover-overhead", "2690", "--method", "enumerate", "--json"]) == 1  # no plan
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "dnnprov/plan" and doc["result"]["status"] == "infeasible"
    assert doc["instance"]["constraints"]["existing"] == {"p3.2xlarge": 2, "g3.16xlarge": 2}


def test_cli_replan_places_the_takeover_in_zones(ref_resnet110, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """With pools and `--capacity TYPE@ZONE=N`, the takeover stays within the free capacity and
    its details say where to launch: the cheaper zone first, then the next (issue 18). The
    service's replan job takes the same zone capacity and answers the same."""
    from dataclasses import replace

    from dnnprov.problems.spot import SpotPool

    problem = ref_resnet110()
    zones = (SpotPool("us-east-1a", spot_price_per_h=0.70), SpotPool("us-east-1b", spot_price_per_h=0.60))
    problem = problem.replace(
        instance_types=tuple(replace(t, zones=zones) if t.name == "g3.8xlarge" else t for t in problem.instance_types)
    )
    instance = tmp_path / "zones.json"
    dnnprov.write_instance(problem, instance)
    assert main(["solve", str(instance), "--method", "reference-heuristic", "--json"]) == 0
    solved = json.loads(capsys.readouterr().out)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(solved))
    if solved["plan"]["counts"].get("g3.8xlarge"):
        assert solved["details"]["zones"] == {"g3.8xlarge": ["us-east-1a", "us-east-1b"]}
    loss = predicted_loss(problem, TABLE1_PLAN, REVOKED_AT_S)
    args = [
        "replan",
        str(instance),
        "--plan",
        str(plan),
        "--revoked",
        "g3.8xlarge=5",
        "--elapsed",
        str(REVOKED_AT_S),
        "--loss-reached",
        str(loss),
        "--method",
        "enumerate",
    ]
    assert (
        main(args + ["--capacity", "g3.8xlarge@us-east-1a=1", "--capacity", "g3.8xlarge@us-east-1b=2", "--json"]) == 0
    )
    doc = json.loads(capsys.readouterr().out)["result"]
    new = doc["details"]["new_instances"].get("g3.8xlarge", 0)
    assert 0 < new <= 3  # the cheap g3.8xlarge come back, as far as the zones allow
    placed = doc["details"]["zones"].get("g3.8xlarge", {})
    assert sum(placed.values()) == new and placed.get("us-east-1b", 0) == min(new, 2)
    oracle = replan(
        problem, TABLE1_PLAN, {"g3.8xlarge": 5}, REVOKED_AT_S, loss, method="enumerate", capacity={"g3.8xlarge": 3}
    )
    assert doc["cost"] == pytest.approx(oracle.cost, rel=1e-9)
    from dnnprov.service.kinds.tasks import run as service_run

    body = {
        "instance": json.loads(instance.read_text()),
        "plan": solved,
        "revoked": {"g3.8xlarge": 5},
        "elapsed_s": REVOKED_AT_S,
        "loss_reached": loss,
        "method": "enumerate",
        "capacity": {"g3.8xlarge": {"us-east-1a": 1, "us-east-1b": 2}},
    }
    served = service_run("replan", body, 60.0)["result"]  # POST /v1/replan's answer
    assert served["cost"] == pytest.approx(oracle.cost, rel=1e-9)
    assert served["details"]["zones"] == doc["details"]["zones"]
    with pytest.raises(InvalidInputError, match="not a zone of g3.8xlarge"):
        service_run("replan", {**body, "capacity": {"g3.8xlarge": {"us-west-2a": 1}}}, 60.0)
    with pytest.raises(InvalidInputError, match="capacity"):
        service_run("replan", {**body, "capacity": {"g3.8xlarge": 1}}, 60.0)
    assert main(args + ["--capacity", "g3.8xlarge@us-west-2a=1"]) == 2
    assert "not a zone of g3.8xlarge" in capsys.readouterr().err
    assert main(args + ["--capacity", "g3.8xlarge=1"]) == 2
    assert "TYPE@ZONE=COUNT" in capsys.readouterr().err


# ------------------------------------------------------------------ a flaky metadata service (issue 28)
class FlakyMetadata(BaseHTTPRequestHandler):
    """IMDSv2 that fails as a real one can: each request takes the next fault of ``faults`` (503, 500,
    ``drop``: the connection closed unanswered, ``slow``: no answer within the client's timeout), then
    answers; the notice appears after ``quiet`` polls of spot/instance-action."""

    faults: ClassVar[list[str]] = []
    failed: ClassVar[list[str]] = []
    quiet = 2
    polls = 0
    notice: ClassVar[dict[str, str]] = {"action": "terminate", "time": "2026-12-01T10:00:00Z"}

    def _fault(self) -> bool:
        if not type(self).faults:
            return False
        fault = type(self).faults.pop(0)
        type(self).failed.append(f"{self.command} {self.path}: {fault}")
        if fault in ("drop", "slow"):
            threading.Event().wait(0.5 if fault == "slow" else 0.0)  # past the client's 0.2 s timeout
            self.close_connection = True
            self.connection.close()
        else:
            self._reply(int(fault), "")
        return True

    def do_PUT(self) -> None:
        """A session token, unless a fault comes first."""
        if not self._fault():
            self._reply(200, "token")

    def do_GET(self) -> None:
        """The notice (after a few quiet polls), the instance's id and type, unless a fault comes first."""
        if self._fault():
            return
        if self.headers.get("X-aws-ec2-metadata-token") != "token":
            return self._reply(401, "")
        if self.path == "/latest/meta-data/spot/instance-action":
            type(self).polls += 1
            if self.polls <= self.quiet:
                return self._reply(404, "")
            return self._reply(200, json.dumps(self.notice))
        paths = {"/latest/meta-data/instance-id": "i-0fedcba987654321", "/latest/meta-data/instance-type": "p3.2xlarge"}
        self._reply(200, paths[self.path]) if self.path in paths else self._reply(404, "")

    _reply = MetadataHandler._reply
    log_message = MetadataHandler.log_message


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(port: int) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", port), FlakyMetadata)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _watch(url: str, notices: list, stop: threading.Event, **options) -> tuple[threading.Thread, list]:
    """The watcher in a thread; what it raised lands in the returned list."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            watch_interruptions(
                notices.append, metadata_url=url, interval_s=0.02, stop=stop, timeout_s=0.2, retry_s=0.01, **options
            )
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, raised


def _until(condition, seconds: float = 10.0) -> None:
    deadline = threading.Event()
    for _ in range(int(seconds / 0.02)):
        if condition():
            return
        deadline.wait(0.02)
    raise AssertionError("timed out")


@pytest.fixture
def flaky() -> Iterator[None]:
    FlakyMetadata.faults, FlakyMetadata.failed, FlakyMetadata.polls, FlakyMetadata.quiet = [], [], 0, 2
    FlakyMetadata.notice = {"action": "terminate", "time": "2026-12-01T10:00:00Z"}
    yield


def test_watcher_retries_transient_failures(flaky) -> None:
    """Refused connections (the service not up yet), 503 and 500 answers, a dropped connection and a
    timeout: the watcher backs off and keeps polling, and reports the notice once (issue 28: it died
    on the first 500/503 or unreachable endpoint)."""
    port = _free_port()
    notices: list[InterruptionNotice] = []
    stop = threading.Event()
    FlakyMetadata.faults = ["503", "500", "drop", "slow", "503", "502"]
    thread, raised = _watch(f"http://127.0.0.1:{port}", notices, stop)
    threading.Event().wait(0.3)  # connection refused meanwhile
    assert thread.is_alive() and not raised
    server = _serve(port)
    try:
        _until(lambda: notices)
        threading.Event().wait(0.2)  # more polls of the same notice
        stop.set()
        thread.join(5)
    finally:
        server.shutdown()
        server.server_close()
    assert not raised and not thread.is_alive()
    assert notices == [InterruptionNotice("terminate", "2026-12-01T10:00:00Z", "i-0fedcba987654321", "p3.2xlarge")]
    assert [f.rsplit(": ", 1)[1] for f in FlakyMetadata.failed] == ["503", "500", "drop", "slow", "503", "502"]
    assert FlakyMetadata.polls > FlakyMetadata.quiet + 1


def test_watcher_remembers_reported_notices_across_restarts(flaky, tmp_path: Path) -> None:
    """With a state file a restarted watcher does not report a notice again; a new notice it does."""
    server = _serve(0)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    state = tmp_path / "notices.json"
    try:
        for expected in (1, 0):  # the first watcher reports it, the restarted one not
            notices: list[InterruptionNotice] = []
            stop = threading.Event()
            FlakyMetadata.polls = 0
            thread, raised = _watch(url, notices, stop, state_file=state)
            _until(lambda: FlakyMetadata.polls > FlakyMetadata.quiet + 3)
            stop.set()
            thread.join(5)
            assert not raised and len(notices) == expected
        saved = json.loads(state.read_text())
        assert saved["reported"] == [
            {"action": "terminate", "time": "2026-12-01T10:00:00Z", "instance_id": "i-0fedcba987654321"}
        ]
        FlakyMetadata.notice = {"action": "stop", "time": "2026-12-01T11:00:00Z"}
        notices, stop = [], threading.Event()
        thread, raised = _watch(url, notices, stop, state_file=state)
        _until(lambda: notices)
        stop.set()
        thread.join(5)
        assert [n.action for n in notices] == ["stop"] and len(json.loads(state.read_text())["reported"]) == 2
    finally:
        server.shutdown()
        server.server_close()


def test_watcher_gives_up_when_told_and_on_a_refusal(flaky, tmp_path: Path) -> None:
    """max_failures transient failures in a row end the watch with one error; a 403 at once; so does a
    state file that is not one."""
    server = _serve(0)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for faults, options, message in (
            (["503"] * 4, {"max_failures": 3}, "failed 3 times in a row, the last: HTTP Error 503"),
            (["403"], {}, "reading .* failed: HTTP Error 403"),
        ):
            FlakyMetadata.faults = faults
            thread, raised = _watch(url, [], threading.Event(), **options)
            thread.join(5)
            assert len(raised) == 1 and isinstance(raised[0], InvalidInputError)
            assert raised[0].field == "metadata" and re.search(message, raised[0].problem)
    finally:
        server.shutdown()
        server.server_close()
    bad = tmp_path / "notices.json"
    bad.write_text('{"format": "something else"}')
    with pytest.raises(InvalidInputError, match="not a dnnprov/notices v1 file"):
        watch_interruptions(print, metadata_url=url, state_file=bad)


@pytest.mark.parametrize(
    ("option", "value"), [("--elapsed", "-1"), ("--loss-reached", "nan"), ("--takeover-overhead", "-5")]
)
def test_cli_replan_errors_name_the_option(tmp_path: Path, capsys: pytest.CaptureFixture, option, value) -> None:
    """A bad --elapsed, --loss-reached or --takeover-overhead is named by the option, not by the
    Python argument behind it (elapsed_s, loss_reached, takeover_overhead_s)."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"kind": "spot", "status": "feasible", "plan": {"counts": {"p3.2xlarge": 2}, "ps": 1}}))
    argv = {"--elapsed": "10", "--loss-reached": "3", option: value}
    args = ["replan", "embedded:spot/paper-table1.json", "--plan", str(plan), "--revoked", "p3.2xlarge=1"]
    assert main([*args, *(x for pair in argv.items() for x in pair)]) == 2
    assert capsys.readouterr().err.startswith(f"dnnprov: error: {option}: ")
