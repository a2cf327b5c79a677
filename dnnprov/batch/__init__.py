"""Running many instances: the supervised batch runner, result summaries, reports, cost-deadline sweeps."""
