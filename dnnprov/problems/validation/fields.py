"""Reading plain dicts (parsed JSON) into dataclasses, with strict field checks."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from dnnprov.errors import InvalidInputError
from dnnprov.problems.validation.checks import short

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


def mapping(field: str, value: object) -> Mapping[str, Any]:
    """Check that ``value`` is a JSON object."""
    if not isinstance(value, Mapping):
        raise InvalidInputError(field, f"must be an object, got {type(value).__name__}")
    return value


def check_keys(field: str, data: Mapping[str, Any], required: Iterable[str], optional: Iterable[str]) -> None:
    """Refuse missing required keys and unknown keys (with a did-you-mean hint).

    Units are part of field names (``time_s``, ``price_per_h``), so a wrong unit suffix
    shows up here as an unknown key with the right name suggested.
    """
    required = list(required)
    known = required + list(optional)
    for key in data:
        if key not in known:
            raise InvalidInputError(_join(field, key), unknown_field(field, key, known))
    for key in required:
        if key not in data:
            raise InvalidInputError(_join(field, key), "missing required field")


#: Words of a key that name another field's word: ``slo.deadline_s`` is ``slo.time_s``.
SYNONYMS = {
    "deadline": "time",
    "duration": "time",
    "quotas": "quota",
    "gpu": "gpus",
    "market": "markets",
    "budget": "budget_usd",
}
_TYPE_QUOTAS = (
    "per-type quotas are instance_types.NAME.quota (on demand: instance_types.NAME.on_demand_quota); "
    "vCPU quotas per family are constraints.vcpu_quotas"
)
#: Keys written where another field belongs: (parent field, key) -> (a key the parent must
#: know for the hint to apply, where the field is).
MISPLACED = {
    ("constraints", "quotas"): ("vcpu_quotas", _TYPE_QUOTAS),
    ("constraints", "quota"): ("vcpu_quotas", _TYPE_QUOTAS),
    ("", "quotas"): ("instance_types", _TYPE_QUOTAS),
    ("", "quota"): ("instance_types", _TYPE_QUOTAS),
    ("", "deadline_s"): ("slo", "the deadline is slo.time_s"),
    ("", "time_s"): ("slo", "the deadline is slo.time_s"),
}


def unknown_field(field: str, key: object, known: Iterable[str], *, see: str = "") -> str:
    """The problem text of an unknown ``key`` of ``field``: where it belongs, or the closest
    known key (words such as deadline for time translated first); ``see`` names a page."""
    known = list(known)
    suffix = f"; see {see}" if see else ""
    if not isinstance(key, str):
        return "unknown field"
    needs, where = MISPLACED.get((field, key), ("", ""))
    if needs in known:
        return f"unknown field; {where}" + (f" (see {see})" if see else "")
    translated = "_".join(SYNONYMS.get(word, word) for word in key.split("_"))
    close = difflib.get_close_matches(translated, known, n=1, cutoff=0.6) or difflib.get_close_matches(
        key, known, n=1, cutoff=0.6
    )
    if close:
        return f"unknown field; did you mean {close[0]!r}? (units are part of field names{suffix})"
    return f"unknown field (units are part of field names{suffix})" if see else "unknown field"


def check_format(data: Mapping[str, Any], fmt: str, version: int = 1) -> None:
    """Refuse a dict whose ``format`` is not ``fmt`` or whose ``version`` is not ``version``."""
    if not isinstance(data.get("format"), str) or data["format"] != fmt:
        raise InvalidInputError("format", f"must be {fmt!r} here; got {short(data.get('format'))}")
    if isinstance(data.get("version"), bool) or data.get("version") != version:
        raise InvalidInputError("version", f"this dnnprov reads version {version}; got {short(data.get('version'))}")


def _join(field: str, key: str) -> str:
    return f"{field}.{key}" if field else key


def drop_none(data: dict[str, Any]) -> dict[str, Any]:
    """Remove keys whose value is ``None`` (optional fields left at their default)."""
    return {k: v for k, v in data.items() if v is not None}


def set_field(obj: object, name: str, value: object) -> None:
    """Set a field of a frozen dataclass during its validation."""
    object.__setattr__(obj, name, value)


def estimated_fields(where: str, value: object, owner: DataclassInstance | type[DataclassInstance]) -> tuple[str, ...]:
    """Check a list of field names marked as estimated (not published)."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise InvalidInputError(where, "must be a list of field names")
    known = {f.name for f in fields(owner)}
    for v in value:
        if v not in known:
            raise InvalidInputError(where, f"{v!r} is not a field of {type(owner).__name__}")
    return tuple(value)


def build(cls: type, where: str, data: object, required: list[str]) -> Any:
    """Construct dataclass ``cls`` from a dict, refusing unknown and missing keys."""
    data = dict(mapping(where, data))
    check_keys(where, data, required, [f.name for f in fields(cls) if f.name not in required])
    if "estimated" in data and isinstance(data["estimated"], list):
        data["estimated"] = tuple(data["estimated"])
    return cls(**data)
