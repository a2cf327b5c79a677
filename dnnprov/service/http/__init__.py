"""The HTTP side of ``dnnprov serve``: the protocol with its head deadline, the middleware every
request passes and the OpenAPI document (the Prometheus metrics are the service's: ``service/metrics.py``)."""
