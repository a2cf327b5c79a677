"""CLI start-up cost (issue 22): CPU seconds of ``dnnprov --version``, ``--help`` and a subcommand's help.

    .venv/bin/python benchmarks/cli_startup.py [--runs 7] [--allow-missed]

Runs each command line in a fresh subprocess (the ``dnnprov`` script beside this
Python, else ``python -m dnnprov``) and reads the child's user + system CPU seconds from
``resource.getrusage(RUSAGE_CHILDREN)``, so a loaded machine inflates the figures less
than wall time would. Prints the median and the largest run of each against its contract;
exits 1 when a median misses its contract unless ``--allow-missed``.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

#: command line -> largest median CPU seconds allowed
CONTRACTS = {
    ("--version",): 0.2,
    ("--help",): 0.3,
    ("list", "--json"): 0.5,
    ("solve", "--help"): 1.0,
}


def dnnprov_command() -> list[str]:
    """The installed ``dnnprov`` script next to this interpreter, else ``python -m dnnprov``."""
    script = Path(sys.executable).with_name("dnnprov")
    if script.is_file():
        return [str(script)]
    found = shutil.which("dnnprov")
    return [found] if found else [sys.executable, "-m", "dnnprov"]


def child_cpu_seconds(argv: list[str]) -> float:
    """CPU seconds (user + system) one run of ``argv`` took; it must exit 0."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per command line")
    parser.add_argument("--allow-missed", action="store_true", help="exit 0 even when a contract is missed")
    args = parser.parse_args(argv)
    command = dnnprov_command()
    baseline = statistics.median(child_cpu_seconds([sys.executable, "-c", "pass"]) for _ in range(args.runs))
    print(f"{' '.join(command)}; bare interpreter start-up: {baseline:.3f} CPU-s (median of {args.runs})")
    print(f"{'command':<24} {'median CPU-s':>12} {'max CPU-s':>10} {'contract':>9}  verdict")
    missed = []
    for words, contract in CONTRACTS.items():
        times = [child_cpu_seconds([*command, *words]) for _ in range(args.runs)]
        median = statistics.median(times)
        verdict = "ok" if median <= contract else "MISSED"
        if median > contract:
            missed.append(" ".join(words))
        print(f"{'dnnprov ' + ' '.join(words):<24} {median:>12.3f} {max(times):>10.3f} {contract:>9.2f}  {verdict}")
    if missed:
        print(f"missed: {', '.join(missed)}" + (" (allowed)" if args.allow_missed else ""))
        return 0 if args.allow_missed else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
