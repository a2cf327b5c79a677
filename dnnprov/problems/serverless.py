"""Serverless provisioning problem data (λDNN, spec/serverless.md), validated on construction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from dnnprov.errors import InvalidInputError
from dnnprov.problems.validation import checks as check, plausibility
from dnnprov.problems.validation.domain import ServerlessDomain, as_domain
from dnnprov.problems.validation.fields import (
    build as _build,
    check_format,
    check_keys,
    drop_none,
    estimated_fields as _estimated,
    mapping,
    set_field as _set,
)


@dataclass(frozen=True)
class ServerlessWorkload:
    """Workload parameters of Table 5 and eqs. (2)-(9).

    Training rate ``R = rate_alpha * m + rate_beta`` (eq. 6, samples/s at ``m`` MB);
    storage bandwidth ``min(storage_alpha * m + storage_beta, B_s)`` (eq. 8, MB/s).
    ``domain`` is where the profile holds (:class:`~dnnprov.problems.validation.domain.ServerlessDomain`);
    plans outside it are infeasible. ``None``: nothing enforced.
    """

    name: str
    dataset_mb: float
    samples: int
    epochs: float
    model_mb: float
    local_batch: int
    max_global_batch: int
    rate_alpha: float
    rate_beta: float
    storage_alpha: float
    storage_beta: float
    min_memory_mb: int = 128
    estimated: tuple[str, ...] = ()
    domain: ServerlessDomain | None = None

    def __post_init__(self) -> None:
        w = "workload"
        check.name(f"{w}.name", self.name)
        _set(self, "dataset_mb", check.number(f"{w}.dataset_mb", self.dataset_mb, exclusive_minimum=0))
        _set(self, "samples", check.count(f"{w}.samples", self.samples, minimum=1, limit=check.MAX_SAMPLES))
        _set(self, "epochs", check.number(f"{w}.epochs", self.epochs, exclusive_minimum=0))
        _set(self, "model_mb", check.number(f"{w}.model_mb", self.model_mb, exclusive_minimum=0))
        _set(self, "local_batch", check.count(f"{w}.local_batch", self.local_batch, minimum=1, limit=check.MAX_BATCH))
        _set(
            self,
            "max_global_batch",
            check.count(f"{w}.max_global_batch", self.max_global_batch, minimum=1, limit=check.MAX_BATCH),
        )
        for name in ("rate_alpha", "rate_beta", "storage_alpha", "storage_beta"):
            _set(self, name, check.number(f"{w}.{name}", getattr(self, name)))
        _set(
            self,
            "min_memory_mb",
            check.count(f"{w}.min_memory_mb", self.min_memory_mb, minimum=1, limit=check.MAX_MEMORY_MB),
        )
        if self.max_global_batch < self.local_batch:
            raise InvalidInputError(
                f"{w}.max_global_batch", f"{self.max_global_batch} is below local_batch {self.local_batch}"
            )
        _set(self, "estimated", _estimated(f"{w}.estimated", self.estimated, self))
        _set(self, "domain", as_domain(ServerlessDomain, self.domain))


@dataclass(frozen=True)
class ServerlessPlatform:
    """Function platform and PS facts (AWS Lambda + m5.large PS by default, spec section 6)."""

    ps_bandwidth_mb_s: float = 1200.0
    function_bandwidth_mb_s: float = 84.0
    storage_bandwidth_mb_s: float = 115.0
    memory_step_mb: int = 64
    max_memory_mb: int = 3008
    price_per_gb_s: float = 0.0000166667
    price_per_request: float = 0.0000002
    timeout_s: float = 900.0
    checkpoint_margin_s: float = 30.0
    checkpoint_overhead_s: float = 6.0
    concurrency_limit: int = 1000
    ps_price_per_h: float = 0.096
    ps_type: str = "m5.large"

    def __post_init__(self) -> None:
        p = "platform"
        for name in ("ps_bandwidth_mb_s", "function_bandwidth_mb_s", "storage_bandwidth_mb_s", "timeout_s"):
            _set(self, name, check.number(f"{p}.{name}", getattr(self, name), exclusive_minimum=0))
        for name in (
            "price_per_gb_s",
            "price_per_request",
            "checkpoint_margin_s",
            "checkpoint_overhead_s",
            "ps_price_per_h",
        ):
            _set(self, name, check.number(f"{p}.{name}", getattr(self, name), minimum=0))
        _set(
            self,
            "memory_step_mb",
            check.count(f"{p}.memory_step_mb", self.memory_step_mb, minimum=1, limit=check.MAX_MEMORY_MB),
        )
        _set(
            self,
            "max_memory_mb",
            check.count(
                f"{p}.max_memory_mb", self.max_memory_mb, minimum=self.memory_step_mb, limit=check.MAX_MEMORY_MB
            ),
        )
        _set(
            self,
            "concurrency_limit",
            check.count(f"{p}.concurrency_limit", self.concurrency_limit, minimum=1, limit=check.MAX_FUNCTIONS),
        )
        check.name(f"{p}.ps_type", self.ps_type)
        if self.checkpoint_margin_s >= self.timeout_s:
            raise InvalidInputError(
                f"{p}.checkpoint_margin_s",
                f"{self.checkpoint_margin_s:g} s leaves no time within timeout_s = {self.timeout_s:g} s",
            )


@dataclass(frozen=True)
class ServerlessConstraints:
    """Side constraints: PS count and function-count ranges (inclusive), a budget cap."""

    ps_count: tuple[int, int] = (1, 1)  # the upper limit is required
    functions: tuple[int, int | None] = (1, None)
    budget_usd: float | None = None

    def __post_init__(self) -> None:
        c = "constraints"
        low, high = check.int_range(f"{c}.ps_count", self.ps_count, minimum=1, limit=check.MAX_PS_COUNT)
        if high is None:
            raise InvalidInputError(f"{c}.ps_count", "needs an upper limit (the PS count is enumerated)")
        _set(self, "ps_count", (low, high))
        _set(self, "functions", check.int_range(f"{c}.functions", self.functions, minimum=1))
        _set(self, "budget_usd", check.optional_number(f"{c}.budget_usd", self.budget_usd, exclusive_minimum=0))


@dataclass(frozen=True)
class ServerlessProblem:
    """Choose ``n`` functions of ``m`` MB each (and the PS count) to meet T_o at least cost."""

    workload: ServerlessWorkload
    time_s: float
    platform: ServerlessPlatform = field(default_factory=ServerlessPlatform)
    constraints: ServerlessConstraints = field(default_factory=ServerlessConstraints)
    name: str = "serverless"
    notes: str = ""

    def __post_init__(self) -> None:
        _set(self, "time_s", check.number("slo.time_s", self.time_s, exclusive_minimum=0))
        check.name("name", self.name)
        check.text("notes", self.notes, allow_empty=True)
        for part, cls in (
            ("workload", ServerlessWorkload),
            ("platform", ServerlessPlatform),
            ("constraints", ServerlessConstraints),
        ):
            if not isinstance(getattr(self, part), cls):
                raise InvalidInputError(part, f"must be a {cls.__name__}, got {type(getattr(self, part)).__name__}")
        w, p = self.workload, self.platform
        if w.min_memory_mb > p.max_memory_mb:
            raise InvalidInputError(
                "workload.min_memory_mb", f"{w.min_memory_mb} MB is above platform.max_memory_mb = {p.max_memory_mb}"
            )
        sizes = self.memory_sizes()
        if not sizes:
            raise InvalidInputError(
                "platform.memory_step_mb", "no memory size on the grid lies between min_memory_mb and max_memory_mb"
            )
        if sizes > check.MAX_MEMORY_POINTS:
            raise InvalidInputError(
                "platform.memory_step_mb",
                f"{p.memory_step_mb} MB steps up to {p.max_memory_mb:,} MB "
                f"make {sizes:,} memory sizes, more than the limit of {check.MAX_MEMORY_POINTS:,} "
                "(resource limits: docs/instance-format.md)",
            )
        low, high = self.function_range()
        if low > high:
            raise InvalidInputError(
                "constraints.functions",
                f"the range starts at {low} functions, above "
                f"the limit of {high} (constraints.functions / platform.concurrency_limit)",
            )
        ps_low, ps_high = self.constraints.ps_count
        plans = (high - low + 1) * sizes * (ps_high - ps_low + 1)
        if plans > check.MAX_SERVERLESS_PLANS:
            raise InvalidInputError(
                "constraints.functions",
                f"{high - low + 1:,} function counts x {sizes:,} memory sizes x "
                f"{ps_high - ps_low + 1} PS counts make {plans:,} plans, more than the limit of "
                f"{check.MAX_SERVERLESS_PLANS:,} (resource limits: docs/instance-format.md)",
            )
        plausibility.warn(plausibility.serverless_findings(self))

    def _first_memory(self) -> int:
        step = self.platform.memory_step_mb
        return max(-(-self.workload.min_memory_mb // step) * step, step)

    def memory_sizes(self) -> int:
        """How many memory sizes :meth:`memory_grid` holds (without building it)."""
        step, first = self.platform.memory_step_mb, self._first_memory()
        return max(0, (self.platform.max_memory_mb - first) // step + 1)

    def memory_grid(self) -> list[int]:
        """Memory sizes allowed by eq. (12) and the workload's minimum memory."""
        step = self.platform.memory_step_mb
        return list(range(self._first_memory(), self.platform.max_memory_mb + 1, step))

    def function_range(self) -> tuple[int, int]:
        """Inclusive range of function counts: constraints and the concurrency limit."""
        low, high = self.constraints.functions
        limit = self.platform.concurrency_limit
        return low, limit if high is None else min(high, limit)

    def replace(self, **changes: Any) -> ServerlessProblem:
        """A copy with some top-level fields changed (validated again)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return ServerlessProblem(**values)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServerlessProblem:
        """Build from the instance-file dict (see docs/instance-format.md)."""
        data = mapping("", data)
        check_keys("", data, ["format", "version", "workload", "slo"], ["name", "notes", "platform", "constraints"])
        check_format(data, "dnnprov/serverless")
        workload = _build(
            ServerlessWorkload,
            "workload",
            data["workload"],
            [
                "name",
                "dataset_mb",
                "samples",
                "epochs",
                "model_mb",
                "local_batch",
                "max_global_batch",
                "rate_alpha",
                "rate_beta",
                "storage_alpha",
                "storage_beta",
            ],
        )
        slo = mapping("slo", data["slo"])
        check_keys("slo", slo, ["time_s"], [])
        platform = _build(ServerlessPlatform, "platform", data.get("platform", {}), [])
        cons = dict(mapping("constraints", data.get("constraints", {})))
        check_keys("constraints", cons, [], [f.name for f in fields(ServerlessConstraints)])
        for key in ("ps_count", "functions"):
            if key in cons and isinstance(cons[key], list):
                cons[key] = tuple(cons[key])
        return cls(
            workload=workload,
            time_s=slo["time_s"],
            platform=platform,
            constraints=ServerlessConstraints(**cons),
            name=data.get("name", "serverless"),
            notes=data.get("notes", ""),
        )

    def to_dict(self) -> dict[str, Any]:
        """The instance-file dict; ``from_dict(to_dict())`` gives an equal problem."""
        workload = {f.name: getattr(self.workload, f.name) for f in fields(self.workload)}
        workload["estimated"] = list(self.workload.estimated)
        workload["domain"] = self.workload.domain.to_dict() if self.workload.domain else None
        workload = drop_none(workload)
        c = self.constraints
        return {
            "format": "dnnprov/serverless",
            "version": 1,
            "name": self.name,
            "notes": self.notes,
            "workload": workload,
            "platform": {f.name: getattr(self.platform, f.name) for f in fields(self.platform)},
            "slo": {"time_s": self.time_s},
            "constraints": drop_none(
                {"ps_count": list(c.ps_count), "functions": list(c.functions), "budget_usd": c.budget_usd}
            ),
        }
