"""A cloud replayed from aligned spot traces: what ``dnnprov simulate`` runs the loop on.

Spot capacity per pool follows :class:`dnnprov.control.clouds.capacity.CapacityBook` (launches
refused beyond capacity, a notice when capacity drops, the reclaim two minutes later);
on-demand and PS launches always succeed. The clock is simulated: :meth:`TraceCloud.sleep`
moves it and applies the notices and reclaims due on the way, at their exact times.
"""

from __future__ import annotations

from collections.abc import Sequence

from dnnprov.control.cloud import PS_PORT, Instance, LaunchOutcome, LaunchRequest
from dnnprov.control.clouds.capacity import CapacityBook, CapacityEvent
from dnnprov.errors import InvalidInputError


class TraceCloud:
    """One run's cloud: the pools of ``book``, its clock starting at 0."""

    def __init__(self, book: CapacityBook) -> None:
        self.book = book
        self._instances: dict[str, Instance] = {}
        self._by_token: dict[str, LaunchOutcome] = {}
        self.capacity_events: list[CapacityEvent] = []

    def now(self) -> float:
        return self.book.now_s

    def sleep(self, seconds: float) -> None:
        for event in self.book.advance(self.book.now_s + max(0.0, seconds)):
            self.capacity_events.append(event)
            instance = self._instances[event.instance_id]
            if event.kind == "notice":
                instance.notice_s = event.time_s
            elif instance.ended_s is None:
                instance.ended_s = event.time_s

    def next_change_s(self) -> float:
        """When capacity may next change or a reclaim is due (for callers that skip idle time)."""
        return self.book.next_change_s()

    def launch(self, request: LaunchRequest) -> LaunchOutcome:
        if request.token in self._by_token:
            return self._by_token[request.token]
        if request.count < 1:
            raise InvalidInputError("count", f"a launch asks for at least one instance, got {request.count}")
        granted = request.count
        pool = f"{request.type_name}@{request.zone}"
        if request.market == "spot":
            granted = self.book.grant(pool, 1, request.count)
            if granted == 0:
                outcome = LaunchOutcome(
                    error_code="InsufficientInstanceCapacity", message=f"no spot capacity in {pool} now"
                )
                self._by_token[request.token] = outcome
                return outcome
        made = []
        for _ in range(granted):
            instance_id = f"i-{len(self._instances) + 1:017x}"
            made.append(
                Instance(
                    instance_id=instance_id,
                    type_name=request.type_name,
                    zone=request.zone,
                    market=request.market,
                    role=request.role,
                    launched_s=self.now(),
                    step=request.step,
                    ps_address=f"{instance_id}:{PS_PORT}" if request.role == "ps" else request.ps_address,
                )
            )
            self._instances[instance_id] = made[-1]
        if request.market == "spot":
            self.book.add(pool, [i.instance_id for i in made])
        outcome = LaunchOutcome(instances=[Instance.from_dict(i.to_dict()) for i in made])
        self._by_token[request.token] = outcome
        return outcome

    def terminate(self, instance_ids: Sequence[str]) -> None:
        for instance_id in instance_ids:
            instance = self._instances.get(instance_id)
            if instance is not None and instance.ended_s is None:
                instance.ended_s = self.now()
                self.book.release(instance_id)

    def instances(self, run_id: str) -> list[Instance]:
        return [Instance.from_dict(i.to_dict()) for i in self._instances.values()]
