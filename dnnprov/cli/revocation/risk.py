"""Revocation subcommands: ``risk fit``, ``risk attach``, ``risk solve`` and ``simulate``.

    dnnprov risk fit TRACE... [--pool] [--time-limit S] [--json]
    dnnprov risk fit TRACE... --zones [--period A:B] [--cap K] [--out MODEL] [--time-limit S] [--json]
    dnnprov risk plan INSTANCE --trace TYPE=FILE... [--zones] [--fit-period A:B] [--time-limit S] [--json]
    dnnprov risk attach INSTANCE (--fit TYPE=TRACE | --bucket TYPE=B)... --out FILE
    dnnprov risk solve INSTANCE (--robust K [--no-replacement] | --risk) [--deadline-probability Q]
                       [--takeover-overhead S] [--lost-work S] [--replacement on-demand|spot]
                       [--method auto|enumerate|decompose] [--max-plans N] [--time-limit S] [--json]
    dnnprov simulate INSTANCE --plan PLAN --trace TYPE=FILE...
                     [--policy none|replan|fallback|failover|uniform-progress|mpc]
                     [--period A:B] [--fit-period A:B | --model MODEL] [--hindsight]
                     [--runs N] [--seed S] [--replan-method exact|heuristic] [--join S]
                     [--horizon X] [--poll S] [--time-limit S] [--per-run] [--json]

Registered in :data:`dnnprov.cli.COMMAND_GROUPS`. Exit codes: 0 success, 1 no plan,
2 bad input (one line naming the field).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from dnnprov.cli.common import (
    EXIT_NO_PLAN,
    EXIT_OK,
    check_time_limit,
    exit_code,
    output_file,
    solve_interruptibly,
    writing,
)
from dnnprov.errors import InvalidInputError
from dnnprov.io.instances import embedded_instance, read_instance, write_instance
from dnnprov.problems.interruption import (
    Trace,
    fit_trace,
    fit_traces,
    from_advisor_bucket,
    load_trace,
)
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import SpotPlan


def spot_instance_arg(value: str) -> SpotProblem:
    path = str(embedded_instance(value.removeprefix("embedded:"))) if value.startswith("embedded:") else value
    problem = read_instance(path)
    if not isinstance(problem, SpotProblem):
        raise InvalidInputError(value, "revocation-aware commands need a spot instance")
    return problem


def _pairs(option: str, values: list[str]) -> list[tuple[str, str]]:
    """``TYPE=VALUE`` options as pairs (the type may contain dots, the value is after the first '=')."""
    out = []
    for text in values:
        name, sep, value = text.partition("=")
        if not sep or not name or not value:
            raise InvalidInputError(option, f"expected TYPE=VALUE, got {text!r}")
        out.append((name, value))
    return out


def _time_limit_note(done: int, paths: list[str], time_limit_s: float, what: str) -> str:
    """The line saying which traces the time limit left out."""
    left = paths[done:]
    return (
        f"dnnprov: time limit of {time_limit_s:g} s reached after {done} of {len(paths)} traces: {what} "
        f"(not read: {', '.join(left[:3])}{', ...' if len(left) > 3 else ''})"
    )


def cmd_risk_fit(args: argparse.Namespace) -> int:
    """Fit the rate of loss and mean time to regain of each trace, or (``--zones``) the
    availability model of one type's aligned pools.

    ``--time-limit`` is checked between trace files: at the limit the fits done are printed,
    the traces left are named on standard error and the exit code is 1 (``--pool`` and
    ``--zones`` need every trace: no model then)."""
    check_time_limit(args.time_limit)
    if args.zones and args.pool:
        raise InvalidInputError("--pool", "--zones fits the aligned pools' availability model; --pool goes without it")
    if not args.zones:
        for option in ("out", "cap", "period"):
            if getattr(args, option) is not None:
                raise InvalidInputError(f"--{option}", "goes with --zones")
    if args.out is not None:
        output_file(args.out)
    started = time.perf_counter()
    traces: list[Trace] = []
    fits: list = []
    for path in args.traces:  # at least one file, then within the limit
        if traces and time.perf_counter() - started > args.time_limit:
            break
        traces.append(load_trace(path))
        if not (args.zones or args.pool):
            fits.append(fit_trace(traces[-1]))
    if len(traces) < len(args.traces) and (args.zones or args.pool):
        print(_time_limit_note(len(traces), args.traces, args.time_limit, "no model fitted"), file=sys.stderr)
        return EXIT_NO_PLAN
    if args.zones:
        from dnnprov.revocation.availability import fit_availability, parse_period

        model = fit_availability(
            traces, 16 if args.cap is None else args.cap, parse_period(args.period or "0:1"), where="TRACE"
        )
        text = json.dumps(model.to_dict(), indent=2)
        if args.out:
            with writing(args.out):
                Path(args.out).write_text(text + "\n")
        if args.json:
            print(text)
            return EXIT_OK
        print(model.source)
        print(f"  chance of k instances at launch (k = 0..{model.cap}): " + " ".join(f"{p:.3f}" for p in model.start))
        for zone, loss, regain in zip(model.zones, model.loss_sizes, model.regain_s):
            share = "-" if loss["mean_share_lost"] is None else f"{100 * loss['mean_share_lost']:.0f} %"
            whole = "-" if loss["all_lost"] is None else f"{100 * loss['all_lost']:.0f} %"
            back = "never" if regain is None else f"{regain / 60:.0f} min"
            print(
                f"  {zone}: {loss['events']} loss events, mean share lost {share}, all lost {whole}, mean regain {back}"
            )
        for i, zone in enumerate(model.zones):
            print(f"  correlation {zone}: " + " ".join(f"{c:+.2f}" for c in model.correlation[i]))
        return EXIT_OK
    if args.pool:
        fits = [fit_traces(traces)]
    stopped = len(traces) < len(args.traces)
    if stopped:
        print(
            _time_limit_note(len(fits), args.traces, args.time_limit, "the fits above are those done"), file=sys.stderr
        )
    if args.json:
        print(json.dumps([f.to_dict() for f in fits], indent=2))
        return EXIT_NO_PLAN if stopped else EXIT_OK
    for f in fits:
        rate = f.interruption
        regained = f"{rate.mean_regain_s / 60:.1f} min" if rate.mean_regain_s is not None else "never within the trace"
        print(
            f"{f.trace}: {rate.rate_per_h:.4f} revocations per instance-hour ({f.losses} over "
            f"{f.instance_hours:.1f} h), mean time to regain {regained}"
        )
    return EXIT_NO_PLAN if stopped else EXIT_OK


def cmd_risk_attach(args: argparse.Namespace) -> int:
    """Write INSTANCE with interruption models on the named types."""
    output_file(args.out)
    problem = spot_instance_arg(args.instance)
    models = {}
    for name, path in _pairs("--fit", args.fit or []):
        models[name] = fit_trace(load_trace(path)).interruption
    for name, bucket in _pairs("--bucket", args.bucket or []):
        if not (bucket.isascii() and bucket.isdigit() and int(bucket) <= 4):  # "²" is a digit to isdigit()
            raise InvalidInputError(f"--bucket {name}", f"expected a Spot Advisor bucket 0-4, got {bucket!r}")
        models[name] = from_advisor_bucket(int(bucket), source="given on the command line")
    if not models:
        raise InvalidInputError("--fit", "give at least one --fit TYPE=TRACE or --bucket TYPE=B")
    names = {t.name for t in problem.instance_types}
    for name in models:
        if name not in names:
            raise InvalidInputError(f"instance_types.{name}", f"not an instance type of {problem.name!r}")
    types = tuple(replace(t, interruption=models.get(t.name, t.interruption)) for t in problem.instance_types)
    with writing(args.out):
        write_instance(problem.replace(instance_types=types), args.out)
    print(args.out)
    return EXIT_OK


def cmd_risk_solve(args: argparse.Namespace) -> int:
    """Solve with --robust K or --risk (exact; docs/revocation.md says what is proven)."""
    check_time_limit(args.time_limit)
    problem = spot_instance_arg(args.instance)
    if (args.robust is None) == (not args.risk):
        raise InvalidInputError("--robust", "give exactly one of --robust K and --risk")
    if args.robust is not None:
        from dnnprov.solvers.revocation.robust import solve_robust

        if args.deadline_probability is not None or args.lost_work or args.replacement != "on-demand":
            raise InvalidInputError(
                "--deadline-probability", "--deadline-probability, --lost-work and --replacement go with --risk"
            )
        result = solve_interruptibly(
            lambda: solve_robust(
                problem,
                args.robust,
                overhead_s=args.takeover_overhead,
                replaced=not args.no_replacement,
                max_plans=args.max_plans,
                time_limit_s=args.time_limit,
                method=args.method,
            ),
            args.time_limit,
        )
    else:
        from dnnprov.solvers.revocation.risk import solve_risk

        if args.no_replacement:
            raise InvalidInputError("--no-replacement", "goes with --robust")
        result = solve_interruptibly(
            lambda: solve_risk(
                problem,
                deadline_probability=args.deadline_probability,
                overhead_s=args.takeover_overhead,
                lost_work_s=args.lost_work,
                replacement=args.replacement,
                max_plans=args.max_plans,
                time_limit_s=args.time_limit,
                method=args.method,
            ),
            args.time_limit,
        )
    print(result.to_json(indent=2) if args.json else result.summary())
    return exit_code(result)


def progress_bar(total: int, stream: TextIO | None = None) -> Callable[[int, int], None]:
    """An ``on_run(done, total)`` callback drawing a one-line bar on ``stream`` (default: the
    standard error of the moment, not of import time; TTY only)."""
    stream = sys.stderr if stream is None else stream
    interactive = hasattr(stream, "isatty") and not stream.closed and stream.isatty()
    step = max(1, total // 100)

    def on_run(done: int, total: int) -> None:
        if not interactive or (done % step and done != total):
            return
        filled = 30 * done // total
        stream.write(f"\rreplay [{'#' * filled}{'.' * (30 - filled)}] {done}/{total}")
        if done == total:
            stream.write("\n")
        stream.flush()

    return on_run


def _traces(values: list[str]) -> dict[str, list[Trace]]:
    traces: dict[str, list[Trace]] = {}
    for name, path in _pairs("--trace", values):
        traces.setdefault(name, []).append(load_trace(path))
    return traces


def _check_replay_options(args: argparse.Namespace) -> None:
    """``--join`` (finite, >= 0) and, where the command has it, ``--horizon`` (finite, >= 1), named as options."""
    from dnnprov.problems.validation import checks as check

    check.number("--join", args.join, minimum=0)
    if hasattr(args, "horizon"):
        check.number("--horizon", args.horizon, minimum=1)


def cmd_simulate(args: argparse.Namespace) -> int:
    """Run the control loop on real spot traces against a plan under a policy (docs/revocation.md)."""
    from dnnprov.cloud.export import load_plan
    from dnnprov.control.replay import Simulation
    from dnnprov.json_files import read_json_file
    from dnnprov.revocation.availability import AvailabilityModel, parse_period

    if args.engine is not None:
        raise InvalidInputError(
            "--engine",
            "is gone: simulate has one engine, the control loop of `dnnprov run` on "
            "the trace cloud (the tick and event engines were removed, issue 28); "
            "drop the option",
        )
    check_time_limit(args.time_limit)
    _check_replay_options(args)
    problem = spot_instance_arg(args.instance)
    doc = load_plan(args.plan, problem=problem)
    traces = _traces(args.trace)
    plan = SpotPlan(counts=doc.counts(), ps=doc.ps)
    if args.model and args.policy != "mpc":
        raise InvalidInputError("--model", "goes with --policy mpc")
    model = AvailabilityModel.from_dict(read_json_file(args.model)) if args.model else None
    sim = Simulation(
        problem,
        plan,
        traces,
        policy=args.policy,
        runs=args.runs,
        seed=args.seed,
        join_s=args.join,
        horizon=args.horizon,
        poll_s=args.poll,
        period=parse_period(args.period) if args.period else None,
        fit_period=parse_period(args.fit_period, "--fit-period") if args.fit_period else None,
        model=model,
        hindsight=args.hindsight,
        replan_method=args.replan_method,
        time_limit_s=args.time_limit,
    )
    out = sim.to_dict(per_run=args.per_run, on_run=progress_bar(args.runs) if args.runs >= 200 else None)
    if args.json:
        print(json.dumps(out, indent=2))
        return EXIT_OK
    print(f"{problem.name}: {plan} under policy {args.policy}, {out['runs']} runs on the loop (seed {args.seed})")
    if out["settings"]["stopped_by_time_limit"]:
        print(f"  stopped by --time-limit {args.time_limit:g} s after {out['runs']} of {args.runs} runs")
    print(f"  met deadline : {100 * out['met_deadline']:.1f} % (finished at all: {100 * out['finished']:.1f} %)")
    print(f"  cost         : mean ${out['cost_mean']:.4f}, p50 ${out['cost_p50']:.4f}, p95 ${out['cost_p95']:.4f}")
    if args.hindsight:
        bound = out["hindsight_cost_mean"]
        print(
            "  hindsight    : "
            + (
                f"mean ${bound:.4f} (a proven lower bound for any policy meeting T_obj)"
                if bound is not None
                else f"{out['hindsight_unreachable_runs']} runs cannot meet T_obj with any policy"
            )
        )
    print(f"  loss reached : mean {out['loss_mean']:.4g} (target {problem.slo.loss:g})")
    print(
        f"  revocations  : {out['revocations_mean']:.2f} per run, launches {out['launches_mean']:.2f}, "
        f"refusals {out['refusals_mean']:.2f}, replans {out['replans_mean']:.2f}, "
        f"on-demand {out['on_demand_launched_mean']:.2f}"
    )
    if args.per_run:
        for k, run in enumerate(out["per_run"]):
            print(f"  run {k}: offset {run['offset']}, {run['state']}, ${run['cost']:.4f}, {len(run['events'])} events")
    return EXIT_OK


def cmd_risk_plan(args: argparse.Namespace) -> int:
    """The plan cheapest under the mpc policy replayed on the fit period."""
    from dnnprov.control.plan_choice import choose_plan
    from dnnprov.revocation.availability import parse_period

    check_time_limit(args.time_limit)
    _check_replay_options(args)
    problem = spot_instance_arg(args.instance)
    choice = choose_plan(
        problem,
        _traces(args.trace),
        zones=args.zones,
        fit_period=parse_period(args.fit_period, "--fit-period"),
        join_s=args.join,
        time_limit_s=args.time_limit,
    )
    print(json.dumps(choice.to_dict(), indent=2) if args.json else choice.summary())
    return exit_code(choice.result())


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``risk`` and ``simulate`` subcommands."""
    from dnnprov.models.training_progress import JOIN_OVERHEAD_S
    from dnnprov.revocation.replay.simulate import POLICIES, REPLAN_METHODS
    from dnnprov.solvers.revocation.robust import DEFAULT_MAX_PLANS, METHODS as ROBUST_METHODS

    p = sub.add_parser("risk", help="interruption models and revocation-aware plans")
    risk_sub = p.add_subparsers(dest="risk_command", required=True)
    f = risk_sub.add_parser("fit", help="rate of loss and mean time to regain of spot traces")
    f.add_argument("traces", nargs="+", metavar="TRACE", help="availability or preemption trace files")
    f.add_argument("--pool", action="store_true", help="one model pooled over all the traces (one type, several zones)")
    f.add_argument(
        "--zones",
        action="store_true",
        help="the traces are one type's pools, aligned in time: fit the availability model",
    )
    f.add_argument(
        "--period",
        default=None,
        metavar="A:B",
        help="with --zones: fit on this fraction of the common ticks (default 0:1)",
    )
    f.add_argument(
        "--cap", type=int, default=None, metavar="K", help="with --zones: track up to K instances (default 16)"
    )
    f.add_argument("--out", help="with --zones: also write the model (JSON) to this file")
    f.add_argument(
        "--time-limit",
        type=float,
        default=60.0,
        metavar="S",
        help="wall-clock seconds, checked between trace files: the traces left are named, exit 1 (default %(default)g)",
    )
    f.add_argument("--json", action="store_true", help="print JSON")
    f.set_defaults(run=cmd_risk_fit)
    pl = risk_sub.add_parser("plan", help="the plan cheapest under the mpc policy replayed on the fit period")
    pl.add_argument("instance")
    pl.add_argument(
        "--trace",
        action="append",
        required=True,
        metavar="TYPE=FILE",
        help="trace of a spot type (repeat; with --zones the type's aligned pools)",
    )
    pl.add_argument("--zones", action="store_true", help="the traces of one type are its simultaneous pools")
    pl.add_argument("--fit-period", default="0:1", metavar="A:B", help="fit the model on this fraction of the traces")
    pl.add_argument("--join", type=float, default=JOIN_OVERHEAD_S, help="seconds before launched instances train")
    pl.add_argument(
        "--time-limit",
        type=float,
        default=60.0,
        metavar="S",
        help="wall-clock seconds: no candidate is priced after it; status limit, the cheapest "
        "of those priced (default %(default)g)",
    )
    pl.add_argument("--json", action="store_true", help="print one JSON object (a plan document)")
    pl.set_defaults(run=cmd_risk_plan)
    a = risk_sub.add_parser("attach", help="write an instance with interruption models on its types")
    a.add_argument("instance")
    a.add_argument("--fit", action="append", metavar="TYPE=TRACE", help="fit the type's model from a trace")
    a.add_argument("--bucket", action="append", metavar="TYPE=B", help="Spot Advisor bucket 0-4 (midpoint mapping)")
    a.add_argument("--out", required=True, help="instance file to write")
    a.set_defaults(run=cmd_risk_attach)
    s = risk_sub.add_parser("solve", help="exact plans that expect revocations (--robust K or --risk)")
    s.add_argument("instance")
    s.add_argument("--robust", type=int, metavar="K", help="meet T_obj even if any K spot workers are revoked")
    s.add_argument(
        "--no-replacement",
        action="store_true",
        help="with --robust: revoked workers never come back (capacity stays away)",
    )
    s.add_argument("--risk", action="store_true", help="least expected cost under the interruption models")
    s.add_argument(
        "--deadline-probability",
        type=float,
        metavar="Q",
        help="with --risk: meet T_obj with probability >= Q (default: in expectation)",
    )
    s.add_argument(
        "--takeover-overhead",
        type=float,
        default=JOIN_OVERHEAD_S,
        help="seconds until a revoked worker is replaced (default %(default)g, the paper's join)",
    )
    s.add_argument(
        "--lost-work",
        type=float,
        default=0.0,
        help="with --risk: seconds of progress lost per revocation (default 0: ASP keeps it)",
    )
    s.add_argument(
        "--replacement",
        choices=("on-demand", "spot"),
        default="on-demand",
        help="with --risk: market of replacements (default %(default)s)",
    )
    s.add_argument(
        "--method",
        choices=ROBUST_METHODS,
        default="auto",
        help="enumerate the quota box, decompose it (spot decomposition), or auto (default)",
    )
    s.add_argument("--max-plans", type=int, default=DEFAULT_MAX_PLANS, help="largest quota box enumerated")
    s.add_argument(
        "--time-limit",
        type=float,
        default=60.0,
        help="seconds; at the limit the status is limit with the proven bound (default %(default)g)",
    )
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(run=cmd_risk_solve)

    p = sub.add_parser("simulate", help="run the control loop on real spot traces against a plan")
    p.add_argument("instance", help="the spot instance the plan solves")
    p.add_argument("--plan", required=True, help="plan document or `dnnprov solve --json` output")
    p.add_argument(
        "--trace",
        action="append",
        required=True,
        metavar="TYPE=FILE",
        help="trace of a spot type (repeat; the traces of one type are its pools, aligned in time)",
    )
    p.add_argument("--policy", choices=POLICIES, default="none", help="launch policy (docs/revocation.md)")
    p.add_argument(
        "--zones", action="store_true", help="kept for old scripts: the traces of one type are always its aligned pools"
    )
    p.add_argument(
        "--period",
        default=None,
        metavar="A:B",
        help="run windows lie within this fraction of the traces (e.g. 0.5:1, held out)",
    )
    p.add_argument(
        "--fit-period",
        default=None,
        metavar="A:B",
        help="with --policy mpc: fit its availability model on this fraction (default 0:1)",
    )
    p.add_argument("--model", default=None, help="with --policy mpc: availability model from risk fit --zones --out")
    p.add_argument(
        "--hindsight",
        action="store_true",
        help="also each window's proven lower bound on any policy meeting T_obj (hindsight_cost_mean)",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="S",
        help="stop after the run that crosses S wall-clock seconds (the output says how many ran)",
    )
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--replan-method",
        choices=REPLAN_METHODS,
        default="exact",
        help="with --policy replan: solve takeovers exactly, or by spotDNN's heuristic",
    )
    p.add_argument("--join", type=float, default=JOIN_OVERHEAD_S, help="seconds before launched instances train")
    p.add_argument("--horizon", type=float, default=3.0, help="stop runs at this multiple of T_obj")
    p.add_argument("--poll", type=float, default=15.0, help="seconds between the controller's polls")
    p.add_argument("--per-run", action="store_true", help="also print every run: its offset and event timeline")
    p.add_argument("--engine", default=None, help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=cmd_simulate)
