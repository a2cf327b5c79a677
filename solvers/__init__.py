"""Solvers behind :func:`dnnprov.solve`: paper heuristics, exhaustive search, exact MILP."""
