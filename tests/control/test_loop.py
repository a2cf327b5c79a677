"""The control loop on the trace cloud: capacity rules, failover in the notice, the PS handoff,
billing, and a restarted controller that launches nothing twice."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import dnnprov
from dnnprov.control.cloud import LaunchRequest
from dnnprov.control.clouds.capacity import CapacityBook, PoolSpec
from dnnprov.control.clouds.trace import TraceCloud
from dnnprov.control.loop import Controller, PoolInfo, RunSettings
from dnnprov.control.record import RunRecord
from dnnprov.control.replay import run_once, window_starts
from dnnprov.control.trainer import ModelTrainer, ProgressModel
from dnnprov.errors import InvalidInputError
from dnnprov.problems.interruption import Trace
from dnnprov.problems.spot import SpotPool
from dnnprov.result import SpotPlan
from dnnprov.revocation.availability import fit_availability
from dnnprov.revocation.policies import make_policy
from dnnprov.revocation.replay.pool_replay import takeover_table

GAP = 300.0


def trace(name: str, alive: list[int]) -> Trace:
    return Trace(f"t/{name}_v100_1.json", GAP, np.array(alive, dtype=np.int64))


def problem(hours: float = 0.5, slack: float = 1.5) -> dnnprov.SpotProblem:
    """ResNet-110 on p3.2xlarge (paper model), two zones; 2 workers train ``hours``."""
    table1 = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    p3 = next(t for t in table1.instance_types if t.name == "p3.2xlarge")
    p3 = replace(
        p3,
        quota=8,
        spot_price_per_h=0.918,
        on_demand_price_per_h=3.06,
        zones=(SpotPool("us-west-2a"), SpotPool("us-west-2c")),
    )
    workload = replace(table1.workload, loss_variant="cc", gamma_4=1.0, estimated=("gamma_4",))
    base = table1.replace(
        instance_types=(p3,),
        workload=workload,
        model="paper",
        platform=replace(table1.platform, ps_price_per_h=0.192),
        constraints=dnnprov.SpotConstraints(ps_count=(1, 1)),
        name="p3-two-zones",
    )
    low, high = base.workload.gamma_5 + 1e-6, 5.0
    for _ in range(80):
        mid = (low + high) / 2
        t = float(
            dnnprov.SpotModel(base.replace(slo=dnnprov.SpotSLO(loss=mid, time_s=1e9))).evaluate([[2]], 1).time_s[0]
        )
        low, high = (mid, high) if t > hours * 3600 else (low, mid)
    return base.replace(slo=dnnprov.SpotSLO(loss=high, time_s=slack * hours * 3600))


PLAN = SpotPlan(counts={"p3.2xlarge": 2}, ps=1)


def test_capacity_book_rules() -> None:
    """Refused beyond capacity, partial grants, newest notified first, reclaimed 120 s later even
    when capacity returns, and never past the trace's end."""
    book = CapacityBook([PoolSpec("p3.2xlarge", "a", trace("a", [3, 1, 3, 3]), 0, 1.0)])
    assert book.grant("p3.2xlarge@a", 1, 5) == 3
    book.add("p3.2xlarge@a", ["i-1", "i-2"])
    book.now_s = 10.0
    book.add("p3.2xlarge@a", ["i-3"])
    assert book.grant("p3.2xlarge@a", 1, 1) == 0
    events = book.advance(GAP + 1)
    assert [(e.kind, e.instance_id, e.time_s) for e in events] == [("notice", "i-3", GAP), ("notice", "i-2", GAP)]
    events = book.advance(2 * GAP + 1)  # capacity is back at 600 s: the reclaims still come
    assert [(e.kind, e.time_s) for e in events] == [("reclaim", GAP + 120), ("reclaim", GAP + 120)]
    assert book.grant("p3.2xlarge@a", 1, 5) == 2
    with pytest.raises(InvalidInputError, match="past the trace's end"):
        book.advance(4 * GAP)


def test_idempotent_launch_on_trace_cloud() -> None:
    cloud = TraceCloud(CapacityBook([PoolSpec("p3.2xlarge", "a", trace("a", [2, 2]), 0, 1.0)]))
    request = LaunchRequest("r", 1, "worker", "p3.2xlarge", "a", "spot", 2, "r-1")
    first, again = cloud.launch(request), cloud.launch(request)
    assert [i.instance_id for i in first.instances] == [i.instance_id for i in again.instances]
    assert len(cloud.instances("r")) == 2


def loop(
    prob: dnnprov.SpotProblem,
    traces: dict[str, list[int]],
    policy: str = "failover",
    record: RunRecord | None = None,
    run_id: str = "r",
) -> tuple[Controller, TraceCloud]:
    pools = [PoolSpec("p3.2xlarge", zone, trace(zone, alive), 0, 0.918) for zone, alive in traces.items()]
    cloud = TraceCloud(CapacityBook(pools))
    trainer = ModelTrainer(ProgressModel(prob, PLAN, 126.0), run_id)
    controller = Controller(
        prob,
        PLAN,
        make_policy(policy),
        cloud,
        run_id=run_id,
        trainer=trainer.observe,
        pools=[PoolInfo(p.type_name, p.zone, p.price_per_h) for p in pools],
        settings=RunSettings(horizon=1.0),
        record=record,
    )
    return controller, cloud


def test_failover_replaces_workers_during_the_notice() -> None:
    """Zone a loses both workers at 300 s: failover launches in zone c at the notice (not at the
    reclaim), the run meets its deadline, nothing is left running, and the bill is what the
    instances' lifetimes say."""
    prob = problem()
    controller, cloud = loop(prob, {"us-west-2a": [2] + [0] * 20, "us-west-2c": [0] + [4] * 20})
    outcome = controller.run()
    kinds = [(e.kind, e.time_s, e.detail.get("pool")) for e in controller.events]
    assert ("notice", GAP, "p3.2xlarge@us-west-2a") in kinds
    launches = [(t, pool) for kind, t, pool in kinds if kind == "launch"]
    assert (GAP, "p3.2xlarge@us-west-2c") in launches  # within the notice, not at 420 s
    assert outcome.state == "met" and outcome.revocations == 2
    assert all(i.ended_s is not None for i in cloud.instances("r"))
    expected = 0.0
    for i in cloud.instances("r"):
        price = 0.192 if i.role == "ps" else 0.918
        expected += price * (i.ended_s - i.launched_s) / 3600
    assert outcome.cost == pytest.approx(expected, rel=1e-12)
    # the lone survivors' window: 2 workers from 0 to 420 s (reclaim), new ones from 300 + 126 s
    assert outcome.finish_s is not None and outcome.finish_s > 0.5 * 3600


def test_failover_tries_every_zone_in_one_poll() -> None:
    """Nine zones, capacity only in the last: failover places on one pool a round, so a poll
    needs a round per zone. With four rounds a poll tried the first four zones only, and so did
    every poll after (their back-offs ran out together): the run never launched a worker."""
    zones = [f"us-east-1{z}" for z in "abcdefgh"] + ["us-west-2a"]
    controller, _ = loop(problem(), {z: [0] * 21 for z in zones[:-1]} | {zones[-1]: [4] * 21})
    outcome = controller.run()
    refused = [e.detail["pool"] for e in controller.events if e.kind == "refused" and e.time_s == 0]
    assert refused == [f"p3.2xlarge@{z}" for z in zones[:-1]]
    launched = [(e.time_s, e.detail["pool"], e.detail["got"]) for e in controller.events if e.kind == "launch"]
    assert (0.0, "p3.2xlarge@us-west-2a", 2) in launched
    assert outcome.state == "met"


def test_none_policy_misses_when_capacity_is_gone() -> None:
    controller, _ = loop(problem(), {"us-west-2a": [2] + [0] * 20, "us-west-2c": [0] + [4] * 20}, policy="none")
    outcome = controller.run()
    assert outcome.state in ("missed", "gave-up") and outcome.finish_s is None


def test_worker_without_the_ps_address_does_not_train() -> None:
    prob = problem()
    model = ProgressModel(prob, PLAN, 126.0)
    cloud = TraceCloud(CapacityBook([PoolSpec("p3.2xlarge", "a", trace("a", [4] * 10), 0, 1.0)]))
    ps = cloud.launch(LaunchRequest("r", 1, "ps", "m5.xlarge", None, "on-demand", 1, "t1")).instances[0]
    cloud.launch(LaunchRequest("r", 2, "worker", "p3.2xlarge", "a", "spot", 2, "t2", ps_address="elsewhere:2222"))
    cloud.sleep(600)
    assert ModelTrainer(model, "r").observe(cloud.instances("r"), 600).loss == pytest.approx(model.loss(model.start))
    cloud.launch(LaunchRequest("r", 3, "worker", "p3.2xlarge", "a", "spot", 2, "t3", ps_address=ps.ps_address))
    cloud.sleep(600)
    assert ModelTrainer(model, "r").observe(cloud.instances("r"), 1200).loss < model.loss(model.start)


def test_restarted_controller_launches_nothing_twice(tmp_path) -> None:
    """A controller killed between writing a launch and marking it done (the worst moment) is
    resumed from the record: the launch is re-sent with its token (the cloud answers with the
    same instances), and the run ends as an uninterrupted one does."""
    prob = problem()
    zones = {"us-west-2a": [2] + [0] * 20, "us-west-2c": [0] + [4] * 20}
    whole, _ = loop(prob, zones)
    expected = whole.run()

    record = RunRecord(tmp_path)
    record.create({}, "r")
    first, cloud = loop(prob, zones, record=record)
    for _ in range(21):  # up to the notice at 300 s
        assert first.poll() is None
        cloud.sleep(15.0)
    launches = len([i for i in cloud.instances("r")])
    # the crash: the next launch is written, sent, and its outcome never recorded
    request = LaunchRequest(
        "r",
        first.step + 1,
        "worker",
        "p3.2xlarge",
        "us-west-2c",
        "spot",
        2,
        f"r-{first.step + 1}",
        ps_address=first.ps_address,
    )
    record.intend("r", request.step, "launch", request.to_dict())
    cloud.launch(request)
    second = Controller(
        prob,
        PLAN,
        make_policy("failover"),
        cloud,
        run_id="r",
        trainer=first.trainer,
        pools=first.pools,
        settings=first.settings,
        record=record,
    )
    second.resume(record.steps("r"), list(record.events("r")))
    assert all(s["status"] == "done" for s in record.steps("r"))
    outcome = second.run()
    ids = [i.instance_id for i in cloud.instances("r")]
    assert len(ids) == len(set(ids)) and len(ids) == launches + 2
    assert outcome.state == expected.state
    assert outcome.cost == pytest.approx(expected.cost, rel=0.02)
    record.close()


def test_record_dates_every_instance(tmp_path) -> None:
    """The record alone says when each instance launched, got its notice and ended (reclaimed or
    terminated by the controller): what a restarted controller and `run status` go by."""
    record = RunRecord(tmp_path)
    record.create({}, "r")
    controller, cloud = loop(problem(), {"us-west-2a": [2, 1] + [1] * 20, "us-west-2c": [0] + [4] * 20}, record=record)
    assert controller.run().state == "met"
    truth = {i.instance_id: (i.launched_s, i.notice_s, i.ended_s) for i in cloud.instances("r")}
    assert {i.instance_id: (i.launched_s, i.notice_s, i.ended_s) for i in record.instances("r")} == truth
    assert sum(n is not None for _, n, _ in truth.values()) == 1 and all(e is not None for *_, e in truth.values())
    record.close()


def test_window_starts_never_run_past_the_trace() -> None:
    traces = {"p3.2xlarge": [trace("a", [1] * 10)]}
    first, last = window_starts(traces, 5 * GAP)
    assert (first, last) == (0, 5)  # starts 0..4: ticks 4..9 are the last window
    with pytest.raises(InvalidInputError, match="do not cover a run"):
        window_starts(traces, 11 * GAP)


def test_run_once_keeps_its_offset_and_events() -> None:
    prob = problem()
    traces = {"p3.2xlarge": [trace("us-west-2a", [0, 0] + [2] * 20), trace("us-west-2c", [0, 0] + [4] * 20)]}
    run = run_once(prob, PLAN, traces, make_policy("failover"), 2, RunSettings())
    data = run.to_dict()
    assert data["offset"] == 2 and data["state"] == "met"
    assert data["events"][0]["kind"] == "launch" and data["events"][0]["role"] == "ps"
    assert math.isclose(data["events"][-1]["time_s"], run.outcome.end_s)


def test_progress_reports_by_file_and_http(tmp_path) -> None:
    """The protocol's two transports give the report back; a bad one is one clear error."""
    import http.server
    import threading

    from dnnprov.control.trainer import Report, read_report, write_report

    path = tmp_path / "progress.json"
    assert read_report(str(path)) is None
    report = Report(run="r", time_s=812.4, loss=1.93, step=1200)
    write_report(path, report)
    assert read_report(str(path)) == report
    body = path.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/progress" else 404)
            self.end_headers()
            self.wfile.write(body if self.path == "/progress" else b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        assert read_report(url + "/progress") == report
        assert read_report(url + "/none") is None
    finally:
        server.shutdown()
    path.write_text('{"time_s": "soon", "loss": 1}')
    with pytest.raises(InvalidInputError, match="time_s and loss"):
        read_report(str(path))


def test_none_policy_launches_the_plan_when_the_first_poll_comes_late() -> None:
    """On EC2 the controller's first poll comes a moment after the run's start (wall clock):
    `none` must still launch the plan then (it used to read `t == 0` as "the start")."""
    controller, cloud = loop(problem(), {"us-west-2a": [4] * 21, "us-west-2c": [4] * 21}, policy="none")
    cloud.sleep(0.004)
    outcome = controller.run()
    workers = [i for i in cloud.instances("r") if i.role == "worker"]
    assert len(workers) == PLAN.counts["p3.2xlarge"]
    assert outcome.state == "met"


def test_mpc_stops_nothing_for_a_refused_launch_and_asks_a_refused_pool_once_a_tick() -> None:
    """Both zones hold no spot p3.2xlarge in the run's window, but the model (fitted on a period
    where zone a had room) makes mpc want spot: at every try the launch is refused, and the
    on-demand workers it would replace are never stopped for it (no `policy` termination); mpc
    takes a refused pool as full for the rest of the model tick, so it asks each pool at most
    once a tick, where the loop's back-off alone would have it ask again after 15, 30, 60 s..."""
    prob = problem(hours=0.5)
    fit = {"p3.2xlarge": [trace("us-west-2a", [2] * 40), trace("us-west-2c", [0, 2] * 20)]}
    table = takeover_table(prob, PLAN, fit_availability(fit["p3.2xlarge"], cap=2))
    traces = {"p3.2xlarge": [trace("us-west-2a", [0] * 20), trace("us-west-2c", [0] * 20)]}
    run = run_once(prob, PLAN, traces, make_policy("mpc", table), 0, RunSettings(horizon=1.0))
    assert run.outcome.state == "met"
    refusals = [e for e in run.events if e.kind == "refused"]
    assert refusals and not [e for e in run.events if e.kind == "terminate" and e.detail["why"] == "policy"]
    per_tick = {(e.detail["pool"], int(e.time_s // GAP)) for e in refusals}
    assert len(per_tick) == len(refusals)  # one refusal per pool and model tick
    assert run.outcome.on_demand_launched == 2  # the two on-demand workers, launched once
    blind = make_policy("mpc", table)
    blind.refusal_ticks = 0  # type: ignore[attr-defined]  # the back-off alone
    assert run_once(prob, PLAN, traces, blind, 0, RunSettings(horizon=1.0)).outcome.refusals > len(refusals)
