"""The control loop: launch a plan and keep it training to its target loss (docs/control.md).

One loop (:mod:`dnnprov.control.loop`) observes a cloud, asks a launch policy and acts, over
one cloud interface (:mod:`dnnprov.control.cloud`) with two implementations: the trace cloud
(:mod:`dnnprov.control.clouds.trace`, replays of real spot traces: what ``dnnprov simulate``
runs) and EC2 through boto3 (:mod:`dnnprov.control.clouds.ec2`, what ``dnnprov run`` drives, also
against the twin of :mod:`dnnprov.control.twin.server`). Runs are kept in a durable record
(:mod:`dnnprov.control.record`); trainers report progress by the protocol of
:mod:`dnnprov.control.trainer`. λDNN plans run through :mod:`dnnprov.control.serverless`
(the PS on EC2, the functions on Lambda, restarts at the timeout), tested against the
Lambda test double of :mod:`dnnprov.control.twin.lambda_endpoint`.

The Python API of runs (:mod:`dnnprov.control.api`, imported on first use):
:func:`run_plan`, :func:`run_status`, :func:`cancel_run`, :func:`resume_run`, and the
steps of ``run_plan``, :func:`create_run` and :func:`drive_run`.
"""

from typing import Any

#: names served lazily from :mod:`dnnprov.control.api` (``import dnnprov.control`` stays cheap)
_API = ("cancel_run", "create_run", "drive_run", "resume_run", "run_plan", "run_status")
__all__ = list(_API)


def __getattr__(name: str) -> Any:
    """A name of the run API, imported on first use."""
    if name not in _API:
        raise AttributeError(f"module 'dnnprov.control' has no attribute {name!r}")
    from dnnprov.control import api

    return getattr(api, name)
