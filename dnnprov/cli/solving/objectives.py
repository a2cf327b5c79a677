"""The ``pareto`` subcommand, and the ``--objective`` / ``--budget`` options of ``solve``.

    dnnprov pareto INSTANCE [--deadlines A:B] [--method milp|enumerate] [--time-limit S] [--json] [--out FIG.png]

Registered in :data:`dnnprov.cli.COMMAND_GROUPS`. Exit codes: 0 with at least one point, 1
without (no plan in the range, or none found in time), 2 for bad input, 130 interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import signal
from pathlib import Path

from dnnprov.cli.common import EXIT_INTERRUPTED, EXIT_NO_PLAN, EXIT_OK, check_time_limit, instance_path
from dnnprov.errors import InvalidInputError
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.problems.validation import checks as check
from dnnprov.progress import stop_on_signals, stop_requested


def add_objective_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--objective`` and ``--budget`` (``dnnprov solve``)."""
    parser.add_argument(
        "--objective",
        default="cost",
        metavar="cost|time|weighted:W",
        help="cost: least cost under the deadline; time: least training time within the budget "
        "(ties: least cost); weighted:W: least cost + W x time, W in $/s (default: cost)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="B",
        help="budget in $ (replaces constraints.budget_usd of the instance)",
    )


def apply_budget(problem: SpotProblem | ServerlessProblem, budget: float | None) -> SpotProblem | ServerlessProblem:
    """``problem`` with ``constraints.budget_usd`` replaced by ``--budget`` (unchanged without it)."""
    if budget is None:
        return problem
    budget = check.number("--budget", budget, exclusive_minimum=0)
    return problem.replace(constraints=dataclasses.replace(problem.constraints, budget_usd=budget))


def parse_deadlines(text: str) -> tuple[float | None, float | None]:
    """``A:B``, ``A:`` or ``:B`` (seconds) as a pair; a missing end is ``None``."""
    parts = text.split(":")
    if len(parts) != 2:
        raise InvalidInputError(
            "--deadlines", f"must be A:B in seconds (A: or :B leave an end open), got {text[:40]!r}"
        )
    ends: list[float | None] = []
    for part in parts:
        try:
            ends.append(float(part) if part.strip() else None)
        except ValueError:
            raise InvalidInputError("--deadlines", f"{part[:20]!r} is not a number of seconds") from None
    return ends[0], ends[1]


def _check_figure(out: str) -> None:
    """Refuse a figure path that cannot be written, and a missing matplotlib, before solving."""
    from dnnprov.batch.reports.pareto import FIGURE_SUFFIXES

    path = Path(out)
    if path.suffix.lower() not in FIGURE_SUFFIXES:
        raise InvalidInputError("--out", f"must end in {', '.join(FIGURE_SUFFIXES)}, got {out[:60]!r}")
    if path.is_dir() or not path.parent.is_dir():
        raise InvalidInputError("--out", f"{out[:60]} is a folder, or its folder does not exist")
    if importlib.util.find_spec("matplotlib") is None:
        raise InvalidInputError("--out", "drawing the figure needs matplotlib: pip install 'dnnprov[batch]'")


def cmd_pareto(args: argparse.Namespace) -> int:
    """Every nondominated (time, cost) plan between two deadlines, each proven (docs/solvers.md)."""
    from dnnprov.dispatch import pareto
    from dnnprov.io.instances import read_instance

    check_time_limit(args.time_limit)
    problem = read_instance(instance_path(args.file))
    deadlines = parse_deadlines(args.deadlines)
    if args.out:
        _check_figure(args.out)
    try:
        with stop_on_signals((signal.SIGINT, signal.SIGTERM)):
            front = pareto(problem, deadlines, method=args.method, time_limit_s=args.time_limit)
    except InvalidInputError as exc:  # pareto's argument is this command's option
        if exc.field != "deadlines":
            raise
        raise InvalidInputError("--deadlines", exc.problem) from None
    interrupted = stop_requested()
    figure = None
    if args.out:
        from dnnprov.batch.reports.pareto import write_front_figure

        figure = write_front_figure(front, args.out)
    if args.json:
        print(json.dumps({**front.to_dict(), "figure": None if figure is None else str(figure)}, indent=2))
    else:
        print(front.summary())
        if figure is not None:
            print(figure)
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if front.points else EXIT_NO_PLAN


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``pareto`` to the ``dnnprov`` subcommands."""
    p = sub.add_parser(
        "pareto",
        help="the exact (time, cost) front: every nondominated plan between two deadlines",
        description="Every nondominated (time, cost) plan of INSTANCE with its time between two "
        "deadlines, each proven by exact solves (every constraint of the instance "
        "kept, its deadline replaced by the range). --out FIG.png draws it.",
    )
    p.add_argument("file", metavar="INSTANCE", help="instance file, embedded:spot/paper-table1.json, or -")
    p.add_argument(
        "--deadlines",
        default=":",
        metavar="A:B",
        help="times from A to B seconds; A: or :B leave an end open (default: the whole front, ':')",
    )
    p.add_argument(
        "--method",
        choices=("milp", "enumerate"),
        default="milp",
        help="milp: exact solves walking the front; enumerate: every plan evaluated (small instances)",
    )
    p.add_argument("--time-limit", type=float, default=60.0, help="wall-clock seconds for the whole front")
    p.add_argument("--json", action="store_true", help="print one JSON object (settings, status, points)")
    p.add_argument("--out", metavar="FIG.png", help="draw the front (PNG, SVG or PDF; needs the batch extra)")
    p.set_defaults(run=cmd_pareto)
