"""Batch subcommands of the CLI: ``batch`` (many instances x methods) and ``report``.

Registered in :data:`dnnprov.cli.COMMAND_GROUPS`. Exit codes: 0 when the batch ran
(failed rows included: they are in the results), 2 for bad arguments or input, 130
interrupted (the finished rows are in ``--out``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dnnprov.cli.common import EXIT_INTERRUPTED, EXIT_OK, MAX_TIME_LIMIT_S, writing
from dnnprov.dispatch import METHODS
from dnnprov.errors import InvalidInputError


def _methods(value: str) -> list[str]:
    methods = [m.strip() for m in value.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if not methods or bad:
        raise argparse.ArgumentTypeError(
            f"choose among {', '.join(METHODS)} (comma-separated); got {', '.join(bad) or 'none'}"
        )
    return methods


def _positive(kind: type) -> Callable[[str], Any]:
    def parse(value: str) -> Any:
        try:
            number = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
        if not 0 < number <= MAX_TIME_LIMIT_S:  # NaN and inf fail too
            raise argparse.ArgumentTypeError(f"must be a finite number > 0 and at most 1e15, got {value}")
        return number

    return parse


def cmd_batch(args: argparse.Namespace) -> int:
    """Solve every instance below PATHS with every method; print the summary per method."""
    from dnnprov.batch.runner import format_summary, run_batch, summarize

    try:
        df = run_batch(
            args.paths,
            args.methods,
            time_limit_s=args.time_limit,
            gap=args.gap,
            max_plans=args.max_plans,
            out=args.out,
            resume=args.resume,
            workers=args.workers,
            dask=args.dask,
            kill_after_s=args.kill_after,
            progress=False if args.no_progress else None,
        )
    except KeyboardInterrupt:
        if args.out:
            print(
                f"dnnprov: interrupted: the finished rows are in {args.out} (--resume runs the rest)", file=sys.stderr
            )
            return EXIT_INTERRUPTED
        raise
    print(format_summary(summarize(df)))
    failed = int((df["status"] == "error").sum())
    where = f" -> {args.out}" if args.out else ""
    print(f"\n{len(df)} rows ({df.attrs['ran']} run now, {df.attrs['kept']} kept), {failed} failed{where}")
    for skipped in df.attrs["skipped_files"]:
        print(f"skipped (not an instance): {skipped}")
    return EXIT_OK


def _number(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None


def cmd_report(args: argparse.Namespace) -> int:
    """Tables (summary.md, summary.tex, summary.csv), figures (PNG, SVG) and an index.html
    of a results file."""
    from dnnprov.batch.reports.report import write_report
    from dnnprov.batch.runner import format_summary

    out = Path(args.out) if args.out else Path(args.results).with_name(Path(args.results).stem + "-report")
    if out.exists() and not out.is_dir():
        raise InvalidInputError("--out", f"{out} is a file: give a folder (it gets summary.md, ..., index.html)")
    with writing(out):
        summary, files = write_report(args.results, out, roots=args.root, shift_s=args.shift, gap_tol=args.gap_tol)
    print(format_summary(summary))
    print()
    for f in files:
        print(f)
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``batch`` and ``report`` to the ``dnnprov`` parser."""
    p = sub.add_parser("batch", help="solve many instance files with many methods", description=cmd_batch.__doc__)
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="instance files or folders (searched recursively for *.json, *.jsonl); "
        "embedded:REL for files or folders shipped with dnnprov",
    )
    p.add_argument(
        "--methods",
        type=_methods,
        default=list(METHODS),
        help=f"comma-separated (default: {','.join(METHODS)}); those that do not apply to an instance are skipped",
    )
    p.add_argument(
        "--time-limit",
        type=_positive(float),
        default=60.0,
        help="seconds per task, passed to the solver, which stops itself there and "
        "returns its best plan (status limit)",
    )
    p.add_argument(
        "--kill-after",
        type=_positive(float),
        default=None,
        help="seconds after which a task's process is killed, the last resort for a "
        "solver that does not return (default: 1.1 x time limit + 30 s)",
    )
    p.add_argument("--gap", type=float, default=0.0, help="relative gap at which milp may stop")
    p.add_argument("--max-plans", type=_positive(int), default=None, help="largest space enumerate accepts")
    p.add_argument(
        "--out",
        help="results file: .csv (appended per row) or .parquet; locked while the "
        "batch runs (a second batch on the same file is refused)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep rows already in --out and run the rest (instances matched by real path)",
    )
    p.add_argument(
        "--workers",
        type=_positive(int),
        default=None,
        help="task processes (default: CPU count); with --dask local, Dask workers (default 2)",
    )
    p.add_argument(
        "--dask",
        metavar="ADDRESS|local",
        default=None,
        help="run on a dask.distributed scheduler (tcp://HOST:PORT), or 'local' "
        "for a 2-worker LocalCluster on 127.0.0.1",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=cmd_batch)

    p = sub.add_parser(
        "report", help="summary table and figures of a batch results file", description=cmd_report.__doc__
    )
    p.add_argument("results", help="results file written by `dnnprov batch` (.csv or .parquet)")
    p.add_argument("--out", help="folder for the figures and index.html (default: RESULTS-report/ beside it)")
    p.add_argument(
        "--root",
        action="append",
        default=[],
        metavar="DIR",
        help="folder that relative instance paths in the rows start from (repeatable; "
        "then the current folder and the results file's folder are tried)",
    )
    p.add_argument(
        "--shift",
        type=_number,
        default=1.0,
        metavar="S",
        help="shift of the shifted geometric mean of times, seconds (default 1)",
    )
    p.add_argument(
        "--gap-tol",
        type=_number,
        default=1e-6,
        metavar="G",
        help="relative gap at or below which a limit row counts as solved (default 1e-6)",
    )
    p.set_defaults(run=cmd_report)
