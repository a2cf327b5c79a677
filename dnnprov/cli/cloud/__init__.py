"""The `cloud` commands of ``dnnprov --help``: catalog, export, apply, twin, lambda-twin."""
