"""The cloud interface of the control loop: what it can observe and do, nothing more.

A cloud launches instances (refusing spot launches beyond capacity), terminates them, lists
the instances of a run with their state and any interruption notice, and keeps a clock.
Times are seconds since the run's start on the cloud's clock (:class:`Clock`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

#: The error codes a launch refusal carries (EC2's names).
CAPACITY_ERRORS = (
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "SpotMaxPriceTooLow",
    "MaxSpotInstanceCountExceeded",
)
THROTTLE_ERRORS = (
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "ServiceUnavailable",
    "InternalError",
    "Unavailable",
)
ROLES = ("worker", "ps")
MARKETS = ("spot", "on-demand")
#: The port a PS listens on; a PS's address (handed to every worker) is ``host:PS_PORT``.
PS_PORT = 2222


def pool_name(type_name: str, zone: str | None, market: str) -> str:
    """``type@zone`` of a spot pool (``type`` when the cloud picks the zone), ``type@on-demand``
    of an on-demand one. ``type`` is the run's type name: ``p3.2xlarge@eu-west-1`` for a type
    of a multi-region plan (docs/cloud.md, "Where a plan launches")."""
    if market != "spot":
        return f"{type_name}@on-demand"
    return f"{type_name}@{zone}" if zone else type_name


@dataclass
class Instance:
    """One instance of a run as the cloud reports it."""

    instance_id: str
    type_name: str
    zone: str | None
    market: str
    role: str
    launched_s: float
    step: int
    ps_address: str | None = None
    notice_s: float | None = None  # when the interruption notice came, if one did
    ended_s: float | None = None  # when it was gone (terminated or reclaimed)

    @property
    def pool(self) -> str:
        """The instance's pool (:func:`pool_name`)."""
        return pool_name(self.type_name, self.zone, self.market)

    def alive_at(self, t: float) -> bool:
        """Launched by ``t`` and not yet gone."""
        return self.launched_s <= t and (self.ended_s is None or t < self.ended_s)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (records, ``run status``)."""
        return {
            "instance_id": self.instance_id,
            "type": self.type_name,
            "zone": self.zone,
            "market": self.market,
            "role": self.role,
            "launched_s": self.launched_s,
            "step": self.step,
            "ps_address": self.ps_address,
            "notice_s": self.notice_s,
            "ended_s": self.ended_s,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Instance:
        """Inverse of :meth:`to_dict`."""
        return cls(
            instance_id=data["instance_id"],
            type_name=data["type"],
            zone=data["zone"],
            market=data["market"],
            role=data["role"],
            launched_s=float(data["launched_s"]),
            step=int(data["step"]),
            ps_address=data.get("ps_address"),
            notice_s=data.get("notice_s"),
            ended_s=data.get("ended_s"),
        )


@dataclass(frozen=True)
class LaunchRequest:
    """Launch ``count`` instances (all or as many as capacity allows, at least one)."""

    run_id: str
    step: int
    role: str
    type_name: str
    zone: str | None
    market: str
    count: int
    token: str  # idempotency: the same token launches once
    ps_address: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the record's intents)."""
        return {
            "run_id": self.run_id,
            "step": self.step,
            "role": self.role,
            "type": self.type_name,
            "zone": self.zone,
            "market": self.market,
            "count": self.count,
            "token": self.token,
            "ps_address": self.ps_address,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LaunchRequest:
        """Inverse of :meth:`to_dict`."""
        return cls(
            run_id=data["run_id"],
            step=int(data["step"]),
            role=data["role"],
            type_name=data["type"],
            zone=data["zone"],
            market=data["market"],
            count=int(data["count"]),
            token=data["token"],
            ps_address=data.get("ps_address"),
        )


@dataclass
class LaunchOutcome:
    """What a launch got: instances, or a refusal with the cloud's error code."""

    instances: list[Instance] = field(default_factory=list)
    error_code: str | None = None
    message: str = ""

    @property
    def refused_for_capacity(self) -> bool:
        """The pool had no room (or too little for the request's minimum)."""
        return self.error_code in CAPACITY_ERRORS

    @property
    def throttled(self) -> bool:
        """A transient error: the same launch may be retried later."""
        return self.error_code in THROTTLE_ERRORS


class Clock(Protocol):
    """Seconds on the cloud's clock (an epoch of its own) and a way to wait on it."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class WallClock:
    """The machine's clock (EC2)."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class Cloud(Protocol):
    """What the control loop needs of a cloud."""

    def now(self) -> float:
        """Seconds since the run's start."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of cloud time."""
        ...

    def launch(self, request: LaunchRequest) -> LaunchOutcome:
        """Launch, idempotent by ``request.token``."""
        ...

    def terminate(self, instance_ids: Sequence[str]) -> None:
        """Terminate the instances (already gone ones are ignored)."""
        ...

    def instances(self, run_id: str) -> list[Instance]:
        """Every instance of the run the cloud knows, with notices and ends."""
        ...
