"""The ``dnnprov`` command line. ``main()`` parses; each subcommand is a small function.

Exit codes: :data:`EXIT_CODES`, the one table (``dnnprov --help`` and docs/cli.md show it).
Errors are one line on standard error; no traceback reaches the user. Only the module of
the command given is imported (:data:`COMMANDS`), so ``--version`` and ``--help`` start fast.
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import signal
import sys
import unicodedata
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from dnnprov import __version__
from dnnprov.errors import InvalidInputError
from dnnprov.progress import INTERRUPTED, stop_on_signals, stop_requested

if TYPE_CHECKING:
    from dnnprov.problems.serverless import ServerlessProblem
    from dnnprov.problems.spot import SpotProblem, SpotWorkload
    from dnnprov.result import Result

EXIT_OK, EXIT_NO_PLAN, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141
#: The exit codes of every command, one table: code and meaning.
EXIT_CODES = (
    (EXIT_OK, "a plan: optimal, feasible, or the best plan found at the time limit (status limit)"),
    (EXIT_NO_PLAN, "no plan: proven infeasible, or none found (limit without a plan, unknown, error)"),
    (EXIT_BAD_INPUT, "bad input: an unreadable or invalid file, a bad option"),
    (EXIT_INTERNAL, "internal error, a bug in dnnprov: please report it with the input"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C, SIGTERM): solve prints its best plan so far and its bound"),
    (EXIT_BROKEN_PIPE, "standard output closed early (dnnprov show FILE | head -1)"),
)
DEMO_INSTANCE = "spot/paper-table1.json"
#: Unicode categories never written raw to a terminal: controls (ESC, CR, ...), format
#: characters (bidirectional overrides), line and paragraph separators, surrogates.
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})

#: The command groups of ``dnnprov --help``: title -> (command, module, one-line summary).
COMMAND_GROUPS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "solve": (
        ("solve", "dnnprov.cli", "solve one instance file"),
        ("show", "dnnprov.cli", "describe an instance file"),
        ("demo", "dnnprov.cli", "solve the paper's Table I instance with every method"),
        ("list", "dnnprov.cli.inventory", "list the embedded instances, catalogs and workload profiles"),
        ("build", "dnnprov.cli.inventory", "write an instance from a catalog, a workload profile and an SLO"),
        ("solve-many", "dnnprov.cli.joint", "provision many jobs jointly under shared quotas"),
        ("sweep", "dnnprov.cli.sweep", "minimal cost at a grid of deadlines (and target losses); not a front"),
        ("pareto", "dnnprov.cli.objectives", "the exact (time, cost) front: every nondominated plan"),
    ),
    "batch & sets": (
        ("batch", "dnnprov.cli.batch", "solve many instance files with many methods"),
        ("report", "dnnprov.cli.batch", "summary table and figures of a batch results file"),
        ("generate", "dnnprov.cli.generate", "write a seeded benchmark instance set"),
    ),
    "cloud": (
        ("catalog", "dnnprov.cli.cloud", "build catalog files from AWS or from the shared real data"),
        ("export", "dnnprov.cli.cloud", "write a plan as EC2 calls, Lambda settings, SkyPilot, Kueue or JSON"),
        ("apply", "dnnprov.cli.cloud", "launch a spot plan on EC2 (--dry-run: DryRun requests only)"),
        ("twin", "dnnprov.cli.twin", "run the EC2 twin: moto behind a capacity proxy that follows spot traces"),
        (
            "lambda-twin",
            "dnnprov.cli.lambda_twin",
            "run the Lambda twin: a local Lambda API whose functions are λDNN stand-ins",
        ),
    ),
    "revocation": (
        ("replan", "dnnprov.cli.cloud", "takeover plan after spot revocations"),
        ("risk", "dnnprov.cli.risk", "interruption models and revocation-aware plans"),
        ("simulate", "dnnprov.cli.risk", "replay real spot traces against a plan"),
        ("run", "dnnprov.cli.run", "launch a spot or serverless plan and keep it training to its target loss"),
    ),
    "profile": (
        ("profile", "dnnprov.cli.profile", "fit workload profiles from measurements (loss logs, timings)"),
        ("predict", "dnnprov.cli.profile", "predict time, cost and loss curve of one given plan"),
    ),
    "service": (("serve", "dnnprov.cli.service", "run the HTTP API (solve, jobs, replan, export, sweep)"),),
}
#: command -> the module whose ``register(subparsers)`` adds it
COMMANDS = {name: module for group in COMMAND_GROUPS.values() for name, module, _ in group}


def check_time_limit(seconds: float | None, option: str = "--time-limit") -> None:
    """Refuse a time limit that is not a finite number of seconds above 0 (``None``: no limit)."""
    if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
        raise InvalidInputError(option, f"must be a finite number of seconds > 0, got {seconds:g}")


def _instance_path(value: str) -> str:
    """A file path, ``embedded:REL`` for a file shipped with dnnprov, or ``-`` for standard input."""
    from dnnprov.io.instances import resolve_instance_path

    return str(resolve_instance_path(value))


def terminal_safe(text: object) -> str:
    """``text`` with every control, format and separator character escaped (``\x1b``,
    ``\n``, ``\u202e``), so that data can neither move the cursor, recolour the terminal
    nor start a new line that looks like dnnprov's own output."""
    out = []
    for c in str(text):
        if unicodedata.category(c) in UNSAFE_CATEGORIES:
            code = ord(c)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(c)
    return "".join(out)


def cmd_solve(args: argparse.Namespace) -> int:
    """Solve one instance file with one method.

    Ctrl-C or SIGTERM stops the solve: its best plan so far and proven bound are printed
    (status limit, "interrupted") and the exit code is 130.
    """
    from dnnprov.cli.domain import apply_domain_options, solve_with_domain_cost
    from dnnprov.cli.objectives import apply_budget
    from dnnprov.dispatch import solve
    from dnnprov.io.instances import read_instance

    check_time_limit(args.time_limit)
    problem = apply_budget(apply_domain_options(read_instance(_instance_path(args.file)), args), args.budget)
    for option, given, owner in (
        ("--deadline-probability", args.deadline_probability is not None and not args.risk, "--risk"),
        ("--no-replacement", args.no_replacement and args.robust is None, "--robust K"),
        (
            "--takeover-overhead",
            args.takeover_overhead is not None and args.robust is None and not args.risk,
            "--robust K or --risk",
        ),
        ("--domain-cost", args.domain_cost and args.objective != "cost", "--objective cost"),
    ):
        if given:
            raise InvalidInputError(option, f"goes with {owner}")
    if args.work_limit is not None and args.domain_cost:
        raise InvalidInputError("--work-limit", "is not taken with --domain-cost")
    work = {} if args.work_limit is None else {"work_limit": args.work_limit}
    result = solve_interruptibly(
        lambda: (solve_with_domain_cost if args.domain_cost else solve)(
            problem,
            args.method,
            time_limit_s=args.time_limit,
            gap=args.gap,
            max_plans=args.max_plans,
            log=args.log,
            robust=args.robust,
            risk=args.risk,
            deadline_probability=args.deadline_probability,
            takeover_overhead_s=args.takeover_overhead,
            replaced=not args.no_replacement,
            objective=args.objective,
            **work,
        ),
        args.time_limit,
    )
    print(result.to_json(indent=2) if args.json else result.summary())
    return exit_code(result)


def cmd_show(args: argparse.Namespace) -> int:
    """Describe an instance file."""
    from dnnprov.io.instances import read_instance

    problem = read_instance(_instance_path(args.file))
    print(describe(problem))
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    """Solve the embedded paper Table I instance with every applicable method."""
    from dnnprov.dispatch import solve
    from dnnprov.io.instances import embedded_instance, read_instance

    problem = read_instance(embedded_instance(DEMO_INSTANCE))
    print(describe(problem))
    print()
    for method in ("milp", "reference-heuristic", "heuristic", "enumerate"):
        print(solve(problem, method).summary())
        print()
    return EXIT_OK


def _spot_domain_lines(workload: SpotWorkload) -> list[str]:
    """The fitted ranges of a spot workload's domain, then what plans may use (what the solvers enforce)."""
    d = workload.domain
    if d is None:
        return []
    lines = [
        f"  workload.domain: batch_wa {d.batch_wa[0]:g}..{d.batch_wa[1]:g}, workers "
        f"{d.workers[0]}..{d.workers[1]}" + (f", extrapolation {d.extrapolation:g}" if d.extrapolation != 1 else "")
    ]
    (b_low, b_high), (k_low, k_high) = d.batch_bounds(workload.gamma_2, workload.gamma_3), d.worker_bounds()
    lines.append(
        f"    plans may use: batch_wa {b_low:g}..{b_high:g} (factor {d.batch_factor:g}, then eq. (3)'s "
        f"numerator cap), workers {k_low}..{k_high} (factor {d.workers_factor:g}), "
        f">= {d.min_iterations:g} iterations"
    )
    if d.loss is not None or d.iterations is not None:
        logged = []
        if d.loss is not None:
            logged.append(f"loss {d.loss[0]:g}..{d.loss[1]:g}")
        if d.iterations is not None:
            logged.append(
                f"iterations {d.iterations[0]:g}..{d.iterations[1]:g} (beyond {d.iteration_limit():g}: extrapolated)"
            )
        lines.append(f"    logged: {', '.join(logged)}; loss_axis {d.loss_axis}")
    return lines


def describe(problem: SpotProblem | ServerlessProblem) -> str:
    """A few readable lines about a problem, with the instance file's field names.

    Every string from the file goes through :func:`terminal_safe`.
    """
    from dnnprov.problems.spot import SpotProblem

    q = terminal_safe
    if isinstance(problem, SpotProblem):
        w, slo, c = problem.workload, problem.slo, problem.constraints
        workers = f"{c.workers[0]}..{c.workers[1] if c.workers[1] is not None else 'null'}"
        lines = [
            (
                f"{q(problem.name)}: spot problem, model {problem.model}, workload {q(w.name)} "
                f"(loss_variant {w.loss_variant})"
            ),
            f"  slo: loss {slo.loss:g}, time_s {slo.time_s:g}"
            + (f", takeover_overhead_s {slo.takeover_overhead_s:g}" if slo.takeover_overhead_s else ""),
            (
                f"  constraints: ps_count {c.ps_count[0]}..{c.ps_count[1]}, workers {workers}, "
                f"markets {', '.join(c.markets)}"
            ),
            (
                "  columns (compute_time_s by eq. (6) where the file gives speed_samples_per_s; "
                "price_per_h is the column's market price):"
            ),
        ]
        cols = problem.columns()
        width = max(24, *(len(q(label)) for label in cols.labels))
        lines.append(
            f"    {'column':<{width}} {'gpus':>4} {'batch_per_gpu':>13} {'compute_time_s':>14} "
            f"{'price_per_h':>11} {'quota':>5} {'existing':>8}"
        )
        for i, label in enumerate(cols.labels):
            per_gpu = int(cols.batch[i]) // int(cols.gpus[i])
            lines.append(
                f"    {q(label):<{width}} {cols.gpus[i]:>4} {per_gpu:>13} {cols.compute_time[i]:>14.4f} "
                f"{cols.price[i]:>11.4f} {cols.upper[i]:>5} {cols.lower[i]:>8}"
            )
        if c.vcpu_quotas:
            lines.append("  vcpu_quotas: " + ", ".join(f"{q(v.family)}/{v.market} <= {v.vcpus}" for v in c.vcpu_quotas))
        if c.budget_usd is not None:
            lines.append(f"  budget_usd: {c.budget_usd:g}")
        rates = [
            f"{q(t.name)} {t.interruption.rate_per_h:.3g}/h"
            for t in problem.instance_types
            if t.interruption is not None
        ]
        if rates:
            lines.append("  interruption rate_per_h: " + ", ".join(rates))
        if w.domain is not None:
            lines.extend(_spot_domain_lines(w))
    else:
        sw, sp = problem.workload, problem.platform
        grid = problem.memory_grid()
        low, high = problem.function_range()
        lines = [
            (
                f"{q(problem.name)}: serverless problem, workload {q(sw.name)} "
                f"(epochs {sw.epochs:g} of {sw.samples} samples)"
            ),
            f"  slo: time_s {problem.time_s:g}",
            (
                f"  memory_mb {grid[0]}..{grid[-1]} in memory_step_mb {sp.memory_step_mb} "
                f"({len(grid)} sizes), functions {low}..{high}, "
                f"ps_count {problem.constraints.ps_count[0]}..{problem.constraints.ps_count[1]}, "
                f"timeout_s {sp.timeout_s:g}"
            ),
            (
                f"  local_batch {sw.local_batch}, max_global_batch {sw.max_global_batch}, "
                f"model_mb {sw.model_mb:g}, dataset_mb {sw.dataset_mb:g}"
            ),
        ]
        if problem.constraints.budget_usd is not None:
            lines.append(f"  budget_usd: {problem.constraints.budget_usd:g}")
        d = sw.domain
        if d is not None:
            lines.append(
                f"  workload.domain: memory_mb {d.memory_mb[0]:g}..{d.memory_mb[1]:g}"
                + (f", functions {d.functions[0]}..{d.functions[1]}" if d.functions else "")
                + (f", extrapolation {d.extrapolation:g}" if d.extrapolation != 1 else "")
            )
    if problem.notes:
        lines.append(f"  notes: {q(problem.notes)}")
    return "\n".join(lines)


class UsageError(Exception):
    """A command line argparse refuses (printed as one ``dnnprov: error:`` line)."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help with every option's default shown (unless its text already says it)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or default in (None, False, argparse.SUPPRESS)
            or "default" in text
            or isinstance(action, argparse._VersionAction)
        ):
            return text
        shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})".strip()


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, and whose help shows defaults."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def add_argument(self, *args: object, **kwargs: object) -> argparse.Action:
        """As argparse's; an option with a default and no help text gets one naming the default."""
        if (
            kwargs.get("help") is None
            and kwargs.get("default") not in (None, False, argparse.SUPPRESS)
            and args
            and str(args[0]).startswith("-")
        ):
            kwargs["help"] = "(default: %(default)s)"
        return super().add_argument(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> None:  # type: ignore[override]
        """Raise :class:`UsageError` (``main`` prints it as one line) instead of usage + exit."""
        where = "" if self.prog == "dnnprov" else f"{self.prog}: "
        raise UsageError(f"{where}{message} (see {self.prog} --help)")


def _commands_text() -> str:
    """The grouped command list and the exit-code table of ``dnnprov --help``."""
    width = max(len(name) for name in COMMANDS)
    lines = ["commands (dnnprov COMMAND --help for each):"]
    for title, group in COMMAND_GROUPS.items():
        lines.append(f"  {title}:")
        lines.extend(f"    {name:<{width}}  {summary}" for name, _, summary in group)
    lines += ["", "exit codes:"]
    lines.extend(f"  {code:>3}  {meaning}" for code, meaning in EXIT_CODES)
    return "\n".join(lines)


def _register_core(sub: argparse._SubParsersAction) -> None:
    """Add ``solve``, ``show`` and ``demo``."""
    import inspect

    from dnnprov.dispatch import METHODS

    p = sub.add_parser("solve", help="solve one instance file", description=inspect.cleandoc(cmd_solve.__doc__ or ""))
    p.add_argument("file", help="instance file, embedded:spot/paper-table1.json, or - for standard input")
    p.add_argument("--method", choices=METHODS, default="milp")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--time-limit", type=float, default=60.0, help="wall-clock seconds for the whole solve, any method")
    p.add_argument(
        "--work-limit",
        type=int,
        default=None,
        metavar="NODES",
        help="deterministic limit beside --time-limit: nodes of the milp search (same answer on any machine)",
    )
    p.add_argument("--gap", type=float, default=0.0, help="relative gap to stop at (milp)")
    p.add_argument("--max-plans", type=int, default=None, help="largest space enumerate accepts (default 50 million)")
    p.add_argument("--log", action="store_true", help="print a solver log (incumbent, bound, gap over time) to stderr")
    p.add_argument(
        "--robust",
        type=int,
        default=None,
        metavar="K",
        help="spot: meet the deadline even if any K workers are revoked (docs/revocation.md)",
    )
    p.add_argument(
        "--risk", action="store_true", help="spot: least expected cost under the instance's interruption models"
    )
    p.add_argument(
        "--deadline-probability",
        type=float,
        default=None,
        metavar="Q",
        help="with --risk: meet the deadline with probability at least Q (default: in expectation)",
    )
    p.add_argument(
        "--takeover-overhead",
        type=float,
        default=None,
        metavar="S",
        help="with --robust/--risk: seconds until a replacement joins (default 126, the paper's 2.1 min)",
    )
    p.add_argument("--no-replacement", action="store_true", help="with --robust: revoked workers are not replaced")
    from dnnprov.cli.domain import add_domain_options
    from dnnprov.cli.objectives import add_objective_options

    add_domain_options(p, cost=True)
    add_objective_options(p)
    p.set_defaults(run=cmd_solve)

    p = sub.add_parser("show", help="describe an instance file", description=cmd_show.__doc__)
    p.add_argument("file", help="instance file, embedded:REL, or - for standard input")
    p.set_defaults(run=cmd_show)

    p = sub.add_parser(
        "demo", help="solve the paper's Table I instance with every method", description=cmd_demo.__doc__
    )
    p.set_defaults(run=cmd_demo)


def build_parser(commands: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser with the subcommands of the modules of ``commands`` (default:
    every subcommand); :func:`main` builds only what the command line names."""
    parser = Parser(
        prog="dnnprov",
        description="Provision cloud resources for distributed DNN training: "
        "spot GPU clusters and serverless functions, with proven-optimal plans.",
        epilog=_commands_text(),
    )
    parser.add_argument("--version", action="version", version=f"dnnprov {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="one of the commands below")
    modules = dict.fromkeys(COMMANDS[c] for c in (COMMANDS if commands is None else commands))
    for module in modules:
        if module == __name__:
            _register_core(sub)
        else:
            __import__(module, fromlist=["register"]).register(sub)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The command an argument list names: its first word that is not an option."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg
    return None


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv``, importing only the module of its command."""
    command = _command_of(argv)
    if command is not None and command not in COMMANDS:
        close = difflib.get_close_matches(command, COMMANDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UsageError(f"unknown command {command!r}{hint} (dnnprov --help lists them)")
    return build_parser([] if command is None else [command]).parse_args(argv)


def solve_interruptibly(run: Callable[[], Result], time_limit_s: float) -> Result:
    """``run()`` (a solve) with Ctrl-C and SIGTERM stopping it like its time limit; the
    result of a stopped run is marked interrupted (:func:`dnnprov.dispatch.marked_interrupted`)."""
    from dnnprov.dispatch import marked_interrupted

    with stop_on_signals((signal.SIGINT, signal.SIGTERM)):
        result = run()
    return marked_interrupted(result, time_limit_s) if stop_requested() else result


def exit_code(result: Result) -> int:
    """The exit code of a solve's result (:data:`EXIT_CODES`)."""
    if result.details.get("stopped") == INTERRUPTED:
        return EXIT_INTERRUPTED
    return EXIT_OK if result.is_feasible() else EXIT_NO_PLAN


def _error(text: str) -> None:
    """Write one ``dnnprov: ...`` line to standard error (escaped: a single line)."""
    try:
        print(f"dnnprov: {terminal_safe(text)}", file=sys.stderr)
    except (OSError, ValueError):  # stderr closed too: nothing left to tell
        pass


def _stdout_gone() -> None:
    """Point standard output at /dev/null, so that the interpreter's last flush is silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file descriptor (captured output)
        pass


def _sigterm_as_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (:data:`EXIT_CODES`).

    Bad input, a bad option included, ends with one ``dnnprov: error: ...`` line on
    standard error and exit code 2; a closed standard output (a pager or ``head`` that
    quit) with 141; Ctrl-C or SIGTERM with 130 (``solve`` prints its best plan first); an
    unexpected exception (a bug) with one ``dnnprov: internal error`` line and exit code 3.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    # SIGTERM ends a command as Ctrl-C does (files closed, rows kept); `serve` drains on it itself
    own_sigterm = (
        threading_is_main() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL and _command_of(argv) != "serve"
    )
    if own_sigterm:
        signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    try:
        return _run(argv)
    finally:
        if own_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def threading_is_main() -> bool:
    """Whether this is the main thread (the only one that may set signal handlers)."""
    import threading

    return threading.current_thread() is threading.main_thread()


def _run(argv: list[str]) -> int:
    """Parse and run one command; every outcome becomes an exit code."""
    try:
        try:
            args = _parse(argv)
        except SystemExit as exc:  # --help and --version print and exit 0
            sys.stdout.flush()
            return exc.code if isinstance(exc.code, int) else EXIT_OK
        from dnnprov.problems.plausibility import reported as reported_warnings

        with reported_warnings(lambda text: _error(f"warning: {text}")):  # one line per plausibility warning
            code = args.run(args)
        sys.stdout.flush()
        return code
    except UsageError as exc:
        _error(f"error: {exc}")
        return EXIT_BAD_INPUT
    except InvalidInputError as exc:
        _error(f"error: {exc}")
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        _stdout_gone()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 (the last resort: a bug must not print a traceback at the user)
        _error(f"internal error: {type(exc).__name__}: {exc} (a bug in dnnprov; please report it with the input)")
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
