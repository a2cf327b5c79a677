"""The control loop: launch a plan and keep it training to its target loss (docs/control.md).

One loop (:mod:`dnnprov.control.loop`) observes a cloud, asks a launch policy and acts, over
one cloud interface (:mod:`dnnprov.control.cloud`) with two implementations: the trace cloud
(:mod:`dnnprov.control.trace_cloud`, replays of real spot traces: what ``dnnprov simulate``
runs) and EC2 through boto3 (:mod:`dnnprov.control.ec2`, what ``dnnprov run`` drives, also
against the twin of :mod:`dnnprov.control.twin`). Runs are kept in a durable record
(:mod:`dnnprov.control.record`); trainers report progress by the protocol of
:mod:`dnnprov.control.trainer`. λDNN plans run through :mod:`dnnprov.control.serverless`
(the PS on EC2, the functions on Lambda, restarts at the timeout), tested against the
Lambda test double of :mod:`dnnprov.control.lambda_twin`.
"""
