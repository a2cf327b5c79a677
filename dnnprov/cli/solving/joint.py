"""The ``solve-many`` subcommand: joint provisioning of many jobs sharing quotas.

    dnnprov solve-many FILE... [--shared-quota TYPE=N ...] [--shared-vcpu FAMILY[/MARKET]=N ...]
                               [--concurrency N] [--time-limit S] [--max-plans-per-job N] [--json] [--log]

Registered in :data:`dnnprov.cli.COMMAND_GROUPS`. Exit codes as for ``solve``: 0 with
plans, 1 without (a proven infeasible set included), 2 for bad input, 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys

from dnnprov.cli.common import EXIT_INTERRUPTED, EXIT_NO_PLAN, EXIT_OK, check_time_limit
from dnnprov.errors import InvalidInputError
from dnnprov.io.instances import Problem, embedded_instance, read_instance
from dnnprov.problems.spot import MARKETS, VcpuQuota
from dnnprov.progress import JOINT_LOGGER_NAME, log_to_stderr, stop_on_signals, stop_requested


def _pair(option: str, text: str) -> tuple[str, int]:
    """``NAME=N`` -> ``(NAME, N)`` with N an integer >= 0."""
    name, sep, value = text.rpartition("=")
    if not sep or not name:
        raise InvalidInputError(option, f"expected NAME=N, got {text!r}")
    try:
        number = int(value)
    except ValueError:
        raise InvalidInputError(f"{option} {name}", f"expected an integer count, got {value!r}") from None
    if number < 0:
        raise InvalidInputError(f"{option} {name}", f"must be >= 0, got {number}")
    return name, number


def shared_limits(args: argparse.Namespace):
    """The :class:`~dnnprov.solvers.joint.provision.SharedLimits` the options describe."""
    from dnnprov.solvers.joint.provision import SharedLimits

    quotas: dict[str, int] = {}
    for text in args.shared_quota or []:
        label, n = _pair("--shared-quota", text)
        if label in quotas:
            raise InvalidInputError(f"--shared-quota {label}", "given twice")
        quotas[label] = n
    vcpus = []
    for text in args.shared_vcpu or []:
        key, n = _pair("--shared-vcpu", text)
        family, _, market = key.partition("/")
        market = market or "spot"
        if market not in MARKETS:
            raise InvalidInputError(f"--shared-vcpu {key}", f"market must be one of {', '.join(MARKETS)}")
        vcpus.append(VcpuQuota(family=family, market=market, vcpus=n))
    if args.concurrency is not None and args.concurrency < 0:
        raise InvalidInputError("--concurrency", f"must be >= 0, got {args.concurrency}")
    return SharedLimits(quotas=quotas, vcpu_quotas=tuple(vcpus), concurrency=args.concurrency)


def _read_job(given: str, path: str) -> Problem:
    """One FILE's instance; its errors name the file as given (several files: which one?)."""
    try:
        return read_instance(path)
    except InvalidInputError as exc:
        if exc.field in (given, path) or exc.field.startswith((f"{given}:", f"{path}:")):
            raise  # named by its file already
        raise InvalidInputError(f"{given}: {exc.field}" if exc.field else given, exc.problem) from None


def cmd_solve_many(args: argparse.Namespace) -> int:
    """Read every FILE, solve the jobs jointly under the shared limits, print the plans."""
    from dnnprov.solvers.joint.provision import solve_many

    check_time_limit(args.time_limit)
    paths = [
        str(embedded_instance(f.removeprefix("embedded:"))) if f.startswith("embedded:") else f for f in args.files
    ]
    problems = [_read_job(given, path) for given, path in zip(args.files, paths)]
    if args.max_plans_per_job is not None and args.max_plans_per_job < 0:
        raise InvalidInputError("--max-plans-per-job", f"must be >= 0, got {args.max_plans_per_job}")
    limit = {} if args.max_plans_per_job is None else {"max_plans_per_job": args.max_plans_per_job}
    shared = shared_limits(args)
    with contextlib.ExitStack() as stack:
        stack.enter_context(stop_on_signals((signal.SIGINT, signal.SIGTERM)))
        if args.log:
            stack.enter_context(log_to_stderr(JOINT_LOGGER_NAME))
        result = solve_many(problems, shared=shared, time_limit_s=args.time_limit, **limit)
    print(result.to_json(indent=2) if args.json else result.summary())
    if stop_requested():
        print("dnnprov: interrupted: the plans above are the best found so far", file=sys.stderr)
        return EXIT_INTERRUPTED
    has_plans = bool(result.results) and all(r.plan is not None for r in result.results)
    return EXIT_OK if has_plans else EXIT_NO_PLAN


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``solve-many`` to the ``dnnprov`` subcommands."""
    p = sub.add_parser(
        "solve-many",
        help="provision many jobs jointly under shared quotas (proven optimal total cost)",
        description="Choose one plan per job minimizing total cost subject to every job's SLOs and "
        "the shared limits. Serverless jobs are assumed to run at the same time: their "
        "function counts add up against --concurrency.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="instance files (spot or serverless; embedded:REL too)")
    p.add_argument(
        "--shared-quota",
        action="append",
        metavar="TYPE=N",
        help="at most N instances of TYPE over all spot jobs (TYPE:on-demand for the "
        "on-demand market); repeat for more types",
    )
    p.add_argument(
        "--shared-vcpu",
        action="append",
        metavar="FAMILY[/MARKET]=N",
        help="at most N vCPUs of a quota family (e.g. G/spot) over all spot jobs; repeatable",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        metavar="N",
        help="account concurrency: at most N functions over all serverless jobs at once",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=300.0,
        help="wall-clock seconds for the whole solve, reading excluded (default %(default)g)",
    )
    p.add_argument(
        "--max-plans-per-job",
        type=int,
        default=None,
        help=(
            "largest spot quota box (count vectors x PS counts) whose plans are enumerated; larger "
            "boxes are priced by the exact single-job solver (default 5,000,000)"
        ),
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--log", action="store_true", help="print a progress log (incumbent, proven bound, gap over time) to stderr"
    )
    p.set_defaults(run=cmd_solve_many)
