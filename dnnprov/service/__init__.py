"""The HTTP service of ``dnnprov serve``."""
