"""Catalogs of instance types and prices: the file format, GPU facts, imports from AWS data, many regions."""
