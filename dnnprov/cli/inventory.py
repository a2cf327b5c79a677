"""The ``list`` and ``build`` subcommands: what ships with dnnprov, and instances made from it.

    dnnprov list [instances|catalogs|workloads] [--json]
    dnnprov build --catalog C --profile P --target-loss L --deadline S [--budget B]
                  [--quota TYPE=N ...] [--default-quota N] [--ps-price-per-h P] [--name NAME] --out FILE|-
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dnnprov.cli import EXIT_OK, terminal_safe
from dnnprov.errors import InvalidInputError

KINDS = ("instances", "catalogs", "workloads")
DEFAULT_QUOTA = 10


def _data_root() -> Path:
    from dnnprov.io.catalog import embedded_path

    return embedded_path()


def inventory() -> dict[str, list[dict[str, Any]]]:
    """Every embedded instance, catalog and workload profile: name, kind, what it is, how to name it."""
    from dnnprov.json_files import read_json_file

    root = _data_root()
    found: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    for kind in KINDS:
        for path in sorted((root / kind).rglob("*.json")):
            data = read_json_file(path)
            relative = path.relative_to(root / kind).as_posix()
            entry: dict[str, Any] = {"name": relative.removesuffix(".json"), "path": str(path)}
            if kind == "instances":
                entry.update(kind=relative.split("/")[0], use=f"embedded:{relative}",
                             notes=str(data.get("notes", ""))[:100])
            elif kind == "catalogs":
                entry.update(region=data.get("region"), snapshot=data.get("snapshot"),
                             types=len(data.get("instance_types", {})), use=str(path))
            else:
                entry.update(format=data.get("format"), use=str(path),
                             workload=(data.get("workload") or {}).get("name", data.get("name")))
            found[kind].append(entry)
    return found


def cmd_list(args: argparse.Namespace) -> int:
    """List the instances, catalogs and workload profiles shipped with dnnprov."""
    found = inventory()
    kinds = [args.kind] if args.kind else list(KINDS)
    if args.json:
        print(json.dumps({k: found[k] for k in kinds}, indent=2))
        return EXIT_OK
    for kind in kinds:
        print(f"{kind}:")
        for entry in found[kind]:
            extra = (entry.get("notes") if kind == "instances" else
                     f"{entry['region']}, {entry['snapshot']}, {entry['types']} types" if kind == "catalogs"
                     else entry.get("format"))
            print(f"  {terminal_safe(entry['name']):<44} {terminal_safe(extra or '')}")
    print(f"\nsolve an instance with: dnnprov solve embedded:{found['instances'][0]['use'].removeprefix('embedded:')}"
          if found["instances"] else "")
    return EXIT_OK


def _embedded_or_path(value: str, kind: str) -> Path:
    """``value`` as a file (``-``: standard input), or the name of an embedded catalog or
    workload profile (``dnnprov list``)."""
    from dnnprov.json_files import STDIN_PATHS

    path = Path(value)
    if value in STDIN_PATHS or path.exists():
        return path
    embedded = _data_root() / kind / (value.removesuffix(".json") + ".json")
    if embedded.is_file():
        return embedded
    raise InvalidInputError(f"--{'catalog' if kind == 'catalogs' else 'profile'}",
                            f"no file {value!r} and no embedded {kind[:-1]} of that name (dnnprov list {kind})")


def _quota(text: str) -> tuple[str, int]:
    name, sep, value = text.rpartition("=")
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not sep or not name or number < 0:
        raise InvalidInputError(f"--quota {text}", "expected TYPE=N with N an integer >= 0")
    return name, number


def cmd_build(args: argparse.Namespace) -> int:
    """Write a spot instance from a catalog (prices, hardware), a workload profile and an SLO."""
    from dnnprov.io.catalog import build_spot_problem, load_catalog, load_spot_profile
    from dnnprov.io.instances import dumps_instance, problem_from_dict
    from dnnprov.problems.spot import SpotConstraints, SpotPlatform, SpotSLO

    catalog = load_catalog(_embedded_or_path(args.catalog, "catalogs"))
    profile = load_spot_profile(_embedded_or_path(args.profile, "workloads"))
    quotas = dict(_quota(q) for q in args.quota or [])
    if not quotas:
        quotas = {e.name: args.default_quota for e in catalog.instance_types
                  if e.name in profile.per_type and e.spot_price_per_h is not None}
        if not quotas:
            raise InvalidInputError("--profile", f"no type of workload {profile.workload.name!r} has a spot price "
                                                 f"in catalog {catalog.name!r}")
    if args.out != "-" and Path(args.out).exists() and not args.force:
        raise InvalidInputError("--out", f"{args.out} exists (--force overwrites it)")
    constraints = SpotConstraints(budget_usd=args.budget) if args.budget is not None else None
    problem = build_spot_problem(catalog, profile, SpotSLO(loss=args.target_loss, time_s=args.deadline),
                                 quotas=quotas, constraints=constraints, name=args.name or profile.workload.name,
                                 platform=SpotPlatform(ps_price_per_h=args.ps_price_per_h, ps_type=args.ps_type),
                                 notes=f"built by dnnprov build from catalog {catalog.name} and workload "
                                       f"{profile.workload.name}")
    text = dumps_instance(problem)
    problem_from_dict(json.loads(text))            # what is written reads back (schema and checks)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text)
        print(f"{args.out}: {len(quotas)} types, loss {args.target_loss:g}, deadline {args.deadline:g} s"
              + (f", budget ${args.budget:g}" if args.budget is not None else ""))
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``list`` and ``build``."""
    p = sub.add_parser("list", help="list the embedded instances, catalogs and workload profiles",
                       description=cmd_list.__doc__)
    p.add_argument("kind", nargs="?", choices=KINDS, help="only this kind (default: all)")
    p.add_argument("--json", action="store_true", help="print one JSON object: kind -> entries")
    p.set_defaults(run=cmd_list)

    p = sub.add_parser("build", help="write an instance from a catalog, a workload profile and an SLO",
                       description=cmd_build.__doc__)
    p.add_argument("--catalog", required=True, help="catalog file, or an embedded catalog's name (dnnprov list)")
    p.add_argument("--profile", required=True, help="spot workload profile file, or an embedded one's name")
    p.add_argument("--target-loss", type=float, required=True, help="objective training loss (slo.loss)")
    p.add_argument("--deadline", type=float, required=True, help="objective training time in seconds (slo.time_s)")
    p.add_argument("--budget", type=float, default=None, help="largest cost in $ (constraints.budget_usd)")
    p.add_argument("--quota", action="append", metavar="TYPE=N",
                   help="offer TYPE with spot quota N (repeatable; default: every type of the profile "
                        "the catalog prices, each with --default-quota)")
    p.add_argument("--default-quota", type=int, default=DEFAULT_QUOTA, help="spot quota of each type without --quota")
    p.add_argument("--ps-type", default="m5.xlarge", help="parameter-server instance type (platform.ps_type)")
    p.add_argument("--ps-price-per-h", type=float, default=0.0,
                   help="price of one parameter server in $/h (platform.ps_price_per_h; the papers' m5.xlarge: 0.192)")
    p.add_argument("--name", help="instance name (default: the workload's)")
    p.add_argument("--out", required=True, help="instance file to write, or - for standard output")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    p.set_defaults(run=cmd_build)
