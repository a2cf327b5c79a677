"""Cloud catalogs and workload profiles: the two inputs a spot problem is assembled from.

A *catalog* (``dnnprov/catalog`` v1) is what a cloud offers in one region at one moment:
instance types with hardware facts and prices, vCPU-family quotas, function offers
(:class:`FunctionOffer`: AWS Lambda per architecture), the Lambda concurrency limit, and
where each number came from. A *multi-region* catalog (``region`` :data:`MULTI_REGION`)
holds one entry per (type, region) pool, named ``TYPE@REGION`` (:func:`qualified`) with the
entry's ``region`` set; every name downstream (instances, plans, exports) keeps that form. A *spot workload profile*
(``dnnprov/spot-workload`` v1) is one DNN workload's coefficients plus its profiled
per-type numbers (per-GPU batch, lone-worker speed or compute time).
:func:`build_spot_problem` joins the two with SLOs into a :class:`SpotProblem`.
See docs/catalog-format.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

from dnnprov.errors import InvalidInputError
from dnnprov.json_files import read_json_file
from dnnprov.problems.interruption import Interruption, from_advisor_bucket
from dnnprov.problems.serverless import (
    ServerlessConstraints,
    ServerlessPlatform,
    ServerlessProblem,
    ServerlessWorkload,
)
from dnnprov.problems.spot import (
    WORKLOAD_KEYS,
    InstanceType,
    SpotConstraints,
    SpotPlatform,
    SpotProblem,
    SpotSLO,
    SpotWorkload,
    VcpuQuota,
    default_family,
)
from dnnprov.problems.validation import checks as check
from dnnprov.problems.validation.fields import build, check_keys, drop_none, mapping, set_field

#: The ``region`` of a catalog whose entries are pools of several regions.
MULTI_REGION = "multi-region"
#: Joins a type and its region in a region-qualified name: ``p3.2xlarge@us-west-2``.
REGION_SEPARATOR = "@"


def qualified(type_name: str, region: str) -> str:
    """The region-qualified name of ``type_name`` in ``region``: ``p3.2xlarge@us-west-2``."""
    return f"{type_name}{REGION_SEPARATOR}{region}"


def split_region(name: str) -> tuple[str, str | None]:
    """``(type, region)`` of a region-qualified name; ``(name, None)`` for a plain type name.

    A market suffix (``:on-demand``) stays on the type: ``a@r:on-demand`` -> ``("a:on-demand", "r")``.
    """
    base, sep, rest = name.partition(REGION_SEPARATOR)
    if not sep:
        return name, None
    region, colon, market = rest.partition(":")
    return base + colon + market, region


@dataclass(frozen=True)
class CatalogEntry:
    """One instance type as the cloud offers it (prices in $/h; ``None``: not offered/known).

    ``interruption`` is a revocation model of the spot offer (e.g. fitted from a trace);
    without one, :func:`build_spot_problem` derives it from ``interruption_bucket``.
    ``region`` is set in a multi-region catalog only, where ``name`` is ``TYPE@REGION``.
    """

    name: str
    gpus: int
    vcpus: int | None = None
    memory_gb: float | None = None
    gpu_model: str | None = None
    gpu_memory_gb: float | None = None
    spot_price_per_h: float | None = None
    on_demand_price_per_h: float | None = None
    family: str | None = None
    interruption_bucket: int | None = None
    sources: Mapping[str, str] = field(default_factory=dict)
    interruption: Interruption | None = None
    region: str | None = None

    def __post_init__(self) -> None:
        where = f"instance_types.{self.name}"
        if self.region is not None and (
            not isinstance(self.region, str) or split_region(self.name) != (self.base_name, self.region)
        ):
            raise InvalidInputError(
                f"{where}.region", f"a pool of region {self.region!r} must be named TYPE{REGION_SEPARATOR}{self.region}"
            )
        set_field(self, "gpus", check.integer(f"{where}.gpus", self.gpus, minimum=0))
        set_field(self, "vcpus", check.optional_integer(f"{where}.vcpus", self.vcpus, minimum=1))
        set_field(self, "memory_gb", check.optional_number(f"{where}.memory_gb", self.memory_gb, exclusive_minimum=0))
        set_field(
            self,
            "gpu_memory_gb",
            check.optional_number(f"{where}.gpu_memory_gb", self.gpu_memory_gb, exclusive_minimum=0),
        )
        set_field(
            self,
            "spot_price_per_h",
            check.optional_number(f"{where}.spot_price_per_h", self.spot_price_per_h, minimum=0),
        )
        set_field(
            self,
            "on_demand_price_per_h",
            check.optional_number(f"{where}.on_demand_price_per_h", self.on_demand_price_per_h, minimum=0),
        )
        set_field(
            self,
            "interruption_bucket",
            check.optional_integer(f"{where}.interruption_bucket", self.interruption_bucket, minimum=0, maximum=4),
        )
        if self.interruption is not None and not isinstance(self.interruption, Interruption):
            set_field(self, "interruption", Interruption.from_dict(f"{where}.interruption", self.interruption))
        if not isinstance(self.sources, Mapping):
            raise InvalidInputError(f"{where}.sources", "must map field names to where the number came from")

    @property
    def base_name(self) -> str:
        """The AWS instance type: ``name`` without its ``@REGION``."""
        return split_region(self.name)[0]


#: Function architectures a catalog can offer.
ARCHITECTURES = ("x86_64", "arm64")


@dataclass(frozen=True)
class FunctionOffer:
    """One function architecture as the cloud offers it (AWS Lambda): prices, memory sizes,
    the timeout, ephemeral storage, and its training speed relative to x86_64.

    ``speed_factor`` multiplies a workload's x86_64 training rate (eq. 6) on this
    architecture; ``None``: not measured (a plan on it then needs a stated factor).
    vCPUs grow in proportion to memory (``mb_per_vcpu``, AWS: 1,769 MB per vCPU).
    """

    architecture: str
    price_per_gb_s: float
    price_per_request: float
    min_memory_mb: int = 128
    max_memory_mb: int = 10_240
    memory_step_mb: int = 1
    timeout_s: float = 900.0
    ephemeral_storage_mb: tuple[int, int] = (512, 10_240)
    mb_per_vcpu: float = 1769.0
    speed_factor: float | None = None
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"functions.{self.architecture}"
        check.choice("functions", self.architecture, ARCHITECTURES)
        for name in ("price_per_gb_s", "price_per_request"):
            set_field(self, name, check.number(f"{where}.{name}", getattr(self, name), minimum=0))
        for name in ("min_memory_mb", "max_memory_mb", "memory_step_mb"):
            set_field(self, name, check.integer(f"{where}.{name}", getattr(self, name), minimum=1))
        if self.max_memory_mb < self.min_memory_mb:
            raise InvalidInputError(f"{where}.max_memory_mb", f"below min_memory_mb {self.min_memory_mb}")
        set_field(self, "timeout_s", check.number(f"{where}.timeout_s", self.timeout_s, exclusive_minimum=0))
        set_field(self, "mb_per_vcpu", check.number(f"{where}.mb_per_vcpu", self.mb_per_vcpu, exclusive_minimum=0))
        storage = self.ephemeral_storage_mb
        if not isinstance(storage, (list, tuple)) or len(storage) != 2:
            raise InvalidInputError(f"{where}.ephemeral_storage_mb", "must be [low, high] MB")
        set_field(
            self,
            "ephemeral_storage_mb",
            tuple(check.integer(f"{where}.ephemeral_storage_mb[{i}]", v, minimum=1) for i, v in enumerate(storage)),
        )
        set_field(
            self, "speed_factor", check.optional_number(f"{where}.speed_factor", self.speed_factor, exclusive_minimum=0)
        )
        if not isinstance(self.sources, Mapping):
            raise InvalidInputError(f"{where}.sources", "must map field names to where the number came from")

    def to_dict(self) -> dict[str, Any]:
        """The catalog-file form (keyed by architecture, so without it)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "architecture"}
        out["ephemeral_storage_mb"] = list(self.ephemeral_storage_mb)
        out["sources"] = dict(self.sources)
        return drop_none(out)


@dataclass(frozen=True)
class Catalog:
    """What one region offers at one moment (``snapshot``: ISO 8601 UTC time).

    A multi-region catalog has ``region`` :data:`MULTI_REGION` and one entry per (type,
    region) pool, each with its ``region`` and named ``TYPE@REGION``.
    """

    name: str
    region: str
    snapshot: str
    instance_types: tuple[CatalogEntry, ...]
    vcpu_quotas: tuple[VcpuQuota, ...] = ()
    lambda_concurrency: int | None = None
    notes: str = ""
    functions: tuple[FunctionOffer, ...] = ()

    def __post_init__(self) -> None:
        if self.region == MULTI_REGION:
            loose = [e.name for e in self.instance_types if e.region is None]
            if loose:
                raise InvalidInputError(
                    f"instance_types.{loose[0]}.region",
                    f"missing: every entry of a {MULTI_REGION} catalog names its region",
                )
        else:
            other = [e.name for e in self.instance_types if e.region not in (None, self.region)]
            if other:
                raise InvalidInputError(
                    f"instance_types.{other[0]}.region",
                    f"not the catalog's region {self.region!r} (or {MULTI_REGION!r})",
                )

    @property
    def regions(self) -> tuple[str, ...]:
        """The regions the catalog's pools lie in (sorted; the one ``region`` of a single-region catalog)."""
        if self.region != MULTI_REGION:
            return (self.region,)
        return tuple(sorted({e.region for e in self.instance_types if e.region is not None}))

    def hardware_view(self) -> Catalog:
        """One entry per AWS type under its plain name (hardware facts of its first pool, no prices):
        what profile estimates read, since a type's hardware is the same in every region."""
        seen: dict[str, CatalogEntry] = {}
        for e in self.instance_types:
            if e.base_name not in seen:
                seen[e.base_name] = replace(
                    e, name=e.base_name, region=None, spot_price_per_h=None, on_demand_price_per_h=None
                )
        return replace(
            self, region=self.regions[0] if self.regions else self.region, instance_types=tuple(seen.values())
        )

    def function(self, architecture: str) -> FunctionOffer:
        """The function offer of ``architecture``."""
        for f in self.functions:
            if f.architecture == architecture:
                return f
        raise InvalidInputError(
            f"functions.{architecture}",
            f"catalog {self.name!r} has no function offer of "
            "this architecture (dnnprov catalog import adds AWS "
            "Lambda's)",
        )

    def entry(self, name: str) -> CatalogEntry:
        """The entry of type ``name``."""
        for e in self.instance_types:
            if e.name == name:
                return e
        raise InvalidInputError(f"instance_types.{name}", f"not in catalog {self.name!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Catalog:
        """Build from a ``dnnprov/catalog`` v1 dict."""
        data = mapping("", data)
        check_keys(
            "",
            data,
            ["format", "version", "name", "region", "snapshot", "instance_types"],
            ["notes", "vcpu_quotas", "lambda_concurrency", "functions"],
        )
        if data["format"] != "dnnprov/catalog" or data["version"] != 1:
            raise InvalidInputError(
                "format", f"expected dnnprov/catalog version 1, got {data['format']!r} v{data['version']!r}"
            )
        entries = []
        for name, entry in mapping("instance_types", data["instance_types"]).items():
            entry = mapping(f"instance_types.{name}", entry)
            check_keys(
                f"instance_types.{name}",
                entry,
                ["gpus"],
                [f.name for f in fields(CatalogEntry) if f.name not in ("name", "gpus")],
            )
            entries.append(CatalogEntry(name=name, **entry))
        quotas = tuple(
            build(VcpuQuota, f"vcpu_quotas[{i}]", q, ["family", "market", "vcpus"])
            for i, q in enumerate(data.get("vcpu_quotas", []))
        )
        offers = []
        for arch, offer in mapping("functions", data.get("functions", {})).items():
            offer = mapping(f"functions.{arch}", offer)
            check_keys(
                f"functions.{arch}",
                offer,
                ["price_per_gb_s", "price_per_request"],
                [
                    f.name
                    for f in fields(FunctionOffer)
                    if f.name not in ("architecture", "price_per_gb_s", "price_per_request")
                ],
            )
            offers.append(FunctionOffer(architecture=arch, **offer))
        return cls(
            name=data["name"],
            region=data["region"],
            snapshot=data["snapshot"],
            instance_types=tuple(entries),
            vcpu_quotas=quotas,
            functions=tuple(offers),
            lambda_concurrency=check.optional_integer("lambda_concurrency", data.get("lambda_concurrency"), minimum=0),
            notes=data.get("notes", ""),
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``dnnprov/catalog`` v1 dict."""
        types = {}
        for e in self.instance_types:
            entry = drop_none({f.name: getattr(e, f.name) for f in fields(e) if f.name != "name"})
            entry["sources"] = dict(e.sources)
            if e.interruption is not None:
                entry["interruption"] = e.interruption.to_dict()
            types[e.name] = entry
        return drop_none(
            {
                "format": "dnnprov/catalog",
                "version": 1,
                "name": self.name,
                "region": self.region,
                "snapshot": self.snapshot,
                "notes": self.notes,
                "instance_types": types,
                "vcpu_quotas": [{"family": q.family, "market": q.market, "vcpus": q.vcpus} for q in self.vcpu_quotas],
                "lambda_concurrency": self.lambda_concurrency,
                "functions": {f.architecture: f.to_dict() for f in self.functions} or None,
            }
        )


@dataclass(frozen=True)
class SpotWorkloadProfile:
    """A workload's coefficients and its profile on each instance type.

    ``per_type`` maps a type name to ``{"batch_per_gpu": int, "speed_samples_per_s": x}``
    or ``{"batch_per_gpu": int, "compute_time_s": x}``; an estimated entry
    (:mod:`dnnprov.profiling.estimate`) adds ``"estimate"`` (its source, text) and
    ``"compute_time_s_interval"`` ([fast, slow] ends).
    """

    workload: SpotWorkload
    per_type: Mapping[str, Mapping[str, Any]]
    model: str = "paper"
    notes: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SpotWorkloadProfile:
        """Build from a ``dnnprov/spot-workload`` v1 dict."""
        data = mapping("", data)
        check_keys("", data, ["format", "version", "workload", "per_type"], ["model", "notes"])
        if data["format"] != "dnnprov/spot-workload" or data["version"] != 1:
            raise InvalidInputError("format", f"expected dnnprov/spot-workload version 1, got {data['format']!r}")
        workload = build(
            SpotWorkload,
            "workload",
            data["workload"],
            list(WORKLOAD_KEYS),
        )
        per_type = {}
        for name, entry in mapping("per_type", data["per_type"]).items():
            entry = mapping(f"per_type.{name}", entry)
            check_keys(
                f"per_type.{name}",
                entry,
                [],
                ["batch_per_gpu", "speed_samples_per_s", "compute_time_s", "estimate", "compute_time_s_interval"],
            )
            if "estimate" in entry:
                check.text(f"per_type.{name}.estimate", entry["estimate"])
            interval = entry.get("compute_time_s_interval")
            if interval is not None and (not isinstance(interval, list) or len(interval) != 2):
                raise InvalidInputError(f"per_type.{name}.compute_time_s_interval", "must be [fast, slow] seconds")
            for i, end in enumerate(interval or []):
                check.number(f"per_type.{name}.compute_time_s_interval[{i}]", end, exclusive_minimum=0)
            per_type[name] = dict(entry)
        return cls(workload=workload, per_type=per_type, model=data.get("model", "paper"), notes=data.get("notes", ""))

    def to_dict(self) -> dict[str, Any]:
        """The ``dnnprov/spot-workload`` v1 dict."""
        workload = {f.name: getattr(self.workload, f.name) for f in fields(self.workload)}
        workload["estimated"] = list(self.workload.estimated)
        workload["domain"] = self.workload.domain.to_dict() if self.workload.domain else None
        return {
            "format": "dnnprov/spot-workload",
            "version": 1,
            "model": self.model,
            "notes": self.notes,
            "workload": drop_none(workload),
            "per_type": {k: dict(v) for k, v in self.per_type.items()},
        }


def build_spot_problem(
    catalog: Catalog,
    profile: SpotWorkloadProfile,
    slo: SpotSLO,
    *,
    quotas: Mapping[str, int],
    platform: SpotPlatform | None = None,
    constraints: SpotConstraints | None = None,
    name: str = "spot",
    notes: str = "",
    on_demand_quotas: Mapping[str, int] | None = None,
) -> SpotProblem:
    """Join catalog prices and hardware with a workload profile into a :class:`SpotProblem`.

    ``quotas`` names the offered types (in order) and their per-type spot quota; each must
    be in the catalog with a spot price and in the profile (a region-qualified name
    ``TYPE@REGION`` of a multi-region catalog takes the profile of ``TYPE``: the hardware, so
    the workload's speed, is the same in every region; its family is ``FAMILY@REGION``, as
    AWS's vCPU quotas are per region), and with an on-demand price when ``on_demand_quotas``
    gives it a positive quota. Each type's interruption model
    is the entry's ``interruption``, else the one its Spot Advisor bucket gives
    (:func:`dnnprov.problems.interruption.from_advisor_bucket`), else none.
    """
    types = []
    for type_name, quota in quotas.items():
        entry = catalog.entry(type_name)
        prof = profile_of(profile, type_name)
        if entry.spot_price_per_h is None:
            raise InvalidInputError(
                f"instance_types.{type_name}.spot_price_per_h", f"catalog {catalog.name!r} has no spot price"
            )
        on_demand_quota = (on_demand_quotas or {}).get(type_name)
        if on_demand_quota and entry.on_demand_price_per_h is None:
            raise InvalidInputError(
                f"instance_types.{type_name}.on_demand_price_per_h",
                f"catalog {catalog.name!r} has no on-demand price (its notes say why), so its on-demand "
                f"quota {on_demand_quota} cannot be used",
            )
        types.append(
            InstanceType(
                name=type_name,
                gpus=entry.gpus,
                spot_price_per_h=entry.spot_price_per_h,
                quota=quota,
                batch_per_gpu=prof.get("batch_per_gpu"),
                gpu_memory_gb=entry.gpu_memory_gb,
                speed_samples_per_s=prof.get("speed_samples_per_s"),
                compute_time_s=prof.get("compute_time_s"),
                vcpus=entry.vcpus,
                on_demand_price_per_h=entry.on_demand_price_per_h,
                on_demand_quota=on_demand_quota,
                estimate=prof.get("estimate"),
                family=entry.family if entry.family and entry.family != default_family(type_name) else None,
                interruption=_interruption(entry, catalog),
            )
        )
    return SpotProblem(
        instance_types=tuple(types),
        workload=profile.workload,
        slo=slo,
        platform=platform or SpotPlatform(),
        constraints=constraints or SpotConstraints(),
        model=profile.model,
        name=name,
        notes=notes,
    )


def profile_of(profile: SpotWorkloadProfile, type_name: str) -> Mapping[str, Any]:
    """The profile entry of ``type_name``, else of its plain type when it is region-qualified."""
    for name in (type_name, split_region(type_name)[0]):
        if name in profile.per_type:
            return profile.per_type[name]
    raise InvalidInputError(f"per_type.{type_name}", f"workload {profile.workload.name!r} has no profile on this type")


def _interruption(entry: CatalogEntry, catalog: Catalog) -> Interruption | None:
    """The entry's own interruption model, else its Spot Advisor bucket's, else ``None``."""
    if entry.interruption is not None:
        return entry.interruption
    if entry.interruption_bucket is None:
        return None
    where = entry.sources.get("interruption_bucket", f"catalog {catalog.name!r} ({catalog.region}, {catalog.snapshot})")
    return from_advisor_bucket(entry.interruption_bucket, source=where)


def _read_json(path: str | Path) -> Any:
    return read_json_file(path)


def load_catalog(path: str | Path) -> Catalog:
    """Read a catalog file."""
    return Catalog.from_dict(_read_json(path))


def load_spot_profile(path: str | Path) -> SpotWorkloadProfile:
    """Read a spot workload profile file."""
    return SpotWorkloadProfile.from_dict(_read_json(path))


def embedded_path(*parts: str) -> Path:
    """Path of a file shipped in ``dnnprov/data`` (e.g. ``"catalogs", "aws-table3-2023-01.json"``)."""
    return Path(str(resources.files("dnnprov.data").joinpath(*parts)))


def build_serverless_problem(
    catalog: Catalog,
    workload: ServerlessWorkload,
    time_s: float,
    *,
    architecture: str = "x86_64",
    speed_factor: float | None = None,
    speed_source: str | None = None,
    ps_price_per_h: float | None = None,
    name: str | None = None,
    notes: str = "",
    constraints: ServerlessConstraints | None = None,
) -> ServerlessProblem:
    """Join a catalog's function offer with a serverless workload and a deadline.

    The platform takes the offer's prices, memory grid (``memory_step_mb`` up to
    ``max_memory_mb``) and timeout, and the catalog's Lambda concurrency limit when it has
    one. On an architecture whose ``speed_factor`` the catalog does not know (arm64), a
    ``speed_factor`` with its ``speed_source`` is needed: it scales the workload's rate line
    (eq. 6), which is then marked estimated; nothing assumes arm64 runs as fast as x86_64.
    """
    offer = catalog.function(architecture)
    factor, source = offer.speed_factor, offer.sources.get("speed_factor", f"catalog {catalog.name}")
    if speed_factor is not None:
        factor = check.number("--speed-factor", speed_factor, exclusive_minimum=0)
        if not speed_source or not str(speed_source).strip():
            raise InvalidInputError("--speed-factor-source", "say where the speed factor comes from (a measurement)")
        source = str(speed_source)
    if factor is None:
        raise InvalidInputError(
            "--speed-factor",
            f"catalog {catalog.name!r} has no measured {architecture} speed "
            f"relative to x86_64 ({source}); give --speed-factor F with "
            "--speed-factor-source, or use x86_64",
        )
    if factor != 1.0:
        workload = replace(
            workload,
            rate_alpha=workload.rate_alpha * factor,
            rate_beta=workload.rate_beta * factor,
            estimated=tuple(dict.fromkeys([*workload.estimated, "rate_alpha", "rate_beta"])),
        )
        notes = (f"{notes} Rate line x {factor:g} on {architecture} (ESTIMATED from {source})").strip()
    defaults = ServerlessPlatform()
    platform = ServerlessPlatform(
        memory_step_mb=offer.memory_step_mb,
        max_memory_mb=offer.max_memory_mb,
        price_per_gb_s=offer.price_per_gb_s,
        price_per_request=offer.price_per_request,
        timeout_s=offer.timeout_s,
        concurrency_limit=catalog.lambda_concurrency or defaults.concurrency_limit,
        ps_price_per_h=defaults.ps_price_per_h if ps_price_per_h is None else ps_price_per_h,
    )
    workload = replace(workload, min_memory_mb=max(workload.min_memory_mb, offer.min_memory_mb))
    return ServerlessProblem(
        workload=workload,
        time_s=time_s,
        platform=platform,
        constraints=constraints or ServerlessConstraints(),
        name=name or workload.name,
        notes=notes,
    )
