"""The `cloud` commands of ``dnnprov --help``: catalog, export, apply, replan, twin, lambda-twin."""
