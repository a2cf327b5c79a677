"""The ``dnnprov`` command line. ``main()`` parses; each subcommand is a small function.

Exit codes: 0 success, 1 the solve ended without a plan (unknown, limit, error), 2 bad
input (unreadable or invalid file, bad option), 3 an internal error (a bug), 130
interrupted (Ctrl-C), 141 standard output closed early (``dnnprov show ... | head -1``).
Errors are one line on standard error; no traceback reaches the user.
"""

from __future__ import annotations

import argparse
import os
import sys
import unicodedata
from typing import Callable, Sequence

from dnnprov.cli.domain import add_domain_options, apply_domain_options, solve_with_domain_cost
from dnnprov.errors import InvalidInputError
from dnnprov.problems.plausibility import reported as reported_warnings
from dnnprov.io.instances import embedded_instance, read_instance, resolve_instance_path
from dnnprov.result import Status
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.solve import METHODS, solve
from dnnprov.problems.spot import SpotProblem

EXIT_OK, EXIT_NO_PLAN, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141
DEMO_INSTANCE = "spot/paper-table1.json"
#: Unicode categories never written raw to a terminal: controls (ESC, CR, ...), format
#: characters (bidirectional overrides), line and paragraph separators, surrogates.
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _instance_path(value: str) -> str:
    """A file path, or ``embedded:REL`` for a file shipped with dnnprov."""
    return str(resolve_instance_path(value))


def terminal_safe(text: object) -> str:
    """``text`` with every control, format and separator character escaped (``\x1b``,
    ``\n``, ``\u202e``), so that data can neither move the cursor, recolour the terminal
    nor start a new line that looks like dnnprov's own output."""
    out = []
    for c in str(text):
        if unicodedata.category(c) in UNSAFE_CATEGORIES:
            code = ord(c)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(c)
    return "".join(out)


def cmd_solve(args: argparse.Namespace) -> int:
    """Solve one instance file with one method."""
    problem = apply_domain_options(read_instance(_instance_path(args.file)), args)
    for option, given, owner in (("--deadline-probability", args.deadline_probability is not None and not args.risk,
                                  "--risk"),
                                 ("--no-replacement", args.no_replacement and args.robust is None, "--robust K"),
                                 ("--takeover-overhead", args.takeover_overhead is not None
                                  and args.robust is None and not args.risk, "--robust K or --risk")):
        if given:
            raise InvalidInputError(option, f"goes with {owner}")
    run = solve_with_domain_cost if args.domain_cost else solve
    result = run(problem, args.method, time_limit_s=args.time_limit, gap=args.gap,
                   max_plans=args.max_plans, log=args.log, robust=args.robust, risk=args.risk,
                   deadline_probability=args.deadline_probability,
                   takeover_overhead_s=args.takeover_overhead, replaced=not args.no_replacement)
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
    """A few readable lines about a problem, with the instance file's field names.

    Every string from the file goes through :func:`terminal_safe`.
    """
    q = terminal_safe
    if isinstance(problem, SpotProblem):
        w, slo, c = problem.workload, problem.slo, problem.constraints
        workers = f"{c.workers[0]}..{c.workers[1] if c.workers[1] is not None else 'null'}"
        lines = [f"{q(problem.name)}: spot problem, model {problem.model}, workload {q(w.name)} "
                 f"(loss_variant {w.loss_variant})",
                 f"  slo: loss {slo.loss:g}, time_s {slo.time_s:g}"
                 + (f", takeover_overhead_s {slo.takeover_overhead_s:g}" if slo.takeover_overhead_s else ""),
                 f"  constraints: ps_count {c.ps_count[0]}..{c.ps_count[1]}, workers {workers}, "
                 f"markets {', '.join(c.markets)}",
                 "  columns (compute_time_s by eq. (6) where the file gives speed_samples_per_s; "
                 "price_per_h is the column's market price):"]
        cols = problem.columns()
        width = max(24, *(len(q(label)) for label in cols.labels))
        lines.append(f"    {'column':<{width}} {'gpus':>4} {'batch_per_gpu':>13} {'compute_time_s':>14} "
                     f"{'price_per_h':>11} {'quota':>5} {'existing':>8}")
        for i, label in enumerate(cols.labels):
            per_gpu = int(cols.batch[i]) // int(cols.gpus[i])
            lines.append(f"    {q(label):<{width}} {cols.gpus[i]:>4} {per_gpu:>13} {cols.compute_time[i]:>14.4f} "
                         f"{cols.price[i]:>11.4f} {cols.upper[i]:>5} {cols.lower[i]:>8}")
        if c.vcpu_quotas:
            lines.append("  vcpu_quotas: " + ", ".join(f"{q(v.family)}/{v.market} <= {v.vcpus}" for v in c.vcpu_quotas))
        if c.budget_usd is not None:
            lines.append(f"  budget_usd: {c.budget_usd:g}")
        rates = [f"{q(t.name)} {t.interruption.rate_per_h:.3g}/h" for t in problem.instance_types
                 if t.interruption is not None]
        if rates:
            lines.append("  interruption rate_per_h: " + ", ".join(rates))
        d = w.domain
        if d is not None:
            lines.append(f"  workload.domain: batch_wa {d.batch_wa[0]:g}..{d.batch_wa[1]:g}, workers "
                         f"{d.workers[0]}..{d.workers[1]}"
                         + (f", extrapolation {d.extrapolation:g}" if d.extrapolation != 1 else ""))
    else:
        w, p = problem.workload, problem.platform
        grid = problem.memory_grid()
        low, high = problem.function_range()
        lines = [f"{q(problem.name)}: serverless problem, workload {q(w.name)} "
                 f"(epochs {w.epochs:g} of {w.samples} samples)",
                 f"  slo: time_s {problem.time_s:g}",
                 f"  memory_mb {grid[0]}..{grid[-1]} in memory_step_mb {p.memory_step_mb} "
                 f"({len(grid)} sizes), functions {low}..{high}, "
                 f"ps_count {problem.constraints.ps_count[0]}..{problem.constraints.ps_count[1]}, "
                 f"timeout_s {p.timeout_s:g}",
                 f"  local_batch {w.local_batch}, max_global_batch {w.max_global_batch}, "
                 f"model_mb {w.model_mb:g}, dataset_mb {w.dataset_mb:g}"]
        if problem.constraints.budget_usd is not None:
            lines.append(f"  budget_usd: {problem.constraints.budget_usd:g}")
        d = w.domain
        if d is not None:
            lines.append(f"  workload.domain: memory_mb {d.memory_mb[0]:g}..{d.memory_mb[1]:g}"
                         + (f", functions {d.functions[0]}..{d.functions[1]}" if d.functions else "")
                         + (f", extrapolation {d.extrapolation:g}" if d.extrapolation != 1 else ""))
    if problem.notes:
        lines.append(f"  notes: {q(problem.notes)}")
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
    p.add_argument("--time-limit", type=float, default=60.0, help="wall-clock seconds for the whole solve, any method")
    p.add_argument("--gap", type=float, default=0.0, help="relative gap to stop at (milp)")
    p.add_argument("--max-plans", type=int, default=None, help="largest space enumerate accepts")
    p.add_argument("--log", action="store_true", help="print a solver log (incumbent, bound, gap over time) to stderr")
    p.add_argument("--robust", type=int, default=None, metavar="K",
                   help="spot: meet the deadline even if any K workers are revoked (docs/revocation.md)")
    p.add_argument("--risk", action="store_true",
                   help="spot: least expected cost under the instance's interruption models")
    p.add_argument("--deadline-probability", type=float, default=None, metavar="Q",
                   help="with --risk: meet the deadline with probability at least Q (default: in expectation)")
    p.add_argument("--takeover-overhead", type=float, default=None, metavar="S",
                   help="with --robust/--risk: seconds until a replacement joins (default 126, the paper's 2.1 min)")
    p.add_argument("--no-replacement", action="store_true", help="with --robust: revoked workers are not replaced")
    add_domain_options(p, cost=True)
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
EXTRA_COMMANDS.append(__import__("dnnprov.cli.cloud", fromlist=["register"]).register)
EXTRA_COMMANDS.append(__import__("dnnprov.cli.batch", fromlist=["register"]).register)
EXTRA_COMMANDS.append(__import__("dnnprov.cli.generate", fromlist=["register"]).register)
EXTRA_COMMANDS.append(__import__("dnnprov.cli.joint", fromlist=["register"]).register)
EXTRA_COMMANDS.append(__import__("dnnprov.cli.service", fromlist=["register"]).register)
EXTRA_COMMANDS.append(__import__("dnnprov.cli.sweep", fromlist=["register"]).register)
EXTRA_COMMANDS.append(__import__("dnnprov.cli.risk", fromlist=["register"]).register)
EXTRA_COMMANDS.append(__import__("dnnprov.cli.profile", fromlist=["register"]).register)


def _error(text: str) -> None:
    """Write one ``dnnprov: ...`` line to standard error (escaped: a single line)."""
    try:
        print(f"dnnprov: {terminal_safe(text)}", file=sys.stderr)
    except (OSError, ValueError):  # stderr closed too: nothing left to tell
        pass


def _stdout_gone() -> None:
    """Point standard output at /dev/null, so that the interpreter's last flush is silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file descriptor (captured output)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code.

    Bad input ends with one ``dnnprov: error: FIELD: PROBLEM`` line on standard error and
    exit code 2; a closed standard output (a pager or ``head`` that quit) with 141;
    Ctrl-C with 130; an unexpected exception (a bug) with one ``dnnprov: internal
    error`` line and exit code 3.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with reported_warnings(lambda text: _error(f"warning: {text}")):   # one line per plausibility warning
            code = args.run(args)
        sys.stdout.flush()
        return code
    except InvalidInputError as exc:
        _error(f"error: {exc}")
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        _stdout_gone()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:  # the last resort: a bug must not print a traceback at the user
        _error(f"internal error: {type(exc).__name__}: {exc} (a bug in dnnprov; please report it with the input)")
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
