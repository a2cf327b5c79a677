"""One run of the loop through boto3 against the EC2 twin, from a trace offset.

The same window as :func:`dnnprov.control.replay.run_once` (the same pools, offset, policy and
settings), but every launch, notice, reclaim and termination goes over HTTP through the twin
to moto's EC2, on the twin's stepped clock: what ``dnnprov run`` does against the twin. The
two runs tell the same story (tests/control/test_twin_agreement.py, benchmarks/twin_agreement.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dnnprov.control.clouds.ec2 import Ec2Cloud, RemoteTwinClock
from dnnprov.control.loop import Controller, PoolInfo, RunSettings
from dnnprov.control.replay import LoopRun, trace_pools
from dnnprov.control.trainer import ProgressModel, stand_in
from dnnprov.control.twin.server import Twin
from dnnprov.problems.interruption import Trace
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import SpotPlan
from dnnprov.revocation.policy_view import Policy


def run_on_twin(
    problem: SpotProblem,
    plan: SpotPlan,
    traces: Mapping[str, Sequence[Trace]],
    make_policy: Callable[[], Policy],
    offset: int,
    settings: RunSettings,
    *,
    upstream: str | None,
    region: str,
    run_id: str = "twin-run",
    record: Any = None,
) -> LoopRun:
    """Run the window at ``offset`` on a fresh stepped twin in front of ``upstream`` (moto)."""
    pools = trace_pools(problem, traces, offset)
    with Twin(pools, upstream=upstream, mode="stepped", region=region) as twin:
        clock = RemoteTwinClock(twin.url)
        cloud = Ec2Cloud(
            region, start_epoch=clock.now(), endpoint_url=twin.url, clock=clock, zones=[p.zone for p in pools if p.zone]
        )
        policy = make_policy()
        controller = Controller(
            problem,
            plan,
            policy,
            cloud,
            run_id=run_id,
            pools=[PoolInfo(p.type_name, p.zone, p.price_per_h) for p in pools],
            trainer=stand_in(ProgressModel(problem, plan, settings.join_s, policy.up_to_quota), run_id),
            settings=settings,
            record=record,
        )
        outcome = controller.run()
        return LoopRun(offset=offset, outcome=outcome, events=tuple(sorted(controller.events, key=lambda e: e.time_s)))


def story(run: LoopRun) -> list[tuple[Any, ...]]:
    """What two runs of one window must share: every launch, refusal, notice, reclaim and
    termination with its time (ms) and pool, instance ids left out (they differ by cloud)."""
    out: list[tuple[Any, ...]] = []
    for e in run.events:
        if e.kind in ("launch", "refused"):
            out.append(
                (e.kind, round(e.time_s, 3), e.detail["pool"], e.detail["role"], e.detail["asked"], e.detail.get("got"))
            )
        elif e.kind in ("notice", "reclaim"):
            out.append((e.kind, round(e.time_s, 3), e.detail["pool"]))
        elif e.kind == "terminate":
            out.append((e.kind, round(e.time_s, 3), e.detail["instances"], e.detail["why"]))
    return sorted(out, key=repr)
