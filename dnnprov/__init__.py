"""dnnprov: exact cloud provisioning for distributed DNN training.

Spot GPU clusters (spotDNN's model) and serverless functions (λDNN's model), solved by
the papers' heuristics, exhaustive search, and exact MILP decompositions with HiGHS.

The public names below are imported on first use (``dnnprov.solve``, ``dnnprov.SpotProblem``,
...), so that ``import dnnprov`` and ``dnnprov --version`` cost no NumPy, Pyomo or HiGHS.
"""

import typing as _typing
from pathlib import Path as _Path

# A source checkout keeps the design's top-level folders formulations/, solvers/ and data/
# beside this folder; installed, they sit inside it. When Python imports this folder
# straight from a checkout (started in the repository root next to a non-editable
# install), the subpackages resolve to those folders, as they do when installed.
_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "solvers" / "__init__.py").is_file() and not (_Path(__file__).parent / "solvers").exists():
    __path__.append(str(_checkout))

__version__ = "0.1.0"

if _typing.TYPE_CHECKING:  # what type checkers see; at run time __getattr__ below imports each name on first use
    from dnnprov.dispatch import METHODS as METHODS, pareto as pareto, solve as solve
    from dnnprov.errors import InvalidInputError as InvalidInputError
    from dnnprov.io.instances import (
        dumps_instance as dumps_instance,
        embedded_instance as embedded_instance,
        problem_from_dict as problem_from_dict,
        read_instance as read_instance,
        write_instance as write_instance,
    )
    from dnnprov.models.predict import predict as predict
    from dnnprov.models.serverless import ServerlessModel as ServerlessModel
    from dnnprov.models.spot import SpotModel as SpotModel
    from dnnprov.problems.serverless import (
        ServerlessConstraints as ServerlessConstraints,
        ServerlessPlatform as ServerlessPlatform,
        ServerlessProblem as ServerlessProblem,
        ServerlessWorkload as ServerlessWorkload,
    )
    from dnnprov.problems.spot import (
        InstanceType as InstanceType,
        SpotConstraints as SpotConstraints,
        SpotPlatform as SpotPlatform,
        SpotProblem as SpotProblem,
        SpotSLO as SpotSLO,
        SpotWorkload as SpotWorkload,
        VcpuQuota as VcpuQuota,
    )
    from dnnprov.problems.validation.domain import ServerlessDomain as ServerlessDomain, SpotDomain as SpotDomain
    from dnnprov.result import (
        Objective as Objective,
        Result as Result,
        ServerlessPlan as ServerlessPlan,
        SpotPlan as SpotPlan,
        Status as Status,
    )
    from dnnprov.solvers.objectives.front import Front as Front, FrontPoint as FrontPoint

__all__ = [
    "METHODS",
    "Front",
    "FrontPoint",
    "InstanceType",
    "InvalidInputError",
    "Objective",
    "Result",
    "ServerlessConstraints",
    "ServerlessDomain",
    "ServerlessModel",
    "ServerlessPlan",
    "ServerlessPlatform",
    "ServerlessProblem",
    "ServerlessWorkload",
    "SpotConstraints",
    "SpotDomain",
    "SpotModel",
    "SpotPlan",
    "SpotPlatform",
    "SpotProblem",
    "SpotSLO",
    "SpotWorkload",
    "Status",
    "VcpuQuota",
    "dumps_instance",
    "embedded_instance",
    "pareto",
    "predict",
    "problem_from_dict",
    "read_instance",
    "solve",
    "write_instance",
]

#: public name -> the module it comes from (the imports above, made on first use)
_EXPORTS = {
    **dict.fromkeys(("ServerlessDomain", "SpotDomain"), "dnnprov.problems.validation.domain"),
    "InvalidInputError": "dnnprov.errors",
    **dict.fromkeys(
        ("dumps_instance", "embedded_instance", "problem_from_dict", "read_instance", "write_instance"),
        "dnnprov.io.instances",
    ),
    **dict.fromkeys(("Objective", "Result", "ServerlessPlan", "SpotPlan", "Status"), "dnnprov.result"),
    **dict.fromkeys(
        ("ServerlessConstraints", "ServerlessPlatform", "ServerlessProblem", "ServerlessWorkload"),
        "dnnprov.problems.serverless",
    ),
    "ServerlessModel": "dnnprov.models.serverless",
    **dict.fromkeys(("METHODS", "pareto", "solve"), "dnnprov.dispatch"),
    **dict.fromkeys(("Front", "FrontPoint"), "dnnprov.solvers.objectives.front"),
    **dict.fromkeys(
        ("InstanceType", "SpotConstraints", "SpotPlatform", "SpotProblem", "SpotSLO", "SpotWorkload", "VcpuQuota"),
        "dnnprov.problems.spot",
    ),
    "SpotModel": "dnnprov.models.spot",
    "predict": "dnnprov.models.predict",
}


def __getattr__(name: str) -> _typing.Any:
    """A public name, imported from its module on first use."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dnnprov' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
