"""The versioned JSON instance format: one spot or serverless problem per file.

Files are checked against the JSON Schema in ``dnnprov/data/schema`` (structure, types,
units in field names) and then by the problem dataclasses (meaning). Either way a bad file
raises :class:`InvalidInputError` naming the field. Reading is hardened against hostile
files by :mod:`dnnprov.json_files` (every JSON file dnnprov reads goes through it): only
regular files up to :data:`MAX_FILE_BYTES`, UTF-8 only, no duplicate keys, at most
:data:`MAX_DEPTH` levels of nesting, no integer literal over :data:`MAX_INTEGER_DIGITS`
digits. See docs/instance-format.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from dnnprov.errors import InvalidInputError
from dnnprov.json_files import MAX_DEPTH, MAX_FILE_BYTES, MAX_INTEGER_DIGITS, parse_json, read_json_file
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.problems.validation.fields import unknown_field

__all__ = [
    "FORMATS",
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_INTEGER_DIGITS",
    "VERSION",
    "Problem",
    "dumps_instance",
    "embedded_instance",
    "embedded_root",
    "parse_json",
    "problem_from_dict",
    "read_instance",
    "read_json_file",
    "resolve_instance_path",
    "schema",
    "write_instance",
]

Problem = SpotProblem | ServerlessProblem
FORMATS: dict[str, type[SpotProblem | ServerlessProblem]] = {
    "dnnprov/spot": SpotProblem,
    "dnnprov/serverless": ServerlessProblem,
}
VERSION = 1
EMBEDDED_PREFIX = "embedded:"


@cache
def schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of ``kind`` (``"spot"`` or ``"serverless"``)."""
    text = resources.files("dnnprov.data").joinpath("schema", f"{kind}-v{VERSION}.schema.json").read_text()
    return json.loads(text)


def problem_from_dict(data: Mapping[str, Any]) -> Problem:
    """Validate an instance dict against its schema and build the problem."""
    if not isinstance(data, Mapping):
        raise InvalidInputError("", f"an instance must be a JSON object, got {type(data).__name__}")
    fmt = data.get("format")
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise InvalidInputError("format", f"must be one of {', '.join(FORMATS)}; got {_short(fmt)}")
    version = data.get("version")
    if isinstance(version, bool) or version != VERSION:
        raise InvalidInputError("version", f"this dnnprov reads version {VERSION}; got {_short(version)}")
    kind = fmt.split("/")[1]
    validator = jsonschema.Draft202012Validator(schema(kind))
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        raise InvalidInputError(*_schema_error(errors[0]))
    return FORMATS[fmt].from_dict(data)


def _short(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (error messages stay one short line)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _schema_error(error: jsonschema.ValidationError) -> tuple[str, str]:
    """(field, problem) of a schema violation, naming the child field where there is one."""
    where = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, Mapping):
        missing = [k for k in error.validator_value if k not in error.instance]
        if missing:
            return _join(where, missing[0]), "missing required field"
    if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        known = list(error.schema.get("properties", {}))
        extra = [k for k in error.instance if k not in known]
        if extra:
            return _join(where, extra[0]), unknown_field(where, extra[0], known, see="docs/instance-format.md")
    message = error.message if len(error.message) <= 200 else error.message[:197] + "..."
    return where or "(top level)", message


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


# ------------------------------------------------------------------ files
def resolve_instance_path(value: str | Path) -> Path:
    """The file ``value`` names: a path, or ``embedded:REL`` for a file shipped with dnnprov
    (see :func:`embedded_instance`)."""
    if isinstance(value, str) and value.startswith(EMBEDDED_PREFIX):
        return embedded_instance(value.removeprefix(EMBEDDED_PREFIX))
    return Path(value)


def read_instance(path: str | Path) -> Problem:
    """Read one instance file (``embedded:REL`` names a file shipped with dnnprov)."""
    return problem_from_dict(read_json_file(resolve_instance_path(path)))


def dumps_instance(problem: Problem) -> str:
    """The instance file text of ``problem`` (stable key order, two-space indent)."""
    return json.dumps(problem.to_dict(), indent=2) + "\n"


def write_instance(problem: Problem, path: str | Path) -> Path:
    """Write ``problem`` to ``path``; reading it back gives an equal problem."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps_instance(problem))
    return path


def embedded_root() -> Path:
    """The folder of the instance files shipped with dnnprov (``dnnprov/data/instances``)."""
    return Path(str(resources.files("dnnprov.data").joinpath("instances")))


def embedded_instance(relative: str) -> Path:
    """Path of an instance file or folder shipped in ``dnnprov/data/instances``
    (e.g. ``spot/paper-table1.json``).

    ``relative`` must stay inside that folder: absolute paths, ``..`` and symbolic links
    that lead out of it are refused.
    """
    where = EMBEDDED_PREFIX + str(relative)
    text = str(relative)
    if not text or text.startswith(("/", "\\")) or Path(text).is_absolute() or "\\" in text:
        raise InvalidInputError(
            where, "must be a relative path inside the embedded instances (e.g. spot/paper-table1.json)"
        )
    if any(part == ".." for part in Path(text).parts) or "\x00" in text:
        raise InvalidInputError(where, "may not leave the embedded instances folder ('..')")
    root = embedded_root().resolve()
    path = (root / text).resolve()
    if not path.is_relative_to(root):
        raise InvalidInputError(where, "may not leave the embedded instances folder")
    if not path.exists():
        raise InvalidInputError(where, "no such embedded instance (see docs/data.md for the list)")
    return path
