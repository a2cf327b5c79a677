"""The ``twin`` subcommand: the EC2 twin (:mod:`dnnprov.control.twin.server`) until SIGTERM or Ctrl-C.

    dnnprov twin --trace TYPE=FILE [--trace ...] --offset TICKS [--speed X | --stepped]
                 [--port P] [--region R] [--horizon-s S] [--base ISO] [--notice-status CODE]

Registered in :data:`dnnprov.cli.COMMAND_GROUPS`. See docs/control.md ("The EC2 twin").
"""

from __future__ import annotations

import argparse
import inspect
from datetime import datetime

from dnnprov.cli.common import serve_until_signal
from dnnprov.errors import InvalidInputError

DEFAULT_BASE_TEXT = "2023-08-27T00:00:00Z"
#: The choices of --notice-status (dnnprov.control.twin.server.NOTICE_STATUSES; not imported here, so that
#: the parser is built without the twin's imports)
NOTICE_STATUSES = ("marked-for-termination", "instance-terminated-no-capacity")


def _trace_pairs(values: list[str]) -> list[tuple[str, str]]:
    """``TYPE=FILE`` options as pairs (the type may contain dots; the file is after the first '=')."""
    pairs = []
    for text in values:
        name, sep, path = text.partition("=")
        if not sep or not name or not path:
            raise InvalidInputError("--trace", f"expected TYPE=FILE, got {text!r}")
        pairs.append((name, path))
    return pairs


def _base(text: str) -> datetime:
    try:
        base = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInputError(
            "--base", f"expected an ISO 8601 instant such as {DEFAULT_BASE_TEXT}, got {text!r}"
        ) from None
    if base.tzinfo is None:
        raise InvalidInputError("--base", f"give the time zone (e.g. {DEFAULT_BASE_TEXT}), got {text!r}")
    return base


def cmd_twin(args: argparse.Namespace) -> int:
    """Start moto and the EC2 twin on 127.0.0.1; print one JSON line {"url", "clock", "pools"}
    when ready; run until SIGTERM or Ctrl-C (exit 0).

    Spot launches follow the traces' capacity from tick --offset (InsufficientInstanceCapacity
    beyond it; a notice when capacity drops, the reclaim 120 s later); on-demand launches always
    succeed. The clock runs --speed twin seconds per wall second, or, with --stepped, moves only
    by POST /_twin/advance {"seconds": S}.
    """
    from dnnprov.cloud.aws import check_region
    from dnnprov.control.twin.server import Twin, trace_pools

    if args.speed is not None and not (args.speed > 0 and args.speed != float("inf")):
        raise InvalidInputError("--speed", f"must be a finite number > 0, got {args.speed:g}")
    if not 0 <= args.port <= 65535:
        raise InvalidInputError("--port", f"must be 0 (a free port) or 1..65535, got {args.port}")
    if args.offset < 0:
        raise InvalidInputError("--offset", f"must be a tick >= 0, got {args.offset}")
    if not (args.horizon_s >= 0 and args.horizon_s != float("inf")):
        raise InvalidInputError("--horizon-s", f"must be a finite number of seconds >= 0, got {args.horizon_s:g}")
    try:
        check_region(args.region)
    except InvalidInputError as exc:
        raise InvalidInputError("--region", exc.problem) from None
    pools = trace_pools(_trace_pairs(args.trace), args.offset, args.horizon_s)
    twin = Twin(
        pools,
        port=args.port,
        region=args.region,
        base=_base(args.base),
        notice_status=args.notice_status,
        mode="stepped" if args.stepped else "accelerated",
        speed=1.0 if args.speed is None else args.speed,
    )

    def start() -> None:
        try:
            twin.start()
        except InvalidInputError as exc:
            raise InvalidInputError(f"--{exc.field}" if exc.field == "port" else exc.field, exc.problem) from None

    return serve_until_signal(start, twin.describe, twin.stop)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``twin`` subcommand."""
    p = sub.add_parser(
        "twin",
        help="run the EC2 twin: moto behind a capacity proxy that follows spot traces",
        description=inspect.cleandoc(cmd_twin.__doc__ or ""),
    )
    p.add_argument(
        "--trace",
        action="append",
        required=True,
        metavar="TYPE=FILE",
        help="an aligned availability trace of a spot type, its zone in the file name "
        "(us-west-2a_v100_1.json); repeat for more pools",
    )
    p.add_argument("--offset", type=int, required=True, metavar="TICKS", help="the traces' tick at twin time 0")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--speed",
        type=float,
        default=None,
        metavar="X",
        help="accelerated clock: X twin seconds per wall second (default 1)",
    )
    mode.add_argument("--stepped", action="store_true", help="the clock moves only by POST /_twin/advance")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default 0: a free one)")
    p.add_argument(
        "--region",
        default="us-east-1",
        help="the region of requests that carry no SigV4 credential scope (default us-east-1)",
    )
    p.add_argument(
        "--horizon-s",
        type=float,
        default=0.0,
        metavar="S",
        help="refuse an offset whose window of S seconds runs past a trace's end (default 0)",
    )
    p.add_argument(
        "--base",
        default=DEFAULT_BASE_TEXT,
        metavar="ISO",
        help=f"the UTC instant of twin time 0 (default {DEFAULT_BASE_TEXT})",
    )
    p.add_argument(
        "--notice-status",
        choices=NOTICE_STATUSES,
        default=NOTICE_STATUSES[0],
        help="the spot request's status from a notice until the reclaim: marked-for-termination "
        "(active), or instance-terminated-no-capacity (closed) as EC2's user guide documents for "
        "instances that terminate on interruption (default marked-for-termination)",
    )
    p.set_defaults(run=cmd_twin)
