"""The ``lambda-twin`` subcommand: the Lambda test double (:mod:`dnnprov.control.twin.lambda_endpoint`).

    dnnprov lambda-twin INSTANCE [--speed X] [--port P] [--region R] [--function NAME]

Runs until SIGTERM or Ctrl-C. Registered in :data:`dnnprov.cli.COMMAND_GROUPS`. See
docs/control.md ("Serverless runs").
"""

from __future__ import annotations

import argparse
import inspect
from typing import Any

from dnnprov.cli.common import serve_until_signal
from dnnprov.errors import InvalidInputError


def cmd_lambda_twin(args: argparse.Namespace) -> int:
    """Start the Lambda twin on 127.0.0.1 for a serverless instance; print one JSON line
    {"url", "clock", "functions"} when ready; run until SIGTERM or Ctrl-C (exit 0).

    Its functions are stand-in λDNN workers of the instance's model; --function creates one
    (128 MB, 3 s: `dnnprov run` sets the plan's memory and the instance's timeout).
    """
    from dnnprov.cloud.aws import check_region
    from dnnprov.control.twin.lambda_endpoint import LambdaTwin
    from dnnprov.io.instances import embedded_instance, read_instance
    from dnnprov.problems.serverless import ServerlessProblem

    if not (args.speed > 0 and args.speed != float("inf")):
        raise InvalidInputError("--speed", f"must be a finite number > 0, got {args.speed:g}")
    if not 0 <= args.port <= 65535:
        raise InvalidInputError("--port", f"must be 0 (a free port) or 1..65535, got {args.port}")
    try:
        check_region(args.region)
    except InvalidInputError as exc:
        raise InvalidInputError("--region", exc.problem) from None
    path = (
        str(embedded_instance(args.instance.removeprefix("embedded:")))
        if args.instance.startswith("embedded:")
        else args.instance
    )
    problem = read_instance(path)
    if not isinstance(problem, ServerlessProblem):
        raise InvalidInputError(args.instance, "the Lambda twin needs a serverless instance")
    twin = LambdaTwin(problem, port=args.port, speed=args.speed, region=args.region)
    if args.function:
        twin.configure(args.function, {}, create=True)

    def ready_line() -> dict[str, Any]:
        state = twin.state()
        return {"url": twin.url, "clock": state["clock"], "functions": sorted(state["functions"])}

    return serve_until_signal(twin.start, ready_line, twin.stop)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``lambda-twin`` subcommand."""
    p = sub.add_parser(
        "lambda-twin",
        help="run the Lambda twin: a local Lambda API whose functions are λDNN stand-ins",
        description=inspect.cleandoc(cmd_lambda_twin.__doc__ or ""),
    )
    p.add_argument("instance", metavar="INSTANCE", help="the serverless instance whose model the workers follow")
    p.add_argument(
        "--speed",
        type=float,
        default=1.0,
        metavar="X",
        help="accelerated clock: X twin seconds per wall second (default 1)",
    )
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default 0: a free one)")
    p.add_argument("--region", default="us-east-1", help="the region in function ARNs (default us-east-1)")
    p.add_argument("--function", default=None, metavar="NAME", help="create this function at the start")
    p.set_defaults(run=cmd_lambda_twin)
