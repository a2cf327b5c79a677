"""The core commands: ``solve``, ``show`` and ``demo``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from dnnprov.cli.common import EXIT_OK, check_time_limit, exit_code, instance_path, solve_interruptibly, terminal_safe
from dnnprov.errors import InvalidInputError

if TYPE_CHECKING:
    from dnnprov.problems.serverless import ServerlessProblem
    from dnnprov.problems.spot import SpotProblem, SpotWorkload
    from dnnprov.result import Result

DEMO_INSTANCE = "spot/paper-table1.json"


def cmd_solve(args: argparse.Namespace) -> int:
    """Solve one instance file with one method.

    Ctrl-C or SIGTERM stops the solve: its best plan so far and proven bound are printed
    (status limit, "interrupted") and the exit code is 130.
    """
    from dnnprov.cli.solving.domain import apply_domain_options, solve_with_domain_cost
    from dnnprov.cli.solving.objectives import apply_budget
    from dnnprov.cloud.regions import spans_regions
    from dnnprov.dispatch import solve
    from dnnprov.io.instances import read_instance
    from dnnprov.problems.spot import SpotProblem
    from dnnprov.solvers.regions import solve_one_region

    check_time_limit(args.time_limit)
    problem = apply_budget(apply_domain_options(read_instance(instance_path(args.file)), args), args.budget)
    for option, given, owner in (
        ("--deadline-probability", args.deadline_probability is not None and not args.risk, "--risk"),
        ("--no-replacement", args.no_replacement and args.robust is None, "--robust K"),
        (
            "--takeover-overhead",
            args.takeover_overhead is not None and args.robust is None and not args.risk,
            "--robust K or --risk",
        ),
        ("--domain-cost", args.domain_cost and args.objective != "cost", "--objective cost"),
    ):
        if given:
            raise InvalidInputError(option, f"goes with {owner}")
    if args.work_limit is not None and args.domain_cost:
        raise InvalidInputError("--work-limit", "is not taken with --domain-cost")
    work = {} if args.work_limit is None else {"work_limit": args.work_limit}
    chosen = solve_with_domain_cost if args.domain_cost else solve
    options = dict(
        gap=args.gap,
        max_plans=args.max_plans,
        log=args.log,
        robust=args.robust,
        risk=args.risk,
        deadline_probability=args.deadline_probability,
        takeover_overhead_s=args.takeover_overhead,
        replaced=not args.no_replacement,
        objective=args.objective,
        **work,
    )

    def run() -> Result:
        if args.any_region or not spans_regions(problem):
            return chosen(problem, args.method, time_limit_s=args.time_limit, **options)
        assert isinstance(problem, SpotProblem)  # spans_regions says so
        # One region per plan (docs/cloud.md): one solve per region, the bound proven over all.
        return solve_one_region(
            problem,
            lambda sub, seconds: chosen(sub, args.method, time_limit_s=seconds, **options),
            method=args.method,
            objective=args.objective,
            time_limit_s=args.time_limit,
        )

    result = solve_interruptibly(run, args.time_limit)
    print(result.to_json(indent=2) if args.json else result.summary())
    return exit_code(result)


def cmd_show(args: argparse.Namespace) -> int:
    """Describe an instance file."""
    from dnnprov.io.instances import read_instance

    problem = read_instance(instance_path(args.file))
    print(describe(problem))
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    """Solve the embedded paper Table I instance with every applicable method."""
    from dnnprov.dispatch import solve
    from dnnprov.io.instances import embedded_instance, read_instance

    problem = read_instance(embedded_instance(DEMO_INSTANCE))
    print(describe(problem))
    print()
    for method in ("milp", "reference-heuristic", "heuristic", "enumerate"):
        print(solve(problem, method).summary())
        print()
    return EXIT_OK


def _spot_domain_lines(workload: SpotWorkload) -> list[str]:
    """The fitted ranges of a spot workload's domain, then what plans may use (what the solvers enforce)."""
    d = workload.domain
    if d is None:
        return []
    lines = [
        f"  workload.domain: batch_wa {d.batch_wa[0]:g}..{d.batch_wa[1]:g}, workers "
        f"{d.workers[0]}..{d.workers[1]}" + (f", extrapolation {d.extrapolation:g}" if d.extrapolation != 1 else "")
    ]
    (b_low, b_high), (k_low, k_high) = d.batch_bounds(workload.gamma_2, workload.gamma_3), d.worker_bounds()
    lines.append(
        f"    plans may use: batch_wa {b_low:g}..{b_high:g} (factor {d.batch_factor:g}, then eq. (3)'s "
        f"numerator cap), workers {k_low}..{k_high} (factor {d.workers_factor:g}), "
        f">= {d.min_iterations:g} iterations"
    )
    if d.loss is not None or d.iterations is not None:
        logged = []
        if d.loss is not None:
            logged.append(f"loss {d.loss[0]:g}..{d.loss[1]:g}")
        if d.iterations is not None:
            logged.append(
                f"iterations {d.iterations[0]:g}..{d.iterations[1]:g} (beyond {d.iteration_limit():g}: extrapolated)"
            )
        lines.append(f"    logged: {', '.join(logged)}; loss_axis {d.loss_axis}")
    return lines


def describe(problem: SpotProblem | ServerlessProblem) -> str:
    """A few readable lines about a problem, with the instance file's field names.

    Every string from the file goes through :func:`terminal_safe`.
    """
    from dnnprov.problems.spot import SpotProblem

    q = terminal_safe
    if isinstance(problem, SpotProblem):
        w, slo, c = problem.workload, problem.slo, problem.constraints
        workers = f"{c.workers[0]}..{c.workers[1] if c.workers[1] is not None else 'null'}"
        lines = [
            (
                f"{q(problem.name)}: spot problem, model {problem.model}, workload {q(w.name)} "
                f"(loss_variant {w.loss_variant})"
            ),
            f"  slo: loss {slo.loss:g}, time_s {slo.time_s:g}"
            + (f", takeover_overhead_s {slo.takeover_overhead_s:g}" if slo.takeover_overhead_s else ""),
            (
                f"  constraints: ps_count {c.ps_count[0]}..{c.ps_count[1]}, workers {workers}, "
                f"markets {', '.join(c.markets)}"
            ),
            (
                "  columns (compute_time_s by eq. (6) where the file gives speed_samples_per_s; "
                "price_per_h is the column's market price):"
            ),
        ]
        cols = problem.columns()
        width = max(24, *(len(q(label)) for label in cols.labels))
        lines.append(
            f"    {'column':<{width}} {'gpus':>4} {'batch_per_gpu':>13} {'compute_time_s':>14} "
            f"{'price_per_h':>11} {'quota':>5} {'existing':>8}"
        )
        for i, label in enumerate(cols.labels):
            per_gpu = int(cols.batch[i]) // int(cols.gpus[i])
            lines.append(
                f"    {q(label):<{width}} {cols.gpus[i]:>4} {per_gpu:>13} {cols.compute_time[i]:>14.4f} "
                f"{cols.price[i]:>11.4f} {cols.upper[i]:>5} {cols.lower[i]:>8}"
            )
        if c.vcpu_quotas:
            lines.append("  vcpu_quotas: " + ", ".join(f"{q(v.family)}/{v.market} <= {v.vcpus}" for v in c.vcpu_quotas))
        if c.budget_usd is not None:
            lines.append(f"  budget_usd: {c.budget_usd:g}")
        rates = [
            f"{q(t.name)} {t.interruption.rate_per_h:.3g}/h"
            for t in problem.instance_types
            if t.interruption is not None
        ]
        if rates:
            lines.append("  interruption rate_per_h: " + ", ".join(rates))
        if w.domain is not None:
            lines.extend(_spot_domain_lines(w))
    else:
        sw, sp = problem.workload, problem.platform
        grid = problem.memory_grid()
        low, high = problem.function_range()
        lines = [
            (
                f"{q(problem.name)}: serverless problem, workload {q(sw.name)} "
                f"(epochs {sw.epochs:g} of {sw.samples} samples)"
            ),
            f"  slo: time_s {problem.time_s:g}",
            (
                f"  memory_mb {grid[0]}..{grid[-1]} in memory_step_mb {sp.memory_step_mb} "
                f"({len(grid)} sizes), functions {low}..{high}, "
                f"ps_count {problem.constraints.ps_count[0]}..{problem.constraints.ps_count[1]}, "
                f"timeout_s {sp.timeout_s:g}"
            ),
            (
                f"  local_batch {sw.local_batch}, max_global_batch {sw.max_global_batch}, "
                f"model_mb {sw.model_mb:g}, dataset_mb {sw.dataset_mb:g}"
            ),
        ]
        if problem.constraints.budget_usd is not None:
            lines.append(f"  budget_usd: {problem.constraints.budget_usd:g}")
        d = sw.domain
        if d is not None:
            lines.append(
                f"  workload.domain: memory_mb {d.memory_mb[0]:g}..{d.memory_mb[1]:g}"
                + (f", functions {d.functions[0]}..{d.functions[1]}" if d.functions else "")
                + (f", extrapolation {d.extrapolation:g}" if d.extrapolation != 1 else "")
            )
    if problem.notes:
        lines.append(f"  notes: {q(problem.notes)}")
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``solve``, ``show`` and ``demo``."""
    import inspect

    from dnnprov.dispatch import METHODS

    p = sub.add_parser("solve", help="solve one instance file", description=inspect.cleandoc(cmd_solve.__doc__ or ""))
    p.add_argument("file", help="instance file, embedded:spot/paper-table1.json, or - for standard input")
    p.add_argument("--method", choices=METHODS, default="milp")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--time-limit", type=float, default=60.0, help="wall-clock seconds for the whole solve, any method")
    p.add_argument(
        "--work-limit",
        type=int,
        default=None,
        metavar="NODES",
        help="deterministic limit beside --time-limit: nodes of the milp search (same answer on any machine)",
    )
    p.add_argument("--gap", type=float, default=0.0, help="relative gap to stop at (milp)")
    p.add_argument("--max-plans", type=int, default=None, help="largest space enumerate accepts (default 50 million)")
    p.add_argument("--log", action="store_true", help="print a solver log (incumbent, bound, gap over time) to stderr")
    p.add_argument(
        "--robust",
        type=int,
        default=None,
        metavar="K",
        help="spot: meet the deadline even if any K workers are revoked (docs/revocation.md)",
    )
    p.add_argument(
        "--risk", action="store_true", help="spot: least expected cost under the instance's interruption models"
    )
    p.add_argument(
        "--deadline-probability",
        type=float,
        default=None,
        metavar="Q",
        help="with --risk: meet the deadline with probability at least Q (default: in expectation)",
    )
    p.add_argument(
        "--takeover-overhead",
        type=float,
        default=None,
        metavar="S",
        help="with --robust/--risk: seconds until a replacement joins (default 126, the paper's 2.1 min)",
    )
    p.add_argument("--no-replacement", action="store_true", help="with --robust: revoked workers are not replaced")
    p.add_argument(
        "--any-region",
        action="store_true",
        help="multi-region instances (TYPE@REGION): let a plan's workers span regions (default: one region per "
        "plan, docs/cloud.md)",
    )
    from dnnprov.cli.solving.domain import add_domain_options
    from dnnprov.cli.solving.objectives import add_objective_options

    add_domain_options(p, cost=True)
    add_objective_options(p)
    p.set_defaults(run=cmd_solve)

    p = sub.add_parser("show", help="describe an instance file", description=cmd_show.__doc__)
    p.add_argument("file", help="instance file, embedded:REL, or - for standard input")
    p.set_defaults(run=cmd_show)

    p = sub.add_parser(
        "demo", help="solve the paper's Table I instance with every method", description=cmd_demo.__doc__
    )
    p.set_defaults(run=cmd_demo)
