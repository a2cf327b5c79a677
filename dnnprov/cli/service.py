"""The ``serve`` subcommand: the HTTP service (``dnnprov.service``) on uvicorn.

    dnnprov serve [--host 127.0.0.1] [--port 8642] [--workers N | --dask ADDRESS] [--db PATH] [--token-file FILE]

Registered in :data:`dnnprov.cli.COMMAND_GROUPS`. See docs/service.md.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from dnnprov.cli.common import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK
from dnnprov.errors import InvalidInputError

# The largest request head (line plus headers) h11 buffers before parsing. Its default, 16 KiB, applied
# only when the head arrived in pieces, so a long URL got a 404 or a 400 depending on how the network
# split it; 80 KiB makes every head under 64 KiB parse, whatever the split.
MAX_REQUEST_HEAD_BYTES = 80 * 1024


def read_tokens(path: str | None) -> dict[str, str] | None:
    """The token file: one token per line, ``TOKEN`` (tenant ``default``) or ``TENANT TOKEN``;
    blank lines and ``#`` comments are skipped. Returns token -> tenant."""
    if path is None:
        return None
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InvalidInputError("--token-file", f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InvalidInputError("--token-file", f"{path} is not UTF-8 text") from None
    tokens: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) > 2:
            raise InvalidInputError("--token-file", f"line {number}: expected TOKEN or TENANT TOKEN")
        tenant, token = ("default", words[0]) if len(words) == 1 else words
        if len(token) < 16:
            raise InvalidInputError(
                "--token-file", f"line {number}: a token must be one word of at least 16 characters"
            )
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", tenant):
            raise InvalidInputError(
                "--token-file", f"line {number}: a tenant name is 1-64 letters, digits, '.', '_' or '-'"
            )
        if token in tokens:
            raise InvalidInputError("--token-file", f"line {number}: the token is given twice")
        tokens[token] = tenant
    if not tokens:
        raise InvalidInputError(
            "--token-file", "no token in the file: the token must be one word of at least 16 characters"
        )
    return tokens


class JsonFormatter(logging.Formatter):
    """uvicorn's own log lines as JSON objects, like the access log's."""

    def format(self, record: logging.LogRecord) -> str:
        """``{"ts", "level", "logger", "message"}`` on one line."""
        line = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info and record.exc_info[1] is not None:  # the exception in one line, no traceback
            line["error"] = f"{type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
        return json.dumps(line)


#: uvicorn's logging (``log_config``): its lines on standard error as JSON, its access log off.
UVICORN_LOG_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": JsonFormatter}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}},
    "loggers": {
        "uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        "uvicorn.error": {"level": "INFO"},
        "distributed": {"handlers": ["stderr"], "level": "WARNING", "propagate": False},
    },
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


def _server_class(uvicorn: Any) -> type:
    class DrainingServer(uvicorn.Server):
        """uvicorn's server, but SIGTERM first drains the app (``app.state.drain``), then stops."""

        draining = False

        def handle_exit(self, sig: int, frame: Any) -> None:
            drain = getattr(getattr(self.config.app, "state", None), "drain", None)
            if sig != signal.SIGTERM or self.draining or drain is None:
                super().handle_exit(sig, frame)
                return
            self.draining = True

            def drain_then_stop() -> None:
                try:
                    drain()
                finally:
                    super(DrainingServer, self).handle_exit(sig, frame)

            threading.Thread(target=drain_then_stop, name="dnnprov-drain", daemon=True).start()

    return DrainingServer


def startup_error(exc: InvalidInputError) -> None:
    """A refused start as one JSON line on standard error, like every other line of the service:
    ``{"ts", "level": "error", "event": "startup_failed", "field", "message"}``."""
    sys.stderr.write(
        json.dumps(
            {
                "ts": round(time.time(), 3),
                "level": "error",
                "event": "startup_failed",
                "field": exc.field,
                "message": exc.problem,
            }
        )
        + "\n"
    )
    sys.stderr.flush()


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the HTTP service until interrupted; a refused start is one JSON line and exit 2."""
    try:
        return _serve(args)
    except InvalidInputError as exc:
        startup_error(exc)
        return EXIT_BAD_INPUT


def _serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from dnnprov.service.app import ServiceConfig, create_app, log_event
        from dnnprov.service.http.protocol import TimedH11Protocol
        from dnnprov.service.pool import warning_as_json
        from dnnprov.service.store import StoreOwner, default_db_path, is_database_url, open_store
    except ImportError as exc:
        raise InvalidInputError("serve", f"needs the service extra: pip install 'dnnprov[service]' ({exc})") from None
    for option, value in (
        ("--workers", args.workers),
        ("--max-pending", args.max_pending),
        ("--max-body-bytes", args.max_body_bytes),
        ("--max-auth-failures", args.max_auth_failures),
    ):
        if value < 1:
            raise InvalidInputError(option, f"must be at least 1, got {value}")
    if args.short_workers < 0:
        raise InvalidInputError("--short-workers", f"must be at least 0, got {args.short_workers}")
    if not 0 <= args.long_nice <= 19:
        raise InvalidInputError("--long-nice", f"must be 0 to 19, got {args.long_nice}")
    if args.tenant_max_pending is not None and args.tenant_max_pending < 1:
        raise InvalidInputError("--tenant-max-pending", f"must be at least 1, got {args.tenant_max_pending}")
    if not args.rate_limit >= 0:
        raise InvalidInputError("--rate-limit", f"must be at least 0, got {args.rate_limit}")
    for option, value in (
        ("--max-time-limit", args.max_time_limit),
        ("--job-ttl", args.job_ttl),
        ("--head-timeout", args.head_timeout),
        ("--body-timeout", args.body_timeout),
        ("--min-body-rate", args.min_body_rate),
    ):
        if not value > 0:
            raise InvalidInputError(option, f"must be positive, got {value}")
    if not args.drain_timeout >= 0:
        raise InvalidInputError("--drain-timeout", f"must be at least 0, got {args.drain_timeout}")
    if not 0 <= args.port <= 65535:
        raise InvalidInputError("--port", f"must be within 0..65535, got {args.port}")
    tokens = read_tokens(args.token_file)
    db_path: Path | str = args.db if args.db and is_database_url(args.db) else Path(args.db or default_db_path())
    # one server per SQLite file: a second one stops here with one error line (PostgreSQL: replicas share it)
    owner = None if isinstance(db_path, str) else StoreOwner(db_path)
    open_store(db_path).close()  # an unusable job store is one error line here, not a failed start
    if args.dask is not None:
        _check_dask(args.dask)
    _check_bind(args.host, args.port)
    config = ServiceConfig(
        db_path=db_path,
        workers=args.workers,
        tokens=tokens,
        max_body_bytes=args.max_body_bytes,
        max_time_limit_s=args.max_time_limit,
        max_pending=args.max_pending,
        drain_timeout_s=args.drain_timeout,
        job_ttl_s=args.job_ttl,
        dask_address=args.dask,
        max_auth_failures=args.max_auth_failures,
        short_workers=args.short_workers,
        long_nice=args.long_nice,
        tenant_max_pending=args.tenant_max_pending,
        head_timeout_s=args.head_timeout,
        body_grace_s=args.body_timeout,
        min_body_rate=args.min_body_rate,
        rate_limit=args.rate_limit,
        admin_tenant=args.admin_tenant,
    )
    # A worker process killed (kill -9, a budget overrun, a cancel) leaves the semaphores its
    # libraries made (scipy's); multiprocessing's resource tracker removes them and would say so
    # in a plain-text warning on our standard error, which stays JSON.
    sys.warnoptions.append("ignore:resource_tracker:UserWarning")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    for name in ("dnnprov.access", "dnnprov.service", "dnnprov.audit"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING if args.quiet and name != "dnnprov.audit" else logging.INFO)
        logger.propagate = False
    threading.excepthook = lambda hook: log_event(
        logging.ERROR,
        "thread_error",
        thread=getattr(hook.thread, "name", None),
        error=f"{hook.exc_type.__name__}: {hook.exc_value}",
    )
    # Warnings of the inputs (implausible magnitudes) as JSON lines, not the CLI's text line (stderr stays JSON)
    warnings.showwarning = warning_as_json
    if not _loopback(args.host) and tokens is None:
        log_event(logging.WARNING, "warning", message="listening beyond loopback without --token-file")
    server = _server_class(uvicorn)(
        uvicorn.Config(
            create_app(config, owner),
            host=args.host,
            port=args.port,
            access_log=False,
            log_config=UVICORN_LOG_CONFIG,
            log_level="warning" if args.quiet else "info",
            timeout_graceful_shutdown=5,
            h11_max_incomplete_event_size=MAX_REQUEST_HEAD_BYTES,
            http=type("HeadTimedProtocol", (TimedH11Protocol,), {"head_timeout_s": args.head_timeout}),
        )
    )
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn re-raises the SIGINT it stopped on; the stop is logged already
        return EXIT_INTERRUPTED
    return EXIT_OK


def _check_dask(address: str) -> None:
    """Refuse, as one error line, a Dask scheduler address that is not ``tcp://HOST:PORT`` or ``inproc://``."""
    if not re.fullmatch(r"(tcp|tls|inproc|ws|wss)://[^\s/]+(:[0-9]{1,5})?", address):
        raise InvalidInputError("--dask", f"expected a scheduler address such as tcp://127.0.0.1:8786, got {address!r}")
    try:
        from distributed import Client
    except ImportError:
        raise InvalidInputError("--dask", "needs the batch extra: pip install 'dnnprov[batch]'") from None
    try:
        Client(address, timeout=10, set_as_default=False).close()
    except (OSError, TimeoutError) as exc:
        raise InvalidInputError("--dask", f"cannot reach the Dask scheduler at {address}: {exc}") from None


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``serve`` to the ``dnnprov`` subcommands."""
    p = sub.add_parser(
        "serve",
        help="run the HTTP API (solve, jobs, replan, export, sweep) on uvicorn",
        description="HTTP service for schedulers: solves run in worker processes, jobs "
        "are kept in SQLite and survive a restart. See docs/service.md.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    p.add_argument("--port", type=int, default=8642)
    p.add_argument(
        "--workers",
        type=int,
        default=max(1, min(4, os.cpu_count() or 1)),
        help="worker processes that run solves (default: CPU count, at most 4)",
    )
    p.add_argument(
        "--db",
        help="SQLite job store (default: $XDG_DATA_HOME/dnnprov/jobs.sqlite), or "
        "postgresql://... for several servers on one database",
    )
    p.add_argument(
        "--token-file",
        help="require 'Authorization: Bearer TOKEN': one token per line, "
        "'TOKEN' or 'TENANT TOKEN' (jobs are seen only by their tenant)",
    )
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, help="largest request body (default 1 MiB)")
    p.add_argument(
        "--max-time-limit",
        type=float,
        default=300.0,
        help="largest time_limit_s a request may ask for (default %(default)g s)",
    )
    p.add_argument(
        "--max-pending",
        type=int,
        default=32,
        help="tasks queued or running before new requests get 429 (default %(default)d)",
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=20.0,
        help="on SIGTERM, seconds running work may take to end before it is stopped and re-queued "
        "(default %(default)g)",
    )
    p.add_argument(
        "--job-ttl",
        type=float,
        default=7 * 86400.0,
        help="seconds an ended job is kept before it is deleted (default 7 days)",
    )
    p.add_argument(
        "--dask", metavar="ADDRESS", help="run solves on this Dask scheduler instead of local worker processes"
    )
    p.add_argument(
        "--max-auth-failures",
        type=int,
        default=10,
        help="wrong tokens a client may send per minute before all its requests get 429 (default %(default)d)",
    )
    p.add_argument(
        "--short-workers",
        type=int,
        default=1,
        help="worker processes only for short work (predictions, heuristic solves) (default %(default)d)",
    )
    p.add_argument(
        "--long-nice",
        type=int,
        default=10,
        help="niceness steps added to the worker processes that serve the long lane, so that short work "
        "and health checks keep the CPU (0 to 19; default %(default)d)",
    )
    p.add_argument(
        "--tenant-max-pending",
        type=int,
        default=None,
        help="places of a lane one tenant may hold (default: half of --max-pending when the token file "
        "names several tenants, else all)",
    )
    p.add_argument(
        "--rate-limit",
        type=float,
        default=100.0,
        help="requests per second per tenant, bursts of twice that (with --token-file; 0: no limit; "
        "default %(default)g)",
    )
    p.add_argument(
        "--head-timeout",
        type=float,
        default=10.0,
        help="seconds a client has to send a request's line and headers (default %(default)g)",
    )
    p.add_argument(
        "--body-timeout",
        type=float,
        default=10.0,
        help="seconds a body may take before --min-body-rate applies (default %(default)g)",
    )
    p.add_argument(
        "--min-body-rate",
        type=float,
        default=1024.0,
        help="bytes per second a body must arrive at after --body-timeout (default %(default)g)",
    )
    p.add_argument(
        "--admin-tenant",
        default="admin",
        help="the tenant whose tokens may read /metrics (with --token-file; default %(default)s)",
    )
    p.add_argument("--quiet", action="store_true", help="no access log")
    p.set_defaults(run=cmd_serve)
