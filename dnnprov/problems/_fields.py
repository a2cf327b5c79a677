"""Reading plain dicts (parsed JSON) into dataclasses, with strict field checks."""

from __future__ import annotations

import difflib
from dataclasses import fields
from typing import Any, Iterable, Mapping

from dnnprov.problems._checks import short
from dnnprov.errors import InvalidInputError


def mapping(field: str, value: object) -> Mapping[str, Any]:
    """Check that ``value`` is a JSON object."""
    if not isinstance(value, Mapping):
        raise InvalidInputError(field, f"must be an object, got {type(value).__name__}")
    return value


def check_keys(field: str, data: Mapping[str, Any], required: Iterable[str],
               optional: Iterable[str]) -> None:
    """Refuse missing required keys and unknown keys (with a did-you-mean hint).

    Units are part of field names (``time_s``, ``price_per_h``), so a wrong unit suffix
    shows up here as an unknown key with the right name suggested.
    """
    required = list(required)
    known = required + list(optional)
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}? (units are part of field names)" if close else ""
            raise InvalidInputError(_join(field, key), f"unknown field{hint}")
    for key in required:
        if key not in data:
            raise InvalidInputError(_join(field, key), "missing required field")


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


def estimated_fields(where: str, value: object, owner: object) -> tuple[str, ...]:
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
