"""Objectives beyond least cost and exact (time, cost) Pareto fronts, over the min-cost method."""
