"""The HTTP side of ``dnnprov serve``: the protocol with its head deadline, the middleware every
request passes, the OpenAPI document and the Prometheus metrics."""
