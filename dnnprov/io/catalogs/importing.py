"""Offline import of real AWS data (``../shared/data``) into a ``dnnprov/catalog`` v1 file.

The public files, each of one date:

- the spot-price history of 2022-05-31 (DescribeSpotPriceHistory output as TSV: AZ id,
  type, product, $/h, timestamp): per availability zone the latest Linux/UNIX price, then
  the cheapest zone; the zone is recorded in ``sources``;
- the on-demand GPU instance list of 2026-01-21 (hardware facts and per-region on-demand $/h);
- the Spot Instance Advisor feeds of 2021-02-10 and 2025-06-28 (interruption-frequency
  bucket 0-4 and savings % over on-demand).

A catalog describes one moment (:data:`SNAPSHOTS`): ``2025`` prices spot as the 2025
advisor's savings over the 2026 on-demand list (the nearest pair of the data), ``2022``
keeps the 2022 history's spot prices with the 2021 advisor's buckets and no on-demand
price (none of 2022 is in the data); ``mix_dates=True`` adds the 2026 on-demand prices and
2025 buckets to ``2022``, the import before issue 31. Every price's source names its file
and date. The files are read where they are; nothing is copied into the repository.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import Catalog, CatalogEntry, FunctionOffer
from dnnprov.json_files import read_json_file

SPOT_HISTORY_FILE = "aws-spot-price-history-2022-05-31.tsv.gz"
ON_DEMAND_FILE = "aws-gpu-instances-ondemand-2026-01-21.json"
ADVISOR_FILE = "aws-spot-advisor-2025-06-28.json"
ADVISOR_2021_FILE = "aws-spot-advisor-2021-02-10.json"
LAMBDA_FILE = "aws-lambda-duration-prices.json"
#: AWS Lambda's request price ($0.20 per million, us-east-1 list price quoted in MANIFEST.md).
LAMBDA_REQUEST_PRICE = 2e-7
#: The moments a catalog can describe, with the date each file is of.
SNAPSHOTS = ("2025", "2022")
FILE_DATES = {
    SPOT_HISTORY_FILE: "2022-05-31",
    ON_DEMAND_FILE: "2026-01-21",
    ADVISOR_FILE: "2025-06-28",
    ADVISOR_2021_FILE: "2021-02-10",
}
LINUX = "Linux/UNIX"
BUCKETS = ("<5%", "5-10%", "10-15%", "15-20%", ">20%")
#: Above this, a per-type GPU-memory figure in the on-demand list is the instance total
#: (no single GPU had more than 300 GB by 2026); below it, the figure is per GPU.
PER_GPU_MEMORY_LIMIT_GB = 300.0
_DIRECTIONS = {
    "east": "e",
    "west": "w",
    "central": "c",
    "north": "n",
    "south": "s",
    "northeast": "ne",
    "northwest": "nw",
    "southeast": "se",
    "southwest": "sw",
}


@dataclass(frozen=True)
class SpotQuote:
    """The price a catalog keeps for one type: the cheapest zone's latest price."""

    price_per_h: float
    zone: str
    timestamp: datetime
    zones: int

    def source(self, origin: str) -> str:
        """Where the price came from, for ``sources``."""
        return f"{origin}: {self.zone} at {iso(self.timestamp)} (cheapest of {self.zones} AZ, latest price per AZ)"


def iso(moment: datetime) -> str:
    """ISO 8601 UTC with a ``Z`` suffix, to the second."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def quota_family(type_name: str) -> str:
    """AWS vCPU-quota family: ``g``/``vt`` types share ``G``, ``p`` types ``P``, else the first letter."""
    return "G" if type_name.startswith("vt") else type_name[:1].upper()


def zone_id_prefix(region: str) -> str:
    """The AZ-id prefix of a region: ``us-east-1`` -> ``use1``, ``ap-northeast-2`` -> ``apne2``."""
    match = re.fullmatch(r"([a-z]{2})-([a-z]+)-(\d+)", region)
    if not match or match.group(2) not in _DIRECTIONS:
        raise InvalidInputError("region", f"{region!r} is not an AWS region name like 'us-east-1'")
    return f"{match.group(1)}{_DIRECTIONS[match.group(2)]}{match.group(3)}"


def cheapest_zone(rows: Iterable[tuple[str, float, datetime]]) -> SpotQuote | None:
    """From ``(zone, price, time)`` rows of one type: latest price per zone, then the cheapest zone."""
    latest: dict[str, tuple[datetime, float]] = {}
    for zone, price, moment in rows:
        if zone not in latest or moment > latest[zone][0]:
            latest[zone] = (moment, price)
    if not latest:
        return None
    zone = min(latest, key=lambda z: (latest[z][1], z))
    return SpotQuote(price_per_h=latest[zone][1], zone=zone, timestamp=latest[zone][0], zones=len(latest))


def default_shared_data() -> Path | None:
    """``<repo>/../shared/data``: beside this package's checkout, else beside the checkout
    containing the working directory; ``None`` when neither exists."""
    beside_package = Path(__file__).resolve().parents[4] / "shared" / "data"  # <checkout>/dnnprov/io/catalogs/
    if beside_package.is_dir():
        return beside_package
    for folder in (Path.cwd(), *Path.cwd().parents):
        candidate = folder.parent / "shared" / "data"
        if (folder / "pyproject.toml").is_file() and candidate.is_dir():
            return candidate
    return None


def read_spot_history(path: Path, region: str) -> dict[str, SpotQuote]:
    """Per type, the cheapest-zone latest Linux/UNIX price of ``region`` (every row is checked)."""
    prefix = zone_id_prefix(region) + "-az"
    rows: dict[str, list[tuple[str, float, datetime]]] = {}
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, start=1):
                zone, type_name, product, price, moment = _spot_row(f"{path.name}:{lineno}", line)
                if zone.startswith(prefix) and product.startswith(LINUX):
                    rows.setdefault(type_name, []).append((zone, price, moment))
    except (OSError, EOFError) as exc:
        raise InvalidInputError(str(path), f"cannot read spot-price history: {exc}") from None
    quotes = {name: cheapest_zone(r) for name, r in rows.items()}
    return {name: q for name, q in quotes.items() if q is not None}


def _spot_row(where: str, line: str) -> tuple[str, str, str, float, datetime]:
    cols = line.rstrip("\n").split("\t")
    if len(cols) != 5:
        raise InvalidInputError(
            where, f"expected 5 tab-separated columns (AZ id, type, product, price, timestamp), got {len(cols)}"
        )
    zone, type_name, product, price, stamp = cols
    if not zone or not type_name or not product:
        raise InvalidInputError(where, "empty AZ id, instance type or product description")
    return zone, type_name, product, parse_price(where, price), parse_time(where, stamp)


def parse_price(where: str, text: object) -> float:
    """A non-negative finite $/h price from a string like ``"0.918000"``."""
    try:
        value = float(str(text))
    except ValueError:
        raise InvalidInputError(where, f"price {text!r} is not a number") from None
    if not 0 <= value < float("inf"):
        raise InvalidInputError(where, f"price {text!r} is not a finite non-negative number")
    return value


def parse_time(where: str, text: object) -> datetime:
    """An aware UTC datetime from ISO 8601 text or a datetime."""
    if isinstance(text, datetime):
        moment = text
    else:
        try:
            moment = datetime.fromisoformat(str(text))  # Python 3.11 reads a "Z" suffix
        except ValueError:
            raise InvalidInputError(where, f"timestamp {text!r} is not ISO 8601") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def gpu_memory_per_gpu(text: str, gpus: int) -> float | None:
    """Per-GPU memory (GB) from the on-demand list's ``gpuMemory`` (``"16 GB HBM2"``, ``"Unknown"``)."""
    match = re.match(r"\s*([\d.]+)\s*GB", text or "")
    if not match:
        return None
    value = float(match.group(1))
    return value / gpus if value > PER_GPU_MEMORY_LIMIT_GB else value


def _load_json(path: Path) -> Any:
    return read_json_file(path)


def import_shared_data(
    region: str = "us-east-1",
    shared_data: str | Path | None = None,
    *,
    snapshot: str = "2025",
    mix_dates: bool = False,
    estimate_missing_spot: bool = False,
) -> Catalog:
    """Build a catalog of the GPU instance types of ``region`` at one moment of the shared real data.

    Parameters
    ----------
    region
        AWS region name; spot rows are those whose AZ id belongs to it.
    shared_data
        The folder holding the files (default: ``<repo>/../shared/data``).
    snapshot
        ``"2025"``: spot = 2026 on-demand x (1 - savings %) of the 2025-06-28 advisor, its
        buckets; ``"2022"``: the 2022-05-31 history's spot prices, the 2021-02-10 advisor's
        buckets, no on-demand price.
    mix_dates
        ``snapshot="2022"`` only: add the 2026 on-demand prices and the 2025 buckets (files
        of three dates in one catalog, each source naming its date).
    estimate_missing_spot
        ``2022`` with ``mix_dates``: for types without a spot row in the history window,
        spot = 2026 on-demand x (1 - 2025 savings %), marked ``estimated:``.
    """
    if snapshot not in SNAPSHOTS:
        raise InvalidInputError("snapshot", f"must be one of {', '.join(SNAPSHOTS)}, got {str(snapshot)[:40]!r}")
    if mix_dates and snapshot != "2022":
        raise InvalidInputError(
            "mix_dates",
            "only the 2022 snapshot can take prices of other dates; the 2025 one is of one source pair already",
        )
    if estimate_missing_spot and not (snapshot == "2022" and mix_dates):
        raise InvalidInputError(
            "estimate_missing_spot",
            "needs the 2022 snapshot with mix_dates (it prices a 2022 gap with 2026 on-demand and 2025 savings)",
        )
    folder = Path(shared_data) if shared_data is not None else default_shared_data()
    if folder is None or not folder.is_dir():
        raise InvalidInputError(
            "shared_data", f"no shared data folder ({folder or '<repo>/../shared/data not found'}); pass its path"
        )
    offered = _load_json(folder / ON_DEMAND_FILE)
    advisor_file = ADVISOR_2021_FILE if snapshot == "2022" and not mix_dates else ADVISOR_FILE
    advisor = _load_json(folder / advisor_file)
    if not isinstance(offered, list) or not isinstance(advisor, Mapping):
        raise InvalidInputError(str(folder), f"{ON_DEMAND_FILE} must be a list and {advisor_file} an object")
    advice = advisor.get("spot_advisor", {}).get(region, {}).get("Linux", {})
    spot = read_spot_history(folder / SPOT_HISTORY_FILE, region) if snapshot == "2022" else {}
    how = _Import(region, snapshot, mix_dates, estimate_missing_spot, spot, advice, advisor_file)
    entries = [entry for item in offered if (entry := how.entry(item)) is not None]
    if not entries:
        raise InvalidInputError("region", f"no GPU instance type of {region!r} in {ON_DEMAND_FILE}")
    if snapshot == "2022":
        stamps = [q.timestamp for name, q in spot.items() if any(e.name == name for e in entries)]
        moment = iso(max(stamps)) if stamps else "2022-05-31T23:59:59Z"
        notes = f"Snapshot 2022: spot prices of {SPOT_HISTORY_FILE} (Linux/UNIX; snapshot = its latest row used), " + (
            f"on-demand prices of {ON_DEMAND_FILE} (2026-01-21) and interruption buckets of {ADVISOR_FILE} "
            "(2025-06-28): MIXED DATES, asked for with mix_dates"
            if mix_dates
            else f"interruption buckets of {ADVISOR_2021_FILE} (2021-02-10); no on-demand prices (the data "
            "hold none of 2022)"
        )
    else:
        moment = "2025-06-28T00:00:00Z"
        notes = (
            f"Snapshot 2025: spot = on-demand of {ON_DEMAND_FILE} (2026-01-21) x (1 - savings %) of "
            f"{ADVISOR_FILE} (2025-06-28), the advisor's interruption buckets; types without advice have "
            "no spot price"
        )
    functions = lambda_offers(region, folder) if (folder / LAMBDA_FILE).is_file() and snapshot == "2025" else ()
    if functions:
        notes += f". Function offers (AWS Lambda x86_64, arm64) of {LAMBDA_FILE} (undated; its sources say where)"
    return Catalog(
        name=f"aws-{region}-shared-data-{snapshot}" + ("-mixed" if mix_dates else ""),
        region=region,
        snapshot=moment,
        instance_types=tuple(sorted(entries, key=lambda e: e.name)),
        functions=functions,
        notes=notes + ". Hardware facts of the on-demand list; GPU memory is per GPU; every price's source names "
        "its file and date. No quotas or Lambda limit in these files.",
    )


@dataclass(frozen=True)
class _Import:
    """How one import prices an on-demand list item (see :func:`import_shared_data`)."""

    region: str
    snapshot: str
    mix_dates: bool
    estimate_missing_spot: bool
    spot: Mapping[str, SpotQuote]
    advice: Mapping[str, Any]
    advisor_file: str

    def entry(self, item: Any) -> CatalogEntry | None:
        """One catalog entry from an on-demand list item, or ``None`` if not a whole-GPU type of the region."""
        if not isinstance(item, Mapping) or item.get("family") != "GPU instance":
            return None
        name, gpus = item.get("apiName"), item.get("gpuCount")
        if not isinstance(name, str) or not isinstance(gpus, int) or gpus < 1:
            return None  # fractional GPU shares (g6f, gr6f) do not fit the whole-GPU model
        on_demand = (item.get("pricing") or {}).get(self.region, {}).get("onDemand")
        quote = self.spot.get(name)
        if on_demand is None and quote is None and self.region not in item.get("availability", []):
            return None
        sources = {field: ON_DEMAND_FILE for field in ("gpus", "vcpus", "memory_gb", "gpu_model", "gpu_memory_gb")}
        if "K80" in str(item.get("gpu")) and isinstance(item.get("vcpu"), int) and item["vcpu"] // 4 > gpus:
            # The list counts dual-GPU K80 boards on p2.8xlarge / p2.16xlarge; AWS counts GPUs
            # (1, 8, 16: one per 4 vCPUs), as the spotDNN paper's Table III does.
            gpus = item["vcpu"] // 4
            sources["gpus"] = f"{ON_DEMAND_FILE} counts K80 boards; AWS counts one GPU per 4 vCPUs"
        tip = self.advice.get(name)
        tip = tip if isinstance(tip, Mapping) else {}
        savings = tip.get("s") if isinstance(tip.get("s"), (int, float)) else None
        on_demand_kept = on_demand if self.snapshot == "2025" or self.mix_dates else None
        if on_demand_kept is not None:
            sources["on_demand_price_per_h"] = f"{ON_DEMAND_FILE}: {self.region} onDemand (dated 2026-01-21)"
        spot_price = self._spot_price(name, quote, on_demand, savings, sources)
        bucket = None
        if tip.get("r") in range(len(BUCKETS)):
            bucket = tip["r"]
            sources["interruption_bucket"] = (
                f"{self.advisor_file}: {self.region} Linux r={bucket} "
                f"({BUCKETS[bucket]} interruptions/month), savings {savings}% "
                f"(dated {FILE_DATES[self.advisor_file]})"
            )
        memory = re.match(r"\s*([\d.]+)", str(item.get("memory", "")))
        return CatalogEntry(
            name=name,
            gpus=gpus,
            vcpus=item.get("vcpu"),
            memory_gb=float(memory.group(1)) if memory else None,
            gpu_model=item.get("gpu"),
            gpu_memory_gb=gpu_memory_per_gpu(str(item.get("gpuMemory", "")), gpus),
            spot_price_per_h=spot_price,
            on_demand_price_per_h=on_demand_kept,
            family=quota_family(name),
            interruption_bucket=bucket,
            sources=sources,
        )

    def _spot_price(
        self,
        name: str,
        quote: SpotQuote | None,
        on_demand: float | None,
        savings: float | None,
        sources: dict[str, str],
    ) -> float | None:
        """The spot price of the snapshot (``sources`` gains where it came from), or ``None``."""
        if self.snapshot == "2025":
            if on_demand is None or savings is None:
                return None
            sources["spot_price_per_h"] = (
                f"{ON_DEMAND_FILE} on-demand (dated 2026-01-21) x (1 - {savings}% "
                f"savings of {ADVISOR_FILE}, dated 2025-06-28)"
            )
            return round(float(on_demand) * (1 - savings / 100), 6)
        if quote is not None:
            text = quote.source(SPOT_HISTORY_FILE) + " (dated 2022-05-31)"
            if on_demand is not None and quote.price_per_h >= float(on_demand):
                text += (
                    f"; equal to the on-demand price: in this window the spot price of {name} stood at "
                    "AWS's cap, the on-demand price, in the only zones that listed it"
                )
            sources["spot_price_per_h"] = text
            return quote.price_per_h
        if self.estimate_missing_spot and on_demand is not None and savings is not None:
            sources["spot_price_per_h"] = (
                f"estimated: {ON_DEMAND_FILE} on-demand (dated 2026-01-21) x (1 - "
                f"{savings}% savings of {ADVISOR_FILE}, dated 2025-06-28); no row in "
                f"{SPOT_HISTORY_FILE}"
            )
            return round(float(on_demand) * (1 - savings / 100), 6)
        return None


def lambda_offers(region: str, shared_data: str | Path) -> tuple[FunctionOffer, ...]:
    """AWS Lambda's x86_64 and arm64 offers in ``region`` from the duration-price file.

    The file gives $ per ms at 128 MB by architecture and region (``default``: every other
    region); $ per GB-s = that x 1000 x 1024 / 128. Memory 128-10,240 MB in 1 MB steps,
    vCPUs in proportion to memory (1,769 MB per vCPU), ephemeral storage 512-10,240 MB and
    the 900 s timeout are AWS Lambda's documented limits. No speed factor: arm64's speed
    relative to x86_64 is not in the data and depends on the workload.
    """
    path = Path(shared_data) / LAMBDA_FILE
    data = _load_json(path)
    base = data.get("baseCosts") if isinstance(data, Mapping) else None
    if not isinstance(base, Mapping):
        raise InvalidInputError(str(path), "missing baseCosts: not the Lambda duration-price file")
    limits = (
        "AWS Lambda documented limits (memory 128-10,240 MB in 1 MB steps, 1,769 MB per vCPU, "
        "ephemeral storage 512-10,240 MB, timeout 900 s)"
    )
    offers = []
    for arch in ("x86_64", "arm64"):
        prices = base.get(arch)
        if not isinstance(prices, Mapping):
            continue
        key = region if region in prices else "default"
        per_ms = parse_price(f"{path.name}:baseCosts.{arch}.{key}", prices.get(key))
        offers.append(
            FunctionOffer(
                architecture=arch,
                price_per_gb_s=float(f"{per_ms * 1000 * 1024 / 128:.6g}"),
                price_per_request=LAMBDA_REQUEST_PRICE,
                sources={
                    "price_per_gb_s": f"{LAMBDA_FILE}: baseCosts.{arch}.{key} = {per_ms:g} $/ms at 128 MB "
                    "(x 8000 = $/GB-s; the file's figures are rounded to 2 digits)",
                    "price_per_request": "AWS Lambda list price $0.20 per million requests (MANIFEST.md)",
                    "limits": limits,
                    "speed_factor": "not in the data: arm64's training speed relative to x86_64 is unmeasured"
                    if arch == "arm64"
                    else "x86_64 is the reference (the profiles' rate lines)",
                },
                speed_factor=1.0 if arch == "x86_64" else None,
            )
        )
    return tuple(offers)


def write_catalog(catalog: Catalog, path: str | Path) -> Path:
    """Write ``catalog`` atomically: a temporary file in the same folder, then a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(catalog.to_dict(), indent=2) + "\n"
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path


def dated_catalog_name(catalog: Catalog) -> str:
    """File name ``<catalog name>-<snapshot as YYYYMMDDTHHMMSSZ>.json``."""
    stamp = re.sub(r"[-:]", "", catalog.snapshot)
    return f"{catalog.name}-{stamp}.json"
