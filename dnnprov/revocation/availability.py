"""Availability models of spot pools fitted from aligned traces (``dnnprov risk fit --zones``).

The traces given for one instance type are its pools (one per zone), recorded over the same
days: tick ``n`` of every file is the same moment (the traces of skypilot-org/spot-traces
start together; longer files are cut to the shortest). A model is fitted on one period of
them (a fraction ``[a, b)`` of the common ticks) and judged on another.

What it holds, all measured on the fit period:

- ``start``: the chance of k instances at launch, k = 0..cap, for the total over the pools
  capped at ``cap`` (the workers a plan could use): the share of ticks with that total;
- ``transition``: the tick-to-tick Markov chain of that capped total (row = now, column =
  next tick), counts plus a pseudo-count of ``SMOOTHING`` per cell so that every change
  the period did not show keeps a small chance (a policy planning on the model then still
  guards against it). The pooled total keeps the zones' real correlation: it is counted
  on aligned ticks, not composed from independent zones;
- ``loss_sizes``: per pool, the size distribution of loss events (drops of the alive
  count between ticks) as the share of the pool's instances lost, and the share of
  events that took every instance;
- ``regain_s``: per pool, the mean time from a drop until the count is back;
- ``correlation``: Pearson correlation between the zones' alive counts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dnnprov.errors import InvalidInputError
from dnnprov.problems.interruption import Trace, regain_times
from dnnprov.problems.validation import checks as check

SMOOTHING = 0.5
MAX_CAP = 64


def parse_period(text: str, option: str = "--period") -> tuple[float, float]:
    """``A:B`` (fractions 0 <= A < B <= 1 of the traces' common ticks) as a pair."""
    low, sep, high = str(text).partition(":")
    try:
        a, b = float(low), float(high)
    except ValueError:
        raise InvalidInputError(option, f"expected A:B with fractions 0 <= A < B <= 1, got {text!r}") from None
    if not sep or not (0 <= a < b <= 1):
        raise InvalidInputError(option, f"expected A:B with fractions 0 <= A < B <= 1, got {text!r}")
    return a, b


def aligned(traces: Sequence[Trace], where: str = "--trace") -> tuple[int, float]:
    """Common length (ticks) and gap of traces replayed as simultaneous pools."""
    if not traces:
        raise InvalidInputError(where, "no trace given")
    gaps = {t.gap_s for t in traces}
    if len(gaps) != 1:
        raise InvalidInputError(
            where,
            f"pools are aligned tick by tick: their traces need one gap_seconds, got "
            f"{', '.join(f'{g:g}' for g in sorted(gaps))}",
        )
    return min(len(t.alive) for t in traces), gaps.pop()


def period_ticks(length: int, period: tuple[float, float]) -> tuple[int, int]:
    """First and past-the-end tick of ``period`` in traces of ``length`` common ticks."""
    first, end = math.floor(period[0] * length), math.floor(period[1] * length)
    if end - first < 2:
        raise InvalidInputError(
            "--period", f"{period[0]:g}:{period[1]:g} holds {end - first} ticks of {length}: too few"
        )
    return first, end


def window_starts(
    trace: Trace, horizon_s: float, first: int = 0, end: int | None = None, period: tuple[float, float] | None = None
) -> tuple[int, int]:
    """The ticks a run's window may start at, ``range(low, high)``: its ``ceil(horizon / gap)``
    ticks lie within ticks ``first..end`` of ``trace`` (default: all of it), so that a window
    never runs past the trace's end or out of its period (a replay never loops a trace).

    A trace (or period) shorter than one window is refused, naming the trace and the lengths.
    """
    end = len(trace.alive) if end is None else end
    window = math.ceil(horizon_s / trace.gap_s)
    if end - first < window:
        where = f" in the period {period[0]:g}:{period[1]:g} (ticks {first}-{end})" if period else ""
        raise InvalidInputError(
            trace.path,
            f"{end - first:,} ticks of {trace.gap_s:g} s ({(end - first) * trace.gap_s:,.0f} s)"
            f"{where} do not cover a run of {horizon_s:,.0f} s (--horizon x T_obj: {window:,} ticks) "
            "from any start; a replay does not loop a trace: give a longer trace"
            f"{' or period' if period else ''}, or a shorter --horizon",
        )
    return first, end - window + 1


@dataclass(frozen=True)
class AvailabilityModel:
    """A fitted availability model of one type's pools (module docstring)."""

    zones: tuple[str, ...]
    gap_s: float
    cap: int
    start: tuple[float, ...]
    transition: tuple[tuple[float, ...], ...]
    loss_sizes: tuple[dict[str, Any], ...]
    regain_s: tuple[float | None, ...]
    correlation: tuple[tuple[float, ...], ...]
    period: tuple[float, float]
    source: str

    def __post_init__(self) -> None:
        check.count("model.cap", self.cap, minimum=1, limit=MAX_CAP)
        check.number("model.gap_s", self.gap_s, exclusive_minimum=0)
        n = self.cap + 1
        start = np.asarray(self.start, dtype=float)
        trans = np.asarray(self.transition, dtype=float)
        if start.shape != (n,) or not np.isfinite(start).all() or (start < 0).any() or abs(start.sum() - 1) > 1e-6:
            raise InvalidInputError("model.start", f"must be {n} probabilities summing to 1")
        if (
            trans.shape != (n, n)
            or not np.isfinite(trans).all()
            or (trans < 0).any()
            or (abs(trans.sum(axis=1) - 1) > 1e-6).any()
        ):
            raise InvalidInputError("model.transition", f"must be a {n} x {n} matrix of rows summing to 1")

    @property
    def matrix(self) -> np.ndarray:
        """The transition matrix as an array."""
        return np.asarray(self.transition, dtype=float)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``dnnprov risk fit --zones --json``, read back by ``simulate --model``)."""
        return {
            "format": "dnnprov/availability",
            "version": 1,
            "zones": list(self.zones),
            "gap_s": self.gap_s,
            "cap": self.cap,
            "period": list(self.period),
            "start": list(self.start),
            "transition": [list(r) for r in self.transition],
            "loss_sizes": list(self.loss_sizes),
            "regain_s": list(self.regain_s),
            "correlation": [list(r) for r in self.correlation],
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, data: object) -> AvailabilityModel:
        """Read the JSON form back (checked)."""
        if not isinstance(data, Mapping) or data.get("format") != "dnnprov/availability":
            raise InvalidInputError(
                "model.format", "expected a dnnprov/availability model (dnnprov risk fit --zones --json)"
            )
        keys = {
            "format",
            "version",
            "zones",
            "gap_s",
            "cap",
            "period",
            "start",
            "transition",
            "loss_sizes",
            "regain_s",
            "correlation",
            "source",
        }
        unknown = sorted(set(data) - keys)
        if unknown:
            raise InvalidInputError(f"model.{unknown[0]}", "unknown field")
        missing = sorted(keys - set(data))
        if missing:
            raise InvalidInputError(f"model.{missing[0]}", "missing")
        try:
            return cls(
                zones=tuple(data["zones"]),
                gap_s=data["gap_s"],
                cap=data["cap"],
                start=tuple(data["start"]),
                transition=tuple(tuple(r) for r in data["transition"]),
                loss_sizes=tuple(data["loss_sizes"]),
                regain_s=tuple(data["regain_s"]),
                correlation=tuple(tuple(r) for r in data["correlation"]),
                period=tuple(data["period"]),
                source=str(data["source"]),
            )
        except TypeError as exc:
            raise InvalidInputError("model", f"malformed: {exc}") from None


def _loss_sizes(alive: np.ndarray) -> dict[str, Any]:
    """Loss events of one pool: how many, the mean share lost, the share that lost everything."""
    before, after = alive[:-1], alive[1:]
    events = np.flatnonzero(after < before)
    if not events.size:
        return {"events": 0, "mean_share_lost": None, "all_lost": None, "histogram": []}
    share = (before[events] - after[events]) / before[events]
    hist, _ = np.histogram(share, bins=np.linspace(0, 1, 6))
    return {
        "events": int(events.size),
        "mean_share_lost": float(share.mean()),
        "all_lost": float(np.mean(after[events] == 0)),
        "histogram": [int(h) for h in hist],
    }


def fit_availability(
    traces: Sequence[Trace], cap: int, period: tuple[float, float] = (0.0, 1.0), where: str = "--trace"
) -> AvailabilityModel:
    """Fit the model of one type's aligned pools on ``period`` (module docstring); ``where``
    names the traces in errors."""
    cap = check.count("--cap", cap, minimum=1, limit=MAX_CAP)
    length, gap = aligned(traces, where)
    try:
        first, end = period_ticks(length, period)
    except InvalidInputError as exc:
        held = math.floor(period[1] * length) - math.floor(period[0] * length)
        raise InvalidInputError(
            exc.field,
            f"{period[0]:g}:{period[1]:g} holds {held} of the {length:,} common ticks "
            f"({gap:g} s each) of {', '.join(t.path for t in traces)}: a fit needs at "
            "least 2 (one transition)",
        ) from None
    alive = np.stack([t.alive[first:end] for t in traces])  # pools x ticks
    total = np.minimum(alive.sum(axis=0), cap)
    start = np.bincount(total, minlength=cap + 1) / len(total)
    counts = np.full((cap + 1, cap + 1), SMOOTHING)
    np.add.at(counts, (total[:-1], total[1:]), 1.0)
    transition = counts / counts.sum(axis=1, keepdims=True)
    regain = []
    for row, trace in zip(alive, traces):
        _, times = regain_times(Trace(trace.path, gap, row))
        regain.append(float(np.mean(times)) if times else None)
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = np.corrcoef(alive) if len(traces) > 1 else np.ones((1, 1))
    corr = np.where(np.isfinite(corr), corr, 0.0)
    zones = tuple(t.zone or f"pool{i}" for i, t in enumerate(traces))
    source = (
        f"fitted on ticks {first}-{end} of {length} ({period[0]:g}:{period[1]:g}, "
        f"{(end - first) * gap / 86400:.1f} days) of {', '.join(t.path for t in traces)}"
    )
    return AvailabilityModel(
        zones=zones,
        gap_s=gap,
        cap=cap,
        start=tuple(float(v) for v in start),
        transition=tuple(tuple(float(v) for v in r) for r in transition),
        loss_sizes=tuple(_loss_sizes(row) for row in alive),
        regain_s=tuple(regain),
        correlation=tuple(tuple(float(v) for v in r) for r in np.atleast_2d(corr)),
        period=period,
        source=source,
    )
