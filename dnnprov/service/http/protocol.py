"""The HTTP protocol of ``dnnprov serve``: uvicorn's h11 protocol with a deadline on the request head.

uvicorn waits without end for a request's line and headers, so a client trickling them
holds a connection (and a file descriptor) as long as it likes. :class:`TimedH11Protocol`
gives each head :data:`HEAD_TIMEOUT_S` seconds from the connection or from its first byte
(a kept-alive connection), then answers 408 and closes; a request h11 cannot parse gets a
JSON 400 (uvicorn's is plain text). The body's pace is checked in the ASGI layer (:func:`dnnprov.service.http.middleware.guarded_receive`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

#: Seconds a client has to send a request's line and headers.
HEAD_TIMEOUT_S = 10.0


def _error_body(message: str) -> bytes:
    """The service's error shape (docs/service.md, "Errors") for what the HTTP layer refuses itself."""
    return json.dumps({"error": {"field": "", "message": message}}).encode()


def _timeout_answer(seconds: float) -> bytes:
    body = _error_body(f"the request head took longer than {seconds:g} s")
    return (
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )


class TimedH11Protocol(H11Protocol):
    """h11 with a deadline on each request head (``head_timeout_s``, a class attribute set per server)."""

    head_timeout_s: float = HEAD_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Start the head's clock with the connection."""
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the clock."""
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Feed h11; the clock runs from the first byte of a head until the head is complete."""
        if self.conn.their_state is h11.IDLE and self._head_timer is None:
            self._arm()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's 400 for a request h11 cannot parse (a bad Content-Length or chunk size, a
        head over 80 KiB, no Host), as a JSON error like every other answer, then close."""
        body = _error_body(f"malformed HTTP request: {msg}")
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body)):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.write(self.conn.send(h11.EndOfMessage()) or b"")
        self.transport.close()

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if (
            self.conn.their_state is h11.IDLE
            and not self.transport.is_closing()
            and (self.cycle is None or self.cycle.response_complete)
        ):
            self.transport.write(_timeout_answer(self.head_timeout_s))
            self.transport.close()
