"""The EC2 twin (dnnprov/control/twin/server.py) with boto3 on loopback, against the trace cloud.

Each test runs a twin in front of the session's moto server (tests/conftest_aws.py, state
reset per test), mostly on a stepped clock, with small hand-made traces; the agreement test
also runs on the real 2023-08-27 16-node traces when ../shared/data holds them.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from dnnprov.cli.cloud import twin as cli_twin
from dnnprov.control.cloud import LaunchRequest
from dnnprov.control.clouds.capacity import CapacityBook, PoolSpec
from dnnprov.control.clouds.trace import TraceCloud
from dnnprov.control.twin.server import DEFAULT_BASE, NOTICE_STATUSES, Twin, trace_pools
from dnnprov.errors import InvalidInputError
from dnnprov.problems.interruption import Trace

pytest_plugins = ["conftest_aws"]

REPO = Path(__file__).resolve().parents[2]
REAL_TRACES = REPO.parent / "shared/data/spot-traces/availability/16-node/aws-08-27-2023"
AMI = "ami-12c6146b"  # an image moto knows
P3 = "p3.2xlarge"


def hand_trace(zone: str, alive: list[int], gap_s: float = 300.0) -> Trace:
    """A small trace whose name carries its zone, as the real files' names do."""
    return Trace(path=f"{zone}_hand.json", gap_s=gap_s, alive=np.array(alive, dtype=np.int64))


def ec2_client(url: str, region: str = "us-west-2") -> Any:
    """A boto3 EC2 client of the twin, botocore's own retries off (each call is one request)."""
    return boto3.client("ec2", endpoint_url=url, region_name=region, config=Config(retries={"total_max_attempts": 1}))


def spot(
    client: Any, low: int, high: int, zone: str | None = "us-west-2a", type_name: str = P3, **extra: Any
) -> list[str]:
    """Launch spot instances; their ids."""
    placement = {"Placement": {"AvailabilityZone": zone}} if zone else {}
    answer = client.run_instances(
        ImageId=AMI,
        InstanceType=type_name,
        MinCount=low,
        MaxCount=high,
        InstanceMarketOptions={"MarketType": "spot"},
        **placement,
        **extra,
    )
    return [i["InstanceId"] for i in answer["Instances"]]


def refused_code(call: Callable[[], object]) -> tuple[str, int]:
    """The botocore error code and HTTP status of a call that must fail."""
    with pytest.raises(ClientError) as caught:
        call()
    return caught.value.response["Error"]["Code"], caught.value.response["ResponseMetadata"]["HTTPStatusCode"]


def states(client: Any, ids: list[str]) -> dict[str, str]:
    """Instance id -> its state in DescribeInstances."""
    answer = client.describe_instances(InstanceIds=ids)
    return {i["InstanceId"]: i["State"]["Name"] for r in answer["Reservations"] for i in r["Instances"]}


def at(seconds: float) -> datetime:
    """The UTC instant of twin time ``seconds``."""
    return DEFAULT_BASE + timedelta(seconds=seconds)


@pytest.fixture
def make_twin(moto_url: str) -> Iterator[Callable[..., Twin]]:
    """Start twins in front of the test's moto server (stepped clock unless told); stops them."""
    started: list[Twin] = []

    def make(pools: list[PoolSpec], **options: Any) -> Twin:
        options.setdefault("mode", "stepped")
        options.setdefault("region", "us-west-2")
        started.append(Twin(pools, upstream=moto_url, **options).start())
        return started[-1]

    yield make
    for twin in started:
        twin.stop()


def test_spot_launch_beyond_capacity_is_refused(make_twin):
    twin = make_twin(trace_pools([(P3, hand_trace("us-west-2a", [2, 2, 2]))], offset=0))
    ec2 = ec2_client(twin.url)
    assert len(spot(ec2, 2, 2)) == 2
    assert refused_code(lambda: spot(ec2, 1, 1)) == ("InsufficientInstanceCapacity", 500)
    # a spot type or zone the twin has no pool for is refused the same way; a zone-less launch
    # goes to the type's pool in the client's region (full here)
    assert refused_code(lambda: spot(ec2, 1, 1, type_name="g4dn.xlarge"))[0] == "InsufficientInstanceCapacity"
    assert refused_code(lambda: spot(ec2, 1, 1, zone="us-west-2b"))[0] == "InsufficientInstanceCapacity"
    assert refused_code(lambda: spot(ec2, 1, 1, zone=None))[0] == "InsufficientInstanceCapacity"
    # spot launches by other calls would bypass the traces: refused, not granted without bound
    assert refused_code(
        lambda: ec2.request_spot_instances(InstanceCount=1, LaunchSpecification={"ImageId": AMI, "InstanceType": P3})
    ) == ("UnsupportedOperation", 400)
    running = [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]
    assert len(running) == 2 and {i["InstanceLifecycle"] for i in running} == {"spot"}


def test_a_minimum_above_the_free_capacity_is_refused_whole(make_twin):
    twin = make_twin(trace_pools([(P3, hand_trace("us-west-2a", [3, 3]))], offset=0))
    ec2 = ec2_client(twin.url)
    assert refused_code(lambda: spot(ec2, 4, 6))[0] == "InsufficientInstanceCapacity"
    assert ec2.describe_instances()["Reservations"] == []


def test_partial_grant_launches_the_free_capacity(make_twin):
    twin = make_twin(trace_pools([(P3, hand_trace("us-west-2a", [5, 5]))], offset=0))
    ec2 = ec2_client(twin.url)
    assert len(spot(ec2, 1, 2)) == 2
    more = spot(ec2, 1, 10, zone=None)  # the type's pool in us-west-2: 3 free
    assert len(more) == 3
    assert set(states(ec2, more).values()) == {"running"}
    assert [p["live"] for p in twin.state()["pools"]] == [5]


def test_client_token_launches_once(make_twin):
    twin = make_twin(trace_pools([(P3, hand_trace("us-west-2a", [0, 4, 4]))], offset=0))
    ec2 = ec2_client(twin.url)
    # a refused launch binds no token (EC2 keeps the answers of successful requests only) ...
    assert refused_code(lambda: spot(ec2, 1, 2, ClientToken="run-1-step-0"))[0] == "InsufficientInstanceCapacity"
    twin.advance(300)
    # ... so its retry is evaluated anew, and from then on the token returns the first answer
    first = spot(ec2, 1, 2, ClientToken="run-1-step-0")
    again = spot(ec2, 1, 2, ClientToken="run-1-step-0")
    assert len(first) == 2 and again == first
    everything = [i["InstanceId"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]
    assert sorted(everything) == sorted(first)
    assert refused_code(lambda: spot(ec2, 1, 3, ClientToken="run-1-step-0")) == ("IdempotentParameterMismatch", 400)
    on_demand = dict(ImageId=AMI, InstanceType="m5.xlarge", MinCount=1, MaxCount=1, ClientToken="ps-1")
    assert (
        ec2.run_instances(**on_demand)["Instances"][0]["InstanceId"]
        == ec2.run_instances(**on_demand)["Instances"][0]["InstanceId"]
    )
    assert len(twin.instances()) == 3


def test_capacity_drop_notice_then_reclaim_120_s_later(make_twin):
    twin = make_twin(trace_pools([(P3, hand_trace("us-west-2a", [2, 1, 1, 1]))], offset=0))
    ec2 = ec2_client(twin.url)
    tags = [
        {"ResourceType": "spot-instances-request", "Tags": [{"Key": "dnnprov:run", "Value": "r1"}]},
        {"ResourceType": "instance", "Tags": [{"Key": "dnnprov:run", "Value": "r1"}]},
    ]
    (old,) = spot(ec2, 1, 1, TagSpecifications=tags)
    twin.advance(10)
    (new,) = spot(ec2, 1, 1, TagSpecifications=tags)
    twin.advance(290)  # the drop at 300 s: the newest launch is notified
    requests = {
        r["InstanceId"]: r
        for r in ec2.describe_spot_instance_requests(Filters=[{"Name": "tag:dnnprov:run", "Values": ["r1"]}])[
            "SpotInstanceRequests"
        ]
    }
    assert set(requests) == {old, new}
    assert requests[new]["Status"]["Code"] == "marked-for-termination"
    assert requests[new]["Status"]["UpdateTime"] == at(300)
    assert requests[old]["Status"]["Code"] == "fulfilled" and requests[old]["State"] == "active"
    assert requests[new]["LaunchSpecification"]["InstanceType"] == P3
    assert requests[new]["LaunchedAvailabilityZone"] == "us-west-2a"
    assert requests[new]["SpotInstanceRequestId"] == "sir-" + new.removeprefix("i-")
    assert requests[new]["Tags"] == [{"Key": "dnnprov:run", "Value": "r1"}]
    twin.advance(119.5)
    assert states(ec2, [old, new]) == {old: "running", new: "running"}
    twin.advance(0.5)
    assert states(ec2, [old, new]) == {old: "running", new: "terminated"}
    described = {i["InstanceId"]: i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]}
    assert (described[old]["LaunchTime"], described[new]["LaunchTime"]) == (at(0), at(10))  # twin time
    assert described[new]["StateReason"]["Code"] == "Server.SpotInstanceTermination"
    assert described[new]["StateTransitionReason"] == "Service initiated (2023-08-27 00:07:00 GMT)"
    (closed,) = ec2.describe_spot_instance_requests(Filters=[{"Name": "instance-id", "Values": [new]}])[
        "SpotInstanceRequests"
    ]
    assert closed["State"] == "closed" and closed["Status"]["Code"] == "instance-terminated-no-capacity"
    assert closed["Status"]["UpdateTime"] == at(420)
    mine = {i.instance_id: i for i in twin.instances()}
    assert (mine[new].launched_s, mine[new].notice_s, mine[new].ended_s, mine[new].ended_by) == (
        10.0,
        300.0,
        420.0,
        "no-capacity",
    )
    assert mine[old].tags == {"dnnprov:run": "r1"} and mine[old].ended_s is None
    state = json.loads(urllib.request.urlopen(f"{twin.url}/_twin/state", timeout=5).read())
    assert state["clock"]["t"] == 420 and state["clock"]["now"] == "2023-08-27T00:07:00.000Z"
    assert state["pools"][0] | {"trace": None} == {
        "name": "p3.2xlarge@us-west-2a",
        "type": P3,
        "zone": "us-west-2a",
        "trace": None,
        "offset": 0,
        "price_per_h": 0.0,
        "capacity": 1,
        "live": 1,
        "notified": 0,
    }
    assert {i["instance_id"]: i["reclaim_s"] for i in state["instances"]} == {old: None, new: 420.0}


def test_notice_status_as_ec2_documents_it_for_terminating_instances(make_twin):
    """EC2's user guide ("Spot request status", Fulfilled-terminal): an instance that terminates
    on interruption gets instance-terminated-no-capacity (closed) at once, not
    marked-for-termination, and stays running for the two minutes."""
    twin = make_twin(
        trace_pools([(P3, hand_trace("us-west-2a", [1, 0, 0]))], offset=0),
        notice_status="instance-terminated-no-capacity",
    )
    ec2 = ec2_client(twin.url)
    (only,) = spot(ec2, 1, 1)
    twin.advance(300)
    (request,) = ec2.describe_spot_instance_requests()["SpotInstanceRequests"]
    assert (request["State"], request["Status"]["Code"], request["Status"]["UpdateTime"]) == (
        "closed",
        "instance-terminated-no-capacity",
        at(300),
    )
    assert states(ec2, [only]) == {only: "running"}
    twin.advance(120)
    (request,) = ec2.describe_spot_instance_requests()["SpotInstanceRequests"]
    assert request["Status"]["UpdateTime"] == at(300) and states(ec2, [only]) == {only: "terminated"}
    assert cli_twin.NOTICE_STATUSES == NOTICE_STATUSES


def test_a_user_termination_frees_capacity_and_closes_the_request(make_twin):
    twin = make_twin(trace_pools([(P3, hand_trace("us-west-2a", [1, 1]))], offset=0))
    ec2 = ec2_client(twin.url)
    (first,) = spot(ec2, 1, 1)
    twin.advance(30)
    ec2.terminate_instances(InstanceIds=[first])
    (second,) = spot(ec2, 1, 1)
    codes = {
        r["InstanceId"]: (r["State"], r["Status"]["Code"], r["Status"]["UpdateTime"])
        for r in ec2.describe_spot_instance_requests()["SpotInstanceRequests"]
    }
    assert codes == {first: ("closed", "instance-terminated-by-user", at(30)), second: ("active", "fulfilled", at(30))}
    (gone,) = ec2.describe_instances(InstanceIds=[first])["Reservations"][0]["Instances"]
    assert gone["StateReason"]["Code"] == "Client.UserInitiatedShutdown" and gone["LaunchTime"] == at(0)
    assert [(i.ended_s, i.ended_by) for i in twin.instances()] == [(30.0, "user"), (None, None)]


def test_describe_spot_instance_requests_refuses_what_ec2_refuses(make_twin):
    twin = make_twin(trace_pools([(P3, hand_trace("us-west-2a", [1, 1]))], offset=0))
    ec2 = ec2_client(twin.url)
    (only,) = spot(ec2, 1, 1)
    assert refused_code(
        lambda: ec2.describe_spot_instance_requests(Filters=[{"Name": "no-such-filter", "Values": ["x"]}])
    ) == ("InvalidParameterValue", 400)
    assert (
        refused_code(lambda: ec2.describe_spot_instance_requests(SpotInstanceRequestIds=["sir-00000000"]))[0]
        == "InvalidSpotInstanceRequestID.NotFound"
    )
    sir = "sir-" + only.removeprefix("i-")
    assert [
        r["InstanceId"]
        for r in ec2.describe_spot_instance_requests(SpotInstanceRequestIds=[sir])["SpotInstanceRequests"]
    ] == [only]
    assert ec2_client(twin.url, "us-east-1").describe_spot_instance_requests()["SpotInstanceRequests"] == []


def test_on_demand_is_never_refused(make_twin):
    twin = make_twin(trace_pools([(P3, hand_trace("us-west-2a", [0, 0]))], offset=0))
    ec2 = ec2_client(twin.url)
    assert refused_code(lambda: spot(ec2, 1, 1))[0] == "InsufficientInstanceCapacity"
    for _ in range(3):
        answer = ec2.run_instances(
            ImageId=AMI, InstanceType=P3, MinCount=1, MaxCount=4, Placement={"AvailabilityZone": "us-west-2a"}
        )
        assert len(answer["Instances"]) == 4  # EC2 launches MaxCount when it can (moto: MinCount)
        assert {i["LaunchTime"] for i in answer["Instances"]} == {at(0)}
    assert [i.market for i in twin.instances()] == ["on-demand"] * 12
    assert ec2.describe_spot_instance_requests()["SpotInstanceRequests"] == []


def test_accelerated_clock_reclaims_without_any_request(make_twin, moto_url):
    """At 2,000 twin seconds per wall second the drop at 6,000 s (3 wall seconds after the
    start, room for a slow launch) and its reclaim at 6,120 s come with no request to the
    twin: its clock thread terminates the instance in moto."""
    twin = make_twin(
        trace_pools([(P3, hand_trace("us-west-2a", [1] * 20 + [0] * 20))], offset=0), mode="accelerated", speed=2000.0
    )
    (only,) = spot(ec2_client(twin.url), 1, 1)
    moto = ec2_client(moto_url)  # asked directly: no request reaches the twin
    deadline = time.monotonic() + 30
    while states(moto, [only])[only] != "terminated" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert states(moto, [only])[only] == "terminated"
    (instance,) = twin.instances()
    assert (instance.notice_s, instance.ended_s) == (6000.0, 6120.0)
    assert json.loads(urllib.request.urlopen(f"{twin.url}/_twin/clock", timeout=5).read())["mode"] == "accelerated"


# ---------------------------------------------------------------- the twin and the trace cloud agree
def _drive(twin: Twin, cloud: TraceCloud, pools: list[PoolSpec], steps: int, step_s: float) -> None:
    """The same launches, terminations and waits on both clouds; each launch's outcome must agree."""
    clients = {region: ec2_client(twin.url, region) for region in {p.zone[:-1] for p in pools}}
    for step in range(steps):
        for k, pool in enumerate(pools):
            want = 1 + (step + k) % 6
            request = LaunchRequest(
                run_id="r",
                step=step,
                role="worker",
                type_name=pool.type_name,
                zone=pool.zone,
                market="spot",
                count=want,
                token=f"{step}-{k}",
            )
            outcome = cloud.launch(request)
            try:
                got = len(
                    spot(
                        clients[pool.zone[:-1]],
                        1,
                        want,
                        zone=pool.zone,
                        type_name=pool.type_name,
                        ClientToken=f"{step}-{k}",
                    )
                )
            except ClientError as exc:
                assert outcome.error_code == exc.response["Error"]["Code"] == "InsufficientInstanceCapacity"
                continue
            assert len(outcome.instances) == got, (step, pool.name)
            if step % 3 == 2:  # let go of the pool's oldest untouched instance
                _terminate_oldest(twin, cloud, pool)
        twin.advance(step_s)
        cloud.sleep(step_s)
        assert twin.now() == cloud.now()


def _terminate_oldest(twin: Twin, cloud: TraceCloud, pool: PoolSpec) -> None:
    """Terminate, in each cloud, one live un-notified instance of the pool launched first (the
    clouds name instances differently; instances launched together are interchangeable)."""

    def oldest(instances: list) -> Any:
        live = [i for i in instances if i.pool == pool.name and i.notice_s is None and i.ended_s is None]
        return min(live, key=lambda i: i.launched_s, default=None)

    mine, theirs = oldest(twin.instances()), oldest(cloud.instances("r"))
    assert (mine is None) == (theirs is None)
    if mine is not None:
        assert mine.launched_s == theirs.launched_s
        ec2_client(twin.url, pool.zone[:-1]).terminate_instances(InstanceIds=[mine.instance_id])
        cloud.terminate([theirs.instance_id])


def _story(instances: list, pools: list[PoolSpec]) -> Counter:
    names = {p.name for p in pools}
    return Counter((i.pool, i.launched_s, i.notice_s, i.ended_s) for i in instances if i.pool in names)


def _check_agreement(twin: Twin, cloud: TraceCloud, pools: list[PoolSpec]) -> None:
    mine, theirs = twin.capacity_events(), cloud.capacity_events
    launched = {i.instance_id: i.launched_s for i in twin.instances()}
    launched_there = {i.instance_id: i.launched_s for i in cloud.instances("r")}
    assert Counter((e.time_s, e.kind, e.pool, launched[e.instance_id]) for e in mine) == Counter(
        (e.time_s, e.kind, e.pool, launched_there[e.instance_id]) for e in theirs
    )
    assert _story(twin.instances(), pools) == _story(cloud.instances("r"), pools)
    for region in {p.zone[:-1] for p in pools}:  # moto holds what the twin says
        mine = {i.instance_id: i for i in twin.instances() if i.region == region}
        if mine:
            assert {k: v == "terminated" for k, v in states(ec2_client(twin.url, region), list(mine)).items()} == {
                k: i.ended_s is not None for k, i in mine.items()
            }


def test_twin_and_trace_cloud_tell_the_same_story_on_hand_made_traces(make_twin):
    pools = trace_pools(
        [
            (P3, hand_trace("us-west-2a", [2, 4, 1, 0, 3, 6, 6, 2, 2, 5, 1, 1, 4])),
            (P3, hand_trace("us-west-2b", [6, 1, 1, 3, 0, 0, 2, 6, 6, 1, 3, 0, 2])),
            ("g4dn.xlarge", hand_trace("us-west-2a", [1, 1, 0, 2, 2, 2, 0, 1, 3, 3, 0, 1, 1])),
        ],
        offset=1,
        horizon_s=3000,
    )
    twin = make_twin(pools)
    cloud = TraceCloud(CapacityBook(pools))
    _drive(twin, cloud, pools, steps=17, step_s=170.0)  # 170 s steps: boundaries fall inside steps
    assert any(e.kind == "reclaim" for e in cloud.capacity_events)
    _check_agreement(twin, cloud, pools)


@pytest.mark.skipif(not REAL_TRACES.is_dir(), reason=f"real spot traces absent: {REAL_TRACES} (beside the repository)")
def test_twin_and_trace_cloud_tell_the_same_story_on_real_traces(make_twin):
    """p3.2xlarge's three 16-node pools of 2023-08-27, from tick 3 (us-west-2c grows to 16,
    us-east-2b drops 9 -> 7 -> 16 -> 6, us-west-2a starts from 0) for two hours."""
    files = sorted(REAL_TRACES.glob("*_v100_1.json"))
    assert len(files) == 3, files
    pools = trace_pools([(P3, f) for f in files], offset=3, horizon_s=7200)
    twin = make_twin(pools)
    cloud = TraceCloud(CapacityBook(pools))
    _drive(twin, cloud, pools, steps=40, step_s=170.0)
    assert any(e.kind == "reclaim" for e in cloud.capacity_events)
    _check_agreement(twin, cloud, pools)


# ---------------------------------------------------------------- pools and options refused
def test_trace_pools_refuse_bad_windows_and_files(tmp_path):
    short = hand_trace("us-west-2a", [1, 2, 3, 4])
    assert [p.name for p in trace_pools([(P3, short)], offset=3)] == ["p3.2xlarge@us-west-2a"]
    with pytest.raises(InvalidInputError, match=r"runs past the trace's end \(4 ticks of 300 s; offsets 0..1 fit\)"):
        trace_pools([(P3, short)], offset=2, horizon_s=600)
    with pytest.raises(InvalidInputError, match="no zone in the file name"):
        trace_pools([(P3, Trace(path="v100.json", gap_s=300.0, alive=np.array([1, 1])))], offset=0)
    with pytest.raises(InvalidInputError, match="share one gap_seconds"):
        trace_pools([(P3, short), (P3, hand_trace("us-west-2b", [1, 1], gap_s=60.0))], offset=0)
    with pytest.raises(InvalidInputError, match="a second trace for pool p3.2xlarge@us-west-2a"):
        trace_pools([(P3, short), (P3, short)], offset=0)
    with pytest.raises(InvalidInputError, match="offset"):
        trace_pools([(P3, short)], offset=-1)
    with pytest.raises(InvalidInputError, match="upstream"):
        Twin([], upstream="http://ec2.us-east-1.amazonaws.com:80")
    with pytest.raises(InvalidInputError, match="mode"):
        Twin([], mode="fast")


def test_past_the_traces_end_spot_launches_are_refused(make_twin):
    twin = make_twin(trace_pools([(P3, hand_trace("us-west-2a", [3, 3]))], offset=0))
    ec2 = ec2_client(twin.url)
    twin.advance(600)  # the trace covers 0..600 s
    assert refused_code(lambda: spot(ec2, 1, 1))[0] == "InsufficientInstanceCapacity"
    assert twin.state()["pools"][0]["capacity"] is None
    assert len(ec2.run_instances(ImageId=AMI, InstanceType=P3, MinCount=1, MaxCount=1)["Instances"]) == 1


def test_twin_endpoints_answer_json(make_twin):
    twin = make_twin([])
    advance = urllib.request.Request(f"{twin.url}/_twin/advance", data=b'{"seconds": 90}', method="POST")
    assert json.loads(urllib.request.urlopen(advance, timeout=5).read())["t"] == 90
    bad = urllib.request.Request(f"{twin.url}/_twin/advance", data=b'{"seconds": -1}', method="POST")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(bad, timeout=5)
    assert caught.value.code == 400 and "seconds" in json.loads(caught.value.read())["error"]
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{twin.url}/_twin/nothing", timeout=5)
    assert caught.value.code == 404
    assert json.loads(urllib.request.urlopen(f"{twin.url}/_twin/instances", timeout=5).read()) == []


# ---------------------------------------------------------------- the command
def _write_trace(path: Path, alive: list[int]) -> Path:
    path.write_text(json.dumps({"metadata": {"gap_seconds": 300}, "data": alive}))
    return path


def test_cli_prints_its_line_serves_and_stops_on_sigterm(tmp_path, aws_env):
    trace = _write_trace(tmp_path / "us-west-2a_v100_1.json", [2, 2, 0, 0])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dnnprov",
            "twin",
            "--trace",
            f"{P3}={trace}",
            "--offset",
            "1",
            "--stepped",
            "--region",
            "us-west-2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout=60)
        assert lines and lines[0].endswith("\n"), proc.stderr.read() if proc.poll() is not None else "no line in 60 s"
        ready = json.loads(lines[0])
        assert ready["url"].startswith("http://127.0.0.1:") and ready["clock"]["t"] == 0
        assert ready["clock"]["mode"] == "stepped" and ready["clock"]["now"] == "2023-08-27T00:00:00.000Z"
        assert [(p["name"], p["capacity"]) for p in ready["pools"]] == [("p3.2xlarge@us-west-2a", 2)]
        assert len(spot(ec2_client(ready["url"]), 1, 5)) == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert proc.stdout.read() == "" and proc.stderr.read() == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.parametrize(
    "options, field",
    [
        (["--offset", "3", "--horizon-s", "600"], "runs past the trace's end"),
        (["--offset", "0", "--speed", "0"], "--speed"),
        (["--offset", "0", "--region", "mars-1"], "--region"),
        (["--offset", "0", "--base", "2023-08-27T00:00:00"], "--base"),
        (["--offset", "0", "--port", "70000"], "--port"),
    ],
)
def test_cli_bad_options_are_one_line_and_exit_2(tmp_path, options, field):
    """Each bad option is one error line naming it, exit 2, nothing on standard output."""
    trace = _write_trace(tmp_path / "us-west-2a_v100_1.json", [2, 2, 0, 0])
    run = subprocess.run(
        [sys.executable, "-m", "dnnprov", "twin", "--trace", f"{P3}={trace}", *options],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("dnnprov: error: ") and field in run.stderr


def test_cli_port_in_use_is_one_line(tmp_path):
    trace = _write_trace(tmp_path / "us-west-2a_v100_1.json", [2, 2])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "dnnprov",
                "twin",
                "--trace",
                f"{P3}={trace}",
                "--offset",
                "0",
                "--port",
                str(taken.getsockname()[1]),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("dnnprov: error: --port: cannot listen on 127.0.0.1:")
