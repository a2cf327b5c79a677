"""Checks every problem runs: field checks and readers, validity domains of the models, plausibility warnings."""
