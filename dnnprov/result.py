"""Solver-neutral outcome of :func:`dnnprov.solve`: status, plan, cost, proven bound."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, overload

from dnnprov.errors import InvalidInputError

if TYPE_CHECKING:  # no NumPy at run time: the solvers pass arrays of plans to Objective.value
    import numpy as np


class Status(str, Enum):
    """How a solve ended.

    ``optimal``: the plan is proven cheapest for the stated model (bound == cost).
    ``feasible``: the plan meets every constraint; optimality is not claimed.
    ``infeasible``: proven that no plan meets the constraints.
    ``limit``: a time or size limit stopped the method; see plan (incumbent) and bound.
    ``unknown``: the method ended with no plan and no proof (e.g. a heuristic found nothing).
    ``error``: the method failed; see ``message``.
    """

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    LIMIT = "limit"
    UNKNOWN = "unknown"
    ERROR = "error"


@dataclass(frozen=True)
class SpotPlan:
    """Counts per column (type name, or ``name:on-demand``) and the PS count."""

    counts: dict[str, int]
    ps: int = 1

    @property
    def workers(self) -> int:
        """Total number of workers |N|."""
        return sum(self.counts.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{"counts": {type: n}, "ps": s}`` (zero counts omitted)."""
        return {"counts": {k: v for k, v in self.counts.items() if v}, "ps": self.ps}

    def __str__(self) -> str:
        used = ", ".join(f"{v} x {k}" for k, v in self.counts.items() if v) or "no workers"
        return f"{used}; {self.ps} PS"


@dataclass(frozen=True)
class ServerlessPlan:
    """Number of functions, memory per function, local batch (eq. 9) and PS count."""

    functions: int
    memory_mb: int
    local_batch: float
    ps: int = 1

    def to_dict(self) -> dict[str, Any]:
        """JSON form with ``functions``, ``memory_mb``, ``local_batch``, ``ps``."""
        return {
            "functions": self.functions,
            "memory_mb": self.memory_mb,
            "local_batch": self.local_batch,
            "ps": self.ps,
        }

    def __str__(self) -> str:
        return f"{self.functions} functions x {self.memory_mb} MB (local batch {self.local_batch:g}); {self.ps} PS"


#: The objectives :func:`dnnprov.solve` accepts (``weighted`` as ``weighted:W``, W in $/s).
OBJECTIVES = ("cost", "time", "weighted:W")


@dataclass(frozen=True)
class Objective:
    """What a solve minimizes (docs/solvers.md, "Objectives").

    ``cost``: least cost under the deadline (the default). ``time``: least training time
    within the budget, ties broken by least cost (lexicographic (time, cost)).
    ``weighted``: least ``cost + weight * time`` (``weight`` in $/s).
    """

    kind: str = "cost"
    weight: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("cost", "time", "weighted"):
            raise InvalidInputError("objective", f"must be one of {', '.join(OBJECTIVES)}; got {str(self.kind)[:40]!r}")
        if not (isinstance(self.weight, (int, float)) and 0 <= self.weight <= 1e15):
            raise InvalidInputError(
                "objective", f"the weight W must be a number from 0 to 1e15 $/s, got {self.weight!r}"
            )

    @classmethod
    def parse(cls, text: object) -> Objective:
        """``"cost"``, ``"time"`` or ``"weighted:W"`` (W a finite number >= 0, in $/s)."""
        if isinstance(text, Objective):
            return text
        if text in ("cost", "time"):
            return cls(str(text))
        if isinstance(text, str) and text.startswith("weighted:"):
            try:
                weight = float(text.removeprefix("weighted:"))
            except ValueError:
                weight = math.nan
            if math.isfinite(weight) and 0 <= weight <= 1e15:
                return cls("weighted", weight)
            raise InvalidInputError(
                "objective", f"weighted:W needs a weight W in $/s, a finite number from 0 to 1e15, got {text[:40]!r}"
            )
        raise InvalidInputError("objective", f"must be one of {', '.join(OBJECTIVES)}; got {str(text)[:40]!r}")

    @property
    def unit(self) -> str:
        """The unit of the objective's value, bound and gap: ``s`` for time, else ``$``."""
        return "s" if self.kind == "time" else "$"

    @overload
    def value(self, time_s: float | None, cost: float | None) -> float | None: ...
    @overload
    def value(self, time_s: np.ndarray, cost: np.ndarray) -> np.ndarray: ...

    def value(self, time_s: Any, cost: Any) -> Any:
        """The objective's value of a plan with this time and cost (``None`` where one it needs is missing);
        element-wise on arrays of plans."""
        if self.kind == "cost":
            return cost
        if self.kind == "time":
            return time_s
        return None if time_s is None or cost is None else cost + self.weight * time_s

    def __str__(self) -> str:
        return f"weighted:{self.weight!r}" if self.kind == "weighted" else self.kind


#: The constraint groups a :class:`Reason` may name.
REASON_KINDS = (
    "deadline",
    "budget",
    "quota",
    "vcpu_quota",
    "workers",
    "functions",
    "domain",
    "constraint",
    "combination",
    "loss",
    "revocation",
    "unexplained",
)


@dataclass(frozen=True)
class Reason:
    """Why an instance is infeasible: a constraint that cannot hold, and the relaxation that admits a plan.

    ``kind`` names the constraint group (``deadline``, ``budget``, ``quota``, ``vcpu_quota``,
    ``workers``, ``functions``, ``domain``, ``constraint`` for a user's Pyomo constraint,
    ``combination``, ``loss``, ``revocation``, ``unexplained``), ``field`` the
    instance field or constraint name, ``current`` its value and ``needed`` the value that
    admits ``plan`` (a plan meeting every other constraint). ``proven`` says whether
    ``needed`` is shown to be the least such relaxation (by exhaustive evaluation or exact
    solves); ``False``: a plan shows ``needed`` suffices, or the value is a bound, and the
    ``text`` says which.
    """

    kind: str
    field: str
    current: Any
    needed: Any
    proven: bool
    text: str
    plan: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.kind not in REASON_KINDS:
            raise ValueError(f"unknown reason kind {self.kind!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON form with the stable keys ``kind, field, current, needed, proven, text, plan``."""
        return {
            "kind": self.kind,
            "field": self.field,
            "current": _json_value(self.current),
            "needed": _json_value(self.needed),
            "proven": bool(self.proven),
            "text": self.text,
            "plan": self.plan,
        }


def _json_value(value: Any) -> Any:
    """Floats made JSON-safe (``None`` for inf/NaN), also inside dicts and lists."""
    if isinstance(value, float):
        return finite_or_none(value)
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    return value


@dataclass(frozen=True)
class Result:
    """What a solver returns.

    ``bound`` is a proven lower bound on the optimal value of ``objective`` (the cost, by
    default; seconds for ``time``) in the stated model (``None`` when the method proves
    nothing); ``gap`` is ``(value - bound) / value``, with :attr:`value` the plan's objective value.
    ``details`` holds model quantities of the plan (b_w, R, iterations, ...) and
    ``stats`` counters of the method (plans evaluated, MILPs solved, ...).
    ``warnings`` are the problem's plausibility warnings as ``(field, message)`` pairs.
    ``infeasibility`` holds, for an ``infeasible`` result, the :class:`Reason` s why.
    """

    status: Status
    method: str
    kind: str
    model: str
    instance: str
    plan: SpotPlan | ServerlessPlan | None = None
    time_s: float | None = None
    cost: float | None = None
    bound: float | None = None
    solve_seconds: float = 0.0
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[tuple[str, str], ...] = ()
    infeasibility: tuple[Reason, ...] = ()
    objective: Objective = Objective()

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))
        object.__setattr__(self, "objective", Objective.parse(self.objective))
        if self.status is Status.OPTIMAL and (self.plan is None or self.bound is None):
            raise ValueError("an optimal result needs a plan and a proven bound")

    @property
    def value(self) -> float | None:
        """The plan's objective value: its cost, its time (``time``) or cost + W time (``weighted``)."""
        return self.objective.value(self.time_s, self.cost)

    @property
    def gap(self) -> float | None:
        """Relative optimality gap ``(value - bound) / value`` where both are known."""
        value = self.value
        if value is None or self.bound is None:
            return None
        if value == 0:
            return 0.0
        return max(0.0, (value - self.bound) / value)

    def is_feasible(self) -> bool:
        """Whether a plan meeting every constraint was returned."""
        return self.plan is not None and self.status in (Status.OPTIMAL, Status.FEASIBLE, Status.LIMIT)

    def to_dict(self) -> dict[str, Any]:
        """Stable JSON-ready dict (the CLI's ``--json`` output)."""
        return {
            "status": self.status.value,
            "method": self.method,
            "kind": self.kind,
            "model": self.model,
            "instance": self.instance,
            "plan": None if self.plan is None else self.plan.to_dict(),
            "time_s": finite_or_none(self.time_s),
            "cost": finite_or_none(self.cost),
            "bound": finite_or_none(self.bound),
            "gap": finite_or_none(self.gap),
            "solve_seconds": self.solve_seconds,
            "message": self.message,
            "details": {k: finite_or_none(v) if isinstance(v, float) else v for k, v in self.details.items()},
            "stats": dict(self.stats),
            "warnings": [{"field": f, "message": m} for f, m in self.warnings],
            "infeasibility": [reason.to_dict() for reason in self.infeasibility],
            "objective": str(self.objective),
            "objective_value": finite_or_none(self.value),
        }

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), **kwargs)

    def to_row(self) -> dict[str, Any]:
        """One flat row (for pandas / CSV): plan as a JSON string."""
        d = self.to_dict()
        return {
            "instance": self.instance,
            "kind": self.kind,
            "model": self.model,
            "method": self.method,
            "status": d["status"],
            "cost": d["cost"],
            "time_s": d["time_s"],
            "bound": d["bound"],
            "gap": d["gap"],
            "solve_seconds": self.solve_seconds,
            "plan": json.dumps(d["plan"], sort_keys=True) if d["plan"] else "",
            "message": self.message,
        }

    def summary(self) -> str:
        """Readable multi-line summary."""
        goal = "" if self.objective.kind == "cost" else f", objective {self.objective}"
        lines = [f"{self.instance} [{self.kind}, model {self.model}] by {self.method}{goal}: {self.status.value}"]
        if self.plan is not None:
            lines.append(f"  plan : {self.plan}")
        if self.time_s is not None:
            lines.append(f"  time : {self.time_s:.2f} s")
        if self.cost is not None:
            lines.append(f"  cost : ${self.cost:.6f}")
        if self.status is Status.INFEASIBLE:
            lines.append("  infeasible: no plan meets every constraint" + (", because:" if self.infeasibility else ""))
            for reason in self.infeasibility:
                lines.append(f"    - {reason.text}")
        elif self.bound is not None and math.isfinite(self.bound):
            gap = "" if self.gap is None else f" (gap {100 * self.gap:.4f} %)"
            if self.objective.kind == "cost":
                lines.append(f"  bound: ${self.bound:.6f}{gap}")
            else:
                value = "" if self.value is None else f"{_in_unit(self.value, self.objective)}, "
                lines.append(f"  objective: {self.objective}: {value}bound {_in_unit(self.bound, self.objective)}{gap}")
        lines.append(f"  solve: {self.solve_seconds:.3f} s")
        if self.message:
            lines.append(f"  note : {self.message}")
        return "\n".join(lines)

    __str__ = summary


def _in_unit(value: float, objective: Objective) -> str:
    """A value of ``objective`` written with its unit."""
    return f"{value:.2f} s" if objective.unit == "s" else f"${value:.6f}"


def finite_or_none(value: float | None) -> float | None:
    """``value`` as a float, or ``None`` for None, inf and NaN (JSON has no infinities)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None
