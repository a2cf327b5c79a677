"""Spot provisioning problem data (spotDNN, spec/spot.md), validated on construction.

A :class:`SpotProblem` is one workload, one set of offered instance types, SLOs and side
constraints. Solvers do not read it directly: :meth:`SpotProblem.columns` compiles it into
:class:`SpotColumns`, one column per (instance type, market) that may be bought.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from dnnprov.errors import InvalidInputError
from dnnprov.problems.interruption import Interruption
from dnnprov.problems.validation import checks as check, plausibility
from dnnprov.problems.validation.domain import SpotDomain, as_domain
from dnnprov.problems.validation.fields import (
    build as _build,
    check_format,
    check_keys,
    drop_none,
    estimated_fields as _estimated,
    mapping,
    set_field as _set,
)

MODELS = ("paper", "reference")
LOSS_VARIANTS = ("cc", "no-cc")
MARKETS = ("spot", "on-demand")
ON_DEMAND_SUFFIX = ":on-demand"


def column_label(type_name: str, market: str) -> str:
    """Label of the column buying ``type_name`` on ``market`` (spot columns keep the name)."""
    return type_name if market == "spot" else type_name + ON_DEMAND_SUFFIX


def default_family(type_name: str) -> str:
    """AWS vCPU-quota family from a type name: ``g4dn.xlarge`` -> ``G``, ``p3.2xlarge`` -> ``P``."""
    match = re.match(r"[a-zA-Z]", type_name)
    return match.group(0).upper() if match else type_name


#: An availability-zone name: AWS (``us-east-1a``, ``us-gov-west-1b``, local zones such as
#: ``us-west-2-lax-1a``) and GCP (``us-central1-a``): lower-case words and digits joined by
#: hyphens, a region number, and a zone letter at the end.
ZONE_PATTERN = re.compile(r"^[a-z]{2,}(-[a-z0-9]+)*-?[0-9]+-?[a-z]$")
MAX_ZONES = 64


@dataclass(frozen=True)
class SpotPool:
    """One spot capacity pool of a type: the type offered in one availability zone.

    ``spot_price_per_h`` is the pool's own spot price (``None``: the type's), ``capacity``
    the most instances the pool can hold at once (``None``: up to the type's quota),
    ``interruption`` the pool's revocation model (``None``: the type's). The solver prices
    plans at the type's spot price; the launch policy places the type's instances on pools.
    """

    zone: str
    spot_price_per_h: float | None = None
    capacity: int | None = None
    interruption: Interruption | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.zone, str) or len(self.zone) > 64 or not ZONE_PATTERN.match(self.zone):
            raise InvalidInputError(
                "zone",
                f"must be an availability-zone name such as us-east-1a or us-central1-a, got {check.short(self.zone)}",
            )
        _set(self, "spot_price_per_h", check.optional_number("spot_price_per_h", self.spot_price_per_h, minimum=0))
        _set(self, "capacity", check.optional_count("capacity", self.capacity, minimum=0, limit=check.MAX_QUOTA))
        if self.interruption is not None and not isinstance(self.interruption, Interruption):
            _set(self, "interruption", Interruption.from_dict("interruption", self.interruption))

    @classmethod
    def from_dict(cls, where: str, data: object) -> SpotPool:
        """Build from the instance-file form ``{"zone", "spot_price_per_h", "capacity", "interruption"}``."""
        data = mapping(where, data)
        check_keys(where, data, ["zone"], ["spot_price_per_h", "capacity", "interruption"])
        try:
            return cls(**dict(data))
        except InvalidInputError as exc:
            raise InvalidInputError(f"{where}.{exc.field}", exc.problem) from None

    def to_dict(self) -> dict[str, Any]:
        """The instance-file form (``None`` fields omitted)."""
        return drop_none(
            {
                "zone": self.zone,
                "spot_price_per_h": self.spot_price_per_h,
                "capacity": self.capacity,
                "interruption": self.interruption.to_dict() if self.interruption else None,
            }
        )


@dataclass(frozen=True)
class InstanceType:
    """An instance type offered to the provisioner, with this workload's profile on it.

    The worker batch is ``gpus * batch_per_gpu``; ``batch_per_gpu`` may instead be derived
    from ``gpu_memory_gb`` by eq. (10). The per-iteration compute time is either given
    (``compute_time_s``) or derived from the profiled lone-worker ``speed_samples_per_s``
    by eq. (6). ``interruption`` is the offer's revocation model on the spot market
    (:class:`~dnnprov.problems.interruption.Interruption`, with its source); ``None``: not known.
    ``zones`` are the type's spot pools (:class:`SpotPool`, one per availability zone; ``()``:
    one anonymous pool); ``quota`` stays the total over them. ``estimate`` says where an
    estimated (not measured) compute time or speed came from (``None``: measured); results
    list such types as warnings (docs/profiler.md, "Types without a measured profile").
    """

    name: str
    gpus: int
    spot_price_per_h: float
    quota: int
    batch_per_gpu: int | None = None
    gpu_memory_gb: float | None = None
    speed_samples_per_s: float | None = None
    compute_time_s: float | None = None
    vcpus: int | None = None
    on_demand_price_per_h: float | None = None
    on_demand_quota: int | None = None
    family: str | None = None
    interruption: Interruption | None = None
    zones: tuple[SpotPool, ...] = ()
    estimate: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise InvalidInputError(
                "instance_types", f"type name must be a non-empty string, got {check.short(self.name)}"
            )
        where = f"instance_types.{self.name}"
        check.name(where, self.name)
        if ON_DEMAND_SUFFIX in self.name:
            raise InvalidInputError(where, f"type names may not contain {ON_DEMAND_SUFFIX!r}")
        _set(self, "gpus", check.count(f"{where}.gpus", self.gpus, minimum=1, limit=check.MAX_GPUS))
        _set(self, "spot_price_per_h", check.number(f"{where}.spot_price_per_h", self.spot_price_per_h, minimum=0))
        _set(self, "quota", check.count(f"{where}.quota", self.quota, minimum=0, limit=check.MAX_QUOTA))
        _set(
            self,
            "batch_per_gpu",
            check.optional_count(f"{where}.batch_per_gpu", self.batch_per_gpu, minimum=1, limit=check.MAX_BATCH),
        )
        _set(
            self,
            "gpu_memory_gb",
            check.optional_number(f"{where}.gpu_memory_gb", self.gpu_memory_gb, exclusive_minimum=0),
        )
        _set(
            self,
            "speed_samples_per_s",
            check.optional_number(f"{where}.speed_samples_per_s", self.speed_samples_per_s, exclusive_minimum=0),
        )
        _set(
            self,
            "compute_time_s",
            check.optional_number(f"{where}.compute_time_s", self.compute_time_s, exclusive_minimum=0),
        )
        _set(self, "vcpus", check.optional_count(f"{where}.vcpus", self.vcpus, minimum=1, limit=check.MAX_VCPUS))
        _set(
            self,
            "on_demand_price_per_h",
            check.optional_number(f"{where}.on_demand_price_per_h", self.on_demand_price_per_h, minimum=0),
        )
        _set(
            self,
            "on_demand_quota",
            check.optional_count(f"{where}.on_demand_quota", self.on_demand_quota, minimum=0, limit=check.MAX_QUOTA),
        )
        if self.batch_per_gpu is None and self.gpu_memory_gb is None:
            raise InvalidInputError(
                f"{where}.batch_per_gpu",
                "missing: give batch_per_gpu, or gpu_memory_gb with workload alpha_2/beta_2 (eq. 10)",
            )
        if (self.speed_samples_per_s is None) == (self.compute_time_s is None):
            raise InvalidInputError(
                f"{where}.compute_time_s", "give exactly one of compute_time_s and speed_samples_per_s"
            )
        if self.family is not None:
            check.name(f"{where}.family", self.family)
        if self.interruption is not None and not isinstance(self.interruption, Interruption):
            _set(self, "interruption", Interruption.from_dict(f"{where}.interruption", self.interruption))
        _set(self, "zones", _check_zones(f"{where}.zones", self.zones))
        region = self.name.partition("@")[2].partition(":")[0]  # TYPE@REGION: a pool of that region
        for i, pool in enumerate(self.zones):
            if region and not pool.zone.startswith(region):
                raise InvalidInputError(
                    f"{where}.zones[{i}].zone", f"{pool.zone} is not a zone of the type's region {region}"
                )
        if self.estimate is not None:
            check.text(f"{where}.estimate", self.estimate)
            if len(self.estimate) > 2000:
                raise InvalidInputError(f"{where}.estimate", f"{len(self.estimate):,} characters; at most 2,000")

    @property
    def pool_names(self) -> tuple[str, ...]:
        """The zones of the type's pools (empty: one anonymous pool)."""
        return tuple(p.zone for p in self.zones)

    @property
    def quota_family(self) -> str:
        """The vCPU-quota family (explicit, or from the name's first letter)."""
        return self.family or default_family(self.name)


def _check_zones(where: str, zones: object) -> tuple[SpotPool, ...]:
    """A type's pools: a list of :class:`SpotPool` (or their dicts), each zone once."""
    if not isinstance(zones, (list, tuple)):
        raise InvalidInputError(where, f'must be a list of pools {{"zone": ...}}, got {check.short(zones)}')
    if len(zones) > MAX_ZONES:
        raise InvalidInputError(where, f"{len(zones):,} pools are more than the limit of {MAX_ZONES}")
    pools = []
    for i, pool in enumerate(zones):
        if isinstance(pool, SpotPool):
            pools.append(pool)
            continue
        pools.append(SpotPool.from_dict(f"{where}[{i}]", pool))
    seen: set[str] = set()
    for i, pool in enumerate(pools):
        if pool.zone in seen:
            raise InvalidInputError(f"{where}[{i}].zone", f"{pool.zone} is listed twice")
        seen.add(pool.zone)
    return tuple(pools)


#: the fields every spot workload states (instance and profile files alike)
WORKLOAD_KEYS = (
    "name", "param_size_mb", "bandwidth_req_mb_s", "alpha_1", "beta_1",
    "gamma_1", "gamma_2", "gamma_3", "gamma_4", "gamma_5",
)  # fmt: skip


@dataclass(frozen=True)
class SpotWorkload:
    """Workload-specific coefficients: eqs. (3), (7)-(10).

    ``loss_variant`` ``"cc"`` is eq. (3) with the convergence coefficient R; ``"no-cc"``
    is the authors' code: ``j = (g2 b_w + g3) sqrt(K) / (L - g5) - g1`` (gamma_4 unused).
    ``estimated`` names the fields that were not published and were estimated.
    ``domain`` is where the fit holds (:class:`~dnnprov.problems.validation.domain.SpotDomain`); plans outside
    it are infeasible. ``None``: no domain known, nothing is enforced.
    """

    name: str
    param_size_mb: float
    bandwidth_req_mb_s: float
    alpha_1: float
    beta_1: float
    gamma_1: float
    gamma_2: float
    gamma_3: float
    gamma_4: float
    gamma_5: float
    loss_variant: str = "cc"
    alpha_2: float | None = None
    beta_2: float | None = None
    estimated: tuple[str, ...] = ()
    domain: SpotDomain | None = None

    def __post_init__(self) -> None:
        w = "workload"
        check.name(f"{w}.name", self.name)
        _set(self, "param_size_mb", check.number(f"{w}.param_size_mb", self.param_size_mb, exclusive_minimum=0))
        _set(
            self,
            "bandwidth_req_mb_s",
            check.number(f"{w}.bandwidth_req_mb_s", self.bandwidth_req_mb_s, exclusive_minimum=0),
        )
        for name in ("alpha_1", "beta_1", "gamma_1", "gamma_2", "gamma_3", "gamma_5"):
            _set(self, name, check.number(f"{w}.{name}", getattr(self, name)))
        _set(self, "gamma_4", check.number(f"{w}.gamma_4", self.gamma_4, minimum=0))
        _set(self, "loss_variant", check.choice(f"{w}.loss_variant", self.loss_variant, LOSS_VARIANTS))
        _set(self, "alpha_2", check.optional_number(f"{w}.alpha_2", self.alpha_2))
        _set(self, "beta_2", check.optional_number(f"{w}.beta_2", self.beta_2))
        _set(self, "estimated", _estimated(f"{w}.estimated", self.estimated, self))
        _set(self, "domain", as_domain(SpotDomain, self.domain))


@dataclass(frozen=True)
class SpotPlatform:
    """Parameter-server and worker-bus facts (Table III): one PS gives ``ps_bandwidth_mb_s``."""

    ps_bandwidth_mb_s: float = 1200.0
    pcie_bandwidth_mb_s: float = 10000.0
    ps_price_per_h: float = 0.0
    ps_type: str = "m5.xlarge"

    def __post_init__(self) -> None:
        p = "platform"
        _set(
            self,
            "ps_bandwidth_mb_s",
            check.number(f"{p}.ps_bandwidth_mb_s", self.ps_bandwidth_mb_s, exclusive_minimum=0),
        )
        _set(
            self,
            "pcie_bandwidth_mb_s",
            check.number(f"{p}.pcie_bandwidth_mb_s", self.pcie_bandwidth_mb_s, exclusive_minimum=0),
        )
        _set(self, "ps_price_per_h", check.number(f"{p}.ps_price_per_h", self.ps_price_per_h, minimum=0))
        check.name(f"{p}.ps_type", self.ps_type)


@dataclass(frozen=True)
class SpotSLO:
    """Objective training loss and time (eqs. 12-13); ``takeover_overhead_s`` is added to T."""

    loss: float
    time_s: float
    takeover_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        _set(self, "loss", check.number("slo.loss", self.loss))
        _set(self, "time_s", check.number("slo.time_s", self.time_s, exclusive_minimum=0))
        _set(self, "takeover_overhead_s", check.number("slo.takeover_overhead_s", self.takeover_overhead_s, minimum=0))
        if self.takeover_overhead_s >= self.time_s:
            raise InvalidInputError(
                "slo.takeover_overhead_s",
                f"{self.takeover_overhead_s:g} s leaves no time within slo.time_s = {self.time_s:g} s",
            )


@dataclass(frozen=True)
class VcpuQuota:
    """AWS-style quota: vCPUs summed over the types of ``family`` bought on ``market``."""

    family: str
    market: str
    vcpus: int

    def __post_init__(self) -> None:
        if not isinstance(self.family, str) or not self.family:
            raise InvalidInputError(
                "constraints.vcpu_quotas", f"family must be a non-empty string, got {check.short(self.family)}"
            )
        where = f"constraints.vcpu_quotas.{self.family}"
        check.name(f"{where}.family", self.family)
        _set(self, "market", check.choice(f"{where}.market", self.market, MARKETS))
        _set(self, "vcpus", check.integer(f"{where}.vcpus", self.vcpus, minimum=0))


@dataclass(frozen=True)
class SpotConstraints:
    """Side constraints beyond the paper's quotas.

    ``existing`` maps column labels (type name, or ``name:on-demand``) to instances that are
    already running and must be kept (re-planning after a revocation); they count towards
    quotas and cost. ``ps_count`` and ``workers`` are inclusive ``(low, high)`` ranges
    (``high`` ``None``: no limit).
    """

    existing: Mapping[str, int] = field(default_factory=dict)
    ps_count: tuple[int, int] = (1, 1)  # the upper limit is required
    workers: tuple[int, int | None] = (1, None)
    budget_usd: float | None = None
    markets: tuple[str, ...] = ("spot",)
    vcpu_quotas: tuple[VcpuQuota, ...] = ()

    def __post_init__(self) -> None:
        c = "constraints"
        existing = check_existing(f"{c}.existing", self.existing)
        _set(self, "existing", existing)
        low, high = check.int_range(f"{c}.ps_count", self.ps_count, minimum=1, limit=check.MAX_PS_COUNT)
        if high is None:
            raise InvalidInputError(f"{c}.ps_count", "needs an upper limit (the PS count is enumerated)")
        _set(self, "ps_count", (low, high))
        _set(self, "workers", check.int_range(f"{c}.workers", self.workers, minimum=1))
        _set(self, "budget_usd", check.optional_number(f"{c}.budget_usd", self.budget_usd, exclusive_minimum=0))
        markets = tuple(self.markets) if isinstance(self.markets, (list, tuple)) else self.markets
        if not isinstance(markets, tuple) or not markets:
            raise InvalidInputError(
                f"{c}.markets", f"must be a non-empty list of {MARKETS}, got {check.short(self.markets)}"
            )
        for i, market in enumerate(markets):
            check.choice(f"{c}.markets[{i}]", market, MARKETS)
        if len(set(markets)) != len(markets):
            raise InvalidInputError(f"{c}.markets", "lists a market twice")
        _set(self, "markets", markets)
        quotas = tuple(self.vcpu_quotas)
        for q in quotas:
            if not isinstance(q, VcpuQuota):
                raise InvalidInputError(f"{c}.vcpu_quotas", f"entries must be VcpuQuota, got {q!r}")
        _set(self, "vcpu_quotas", quotas)


def check_existing(where: str, existing: object) -> dict[str, int]:
    """Validate a ``{column label: count}`` mapping of running instances."""
    if not isinstance(existing, Mapping):
        raise InvalidInputError(where, "must map instance types to counts")
    for k in existing:
        check.name(f"{where}.{k}" if isinstance(k, str) else where, k)
    return {k: check.count(f"{where}.{k}", v, minimum=0, limit=check.MAX_QUOTA) for k, v in existing.items()}


@dataclass(frozen=True)
class SpotColumns:
    """The problem compiled to arrays, one entry per purchasable (type, market) column.

    ``lower`` holds the kept existing instances, ``upper`` the quota. ``batch`` is the
    worker batch ``b_i = g_i * b_k`` (eq. 10). ``compute_time`` is T_comp of the problem's
    model variant (the reference variant keeps the authors' sign, spec section 6).
    """

    labels: tuple[str, ...]
    type_names: tuple[str, ...]
    markets: tuple[str, ...]
    price: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    gpus: np.ndarray
    batch: np.ndarray
    compute_time: np.ndarray
    vcpus: np.ndarray
    families: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class SpotProblem:
    """One spot provisioning problem: eqs. (11)-(14) plus side constraints.

    ``model`` ``"paper"`` is eqs. (1)-(10); ``"reference"`` is the authors' code with its
    rounding (spec section 6; needs ``workload.loss_variant == "no-cc"``).
    """

    instance_types: tuple[InstanceType, ...]
    workload: SpotWorkload
    slo: SpotSLO
    platform: SpotPlatform = field(default_factory=SpotPlatform)
    constraints: SpotConstraints = field(default_factory=SpotConstraints)
    model: str = "paper"
    name: str = "spot"
    notes: str = ""

    def __post_init__(self) -> None:
        types = tuple(self.instance_types)
        if not types:
            raise InvalidInputError("instance_types", "at least one instance type is needed")
        if len(types) > check.MAX_INSTANCE_TYPES:
            raise InvalidInputError(
                "instance_types",
                f"{len(types):,} types are more than the limit of "
                f"{check.MAX_INSTANCE_TYPES} (resource limits: docs/instance-format.md)",
            )
        for t in types:
            if not isinstance(t, InstanceType):
                raise InvalidInputError("instance_types", f"entries must be InstanceType, got {t!r}")
        names = [t.name for t in types]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise InvalidInputError(f"instance_types.{dup}", "listed twice")
        _set(self, "instance_types", types)
        _set(self, "model", check.choice("model", self.model, MODELS))
        check.name("name", self.name)
        check.text("notes", self.notes, allow_empty=True)
        for part, cls in (
            ("workload", SpotWorkload),
            ("slo", SpotSLO),
            ("platform", SpotPlatform),
            ("constraints", SpotConstraints),
        ):
            if not isinstance(getattr(self, part), cls):
                raise InvalidInputError(part, f"must be a {cls.__name__}, got {type(getattr(self, part)).__name__}")
        w, slo = self.workload, self.slo
        if slo.loss <= w.gamma_5:
            raise InvalidInputError(
                "slo.loss",
                f"{slo.loss:g} is not above workload.gamma_5 = {w.gamma_5:g}, the loss the model converges to; the SLO is unreachable (eq. 3)",
            )
        if self.model == "reference" and w.loss_variant != "no-cc":
            raise InvalidInputError("workload.loss_variant", 'the reference model has no CC term: use "no-cc"')
        needs_eq10 = [t.name for t in types if t.batch_per_gpu is None]
        if needs_eq10 and (w.alpha_2 is None or w.beta_2 is None):
            raise InvalidInputError(
                "workload.alpha_2", f"needed by eq. (10) for {needs_eq10[0]} (no batch_per_gpu given)"
            )
        labels = {column_label(t.name, m) for t in types for m in self.constraints.markets}
        for label in self.constraints.existing:
            if label not in labels:
                raise InvalidInputError(f"constraints.existing.{label}", self.why_not_a_column(label, labels))
        if "on-demand" in self.constraints.markets:
            for t in types:
                if t.on_demand_price_per_h is None:
                    raise InvalidInputError(
                        f"instance_types.{t.name}.on_demand_price_per_h",
                        "missing, but constraints.markets includes on-demand",
                    )
        families = {t.quota_family for t in types}
        for q in self.constraints.vcpu_quotas:
            if q.family not in families:
                raise InvalidInputError(
                    f"constraints.vcpu_quotas.{q.family}",
                    f"no instance type in this family (families: {check.listing(sorted(families))})",
                )
            if any(t.vcpus is None for t in types if t.quota_family == q.family):
                raise InvalidInputError(
                    f"constraints.vcpu_quotas.{q.family}", "every instance type of the family needs vcpus"
                )
        cols = self.columns()  # validates derived numbers (batch sizes, compute times)
        most = int(cols.upper.sum())
        high = self.constraints.workers[1]
        if min(most, high if high is not None else most) > check.MAX_WORKERS:
            raise InvalidInputError(
                "constraints.workers" if high is not None and high < most else "instance_types",
                f"plans of up to {min(most, high or most):,} workers (the quotas summed, capped by "
                f"constraints.workers) are more than the limit of {check.MAX_WORKERS:,} "
                "(resource limits: docs/instance-format.md)",
            )
        over = np.flatnonzero(cols.lower > cols.upper)
        if over.size:
            i = int(over[0])
            raise InvalidInputError(
                f"constraints.existing.{cols.labels[i]}",
                f"{int(cols.lower[i])} running instances exceed the quota {int(cols.upper[i])}",
            )
        plausibility.warn(plausibility.spot_findings(self))

    def why_not_a_column(self, label: str, labels: set[str]) -> str:
        """Why ``label`` is not a column (of a plan, or of kept instances): its market is not
        enabled, or no such type is offered."""
        market = "on-demand" if label.endswith(ON_DEMAND_SUFFIX) else "spot"
        name = label.removesuffix(ON_DEMAND_SUFFIX)
        offered = next((t for t in self.instance_types if t.name == name), None)
        if offered is not None:
            price = (
                f" and instance_types.{name}.on_demand_price_per_h"
                if market == "on-demand" and offered.on_demand_price_per_h is None
                else ""
            )
            return (
                f"{market} is not in constraints.markets ({', '.join(self.constraints.markets)}): add "
                f'"{market}" there{price} to keep running {market} instances of {name}'
            )
        return f"unknown instance type (offered: {check.listing(sorted(labels))})"

    # ------------------------------------------------------------------ derived data
    def batch_per_gpu(self, t: InstanceType) -> int:
        """Per-GPU batch b_k: given, or eq. (10) ``2 ** floor(log2(alpha_2 * mem + beta_2))``."""
        if t.batch_per_gpu is not None:
            return t.batch_per_gpu
        alpha_2, beta_2 = self.workload.alpha_2, self.workload.beta_2
        if alpha_2 is None or beta_2 is None or t.gpu_memory_gb is None:  # refused when the problem was built
            raise InvalidInputError(
                f"instance_types.{t.name}.batch_per_gpu",
                "missing: give batch_per_gpu, or gpu_memory_gb with workload alpha_2/beta_2 (eq. 10)",
            )
        raw = alpha_2 * t.gpu_memory_gb + beta_2
        if raw < 1:
            raise InvalidInputError(
                f"instance_types.{t.name}.gpu_memory_gb",
                f"eq. (10) gives a batch below 1 (alpha_2 * mem + beta_2 = {raw:g})",
            )
        if not raw < 2 * check.MAX_BATCH:
            raise InvalidInputError(
                f"instance_types.{t.name}.gpu_memory_gb",
                f"eq. (10) gives a batch above the limit of {check.MAX_BATCH:,} (alpha_2 * mem + beta_2 = {raw:g})",
            )
        return int(2 ** math.floor(math.log2(raw)))

    def compute_time_s(self, t: InstanceType) -> float:
        """T_comp of ``t`` for this model variant (eq. 6, or the authors' code)."""
        if t.compute_time_s is not None:
            return t.compute_time_s
        w, pf = self.workload, self.platform
        assert t.speed_samples_per_s is not None  # InstanceType holds exactly one of the two
        t0 = t.gpus * self.batch_per_gpu(t) / t.speed_samples_per_s
        network = 2 * w.param_size_mb / w.bandwidth_req_mb_s
        pcie = 2 * t.gpus * w.param_size_mb / pf.pcie_bandwidth_mb_s
        # Paper eq. (6)-(7): T0 = T_comm(B_req) + T_comp. The reference code subtracts
        # (network - pcie), a sign slip reproduced on purpose (spec section 6).
        tcomp = t0 - (network + pcie) if self.model == "paper" else t0 - (network - pcie)
        where = f"instance_types.{t.name}.speed_samples_per_s"
        if tcomp <= 0:
            raise InvalidInputError(
                where,
                f"implies a non-positive compute time ({tcomp:.4g} s): {t.speed_samples_per_s:g} "
                f"samples/s is the lone worker's whole speed, PS traffic included, but moving "
                f"the gradients alone takes {t0 - tcomp:.4g} s of the {t0:.4g} s one "
                f"iteration of {t.gpus * self.batch_per_gpu(t)} samples would take at that "
                "speed (eq. 6; see docs/instance-format.md)",
            )
        if not math.isfinite(tcomp):
            raise InvalidInputError(where, f"implies an infinite compute time ({t.speed_samples_per_s:g} samples/s)")
        return tcomp

    def columns(self) -> SpotColumns:
        """Compile to one column per (type, market) offered."""
        rows = []
        for market in self.constraints.markets:
            for t in self.instance_types:
                if market == "spot":
                    price, quota = t.spot_price_per_h, t.quota
                else:
                    assert t.on_demand_price_per_h is not None  # required with on-demand (checked above)
                    price = t.on_demand_price_per_h
                    quota = t.on_demand_quota if t.on_demand_quota is not None else t.quota
                rows.append((t, market, price, quota))
        existing = self.constraints.existing
        return SpotColumns(
            labels=tuple(column_label(t.name, m) for t, m, _, _ in rows),
            type_names=tuple(t.name for t, _, _, _ in rows),
            markets=tuple(m for _, m, _, _ in rows),
            price=np.array([p for _, _, p, _ in rows], dtype=float),
            lower=np.array([existing.get(column_label(t.name, m), 0) for t, m, _, _ in rows], dtype=np.int64),
            upper=np.array([q for _, _, _, q in rows], dtype=np.int64),
            gpus=np.array([t.gpus for t, _, _, _ in rows], dtype=np.int64),
            batch=np.array([t.gpus * self.batch_per_gpu(t) for t, _, _, _ in rows], dtype=float),
            compute_time=np.array([self.compute_time_s(t) for t, _, _, _ in rows], dtype=float),
            vcpus=np.array([t.vcpus or 0 for t, _, _, _ in rows], dtype=np.int64),
            families=tuple(t.quota_family for t, _, _, _ in rows),
        )

    def plan_zones(self, counts: Mapping[str, int]) -> dict[str, list[str]]:
        """The zones offered for each spot type a plan uses (types with pools only)."""
        used = {label for label, n in counts.items() if n and not label.endswith(ON_DEMAND_SUFFIX)}
        return {t.name: list(t.pool_names) for t in self.instance_types if t.zones and t.name in used}

    def replace(self, **changes: Any) -> SpotProblem:
        """A copy with some top-level fields changed (validated again)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return SpotProblem(**values)

    # ------------------------------------------------------------------ dict form
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SpotProblem:
        """Build from the instance-file dict (see docs/instance-format.md)."""
        data = mapping("", data)
        check_keys(
            "",
            data,
            ["format", "version", "instance_types", "workload", "slo"],
            ["name", "notes", "model", "platform", "constraints"],
        )
        check_format(data, "dnnprov/spot")
        types_data = mapping("instance_types", data["instance_types"])
        if len(types_data) > check.MAX_INSTANCE_TYPES:
            raise InvalidInputError(
                "instance_types",
                f"{len(types_data):,} types are more than the limit of "
                f"{check.MAX_INSTANCE_TYPES} (resource limits: docs/instance-format.md)",
            )
        types = []
        type_keys = [f.name for f in fields(InstanceType) if f.name != "name"]
        for name, entry in types_data.items():
            entry = mapping(f"instance_types.{name}", entry)
            check_keys(
                f"instance_types.{name}",
                entry,
                ["gpus", "spot_price_per_h", "quota"],
                [k for k in type_keys if k not in ("gpus", "spot_price_per_h", "quota")],
            )
            types.append(InstanceType(name=name, **entry))
        workload = _build(
            SpotWorkload,
            "workload",
            data["workload"],
            list(WORKLOAD_KEYS),
        )
        slo = _build(SpotSLO, "slo", data["slo"], ["loss", "time_s"])
        platform = _build(SpotPlatform, "platform", data.get("platform", {}), [])
        cons = dict(mapping("constraints", data.get("constraints", {})))
        check_keys("constraints", cons, [], [f.name for f in fields(SpotConstraints)])
        if "vcpu_quotas" in cons:
            raw = cons["vcpu_quotas"]
            if not isinstance(raw, list):
                raise InvalidInputError("constraints.vcpu_quotas", "must be a list")
            cons["vcpu_quotas"] = tuple(
                _build(VcpuQuota, f"constraints.vcpu_quotas[{i}]", q, ["family", "market", "vcpus"])
                for i, q in enumerate(raw)
            )
        for key in ("ps_count", "workers", "markets"):
            if key in cons and isinstance(cons[key], list):
                cons[key] = tuple(cons[key])
        constraints = SpotConstraints(**cons)
        return cls(
            instance_types=tuple(types),
            workload=workload,
            slo=slo,
            platform=platform,
            constraints=constraints,
            model=data.get("model", "paper"),
            name=data.get("name", "spot"),
            notes=data.get("notes", ""),
        )

    def to_dict(self) -> dict[str, Any]:
        """The instance-file dict; ``from_dict(to_dict())`` gives an equal problem."""
        types = {}
        for t in self.instance_types:
            entry = {f.name: getattr(t, f.name) for f in fields(t) if f.name != "name"}
            entry["interruption"] = t.interruption.to_dict() if t.interruption else None
            entry["zones"] = [p.to_dict() for p in t.zones] or None
            types[t.name] = drop_none(entry)
        workload = {f.name: getattr(self.workload, f.name) for f in fields(self.workload)}
        workload["estimated"] = list(self.workload.estimated)
        workload["domain"] = self.workload.domain.to_dict() if self.workload.domain else None
        c = self.constraints
        return {
            "format": "dnnprov/spot",
            "version": 1,
            "name": self.name,
            "notes": self.notes,
            "model": self.model,
            "instance_types": types,
            "workload": drop_none(workload),
            "platform": {f.name: getattr(self.platform, f.name) for f in fields(self.platform)},
            "slo": {f.name: getattr(self.slo, f.name) for f in fields(self.slo)},
            "constraints": drop_none(
                {
                    "existing": dict(c.existing),
                    "ps_count": list(c.ps_count),
                    "workers": list(c.workers),
                    "budget_usd": c.budget_usd,
                    "markets": list(c.markets),
                    "vcpu_quotas": [{"family": q.family, "market": q.market, "vcpus": q.vcpus} for q in c.vcpu_quotas],
                }
            ),
        }
