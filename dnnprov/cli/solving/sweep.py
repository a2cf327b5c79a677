"""The ``sweep`` subcommand: proven minimal cost at a grid of deadlines (and target losses); not a front
(``dnnprov pareto``, :mod:`dnnprov.cli.solving.objectives`, gives every nondominated plan).

    dnnprov sweep INSTANCE --deadlines 600:3600:24 [--losses 0.7,0.8] [--out DIR] [--time-limit S]

Registered in :data:`dnnprov.cli.COMMAND_GROUPS`. Exit codes: 0 when every point
ended (optimal or proven infeasible), 1 when some point did not, 2 for bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from dnnprov.cli.common import EXIT_NO_PLAN, EXIT_OK, check_time_limit
from dnnprov.errors import InvalidInputError
from dnnprov.io.instances import embedded_instance, read_instance

#: The files ``--out`` gets (sweep-loss.* with several target losses).
OUTPUT_NAMES = ("sweep.csv", "sweep.parquet", "sweep.png", "sweep.svg", "sweep-loss.png", "sweep-loss.svg")


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def _gap(row: dict[str, Any]) -> str:
    """The point's gap to its proven bound where it is not proven (optimal, infeasible: ``-``)."""
    if row["status"] in ("optimal", "infeasible") or row["gap"] is None:
        return "-"
    return f"{100 * row['gap']:.1f} %"


def _check_out(out: str) -> None:
    """Refuse an ``--out`` that cannot take the files, before any point is solved: an
    existing file, a folder that cannot be created or written, an output name taken by a
    folder. Sweep files already in the folder are replaced (as ``batch --out`` replaces)."""
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise InvalidInputError("--out", f"{out} is an existing file: give a folder (it gets sweep.csv, ...)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".dnnprov-sweep-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise InvalidInputError("--out", f"cannot write in the folder {out}: {exc.strerror or exc}") from None
    for name in OUTPUT_NAMES:
        if (folder / name).exists() and not (folder / name).is_file():
            raise InvalidInputError("--out", f"{folder / name} exists and is not a file")


def _progress_line(number: int, total: int, row: dict[str, Any], started: float) -> str:
    """One line of progress on standard error: the point, its status, cost and proof."""
    loss = "" if row["loss"] is None else f"loss {row['loss']:g}, "
    gap = _gap(row)
    proof = {"optimal": "proven", "infeasible": "proven infeasible"}.get(row["status"], f"not proven, gap {gap}")
    return (
        f"sweep: point {number}/{total} ({loss}deadline {row['deadline_s']:.0f} s): {row['status']} "
        f"{_money(row['cost'])} ({proof}), {time.monotonic() - started:.0f} s so far"
    )


def cmd_sweep(args: argparse.Namespace) -> int:
    """Solve INSTANCE at every deadline (and loss) exactly; print the table, write files with --out."""
    from dnnprov.batch.sweep import check_losses, deadline_grid, parse_losses, sweep, write_sweep

    path = (
        str(embedded_instance(args.file.removeprefix("embedded:"))) if args.file.startswith("embedded:") else args.file
    )
    problem = read_instance(path)
    deadlines = deadline_grid(args.deadlines)
    losses = parse_losses(args.losses) if args.losses is not None else None
    check_losses(problem, losses, "--losses")
    check_time_limit(args.time_limit)
    if args.out:  # refused before any point is solved
        _check_out(args.out)
    started = time.monotonic()
    total = len(deadlines) * len(losses or [None])

    def progress(number: int, points: int, row: dict[str, Any]) -> None:
        print(_progress_line(number, points, row, started), file=sys.stderr, flush=True)

    if not args.no_progress:
        each = "milp and the heuristic" if not args.no_heuristic else "milp"
        print(f"sweep: {total} points, {each} each within {args.time_limit:g} s", file=sys.stderr, flush=True)
    result = sweep(
        problem,
        deadlines,
        losses,
        time_limit_s=args.time_limit,
        heuristic=not args.no_heuristic,
        progress=None if args.no_progress else progress,
    )
    print(
        f"{'loss':>6} {'deadline s':>10} {'status':<10} {'milp cost':>10} {'gap':>7} {'heuristic':>10}  "
        "plan (where it changes)"
    )
    for row in result.rows:
        loss = "-" if row["loss"] is None else f"{row['loss']:g}"
        plan = row["plan"] if row["changed"] else ""
        print(
            f"{loss:>6} {row['deadline_s']:>10.0f} {row['status']:<10} {_money(row['cost']):>10} {_gap(row):>7} "
            f"{_money(row['heuristic_cost']):>10}  {plan}".rstrip()
        )
    for violation in result.violations:
        print(f"warning: {violation}")
    if args.out:
        for path in write_sweep(result, args.out):
            print(path)
    ended = all(row["status"] in ("optimal", "infeasible") for row in result.rows)
    return EXIT_OK if ended else EXIT_NO_PLAN


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``sweep`` to the ``dnnprov`` subcommands."""
    p = sub.add_parser(
        "sweep",
        help="proven minimal cost at a grid of deadlines (and target losses), not a front",
        description="Solve INSTANCE exactly (milp) at every deadline and target loss of a grid. "
        "A grid, not a front: plans whose times fall between grid deadlines are not "
        "shown; 'dnnprov pareto' gives every nondominated (time, cost) plan. "
        "--out DIR writes sweep.csv, sweep.parquet and sweep.png/.svg.",
    )
    p.add_argument("file", metavar="INSTANCE", help="instance file (or embedded:spot/paper-table1.json)")
    p.add_argument(
        "--deadlines",
        required=True,
        metavar="START:STOP:N",
        help="N deadlines from START to STOP seconds, both included (e.g. 600:3600:24)",
    )
    p.add_argument("--losses", metavar="L1,L2,...", help="target losses (spot; default: the instance's own)")
    p.add_argument(
        "--time-limit",
        type=float,
        default=60.0,
        help="seconds per point, for milp and again for the heuristic (default %(default)g)",
    )
    p.add_argument("--no-heuristic", action="store_true", help="leave out the heuristic's cost")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="write the table and the figures here (checked before solving; sweep files already there are replaced)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress lines on standard error")
    p.set_defaults(run=cmd_sweep)
