"""``dnnprov run``: launch a plan and keep it training to its target loss (docs/control.md).

    dnnprov run INSTANCE --plan PLAN --policy P [--endpoint-url URL] [--region R] [--state DIR] [--json]
    dnnprov run SERVERLESS-INSTANCE --plan PLAN [--lambda-endpoint-url URL] [--endpoint-url URL] [--function F]
    dnnprov run status RUN [--state DIR] [--json]
    dnnprov run cancel RUN [--state DIR]
    dnnprov run resume RUN [--state DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import closing
from typing import Any

from dnnprov.cli.risk import _spot_instance
from dnnprov.errors import InvalidInputError

VERBS = ("status", "cancel", "resume")
EXIT_OK, EXIT_MISSED = 0, 1


def _record(args: argparse.Namespace) -> Any:
    from dnnprov.control.record import RunRecord

    return RunRecord(args.state)


def _controller(record: Any, run_id: str, spec: dict[str, Any]) -> tuple[Any, Any]:
    """The controller and cloud of a recorded run (fresh or resumed)."""
    from dnnprov.control.cloud import Instance
    from dnnprov.control.ec2 import Ec2Cloud, RemoteTwinClock
    from dnnprov.control.loop import Controller, PoolInfo, RunSettings
    from dnnprov.control.trainer import ProgressModel, read_report, stand_in
    from dnnprov.result import SpotPlan
    from dnnprov.revocation.policies import make_policy

    problem = _spot_instance(spec["instance"])
    plan = SpotPlan(counts={k: int(v) for k, v in spec["plan"]["counts"].items()}, ps=int(spec["plan"]["ps"]))
    settings = RunSettings(**spec["settings"])
    known = record.instances(run_id)
    clock = RemoteTwinClock(spec["endpoint_url"]) if spec.get("twin") else None
    cloud = Ec2Cloud(spec["region"], start_epoch=spec["start_epoch"], endpoint_url=spec.get("endpoint_url"),
                     clock=clock, image_id=spec["image_id"], known=known)
    pools = [PoolInfo(t.name, z.zone, z.spot_price_per_h if z.spot_price_per_h is not None else t.spot_price_per_h)
             for t in problem.instance_types for z in t.zones] or \
            [PoolInfo(t.name, None, t.spot_price_per_h) for t in problem.instance_types]
    if spec["progress"] == "model":
        trainer = stand_in(ProgressModel(problem, plan, settings.join_s), run_id)
    else:
        def trainer(instances: list[Instance], now: float) -> Any:
            return read_report(spec["progress"])
    controller = Controller(problem, plan, make_policy(spec["policy"], problem=problem, plan=plan), cloud, run_id=run_id, pools=pools,
                            trainer=trainer, settings=settings, record=record)
    return controller, cloud


def _drive(record: Any, run_id: str, controller: Any, max_polls: int | None) -> Any:
    """Poll until the run ends (or ``max_polls``), honouring a cancel written to the record."""
    polls = 0
    while True:
        if record.get(run_id)["state"] == "cancelling":
            controller.cancel()
        outcome = controller.poll()
        if outcome is not None:
            record.set_state(run_id, outcome.state, outcome.to_dict())
            return outcome
        polls += 1
        if max_polls is not None and polls >= max_polls:
            return None
        controller.cloud.sleep(controller.settings.poll_s)


def _print_outcome(run_id: str, outcome: Any, as_json: bool) -> int:
    if outcome is None:
        print(json.dumps({"run": run_id, "state": "running"}) if as_json else f"{run_id}: still running")
        return EXIT_OK
    if as_json:
        print(json.dumps({"run": run_id, **outcome.to_dict()}, indent=2))
    else:
        finish = "not reached" if outcome.finish_s is None else f"{outcome.finish_s:.0f} s"
        print(f"{run_id}: {outcome.state}: target loss at {finish}, cost ${outcome.cost:.4f}, "
              f"{outcome.revocations} revocations, {outcome.launches} instances launched")
    return EXIT_OK if outcome.state == "met" else EXIT_MISSED


def _serverless_outcome(run_id: str, outcome: Any, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"run": run_id, **outcome.to_dict()}, indent=2))
    else:
        finish = "not reached" if outcome.finish_s is None else f"{outcome.finish_s:.0f} s"
        print(f"{run_id}: {outcome.state}: target at {finish}, {outcome.restarts} restarts, "
              f"{outcome.invocations} invocations, cost ${outcome.cost:.4f}"
              + "".join(f"\n  error: {e}" for e in outcome.errors))
    return EXIT_OK if outcome.state == "met" else EXIT_MISSED


def cmd_start_serverless(args: argparse.Namespace, problem: Any) -> int:
    """Create a serverless run and drive it (dnnprov/control/serverless.py)."""
    from dnnprov.cloud.export import load_plan
    from dnnprov.control.serverless import DEFAULT_FUNCTION, run_serverless
    from dnnprov.result import ServerlessPlan

    if args.progress != "model":
        raise InvalidInputError("--progress", "a serverless run reads progress from its functions' answers")
    doc = load_plan(args.plan, problem=problem)
    plan = doc.result["plan"]
    local_batch = plan.get("local_batch")
    if local_batch is None:
        from dnnprov.models.serverless import ServerlessModel
        local_batch = float(ServerlessModel(problem).local_batch([plan["functions"]])[0])
    run_id, outcome = run_serverless(problem, ServerlessPlan(functions=int(plan["functions"]),
                                                             memory_mb=int(plan["memory_mb"]),
                                                             local_batch=float(local_batch), ps=int(plan.get("ps", 1))),
                                     lambda_endpoint_url=args.lambda_endpoint_url, endpoint_url=args.endpoint_url,
                                     region=args.region, state=args.state, run_id=args.run_id,
                                     function=args.function or DEFAULT_FUNCTION, image_id=args.image_id, horizon=args.horizon,
                                     stop_after=args.max_polls)
    return _serverless_outcome(run_id, outcome, args.json)


def cmd_start(args: argparse.Namespace) -> int:
    """Create a run in the record and drive it."""
    from dnnprov.cloud.aws import check_region
    from dnnprov.cloud.export import load_plan
    from dnnprov.control.ec2 import PLACEHOLDER_IMAGE, RemoteTwinClock, is_twin
    from dnnprov.control.loop import RunSettings
    from dnnprov.io.instances import embedded_instance, read_instance
    from dnnprov.problems.serverless import ServerlessProblem
    from dnnprov.revocation.policies import POLICY_NAMES

    if args.plan is None:
        raise InvalidInputError("--plan", "required to start a run")
    if args.policy not in POLICY_NAMES:
        raise InvalidInputError("--policy", f"must be one of {', '.join(POLICY_NAMES)}; got {args.policy!r}")
    path = str(embedded_instance(args.target.removeprefix("embedded:"))) if args.target.startswith("embedded:") else args.target
    problem = read_instance(path)
    if isinstance(problem, ServerlessProblem):
        return cmd_start_serverless(args, problem)
    if args.lambda_endpoint_url is not None or args.function is not None:
        raise InvalidInputError("--lambda-endpoint-url", "--lambda-endpoint-url and --function are for serverless instances")
    problem = _spot_instance(args.target)
    doc = load_plan(args.plan, problem=problem)
    settings = RunSettings(poll_s=args.poll, join_s=args.join, horizon=args.horizon)
    if args.cloud != "ec2":                        # the reference trainer on local processes (docs/training.md)
        from dnnprov.result import SpotPlan
        from dnnprov.training.local_cloud import cli_run

        return _print_outcome(*cli_run(problem, SpotPlan(counts=doc.counts(), ps=doc.ps), args.policy, settings,
                                       args.cloud, run_id=args.run_id, max_polls=args.max_polls), args.json)
    twin = is_twin(args.endpoint_url)
    if not twin and args.progress == "model" and not args.endpoint_url:
        raise InvalidInputError("--progress", "the stand-in trainer (model) runs only against a test endpoint "
                                              "(--endpoint-url): on AWS give the trainer's report file or URL")
    clock_now = RemoteTwinClock(args.endpoint_url).now() if twin else time.time()
    spec = {"instance": args.target, "plan": {"counts": doc.counts(), "ps": doc.ps}, "policy": args.policy,
            "region": check_region(args.region), "endpoint_url": args.endpoint_url, "twin": twin,
            "image_id": args.image_id or PLACEHOLDER_IMAGE, "progress": args.progress,
            "settings": settings.to_dict(), "start_epoch": clock_now}
    with closing(_record(args)) as record:
        run_id = record.create(spec, args.run_id)
        record.lock(run_id)
        controller, cloud = _controller(record, run_id, spec)
        cloud.instances(run_id)                    # clients made and endpoint reached before the clock starts
        spec["start_epoch"] = cloud.start_epoch = cloud.clock.now()
        record.set_spec(run_id, spec)
        print(json.dumps({"run": run_id, "state": "running"}) if args.json else f"run {run_id} started",
              file=sys.stderr)
        return _print_outcome(run_id, _drive(record, run_id, controller, args.max_polls), args.json)


def cmd_resume(args: argparse.Namespace) -> int:
    """Take a run over again after its controller stopped (adopt, re-send, go on)."""
    with closing(_record(args)) as record:
        row = record.get(args.run_id)
        if row["state"] not in ("running", "cancelling"):
            return _status(record, args.run_id, args.json)
        if row["spec"].get("kind") == "serverless":
            from dnnprov.control.serverless import ServerlessRun

            record.lock(args.run_id)
            return _serverless_outcome(args.run_id, ServerlessRun(record, args.run_id).drive(stop_after=args.max_polls), args.json)
        record.lock(args.run_id)
        controller, _ = _controller(record, args.run_id, row["spec"])
        controller.resume(record.steps(args.run_id), list(record.events(args.run_id)), record.memory(args.run_id))
        return _print_outcome(args.run_id, _drive(record, args.run_id, controller, args.max_polls), args.json)


def cmd_cancel(args: argparse.Namespace) -> int:
    """Ask the run's controller to tear down; with none alive, tear down here."""
    with closing(_record(args)) as record:
        row = record.get(args.run_id)
        if row["state"] not in ("running", "cancelling"):
            print(f"{args.run_id}: already ended ({row['state']})")
            return EXIT_OK
        record.set_state(args.run_id, "cancelling")
        try:
            record.lock(args.run_id)
        except InvalidInputError:
            print(f"{args.run_id}: cancel requested; its controller tears it down at its next poll")
            return EXIT_OK
        if row["spec"].get("kind") == "serverless":
            from dnnprov.control.serverless import ServerlessRun

            outcome = ServerlessRun(record, args.run_id).cancel()
            print(f"{args.run_id}: cancelled, {outcome.cost:.4f} $ spent")
            return EXIT_OK
        controller, _ = _controller(record, args.run_id, row["spec"])
        controller.resume(record.steps(args.run_id), list(record.events(args.run_id)), record.memory(args.run_id))
        controller.cancel()
        outcome = _drive(record, args.run_id, controller, 1)
        print(f"{args.run_id}: cancelled, {0 if outcome is None else outcome.cost:.4f} $ spent")
        return EXIT_OK


def _status(record: Any, run_id: str, as_json: bool) -> int:
    row = record.get(run_id)
    events = list(record.events(run_id))
    held: dict[str, int] = {}
    for i in record.instances(run_id):
        if i.ended_s is not None:
            continue
        key = f"{i.role} {i.pool} {i.market}"
        held[key] = held.get(key, 0) + 1
    status = {"run": run_id, "state": row["state"], "held": held, "outcome": row["outcome"],
              "policy": row["spec"].get("policy"), "events": events}
    progress = [e for e in events if e["kind"] == "end"]
    status["progress"] = ({"loss": progress[-1]["loss"], "finish_s": progress[-1]["finish_s"]} if progress else None)
    status["cost_so_far"] = row["outcome"]["cost"] if row["outcome"] else None
    if row["spec"].get("kind") == "serverless":
        status["kind"] = "serverless"
        status["plan"] = row["spec"]["plan"]
    if as_json:
        print(json.dumps(status, indent=2))
    else:
        print(f"{run_id}: {row['state']} ({row['spec'].get('policy', 'serverless')}), held {held or 'nothing'}, "
              f"{len(events)} events")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    """Dispatch ``run INSTANCE`` / ``run status|cancel|resume RUN``."""
    if args.target in VERBS:
        if args.run_id is None:
            raise InvalidInputError("RUN", f"`dnnprov run {args.target}` needs a run id")
        if args.target == "status":
            with closing(_record(args)) as record:
                return _status(record, args.run_id, args.json)
        return cmd_cancel(args) if args.target == "cancel" else cmd_resume(args)
    if args.run_id is not None and args.run_id_option is None:
        raise InvalidInputError(args.run_id, "unexpected argument (did you mean --run-id?)")
    args.run_id = args.run_id_option
    return cmd_start(args)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``run``."""
    from dnnprov.solvers.robust import JOIN_OVERHEAD_S

    p = sub.add_parser("run", help="launch a spot or serverless plan and keep it training to its target loss",
                       description="dnnprov run INSTANCE --plan PLAN --policy P, or run status|cancel|resume RUN")
    p.add_argument("target", metavar="INSTANCE|status|cancel|resume", help="the spot instance, or a verb")
    p.add_argument("run_id", nargs="?", default=None, metavar="RUN", help="the run (with a verb)")
    p.add_argument("--plan", help="plan document or `dnnprov solve --json` output")
    p.add_argument("--policy", default="failover", help="launch policy: none, replan, fallback, failover, uniform-progress")
    p.add_argument("--endpoint-url", default=None, help="EC2 endpoint (a local test server or the twin)")
    p.add_argument("--lambda-endpoint-url", default=None,
                   help="Lambda endpoint of a serverless run (e.g. the Lambda twin, dnnprov.control.lambda_twin)")
    p.add_argument("--function", default=None,
                   help="the deployed worker function of a serverless run (default dnnprov-worker)")
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--state", default=".dnnprov-runs", help="folder of the run record (default %(default)s)")
    p.add_argument("--progress", default="model",
                   help="where the trainer reports progress: a file, an http(s) URL, or `model` (the stand-in "
                        "trainer of the tests, only with --endpoint-url)")
    p.add_argument("--image-id", default=None, help="AMI of the instances (required on AWS)")
    p.add_argument("--run-id", dest="run_id_option", default=None, help="name the run (default: a fresh id)")
    p.add_argument("--poll", type=float, default=15.0, help="seconds between polls (default %(default)g)")
    p.add_argument("--join", type=float, default=JOIN_OVERHEAD_S, help="seconds before a launched worker trains")
    p.add_argument("--horizon", type=float, default=1.0,
                   help="give up at this multiple of the deadline (default %(default)g: at the deadline)")
    p.add_argument("--max-polls", type=int, default=None,
                   help="stop controlling after N polls (the run goes on); serverless: after N segment attempts")
    p.add_argument("--cloud", default="ec2", metavar="ec2|local|local:CONFIG",
                   help="ec2 (default), or local: the reference trainer's processes as instances (docs/training.md)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=cmd_run)
