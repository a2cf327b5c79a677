"""The reference trainer's emulated PS link as a queue: why a lone slow worker costs more than eqs. (8)-(9) say.

The reference job's PS (dnnprov.training.ps) serves its emulated link first come, first
served: each answer holds the one link for 2 S_parm / B_ps job seconds while the others
queue. Eqs. (8)-(9) price the contention by the worker count |N| alone (every worker's
B_wk is the same), so the model gives 3 x p3.2xlarge + 1 x p2.xlarge and 4 x p3.2xlarge
the same communication time per iteration. This script replays the link as a
discrete-event simulation (deterministic GPU waits, the link held 2 S_parm / B_ps, the
rest of a lone worker's communication time outside it) and prints, per run folder of
``real_training.py`` (its workers' ``timing_*.json``), the measured time per update T_exp
and communication per type beside the simulation's and the model's (eqs. 2, 6-9 with the
profile's fit)::

    python benchmarks/link_queue.py --profile-json FILE RUN_DIR...

Contract: the simulation's T_exp within 10 % of every run's measured one (exit 1
otherwise): then the queue, not the runs' noise, is what the model leaves out.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

SIMULATED_S = 50_000.0  # job seconds simulated per cluster
CONTRACT = 0.10  # the simulation's T_exp within this of the measured one


def simulate(compute_s: list[float], hold_s: float, outside_s: float) -> tuple[float, list[float]]:
    """T_exp and each worker's mean communication time on a first-come-first-served link.

    Worker i computes for ``compute_s[i]``, then its push reaches the link ``outside_s``
    later, waits for it, holds it ``hold_s``; its next iteration starts when the answer is
    back. Workers start 10 ms apart (as the launcher starts them, one after the other).
    """
    events = [(0.01 * i + c, i) for i, c in enumerate(compute_s)]
    heapq.heapify(events)
    free, done = 0.0, [0] * len(compute_s)
    comm = [0.0] * len(compute_s)
    while events:
        ready, i = heapq.heappop(events)
        if ready > SIMULATED_S:
            break
        start = max(ready + outside_s, free)
        free = start + hold_s
        done[i] += 1
        comm[i] += free - ready
        heapq.heappush(events, (free + compute_s[i], i))
    return SIMULATED_S / sum(done), [c / max(n, 1) for c, n in zip(comm, done)]


def read_run(folder: Path) -> tuple[Counter[str], float, dict[str, float]]:
    """A run's cluster, measured T_exp (1 / sum 1 / T^i) and mean communication time per type."""
    timings = [json.loads(p.read_text()) for p in sorted(folder.glob("timing_*.json"))]
    counts = Counter(t["type"] for t in timings)
    t_exp = 1 / sum(1 / t["iteration_s"] for t in timings)
    comm = {k: sum(t["comm_s"] for t in timings if t["type"] == k) / n for k, n in counts.items()}
    return counts, t_exp, comm


def main(argv: list[str] | None = None) -> int:
    from dnnprov.io.instances import problem_from_dict
    from dnnprov.models.predict import predict
    from dnnprov.training import reference as ref
    from dnnprov.training.job import Job

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile-json", required=True, help="a profile real_training.py --json wrote")
    parser.add_argument("runs", nargs="+", type=Path, help="run folders holding the workers' timing_*.json")
    args = parser.parse_args(argv)
    try:
        data: dict[str, Any] = json.loads(Path(args.profile_json).read_text())
        job = Job(**data["job"])
        fits, compute = data["fits"]["cc"], data["compute_s"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        parser.error(f"--profile-json: not a profile real_training.py --json wrote ({e})")
    for folder in args.runs:
        if not any(folder.glob("timing_*.json")):
            parser.error(f"{folder}: no timing_*.json (a run folder of real_training.py)")
    timing = data.get("timing")
    if not timing or job.ps_bandwidth_mb_s <= 0:
        print("link_queue: the profile has no emulated PS link (profiled with --no-link): nothing to queue")
        return 1
    hold = job.transfer_s(job.ps_bandwidth_mb_s)
    lone = 2 * job.param_size_mb / timing["bandwidth_req_mb_s"]["value"]  # a lone worker's communication
    outside = max(lone - hold, 0.0)
    profile = ref.Profile(fits, compute, data.get("comm_s", 0.0), (), timing)
    problem = problem_from_dict(ref.instance_dict(profile, job, deadline_s=1e9, extrapolation=2.0))
    print(
        f"link held {hold:.2f} s per answer (2 S_parm / B_ps), {outside:.2f} s outside it (a lone worker: "
        f"{lone:.2f} s); GPU waits {', '.join(f'{k} {t.compute_s:g} s' for k, t in ref.REFERENCE_TYPES.items())}"
    )
    print(
        f"{'run':<22} {'cluster':<26} {'T_exp meas':>10} {'sim':>6} {'err':>6} {'eqs.8-9':>7} {'err':>6}"
        "   communication per type: measured / simulated / eqs. 8-9"
    )
    worst = 0.0
    for folder in args.runs:
        counts, measured, comm = read_run(folder)
        workers = [k for k, n in sorted(counts.items()) for _ in range(n)]
        simulated, sim_comm = simulate([ref.REFERENCE_TYPES[k].compute_s for k in workers], hold, outside)
        prediction = predict(problem, counts=dict(counts))
        model = 1 / float(prediction["iteration_rate_per_s"])
        times = prediction["iteration_time_s"]  # T^i of eq. (6) per column (the spot columns: the type names)
        model_comm = {k: float(times[k]) - float(compute[k]) for k in counts if k in times}
        by_type = {k: sum(c for w, c in zip(workers, sim_comm) if w == k) / counts[k] for k in counts}
        worst = max(worst, abs(simulated / measured - 1))
        per_type = ", ".join(
            f"{k} {comm[k]:.2f} / {by_type[k]:.2f} / {model_comm.get(k, math.nan):.2f}" for k in sorted(counts)
        )
        print(
            f"{folder.parent.parent.name + '/' + folder.name:<22} {ref.cluster_name(dict(sorted(counts.items(), reverse=True))):<26} "
            f"{measured:>10.3f} {simulated:>6.3f} {100 * (simulated / measured - 1):>5.1f}% {model:>7.3f} "
            f"{100 * (model / measured - 1):>5.1f}%   {per_type}"
        )
    print(f"simulation vs measured T_exp: worst {100 * worst:.1f} % (contract {100 * CONTRACT:g} %)")
    return 0 if worst <= CONTRACT else 1


if __name__ == "__main__":
    sys.exit(main())
