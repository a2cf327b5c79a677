"""The ``trace`` set: serverless jobs from the Philly GPU-cluster trace in ``../shared/data``, as JSON lines."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from dnnprov.benchsets.common import (
    DEFAULT_COUNTS,
    DEFAULT_SEED,
    PHILLY_FILE,
    SERVERLESS_WORKLOADS,
    TRACE_STREAMS,
    best_epoch_time,
    check_seed,
    resolve_shared_data,
    round_sig,
    serverless_workload,
)
from dnnprov.errors import InvalidInputError
from dnnprov.problems.serverless import ServerlessProblem

# ---------------------------------------------------------------------------- trace
#: Epochs of the longest trace job are this share of what the fastest plan trains within
#: T_o; of the shortest, :data:`TRACE_MIN_SHARE`; log-linear in the runtime's rank between.
TRACE_MAX_SHARE = 0.9
TRACE_MIN_SHARE = 0.02
TRACE_TIME_RANGE_S = (600.0, 1200.0)
TRACE_MAPPING = (
    "job i: trace row i of a seeded permutation of the runtimes (a new permutation per pass), "
    "workload uniform over the four of Table 5, T_o uniform in [600, 1200] s; epochs = "
    "share x T_o / F_w with F_w the workload's fastest time per epoch (whole (n, m) grid, "
    "m_max 3008 MB, 1 PS) and share = 0.02^(1-q) x 0.9^q, q = the runtime's mid-rank in "
    "the trace scaled to [0, 1]"
)


def read_philly_runtimes(shared_data: str | Path | None = None) -> np.ndarray:
    """The 83,154 job runtimes (s) of the Philly trace file, in file order."""
    path = resolve_shared_data(shared_data) / PHILLY_FILE
    try:
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            if reader.fieldnames is None or "runtime" not in reader.fieldnames:
                raise InvalidInputError(str(path), "expected a CSV with a 'runtime' column")
            values = [float(row["runtime"]) for row in reader]
    except OSError as exc:
        raise InvalidInputError(str(path), f"cannot read the Philly job runtimes: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InvalidInputError(str(path), f"a runtime is not a number ({exc})") from None
    if not values:
        raise InvalidInputError(str(path), "no runtimes")
    return np.asarray(values, dtype=float)


def _trace_templates() -> dict[str, tuple[dict[str, Any], float]]:
    """Per Table 5 workload: its instance dict (1 epoch) and its fastest time per epoch."""
    out = {}
    for name in SERVERLESS_WORKLOADS:
        w = replace(serverless_workload(name), epochs=1.0)
        problem = ServerlessProblem(workload=w, time_s=TRACE_TIME_RANGE_S[0], name="trace")
        out[name] = (problem.to_dict(), best_epoch_time(problem))
    return out


def trace_jobs(
    seed: int = DEFAULT_SEED,
    count: int = DEFAULT_COUNTS["trace"],
    runtimes: np.ndarray | None = None,
    shared_data: str | Path | None = None,
) -> Iterator[dict[str, Any]]:
    """Serverless jobs drawn the way lambdaDNN's trace-driven simulation did, as instance dicts.

    Job ``i`` takes the trace job at position ``i`` of a seeded random permutation of the
    runtimes (a fresh permutation after every full pass), a workload uniformly from the four
    of Table 5 and T_o uniformly in [600, 1200] s. Its epochs are
    ``share * T_o / F_w``, where ``F_w`` is the workload's fastest time per epoch over the
    whole (n, m) grid and ``share`` runs log-linearly from 2 % (the shortest trace job) to
    90 % (the longest) with the runtime's rank ``q`` in the trace:
    ``share = 0.02 ** (1 - q) * 0.9 ** q``. The first ``k`` jobs do not depend on ``count``.
    """
    seed = check_seed(seed)
    values = read_philly_runtimes(shared_data) if runtimes is None else np.asarray(runtimes, dtype=float)
    size = len(values)
    if size == 0:
        raise InvalidInputError("runtimes", "no trace runtimes")
    ordered = np.sort(values, kind="stable")
    # mid-rank of each runtime (ties share one), scaled to [0, 1]
    middle = (np.searchsorted(ordered, values, "left") + np.searchsorted(ordered, values, "right") - 1) / 2.0
    quantile = middle / (size - 1) if size > 1 else np.full(size, 0.5)
    templates = _trace_templates()
    names = list(SERVERLESS_WORKLOADS)
    order_rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(TRACE_STREAMS["order"],)))
    workload_draws = np.random.default_rng(
        np.random.SeedSequence(seed, spawn_key=(TRACE_STREAMS["workload"],))
    ).integers(0, len(names), size=count)
    times = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(TRACE_STREAMS["time"],))).uniform(
        *TRACE_TIME_RANGE_S, size=count
    )
    rows = np.empty(0, dtype=np.int64)
    for i in range(count):
        if i % size == 0:
            rows = order_rng.permutation(size)
        row = int(rows[i % size])
        name = names[int(workload_draws[i])]
        template, per_epoch = templates[name]
        time_s = round(float(times[i]), 1)
        time_s = min(max(time_s, TRACE_TIME_RANGE_S[0]), TRACE_TIME_RANGE_S[1])
        q = float(quantile[row])
        share = TRACE_MIN_SHARE ** (1 - q) * TRACE_MAX_SHARE**q
        epochs = round_sig(share * time_s / per_epoch, 4)
        job = dict(template)
        job["name"] = f"trace-{i:06d}"
        job["notes"] = (
            f"philly job {row} (runtime {values[row]:g} s, rank quantile {q:.4f}); "
            f"epochs = {share:.4g} x T_o / {per_epoch:.4g} s per epoch"
        )
        job["workload"] = dict(template["workload"], epochs=epochs)
        job["slo"] = {"time_s": time_s}
        yield job
