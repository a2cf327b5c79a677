"""One module per seeded benchmark set: ``small``, ``large``, ``aws-2022``/``aws-2025`` and ``trace``."""
