"""The loop against the EC2 twin and the loop on the trace cloud tell the same story (issue 28).

For three aligned real trace sets (us-west-2 zones of skypilot-org/spot-traces: the 16-node
V100 traces of 2023-08-27, the 1-node V100 traces of 2023-02-15 and of 2022-10-26), windows
drawn in the held-out second half of each set (mpc fits its availability model on the first
half), and every policy, each window is run twice: through boto3 against a stepped EC2 twin
over moto (:func:`dnnprov.control.twin_replay.run_on_twin`, what ``dnnprov run`` does) and on
the trace cloud (:func:`dnnprov.control.replay.run_once`, what ``simulate``
does). The contract: the same deadline outcome on every window, cost within 2 %, and the
same launches, refusals, notices, reclaims and terminations at the same times.

The job: ResNet-110 on p3.2xlarge (paper model, tests/control/test_loop.py's ``problem()``):
2 workers train 0.5 h, deadline 0.75 h, spot $0.918/h, on-demand $3.06/h, PS $0.192/h.

    python benchmarks/twin_agreement.py [--windows 20] [--seed 0] [--policies none,failover,...]

Prints one row per set and policy and the totals; exits 1 when a window disagrees (unless
``--allow-miss``), 2 when ../shared/data is absent (0 with ``--allow-skip``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from control.test_loop import PLAN, problem  # noqa: E402

from dnnprov.control.loop import RunSettings  # noqa: E402
from dnnprov.control.replay import loop_policy_factory, run_once, window_starts  # noqa: E402
from dnnprov.control.twin_replay import run_on_twin, story  # noqa: E402
from dnnprov.problems.interruption import load_trace  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "spot-traces" / "availability"
SETS = {
    "16-node 2023-08-27": ("16-node/aws-08-27-2023", ("us-west-2a", "us-west-2c")),
    "1-node 2023-02-15": ("1-node/aws-02-15-2023", ("us-west-2a", "us-west-2b", "us-west-2c")),
    "1-node 2022-10-26": ("1-node/aws-10-26-2022", ("us-west-2a", "us-west-2b")),
}
POLICIES = ("none", "fallback", "failover", "uniform-progress", "mpc")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=20, help="windows per trace set (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--allow-miss", action="store_true")
    parser.add_argument("--allow-skip", action="store_true")
    args = parser.parse_args(argv)
    if not DATA.is_dir():
        print(f"skipped: {DATA} is absent (the real spot traces)")
        return 0 if args.allow_skip else 2
    os.environ.update(AWS_ACCESS_KEY_ID="AKIAIOSFODNN7EXAMPLE", AWS_SECRET_ACCESS_KEY="twin", AWS_EC2_METADATA_DISABLED="true")
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from moto.server import ThreadedMotoServer

    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    upstream = f"http://{host}:{port}"
    prob, settings = problem(), RunSettings(horizon=1.0)
    rng = np.random.default_rng(args.seed)
    bad = total = 0
    started = time.process_time()
    print("| set | policy | windows | same story | same outcome | cost within 2 % | met (twin) | cost mean (twin) |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for name, (folder, zones) in SETS.items():
            traces = {"p3.2xlarge": [load_trace(DATA / folder / f"{z}_v100_1.json") for z in zones]}
            low, high = window_starts(traces, settings.horizon * prob.slo.time_s + settings.poll_s, (0.5, 1.0))
            offsets = [int(o) for o in rng.integers(low, high, args.windows)]
            for policy in args.policies.split(","):
                factory = loop_policy_factory(prob, PLAN, traces, policy, join_s=settings.join_s,
                                              horizon=settings.horizon, fit_period=(0.0, 0.5))
                same_story = same_outcome = close = met = 0
                costs = []
                for k, offset in enumerate(offsets):
                    replay = run_once(prob, PLAN, traces, factory(), offset, settings)
                    twin = run_on_twin(prob, PLAN, traces, factory, offset, settings, upstream=upstream,
                                       region="us-west-2", run_id=f"w{k}")
                    same_story += story(twin) == story(replay)
                    same_outcome += twin.outcome.state == replay.outcome.state
                    close += abs(twin.outcome.cost - replay.outcome.cost) <= 0.02 * max(replay.outcome.cost, 1e-12)
                    met += twin.outcome.met_deadline
                    costs.append(twin.outcome.cost)
                    total += 1
                    if not (story(twin) == story(replay) and twin.outcome.state == replay.outcome.state):
                        bad += 1
                        print(f"  disagree: {name} {policy} offset {offset}: twin {twin.outcome.to_dict()} "
                              f"replay {replay.outcome.to_dict()}", file=sys.stderr)
                n = len(offsets)
                print(f"| {name} | {policy} | {n} | {same_story}/{n} | {same_outcome}/{n} | {close}/{n} | "
                      f"{100 * met / n:.0f} % | {np.mean(costs):.4f} |")
    finally:
        moto.stop()
    print(f"\n{total} windows, {bad} disagreeing; {time.process_time() - started:.0f} CPU s in this process")
    return 1 if bad and not args.allow_miss else 0


if __name__ == "__main__":
    sys.exit(main())
