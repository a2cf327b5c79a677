"""The one error type dnnprov raises for bad input."""

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



class ProfileWarning(UserWarning):
    """A profiler fit that was returned but that the data support only weakly (the message says why)."""
