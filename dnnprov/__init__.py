"""dnnprov: exact cloud provisioning for distributed DNN training.

Spot GPU clusters (spotDNN's model) and serverless functions (λDNN's model), solved by
the papers' heuristics, exhaustive search, and exact MILP decompositions with HiGHS.
"""

from pathlib import Path as _Path

# A source checkout keeps the design's top-level folders formulations/, solvers/ and data/
# beside this folder; installed, they sit inside it. When Python imports this folder
# straight from a checkout (started in the repository root next to a non-editable
# install), the subpackages resolve to those folders, as they do when installed.
_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "solvers" / "__init__.py").is_file() and not (_Path(__file__).parent / "solvers").exists():
    __path__.append(str(_checkout))

from dnnprov.problems.domain import ServerlessDomain, SpotDomain
from dnnprov.errors import InvalidInputError
from dnnprov.io.instances import (dumps_instance, embedded_instance, problem_from_dict,
                                 read_instance, write_instance)
from dnnprov.result import Result, ServerlessPlan, SpotPlan, Status
from dnnprov.problems.serverless import (ServerlessConstraints, ServerlessPlatform, ServerlessProblem,
                                ServerlessWorkload)
from dnnprov.models.serverless import ServerlessModel
from dnnprov.solve import METHODS, solve
from dnnprov.problems.spot import (InstanceType, SpotConstraints, SpotPlatform, SpotProblem, SpotSLO,
                          SpotWorkload, VcpuQuota)
from dnnprov.models.spot import SpotModel
from dnnprov.models.predict import predict

__all__ = [
    "METHODS", "InstanceType", "InvalidInputError", "Result",
    "ServerlessConstraints", "ServerlessDomain", "ServerlessModel", "ServerlessPlan", "ServerlessPlatform",
    "ServerlessProblem", "ServerlessWorkload", "SpotConstraints", "SpotDomain", "SpotModel", "SpotPlan",
    "SpotPlatform", "SpotProblem", "SpotSLO", "SpotWorkload", "Status", "VcpuQuota",
    "dumps_instance", "embedded_instance", "predict", "problem_from_dict", "read_instance", "solve",
    "write_instance",
]
__version__ = "0.1.0"
