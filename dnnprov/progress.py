"""The clock and the progress log every method shares.

:class:`Clock` is the time-limit contract: it starts when :func:`dnnprov.solve` is
called, so set-up and the heuristic seed count against the limit like the search itself.
:class:`SolverLog` writes a MIP-solver style log (a header, then elapsed time, incumbent,
bound and gap at least once a second and at every new incumbent, then the final status)
through the ``dnnprov.solver`` logger at level INFO. Nothing is printed unless a caller
asks for it (:func:`log_to_stderr`, ``dnnprov solve --log``); no handler is attached at
import.

Interrupts: inside :func:`stop_on_signals` a SIGINT (or SIGTERM) does not raise; it sets
a process-wide stop flag that :meth:`Clock.expired` reports like a passed time limit, so
every method stops where it checks its limit and returns its best plan and proven bound
(:func:`dnnprov.solve` then says ``interrupted``). A second signal raises
:class:`KeyboardInterrupt` as usual, for a search that does not return soon enough.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

LOGGER_NAME = "dnnprov.solver"
#: the joint solve's log (``solve-many --log``): apart, so its single-job solves stay silent
JOINT_LOGGER_NAME = "dnnprov.joint"
PROGRESS_INTERVAL_S = 1.0
INTERRUPTED = "interrupted"  # the stop reason a result names (``details["stopped"]``)

_stop = threading.Event()


def stop_requested() -> bool:
    """Whether a stop was asked for since the last :func:`stop_on_signals` began."""
    return _stop.is_set()


def _on_signal(signum: int, frame: object) -> None:
    if _stop.is_set():  # the second signal: the user insists
        raise KeyboardInterrupt
    _stop.set()


@contextlib.contextmanager
def stop_on_signals(signals: Sequence[int] = (signal.SIGINT,), *, only_default: bool = False) -> Iterator[None]:
    """Within the block, ``signals`` set the stop flag instead of raising (module doc).

    The flag is cleared on entry and kept on exit, so the caller can still ask
    :func:`stop_requested`. Nested blocks and other threads change nothing (Python runs
    signal handlers in the main thread only). ``only_default`` leaves a signal alone when
    a program has installed its own handler for it.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in signals:
        current = signal.getsignal(sig)
        if current is _on_signal or (only_default and current not in (signal.default_int_handler, signal.SIG_DFL)):
            continue
        previous[sig] = current
    if signal.getsignal(signal.SIGINT) is not _on_signal:
        _stop.clear()
    try:
        for sig in previous:
            signal.signal(sig, _on_signal)
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Clock:
    """Budget of one solve: wall-clock seconds (``time.perf_counter``) and, optionally, work.

    ``work_limit`` is a deterministic limit beside the wall clock: the exact methods
    :meth:`spend` one unit per step of their search, named by :attr:`work_unit` (spot
    ``milp``: a node, a cell of the decomposition with at most one LP or threshold MILP;
    serverless ``milp`` and ``enumerate``: a plan evaluated), so a solve stopped by it stops
    at the same step, with the same plan and bound, on a loaded machine and an idle one.
    """

    def __init__(
        self, limit_s: float = math.inf, *, started: float | None = None, work_limit: int | None = None
    ) -> None:
        self.started = time.perf_counter() if started is None else started
        self.limit_s = float(limit_s)
        self.deadline = self.started + self.limit_s
        self.work_limit = work_limit
        self.work = 0
        self.work_unit = "nodes"

    def spend(self, units: int = 1) -> None:
        """Count ``units`` of work (of :attr:`work_unit`) against :attr:`work_limit`."""
        self.work += units

    def work_left(self) -> float:
        """Units of work left before :attr:`work_limit` (``inf`` without one)."""
        return math.inf if self.work_limit is None else max(self.work_limit - self.work, 0)

    def out_of_work(self) -> bool:
        """Whether the work limit is reached."""
        return self.work_limit is not None and self.work >= self.work_limit

    def elapsed(self) -> float:
        """Seconds since the solve started."""
        return time.perf_counter() - self.started

    def remaining(self) -> float:
        """Seconds left before the limit (negative once it has passed; 0 once stopped or out of work)."""
        return min(self.deadline - time.perf_counter(), 0.0 if _stop.is_set() or self.out_of_work() else math.inf)

    def expired(self) -> bool:
        """Whether a limit has passed or a stop was requested (:func:`request_stop`)."""
        return _stop.is_set() or self.out_of_work() or time.perf_counter() >= self.deadline

    def limits(self) -> str:
        """The limits as a solver log's header states them: ``time limit 60 s[, work limit 200 nodes]``."""
        work = "" if self.work_limit is None else f", work limit {self.work_limit:,} {self.work_unit}"
        return f"time limit {self.limit_s:g} s{work}"

    def stop_reason(self) -> str:
        """Why a method stopped early: ``interrupted``, the work limit or the time limit."""
        if _stop.is_set():
            return INTERRUPTED
        if self.out_of_work():
            return f"work limit of {self.work_limit:,} {self.work_unit} reached"
        return f"time limit of {self.limit_s:g} s reached"


@dataclass(frozen=True)
class Progress:
    """What a progress callback receives: a new incumbent or a better proven bound.

    ``kind`` is ``"incumbent"`` (``value``: its objective) or ``"bound"`` (``value``: the
    best bound proven so far; it never goes down); ``elapsed_s`` and ``work`` (nodes) say when.
    """

    kind: str
    value: float
    elapsed_s: float
    work: int


def _money(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.6g}"


class SolverLog:
    """Progress lines of one solve; a no-op unless ``logger`` is enabled for INFO."""

    def __init__(
        self, clock: Clock, logger: logging.Logger | None = None, callback: Callable[[Progress], None] | None = None
    ) -> None:
        self.clock = clock
        self.logger = logger or logging.getLogger(LOGGER_NAME)
        self.enabled = self.logger.isEnabledFor(logging.INFO)
        self.last_line = -math.inf
        self.incumbent = math.inf
        self.callback = callback
        self.called_incumbent = math.inf
        self.called_bound = -math.inf
        #: the best bound proven so far: a MIP log's bound never goes down (a minimization)
        self.bound = -math.inf

    def report(self, incumbent: float, bound: float) -> float:
        """Keep the bound monotone and call the callback on a new incumbent or a better bound;
        returns the monotone bound (never above the incumbent)."""
        if not math.isnan(bound):
            self.bound = max(self.bound, min(bound, incumbent))
        if self.callback is not None:
            now, work = self.clock.elapsed(), self.clock.work
            if incumbent < self.called_incumbent:
                self.called_incumbent = incumbent
                self.callback(Progress("incumbent", incumbent, now, work))
            if self.bound > self.called_bound:
                self.called_bound = self.bound
                self.callback(Progress("bound", self.bound, now, work))
        return self.bound

    def header(self, title: str, lines: list[str]) -> None:
        """The solve's header: what is solved, its size, the method and the limits."""
        if not self.enabled:
            return
        self.logger.info(title)
        for line in lines:
            self.logger.info("  %s", line)
        self.logger.info("%9s  %14s  %14s  %9s  %s", "time (s)", "incumbent", "bound", "gap", "work")

    def progress(self, incumbent: float, bound: float, work: str = "", *, force: bool = False) -> None:
        """A progress line: printed on a new incumbent, or once a second at most; its bound
        is the best proven so far (:meth:`report`)."""
        bound = self.report(incumbent, bound)
        if not self.enabled:
            return
        now = self.clock.elapsed()
        improved = incumbent < self.incumbent
        if not (force or improved or now - self.last_line >= PROGRESS_INTERVAL_S):
            return
        self.incumbent = min(self.incumbent, incumbent)
        self.last_line = now
        gap = "-"
        if math.isfinite(incumbent) and math.isfinite(bound):
            gap = f"{100 * max(0.0, incumbent - bound) / incumbent:.2f} %" if incumbent > 0 else "0.00 %"
        marker = "*" if improved else " "
        self.logger.info("%s%8.2f  %14s  %14s  %9s  %s", marker, now, _money(incumbent), _money(bound), gap, work)

    def final(self, status: str, message: str = "") -> None:
        """The final status line."""
        if not self.enabled:
            return
        self.logger.info("%s after %.2f s%s", status, self.clock.elapsed(), f": {message}" if message else "")


@contextlib.contextmanager
def log_to_stderr(logger_name: str = LOGGER_NAME) -> Iterator[logging.Logger]:
    """Send the solver log to stderr for the duration of a ``with`` block."""
    logger = logging.getLogger(logger_name)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    old_level, old_propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield logger
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        logger.propagate = old_propagate
