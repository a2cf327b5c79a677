"""Pyomo formulations of the spot and serverless provisioning problems."""
