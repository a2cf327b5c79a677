"""Interruption models of spot offers, and spot availability traces (docs/revocation.md).

An :class:`Interruption` says how often a running spot instance of one offer (instance
type, zone, spot market) is revoked and how long its capacity stays away, with where the
numbers came from. It is taken either

- from the AWS Spot Instance Advisor bucket (:func:`from_advisor_bucket`): the bucket is
  the share of instances interrupted within a month; we take the bucket midpoint p (25 %
  for the open ">20 %" bucket) and the Poisson rate that interrupts a share p of the
  instances in one month of 730 hours, ``rate = -ln(1 - p) / 730`` per instance-hour; or
- fitted from a real availability or preemption trace (:func:`fit_trace`): the rate of
  loss is the number of instances lost (drops of the alive count between ticks) divided
  by the instance-hours alive, and the mean time to regain is the mean time from a drop
  until the alive count is back at its level before the drop.

Traces are the ``{"metadata": {"gap_seconds": G}, "data": [alive count per tick]}`` files of
skypilot-org/spot-traces (Can't Be Late, NSDI 2024), as kept in ``../shared/data/spot-traces``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dnnprov.errors import InvalidInputError
from dnnprov.json_files import read_json_file
from dnnprov.problems.validation import checks as check
from dnnprov.problems.validation.fields import drop_none

HOURS_PER_MONTH = 730.0
#: Spot Advisor bucket -> the monthly interruption share we take (the bucket midpoint;
#: the open ">20 %" bucket has no upper edge, 25 % is our choice and says so in ``source``).
BUCKET_SHARE = {0: 0.025, 1: 0.075, 2: 0.125, 3: 0.175, 4: 0.25}
BUCKET_LABELS = {0: "<5%", 1: "5-10%", 2: "10-15%", 3: "15-20%", 4: ">20%"}


@dataclass(frozen=True)
class Interruption:
    """How a spot offer is revoked: ``rate_per_h`` revocations per instance-hour (Poisson).

    ``mean_regain_s`` is the mean time until lost capacity comes back (``None``: unknown),
    ``source`` where the numbers came from, ``zone`` the availability zone they describe.
    """

    rate_per_h: float
    source: str
    mean_regain_s: float | None = None
    zone: str | None = None

    def __post_init__(self) -> None:
        where = "interruption"
        object.__setattr__(self, "rate_per_h", check.number(f"{where}.rate_per_h", self.rate_per_h, minimum=0))
        object.__setattr__(
            self, "mean_regain_s", check.optional_number(f"{where}.mean_regain_s", self.mean_regain_s, minimum=0)
        )
        if not isinstance(self.source, str) or not self.source.strip():
            raise InvalidInputError(f"{where}.source", "must say where the rate came from (a non-empty string)")
        if self.zone is not None and (not isinstance(self.zone, str) or not self.zone):
            raise InvalidInputError(f"{where}.zone", f"must be a non-empty string, got {self.zone!r}")

    @classmethod
    def from_dict(cls, where: str, data: object) -> Interruption:
        """Build from the instance-file form ``{"rate_per_h", "source", "mean_regain_s", "zone"}``."""
        if not isinstance(data, Mapping):
            raise InvalidInputError(where, "must be an object with rate_per_h and source")
        unknown = sorted(set(data) - {"rate_per_h", "source", "mean_regain_s", "zone"})
        if unknown:
            raise InvalidInputError(
                f"{where}.{unknown[0]}", "unknown field (expected rate_per_h, source, mean_regain_s, zone)"
            )
        for key in ("rate_per_h", "source"):
            if key not in data:
                raise InvalidInputError(f"{where}.{key}", "missing")
        try:
            return cls(**dict(data))
        except InvalidInputError as exc:
            raise InvalidInputError(f"{where}.{exc.field.removeprefix('interruption.')}", exc.problem) from None

    def to_dict(self) -> dict[str, Any]:
        """The instance-file form (``None`` fields omitted)."""
        return drop_none(
            {
                "rate_per_h": self.rate_per_h,
                "source": self.source,
                "mean_regain_s": self.mean_regain_s,
                "zone": self.zone,
            }
        )


def from_advisor_bucket(bucket: int, *, source: str = "", zone: str | None = None) -> Interruption:
    """The Poisson rate whose monthly interruption share is the bucket midpoint (module docstring)."""
    bucket = check.integer("interruption_bucket", bucket, minimum=0, maximum=4)
    share = BUCKET_SHARE[bucket]
    rate = -math.log1p(-share) / HOURS_PER_MONTH
    what = (
        f"Spot Advisor bucket {bucket} ({BUCKET_LABELS[bucket]} of instances interrupted per month): "
        f"{100 * share:g} % a month -> {rate:.6g} per instance-hour"
    )
    return Interruption(rate_per_h=rate, source=f"{what}{'; ' + source if source else ''}", zone=zone)


# ----------------------------------------------------------------------------- traces
@dataclass(frozen=True)
class Trace:
    """One availability/preemption trace: alive instance count per tick of ``gap_s`` seconds."""

    path: str
    gap_s: float
    alive: np.ndarray

    @property
    def capacity(self) -> int:
        """The most instances the trace ever had alive (1 for a 1-node trace; at least 1)."""
        return max(1, int(self.alive.max()))

    @property
    def duration_s(self) -> float:
        """Seconds the trace covers."""
        return self.gap_s * len(self.alive)

    @property
    def zone(self) -> str | None:
        """The zone in the file name (``us-west-2a_v100_1.json`` -> ``us-west-2a``), if any."""
        head = Path(self.path).name.split("_", 1)[0]
        return head if head.count("-") >= 2 else None


TRACE_FIELDS = ("metadata", "data", "prices")
METADATA_FIELDS = ("gap_seconds",)
#: Longest trace read, ticks (a 2-month trace at 1-minute ticks is ~65,000; 10^7 bounds the work).
MAX_TRACE_TICKS = 10_000_000


def load_trace(path: str | Path) -> Trace:
    """Read a trace file; errors name the file and the field (unknown fields are refused).

    ``prices`` (spot price per tick, in some preemption traces) is checked and not used.
    """
    return trace_from_dict(read_json_file(path), str(path))


def trace_from_dict(raw: object, path: str, field: str | None = None) -> Trace:
    """A trace from its parsed JSON (as :func:`load_trace` reads it); ``path`` names it (its
    zone is in the name, as in a file name), ``field`` prefixes the error fields (default
    ``"PATH: "``)."""
    name = f"{path}: " if field is None else field
    if not isinstance(raw, Mapping) or not isinstance(raw.get("metadata"), Mapping):
        raise InvalidInputError(f"{name}metadata", 'a trace is {"metadata": {"gap_seconds": G}, "data": [...]}')
    for where, keys, known in (("", raw, TRACE_FIELDS), ("metadata.", raw["metadata"], METADATA_FIELDS)):
        unknown = [k for k in keys if k not in known]
        if unknown:
            raise InvalidInputError(f"{name}{where}{unknown[0]}", f"unknown trace field (known: {', '.join(known)})")
    gap = check.number(f"{name}metadata.gap_seconds", raw["metadata"].get("gap_seconds"), exclusive_minimum=0)
    data = raw.get("data")
    if not isinstance(data, list) or len(data) < 2:
        raise InvalidInputError(f"{name}data", "must be a list of at least two alive counts")
    if len(data) > MAX_TRACE_TICKS:
        raise InvalidInputError(f"{name}data", f"{len(data):,} ticks are more than the limit of {MAX_TRACE_TICKS:,}")
    alive = _counts(f"{name}data", data)
    prices = raw.get("prices")
    if prices is not None and (not isinstance(prices, list) or len(prices) != len(data)):
        raise InvalidInputError(f"{name}prices", "must be a list of one spot price per tick of data")
    if prices is not None:
        _prices(f"{name}prices", prices)
    return Trace(path=path, gap_s=gap, alive=alive)


def _prices(where: str, prices: list) -> None:
    """Refuse a spot price that is not a finite number >= 0 (named by its index; linear time)."""
    if all(type(v) in (int, float) and 0 <= v <= check.MAX_MAGNITUDE for v in prices):  # NaN fails too
        return
    for i, v in enumerate(prices):
        check.number(f"{where}[{i}]", v, minimum=0)


def _counts(where: str, data: list) -> np.ndarray:
    """The alive counts as integers >= 0; a bad entry is named by its index (linear time)."""
    if all(type(v) is int for v in data) and 0 <= min(data) and max(data) <= check.MAX_INTEGER:
        return np.array(data, dtype=np.int64)
    return np.array([check.integer(f"{where}[{i}]", v, minimum=0) for i, v in enumerate(data)], dtype=np.int64)


@dataclass(frozen=True)
class TraceFit:
    """What :func:`fit_trace` measured, and the interruption model it gives."""

    trace: str
    losses: int
    instance_hours: float
    regains: int
    interruption: Interruption

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``dnnprov risk fit --json``)."""
        return {
            "trace": self.trace,
            "losses": self.losses,
            "instance_hours": self.instance_hours,
            "regains": self.regains,
            "interruption": self.interruption.to_dict(),
        }


def regain_times(trace: Trace) -> tuple[np.ndarray, list[float]]:
    """Per tick the instances lost, and the regain time of every drop that recovers.

    The regain of a drop after tick ``i`` is the first later tick whose count is back at
    ``alive[i]``: the next-greater-or-equal element, found for every tick in one backward
    pass with a stack (linear time).
    """
    alive = trace.alive.tolist()
    drops = np.maximum(trace.alive[:-1] - trace.alive[1:], 0)
    back = [-1] * len(alive)  # first j > i with alive[j] >= alive[i]
    stack: list[int] = []
    for i in range(len(alive) - 1, -1, -1):
        while stack and alive[stack[-1]] < alive[i]:
            stack.pop()
        back[i] = stack[-1] if stack else -1
        stack.append(i)
    times = [(back[i] - i) * trace.gap_s for i in np.flatnonzero(drops).tolist() if back[i] >= 0]
    return drops, times


def fit_trace(trace: Trace) -> TraceFit:
    """Rate of loss and mean time to regain capacity of one trace (module docstring)."""
    return fit_traces([trace])


def fit_traces(traces: list[Trace]) -> TraceFit:
    """One model pooled over traces (e.g. several zones of one type), or of one trace.

    The rate is all instances lost over all instance-hours alive; instance-hours count
    every tick but the last (the alive count holds for one gap). A drop whose capacity
    does not come back before its trace ends is left out of the regain mean (censored);
    ``mean_regain_s`` is ``None`` when no drop recovers.
    """
    if not traces:
        raise InvalidInputError("traces", "at least one trace is needed")
    losses, hours, regain = 0, 0.0, []
    for trace in traces:
        drops, times = regain_times(trace)
        losses += int(drops.sum())
        hours += float(trace.alive[:-1].sum()) * trace.gap_s / 3600
        regain += times
    names = ", ".join(Path(t.path).name for t in traces)
    if hours <= 0:
        raise InvalidInputError(names, "no instance-hour alive: the loss rate is undefined")
    days = sum(t.duration_s for t in traces) / 86400
    source = (
        f"fitted from {names}: {losses} instances lost over {hours:.1f} instance-hours "
        f"({days:.1f} trace-days); {len(regain)} drops regained"
    )
    zones = {t.zone for t in traces}
    interruption = Interruption(
        rate_per_h=losses / hours,
        source=source,
        mean_regain_s=float(np.mean(regain)) if regain else None,
        zone=zones.pop() if len(zones) == 1 else None,
    )
    return TraceFit(
        trace=", ".join(t.path for t in traces),
        losses=losses,
        instance_hours=hours,
        regains=len(regain),
        interruption=interruption,
    )
