"""Validity domains: the region of plans a fitted workload profile was measured on.

A fitted model is only trusted where its data were taken. spotDNN's loss model (eq. 3) is
fitted on the loss curves of a few clusters; outside the WA batches b_w and cluster sizes
|N| those clusters covered it can predict absurd plans (a huge averaged batch drives the
numerator of eq. 3 to zero: a plan "trained" in one iteration). λDNN's rate line (eq. 6)
is profiled at a few memory sizes. A domain records those ranges; the models
(:class:`dnnprov.SpotModel`, :class:`dnnprov.ServerlessModel`) mark plans outside it as
infeasible, so every solver keeps plans inside. ``extrapolation`` (a factor f >= 1, stated
by the user) widens every range to [low / f, high * f]; a spot domain may state the factor
of |N| and b_w apart, and caps b_w where eq. (3)'s numerator would fall below half its
value at the fitted edge (:func:`numerator_range`), whatever the factor. A spot domain may
also record the logged losses and steps: SLOs and plans beyond them are flagged.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dnnprov.errors import InvalidInputError
from dnnprov.problems.validation import checks as check
from dnnprov.problems.validation.fields import check_keys, drop_none, mapping, set_field

#: Relative tolerance of the b_w and memory bounds (float round-off of eq. 4).
TOLERANCE = 1e-9
#: A plan whose b_w lies within this share of a bound is reported "at the edge".
EDGE_SHARE = 0.01
#: Extrapolating b_w may lower eq. (3)'s numerator to this share of its value at the
#: fitted edge, and no further (:func:`numerator_range`).
NUMERATOR_SHARE = 0.5
#: The fewest normalized iterations a plan inside a spot domain may need (eq. 3 solved for
#: j). Eq. (3) is a hyperbola fitted to loss curves logged over hundreds of steps (the
#: 3-epoch profiling runs of spotDNN are 150-600 iterations); a plan it says reaches the SLO
#: in fewer sits at the very start of the curve, where the fit is dominated by its offset
#: gamma_1 (88-877 for the shipped profiles) and by one-worker clusters (R = 0) no profiling
#: run logged, so the domain refuses it. ``min_iterations`` sets another floor (0: none).
MIN_ITERATIONS = 100.0
#: What the loss/iteration axis does with an SLO or a plan beyond the logs.
LOSS_AXIS_MODES = ("flag", "enforce")


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


def numerator_range(
    batch_wa: tuple[float, float], gamma_2: float, gamma_3: float, share: float = NUMERATOR_SHARE
) -> tuple[float, float]:
    """The b_w interval where eq. (3)'s numerator keeps ``share`` of its value at the fitted edge.

    Derivation. Solved for j, eq. (3) reads j + gamma_1 = A(b_w) c(R, |N|) / (L_obj - gamma_5)
    with A(b) = gamma_2 b + gamma_3 (c: the square-root factor). For one cluster shape (R, |N|)
    and one SLO, moving b_w from the end b_e of the fitted range [b_low, b_high] to b scales
    j + gamma_1 by A(b) / A(b_e): where A reaches 0 (b_0 = -gamma_3 / gamma_2) a plan
    "trains" in -gamma_1 iterations, however far the data stopped. Let b_e be the fitted end
    where A is smaller (b_high for gamma_2 < 0) and A_e = A(b_e) > 0. A is affine, so

        A(b) >= share A_e  <=>  gamma_2 (b - b_e) >= -(1 - share) A_e
                           <=>  b <= b_e + (1 - share) (b_0 - b_e)     (gamma_2 < 0),

    (b >= ... for gamma_2 > 0): extrapolating b_w may at most divide j + gamma_1 by
    1 / share (2 with the default one half) against the same cluster at the fitted edge.
    For every shipped profile b_0 = 1.53 b_high, so b_w stops at 1.265 b_high whatever the
    factor. Returns ``(-inf, inf)`` when gamma_2 = 0 (A does not move), and ``batch_wa``
    itself when A_e <= 0 (the fit's own range reaches the root: no b_w extrapolation).
    """
    low, high = batch_wa
    edge = min(gamma_2 * low + gamma_3, gamma_2 * high + gamma_3)
    if gamma_2 == 0:
        return -math.inf, math.inf
    if edge <= 0:
        return low, high
    bound = (share * edge - gamma_3) / gamma_2
    return (-math.inf, bound) if gamma_2 < 0 else (bound, math.inf)


@dataclass(frozen=True)
class SpotDomain:
    """Where a spot workload's fit holds: b_w and |N| ranges, and the logged loss and steps.

    ``batch_wa`` is the range of WA batch sizes (samples, eq. 4) the loss fit saw,
    ``workers`` the range of cluster sizes |N| the loss and contention fits saw, ``cc`` the
    range of convergence coefficients R (eq. 5; informative: :func:`dnnprov.predict`
    reports it, the solvers do not enforce it). ``source`` says where the ranges come from.

    Extrapolation: ``extrapolation`` (f >= 1) is the factor of every axis;
    ``extrapolation_workers``, ``extrapolation_batch_wa`` and ``extrapolation_iterations``
    override it per axis. Whatever the factors, no plan "trains" in a handful of
    iterations: b_w is capped where eq. (3)'s numerator would fall below
    :data:`NUMERATOR_SHARE` of its value at the fitted edge (:func:`numerator_range`), and
    a plan needing fewer than ``min_iterations`` (default :data:`MIN_ITERATIONS`) is outside.

    The loss/iteration axis: ``loss`` is the range of logged losses, ``iterations`` the
    range of logged normalized iterations (steps). An SLO loss below ``loss[0]``, or a plan
    needing more than ``iterations[1]`` times the iteration factor, is *extrapolated*:
    flagged in results and predictions (``loss_axis`` ``"flag"``, the default) or
    infeasible (``"enforce"``).
    """

    batch_wa: tuple[float, float]
    workers: tuple[int, int]
    cc: tuple[float, float] | None = None
    extrapolation: float = 1.0
    source: str = ""
    extrapolation_workers: float | None = None
    extrapolation_batch_wa: float | None = None
    loss: tuple[float, float] | None = None
    iterations: tuple[float, float] | None = None
    extrapolation_iterations: float | None = None
    loss_axis: str = "flag"
    min_iterations: float = MIN_ITERATIONS

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
        for name in ("extrapolation_workers", "extrapolation_batch_wa", "extrapolation_iterations"):
            set_field(self, name, check.optional_number(f"{d}.{name}", getattr(self, name), minimum=1))
        if self.loss is not None:
            set_field(self, "loss", _number_range(f"{d}.loss", self.loss, minimum=-math.inf))
        if self.iterations is not None:
            low, high = _number_range(f"{d}.iterations", self.iterations, minimum=-math.inf)
            if low < 0:
                raise InvalidInputError(f"{d}.iterations", f"logged steps are >= 0; got {low:g}")
            set_field(self, "iterations", (low, high))
        check.choice(f"{d}.loss_axis", self.loss_axis, LOSS_AXIS_MODES)
        set_field(self, "min_iterations", check.number(f"{d}.min_iterations", self.min_iterations, minimum=0))
        check.text(f"{d}.source", self.source, allow_empty=True)

    @property
    def workers_factor(self) -> float:
        """The extrapolation factor of |N|."""
        return self.extrapolation if self.extrapolation_workers is None else self.extrapolation_workers

    @property
    def batch_factor(self) -> float:
        """The extrapolation factor of b_w (before the numerator cap)."""
        return self.extrapolation if self.extrapolation_batch_wa is None else self.extrapolation_batch_wa

    @property
    def iterations_factor(self) -> float:
        """The factor beyond the most logged iterations at which a plan is extrapolated."""
        return self.extrapolation if self.extrapolation_iterations is None else self.extrapolation_iterations

    def extrapolates(self) -> bool:
        """Whether any axis allows extrapolation (a factor above 1)."""
        return max(self.workers_factor, self.batch_factor) > 1

    def with_extrapolation(self, factor: float) -> SpotDomain:
        """This domain with ``factor`` on every axis (the per-axis factors dropped)."""
        return dataclasses.replace(
            self,
            extrapolation=factor,
            extrapolation_workers=None,
            extrapolation_batch_wa=None,
            extrapolation_iterations=None,
        )

    def batch_bounds(self, gamma_2: float, gamma_3: float) -> tuple[float, float]:
        """The b_w interval plans may use: widened by the b_w factor, capped by :func:`numerator_range`."""
        low, high = widen(*self.batch_wa, self.batch_factor)
        cap_low, cap_high = numerator_range(self.batch_wa, gamma_2, gamma_3)
        return max(low, cap_low), min(high, cap_high)

    def worker_bounds(self) -> tuple[int, int]:
        """The |N| interval plans may use (after extrapolation), integers."""
        return widen_int(*self.workers, self.workers_factor)

    def loss_below_logs(self, loss: float) -> bool:
        """Whether an SLO loss lies below every logged loss (``False`` without a logged range)."""
        return self.loss is not None and loss < self.loss[0]

    def iteration_limit(self) -> float | None:
        """The iterations beyond which a plan is extrapolated; ``None``: no logged steps."""
        return None if self.iterations is None else self.iterations[1] * self.iterations_factor

    @classmethod
    def from_dict(cls, data: object) -> SpotDomain:
        """Build from the ``workload.domain`` object of a file."""
        data = mapping("workload.domain", data)
        check_keys(
            "workload.domain",
            data,
            ["batch_wa", "workers"],
            [
                "cc",
                "extrapolation",
                "source",
                "extrapolation_workers",
                "extrapolation_batch_wa",
                "loss",
                "iterations",
                "extrapolation_iterations",
                "loss_axis",
                "min_iterations",
            ],
        )
        pairs: dict[str, Any] = {
            key: tuple(data[key]) if isinstance(data.get(key), list) else data.get(key)
            for key in ("batch_wa", "workers", "cc", "loss", "iterations")
        }
        return cls(
            **pairs,
            extrapolation=data.get("extrapolation", 1.0),
            source=data.get("source", ""),
            extrapolation_workers=data.get("extrapolation_workers"),
            extrapolation_batch_wa=data.get("extrapolation_batch_wa"),
            extrapolation_iterations=data.get("extrapolation_iterations"),
            loss_axis=data.get("loss_axis", "flag"),
            min_iterations=data.get("min_iterations", MIN_ITERATIONS),
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``workload.domain`` object (``from_dict(to_dict())`` gives an equal domain)."""

        def pair(value: tuple[float, float] | None) -> list[float] | None:
            return list(value) if value is not None else None

        return drop_none(
            {
                "batch_wa": list(self.batch_wa),
                "workers": list(self.workers),
                "cc": pair(self.cc),
                "extrapolation": self.extrapolation,
                "extrapolation_workers": self.extrapolation_workers,
                "extrapolation_batch_wa": self.extrapolation_batch_wa,
                "loss": pair(self.loss),
                "iterations": pair(self.iterations),
                "extrapolation_iterations": self.extrapolation_iterations,
                "loss_axis": self.loss_axis if self.loss_axis != "flag" else None,
                "min_iterations": self.min_iterations if self.min_iterations != MIN_ITERATIONS else None,
                "source": self.source,
            }
        )


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

    def with_extrapolation(self, factor: float) -> ServerlessDomain:
        """This domain with extrapolation factor ``factor``."""
        return dataclasses.replace(self, extrapolation=factor)

    def memory_bounds(self) -> tuple[float, float]:
        """The memory interval plans may use (after extrapolation), MB."""
        return widen(*self.memory_mb, self.extrapolation)

    def function_bounds(self) -> tuple[int, int | None]:
        """The function-count interval plans may use (after extrapolation); ``None``: no upper end."""
        if self.functions is None:
            return 1, None
        return widen_int(*self.functions, self.extrapolation)

    @classmethod
    def from_dict(cls, data: object) -> ServerlessDomain:
        """Build from the ``workload.domain`` object of a file."""
        data = mapping("workload.domain", data)
        check_keys("workload.domain", data, ["memory_mb"], ["functions", "extrapolation", "source"])
        memory, functions = data["memory_mb"], data.get("functions")
        return cls(
            memory_mb=tuple(memory) if isinstance(memory, list) else memory,
            functions=tuple(functions) if isinstance(functions, list) else functions,
            extrapolation=data.get("extrapolation", 1.0),
            source=data.get("source", ""),
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``workload.domain`` object."""
        return drop_none(
            {
                "memory_mb": list(self.memory_mb),
                "functions": list(self.functions) if self.functions is not None else None,
                "extrapolation": self.extrapolation,
                "source": self.source,
            }
        )


def as_domain(cls: type[SpotDomain | ServerlessDomain], value: object) -> Any:
    """``value`` as a ``cls`` domain: ``None``, an instance, or its dict form."""
    if value is None or isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        return cls.from_dict(value)
    raise InvalidInputError("workload.domain", f"must be an object, got {type(value).__name__}")
