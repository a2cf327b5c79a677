"""The one error type dnnprov raises for bad input, and the warning for implausible input."""

from __future__ import annotations


class InvalidInputError(ValueError):
    """Input that dnnprov refuses, with the offending field and what is wrong.

    Parameters
    ----------
    field
        Dotted path of the field, e.g. ``"instance_types.p3.2xlarge.quota"``.
    problem
        What is wrong with it, in words a user can act on.
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}" if field else problem)


class PlausibilityWarning(UserWarning):
    """A value dnnprov accepts but that no real offer or workload has (most often a unit
    slip: a price in cents, a size in bytes). Issued through :mod:`warnings`; the CLI prints
    each as one ``dnnprov: warning: FIELD: PROBLEM`` line and results list them.

    Parameters
    ----------
    field
        Dotted path of the field, as in :class:`InvalidInputError`.
    problem
        Why the value looks wrong, with the plausible range and what it is based on.
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")

    def __reduce__(self) -> tuple:
        return type(self), (self.field, self.problem)


class ProfileWarning(UserWarning):
    """A profiler fit that was returned but that the data support only weakly (the message says why)."""
