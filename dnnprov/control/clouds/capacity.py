"""Spot capacity of pools over time, the one rule both the trace cloud and the EC2 twin follow.

A pool is one (instance type, zone) with an availability trace read from an offset: at cloud
time ``t`` it offers ``alive[offset + floor(t / gap)]`` spot instances. The book holds the
spot instances launched into each pool and applies three rules:

- **launch**: a request for ``min_count..max_count`` instances gets ``min(max_count, free)``
  with ``free = capacity - live``, or is refused whole (``InsufficientInstanceCapacity``)
  when ``free < min_count``. ``live`` counts the pool's instances neither notified nor gone.
- **notice**: at each tick boundary where a pool's live instances exceed its capacity, the
  excess is notified, newest launches first (joining instances go before trained ones, as
  the replays always did); a notified instance keeps running.
- **reclaim**: ``notice_s`` (120 s, EC2's two-minute warning) after its notice, the cloud
  terminates it. Capacity that returns meanwhile does not save it.

Times are seconds of cloud time from the run's start. A window never runs past its trace's
end: the book refuses a time beyond it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from dnnprov.errors import InvalidInputError
from dnnprov.problems.interruption import Trace

#: EC2's spot interruption notice: the instance is reclaimed two minutes after it.
NOTICE_S = 120.0


@dataclass(frozen=True)
class PoolSpec:
    """One pool of a run: its type, zone, trace window and spot price."""

    type_name: str
    zone: str
    trace: Trace
    offset: int
    price_per_h: float

    @property
    def name(self) -> str:
        """``type@zone``: how runs, records and events name the pool."""
        return f"{self.type_name}@{self.zone}"

    def capacity_at(self, t: float) -> int:
        """Spot instances the pool offers at cloud time ``t``."""
        tick = self.offset + math.floor(t / self.trace.gap_s + 1e-9)
        if tick >= len(self.trace.alive):
            raise InvalidInputError(
                f"{self.trace.path}: data", f"the run reached {t:g} s, past the trace's end from offset {self.offset}"
            )
        return int(self.trace.alive[tick])


@dataclass(frozen=True)
class CapacityEvent:
    """A notice or a reclaim of one spot instance."""

    time_s: float
    kind: str  # "notice" | "reclaim"
    instance_id: str
    pool: str


@dataclass
class _Held:
    instance_id: str
    launched_s: float
    notice_s: float | None = None
    gone: bool = False


@dataclass
class CapacityBook:
    """The spot instances of a set of pools under the module's rules."""

    pools: Sequence[PoolSpec]
    notice_s: float = NOTICE_S
    now_s: float = 0.0
    _held: dict[str, list[_Held]] = field(default_factory=dict)
    _due: list[CapacityEvent] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.notice_s) and self.notice_s > 0):
            raise InvalidInputError("notice_s", f"must be a finite number of seconds > 0, got {self.notice_s!r}")
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise InvalidInputError("pools", "two pools share one type@zone")
        self._by_name = {p.name: p for p in self.pools}
        gaps = {p.trace.gap_s for p in self.pools}
        self.gap_s = gaps.pop() if len(gaps) == 1 else min(gaps)
        for p in self.pools:
            self._held.setdefault(p.name, [])

    def pool(self, name: str) -> PoolSpec:
        """The pool named ``type@zone``."""
        if name not in self._by_name:
            raise InvalidInputError("pool", f"no pool {name!r} (pools: {', '.join(self._by_name)})")
        return self._by_name[name]

    def live(self, name: str) -> int:
        """Instances of the pool neither notified nor gone."""
        return sum(1 for h in self._held[name] if h.notice_s is None and not h.gone)

    def free(self, name: str) -> int:
        """Instances a launch into the pool could get now."""
        return max(0, self.pool(name).capacity_at(self.now_s) - self.live(name))

    def grant(self, name: str, min_count: int, max_count: int) -> int:
        """How many of a ``min_count..max_count`` launch the pool grants now (0: refused)."""
        free = self.free(name)
        return 0 if free < min_count else min(max_count, free)

    def add(self, name: str, instance_ids: Sequence[str]) -> None:
        """Record granted instances as launched now."""
        self.pool(name)
        self._held[name].extend(_Held(i, self.now_s) for i in instance_ids)

    def release(self, instance_id: str) -> None:
        """The instance was terminated by its owner: it no longer takes capacity."""
        for held in self._held.values():
            for h in held:
                if h.instance_id == instance_id:
                    h.gone = True

    def next_change_s(self) -> float:
        """Cloud time of the next tick boundary or reclaim after now."""
        boundary = (math.floor(self.now_s / self.gap_s + 1e-9) + 1) * self.gap_s
        due = [e.time_s for e in self._due if e.time_s > self.now_s]
        return min([boundary, *due])

    def advance(self, t: float) -> list[CapacityEvent]:
        """Move the clock to ``t``; the notices and reclaims due on the way, in time order
        (a reclaim's instance is marked gone: the caller terminates it)."""
        if t < self.now_s:
            raise InvalidInputError("time", f"the clock runs forward: {t:g} s is before {self.now_s:g} s")
        events: list[CapacityEvent] = []
        while True:
            nxt = self.next_change_s()
            if nxt > t + 1e-9:
                break
            self.now_s = nxt
            for due in [e for e in self._due if e.time_s <= nxt + 1e-9]:
                self._due.remove(due)
                for h in self._held[due.pool]:
                    if h.instance_id == due.instance_id and not h.gone:
                        h.gone = True
                        events.append(due)
            if abs(nxt / self.gap_s - round(nxt / self.gap_s)) < 1e-9:
                events.extend(self._notify(nxt))
        self.now_s = t
        return events

    def _notify(self, t: float) -> list[CapacityEvent]:
        out = []
        for pool in self.pools:
            over = self.live(pool.name) - pool.capacity_at(t)
            if over <= 0:
                continue
            doomed = sorted(
                (h for h in self._held[pool.name] if h.notice_s is None and not h.gone),
                key=lambda h: (h.launched_s, h.instance_id),
                reverse=True,
            )[:over]
            for h in doomed:
                h.notice_s = t
                out.append(CapacityEvent(t, "notice", h.instance_id, pool.name))
                self._due.append(CapacityEvent(t + self.notice_s, "reclaim", h.instance_id, pool.name))
        return out

    def notified(self, instance_id: str) -> float | None:
        """When the instance got its notice, if it did."""
        for held in self._held.values():
            for h in held:
                if h.instance_id == instance_id:
                    return h.notice_s
        return None
