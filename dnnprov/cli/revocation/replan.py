"""The ``replan`` command: the takeover plan after spot revocations (the revocation group).

Registered in :data:`dnnprov.cli.COMMAND_GROUPS`; the work is :mod:`dnnprov.revocation.replan`.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from dnnprov.cli.common import check_time_limit, exit_code, solve_interruptibly
from dnnprov.cloud.export import load_plan, plan_document
from dnnprov.dispatch import METHODS
from dnnprov.errors import InvalidInputError
from dnnprov.io.instances import read_instance
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import SpotPlan
from dnnprov.revocation.replan import (
    DEFAULT_TAKEOVER_OVERHEAD_S,
    replanned_problem,
    solve_takeover,
    takeover_document,
    zone_capacity,
    zone_placement,
)


def _revoked(values: list[str]) -> dict[str, int]:
    revoked: dict[str, int] = {}
    for value in values:
        name, sep, count = value.partition("=")
        if not sep or not name or not count.isdigit():
            raise InvalidInputError("--revoked", f"expected TYPE=COUNT, got {value!r}")
        revoked[name] = revoked.get(name, 0) + int(count)
    return revoked


def _zone_capacity(values: list[str]) -> dict[str, dict[str, int]]:
    """``--capacity TYPE@ZONE=N`` options: free spot instances per type and zone now."""
    free: dict[str, dict[str, int]] = {}
    for value in values:
        where, sep, count = value.partition("=")
        name, at, zone = where.partition("@")
        if not sep or not at or not name or not zone or not count.isdigit():
            raise InvalidInputError("--capacity", f"expected TYPE@ZONE=COUNT, got {value!r}")
        free.setdefault(name, {})[zone] = int(count)
    return free


#: The options behind :func:`replanned_problem`'s arguments, for its errors.
OPTION_OF = {"elapsed_s": "--elapsed", "loss_reached": "--loss-reached", "takeover_overhead_s": "--takeover-overhead"}


def cmd_replan(args: argparse.Namespace) -> int:
    """Re-plan INSTANCE after revocations of PLAN's instances (takeover plan)."""
    check_time_limit(args.time_limit)
    problem = read_instance(args.instance)
    if not isinstance(problem, SpotProblem):
        raise InvalidInputError(args.instance, "re-planning needs a spot instance")
    doc = load_plan(args.plan)
    doc.require_spot()
    revoked = _revoked(args.revoked)
    free = _zone_capacity(args.capacity or [])
    survivors = {k: n - revoked.get(k, 0) for k, n in doc.counts().items()}
    try:
        takeover = replanned_problem(
            problem,
            doc.counts(),
            revoked,
            args.elapsed,
            args.loss_reached,
            takeover_overhead_s=args.takeover_overhead,
            avoid_revoked=args.avoid_revoked,
            ps=doc.ps,
            capacity=zone_capacity(problem, free, survivors) if free else None,
        )
    except InvalidInputError as exc:  # named by the option that gave the value
        raise InvalidInputError(OPTION_OF.get(exc.field, exc.field), exc.problem) from None
    result = solve_interruptibly(
        lambda: solve_takeover(takeover, args.method, time_limit_s=args.time_limit), args.time_limit
    )
    if free and isinstance(result.plan, SpotPlan):
        new = {k: n - survivors.get(k, 0) for k, n in result.plan.counts.items() if n > survivors.get(k, 0)}
        result = replace(result, details={**result.details, "zones": zone_placement(problem, new, free)})
    if args.json:
        out = (
            plan_document(result, takeover, doc.catalog).to_dict()
            if result.plan is not None
            else takeover_document(result, takeover, doc.catalog)
        )
        print(json.dumps(out, indent=2))
    else:
        print(result.summary())
        added = result.details.get("new_instances")
        if added is not None:
            print(
                f"  new  : {', '.join(f'{n} x {k}' for k, n in added.items()) or 'none'} "
                f"(kept: {', '.join(f'{n} x {k}' for k, n in takeover.constraints.existing.items()) or 'none'}); "
                f"new PS: {result.details.get('new_ps', 0)}"
            )
    return exit_code(result)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replan", help="takeover plan after spot revocations")
    p.add_argument("instance", help="the original instance file")
    p.add_argument("--plan", required=True, help="the plan running now (plan document or solve --json)")
    p.add_argument("--revoked", action="append", required=True, metavar="TYPE=COUNT")
    p.add_argument("--elapsed", type=float, required=True, help="seconds since training started")
    p.add_argument("--loss-reached", type=float, required=True, help="training loss reached so far")
    p.add_argument(
        "--takeover-overhead",
        type=float,
        default=DEFAULT_TAKEOVER_OVERHEAD_S,
        help="seconds added to the predicted time (default %(default)g)",
    )
    p.add_argument("--avoid-revoked", action="store_true", help="buy no new instance of a revoked type")
    p.add_argument(
        "--capacity",
        action="append",
        metavar="TYPE@ZONE=N",
        help="free spot instances in a zone of the type now (repeat); the takeover stays within "
        "them and its details say where to launch",
    )
    p.add_argument("--method", choices=METHODS, default="milp")
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--json", action="store_true", help="print the takeover plan document")
    p.set_defaults(run=cmd_replan)
