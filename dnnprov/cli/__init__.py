"""The ``dnnprov`` command line. ``main()`` parses; each subcommand is a small function.

Exit codes: :data:`EXIT_CODES`, the one table (``dnnprov --help`` and docs/cli.md show it).
Errors are one line on standard error; no traceback reaches the user. Only the module of
the command given is imported (:data:`COMMANDS`), so ``--version`` and ``--help`` start fast.
"""

from __future__ import annotations

import argparse
import difflib
import os
import signal
import sys
from collections.abc import Sequence

from dnnprov import __version__
from dnnprov.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_CODES,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    terminal_safe,
)
from dnnprov.errors import InvalidInputError

#: The command groups of ``dnnprov --help``: title -> (command, module, one-line summary).
COMMAND_GROUPS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "solve": (
        ("solve", "dnnprov.cli.solving.core", "solve one instance file"),
        ("show", "dnnprov.cli.solving.core", "describe an instance file"),
        ("demo", "dnnprov.cli.solving.core", "solve the paper's Table I instance with every method"),
        ("list", "dnnprov.cli.solving.inventory", "list the embedded instances, catalogs and workload profiles"),
        ("build", "dnnprov.cli.solving.inventory", "write an instance from a catalog, a workload profile and an SLO"),
        ("solve-many", "dnnprov.cli.solving.joint", "provision many jobs jointly under shared quotas"),
        ("sweep", "dnnprov.cli.solving.sweep", "minimal cost at a grid of deadlines (and target losses); not a front"),
        ("pareto", "dnnprov.cli.solving.objectives", "the exact (time, cost) front: every nondominated plan"),
    ),
    "batch & sets": (
        ("batch", "dnnprov.cli.sets.batch", "solve many instance files with many methods"),
        ("report", "dnnprov.cli.sets.batch", "summary table and figures of a batch results file"),
        ("generate", "dnnprov.cli.sets.generate", "write a seeded benchmark instance set"),
    ),
    "cloud": (
        ("catalog", "dnnprov.cli.cloud.commands", "build catalog files from AWS or from the shared real data"),
        ("export", "dnnprov.cli.cloud.commands", "write a plan as EC2 calls, Lambda settings, SkyPilot, Kueue or JSON"),
        ("apply", "dnnprov.cli.cloud.commands", "launch a spot plan on EC2 (--dry-run: DryRun requests only)"),
        ("twin", "dnnprov.cli.cloud.twin", "run the EC2 twin: moto behind a capacity proxy that follows spot traces"),
        (
            "lambda-twin",
            "dnnprov.cli.cloud.lambda_twin",
            "run the Lambda twin: a local Lambda API whose functions are λDNN stand-ins",
        ),
    ),
    "revocation": (
        ("replan", "dnnprov.cli.revocation.replan", "takeover plan after spot revocations"),
        ("risk", "dnnprov.cli.revocation.risk", "interruption models and revocation-aware plans"),
        ("simulate", "dnnprov.cli.revocation.risk", "replay real spot traces against a plan"),
        (
            "run",
            "dnnprov.cli.revocation.run",
            "launch a spot or serverless plan and keep it training to its target loss",
        ),
    ),
    "profile": (
        ("profile", "dnnprov.cli.profile", "fit workload profiles from measurements (loss logs, timings)"),
        ("predict", "dnnprov.cli.profile", "predict time, cost and loss curve of one given plan"),
    ),
    "service": (("serve", "dnnprov.cli.service", "run the HTTP API (solve, jobs, replan, export, sweep)"),),
}
#: command -> the module whose ``register(subparsers)`` adds it
COMMANDS = {name: module for group in COMMAND_GROUPS.values() for name, module, _ in group}


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
        from dnnprov.problems.validation.plausibility import reported as reported_warnings

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
