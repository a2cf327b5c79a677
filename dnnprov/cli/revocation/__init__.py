"""The `revocation` commands of ``dnnprov --help``: risk, simulate, run."""
