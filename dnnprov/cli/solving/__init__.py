"""The `solve` commands of ``dnnprov --help``: solve, show, demo, list, build, solve-many, sweep, pareto."""
