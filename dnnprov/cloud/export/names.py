"""Names each consumer accepts, made from arbitrary unicode instance and type names.

Every rule is the consumer's own:

- SkyPilot: cluster names must fully match ``[a-z]([-a-z0-9]*[a-z0-9])?`` (the check of
  SkyPilot's clouds, ``sky/clouds/cloud.py``; the general rule of
  ``sky/skylet/constants.py`` is wider), task names ``[a-zA-Z0-9]+(?:[._-]{1,2}[a-zA-Z0-9]+)*``
  (``sky/task.py``: no triple dashes). :func:`skypilot_name` meets both, with single dashes.
- Kubernetes (``k8s.io/apimachinery/pkg/util/validation``): DNS-1123 labels (at most 63
  characters, ``[a-z0-9]([-a-z0-9]*[a-z0-9])?``), DNS-1035 labels (a letter first; Service
  names), DNS-1123 subdomains (at most 253, dot-separated labels) and label values (at most
  63, ``(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?``). Object names here are DNS-1035
  labels, which are also DNS-1123 labels, subdomains and label values.
- AWS (botocore's service models): a Lambda ``FunctionName`` is ``[a-zA-Z0-9-_]+``, at most
  64 characters when it is a bare name (the model's documentation); a Lambda tag value
  ``[\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*`` of at most 256 characters (EC2 tag values: also 256).

Made names are unique: two different inputs that reduce to the same text (or the same
truncation) get a short hash of the input appended.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable

from dnnprov.errors import InvalidInputError

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
LAMBDA_FUNCTION_NAME = re.compile(r"[a-zA-Z0-9_-]+")
#: A run id (``dnnprov:run`` tag, part of each launch's ClientToken): a valid tag value and label value.
RUN_ID = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
DNS_LABEL_MAX, LABEL_VALUE_MAX, LAMBDA_NAME_MAX, TAG_VALUE_MAX, RUN_ID_MAX = 63, 63, 64, 256, 63
#: SkyPilot cluster names: the DNS label length keeps them valid on every cloud's resources.
SKYPILOT_NAME_MAX = 63
_TAG_PUNCTUATION = set("_.:/=+-@")


def _ascii(text: str) -> str:
    """``text`` with accents dropped (NFKD) and every other non-ASCII character removed."""
    folded = unicodedata.normalize("NFKD", text)
    return "".join(c for c in folded if ord(c) < 128)


def _hash(text: str, length: int = 6) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def _fit(base: str, limit: int, suffix: str = "") -> str:
    """``base`` cut so that ``base-suffix`` has at most ``limit`` characters, no dash at the cut."""
    room = limit - (len(suffix) + 1 if suffix else 0)
    base = base[:room].rstrip("-")
    return f"{base}-{suffix}" if suffix else base


def skypilot_name(text: str, limit: int = SKYPILOT_NAME_MAX) -> str:
    """A SkyPilot cluster and task name from any text: lower-case ASCII, a letter first, single dashes."""
    core = re.sub(r"[^a-z0-9]+", "-", _ascii(text).lower()).strip("-")
    if not core or not core[0].isalpha():
        core = f"n-{core}".rstrip("-")
    return _fit(core, limit)


def k8s_name(text: str, limit: int = DNS_LABEL_MAX) -> str:
    """A Kubernetes object name from any text: a DNS-1035 label (so also a DNS-1123 label and subdomain)."""
    return skypilot_name(text, limit)


def label_value(text: str) -> str:
    """A Kubernetes label value from any text (at most 63 characters, alphanumerics at both ends)."""
    core = re.sub(r"[^A-Za-z0-9_.-]+", "-", _ascii(text))
    core = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", core)
    if len(core) > LABEL_VALUE_MAX:
        core = re.sub(r"[^A-Za-z0-9]+$", "", core[: LABEL_VALUE_MAX - 7]) + "-" + _hash(text)
    return core


def lambda_function_name(text: str) -> str:
    """A bare Lambda function name from any text: ``[a-zA-Z0-9-_]``, at most 64 characters."""
    core = re.sub(r"[^A-Za-z0-9_-]+", "-", _ascii(text)).strip("-") or "dnnprov"
    return _fit(core, LAMBDA_NAME_MAX, _hash(text) if len(core) > LAMBDA_NAME_MAX else "")


def tag_value(text: str) -> str:
    """An AWS tag value from any text: letters, separators, digits and ``_.:/=+-@``, at most 256;
    a leading ``aws:`` (any case), which AWS reserves for its own tags, becomes ``aws-``."""
    kept = "".join(c if unicodedata.category(c)[0] in "LZN" or c in _TAG_PUNCTUATION else " " for c in text)
    if kept[:4].lower() == "aws:":
        kept = f"{kept[:3]}-{kept[4:]}"
    return kept[:TAG_VALUE_MAX]


class UniqueNames:
    """Names made by one rule that never collide: ``names(key)`` is the same for the same key.

    A key whose made name is already taken by another key gets a hash of the key appended.
    """

    def __init__(self, make: Callable[[str, int], str] = skypilot_name, limit: int = SKYPILOT_NAME_MAX) -> None:
        self._make, self._limit = make, limit
        self._by_key: dict[str, str] = {}
        self._taken: set[str] = set()

    def __call__(self, key: str) -> str:
        if key not in self._by_key:
            name = self._make(key, self._limit)
            if name in self._taken:
                name = _fit(name, self._limit, _hash(key))
            self._by_key[key] = name
            self._taken.add(name)
        return self._by_key[key]


def require(field: str, value: str, pattern: re.Pattern[str], limit: int, rule: str) -> str:
    """``value`` if it fully matches ``pattern`` within ``limit`` characters, else one clear error.

    Names a user chose (``--namespace``, ``--queue-name``, ``--function-name``, ``--run-id``) are refused,
    never rewritten: a rewritten name would point at an object the user did not mean.
    """
    if not isinstance(value, str) or len(value) > limit or pattern.fullmatch(value) is None:
        raise InvalidInputError(field, f"{value!r} is not a valid name here: {rule}, at most {limit} characters")
    return value
