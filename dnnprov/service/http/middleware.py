"""What every request of ``dnnprov serve`` passes through before its endpoint (plain ASGI).

In order: a request id (``X-Request-Id`` kept when it is a short token, else new) and a
W3C ``traceparent`` (its trace id kept); 503 while the server drains; the bearer token and
its tenant, with failed attempts throttled per client (a repeated ``Authorization`` is 400);
415 when a body is not JSON (or is encoded: ``Content-Encoding``); then the endpoint, and one
JSON access-log line. Being plain ASGI (no ``BaseHTTPMiddleware``) it passes ``receive``
through untouched, so an endpoint sees its client disconnect.
"""

from __future__ import annotations

import asyncio
import collections
import hmac
import json
import logging
import math
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

ACCESS_LOG = logging.getLogger("dnnprov.access")
#: Paths answered without a token and while draining (health checks).
OPEN_PATHS = ("/healthz", "/livez", "/readyz")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
#: Failed token checks a client may make per window before it gets 429.
AUTH_FAILURES_ALLOWED = 10
AUTH_WINDOW_S = 60.0
#: Characters of a presented token that key its failures (a wrong token is throttled, not its neighbours).
TOKEN_PREFIX = 8
#: An address may fail this many times ``allowed`` (any tokens) before all its requests get 429.
ADDRESS_FACTOR = 10
#: Methods kept as metric labels; any other is counted as ``OTHER``.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"})

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Callable, Callable], Awaitable[None]]


def error_body(field: str, message: str) -> bytes:
    """The JSON error answer's body."""
    return json.dumps({"error": {"field": field, "message": message}}, separators=(",", ":")).encode()


@dataclass
class AuthThrottle:
    """Failed token checks within a sliding window, per (address, token prefix) and per address.

    A client sending a wrong token is refused (429) after ``allowed`` failures with that
    token's first :data:`TOKEN_PREFIX` characters; other clients behind the same address
    (an ingress) with other tokens go on. An address is refused whatever it sends after
    ``allowed * ADDRESS_FACTOR`` failures of any tokens (guessing stays bounded).
    """

    allowed: int = AUTH_FAILURES_ALLOWED
    window_s: float = AUTH_WINDOW_S
    _failures: dict[tuple[str, str], collections.deque[float]] = field(default_factory=dict)

    def blocked_for(self, client: str, token: str) -> float:
        """Seconds until ``client`` may try ``token`` again (0: now)."""
        return max(
            self._wait((client, token[:TOKEN_PREFIX]), self.allowed),
            self._wait((client, ""), self.allowed * ADDRESS_FACTOR),
        )

    def _wait(self, key: tuple[str, str], allowed: int) -> float:
        failures = self._failures.get(key)
        if not failures:
            return 0.0
        now = time.monotonic()
        while failures and failures[0] < now - self.window_s:
            failures.popleft()
        return failures[0] + self.window_s - now if len(failures) >= allowed else 0.0

    def failed(self, client: str, token: str) -> None:
        """Count one failed check of ``token`` from ``client``."""
        if len(self._failures) > 10_000:  # many keys: forget the oldest half
            for key in list(self._failures)[:5_000]:
                del self._failures[key]
        now = time.monotonic()
        self._failures.setdefault((client, token[:TOKEN_PREFIX]), collections.deque(maxlen=self.allowed)).append(now)
        self._failures.setdefault((client, ""), collections.deque(maxlen=self.allowed * ADDRESS_FACTOR)).append(now)


@dataclass
class RateLimiter:
    """Requests per second per tenant: a token bucket of ``burst`` requests refilled at ``rate``."""

    rate: float
    burst: float
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)

    def wait_s(self, tenant: str) -> float:
        """0 when ``tenant`` may make a request now (counted), else seconds until it may."""
        now = time.monotonic()
        level, last = self._buckets.get(tenant, (self.burst, now))
        level = min(self.burst, level + (now - last) * self.rate)
        if level < 1:
            self._buckets[tenant] = (level, now)
            return (1 - level) / self.rate
        self._buckets[tenant] = (level - 1, now)
        return 0.0


class SlowBody(Exception):
    """The client sent its body slower than the server's minimum rate."""


def guarded_receive(receive: Callable, grace_s: float, min_rate: float) -> Callable:
    """``receive`` whose body must arrive at ``min_rate`` bytes/s after ``grace_s`` seconds, else :class:`SlowBody`.

    The deadline of each read is ``start + grace_s + received / min_rate``: a client
    trickling bytes is cut off, one sending at the rate never is. After the body's last
    chunk, messages (the disconnect) are awaited without a deadline.
    """
    started = time.monotonic()
    got = 0
    done = False

    async def receive_in_time() -> dict[str, Any]:
        nonlocal got, done
        if done:
            return await receive()
        allowed = started + grace_s + got / min_rate - time.monotonic()
        if allowed <= 0:
            raise SlowBody
        try:
            message = await asyncio.wait_for(receive(), allowed)
        except TimeoutError:
            raise SlowBody from None
        if message["type"] == "http.request":
            got += len(message.get("body", b""))
            done = not message.get("more_body", False)
        else:
            done = True
        return message

    return receive_in_time


def metric_method(method: str) -> str:
    """The HTTP method as a metric label: one of the known methods, else ``OTHER`` (a bounded set)."""
    return method if method in KNOWN_METHODS else "OTHER"


class ServiceMiddleware:
    """Request ids, drain, auth and tenants, content types and the access log around ``app``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        tokens: dict[str, str] | None,
        draining: Callable[[], bool],
        body_paths: frozenset[str] = frozenset(),
        max_auth_failures: int = AUTH_FAILURES_ALLOWED,
        on_response: Callable[[str, str, int, float], None] | None = None,
        body_grace_s: float = 10.0,
        min_body_rate: float = 1024.0,
        rate_limit: float = 0.0,
    ) -> None:
        self.app = app
        self.body_paths = body_paths  # where a POST must send JSON (415 otherwise)
        self.tokens = tokens
        self.draining = draining
        self.on_response = on_response
        self.throttle = AuthThrottle(allowed=max_auth_failures)
        self.body_grace_s, self.min_body_rate = body_grace_s, min_body_rate
        self.rate = RateLimiter(rate_limit, 2 * rate_limit) if rate_limit > 0 else None

    async def __call__(self, scope: Scope, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        given_id = headers.get("x-request-id", "")
        request_id = given_id if _REQUEST_ID.match(given_id) else secrets.token_hex(8)
        trace = _TRACEPARENT.match(headers.get("traceparent", ""))
        trace_id = trace.group(1) if trace and trace.group(1) != "0" * 32 else secrets.token_hex(16)
        flags = trace.group(3) if trace else "01"
        state = scope.setdefault("state", {})
        state.update(request_id=request_id, trace_id=trace_id, tenant="")
        client = scope["client"][0] if scope.get("client") else "?"
        status_seen: list[int] = []
        extra = [
            (b"x-request-id", request_id.encode()),
            (b"traceparent", f"00-{trace_id}-{secrets.token_hex(8)}-{flags}".encode()),
        ]

        async def send_with_ids(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status_seen.append(message["status"])
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        refusal = self._refusal(scope, headers, client, state)
        if refusal is not None:
            status, field_name, message, more = refusal
            await _answer(send_with_ids, status, error_body(field_name, message), more)
        else:
            try:
                await self.app(scope, guarded_receive(receive, self.body_grace_s, self.min_body_rate), send_with_ids)
            except SlowBody:
                if not status_seen:
                    await _answer(
                        send_with_ids,
                        408,
                        error_body(
                            "body", f"sent slower than {self.min_body_rate:g} bytes/s after {self.body_grace_s:g} s"
                        ),
                        [(b"connection", b"close")],
                    )
        elapsed = time.perf_counter() - started
        status = status_seen[0] if status_seen else 0
        route = getattr(scope.get("route"), "path", "unmatched")
        if self.on_response is not None:
            self.on_response(metric_method(scope["method"]), route, status, elapsed)
        ACCESS_LOG.info(
            json.dumps(
                {
                    "ts": round(time.time(), 3),
                    "level": "info",
                    "event": "request",
                    "request_id": request_id,
                    "trace_id": trace_id,
                    "client": client,
                    "tenant": state.get("tenant", ""),
                    "method": scope["method"],
                    "path": scope["path"][:200],
                    "route": route,
                    "status": status,
                    "duration_ms": round(elapsed * 1000, 2),
                }
            )
        )

    def _refusal(
        self, scope: Scope, headers: dict[str, str], client: str, state: dict[str, Any]
    ) -> tuple[int, str, str, list[tuple[bytes, bytes]]] | None:
        path = scope["path"]
        if path in OPEN_PATHS:
            return None
        if self.draining():
            return (
                503,
                "",
                "the server is shutting down: retry the request on another server or later",
                [(b"retry-after", b"5"), (b"connection", b"close")],
            )
        if self.tokens is not None:
            given = sum(1 for k, _ in scope.get("headers", []) if k.lower() == b"authorization")
            if given > 1:  # which one would count? a proxy may have checked the other: refuse both
                return 400, "Authorization", f"sent {given} times; send one bearer token", []
            authorization = headers.get("authorization", "")
            presented = authorization.partition(" ")[2].strip()
            wait = self.throttle.blocked_for(client, presented)
            if wait > 0:
                return (
                    429,
                    "Authorization",
                    "too many failed token checks from this client: retry later",
                    [(b"retry-after", str(max(1, round(wait))).encode())],
                )
            tenant = self._tenant(authorization)
            if tenant is None:
                self.throttle.failed(client, presented)
                return 401, "Authorization", "a valid bearer token is required", [(b"www-authenticate", b"Bearer")]
            state["tenant"] = tenant
        if self.rate is not None:
            wait = self.rate.wait_s(state["tenant"] if self.tokens is not None else client)
            if wait > 0:
                return (
                    429,
                    "",
                    "too many requests from this tenant: retry later",
                    [(b"retry-after", str(max(1, math.ceil(wait))).encode())],
                )
        if scope["method"] == "POST" and path in self.body_paths:
            encoding = headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):  # a gzip body would be read as if it were plain JSON
                return 415, "Content-Encoding", f"must be identity (bodies are not decoded), got {encoding[:40]}", []
            media = headers.get("content-type", "").split(";")[0].strip().lower()
            if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
                shown = media[:40] or "none"
                return (
                    415,
                    "Content-Type",
                    f"must be application/json, got {shown}",
                    [(b"accept-post", b"application/json")],
                )
        return None

    def _tenant(self, authorization: str) -> str | None:
        if self.tokens is None:
            return ""
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return None
        given = value.strip().encode()
        found = None
        for token, tenant in self.tokens.items():  # every token compared: the time tells nothing
            if hmac.compare_digest(given, token.encode()):
                found = tenant
        return found


async def _answer(send: Callable, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})
