"""The `batch & sets` commands of ``dnnprov --help``: batch, report, generate."""
