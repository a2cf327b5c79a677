"""The versioned JSON instance format: one spot or serverless problem per file.

Files are checked against the JSON Schema in ``dnnprov/data/schema`` (structure, types,
units in field names) and then by the problem dataclasses (meaning). Either way a bad file
raises :class:`InvalidInputError` naming the field. Reading is hardened against hostile
files: only regular files up to :data:`MAX_FILE_BYTES`, UTF-8 only, no duplicate keys, at
most :data:`MAX_DEPTH` levels of nesting, no integer literal over
:data:`MAX_INTEGER_DIGITS` digits. See docs/instance-format.md.
"""

from __future__ import annotations

import difflib
import json
import os
import stat
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
EMBEDDED_PREFIX = "embedded:"

#: Largest instance file read (bytes); every embedded or benchmark instance is under 30 KB.
MAX_FILE_BYTES = 8 * 1024 * 1024
#: Deepest nesting of JSON objects and arrays (instance files use 4 levels).
MAX_DEPTH = 32
#: Longest integer literal (digits); every count dnnprov accepts has far fewer.
MAX_INTEGER_DIGITS = 32


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
    return text if len(text) <= limit else text[:limit - 3] + "..."


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
    message = error.message if len(error.message) <= 200 else error.message[:197] + "..."
    return where or "(top level)", message


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


# ------------------------------------------------------------------ safe JSON
class _Pairs(dict):
    """A parsed JSON object that remembers its first repeated key (``None``: none)."""

    duplicate: str | None = None


class _LongInteger:
    """An integer literal longer than :data:`MAX_INTEGER_DIGITS` digits (not converted)."""

    def __init__(self, literal: str) -> None:
        self.digits = len(literal.lstrip("-"))


def _pairs(pairs: list[tuple[str, Any]]) -> _Pairs:
    obj = _Pairs(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        obj.duplicate = next(k for k, _ in pairs if k in seen or seen.add(k))
    return obj


def _parse_int(literal: str) -> int | _LongInteger:
    return int(literal) if len(literal) <= MAX_INTEGER_DIGITS else _LongInteger(literal)


def _check_tree(data: Any, where: str) -> None:
    """Refuse repeated keys, deep nesting, long integers and lone surrogates, naming the field."""
    stack: list[tuple[Any, str, int]] = [(data, "", 1)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, (dict, list)) and depth > MAX_DEPTH:
            raise InvalidInputError(path.split(".")[0] or where, f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, _Pairs) and value.duplicate is not None:
            raise InvalidInputError(_join(path, value.duplicate), "key given twice in one object (duplicate keys are refused)")
        if isinstance(value, _LongInteger):
            raise InvalidInputError(path or where, f"integer literal of {value.digits} digits is too large")
        if isinstance(value, str):
            _check_text(path or where, value)
        if isinstance(value, dict):  # children pushed last first: the file order is kept
            for key in value:
                _check_text(_join(path, key), key)
            stack.extend((child, _join(path, key), depth + 1) for key, child in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((value[i], f"{path}.{i}" if path else str(i), depth + 1) for i in reversed(range(len(value))))


def _check_text(field: str, text: str) -> None:
    """Refuse lone surrogates (``"\\ud800"``): they are not Unicode text and cannot be written back."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(field, "contains a lone surrogate escape (not valid Unicode text)") from None


def parse_json(text: str, where: str) -> Any:
    """Parse JSON ``text`` with the checks of :func:`read_instance`; errors name ``where``
    (the file) or the offending field."""
    try:
        data = json.loads(text, object_pairs_hook=_pairs, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(where, f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise InvalidInputError(where, f"nested more than {MAX_DEPTH} levels deep") from None
    _check_tree(data, where)
    return data


def read_json_file(path: str | Path, *, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """The parsed JSON of a regular UTF-8 file of at most ``max_bytes`` bytes (checked as
    :func:`parse_json` does); anything else is an :class:`InvalidInputError` on the path."""
    path = Path(path)
    where = str(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise InvalidInputError(where, f"cannot read file: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    problem = ("cannot read file: is a folder" if stat.S_ISDIR(info.st_mode)
               else "cannot read file: not a regular file (a pipe, socket or device)" if not stat.S_ISREG(info.st_mode)
               else f"file of {info.st_size:,} bytes is larger than the limit of {max_bytes:,} bytes"
               if info.st_size > max_bytes else None)
    if problem is not None:
        os.close(fd)
        raise InvalidInputError(where, problem)
    with os.fdopen(fd, "rb") as handle:
        try:
            raw = handle.read(max_bytes + 1)
        except OSError as exc:
            raise InvalidInputError(where, f"cannot read file: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:
        raise InvalidInputError(where, f"file is larger than the limit of {max_bytes:,} bytes")
    return parse_json(_decode(raw, where), where)


def _decode(raw: bytes, where: str) -> str:
    """UTF-8 text of ``raw`` (a UTF-8 byte-order mark is allowed); other encodings are refused."""
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff") or (len(raw) > 1 and (raw[0] == 0 or raw[1] == 0)):
        raise InvalidInputError(where, "not UTF-8 text (it looks like UTF-16): save the file as UTF-8")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise InvalidInputError(where, f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}, "
                                       f"line {line}): save the file as UTF-8") from None


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
        raise InvalidInputError(where, "must be a relative path inside the embedded instances (e.g. spot/paper-table1.json)")
    if any(part == ".." for part in Path(text).parts) or "\x00" in text:
        raise InvalidInputError(where, "may not leave the embedded instances folder ('..')")
    root = embedded_root().resolve()
    path = (root / text).resolve()
    if not path.is_relative_to(root):
        raise InvalidInputError(where, "may not leave the embedded instances folder")
    if not path.exists():
        raise InvalidInputError(where, "no such embedded instance (see docs/data.md for the list)")
    return path
