"""The parameter profiler: fit workload profiles from training logs and timings, calibrate."""
