"""Small field checks shared by the problem dataclasses.

Each check raises :class:`InvalidInputError` naming the field, so that bad data never
reaches numpy or Pyomo.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

from dnnprov.errors import InvalidInputError


def number(field: str, value: object, *, minimum: float | None = None,
           exclusive_minimum: float | None = None, maximum: float | None = None) -> float:
    """Return ``value`` as a finite float, checking the stated bounds."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise InvalidInputError(field, f"must be a number, got {value!r}")
    result = float(value)
    if not math.isfinite(result):
        raise InvalidInputError(field, f"must be finite, got {value!r}")
    if minimum is not None and result < minimum:
        raise InvalidInputError(field, f"must be >= {minimum:g}, got {value!r}")
    if exclusive_minimum is not None and result <= exclusive_minimum:
        raise InvalidInputError(field, f"must be > {exclusive_minimum:g}, got {value!r}")
    if maximum is not None and result > maximum:
        raise InvalidInputError(field, f"must be <= {maximum:g}, got {value!r}")
    return result


def integer(field: str, value: object, *, minimum: int | None = None,
            maximum: int | None = None) -> int:
    """Return ``value`` as an int, refusing floats with a fractional part and bools."""
    if isinstance(value, bool):
        raise InvalidInputError(field, f"must be an integer, got {value!r}")
    if isinstance(value, Real) and not isinstance(value, Integral):
        if not math.isfinite(float(value)) or float(value) != int(value):
            raise InvalidInputError(field, f"must be an integer, got {value!r}")
        value = int(value)
    if not isinstance(value, Integral):
        raise InvalidInputError(field, f"must be an integer, got {value!r}")
    result = int(value)
    if minimum is not None and result < minimum:
        raise InvalidInputError(field, f"must be >= {minimum}, got {result}")
    if maximum is not None and result > maximum:
        raise InvalidInputError(field, f"must be <= {maximum}, got {result}")
    return result


def optional_number(field: str, value: object, **bounds: float) -> float | None:
    """Like :func:`number` but lets ``None`` through."""
    return None if value is None else number(field, value, **bounds)


def optional_integer(field: str, value: object, **bounds: int) -> int | None:
    """Like :func:`integer` but lets ``None`` through."""
    return None if value is None else integer(field, value, **bounds)


def choice(field: str, value: object, allowed: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``allowed``."""
    if value not in allowed:
        raise InvalidInputError(field, f"must be one of {', '.join(allowed)}; got {value!r}")
    return str(value)


def text(field: str, value: object, *, allow_empty: bool = False) -> str:
    """Check that ``value`` is a string (non-empty unless ``allow_empty``)."""
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise InvalidInputError(field, f"must be a {'' if allow_empty else 'non-empty '}string, got {value!r}")
    return value


def int_range(field: str, value: object, *, minimum: int) -> tuple[int, int | None]:
    """A ``[low, high]`` pair of integers; ``high`` may be ``None`` (no upper limit)."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise InvalidInputError(field, f"must be a pair [low, high], got {value!r}")
    low = integer(f"{field}[0]", value[0], minimum=minimum)
    high = optional_integer(f"{field}[1]", value[1], minimum=minimum)
    if high is not None and high < low:
        raise InvalidInputError(field, f"low {low} is above high {high}")
    return low, high
