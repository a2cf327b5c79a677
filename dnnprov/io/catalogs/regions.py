"""Multi-region catalogs: one catalog whose entries are the (type, region) pools of many regions.

Each region's catalog is built as before (:func:`dnnprov.io.catalogs.importing.import_shared_data`
offline, :func:`dnnprov.cloud.aws.fetch_catalog` online); :func:`merge_regions` joins them.
An entry of region ``R`` is named ``TYPE@R`` (:func:`dnnprov.io.catalogs.catalog.qualified`), carries
``region: R`` and the quota family ``FAMILY@R`` (AWS's vCPU quotas are per region); prices,
interruption buckets and sources stay the region's own. The merged catalog's ``region`` is
:data:`~dnnprov.io.catalogs.catalog.MULTI_REGION`. Function offers (AWS Lambda) are per region and
are not merged: a serverless instance is built from a single-region catalog.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import MULTI_REGION, Catalog, qualified
from dnnprov.io.catalogs.importing import (
    ADVISOR_FILE,
    ON_DEMAND_FILE,
    default_shared_data,
    import_shared_data,
)
from dnnprov.json_files import read_json_file
from dnnprov.problems.spot import VcpuQuota

#: The ``--region`` value that means every region the data prices.
ALL_REGIONS = "all"
_REGION = re.compile(r"[a-z]{2}-[a-z]+-\d+")
#: What ``--region`` may list (lower-case words, digits, hyphens); whether AWS knows it is
#: checked where the region is used (botocore's list online, the data offline).
_REGION_WORDS = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


def parse_regions(text: str) -> list[str] | None:
    """``--region`` as a list of regions (``a,b,c``; one name: a list of one), ``None`` for ``all``."""
    if text.strip() == ALL_REGIONS:
        return None
    names = [r.strip() for r in text.split(",")]
    if not any(names):
        raise InvalidInputError("--region", "empty: give a region, a comma-separated list, or 'all'")
    if not all(names):  # a typo would drop a region the user meant
        raise InvalidInputError("--region", f"an empty item in {text!r}: give a comma-separated list of regions")
    if ALL_REGIONS in names:
        raise InvalidInputError("--region", f"'all' goes alone (every region), not in a list: got {text!r}")
    bad = [r for r in names if not _REGION_WORDS.fullmatch(r)]
    if bad:
        raise InvalidInputError("--region", f"{bad[0]!r} is not a region name like 'us-east-1'")
    if len(set(names)) != len(names):
        raise InvalidInputError("--region", "lists a region twice")
    return names


def shared_data_regions(shared_data: str | Path | None = None) -> list[str]:
    """Every region the shared data prices: the Spot Advisor's regions and the on-demand list's (sorted)."""
    folder = Path(shared_data) if shared_data is not None else default_shared_data()
    if folder is None or not folder.is_dir():
        raise InvalidInputError("shared_data", f"no shared data folder ({folder or '<repo>/../shared/data'})")
    advisor = read_json_file(folder / ADVISOR_FILE)
    offered = read_json_file(folder / ON_DEMAND_FILE)
    regions = set((advisor.get("spot_advisor") or {}) if isinstance(advisor, Mapping) else {})
    for item in offered if isinstance(offered, list) else []:
        if isinstance(item, Mapping) and isinstance(item.get("pricing"), Mapping):
            regions.update(item["pricing"])
    return sorted(r for r in regions if isinstance(r, str) and _REGION.fullmatch(r))


def merge_regions(catalogs: Sequence[Catalog], name: str) -> Catalog:
    """One multi-region catalog from single-region ones (each entry renamed ``TYPE@REGION``)."""
    if not catalogs:
        raise InvalidInputError("--region", "no region gave a catalog")
    regions = [c.region for c in catalogs]
    if MULTI_REGION in regions or len(set(regions)) != len(regions):
        raise InvalidInputError("--region", "each merged catalog must be of one region, each region once")
    entries = []
    quotas: list[VcpuQuota] = []
    for c in catalogs:
        for e in c.instance_types:
            family = f"{e.family}@{c.region}" if e.family else None
            entries.append(replace(e, name=qualified(e.name, c.region), region=c.region, family=family))
        quotas.extend(VcpuQuota(family=f"{q.family}@{c.region}", market=q.market, vcpus=q.vcpus) for q in c.vcpu_quotas)
    snapshots = sorted({c.snapshot for c in catalogs})
    notes = (
        catalogs[0].notes
        if len({c.notes for c in catalogs}) == 1
        else " | ".join(f"{c.region}: {c.notes}" for c in catalogs)
    )
    return Catalog(
        name=name,
        region=MULTI_REGION,
        snapshot=snapshots[-1],
        instance_types=tuple(entries),
        vcpu_quotas=tuple(quotas),
        notes=f"{len(catalogs)} regions ({', '.join(regions)}); entries TYPE@REGION, quota families FAMILY@REGION"
        + (f"; snapshots {', '.join(snapshots)} (the latest is the catalog's)" if len(snapshots) > 1 else "")
        + ". No function offers (per region: build serverless instances from a single-region catalog). "
        + notes,
    )


def import_regions(
    regions: Sequence[str] | None,
    shared_data: str | Path | None = None,
    *,
    snapshot: str = "2025",
    mix_dates: bool = False,
    estimate_missing_spot: bool = False,
) -> Catalog:
    """A multi-region catalog of the shared data: ``regions`` (``None``: every region it prices).

    With ``None``, regions without a GPU type in the data are left out (the catalog's notes
    name them); a region of an explicit list without one is an error.
    """
    wanted = shared_data_regions(shared_data) if regions is None else list(regions)
    catalogs, empty = [], []
    for region in wanted:
        try:
            catalog = import_shared_data(
                region,
                shared_data,
                snapshot=snapshot,
                mix_dates=mix_dates,
                estimate_missing_spot=estimate_missing_spot,
            )
        except InvalidInputError as exc:
            if regions is None and exc.field == "region":
                empty.append(region)
                continue
            raise
        catalogs.append(catalog)
    label = "all" if regions is None else f"{len(wanted)}-regions"
    merged = merge_regions(catalogs, f"aws-{label}-shared-data-{snapshot}" + ("-mixed" if mix_dates else ""))
    if empty:
        merged = replace(merged, notes=merged.notes.rstrip(".") + f". No GPU type priced in: {', '.join(empty)}")
    return merged
