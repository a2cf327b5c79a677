"""Revocation-aware planners: ``--robust K`` (by enumeration or the spot decomposition) and ``--risk``."""
