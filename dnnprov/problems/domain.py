"""Validity domains: the region of plans a fitted workload profile was measured on.

A fitted model is only trusted where its data were taken. spotDNN's loss model (eq. 3) is
fitted on the loss curves of a few clusters; outside the WA batches b_w and cluster sizes
|N| those clusters covered it can predict absurd plans (a huge averaged batch drives the
numerator of eq. 3 to zero: a plan "trained" in one iteration). λDNN's rate line (eq. 6)
is profiled at a few memory sizes. A domain records those ranges; the models
(:class:`dnnprov.SpotModel`, :class:`dnnprov.ServerlessModel`) mark plans outside it as
infeasible, so every solver keeps plans inside. ``extrapolation`` (a factor f >= 1, stated
by the user) widens every range to [low / f, high * f].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from dnnprov.problems import _checks as check
from dnnprov.problems._fields import check_keys, drop_none, mapping, set_field
from dnnprov.errors import InvalidInputError

#: Relative tolerance of the b_w and memory bounds (float round-off of eq. 4).
TOLERANCE = 1e-9
#: A plan whose b_w lies within this share of a bound is reported "at the edge".
EDGE_SHARE = 0.01


def _number_range(where: str, value: object, *, minimum: float) -> tuple[float, float]:
    """A ``[low, high]`` pair of finite numbers with ``minimum < low <= high``."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise InvalidInputError(where, f"must be a pair [low, high], got {value!r}")
    low = check.number(f"{where}[0]", value[0], exclusive_minimum=minimum)
    high = check.number(f"{where}[1]", value[1], exclusive_minimum=minimum)
    if high < low:
        raise InvalidInputError(where, f"low {low:g} is above high {high:g}")
    return low, high


def _int_pair(where: str, value: object) -> tuple[int, int]:
    low, high = check.int_range(where, value, minimum=1)
    if high is None:
        raise InvalidInputError(where, "needs an upper end (a fit covers finitely many workers)")
    return low, high


def widen(low: float, high: float, factor: float) -> tuple[float, float]:
    """``[low / factor, high * factor]``: a range after extrapolation by ``factor``."""
    return low / factor, high * factor


def widen_int(low: int, high: int, factor: float) -> tuple[int, int]:
    """The integers of ``[low / factor, high * factor]`` (a count range after extrapolation)."""
    lo, hi = widen(low, high, factor)
    return max(1, math.ceil(lo - TOLERANCE)), math.floor(hi + TOLERANCE)


@dataclass(frozen=True)
class SpotDomain:
    """Where a spot workload's fit holds: b_w and |N| ranges (R reported, not enforced).

    ``batch_wa`` is the range of WA batch sizes (samples, eq. 4) the loss fit saw,
    ``workers`` the range of cluster sizes |N| the loss and contention fits saw, ``cc`` the
    range of convergence coefficients R (eq. 5; informative: :func:`dnnprov.predict`
    reports it, the solvers do not enforce it). ``source`` says where the ranges come from.
    """

    batch_wa: tuple[float, float]
    workers: tuple[int, int]
    cc: tuple[float, float] | None = None
    extrapolation: float = 1.0
    source: str = ""

    def __post_init__(self) -> None:
        d = "workload.domain"
        set_field(self, "batch_wa", _number_range(f"{d}.batch_wa", self.batch_wa, minimum=0))
        set_field(self, "workers", _int_pair(f"{d}.workers", self.workers))
        if self.cc is not None:
            low, high = _number_range(f"{d}.cc", self.cc, minimum=-1)
            if low < 0 or high > 1:
                raise InvalidInputError(f"{d}.cc", f"R lies in [0, 1); got [{low:g}, {high:g}]")
            set_field(self, "cc", (low, high))
        set_field(self, "extrapolation", check.number(f"{d}.extrapolation", self.extrapolation, minimum=1))
        check.text(f"{d}.source", self.source, allow_empty=True)

    def batch_bounds(self) -> tuple[float, float]:
        """The b_w interval plans may use (after extrapolation)."""
        return widen(*self.batch_wa, self.extrapolation)

    def worker_bounds(self) -> tuple[int, int]:
        """The |N| interval plans may use (after extrapolation), integers."""
        return widen_int(*self.workers, self.extrapolation)

    @classmethod
    def from_dict(cls, data: object) -> "SpotDomain":
        """Build from the ``workload.domain`` object of a file."""
        data = mapping("workload.domain", data)
        check_keys("workload.domain", data, ["batch_wa", "workers"], ["cc", "extrapolation", "source"])
        return cls(batch_wa=tuple(data["batch_wa"]) if isinstance(data["batch_wa"], list) else data["batch_wa"],
                   workers=tuple(data["workers"]) if isinstance(data["workers"], list) else data["workers"],
                   cc=tuple(data["cc"]) if isinstance(data.get("cc"), list) else data.get("cc"),
                   extrapolation=data.get("extrapolation", 1.0), source=data.get("source", ""))

    def to_dict(self) -> dict[str, Any]:
        """The ``workload.domain`` object (``from_dict(to_dict())`` gives an equal domain)."""
        return drop_none({"batch_wa": list(self.batch_wa), "workers": list(self.workers),
                          "cc": list(self.cc) if self.cc is not None else None,
                          "extrapolation": self.extrapolation, "source": self.source})


@dataclass(frozen=True)
class ServerlessDomain:
    """Where a serverless workload's profile holds: memory sizes (and function counts).

    ``memory_mb`` is the range of memory sizes the rate line (eq. 6) and the storage line
    (eq. 8) were measured at; ``functions`` (optional) the function counts profiled.
    """

    memory_mb: tuple[float, float]
    functions: tuple[int, int] | None = None
    extrapolation: float = 1.0
    source: str = ""

    def __post_init__(self) -> None:
        d = "workload.domain"
        set_field(self, "memory_mb", _number_range(f"{d}.memory_mb", self.memory_mb, minimum=0))
        if self.functions is not None:
            set_field(self, "functions", _int_pair(f"{d}.functions", self.functions))
        set_field(self, "extrapolation", check.number(f"{d}.extrapolation", self.extrapolation, minimum=1))
        check.text(f"{d}.source", self.source, allow_empty=True)

    def memory_bounds(self) -> tuple[float, float]:
        """The memory interval plans may use (after extrapolation), MB."""
        return widen(*self.memory_mb, self.extrapolation)

    def function_bounds(self) -> tuple[int, int | None]:
        """The function-count interval plans may use (after extrapolation); ``None``: no upper end."""
        if self.functions is None:
            return 1, None
        return widen_int(*self.functions, self.extrapolation)

    @classmethod
    def from_dict(cls, data: object) -> "ServerlessDomain":
        """Build from the ``workload.domain`` object of a file."""
        data = mapping("workload.domain", data)
        check_keys("workload.domain", data, ["memory_mb"], ["functions", "extrapolation", "source"])
        memory, functions = data["memory_mb"], data.get("functions")
        return cls(memory_mb=tuple(memory) if isinstance(memory, list) else memory,
                   functions=tuple(functions) if isinstance(functions, list) else functions,
                   extrapolation=data.get("extrapolation", 1.0), source=data.get("source", ""))

    def to_dict(self) -> dict[str, Any]:
        """The ``workload.domain`` object."""
        return drop_none({"memory_mb": list(self.memory_mb),
                          "functions": list(self.functions) if self.functions is not None else None,
                          "extrapolation": self.extrapolation, "source": self.source})


def as_domain(cls: type, value: object) -> Any:
    """``value`` as a ``cls`` domain: ``None``, an instance, or its dict form."""
    if value is None or isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        return cls.from_dict(value)
    raise InvalidInputError("workload.domain", f"must be an object, got {type(value).__name__}")
