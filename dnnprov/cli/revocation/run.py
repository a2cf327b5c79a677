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
from typing import Any

from dnnprov.cli.revocation.risk import spot_instance_arg
from dnnprov.errors import InvalidInputError

VERBS = ("status", "cancel", "resume")
EXIT_OK, EXIT_MISSED = 0, 1


def _print_outcome(run_id: str, outcome: Any, as_json: bool) -> int:
    if outcome is None:
        print(json.dumps({"run": run_id, "state": "running"}) if as_json else f"{run_id}: still running")
        return EXIT_OK
    if as_json:
        print(json.dumps({"run": run_id, **outcome.to_dict()}, indent=2))
    else:
        finish = "not reached" if outcome.finish_s is None else f"{outcome.finish_s:.0f} s"
        print(
            f"{run_id}: {outcome.state}: target loss at {finish}, cost ${outcome.cost:.4f}, "
            f"{outcome.revocations} revocations, {outcome.launches} instances launched"
        )
    return EXIT_OK if outcome.state == "met" else EXIT_MISSED


#: The launch policy of a spot run that names none.
DEFAULT_POLICY = "failover"


def _serverless_outcome(run_id: str, outcome: Any, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"run": run_id, **outcome.to_dict()}, indent=2))
    else:
        finish = "target not reached" if outcome.finish_s is None else f"target at {outcome.finish_s:.0f} s"
        print(
            f"{run_id}: {outcome.state}: {finish}, {outcome.restarts} restarts, "
            f"{outcome.invocations} invocations, cost ${outcome.cost:.4f}"
            + "".join(f"\n  error: {e}" for e in outcome.errors)
        )
    return EXIT_OK if outcome.state in ("met", "running") else EXIT_MISSED  # running: stopped by --max-polls


def cmd_start_serverless(args: argparse.Namespace, problem: Any) -> int:
    """Create a serverless run and drive it (dnnprov/control/serverless.py)."""
    from dnnprov.cloud.export import load_plan
    from dnnprov.control.serverless import DEFAULT_FUNCTION, run_serverless
    from dnnprov.result import ServerlessPlan

    if args.progress != "model":
        raise InvalidInputError("--progress", "a serverless run reads progress from its functions' answers")
    if args.policy is not None or args.model is not None:
        raise InvalidInputError(
            "--policy" if args.policy is not None else "--model",
            "a serverless run has no launch policy: its functions are invoked segment by segment",
        )
    doc = load_plan(args.plan, problem=problem)
    plan = doc.result["plan"]
    local_batch = plan.get("local_batch")
    if local_batch is None:
        import numpy as np

        from dnnprov.models.serverless import ServerlessModel

        local_batch = float(ServerlessModel(problem).local_batch(np.array([plan["functions"]]))[0])
    run_id, outcome = run_serverless(
        problem,
        ServerlessPlan(
            functions=int(plan["functions"]),
            memory_mb=int(plan["memory_mb"]),
            local_batch=float(local_batch),
            ps=int(plan.get("ps", 1)),
        ),
        lambda_endpoint_url=args.lambda_endpoint_url,
        endpoint_url=args.endpoint_url,
        region=args.region or "us-east-1",
        state=args.state,
        run_id=args.run_id,
        function=DEFAULT_FUNCTION if args.function is None else args.function,
        image_id=args.image_id,
        horizon=args.horizon,
        stop_after=args.max_polls,
    )
    return _serverless_outcome(run_id, outcome, args.json)


def cmd_start(args: argparse.Namespace) -> int:
    """Create a run in the record and drive it."""
    from dnnprov.control.api import check_policy, create_run, drive_run
    from dnnprov.control.loop import RunSettings
    from dnnprov.io.instances import embedded_instance, read_instance
    from dnnprov.problems.serverless import ServerlessProblem

    if args.plan is None:
        raise InvalidInputError("--plan", "required to start a run")
    policy = args.policy or DEFAULT_POLICY
    check_policy(policy, args.model)
    path = (
        str(embedded_instance(args.target.removeprefix("embedded:")))
        if args.target.startswith("embedded:")
        else args.target
    )
    problem = read_instance(path)
    if isinstance(problem, ServerlessProblem):
        return cmd_start_serverless(args, problem)
    if args.lambda_endpoint_url is not None or args.function is not None:
        raise InvalidInputError(
            "--lambda-endpoint-url", "--lambda-endpoint-url and --function are for serverless instances"
        )
    problem = spot_instance_arg(args.target)
    try:
        settings = RunSettings(poll_s=args.poll, join_s=args.join, horizon=args.horizon)
    except InvalidInputError as exc:  # named by the options the user gave
        option = {"poll_s": "--poll", "join_s": "--join", "horizon": "--horizon"}.get(exc.field, exc.field)
        raise InvalidInputError(option, exc.problem) from None
    if args.cloud != "ec2":  # the reference trainer on local processes (docs/training.md)
        from dnnprov.cloud.export import load_plan
        from dnnprov.result import SpotPlan
        from dnnprov.training.local_cloud import cli_run

        doc = load_plan(args.plan, problem=problem)
        return _print_outcome(
            *cli_run(
                problem,
                SpotPlan(counts=doc.counts(), ps=doc.ps),
                policy,
                settings,
                args.cloud,
                run_id=args.run_id,
                max_polls=args.max_polls,
                model=args.model,
            ),
            args.json,
        )
    run_id = create_run(
        problem,
        args.plan,
        policy,
        endpoint_url=args.endpoint_url,
        region=args.region,
        state=args.state,
        progress=args.progress,
        image_id=args.image_id,
        run_id=args.run_id,
        settings=settings,
        model=args.model,
    )
    print(json.dumps({"run": run_id, "state": "running"}) if args.json else f"run {run_id} started", file=sys.stderr)
    return _print_outcome(run_id, drive_run(run_id, state=args.state, max_polls=args.max_polls), args.json)


def cmd_resume(args: argparse.Namespace) -> int:
    """Take a run over again after its controller stopped (adopt, re-send, go on)."""
    from dnnprov.control.api import LIVE, resume_run, run_status

    status = run_status(args.run_id, state=args.state, events=False)
    if status["state"] not in LIVE:
        return _status(args.run_id, args.state, args.json)
    outcome = resume_run(args.run_id, state=args.state, max_polls=args.max_polls)
    if status.get("kind") == "serverless":
        return _serverless_outcome(args.run_id, outcome, args.json)
    return _print_outcome(args.run_id, outcome, args.json)


def cmd_cancel(args: argparse.Namespace) -> int:
    """Ask the run's controller to tear down; with none alive, tear down here."""
    from dnnprov.control.api import cancel_run

    done = cancel_run(args.run_id, state=args.state)
    if done["state"] != "cancelling" and not done["torn_down"]:  # it had ended (a cancel before it too)
        print(f"{args.run_id}: already ended ({done['state']})")
    elif not done["torn_down"]:
        print(f"{args.run_id}: cancel requested; its controller tears it down at its next poll")
    else:
        print(f"{args.run_id}: cancelled, {done['cost'] or 0:.4f} $ spent")
    return EXIT_OK


def _status(run_id: str, state: str, as_json: bool) -> int:
    from dnnprov.control.api import run_status

    status = run_status(run_id, state=state)
    if as_json:
        print(json.dumps(status, indent=2))
    else:
        cost = "" if status["cost_so_far"] is None else f", ${status['cost_so_far']:.4f} so far"
        print(
            f"{run_id}: {status['state']} ({status.get('policy') or 'serverless'}), held {status['held'] or 'nothing'}"
            f"{cost}, {len(status['events'])} events"
        )
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    """Dispatch ``run INSTANCE`` / ``run status|cancel|resume RUN``."""
    if args.max_polls is not None and args.max_polls < 1:
        raise InvalidInputError("--max-polls", f"must be >= 1 (polls before this command stops), got {args.max_polls}")
    if args.target in VERBS:
        if args.run_id is None:
            raise InvalidInputError("RUN", f"`dnnprov run {args.target}` needs a run id")
        if args.target == "status":
            return _status(args.run_id, args.state, args.json)
        return cmd_cancel(args) if args.target == "cancel" else cmd_resume(args)
    if args.run_id is not None and args.run_id_option is None:
        raise InvalidInputError(args.run_id, "unexpected argument (did you mean --run-id?)")
    args.run_id = args.run_id_option
    return cmd_start(args)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``run``."""
    from dnnprov.control.loop import RunSettings

    p = sub.add_parser(
        "run",
        help="launch a spot or serverless plan and keep it training to its target loss",
        description="dnnprov run INSTANCE --plan PLAN --policy P, or run status|cancel|resume RUN",
    )
    p.add_argument("target", metavar="INSTANCE|status|cancel|resume", help="the spot instance, or a verb")
    p.add_argument("run_id", nargs="?", default=None, metavar="RUN", help="the run (with a verb)")
    p.add_argument("--plan", help="plan document or `dnnprov solve --json` output")
    p.add_argument(
        "--policy", help="launch policy: none, replan, fallback, failover, uniform-progress, mpc (default failover)"
    )
    p.add_argument(
        "--model", default=None, help="with --policy mpc: availability model (JSON) from risk fit --zones --out"
    )
    p.add_argument("--endpoint-url", default=None, help="EC2 endpoint (a local test server or the twin)")
    p.add_argument(
        "--lambda-endpoint-url",
        default=None,
        help="Lambda endpoint of a serverless run (e.g. the Lambda twin, dnnprov.control.twin.lambda_endpoint)",
    )
    p.add_argument(
        "--function", default=None, help="the deployed worker function of a serverless run (default dnnprov-worker)"
    )
    p.add_argument(
        "--region",
        default=None,
        help="the run's region, where the PS goes (default: the region holding most of a multi-region "
        "plan's worker GPUs, else us-east-1); a TYPE@REGION of the plan launches in its own region",
    )
    p.add_argument("--state", default=".dnnprov-runs", help="folder of the run record (default %(default)s)")
    p.add_argument(
        "--progress",
        default="model",
        help="where the trainer reports progress: a file, an http(s) URL, or `model` (the stand-in "
        "trainer of the tests, only with --endpoint-url)",
    )
    p.add_argument("--image-id", default=None, help="AMI of the instances (required on AWS)")
    p.add_argument("--run-id", dest="run_id_option", default=None, help="name the run (default: a fresh id)")
    p.add_argument("--poll", type=float, default=15.0, help="seconds between polls (default %(default)g)")
    p.add_argument(
        "--join",
        type=float,
        default=RunSettings.join_s,
        help="seconds before a launched worker trains (default %(default)g: the join overhead)",
    )
    p.add_argument(
        "--horizon",
        type=float,
        default=1.0,
        help="give up at this multiple of the deadline (default %(default)g: at the deadline)",
    )
    p.add_argument(
        "--max-polls",
        type=int,
        default=None,
        help="stop controlling after N polls (the run goes on); serverless: after N segment attempts",
    )
    p.add_argument(
        "--cloud",
        default="ec2",
        metavar="ec2|local|local:CONFIG",
        help="ec2 (default), or local: the reference trainer's processes as instances (docs/training.md)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=cmd_run)
