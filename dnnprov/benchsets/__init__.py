"""Seeded benchmark instance sets (dnnprov generate)."""
