"""The published heuristics and exhaustive search (the test oracle)."""
