"""Small field checks shared by the problem dataclasses.

Each check raises :class:`InvalidInputError` naming the field, so that bad data never
reaches numpy or Pyomo. The resource limits below keep every accepted problem small
enough to compile and search; each is documented, with its error, in
docs/instance-format.md ("Resource limits").
"""

from __future__ import annotations

import math
import unicodedata
from numbers import Integral, Real

from dnnprov.errors import InvalidInputError

# ------------------------------------------------------------------ resource limits
#: Largest integer any field accepts (exactly representable as a float, fits int64).
MAX_INTEGER = 2**53
#: Largest magnitude of any number (prices, times, coefficients): products of a few such
#: numbers stay far from float overflow.
MAX_MAGNITUDE = 1e15
#: Smallest value of a quantity that must be positive (sizes, bandwidths, times, speeds).
MIN_POSITIVE = 1e-9
#: Instance types (columns: type, or type@region pools) in one spot problem: a multi-region
#: catalog of every GPU type the shared data prices has 682 pools; the benchmark sets up to 2,000.
MAX_INSTANCE_TYPES = 4096
#: Instances of one column (``quota``, ``on_demand_quota``, ``existing``).
MAX_QUOTA = 4096
#: Workers of one spot plan: the column quotas summed, capped by ``constraints.workers``.
MAX_WORKERS = 16384
#: GPUs per instance type.
MAX_GPUS = 64
#: vCPUs per instance type.
MAX_VCPUS = 1_048_576
#: Highest PS count of ``constraints.ps_count`` (spot and serverless).
MAX_PS_COUNT = 64
#: Functions: ``platform.concurrency_limit`` and ``constraints.functions``.
MAX_FUNCTIONS = 100_000
#: Largest memory size, MB (Lambda offers 10,240).
MAX_MEMORY_MB = 1_048_576
#: Sizes on the serverless memory grid (Lambda in 1 MB steps has 10,113).
MAX_MEMORY_POINTS = 16_384
#: Serverless plans: functions x memory sizes x PS counts.
MAX_SERVERLESS_PLANS = 10**8
#: Training samples of a serverless workload.
MAX_SAMPLES = 10**12
#: Batch sizes (``batch_per_gpu``, ``local_batch``, ``max_global_batch``), samples.
MAX_BATCH = 2**30
#: Characters in a name (instance, type, workload, family, PS type).
MAX_NAME_CHARS = 200


def number(
    field: str,
    value: object,
    *,
    minimum: float | None = None,
    exclusive_minimum: float | None = None,
    maximum: float | None = None,
) -> float:
    """Return ``value`` as a finite float, checking the stated bounds."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise InvalidInputError(field, f"must be a number, got {short(value)}")
    try:
        result = float(value)
    except OverflowError:
        raise InvalidInputError(field, f"must be finite, got {_magnitude(value)}") from None
    if not math.isfinite(result):
        raise InvalidInputError(field, f"must be finite, got {value!r}")
    if abs(result) > MAX_MAGNITUDE:
        raise InvalidInputError(field, f"{result:g} is out of range (numbers are at most 1e15 in size)")
    if exclusive_minimum == 0 and 0 < result < MIN_POSITIVE:
        raise InvalidInputError(field, f"{result:g} is too small (a positive quantity is at least 1e-09)")
    if minimum is not None and result < minimum:
        raise InvalidInputError(field, f"must be >= {minimum:g}, got {value!r}")
    if exclusive_minimum is not None and result <= exclusive_minimum:
        raise InvalidInputError(field, f"must be > {exclusive_minimum:g}, got {value!r}")
    if maximum is not None and result > maximum:
        raise InvalidInputError(field, f"must be <= {maximum:g}, got {value!r}")
    return result


def integer(field: str, value: object, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an int, refusing floats with a fractional part and bools."""
    if isinstance(value, bool):
        raise InvalidInputError(field, f"must be an integer, got {value!r}")
    if isinstance(value, Real) and not isinstance(value, Integral):
        if not math.isfinite(float(value)) or float(value) != math.trunc(value):
            raise InvalidInputError(field, f"must be an integer, got {short(value)}")
        value = math.trunc(value)
    if not isinstance(value, Integral):
        raise InvalidInputError(field, f"must be an integer, got {short(value)}")
    result = int(value)
    if abs(result) > MAX_INTEGER:
        raise InvalidInputError(field, f"{_magnitude(result)} is out of range (integers are at most 2^53 in size)")
    if minimum is not None and result < minimum:
        raise InvalidInputError(field, f"must be >= {minimum}, got {result}")
    if maximum is not None and result > maximum:
        raise InvalidInputError(field, f"must be <= {maximum}, got {_magnitude(result)}")
    return result


def optional_number(field: str, value: object, **bounds: float) -> float | None:
    """Like :func:`number` but lets ``None`` through."""
    return None if value is None else number(field, value, **bounds)


def optional_integer(field: str, value: object, **bounds: int) -> int | None:
    """Like :func:`integer` but lets ``None`` through."""
    return None if value is None else integer(field, value, **bounds)


def choice(field: str, value: object, allowed: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``allowed``."""
    if not isinstance(value, str) or value not in allowed:
        raise InvalidInputError(field, f"must be one of {', '.join(allowed)}; got {short(value)}")
    return value


def text(field: str, value: object, *, allow_empty: bool = False) -> str:
    """Check that ``value`` is a string (non-empty unless ``allow_empty``) of valid Unicode."""
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise InvalidInputError(field, f"must be a {'' if allow_empty else 'non-empty '}string, got {short(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(field, "contains a lone surrogate (not valid Unicode text)") from None
    return value


def name(field: str, value: object) -> str:
    """A non-empty name of at most :data:`MAX_NAME_CHARS` characters with no control
    characters (names end up in terminals, file headers and plan documents)."""
    text(field, value)
    assert isinstance(value, str)
    if len(value) > MAX_NAME_CHARS:
        raise InvalidInputError(
            field, f"a name of {len(value):,} characters is longer than the limit of {MAX_NAME_CHARS}"
        )
    bad = next((c for c in value if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")), None)
    if bad is not None:
        raise InvalidInputError(field, f"may not contain control or format characters (found U+{ord(bad):04X})")
    return value


def listing(items: list[str], limit: int = 8) -> str:
    """``items`` joined by commas, cut after ``limit`` with how many were left out."""
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown}, ... ({len(items) - limit} more)"


def short(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, so that an error stays one short line."""
    try:
        text = repr(value)
    except ValueError:  # an int too long to print
        return "a huge number"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _magnitude(value: object) -> str:
    """A huge number in words (``repr`` of a 5,000-digit int fails, and is unreadable)."""
    if isinstance(value, int) and abs(value) >= 10**15:
        return f"a number of about {int(abs(value).bit_length() * math.log10(2)) + 1} digits"
    return short(value)


def count(field: str, value: object, *, minimum: int, limit: int) -> int:
    """An integer count >= ``minimum`` within the resource limit ``limit``."""
    result = integer(field, value, minimum=minimum)
    if result > limit:
        raise InvalidInputError(
            field, f"{_magnitude(result)} is above the limit of {limit:,} (resource limits: docs/instance-format.md)"
        )
    return result


def optional_count(field: str, value: object, *, minimum: int, limit: int) -> int | None:
    """Like :func:`count` but lets ``None`` through."""
    return None if value is None else count(field, value, minimum=minimum, limit=limit)


def int_range(field: str, value: object, *, minimum: int, limit: int | None = None) -> tuple[int, int | None]:
    """A ``[low, high]`` pair of integers; ``high`` may be ``None`` (no upper limit)."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise InvalidInputError(field, f"must be a pair [low, high], got {short(value)}")
    top = MAX_INTEGER if limit is None else limit
    low = count(f"{field}[0]", value[0], minimum=minimum, limit=top)
    high = optional_count(f"{field}[1]", value[1], minimum=minimum, limit=top)
    if high is not None and high < low:
        raise InvalidInputError(field, f"low {low} is above high {high}")
    return low, high
