"""dnnprov: exact cloud provisioning for distributed DNN training.

Spot GPU clusters (spotDNN's model) and serverless functions (λDNN's model), solved by
the papers' heuristics, exhaustive search, and exact MILP decompositions with HiGHS.

The public names below are imported on first use (``dnnprov.solve``, ``dnnprov.SpotProblem``,
...), so that ``import dnnprov`` and ``dnnprov --version`` cost no NumPy, Pyomo or HiGHS.
"""

import sys as _sys
import types as _types
from pathlib import Path as _Path

# A source checkout keeps the design's top-level folders formulations/, solvers/ and data/
# beside this folder; installed, they sit inside it. When Python imports this folder
# straight from a checkout (started in the repository root next to a non-editable
# install), the subpackages resolve to those folders, as they do when installed.
_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "solvers" / "__init__.py").is_file() and not (_Path(__file__).parent / "solvers").exists():
    __path__.append(str(_checkout))

__version__ = "0.1.0"

#: public name -> the module it comes from
_EXPORTS = {
    **dict.fromkeys(("ServerlessDomain", "SpotDomain"), "dnnprov.problems.domain"),
    "InvalidInputError": "dnnprov.errors",
    **dict.fromkeys(("dumps_instance", "embedded_instance", "problem_from_dict", "read_instance",
                     "write_instance"), "dnnprov.io.instances"),
    **dict.fromkeys(("Objective", "Result", "ServerlessPlan", "SpotPlan", "Status"), "dnnprov.result"),
    **dict.fromkeys(("ServerlessConstraints", "ServerlessPlatform", "ServerlessProblem", "ServerlessWorkload"),
                    "dnnprov.problems.serverless"),
    "ServerlessModel": "dnnprov.models.serverless",
    **dict.fromkeys(("METHODS", "pareto", "solve"), "dnnprov.solve"),
    **dict.fromkeys(("Front", "FrontPoint"), "dnnprov.solvers.front"),
    **dict.fromkeys(("InstanceType", "SpotConstraints", "SpotPlatform", "SpotProblem", "SpotSLO", "SpotWorkload",
                     "VcpuQuota"), "dnnprov.problems.spot"),
    "SpotModel": "dnnprov.models.spot",
    "predict": "dnnprov.models.predict",
}
_EXPORTS.update(dict.fromkeys(("cancel_run", "resume_run", "run_plan", "run_status"), "dnnprov.control.api"))  # runs
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    """A public name, imported from its module on first use."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dnnprov' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


class _Package(_types.ModuleType):
    """The ``dnnprov`` module: its attribute ``solve`` is the function, also once the
    submodule ``dnnprov.solve`` has been imported (importing it sets the attribute)."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "solve" and isinstance(value, _types.ModuleType):
            value = value.solve
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
