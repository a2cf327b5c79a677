"""The ``list`` and ``build`` subcommands: what ships with dnnprov, and instances made from it.

dnnprov list [instances|catalogs|workloads] [--json]
dnnprov build --catalog C --profile P --target-loss L --deadline S [--budget B]
              [--quota TYPE=N ...] [--default-quota N] [--ps-price-per-h P] [--name NAME]
              [--estimate-unprofiled [--estimate-at point|fast|slow]] [--region R[,R...]] --out FILE|-
dnnprov build --catalog C --profile serverless/W --deadline S [--architecture x86_64|arm64]
              [--speed-factor F --speed-factor-source TEXT] --out FILE|-        (a serverless workload)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dnnprov.cli.common import EXIT_OK, output_file, terminal_safe, writing
from dnnprov.errors import InvalidInputError

if TYPE_CHECKING:
    from dnnprov.io.catalogs.catalog import Catalog, SpotWorkloadProfile

KINDS = ("instances", "catalogs", "workloads")
DEFAULT_QUOTA = 10
#: The parameter server's price when the catalog has none: one on-demand m5.xlarge in
#: us-east-1 (AWS list price, the papers' PS and the benchmark sets').
PS_TYPE, PS_LIST_PRICE_PER_H = "m5.xlarge", 0.192


def _data_root() -> Path:
    from dnnprov.io.catalogs.catalog import embedded_path

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
                entry.update(
                    kind=relative.split("/")[0],
                    use=f"embedded:{relative}",
                    notes=_first_words(str(data.get("notes", "")), 100),
                )
            elif kind == "catalogs":
                entry.update(
                    region=data.get("region"),
                    snapshot=data.get("snapshot"),
                    types=len(data.get("instance_types", {})),
                    use=str(path),
                )
            else:
                entry.update(
                    format=data.get("format"),
                    use=str(path),
                    workload=(data.get("workload") or {}).get("name", data.get("name")),
                )
            found[kind].append(entry)
    return found


def _first_words(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary, ``...`` marking the cut."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 4].rsplit(" ", 1)[0].rstrip(" ,;:")
    return f"{cut} ..."


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
            extra = (
                entry.get("notes")
                if kind == "instances"
                else f"{entry['region']}, {entry['snapshot']}, {entry['types']} types"
                if kind == "catalogs"
                else entry.get("format")
            )
            print(f"  {terminal_safe(entry['name']):<44} {terminal_safe(extra or '')}")
    print(
        f"\nsolve an instance with: dnnprov solve embedded:{found['instances'][0]['use'].removeprefix('embedded:')}"
        if found["instances"]
        else ""
    )
    return EXIT_OK


def embedded_or_path(value: str, kind: str, option: str | None = None) -> Path:
    """``value`` as a file (``-``: standard input), or the name of an embedded catalog or
    workload profile (``dnnprov list``); ``option`` names it in the error (default
    ``--catalog`` or ``--profile``)."""
    from dnnprov.json_files import STDIN_PATHS

    path = Path(value)
    if value in STDIN_PATHS or path.exists():
        return path
    embedded = _data_root() / kind / (value.removesuffix(".json") + ".json")
    if embedded.is_file():
        return embedded
    raise InvalidInputError(
        option or f"--{'catalog' if kind == 'catalogs' else 'profile'}",
        f"no file {value!r} and no embedded {kind[:-1]} of that name (dnnprov list {kind})",
    )


def load_catalog_arg(value: str) -> Catalog:
    """A catalog from a file or an embedded catalog's name."""
    from dnnprov.io.catalogs.catalog import load_catalog

    return load_catalog(embedded_or_path(value, "catalogs"))


def load_profile_arg(value: str, option: str | None = None) -> SpotWorkloadProfile:
    """A spot workload profile from a file or an embedded profile's name (``spot/resnet110-paper``)."""
    from dnnprov.io.catalogs.catalog import load_spot_profile

    return load_spot_profile(embedded_or_path(value, "workloads", option))


def ps_price(catalog: Catalog, ps_type: str, given: float | None) -> tuple[float, str]:
    """The PS price in $/h and where it came from: ``--ps-price-per-h``, else the catalog's
    on-demand price of ``ps_type``, else the m5.xlarge list price; another type without a price is an error."""
    if given is not None:
        return given, "--ps-price-per-h"
    if any(e.name == ps_type for e in catalog.instance_types):
        price = catalog.entry(ps_type).on_demand_price_per_h
        if price is not None:
            return price, f"on-demand {ps_type} of catalog {catalog.name}"
    if ps_type == PS_TYPE:
        return PS_LIST_PRICE_PER_H, f"{PS_TYPE} on-demand list price, us-east-1 (dnnprov default)"
    raise InvalidInputError(
        "--ps-price-per-h", f"catalog {catalog.name!r} has no on-demand price of PS type {ps_type!r}: give the PS price"
    )


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
    from dnnprov.io.catalogs.catalog import MULTI_REGION, build_spot_problem, profile_of, split_region
    from dnnprov.problems.spot import SpotConstraints, SpotPlatform, SpotSLO

    catalog = load_catalog_arg(args.catalog)
    if args.region:
        catalog = only_regions(catalog, args.region)
    if _is_serverless(args.profile):
        return _build_serverless(args, catalog)
    if args.target_loss is None:
        raise InvalidInputError("--target-loss", "needed for a spot workload (slo.loss)")
    profile = load_profile_arg(args.profile)
    quotas = dict(_quota(q) for q in args.quota or [])
    if args.estimate_unprofiled:
        from dnnprov.profiling.estimate import estimate_types, with_estimates

        # A multi-region catalog's pools share their type's hardware: estimate each type once.
        hardware = catalog.hardware_view() if catalog.region == MULTI_REGION else catalog
        priced = {e.base_name for e in catalog.instance_types if e.spot_price_per_h is not None}
        wanted = (
            [split_region(n)[0] for n in quotas if not _profiled(profile, n)]
            if quotas
            else [n for n in estimate_types(profile, hardware) if n in priced]
        )
        profile = with_estimates(profile, hardware, end=args.estimate_at, types=list(dict.fromkeys(wanted)))
    if not quotas:
        quotas = {
            e.name: args.default_quota
            for e in catalog.instance_types
            if _profiled(profile, e.name) and e.spot_price_per_h is not None
        }
        if not quotas:
            raise InvalidInputError(
                "--profile",
                f"no type of workload {profile.workload.name!r} has a spot price "
                f"in catalog {catalog.name!r}"
                + (
                    ""
                    if args.estimate_unprofiled
                    else " (--estimate-unprofiled estimates the types it does not measure)"
                ),
            )
    if args.out != "-" and output_file(args.out).exists() and not args.force:
        raise InvalidInputError("--out", f"{args.out} exists (--force overwrites it)")
    estimated = [n for n in quotas if _profiled(profile, n) and profile_of(profile, n).get("estimate") is not None]
    price, price_source = ps_price(catalog, args.ps_type, args.ps_price_per_h)
    constraints = SpotConstraints(budget_usd=args.budget) if args.budget is not None else None
    notes = (
        f"built by dnnprov build from catalog {catalog.name} ({catalog.snapshot}) and workload "
        f"{profile.workload.name}; PS {args.ps_type} at ${price:g}/h ({price_source})"
    )
    if estimated:
        notes += f". ESTIMATED compute times (not measured; instance_types.T.estimate says how): {', '.join(estimated)}"
    problem = build_spot_problem(
        catalog,
        profile,
        SpotSLO(loss=args.target_loss, time_s=args.deadline),
        quotas=quotas,
        constraints=constraints,
        name=args.name or profile.workload.name,
        platform=SpotPlatform(ps_price_per_h=price, ps_type=args.ps_type),
        notes=notes,
    )
    _write(
        args,
        problem,
        f"{len(quotas)} types, loss {args.target_loss:g}, deadline {args.deadline:g} s"
        + (f", budget ${args.budget:g}" if args.budget is not None else "")
        + f", PS ${price:g}/h ({price_source})"
        + (f", {len(estimated)} ESTIMATED (instance_types.T.estimate)" if estimated else ""),
    )
    return EXIT_OK


def only_regions(catalog: Catalog, text: str) -> Catalog:
    """The pools of a multi-region catalog in the regions of ``text`` (``a,b``; ``all``: every one)."""
    from dataclasses import replace

    from dnnprov.io.catalogs.catalog import MULTI_REGION
    from dnnprov.io.catalogs.regions import parse_regions

    regions = parse_regions(text)
    if regions is None:
        return catalog
    if catalog.region != MULTI_REGION:
        if regions == [catalog.region]:
            return catalog
        raise InvalidInputError("--region", f"catalog {catalog.name!r} is of {catalog.region} only")
    missing = [r for r in regions if r not in catalog.regions]
    if missing:
        raise InvalidInputError("--region", f"catalog {catalog.name!r} has no pool in {', '.join(missing)}")
    return replace(catalog, instance_types=tuple(e for e in catalog.instance_types if e.region in regions))


def _profiled(profile: SpotWorkloadProfile, type_name: str) -> bool:
    """Whether the profile measures (or estimates) ``type_name``, or its plain type when region-qualified."""
    from dnnprov.io.catalogs.catalog import split_region

    return type_name in profile.per_type or split_region(type_name)[0] in profile.per_type


def _is_serverless(value: str) -> bool:
    """Whether ``--profile`` names a serverless workload file (format ``dnnprov/serverless-workload``)."""
    from dnnprov.io.paper import SERVERLESS_WORKLOAD_FORMAT
    from dnnprov.json_files import STDIN_PATHS, read_json_file

    if value in STDIN_PATHS:
        return False
    data = read_json_file(embedded_or_path(value, "workloads"))
    return isinstance(data, dict) and data.get("format") == SERVERLESS_WORKLOAD_FORMAT


def _build_serverless(args: argparse.Namespace, catalog: Catalog) -> int:
    """``build`` for a serverless workload: the catalog's function offer of ``--architecture``."""
    from dnnprov.io.catalogs.catalog import build_serverless_problem
    from dnnprov.io.paper import load_serverless_workload
    from dnnprov.problems.serverless import ServerlessConstraints

    for option, given in (
        ("--target-loss", args.target_loss),
        ("--quota", args.quota),
        ("--estimate-unprofiled", args.estimate_unprofiled or None),
    ):
        if given is not None:
            raise InvalidInputError(option, "applies to spot workloads; a serverless SLO is the deadline alone")
    if args.out != "-" and output_file(args.out).exists() and not args.force:
        raise InvalidInputError("--out", f"{args.out} exists (--force overwrites it)")
    workload = load_serverless_workload(embedded_or_path(args.profile, "workloads"))
    offer = catalog.function(args.architecture)
    constraints = ServerlessConstraints(budget_usd=args.budget) if args.budget is not None else None
    problem = build_serverless_problem(
        catalog,
        workload,
        args.deadline,
        architecture=args.architecture,
        speed_factor=args.speed_factor,
        speed_source=args.speed_factor_source,
        ps_price_per_h=args.ps_price_per_h,
        name=args.name,
        constraints=constraints,
        notes=f"built by dnnprov build from catalog {catalog.name} ({catalog.snapshot}), function offer "
        f"{args.architecture} (${offer.price_per_gb_s:g}/GB-s; {offer.sources.get('price_per_gb_s', '')}), "
        f"workload {workload.name}.",
    )
    _write(
        args,
        problem,
        f"{args.architecture} functions {offer.min_memory_mb}-{offer.max_memory_mb} MB "
        f"(step {offer.memory_step_mb}), ${offer.price_per_gb_s:g}/GB-s, deadline {args.deadline:g} s",
    )
    return EXIT_OK


def _write(args: argparse.Namespace, problem: Any, summary: str) -> None:
    """Write ``problem`` to ``--out`` (``-``: standard output) after reading it back through the checks."""
    from dnnprov.io.instances import dumps_instance, problem_from_dict

    text = dumps_instance(problem)
    problem_from_dict(json.loads(text))  # what is written reads back (schema and checks)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with writing(args.out):
            Path(args.out).write_text(text)
        print(f"{args.out}: {summary}")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``list`` and ``build``."""
    p = sub.add_parser(
        "list", help="list the embedded instances, catalogs and workload profiles", description=cmd_list.__doc__
    )
    p.add_argument("kind", nargs="?", choices=KINDS, help="only this kind (default: all)")
    p.add_argument("--json", action="store_true", help="print one JSON object: kind -> entries")
    p.set_defaults(run=cmd_list)

    p = sub.add_parser(
        "build", help="write an instance from a catalog, a workload profile and an SLO", description=cmd_build.__doc__
    )
    p.add_argument("--catalog", required=True, help="catalog file, or an embedded catalog's name (dnnprov list)")
    p.add_argument(
        "--profile",
        required=True,
        help="spot workload profile or serverless workload: a file, or an "
        "embedded one's name (spot/resnet110-paper, serverless/resnet50)",
    )
    p.add_argument("--target-loss", type=float, default=None, help="objective training loss (slo.loss; spot)")
    p.add_argument("--deadline", type=float, required=True, help="objective training time in seconds (slo.time_s)")
    p.add_argument("--budget", type=float, default=None, help="largest cost in $ (constraints.budget_usd)")
    p.add_argument(
        "--quota",
        action="append",
        metavar="TYPE=N",
        help="offer TYPE with spot quota N (repeatable; default: every type of the profile "
        "the catalog prices, each with --default-quota)",
    )
    p.add_argument("--default-quota", type=int, default=DEFAULT_QUOTA, help="spot quota of each type without --quota")
    p.add_argument("--ps-type", default="m5.xlarge", help="parameter-server instance type (platform.ps_type)")
    p.add_argument(
        "--ps-price-per-h",
        type=float,
        default=None,
        help="price of one parameter server in $/h (platform.ps_price_per_h; default: the catalog's "
        "on-demand price of --ps-type, else m5.xlarge's list price 0.192)",
    )
    p.add_argument(
        "--estimate-unprofiled",
        action="store_true",
        help="offer the catalog's types the profile does not measure too, with ESTIMATED compute times "
        "(dnnprov profile estimate; marked in the instance and in every result)",
    )
    p.add_argument(
        "--estimate-at",
        choices=("point", "fast", "slow"),
        default="point",
        help="with --estimate-unprofiled: the estimate's point or an end of its interval",
    )
    p.add_argument(
        "--architecture",
        choices=("x86_64", "arm64"),
        default="x86_64",
        help="serverless: the function architecture of the catalog's offers (default x86_64)",
    )
    p.add_argument(
        "--speed-factor",
        type=float,
        default=None,
        help="serverless: the workload's speed on --architecture relative to x86_64 (a measured ratio; "
        "arm64 has none in the data)",
    )
    p.add_argument("--speed-factor-source", default=None, help="serverless: where --speed-factor comes from")
    p.add_argument(
        "--region",
        help="of a multi-region catalog, only the pools of these regions (a region or a comma-separated list; "
        "one region: a plan in one region)",
    )
    p.add_argument("--name", help="instance name (default: the workload's)")
    p.add_argument("--out", required=True, help="instance file to write, or - for standard output")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    p.set_defaults(run=cmd_build)
