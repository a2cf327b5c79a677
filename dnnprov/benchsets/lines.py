"""JSON-lines instance files (one instance dict per line): read lazily, checked per line, and written."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from dnnprov.errors import InvalidInputError
from dnnprov.io.instances import Problem, parse_json, problem_from_dict
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem


def read_instance_lines(path: str | Path, *, check_schema: bool = True) -> Iterator[Problem]:
    """Problems from a JSON-lines file (one instance dict per line), lazily, in file order.

    Each line is checked like :func:`dnnprov.read_instance` checks a file (JSON Schema,
    then the dataclasses); ``check_schema=False`` skips the schema for speed. Errors name
    the file and line. Blank lines are skipped.
    """
    path = Path(path)
    try:
        handle = path.open()
    except OSError as exc:
        raise InvalidInputError(str(path), f"cannot read file: {exc.strerror or exc}") from None
    with handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            data = parse_json(line, f"{path}:{lineno}")
            try:
                if check_schema:
                    yield problem_from_dict(data)
                else:
                    yield _from_dict_unchecked(data)
            except InvalidInputError as exc:
                where = f"{path}:{lineno}" + (f": {exc.field}" if exc.field else "")
                raise InvalidInputError(where, exc.problem) from None


def _from_dict_unchecked(data: Any) -> Problem:
    fmt = data.get("format") if isinstance(data, dict) else None
    if fmt == "dnnprov/spot":
        return SpotProblem.from_dict(data)
    if fmt == "dnnprov/serverless":
        return ServerlessProblem.from_dict(data)
    return problem_from_dict(data)


def dumps_line(data: Mapping[str, Any]) -> str:
    """One JSON line of an instance dict (compact, key order kept)."""
    return json.dumps(data, separators=(",", ":")) + "\n"


def write_instance_lines(items: Iterable[Problem | Mapping[str, Any]], path: str | Path) -> int:
    """Write problems or instance dicts as JSON lines; returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w") as out:
        for item in items:
            out.write(dumps_line(item.to_dict() if hasattr(item, "to_dict") else item))
            n += 1
    return n
