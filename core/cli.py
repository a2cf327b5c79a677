"""The ``dnnprov`` command line. ``main()`` parses; each subcommand is a small function.

Exit codes: 0 success, 1 the solve ended without a plan (infeasible, unknown, error),
2 bad input (unreadable or invalid file, bad option).
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from dnnprov.errors import InvalidInputError
from dnnprov.instance_io import embedded_instance, read_instance
from dnnprov.result import Status
from dnnprov.serverless import ServerlessProblem
from dnnprov.solve import METHODS, solve
from dnnprov.spot import SpotProblem

EXIT_OK, EXIT_NO_PLAN, EXIT_BAD_INPUT = 0, 1, 2
DEMO_INSTANCE = "spot/paper-table1.json"


def _instance_path(value: str) -> str:
    """A file path, or ``embedded:REL`` for a file shipped with dnnprov."""
    if value.startswith("embedded:"):
        return str(embedded_instance(value.removeprefix("embedded:")))
    return value


def cmd_solve(args: argparse.Namespace) -> int:
    """Solve one instance file with one method."""
    problem = read_instance(_instance_path(args.file))
    result = solve(problem, args.method, time_limit_s=args.time_limit, gap=args.gap,
                   max_plans=args.max_plans)
    print(result.to_json(indent=2) if args.json else result.summary())
    return EXIT_OK if result.plan is not None or result.status is Status.INFEASIBLE else EXIT_NO_PLAN


def cmd_show(args: argparse.Namespace) -> int:
    """Describe an instance file."""
    problem = read_instance(_instance_path(args.file))
    print(describe(problem))
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    """Solve the embedded paper Table I instance with every applicable method."""
    problem = read_instance(embedded_instance(DEMO_INSTANCE))
    print(describe(problem))
    print()
    for method in ("milp", "reference-heuristic", "heuristic", "enumerate"):
        print(solve(problem, method).summary())
        print()
    return EXIT_OK


def describe(problem: SpotProblem | ServerlessProblem) -> str:
    """A few readable lines about a problem."""
    if isinstance(problem, SpotProblem):
        w, slo, c = problem.workload, problem.slo, problem.constraints
        lines = [f"{problem.name}: spot problem, model {problem.model}, workload {w.name} "
                 f"(loss variant {w.loss_variant})",
                 f"  SLO: loss {slo.loss:g} within {slo.time_s:g} s"
                 + (f" (+{slo.takeover_overhead_s:g} s takeover)" if slo.takeover_overhead_s else ""),
                 f"  PS count {c.ps_count[0]}..{c.ps_count[1]}, markets {', '.join(c.markets)}"]
        cols = problem.columns()
        for i, label in enumerate(cols.labels):
            lines.append(f"  {label:<24} {cols.gpus[i]} GPU  batch {cols.batch[i]:>6g}  "
                         f"T_comp {cols.compute_time[i]:.4f} s  ${cols.price[i]:.4f}/h  "
                         f"quota {cols.upper[i]}" + (f"  kept {cols.lower[i]}" if cols.lower[i] else ""))
        if c.vcpu_quotas:
            lines.append("  vCPU quotas: " + ", ".join(f"{q.family}/{q.market} <= {q.vcpus}" for q in c.vcpu_quotas))
        if c.budget_usd is not None:
            lines.append(f"  budget: ${c.budget_usd:g}")
    else:
        w, p = problem.workload, problem.platform
        grid = problem.memory_grid()
        lines = [f"{problem.name}: serverless problem, workload {w.name} ({w.epochs:g} epochs of {w.samples} samples)",
                 f"  SLO: {problem.time_s:g} s",
                 f"  memory {grid[0]}..{grid[-1]} MB in steps of {p.memory_step_mb} MB, "
                 f"functions {problem.function_range()[0]}..{problem.function_range()[1]}, "
                 f"timeout {p.timeout_s:g} s",
                 f"  local batch {w.local_batch}, max global batch {w.max_global_batch}, model {w.model_mb:g} MB, "
                 f"dataset {w.dataset_mb:g} MB"]
    if problem.notes:
        lines.append(f"  notes: {problem.notes}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="dnnprov", description="Provision cloud resources for distributed DNN training: "
        "spot GPU clusters and serverless functions, with proven-optimal plans.",
        epilog="Exit codes: 0 success, 1 no plan (unknown, limit, error), 2 bad input.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("solve", help="solve one instance file")
    p.add_argument("file", help="instance file (or embedded:spot/paper-table1.json)")
    p.add_argument("--method", choices=METHODS, default="milp")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--time-limit", type=float, default=60.0, help="seconds (milp)")
    p.add_argument("--gap", type=float, default=0.0, help="relative gap to stop at (milp)")
    p.add_argument("--max-plans", type=int, default=None, help="largest space enumerate accepts")
    p.set_defaults(run=cmd_solve)

    p = sub.add_parser("show", help="describe an instance file")
    p.add_argument("file")
    p.set_defaults(run=cmd_show)

    p = sub.add_parser("demo", help="solve the paper's Table I instance with every method")
    p.set_defaults(run=cmd_demo)

    for register in EXTRA_COMMANDS:
        register(sub)
    return parser


#: Functions ``register(subparsers)`` adding further subcommands (batch, catalog, ...).
EXTRA_COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = []
EXTRA_COMMANDS.append(__import__("dnnprov.cli_cloud", fromlist=["register"]).register)
EXTRA_COMMANDS.append(__import__("dnnprov.cli_batch", fromlist=["register"]).register)
EXTRA_COMMANDS.append(__import__("dnnprov.cli_generate", fromlist=["register"]).register)
EXTRA_COMMANDS.append(__import__("dnnprov.cli_joint", fromlist=["register"]).register)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except InvalidInputError as exc:
        print(f"dnnprov: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
