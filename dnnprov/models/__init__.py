"""The analytical performance and cost models (vectorized over plans) and the performance predictor."""
