"""The versioned JSON instance format: one spot or serverless problem per file.

Files are checked against the JSON Schema in ``dnnprov/data/schema`` (structure, types,
units in field names) and then by the problem dataclasses (meaning). Either way a bad file
raises :class:`InvalidInputError` naming the field. See docs/instance-format.md.
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import jsonschema

from dnnprov.errors import InvalidInputError
from dnnprov.serverless import ServerlessProblem
from dnnprov.spot import SpotProblem

Problem = SpotProblem | ServerlessProblem
FORMATS = {"dnnprov/spot": SpotProblem, "dnnprov/serverless": ServerlessProblem}
VERSION = 1


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
    if fmt not in FORMATS:
        raise InvalidInputError("format", f"must be one of {', '.join(FORMATS)}; got {fmt!r}")
    if data.get("version") != VERSION:
        raise InvalidInputError("version", f"this dnnprov reads version {VERSION}; got {data.get('version')!r}")
    kind = fmt.split("/")[1]
    validator = jsonschema.Draft202012Validator(schema(kind))
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        raise InvalidInputError(*_schema_error(errors[0]))
    return FORMATS[fmt].from_dict(data)


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
            close = difflib.get_close_matches(extra[0], known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            return _join(where, extra[0]), f"unknown field{hint} (units are part of field names; see docs/instance-format.md)"
    return where or "(top level)", error.message


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def read_instance(path: str | Path) -> Problem:
    """Read one instance file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidInputError(str(path), f"cannot read file: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(str(path), f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    return problem_from_dict(data)


def dumps_instance(problem: Problem) -> str:
    """The instance file text of ``problem`` (stable key order, two-space indent)."""
    return json.dumps(problem.to_dict(), indent=2) + "\n"


def write_instance(problem: Problem, path: str | Path) -> Path:
    """Write ``problem`` to ``path``; reading it back gives an equal problem."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps_instance(problem))
    return path


def embedded_instance(relative: str) -> Path:
    """Path of an instance file shipped in ``dnnprov/data/instances`` (e.g. ``spot/paper-table1.json``)."""
    path = Path(str(resources.files("dnnprov.data").joinpath("instances", relative)))
    if not path.is_file():
        raise InvalidInputError(relative, "no such embedded instance")
    return path
