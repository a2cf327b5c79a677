"""SkyPilot export of a spot plan: one task file per cluster and a ``launch.sh`` that runs them.

SkyPilot has no heterogeneous cluster in one task, so each (type, market) of the plan and
the PS nodes is its own task, launched as its own cluster: the PS first, then the
workers, each with the PS address (``DNNPROV_PS_ADDR``, from ``sky status --ip``); the PS
task opens its port (``resources.ports``, :data:`PS_PORT`) to the workers' clusters. Every
task is pinned to the plan's region (and zone, when the plan names one; a multi-region
plan's workers to the region their type names, ``TYPE@REGION``), every type is
checked against SkyPilot's own AWS catalog (``catalogs/v8/aws/vms.csv`` of
skypilot-org/skypilot-catalog, which SkyPilot keeps in ``~/.sky/catalogs/v8/aws``), and
clusters stop themselves when idle (``autostop``). ``launch.sh`` tears down what it
launched when a later launch fails. Spot workers may run as managed jobs
(``sky jobs launch``), which SkyPilot recovers after a preemption.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dnnprov.cloud.export.names import UniqueNames, skypilot_name
from dnnprov.cloud.export.placement import (
    aws_type,
    check_region,
    plain_ps_type,
    plan_region,
    region_pools,
    split,
    type_region,
)
from dnnprov.cloud.export.plan import PlanDocument, dump_yaml, hardware, split_label
from dnnprov.errors import InvalidInputError
from dnnprov.problems.validation import checks as check

#: Where SkyPilot keeps its AWS catalog (schema v8, SkyPilot 0.10 and later).
DEFAULT_CATALOG = Path("~/.sky/catalogs/v8/aws/vms.csv")
#: The PS's port: ``DNNPROV_PS_PORT`` of every task, and the port the PS task opens (``resources.ports``).
PS_PORT = 2222
SETUP = 'echo "dnnprov placeholder: install the training environment of $DNNPROV_ROLE nodes here"'
RUN = (
    'echo "dnnprov placeholder: start the $DNNPROV_ROLE process of node $SKYPILOT_NODE_RANK here '
    '(PS at $DNNPROV_PS_ADDR:$DNNPROV_PS_PORT, nodes $SKYPILOT_NODE_IPS)"'
)


@dataclass(frozen=True)
class CatalogRow:
    """One offer of SkyPilot's AWS catalog: a type in one availability zone."""

    instance_type: str
    accelerator: str
    accelerators: int
    vcpus: float
    memory_gib: float
    price: float | None
    region: str
    zone: str


class SkyPilotCatalog:
    """The rows of SkyPilot's AWS catalog (``vms.csv``) that say which types it can launch where."""

    def __init__(self, rows: list[CatalogRow], source: str) -> None:
        self.rows, self.source = rows, source

    @classmethod
    def read(cls, path: str | Path) -> SkyPilotCatalog:
        """Read a ``vms.csv`` (SkyPilot's own file or an extract with its header; ``#`` lines skipped)."""
        path = Path(path).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInputError(
                "skypilot_catalog", f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}"
            ) from None
        return cls.parse(text, str(path))

    @classmethod
    def parse(cls, text: str, source: str) -> SkyPilotCatalog:
        """The catalog of a ``vms.csv`` text; ``source`` names it in messages."""
        lines = [line for line in text.splitlines() if not line.startswith("#")]
        rows = []
        try:
            for row in csv.DictReader(lines):
                rows.append(
                    CatalogRow(
                        instance_type=row["InstanceType"],
                        accelerator=row.get("AcceleratorName") or "",
                        accelerators=int(float(row.get("AcceleratorCount") or 0)),
                        vcpus=float(row.get("vCPUs") or 0),
                        memory_gib=float(row.get("MemoryGiB") or 0),
                        price=float(row["Price"]) if row.get("Price") else None,
                        region=row["Region"],
                        zone=row.get("AvailabilityZone") or "",
                    )
                )
        except (KeyError, TypeError, ValueError, OverflowError, csv.Error) as exc:
            raise InvalidInputError(
                "skypilot_catalog",
                f"{source}: row {len(rows) + 2} is not a SkyPilot vms.csv row ({type(exc).__name__}: {exc})",
            ) from None
        if not rows:
            raise InvalidInputError("skypilot_catalog", f"{source} has no rows of SkyPilot's vms.csv")
        return cls(rows, source)

    def offers(self, instance_type: str, region: str) -> bool:
        """Whether SkyPilot knows ``instance_type`` in ``region``."""
        return any(r.instance_type == instance_type and r.region == region for r in self.rows)

    def regions(self, instance_type: str) -> list[str]:
        """Regions where SkyPilot knows ``instance_type``."""
        return sorted({r.region for r in self.rows if r.instance_type == instance_type})

    def nearest(self, region: str, gpus: int | None, vcpus: int | None, limit: int = 3) -> list[CatalogRow]:
        """Types of ``region`` with the same GPU count, closest in vCPUs first, then cheapest."""
        best: dict[str, CatalogRow] = {}
        for r in self.rows:
            if r.region == region and r.accelerators and (gpus is None or r.accelerators == gpus):
                best.setdefault(r.instance_type, r)
        return sorted(
            best.values(), key=lambda r: (abs(r.vcpus - (vcpus or r.vcpus)), r.price or 0.0, r.instance_type)
        )[:limit]


@dataclass(frozen=True)
class SkyPilotOptions:
    """Options of the SkyPilot export.

    ``catalog``: SkyPilot's AWS ``vms.csv`` to check types against, a path or a read
    :class:`SkyPilotCatalog` (default: SkyPilot's own copy, ``~/.sky/catalogs/v8/aws/vms.csv``);
    ``check_catalog=False`` skips the check. ``region`` (an AWS region name) is used when the
    plan carries no catalog region. ``managed_spot``: spot workers as managed jobs (``sky jobs
    launch``, recovered after preemptions). ``autostop_minutes``: idle minutes before a
    cluster is torn down.
    """

    catalog: str | Path | SkyPilotCatalog | None = None
    check_catalog: bool = True
    region: str | None = None
    managed_spot: bool = False
    autostop_minutes: int = 10

    def __post_init__(self) -> None:
        check.integer("autostop", self.autostop_minutes, minimum=1, maximum=10_080)
        if self.region is not None:
            check_region("region", self.region)


def _region(doc: PlanDocument, options: SkyPilotOptions) -> str:
    region = plan_region(doc, options.region, "--region")
    if not region:
        raise InvalidInputError(
            "region",
            "the plan names no region (no catalog), so SkyPilot would place each "
            "cluster in its own cheapest region, the PS apart from the workers: "
            "wrap the plan with its catalog (--catalog) or pass --region",
        )
    return region


def _check_types(
    doc: PlanDocument, options: SkyPilotOptions, default_region: str, types: list[tuple[str, str]]
) -> None:
    """Refuse the first type SkyPilot's catalog does not offer in its region (the one it names,
    else ``default_region``), with the nearest types it does offer there."""
    if not options.check_catalog:
        return
    if isinstance(options.catalog, SkyPilotCatalog):
        catalog = options.catalog
    else:
        path = Path(options.catalog or DEFAULT_CATALOG).expanduser()
        if options.catalog is None and not path.exists():
            raise InvalidInputError(
                "skypilot_catalog",
                f"no SkyPilot AWS catalog at {path} to check the plan's "
                "types against: run `sky show-gpus --infra aws` once (SkyPilot downloads it), "
                "pass --skypilot-catalog FILE, or --no-catalog-check to skip the check",
            )
        catalog = SkyPilotCatalog.read(path)
    for field, name in types:
        type_name, region = aws_type(name), type_region(name) or default_region
        if catalog.offers(type_name, region):
            continue
        gpus, vcpus, _ = hardware(doc, name)
        near = catalog.nearest(region, gpus, vcpus)
        elsewhere = catalog.regions(type_name)
        hint = (
            f"its catalog {catalog.source} offers it in {', '.join(elsewhere[:5])} only"
            if elsewhere
            else f"its catalog {catalog.source} has no row of it in any region (SkyPilot lists no retired types, "
            "such as g3)"
        )
        nearest = ", ".join(f"{r.instance_type} ({r.accelerators} x {r.accelerator}, {r.vcpus:g} vCPUs)" for r in near)
        raise InvalidInputError(
            field,
            f"SkyPilot cannot launch {type_name} in {region}: {hint}. "
            + (f"Nearest types it has there: {nearest}. " if nearest else "")
            + f"For an exact plan SkyPilot can launch, re-solve with the quota of {type_name} "
            "set to 0 (dnnprov does not swap types silently)",
        )


def skypilot_tasks(doc: PlanDocument, options: SkyPilotOptions = SkyPilotOptions()) -> dict[str, dict[str, Any]]:
    """SkyPilot tasks of a spot plan, one per cluster, PS first: ``{cluster name: task}``."""
    doc.require_spot()
    region = _region(doc, options)
    launch = doc.launch_counts()
    checked = [(f"result.plan.counts.{label}", split_label(label)[0]) for label in launch]
    if doc.launches_ps():
        checked.append(("instance.platform.ps_type", plain_ps_type("instance.platform.ps_type", doc.ps_type)))
    _check_types(doc, options, region, checked)
    names = UniqueNames()
    base = skypilot_name(doc.name, 30)
    envs = {
        "DNNPROV_PLAN": doc.name,
        "DNNPROV_PS_PORT": str(PS_PORT),
        "DNNPROV_WORKERS": str(sum(doc.counts().values())),
    }
    autostop = {"idle_minutes": options.autostop_minutes, "down": True}
    tasks: dict[str, dict[str, Any]] = {}
    if doc.launches_ps():
        name = names(f"{base}-ps")
        tasks[name] = {
            "name": name,
            "num_nodes": doc.ps_to_launch(),
            "resources": {
                "infra": f"aws/{region}",
                "instance_type": doc.ps_type,
                "use_spot": False,
                "ports": PS_PORT,
                "autostop": autostop,
            },
            "envs": {**envs, "DNNPROV_ROLE": "ps", "DNNPROV_PS_ADDR": "localhost"},
            "setup": SETUP,
            "run": RUN,
        }
    for label, count in launch.items():
        type_name, market = split_label(label)
        managed = options.managed_spot and market == "spot"
        where = type_region(type_name) or region
        for zones, n in _clusters(doc, label, count, where):
            name = names(f"{base}-{type_name}-{market}" + (f"-{zones[0]}" if len(zones) == 1 and n < count else ""))
            resources = {
                **_where(where, zones),
                "instance_type": aws_type(type_name),
                "use_spot": market == "spot",
                **({} if managed else {"autostop": autostop}),
            }
            tasks[name] = {
                "name": name,
                "num_nodes": n,
                "resources": resources,
                "envs": {**envs, "DNNPROV_ROLE": "worker", "DNNPROV_PS_ADDR": None},
                "setup": SETUP,
                "run": RUN,
            }
    return tasks


def _where(region: str, zones: list[str]) -> dict[str, Any]:
    """``infra`` of a cluster: the region, its one zone, or ``any_of`` its candidate zones."""
    if not zones:
        return {"infra": f"aws/{region}"}
    if len(zones) == 1:
        return {"infra": f"aws/{region}/{zones[0]}"}
    return {"any_of": [{"infra": f"aws/{region}/{zone}"} for zone in zones]}


def _clusters(doc: PlanDocument, label: str, count: int, region: str) -> list[tuple[list[str], int]]:
    """The clusters of one (type, market): ``(zones it may use, nodes)``.

    A SkyPilot cluster lives in one zone: all pools that can hold every node are its
    candidates (``any_of``); when none can, the nodes are split over the pools, one
    cluster each. No pools: one cluster placed by region.
    """
    pools = region_pools(doc, label, region)
    if not pools:
        return [([], count)]
    whole = [p.zone for p in pools if p.capacity is None or p.capacity >= count]
    if whole:
        return [(whole, count)]
    return [([zone], n) for zone, n in split(pools, count, label)]


def _launch_script(tasks: dict[str, dict[str, Any]], ps: str | None, options: SkyPilotOptions) -> str:
    """``launch.sh``: the PS cluster first, then the workers with its address; tear down all on a failure."""
    lines = [
        "#!/bin/sh",
        "# Launch every cluster of the dnnprov plan (one SkyPilot task file each): the PS",
        "# first, then the workers with the PS address. If any launch fails, everything this",
        "# script launched is torn down again and it exits nonzero.",
        "set -u",
        'cd "$(dirname "$0")" || exit 1',
        'clusters=""',
        'jobs=""',
        "cleanup() {",
        "  status=$?",
        '  if [ "$status" -ne 0 ]; then',
        '    for c in $clusters; do echo "dnnprov: tearing down $c" >&2; sky down -y "$c"; done',
        '    for j in $jobs; do echo "dnnprov: cancelling job $j" >&2; sky jobs cancel -y -n "$j"; done',
        "  fi",
        "}",
        "trap cleanup EXIT",
    ]
    if ps is not None:
        lines += [
            f'clusters="$clusters {ps}"',
            f"sky launch -y -c {ps} {ps}.yaml || exit 1",
            f"PS_ADDR=$(sky status --ip {ps}) || exit 1",
            'if [ -z "$PS_ADDR" ]; then echo "dnnprov: no address of the PS cluster" >&2; exit 1; fi',
        ]
    elif tasks:
        lines += ['PS_ADDR="${DNNPROV_PS_ADDR:?set DNNPROV_PS_ADDR to the running PS (this plan keeps it)}"']
    for name, task in tasks.items():
        if name == ps:
            continue
        if options.managed_spot and task["resources"]["use_spot"]:
            lines += [
                f'jobs="$jobs {name}"',
                f'sky jobs launch -y -n {name} {name}.yaml --env DNNPROV_PS_ADDR="$PS_ADDR" || exit 1',
            ]
        else:
            lines += [
                f'clusters="$clusters {name}"',
                f'sky launch -y -c {name} {name}.yaml --env DNNPROV_PS_ADDR="$PS_ADDR" || exit 1',
            ]
    lines.append('echo "dnnprov: launched$clusters$jobs"')
    return "\n".join(lines) + "\n"


def skypilot_files(doc: PlanDocument, options: SkyPilotOptions = SkyPilotOptions()) -> dict[str, str]:
    """One SkyPilot task file per cluster (``NAME.yaml``) and ``launch.sh`` launching them all."""
    tasks = skypilot_tasks(doc, options)
    ps = next((name for name, t in tasks.items() if t["envs"]["DNNPROV_ROLE"] == "ps"), None)
    files = {}
    for name, task in tasks.items():
        how = (
            f"sky jobs launch -n {name} {name}.yaml"
            if options.managed_spot and task["resources"]["use_spot"]
            else f"sky launch -c {name} {name}.yaml"
        )
        files[f"{name}.yaml"] = dump_yaml(
            [task],
            "SkyPilot task of a dnnprov plan (launch.sh launches all):\n"
            f"  {how}" + ("" if name == ps else " --env DNNPROV_PS_ADDR=..."),
        )
    files["launch.sh"] = _launch_script(tasks, ps, options)
    return files
