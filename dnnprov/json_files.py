"""Reading JSON files a hostile user may have written: one clear error, never a traceback.

Every JSON file dnnprov reads (instances, catalogs, workload profiles, plans, traces)
goes through :func:`read_json_file` or :func:`parse_json`: only regular files up to
:data:`MAX_FILE_BYTES`, UTF-8 only, no repeated keys, at most :data:`MAX_DEPTH` levels of
nesting, no integer literal over :data:`MAX_INTEGER_DIGITS` digits, no lone surrogates.
Each refusal is an :class:`~dnnprov.errors.InvalidInputError` naming the file or field.
The path ``-`` (or ``/dev/stdin``) reads standard input, with the same checks.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from dnnprov.errors import InvalidInputError

#: Largest file read (bytes); every embedded or benchmark instance is under 30 KB, the
#: largest real data file (a Spot Advisor snapshot) under 1 MB.
MAX_FILE_BYTES = 8 * 1024 * 1024
#: Deepest nesting of JSON objects and arrays (instance files use 4 levels).
MAX_DEPTH = 32
#: Longest integer literal (digits); every count dnnprov accepts has far fewer.
MAX_INTEGER_DIGITS = 32
#: Paths that name standard input.
STDIN_PATHS = frozenset({"-", "/dev/stdin"})


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


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
        for key, _ in pairs:
            if key in seen:
                obj.duplicate = key
                break
            seen.add(key)
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
            raise InvalidInputError(
                _join(path, value.duplicate), "key given twice in one object (duplicate keys are refused)"
            )
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
    if str(path) in STDIN_PATHS:
        return parse_json(_decode(_read_stdin(str(path), max_bytes), "standard input"), "standard input")
    path = Path(path)
    where = str(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise InvalidInputError(where, f"cannot read file: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    problem = (
        "cannot read file: is a folder"
        if stat.S_ISDIR(info.st_mode)
        else "cannot read file: not a regular file (a pipe, socket or device)"
        if not stat.S_ISREG(info.st_mode)
        else f"file of {info.st_size:,} bytes is larger than the limit of {max_bytes:,} bytes"
        if info.st_size > max_bytes
        else None
    )
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


def _read_stdin(where: str, max_bytes: int) -> bytes:
    """At most ``max_bytes`` bytes of standard input (refused when it is a terminal: no waiting)."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        raise InvalidInputError(where, "cannot read standard input: there is none")
    try:
        if stream.isatty():
            raise InvalidInputError(where, "standard input is a terminal: pipe a file in (dnnprov solve - < FILE)")
        raw = stream.read(max_bytes + 1)
    except (OSError, ValueError) as exc:
        raise InvalidInputError(where, f"cannot read standard input: {exc}") from None
    if len(raw) > max_bytes:
        raise InvalidInputError(where, f"standard input is larger than the limit of {max_bytes:,} bytes")
    return raw


def _decode(raw: bytes, where: str) -> str:
    """UTF-8 text of ``raw`` (a UTF-8 byte-order mark is allowed); other encodings are refused."""
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff") or (len(raw) > 1 and (raw[0] == 0 or raw[1] == 0)):
        raise InvalidInputError(where, "not UTF-8 text (it looks like UTF-16): save the file as UTF-8")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InvalidInputError(
            where,
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}, line {line}): save the file as UTF-8",
        ) from None
