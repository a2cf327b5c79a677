"""EC2 through boto3 as the control loop's cloud (AWS, or any endpoint such as the twin).

- **launch**: ``RunInstances`` (none when the run's instances already hold some tagged
  with the request's step: a launch re-sent after a restart, answered as EC2 answers its
  token, also on endpoints that ignore tokens) with ``MaxCount`` the count (``MinCount`` 1 on spot: as many as
  capacity allows; the count on-demand), the request's
  ClientToken (EC2 answers a repeated token with the instances of the first call), spot
  through ``InstanceMarketOptions``, the zone as placement, and tags ``dnnprov:run``,
  ``dnnprov:step``, ``dnnprov:role``, ``dnnprov:ps`` (the PS address handed to workers; also
  in the user data). Capacity and throttling errors come back as refusals (no retry here:
  the loop backs off per pool); other errors raise.
- **observe**: ``DescribeInstances`` by the run's tag, and ``DescribeSpotInstanceRequests``
  for notices (status ``marked-for-termination`` and its update time). Instances EC2 has
  forgotten are kept from the run record, so the run's history stays whole. An instance that
  ended while no controller watched (a restart) is dated by EC2's ``StateTransitionReason``
  (who ended it and when, to the second); a reclaim's notice came two minutes before it.
- **regions**: a type of a multi-region plan (``p3.2xlarge@eu-west-1``, docs/cloud.md "Where a
  plan launches") is launched in its region as its AWS type (``p3.2xlarge``), through that
  region's clients (:class:`dnnprov.cloud.launch.RegionalClients`, as ``apply``); a plain type
  name goes to the region of its pool's zone (``us-east-2b``: us-east-2; a type's pools may
  lie in several regions, as the real traces' do), else to the run's. The run's instances are
  listed, their notices read and their terminations sent in every region of the run (its own,
  its types' and its pools' zones'); an adopted instance is named as the run names its type
  there (``TYPE@REGION``).
- **clock**: the machine's (:class:`dnnprov.control.cloud.WallClock`) or the twin's
  (:class:`RemoteTwinClock`, read from the endpoint's ``/_twin/clock``).
"""

from __future__ import annotations

import base64
import json
import re
import time
import urllib.request
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import Any

from dnnprov.cloud.aws import CloudError, RetryPolicy
from dnnprov.cloud.export.placement import zone_region
from dnnprov.cloud.launch import RegionalClients
from dnnprov.control.cloud import (
    CAPACITY_ERRORS,
    PS_PORT,
    THROTTLE_ERRORS,
    Clock,
    Instance,
    LaunchOutcome,
    LaunchRequest,
    WallClock,
)
from dnnprov.control.clouds.capacity import NOTICE_S
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import split_region

#: Spot request status codes that mean "interrupted, reclaimed two minutes after this update".
INTERRUPTION_CODES = (
    "marked-for-termination",
    "marked-for-stop",
    "marked-for-hibernation",
    "instance-terminated-no-capacity",
    "instance-terminated-capacity-oversubscribed",
)
TAG_RUN, TAG_STEP, TAG_ROLE, TAG_PS = "dnnprov:run", "dnnprov:step", "dnnprov:role", "dnnprov:ps"
#: The image launched when none is given: a placeholder the twin and moto accept; real AWS
#: needs ``--image-id``.
PLACEHOLDER_IMAGE = "ami-12c6146b"
#: EC2's ``StateTransitionReason`` of an ended instance: who ended it, and when (UTC, to the second).
TRANSITION = re.compile(r"\b(User|Service) initiated \((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) GMT\)")


class RemoteTwinClock:
    """The EC2 twin's clock as a client reads it (docs/control.md): its time, and waits in it."""

    def __init__(self, endpoint_url: str, *, answered: bool = False) -> None:
        """``answered``: the endpoint was a twin before (a run's, resumed): failing now, it went away."""
        self.url = endpoint_url.rstrip("/")
        self.mode, self.speed = "accelerated", 1.0
        self._answered = answered
        state = self._get()
        self.mode, self.speed = str(state.get("mode")), float(state.get("speed") or 1.0)
        self._answered = True

    def _gone(self, exc: Exception) -> InvalidInputError:
        """The error of a call that failed: not a twin at first contact; later, the twin went away."""
        if not self._answered:
            return InvalidInputError("--endpoint-url", f"{self.url} is not an EC2 twin ({exc})")
        return InvalidInputError(
            "--endpoint-url",
            f"the EC2 twin at {self.url} stopped answering ({exc}); the run is kept: "
            "`dnnprov run resume RUN` goes on once it answers again",
        )

    def _get(self) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(f"{self.url}/_twin/clock", timeout=10) as answer:
                return dict(json.loads(answer.read()))
        except (OSError, ValueError) as exc:
            raise self._gone(exc) from None

    def now(self) -> float:
        return datetime.fromisoformat(str(self._get()["now"])).timestamp()

    def sleep(self, seconds: float) -> None:
        if self.mode == "stepped":
            body = json.dumps({"seconds": seconds}).encode()
            request = urllib.request.Request(
                f"{self.url}/_twin/advance", data=body, method="POST", headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=30):
                    return
            except (OSError, ValueError) as exc:
                raise self._gone(exc) from None
        time.sleep(max(0.0, seconds) / self.speed)


def is_twin(endpoint_url: str | None) -> bool:
    """Whether the endpoint is an EC2 twin (it answers ``/_twin/clock``)."""
    if not endpoint_url:
        return False
    try:
        RemoteTwinClock(endpoint_url)
    except InvalidInputError:
        return False
    return True


class Ec2Cloud:
    """One run's instances on EC2 (module docstring); ``start_epoch`` is the run's start on ``clock``.

    ``region`` is the run's (the PS's, and that of plain type names launched without a zone);
    ``types`` the run's type names, whose ``TYPE@REGION`` names add their regions to the run's
    and name the instances adopted there; ``zones`` its pools' zones, whose regions are the
    run's too (a zone that is not an AWS zone name is refused here, before any launch). A spot
    instance of a type in ``zoneless`` (whose pool names no zone: EC2 picks it) is of that pool
    wherever EC2 placed it."""

    def __init__(
        self,
        region: str,
        *,
        start_epoch: float,
        endpoint_url: str | None = None,
        clock: Clock | None = None,
        image_id: str = PLACEHOLDER_IMAGE,
        known: Sequence[Instance] = (),
        types: Sequence[str] = (),
        zones: Collection[str] = (),
        zoneless: Collection[str] = (),
    ) -> None:
        self.region, self.zoneless = region, frozenset(zoneless)
        self.aws = RegionalClients(region, endpoint_url=endpoint_url, retry=RetryPolicy(attempts=1))
        self.reader = RegionalClients(region, endpoint_url=endpoint_url)
        self.clock = clock or WallClock()
        self.start_epoch, self.image_id = start_epoch, image_id
        self.names: dict[tuple[str, str], str] = {}
        for name in types:
            aws, where = split_region(name)
            self.names.setdefault((aws, where or region), name)
        zone_regions = {zone_region(zone) for zone in zones}
        self.regions = sorted({region, *(where for _, where in self.names), *zone_regions})
        self.known: dict[str, Instance] = {i.instance_id: i for i in known}
        self.region_of: dict[str, str] = {i.instance_id: self.launch_region(i.type_name, i.zone) for i in known}
        self.ended_by_us: dict[str, float] = {}

    def launch_region(self, type_name: str, zone: str | None) -> str:
        """The region a run's type name launches in: its own (``TYPE@REGION``), else its zone's,
        else the run's."""
        return split_region(type_name)[1] or (zone_region(zone) if zone else self.region)

    def _name(self, aws_type: str, region: str) -> str:
        """The run's name of an AWS type found in ``region`` (``TYPE@REGION`` where the run names it so)."""
        return self.names.get((aws_type, region), aws_type)

    def now(self) -> float:
        return self.since_start(self.clock.now())

    def since_start(self, epoch: float) -> float:
        """Seconds since the run's start of an epoch time, to the microsecond (clocks and EC2's
        timestamps carry no more; without the rounding, 1800 s since the start would read
        1799.9999998 from epochs of 1.7e9 and a poll would miss what happened at it)."""
        return round(epoch - self.start_epoch, 6)

    def sleep(self, seconds: float) -> None:
        self.clock.sleep(seconds)

    def launch(self, request: LaunchRequest) -> LaunchOutcome:
        tags = [
            {"Key": TAG_RUN, "Value": request.run_id},
            {"Key": TAG_STEP, "Value": str(request.step)},
            {"Key": TAG_ROLE, "Value": request.role},
        ]
        if request.ps_address:
            tags.append({"Key": TAG_PS, "Value": request.ps_address})
        aws_type = split_region(request.type_name)[0]
        region = self.launch_region(request.type_name, request.zone)
        params: dict[str, Any] = {
            "ImageId": self.image_id,
            "InstanceType": aws_type,
            "MinCount": 1 if request.market == "spot" else request.count,
            "MaxCount": request.count,
            "ClientToken": request.token,
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}],
            "UserData": base64.b64encode(
                json.dumps({"run": request.run_id, "role": request.role, "ps": request.ps_address}).encode()
            ).decode(),
        }
        if request.zone:
            params["Placement"] = {"AvailabilityZone": request.zone}
        if request.market == "spot":
            params["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
            }
        sent = [i for i in self.known.values() if i.step == request.step and i.role == request.role]
        if sent:  # re-sent by a restarted controller that found the step's instances by tag
            return LaunchOutcome(instances=sent)
        now = self.now()
        try:
            answer = self.aws.for_region(region).call("ec2", "RunInstances", **params)
        except CloudError as exc:
            if exc.code in CAPACITY_ERRORS or exc.code in THROTTLE_ERRORS:
                return LaunchOutcome(error_code=exc.code, message=exc.problem)
            raise
        made = []
        for raw in answer.get("Instances", []):
            instance_id = raw["InstanceId"]
            self.region_of[instance_id] = region
            if instance_id in self.known:
                made.append(self.known[instance_id])
                continue
            address = f"{raw.get('PrivateIpAddress') or instance_id}:{PS_PORT}" if request.role == "ps" else None
            made.append(
                Instance(
                    instance_id=instance_id,
                    type_name=request.type_name,
                    zone=request.zone
                    if request.market == "spot"
                    else raw.get("Placement", {}).get("AvailabilityZone") or request.zone,
                    market=request.market,
                    role=request.role,
                    launched_s=now,
                    step=request.step,
                    ps_address=address or request.ps_address,
                )
            )
            self.known[instance_id] = made[-1]
        return LaunchOutcome(instances=made)

    def terminate(self, instance_ids: Sequence[str]) -> None:
        ids = [i for i in instance_ids if i]
        if not ids:
            return
        now = self.now()
        by_region: dict[str, list[str]] = {}
        for i in ids:
            by_region.setdefault(self.region_of.get(i, self.region), []).append(i)
        for region, some in sorted(by_region.items()):
            self.reader.for_region(region).call("ec2", "TerminateInstances", InstanceIds=some)
        for i in ids:
            self.ended_by_us.setdefault(i, now)

    def instances(self, run_id: str) -> list[Instance]:
        now = self.now()
        seen: dict[str, dict[str, Any]] = {}
        notices: dict[str, float] = {}
        for region in self.regions:
            here = {}
            for reservation in self.reader.for_region(region).pages(
                "ec2", "DescribeInstances", "Reservations", Filters=[{"Name": f"tag:{TAG_RUN}", "Values": [run_id]}]
            ):
                for raw in reservation.get("Instances", []):
                    here[raw["InstanceId"]] = raw
                    self.region_of[raw["InstanceId"]] = region
            notices.update(
                self._notices(region, [i for i, raw in here.items() if raw.get("InstanceLifecycle") == "spot"])
            )
            seen.update(here)
        for instance_id, raw in seen.items():
            instance = self.known.get(instance_id) or self._adopt(raw, self.region_of[instance_id])
            self.known[instance_id] = instance
            gone = raw.get("State", {}).get("Name") in ("shutting-down", "terminated", "stopped", "stopping")
            by, when = self._transition(raw) if gone and instance.ended_s is None else (None, None)
            notice = notices.get(instance_id)
            if notice is not None and instance.notice_s is None:
                if by == "Service" and when is not None:
                    notice = min(notice, when - NOTICE_S)  # seen first after its reclaim (a restart)
                instance.notice_s = notice
            if gone and instance.ended_s is None:
                instance.ended_s = self._ended(instance, by, when, now)
        return list(self.known.values())

    def _ended(self, instance: Instance, by: str | None, when: float | None, now: float) -> float:
        """When a gone instance ended: our termination's time, unless EC2 says it was gone well
        before our call (a termination re-sent by a restarted controller); a reclaim's two
        minutes after its notice; else EC2's own time of the change; else now."""
        ours = self.ended_by_us.get(instance.instance_id)
        if ours is not None and (when is None or when >= ours - 1.0):
            return ours
        if instance.notice_s is not None and by != "User":
            return instance.notice_s + NOTICE_S
        return when if when is not None else now

    def _transition(self, raw: dict[str, Any]) -> tuple[str | None, float | None]:
        """Who ended an instance and when, from EC2's ``StateTransitionReason``
        (``User initiated (2023-08-27 00:25:00 GMT)``, ``Service initiated (...)``): what a
        controller restarted after the end has to go by (the time is to the second)."""
        found = TRANSITION.search(raw.get("StateTransitionReason") or "")
        if found is None:
            return None, None
        moment = datetime.strptime(found.group(2), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        return found.group(1), self.since_start(moment.timestamp())

    def _adopt(self, raw: dict[str, Any], region: str) -> Instance:
        """An instance of the run this process did not launch (a restart), found in ``region``: from its tags."""
        tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
        role = tags.get(TAG_ROLE, "worker")
        launched = raw.get("LaunchTime")
        launched_s = self.since_start(launched.timestamp()) if isinstance(launched, datetime) else self.now()
        address = f"{raw.get('PrivateIpAddress') or raw['InstanceId']}:{PS_PORT}" if role == "ps" else tags.get(TAG_PS)
        name = self._name(raw["InstanceType"], region)
        market = "spot" if raw.get("InstanceLifecycle") == "spot" else "on-demand"
        zone = raw.get("Placement", {}).get("AvailabilityZone")
        return Instance(
            instance_id=raw["InstanceId"],
            type_name=name,
            zone=None if market == "spot" and name in self.zoneless else zone,
            market=market,
            role=role,
            launched_s=max(0.0, launched_s),
            step=int(tags.get(TAG_STEP, "0") or 0),
            ps_address=address,
        )

    def _notices(self, region: str, instance_ids: list[str]) -> dict[str, float]:
        """Notice times of spot instances: the update time of an interruption status, either
        ``marked-for-termination`` or EC2's documented ``instance-terminated-no-capacity``
        (given at the notice, the instance still running for two minutes). Terminations
        by the user (``instance-terminated-by-user``) are no notice."""
        if not instance_ids:
            return {}
        try:
            answer = self.reader.for_region(region).call(
                "ec2", "DescribeSpotInstanceRequests", Filters=[{"Name": "instance-id", "Values": instance_ids}]
            )
        except CloudError:
            return {}
        out: dict[str, float] = {}
        for request in answer.get("SpotInstanceRequests", []):
            status = request.get("Status", {})
            code, when = status.get("Code", ""), status.get("UpdateTime")
            if code in INTERRUPTION_CODES and isinstance(when, datetime):
                out.setdefault(request.get("InstanceId", ""), self.since_start(when.timestamp()))
        return out
