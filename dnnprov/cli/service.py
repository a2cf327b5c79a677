"""The ``serve`` subcommand: the HTTP service (``dnnprov.service``) on uvicorn.

    dnnprov serve [--host 127.0.0.1] [--port 8642] [--workers N] [--db PATH] [--token-file FILE]

Registered through :data:`dnnprov.cli.EXTRA_COMMANDS`. See docs/service.md.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import socket
import sys
from pathlib import Path

from dnnprov.errors import InvalidInputError

EXIT_OK = 0


def _token(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise InvalidInputError("--token-file", f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InvalidInputError("--token-file", f"{path} is not UTF-8 text") from None
    if len(token) < 16 or any(c.isspace() for c in token):
        raise InvalidInputError("--token-file", "the token must be one word of at least 16 characters")
    return token


class JsonFormatter(logging.Formatter):
    """uvicorn's own log lines as JSON objects, like the access log's."""

    def format(self, record: logging.LogRecord) -> str:
        """``{"ts", "level", "logger", "message"}`` on one line."""
        return json.dumps({"ts": round(record.created, 3), "level": record.levelname.lower(),
                           "logger": record.name, "message": record.getMessage()})


#: uvicorn's logging (``log_config``): its lines on standard error as JSON, its access log off.
UVICORN_LOG_CONFIG = {
    "version": 1, "disable_existing_loggers": False,
    "formatters": {"json": {"()": JsonFormatter}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}},
    "loggers": {"uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
                "uvicorn.error": {"level": "INFO"}},
}


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _check_bind(host: str, port: int) -> None:
    """Refuse, as one error line, an address the server could not listen on."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise InvalidInputError("--host", f"cannot resolve {host!r}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise InvalidInputError("--port", f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the HTTP service until interrupted."""
    try:
        import uvicorn

        from dnnprov.service.app import ServiceConfig, create_app, log_event
        from dnnprov.service.store import JobStore, default_db_path
    except ImportError as exc:
        raise InvalidInputError("serve", f"needs the service extra: pip install 'dnnprov[service]' ({exc})") from None
    for option, value in (("--workers", args.workers), ("--max-pending", args.max_pending),
                          ("--max-body-bytes", args.max_body_bytes)):
        if value < 1:
            raise InvalidInputError(option, f"must be at least 1, got {value}")
    if not args.max_time_limit > 0:
        raise InvalidInputError("--max-time-limit", f"must be positive, got {args.max_time_limit}")
    if not 0 <= args.port <= 65535:
        raise InvalidInputError("--port", f"must be within 0..65535, got {args.port}")
    _check_bind(args.host, args.port)
    token = _token(args.token_file)
    db_path = Path(args.db) if args.db else default_db_path()
    JobStore(db_path).close()  # an unusable job store is one error line here, not a failed start
    config = ServiceConfig(db_path=db_path, workers=args.workers,
                           token=token, max_body_bytes=args.max_body_bytes,
                           max_time_limit_s=args.max_time_limit, max_pending=args.max_pending)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    for name in ("dnnprov.access", "dnnprov.service"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING if args.quiet else logging.INFO)
        logger.propagate = False
    if not _loopback(args.host) and token is None:
        log_event(logging.WARNING, "warning", message="listening beyond loopback without --token-file")
    uvicorn.run(create_app(config), host=args.host, port=args.port, access_log=False,
                log_config=UVICORN_LOG_CONFIG, log_level="warning" if args.quiet else "info",
                timeout_graceful_shutdown=5)
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``serve`` to the ``dnnprov`` subcommands."""
    p = sub.add_parser("serve", help="run the HTTP API (solve, jobs, replan, export, sweep) on uvicorn",
                       description="HTTP service for schedulers: solves run in worker processes, jobs "
                                   "are kept in SQLite and survive a restart. See docs/service.md.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    p.add_argument("--port", type=int, default=8642)
    p.add_argument("--workers", type=int, default=max(1, min(4, os.cpu_count() or 1)),
                   help="worker processes that run solves (default: CPU count, at most 4)")
    p.add_argument("--db", help="SQLite job store (default: $XDG_DATA_HOME/dnnprov/jobs.sqlite)")
    p.add_argument("--token-file", help="require 'Authorization: Bearer TOKEN' with the token in this file")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, help="largest request body (default 1 MiB)")
    p.add_argument("--max-time-limit", type=float, default=300.0,
                   help="largest time_limit_s a request may ask for (default %(default)g s)")
    p.add_argument("--max-pending", type=int, default=32,
                   help="tasks queued or running before new requests get 429 (default %(default)d)")
    p.add_argument("--quiet", action="store_true", help="no access log")
    p.set_defaults(run=cmd_serve)
