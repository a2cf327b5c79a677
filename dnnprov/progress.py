"""The clock and the progress log every method shares.

:class:`Clock` is the time-limit contract: it starts when :func:`dnnprov.solve` is
called, so set-up and the heuristic seed count against the limit like the search itself.
:class:`SolverLog` writes a MIP-solver style log (a header, then elapsed time, incumbent,
bound and gap at least once a second and at every new incumbent, then the final status)
through the ``dnnprov.solver`` logger at level INFO. Nothing is printed unless a caller
asks for it (:func:`log_to_stderr`, ``dnnprov solve --log``); no handler is attached at
import.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
from typing import Iterator

LOGGER_NAME = "dnnprov.solver"
PROGRESS_INTERVAL_S = 1.0


class Clock:
    """Wall-clock budget of one solve (``time.perf_counter`` seconds)."""

    def __init__(self, limit_s: float = math.inf, *, started: float | None = None) -> None:
        self.started = time.perf_counter() if started is None else started
        self.limit_s = float(limit_s)
        self.deadline = self.started + self.limit_s

    def elapsed(self) -> float:
        """Seconds since the solve started."""
        return time.perf_counter() - self.started

    def remaining(self) -> float:
        """Seconds left before the limit (negative once it has passed)."""
        return self.deadline - time.perf_counter()

    def expired(self) -> bool:
        """Whether the limit has passed."""
        return time.perf_counter() >= self.deadline


def _money(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.6g}"


class SolverLog:
    """Progress lines of one solve; a no-op unless ``logger`` is enabled for INFO."""

    def __init__(self, clock: Clock, logger: logging.Logger | None = None) -> None:
        self.clock = clock
        self.logger = logger or logging.getLogger(LOGGER_NAME)
        self.enabled = self.logger.isEnabledFor(logging.INFO)
        self.last_line = -math.inf
        self.incumbent = math.inf

    def header(self, title: str, lines: list[str]) -> None:
        """The solve's header: what is solved, its size, the method and the limits."""
        if not self.enabled:
            return
        self.logger.info(title)
        for line in lines:
            self.logger.info("  %s", line)
        self.logger.info("%9s  %14s  %14s  %9s  %s", "time (s)", "incumbent", "bound", "gap", "work")

    def progress(self, incumbent: float, bound: float, work: str = "", *, force: bool = False) -> None:
        """A progress line: printed on a new incumbent, or once a second at most."""
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
        self.logger.info("%s%8.2f  %14s  %14s  %9s  %s", marker, now, _money(incumbent),
                         _money(bound), gap, work)

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
