"""dnnprov: exact cloud provisioning for distributed DNN training.

Spot GPU clusters (spotDNN's model) and serverless functions (λDNN's model), solved by
the papers' heuristics, exhaustive search, and exact MILP decompositions with HiGHS.
"""

from dnnprov.domain import ServerlessDomain, SpotDomain
from dnnprov.errors import InvalidInputError
from dnnprov.instance_io import (dumps_instance, embedded_instance, problem_from_dict,
                                 read_instance, write_instance)
from dnnprov.result import Result, ServerlessPlan, SpotPlan, Status
from dnnprov.serverless import (ServerlessConstraints, ServerlessPlatform, ServerlessProblem,
                                ServerlessWorkload)
from dnnprov.serverless_model import ServerlessModel
from dnnprov.solve import METHODS, solve
from dnnprov.spot import (InstanceType, SpotConstraints, SpotPlatform, SpotProblem, SpotSLO,
                          SpotWorkload, VcpuQuota)
from dnnprov.spot_model import SpotModel
from dnnprov.predict import predict

__all__ = [
    "METHODS", "InstanceType", "InvalidInputError", "Result",
    "ServerlessConstraints", "ServerlessDomain", "ServerlessModel", "ServerlessPlan", "ServerlessPlatform",
    "ServerlessProblem", "ServerlessWorkload", "SpotConstraints", "SpotDomain", "SpotModel", "SpotPlan",
    "SpotPlatform", "SpotProblem", "SpotSLO", "SpotWorkload", "Status", "VcpuQuota",
    "dumps_instance", "embedded_instance", "predict", "problem_from_dict", "read_instance", "solve",
    "write_instance",
]
__version__ = "0.1.0"
