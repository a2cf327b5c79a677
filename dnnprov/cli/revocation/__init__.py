"""The `revocation` commands of ``dnnprov --help``: replan, risk, simulate, run."""
