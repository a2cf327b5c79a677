"""Embedded data written by this project: catalogs, workload profiles, instance sets."""
