"""What every command shares: exit codes, time-limit and path checks, terminal-safe text, interruptible solves."""

from __future__ import annotations

import contextlib
import json
import math
import signal
import threading
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dnnprov.errors import InvalidInputError
from dnnprov.progress import INTERRUPTED, stop_on_signals, stop_requested

if TYPE_CHECKING:
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
#: Unicode categories never written raw to a terminal: controls (ESC, CR, ...), format
#: characters (bidirectional overrides), line and paragraph separators, surrogates.
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


#: Largest time limit, seconds: the limit of every number of the instance format (``MAX_MAGNITUDE``).
MAX_TIME_LIMIT_S = 1e15


def check_time_limit(seconds: float | None, option: str = "--time-limit") -> None:
    """Refuse a time limit that is not a finite number of seconds above 0 and at most
    :data:`MAX_TIME_LIMIT_S` (``None``: no limit)."""
    if seconds is not None and not (math.isfinite(seconds) and 0 < seconds <= MAX_TIME_LIMIT_S):
        raise InvalidInputError(option, f"must be a finite number of seconds > 0 and at most 1e15, got {seconds:g}")


@contextlib.contextmanager
def writing(path: str | Path, option: str = "--out") -> Iterator[None]:
    """Turn an :class:`OSError` of writing ``path`` (a folder where a file goes, a file where a
    folder goes, a read-only folder) into one error naming ``option``."""
    try:
        yield
    except (FileExistsError, NotADirectoryError):  # making or entering its folders met a file
        raise InvalidInputError(option, f"cannot write {path}: a folder on its path is a file") from None
    except OSError as exc:
        raise InvalidInputError(option, f"cannot write {path}: {exc.strerror or exc}") from None


def output_folder(path: str | Path, option: str = "--out") -> Path:
    """Make the folder ``path`` (with its parents) before any work; a file in the way is one error naming ``option``."""
    if Path(path).exists() and not Path(path).is_dir():
        raise InvalidInputError(option, f"{path} is a file: give a folder")
    with writing(path, option):
        Path(path).mkdir(parents=True, exist_ok=True)
    return Path(path)


def output_file(path: str | Path, option: str = "--out") -> Path:
    """Refuse, before any work, a file to write that is an existing folder."""
    if Path(path).is_dir():
        raise InvalidInputError(option, f"{path} is a folder: give the name of a file to write")
    return Path(path)


def instance_path(value: str) -> str:
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


def serve_until_signal(
    start: Callable[[], object], ready_line: Callable[[], dict[str, Any]], stop: Callable[[], None]
) -> int:
    """Start a local server, print its one JSON ready line and serve until SIGTERM or SIGINT; then
    stop it (also when it failed to start) and put the signal handlers back."""
    signalled = threading.Event()
    previous: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, lambda signum, frame: signalled.set())
    try:
        start()
        print(json.dumps(ready_line()), flush=True)
        while not signalled.wait(0.5):  # until a signal; the server's threads do the work
            pass
    finally:
        stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return EXIT_OK
