"""What every request of ``dnnprov serve`` passes through before its endpoint (plain ASGI).

In order: a request id (``X-Request-Id`` kept when it is a short token, else new) and a
W3C ``traceparent`` (its trace id kept); 503 while the server drains; the bearer token and
its tenant, with failed attempts throttled per client; 415 when a body is not JSON; then
the endpoint, and one JSON access-log line. Being plain ASGI (no ``BaseHTTPMiddleware``)
it passes ``receive`` through untouched, so an endpoint sees its client disconnect.
"""

from __future__ import annotations

import collections
import hmac
import json
import logging
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

ACCESS_LOG = logging.getLogger("dnnprov.access")
#: Paths answered without a token and while draining (health checks).
OPEN_PATHS = ("/healthz", "/livez", "/readyz")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
#: Failed token checks a client may make per window before it gets 429.
AUTH_FAILURES_ALLOWED = 10
AUTH_WINDOW_S = 60.0

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Callable, Callable], Awaitable[None]]


def error_body(field: str, message: str) -> bytes:
    """The JSON error answer's body."""
    return json.dumps({"error": {"field": field, "message": message}}, separators=(",", ":")).encode()


@dataclass
class AuthThrottle:
    """Failed token checks per client address within a sliding window."""

    allowed: int = AUTH_FAILURES_ALLOWED
    window_s: float = AUTH_WINDOW_S
    _failures: dict[str, collections.deque] = field(default_factory=dict)

    def blocked_for(self, client: str) -> float:
        """Seconds until ``client`` may try a token again (0: now)."""
        failures = self._failures.get(client)
        if not failures:
            return 0.0
        now = time.monotonic()
        while failures and failures[0] < now - self.window_s:
            failures.popleft()
        return failures[0] + self.window_s - now if len(failures) >= self.allowed else 0.0

    def failed(self, client: str) -> None:
        """Count one failed check."""
        if len(self._failures) > 10_000:  # many addresses: forget the oldest half
            for key in list(self._failures)[:5_000]:
                del self._failures[key]
        self._failures.setdefault(client, collections.deque(maxlen=self.allowed)).append(time.monotonic())


class ServiceMiddleware:
    """Request ids, drain, auth and tenants, content types and the access log around ``app``."""

    def __init__(self, app: ASGIApp, *, tokens: dict[str, str] | None, draining: Callable[[], bool],
                 body_paths: frozenset[str] = frozenset(), max_auth_failures: int = AUTH_FAILURES_ALLOWED,
                 on_response: Callable[[str, str, int, float], None] | None = None) -> None:
        self.app = app
        self.body_paths = body_paths  # where a POST must send JSON (415 otherwise)
        self.tokens = tokens
        self.draining = draining
        self.on_response = on_response
        self.throttle = AuthThrottle(allowed=max_auth_failures)

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
        extra = [(b"x-request-id", request_id.encode()),
                 (b"traceparent", f"00-{trace_id}-{secrets.token_hex(8)}-{flags}".encode())]

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
            await self.app(scope, receive, send_with_ids)
        elapsed = time.perf_counter() - started
        status = status_seen[0] if status_seen else 0
        route = getattr(scope.get("route"), "path", "unmatched")
        if self.on_response is not None:
            self.on_response(scope["method"], route, status, elapsed)
        ACCESS_LOG.info(json.dumps({
            "ts": round(time.time(), 3), "level": "info", "event": "request", "request_id": request_id,
            "trace_id": trace_id, "client": client, "tenant": state.get("tenant", ""), "method": scope["method"],
            "path": scope["path"][:200], "route": route, "status": status, "duration_ms": round(elapsed * 1000, 2)}))

    def _refusal(self, scope: Scope, headers: dict[str, str], client: str,
                 state: dict[str, Any]) -> tuple[int, str, str, list[tuple[bytes, bytes]]] | None:
        path = scope["path"]
        if path in OPEN_PATHS:
            return None
        if self.draining():
            return 503, "", "the server is shutting down: retry the request on another server or later", \
                [(b"retry-after", b"5"), (b"connection", b"close")]
        if self.tokens is not None:
            wait = self.throttle.blocked_for(client)
            if wait > 0:
                return 429, "Authorization", "too many failed token checks from this client: retry later", \
                    [(b"retry-after", str(max(1, round(wait))).encode())]
            tenant = self._tenant(headers.get("authorization", ""))
            if tenant is None:
                self.throttle.failed(client)
                return 401, "Authorization", "a valid bearer token is required", [(b"www-authenticate", b"Bearer")]
            state["tenant"] = tenant
        if scope["method"] == "POST" and path in self.body_paths:
            media = headers.get("content-type", "").split(";")[0].strip().lower()
            if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
                shown = media[:40] or "none"
                return 415, "Content-Type", f"must be application/json, got {shown}", \
                    [(b"accept-post", b"application/json")]
        return None

    def _tenant(self, authorization: str) -> str | None:
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
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})
