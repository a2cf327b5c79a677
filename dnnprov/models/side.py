"""The user's own variables in the side model (issue 29): integer, binary or continuous y.

A side row of the spot model reads ``low <= a_n . n + a_s s + a_u . used + a_y . y <= high``
with ``used[c] = 1`` exactly when ``n_c >= 1`` (``m.performance.used[c]``) and ``y`` the
variables a user added outside ``m.performance``. ``n``, ``s`` and ``used`` are functions of
the plan; ``y`` is not: a plan satisfies the side rows when *some* ``y`` in its box (and
integer where declared) satisfies them. :class:`OwnVariables` answers that question, one
plan at a time, with a decider the solvers provide (:func:`dnnprov.solvers.side_vars.decider`:
a MILP over ``y`` alone with a verified answer); the answers are cached by the plan's fixed
part of the rows, which is all that matters to them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

#: ``decide(own, low, high) -> bool``: whether some y of ``own``'s box (integer where declared)
#: meets ``low <= a y <= high`` over the rows that use y (``own.a[own.rows]``).
Decider = Callable[["OwnVariables", np.ndarray, np.ndarray], bool]


@dataclass(frozen=True)
class OwnVariables:
    """Own variables y of the side rows: their coefficients ``a`` (rows x y), box and integrality."""

    a: np.ndarray
    low: np.ndarray
    high: np.ndarray
    integer: np.ndarray
    names: tuple[str, ...]
    decide: Decider | None = field(default=None, compare=False)
    _cache: dict[bytes, bool] = field(default_factory=dict, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.names)

    @property
    def rows(self) -> np.ndarray:
        """Which side rows use an own variable."""
        return (self.a != 0).any(axis=1)

    def with_decider(self, decide: Decider) -> OwnVariables:
        """The same variables answered by ``decide``."""
        return OwnVariables(self.a, self.low, self.high, self.integer, self.names, decide)

    def keep(self, rows: np.ndarray) -> OwnVariables:
        """The variables over a subset of the rows (a boolean or index array)."""
        return OwnVariables(self.a[rows], self.low, self.high, self.integer, self.names, self.decide)

    def feasible(self, fixed: np.ndarray, low: np.ndarray, high: np.ndarray, tol: float) -> np.ndarray:
        """For each plan (a row of ``fixed``, its rows' values without y): whether some y fits.

        Only the rows that use y are asked (the others are the caller's); the interval of
        each is widened by ``tol`` as the plain rows are.
        """
        if self.decide is None:
            raise RuntimeError("side rows with own variables need a decider (dnnprov.solvers.side_vars)")
        which = self.rows
        part = np.ascontiguousarray(np.asarray(fixed, dtype=float)[:, which])
        answers = np.empty(len(part), dtype=bool)
        for i, values in enumerate(part):
            key = values.tobytes()
            if key not in self._cache:
                self._cache[key] = bool(self.decide(self, low[which] - values - tol, high[which] - values + tol))
            answers[i] = self._cache[key]
        return answers
