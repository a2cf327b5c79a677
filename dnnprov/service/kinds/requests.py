"""A checked request of the service and the helpers every kind's checks share.

:class:`CheckedRequest` is what :func:`dnnprov.service.kinds.tasks.prepare` returns for a body: the
server learns its time limit and budget from it, a worker process runs ``request.run()``.
This module imports none of the other modules of the service (they import it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from dnnprov.errors import InvalidInputError
from dnnprov.io.instances import Problem, problem_from_dict, read_instance
from dnnprov.problems.validation import checks as check

#: Default ``time_limit_s`` per kind (seconds; at most the server's cap).
DEFAULT_TIME_LIMIT_S = {
    "solve": 10.0,
    "solve-many": 60.0,
    "replan": 10.0,
    "sweep": 10.0,
    "simulate": 60.0,
    "choose-plan": 60.0,
}


@dataclass(frozen=True)
class CheckedRequest:
    """A checked request body: ``run()`` does the work and returns the JSON answer.

    ``time_limit_s`` bounds the solver; ``budget_s`` bounds the whole task (a sweep solves
    many points), after which the worker process is killed.
    """

    kind: str
    run: Callable[[], dict[str, Any]]
    time_limit_s: float
    budget_s: float
    method: str


def body_fields(body: object, allowed: set[str], required: tuple[str, ...] = ()) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise InvalidInputError("body", f"must be a JSON object, got {type(body).__name__}")
    for key in body:
        if key not in allowed:
            raise InvalidInputError(str(key), f"unknown field (expected one of {', '.join(sorted(allowed))})")
    for key in required:
        if key not in body:
            raise InvalidInputError(key, "missing required field")
    return body


@functools.lru_cache(maxsize=64)
def _embedded(path: Path) -> Problem:
    """An instance file shipped with dnnprov, read once per process (problems are frozen; the
    files do not change while the server runs): a cheap request no longer parses it twice."""
    return read_instance(path)


def instance(value: object, where: str = "instance") -> Problem:
    """An instance object, or ``"embedded:REL"`` for a file shipped with dnnprov (inside its folder only)."""
    if isinstance(value, str):
        if not value.startswith("embedded:"):
            raise InvalidInputError(
                where, 'must be an instance object or "embedded:REL" (the server reads no other files)'
            )
        if "\x00" in value:
            raise InvalidInputError(where, "a file name cannot contain a NUL character")
        root = Path(str(resources.files("dnnprov.data").joinpath("instances"))).resolve()
        try:
            path = (root / value.removeprefix("embedded:")).resolve()
            found = path.is_relative_to(root) and path.is_file()
        except (OSError, ValueError):  # a name too long for the OS, ...
            found = False
        if not found:
            raise InvalidInputError(where, f"no such embedded instance: {check.short(value)}")
        return _embedded(path)
    if not isinstance(value, Mapping):
        raise InvalidInputError(where, f"must be an instance object, got {type(value).__name__}")
    try:
        return problem_from_dict(value)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{where}.{exc.field}" if exc.field else where, exc.problem) from None


def body_time_limit(body: Mapping[str, Any], kind: str, cap_s: float) -> float:
    default = min(DEFAULT_TIME_LIMIT_S[kind], cap_s)
    limit = check.number("time_limit_s", body.get("time_limit_s", default), exclusive_minimum=0)
    if limit > cap_s:
        raise InvalidInputError("time_limit_s", f"at most {cap_s:g} s on this server, got {limit:g}")
    return limit


def kill_after(time_limit_s: float) -> float:
    """Seconds after which a task's process is killed: the limit plus max(5 s, 25 %).

    The solvers stop themselves at their limit; the kill is for one that does not.
    """
    return time_limit_s + max(5.0, 0.25 * time_limit_s)
