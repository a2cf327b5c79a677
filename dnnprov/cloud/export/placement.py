"""Where a plan's instances go: one region for the whole plan, and spot pools (zones) per type.

Plans name types, not zones (the instance's ``instance_types.<type>.zones``, issue 18):
placing a type's spot workers on its pools is the launch's. Every export uses one region
(the PS and the workers together): the catalog's, else the one given, else the single
region all the plan's pools lie in. A type's pools outside that region are not used;
the rest are tried cheapest first (the pool's spot price, else the type's), each holding
at most its ``capacity``. On-demand workers and the PS are placed by region only.

A plan of a multi-region instance names each type's region (``TYPE@REGION``, built from a
multi-region catalog): its workers go to that region (:func:`type_region`) as the plain
AWS type (:func:`aws_type`), and the region of :func:`plan_region` is the PS's: the one
given, else the region holding most of the plan's worker GPUs (ties: the first by name).
The spot model prices no traffic between regions; build from one region's pools
(``dnnprov build --region``) for a plan in one region.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dnnprov.cloud.export.plan import PlanDocument, hardware, split_label
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import split_region
from dnnprov.problems.spot import SpotProblem
from dnnprov.problems.validation import checks as check

#: The form of every EC2 instance type: botocore's InstanceType values (``g4dn.4xlarge``, ``u-6tb1.metal``,
#: ``c7i-flex.large``) all match it, so a new type does too; a name that does not is no type EC2 launches.
EC2_TYPE = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*\.[a-z0-9]+(-[a-z0-9]+)*")
#: The region of an AWS zone name: ``us-east-1a`` and the local zone ``us-west-2-lax-1a`` -> ``us-east-1``, ``us-west-2``.
_AWS_REGION = re.compile(r"[a-z]{2}(?:-[a-z]+)+-[0-9]+")


@dataclass(frozen=True)
class Pool:
    """A spot pool a type's workers may be placed in: its zone, capacity (None: any) and $/h."""

    zone: str
    capacity: int | None
    price_per_h: float


def check_region(field: str, region: object) -> str:
    """``region`` if it is an AWS region name (``us-east-1``, ``us-gov-west-1``), else one error naming ``field``."""
    if not isinstance(region, str) or _AWS_REGION.fullmatch(region) is None:
        raise InvalidInputError(field, f"{region!r} is not an AWS region name (such as us-east-1)")
    return region


def zone_region(zone: str) -> str:
    """The AWS region of availability zone ``zone``."""
    match = _AWS_REGION.match(zone)
    if match is None or match.end() == len(zone):
        raise InvalidInputError("zones", f"{zone!r} is not an AWS availability-zone name (such as us-east-1a)")
    return match.group(0)


def type_region(type_name: str) -> str | None:
    """The region a region-qualified type names (``p3.2xlarge@us-west-2`` -> ``us-west-2``), else ``None``."""
    region = split_region(type_name)[1]
    return None if region is None else check_region(f"instance_types.{type_name}", region)


def aws_type(type_name: str) -> str:
    """The AWS instance type of a (possibly region-qualified) type name: ``p3.2xlarge@us-west-2`` -> ``p3.2xlarge``."""
    return split_region(type_name)[0]


def ec2_type(field: str, type_name: str, *, qualified: bool = True) -> str:
    """The AWS type EC2 is asked to launch for ``type_name`` (its ``@REGION`` dropped when ``qualified``),
    or one error naming ``field`` when it cannot be an EC2 instance type (EC2 would refuse the call).

    The PS's type is not ``qualified``: it is launched in :func:`plan_region`'s region, so a PS type
    naming a region of its own is refused (:func:`plain_ps_type`), never silently moved.
    """
    if not qualified:
        plain_ps_type(field, type_name)
    name = aws_type(type_name)
    if EC2_TYPE.fullmatch(name) is None:
        raise InvalidInputError(
            field,
            f"{check.short(name)} is no EC2 instance type (FAMILY.SIZE in lower-case letters, digits and '-', "
            "such as g4dn.4xlarge): EC2 would refuse the launch",
        )
    return name


def plain_ps_type(field: str, type_name: str) -> str:
    """``type_name`` if it names no region (``m5.xlarge``, not ``m5.xlarge@eu-west-1``), else one error:
    the PS goes to the plan's region (:func:`plan_region`), and a launch of ``TYPE@REGION`` fails."""
    if split_region(type_name)[1] is not None:
        raise InvalidInputError(
            field,
            f"{check.short(type_name)} names a region: the PS is launched in the plan's region "
            "(SkyPilot: --region), so give its plain AWS type, such as m5.xlarge",
        )
    return type_name


def worker_regions(doc: PlanDocument) -> dict[str, int]:
    """GPUs of the plan's workers per region their types name (empty: no region-qualified type)."""
    gpus: dict[str, int] = {}
    if doc.kind != "spot":
        return gpus
    for label, count in doc.counts().items():
        type_name = split_label(label)[0]
        region = type_region(type_name)
        if region is not None:
            gpus[region] = gpus.get(region, 0) + count * (hardware(doc, type_name)[0] or 1)
    return gpus


def _pools(doc: PlanDocument, type_name: str) -> list[Pool]:
    if not isinstance(doc.problem, SpotProblem):
        return []
    for t in doc.problem.instance_types:
        if t.name == type_name:
            return [
                Pool(p.zone, p.capacity, t.spot_price_per_h if p.spot_price_per_h is None else p.spot_price_per_h)
                for p in t.zones
            ]
    return []


def plan_region(doc: PlanDocument, given: str | None = None, region_option: str | None = None) -> str | None:
    """The one region of the plan's launches (None: no catalog, none given and no pools);
    for a plan of region-qualified types, the PS's region (the module's docstring).

    ``region_option``: the option that gives ``given`` (named in the refusal of pools in
    several regions); None for an export that takes its region from the catalog only.
    """
    regional = worker_regions(doc)
    if regional:
        return given or min(regional, key=lambda r: (-regional[r], r))
    if doc.region or given:
        return doc.region or given
    regions = {
        zone_region(p.zone)
        for label in doc.launch_counts()
        if split_label(label)[1] == "spot"
        for p in _pools(doc, split_label(label)[0])
    }
    if len(regions) > 1:
        raise InvalidInputError(
            "region",
            f"the plan's spot pools lie in {len(regions)} regions "
            f"({', '.join(sorted(regions))}) and the PS and workers belong in one: "
            "wrap the plan with its catalog (--catalog)" + (f" or pass {region_option}" if region_option else ""),
        )
    return next(iter(regions), None)


def region_pools(doc: PlanDocument, label: str, region: str | None) -> list[Pool]:
    """The pools of ``label``'s type in ``region`` (its own region if it names one), cheapest
    first ([]: placed by region only)."""
    type_name, market = split_label(label)
    region = type_region(type_name) or region
    pools = _pools(doc, type_name) if market == "spot" else []
    if not pools:
        return []
    inside = [p for p in pools if region is None or zone_region(p.zone) == region]
    if not inside:
        raise InvalidInputError(
            f"instance_types.{type_name}.zones",
            f"none of the pools of {type_name} ({', '.join(p.zone for p in pools)}) lies in the plan's region {region}",
        )
    return sorted(inside, key=lambda p: (p.price_per_h, p.zone))


def split(pools: list[Pool], count: int, label: str) -> list[tuple[str, int]]:
    """``count`` instances over ``pools``: all in the cheapest pool that holds them, else cheapest first."""
    whole = [p for p in pools if p.capacity is None or p.capacity >= count]
    if whole:
        return [(whole[0].zone, count)]
    parts, left = [], count
    for p in pools:
        take = min(left, p.capacity or 0)
        if take:
            parts.append((p.zone, take))
            left -= take
    if left:
        raise InvalidInputError(
            f"result.plan.counts.{label}",
            f"{count} instances exceed the capacity {count - left} of the type's pools in the region",
        )
    return parts
