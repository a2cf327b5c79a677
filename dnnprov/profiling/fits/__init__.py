"""The least-squares fits of the profiler: the loss model (eq. 3), the timing coefficients, their standard errors."""
