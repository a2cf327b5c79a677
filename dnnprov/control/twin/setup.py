"""What an EC2 twin (:mod:`dnnprov.control.twin.server`) starts from: its pools and its clock.

:func:`trace_pools` makes one pool per aligned trace file, read from one tick offset;
:class:`TwinClock` is twin time, seconds since the twin's start, accelerated or stepped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dnnprov.control.clouds.capacity import PoolSpec
from dnnprov.control.twin.ec2_protocol import iso
from dnnprov.errors import InvalidInputError
from dnnprov.problems.interruption import Trace, load_trace

#: The instant twin time 0 stands for (the 2023-08-27 traces' era), unless given.
DEFAULT_BASE = datetime(2023, 8, 27, tzinfo=UTC)
MODES = ("accelerated", "stepped")


def trace_pools(
    traces: Sequence[tuple[str, str | Path | Trace]],
    offset: int,
    horizon_s: float = 0.0,
    prices: Mapping[str, float] | None = None,
) -> list[PoolSpec]:
    """One pool per ``(type, trace file)``, its zone from the file name, all read from tick
    ``offset``; refuses traces of different gaps, a trace without a zone in its name, two
    traces of one pool, and an offset whose window of ``horizon_s`` seconds runs past a
    trace's end. ``prices`` gives a type's spot $/h (default 0)."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidInputError("offset", f"must be a whole number of ticks >= 0, got {offset!r}")
    if not (isinstance(horizon_s, (int, float)) and math.isfinite(horizon_s) and horizon_s >= 0):
        raise InvalidInputError("horizon_s", f"must be a finite number of seconds >= 0, got {horizon_s!r}")
    if not traces:
        raise InvalidInputError("traces", "give at least one TYPE=FILE trace")
    pools: list[PoolSpec] = []
    for type_name, source in traces:
        trace = source if isinstance(source, Trace) else load_trace(source)
        where = f"{type_name}={trace.path}"
        if trace.zone is None:
            raise InvalidInputError(where, "no zone in the file name (expected ZONE_..., e.g. us-west-2a_v100_1.json)")
        if pools and trace.gap_s != pools[0].trace.gap_s:
            raise InvalidInputError(
                where,
                f"aligned traces share one gap_seconds: {trace.gap_s:g} s here, "
                f"{pools[0].trace.gap_s:g} s in {pools[0].trace.path}",
            )
        last = offset + math.floor(horizon_s / trace.gap_s + 1e-9)
        if last >= len(trace.alive):
            room = len(trace.alive) - 1 - math.floor(horizon_s / trace.gap_s + 1e-9)
            hint = f"offsets 0..{room} fit" if room >= 0 else "no offset fits"
            raise InvalidInputError(
                where,
                f"offset {offset} with a horizon of {horizon_s:g} s runs past the trace's "
                f"end ({len(trace.alive)} ticks of {trace.gap_s:g} s; {hint})",
            )
        price = float((prices or {}).get(type_name, 0.0))
        pool = PoolSpec(type_name=type_name, zone=trace.zone, trace=trace, offset=offset, price_per_h=price)
        if any(p.name == pool.name for p in pools):
            raise InvalidInputError(where, f"a second trace for pool {pool.name}")
        pools.append(pool)
    return pools


class TwinClock:
    """Twin seconds since the start: ``speed`` x wall seconds (accelerated) plus every advance."""

    def __init__(self, mode: str = "accelerated", speed: float = 1.0, base: datetime = DEFAULT_BASE) -> None:
        if mode not in MODES:
            raise InvalidInputError("mode", f"one of {', '.join(MODES)}, got {mode!r}")
        if not (isinstance(speed, (int, float)) and math.isfinite(speed) and speed > 0):
            raise InvalidInputError("speed", f"must be a finite number > 0, got {speed!r}")
        if base.tzinfo is None:
            raise InvalidInputError("base", f"must be an instant with a time zone (UTC), got {base.isoformat()}")
        self.mode, self.speed, self.base = mode, float(speed), base.astimezone(UTC)
        self._wall0: float | None = None
        self._skipped = 0.0

    def start(self) -> None:
        """Twin time 0 is now."""
        self._wall0 = time.monotonic()

    def now(self) -> float:
        """Twin seconds since :meth:`start`."""
        if self.mode == "stepped" or self._wall0 is None:
            return self._skipped
        return self.speed * (time.monotonic() - self._wall0) + self._skipped

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` ahead (at once, in either mode)."""
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not (math.isfinite(seconds) and seconds >= 0)
        ):
            raise InvalidInputError("seconds", f"must be a finite number >= 0, got {seconds!r}")
        self._skipped += float(seconds)

    def to_dict(self, t: float | None = None) -> dict[str, Any]:
        """``{"t", "now", "mode", "speed"}`` at ``t`` (default: now)."""
        t = self.now() if t is None else t
        return {"t": t, "now": iso(self.base, t), "mode": self.mode, "speed": self.speed}
