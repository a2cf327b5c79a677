"""Shared problems for the test suites.

Instances named after the spec tables are built directly in Python from the numbers in
spec/spot.md (section 6, the authors' reference code) and spec/serverless.md (Table 5),
so that the tests do not depend on the embedded data files. The ``make_*`` fixtures hand
out the builder functions for tests that vary quotas or SLOs; ``random_*_problem`` build
small valid random instances for cross-checks between solvers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import dnnprov
from dnnprov.io.catalogs.catalog import Catalog, CatalogEntry, build_spot_problem, embedded_path, load_spot_profile

# spec/spot.md section 6: name, GPUs, quota, spot price $/h, speed samples/s, per-GPU batch
RESNET110_TYPES = (
    ("p3.2xlarge", 1, 2, 0.918, 1885.0, 1024),
    ("g4dn.4xlarge", 1, 5, 0.3612, 750.0, 1024),
    ("g3.8xlarge", 2, 5, 0.6840, 1018.0, 512),
    ("g3.16xlarge", 4, 8, 1.5676, 1995.0, 512),
    ("p2.8xlarge", 8, 5, 2.1600, 2115.0, 1024),
)
RESNET110_NAMES = tuple(t[0] for t in RESNET110_TYPES)
TABLE1_QUOTAS = (0, 5, 5, 5, 5)


def resnet110_problem(
    quotas=None,
    *,
    loss: float = 0.8,
    time_s: float = 2400.0,
    model: str = "reference",
    loss_variant: str | None = None,
    gamma_4: float = 0.0,
    ps_price_per_h: float = 0.0,
    constraints: dnnprov.SpotConstraints | None = None,
) -> dnnprov.SpotProblem:
    """ResNet-110 on CIFAR-100 as the authors' reference code states it (spec section 6).

    ``model="paper"`` keeps the same profile but evaluates it with eqs. (1)-(10); the loss
    variant then defaults to ``"cc"`` (eq. 3 with R).
    """
    quotas = [t[2] for t in RESNET110_TYPES] if quotas is None else list(quotas)
    types = tuple(
        dnnprov.InstanceType(
            name=name, gpus=gpus, quota=q, spot_price_per_h=price, speed_samples_per_s=speed, batch_per_gpu=batch
        )
        for (name, gpus, _, price, speed, batch), q in zip(RESNET110_TYPES, quotas, strict=True)
    )
    if loss_variant is None:
        loss_variant = "no-cc" if model == "reference" else "cc"
    workload = dnnprov.SpotWorkload(
        name="resnet110-cifar100",
        param_size_mb=11.5,
        bandwidth_req_mb_s=142.0,
        alpha_1=0.8,
        beta_1=-1.92,
        gamma_1=876.5,
        gamma_2=-0.2,
        gamma_3=2507.6,
        gamma_4=gamma_4,
        gamma_5=0.5,
        loss_variant=loss_variant,
        estimated=("gamma_4",) if loss_variant == "cc" else (),
    )
    return dnnprov.SpotProblem(
        instance_types=types,
        workload=workload,
        slo=dnnprov.SpotSLO(loss=loss, time_s=time_s),
        platform=dnnprov.SpotPlatform(ps_price_per_h=ps_price_per_h),
        constraints=constraints or dnnprov.SpotConstraints(),
        model=model,
        name=f"resnet110-{model}",
    )


def resnet50_problem(
    *, time_s: float = 600.0, max_memory_mb: int = 3008, constraints: dnnprov.ServerlessConstraints | None = None
) -> dnnprov.ServerlessProblem:
    """ResNet50 on CIFAR-10, serverless.md Table 5 (storage coefficients estimated)."""
    workload = dnnprov.ServerlessWorkload(
        name="resnet50-cifar10",
        dataset_mb=148.0,
        samples=50000,
        epochs=1,
        model_mb=98.0,
        local_batch=128,
        max_global_batch=1024,
        rate_alpha=0.003,
        rate_beta=11.3,
        storage_alpha=0.0,
        storage_beta=8.0,
        min_memory_mb=2432,
        estimated=("storage_alpha", "storage_beta"),
    )
    return dnnprov.ServerlessProblem(
        workload=workload,
        time_s=time_s,
        platform=dnnprov.ServerlessPlatform(max_memory_mb=max_memory_mb),
        constraints=constraints or dnnprov.ServerlessConstraints(),
        name="resnet50-table3",
    )


# ---------------------------------------------------------------- random instances
def random_spot_problem(
    rng: np.random.Generator,
    *,
    model: str | None = None,
    loss_variant: str | None = None,
    gamma_4: float | None = None,
    n_types: int | None = None,
    max_quota: int = 4,
    on_demand: bool | None = None,
    vcpu_quota: bool | None = None,
    budget: bool | None = None,
    existing: bool | None = None,
    max_ps: int = 3,
) -> dnnprov.SpotProblem:
    """A small valid spot problem; every option left ``None`` is drawn at random.

    The objective time is set from a random plan's predicted time, so that a fair share
    of the instances is feasible and a fair share is tight.
    """

    def pick(value, draw):
        return draw() if value is None else value

    model = pick(model, lambda: str(rng.choice(["paper", "reference"])))
    loss_variant = "no-cc" if model == "reference" else pick(loss_variant, lambda: str(rng.choice(["cc", "no-cc"])))
    gamma_4 = pick(gamma_4, lambda: float(rng.choice([0.1, 1.0])))
    on_demand = pick(on_demand, lambda: bool(rng.random() < 0.25))
    n_types = pick(n_types, lambda: int(rng.integers(3, 4 if on_demand else 6)))
    param_mb = float(rng.uniform(5, 20))
    b_req = float(rng.uniform(100, 300))
    pcie = 10000.0
    types = []
    for i in range(n_types):
        gpus = int(rng.choice([1, 2, 4, 8]))
        batch = int(rng.choice([256, 512, 1024]))
        comm = 2 * param_mb / b_req + 2 * gpus * param_mb / pcie
        t0 = comm + float(rng.uniform(0.2, 2.5))
        spot = float(rng.uniform(0.2, 2.5))
        profile = {"speed_samples_per_s": gpus * batch / t0} if rng.random() < 0.7 else {"compute_time_s": t0 - comm}
        types.append(
            dnnprov.InstanceType(
                name=f"{'gp'[i % 2]}{i}.xlarge",
                gpus=gpus,
                quota=int(rng.integers(0, max_quota + 1)),
                spot_price_per_h=spot,
                batch_per_gpu=batch,
                vcpus=4 * gpus,
                on_demand_price_per_h=spot * float(rng.uniform(2.5, 3.5)) if on_demand else None,
                on_demand_quota=int(rng.integers(0, max_quota + 1)) if on_demand and rng.random() < 0.5 else None,
                **profile,
            )
        )
    workload = dnnprov.SpotWorkload(
        name="random",
        param_size_mb=param_mb,
        bandwidth_req_mb_s=b_req,
        alpha_1=float(rng.uniform(0.3, 0.9)),
        beta_1=float(rng.uniform(-2.0, -0.5)),
        gamma_1=float(rng.uniform(500, 1000)),
        gamma_2=float(rng.uniform(-0.25, -0.1)),
        gamma_3=float(rng.uniform(2000, 3000)),
        gamma_4=gamma_4,
        gamma_5=0.5,
        loss_variant=loss_variant,
    )
    platform = dnnprov.SpotPlatform(
        ps_bandwidth_mb_s=float(rng.uniform(400, 1500)),
        pcie_bandwidth_mb_s=pcie,
        ps_price_per_h=float(rng.choice([0.0, 0.192])),
    )
    markets = ("spot", "on-demand") if on_demand else ("spot",)
    ps_low = int(rng.choice([1, 1, 2]))
    ps_high = int(rng.integers(ps_low, max_ps + 1)) if ps_low <= max_ps else ps_low
    cons = dict(markets=markets, ps_count=(ps_low, ps_high))
    if rng.random() < 0.2:
        cons["workers"] = (int(rng.integers(1, 3)), None if rng.random() < 0.5 else int(rng.integers(3, 8)))
    if pick(vcpu_quota, lambda: bool(rng.random() < 0.3)):
        family = types[int(rng.integers(0, n_types))].quota_family
        cons["vcpu_quotas"] = (dnnprov.VcpuQuota(family=family, market="spot", vcpus=int(rng.integers(8, 65))),)
    if pick(existing, lambda: bool(rng.random() < 0.3)):
        stocked = [t for t in types if t.quota > 0]
        if stocked:
            t = stocked[int(rng.integers(0, len(stocked)))]
            cons["existing"] = {t.name: int(rng.integers(1, min(2, t.quota) + 1))}
    draft = dnnprov.SpotProblem(
        instance_types=tuple(types),
        workload=workload,
        slo=dnnprov.SpotSLO(loss=float(rng.uniform(0.7, 0.95)), time_s=1e9),
        platform=platform,
        constraints=dnnprov.SpotConstraints(**cons),
        model=model,
        name="random",
    )
    # Objective time (and budget) from a random plan inside the box.
    sm = dnnprov.SpotModel(draft)
    cols = sm.columns
    time_s, cost = 5000.0, None
    for _ in range(20):
        plan = rng.integers(cols.lower, cols.upper + 1)
        if plan.sum() == 0:
            continue
        ev = sm.evaluate(plan[None, :], ps_low)
        if np.isfinite(ev.time_s[0]) and ev.time_s[0] > 0:
            time_s, cost = float(ev.time_s[0]) * float(rng.uniform(0.8, 1.6)), float(ev.cost[0])
            break
    if pick(budget, lambda: bool(rng.random() < 0.25)) and cost is not None:
        cons["budget_usd"] = cost * float(rng.uniform(0.7, 1.5))
    return draft.replace(
        slo=dnnprov.SpotSLO(loss=draft.slo.loss, time_s=time_s), constraints=dnnprov.SpotConstraints(**cons)
    )


def random_serverless_problem(
    rng: np.random.Generator, *, max_functions: int = 40, budget: bool | None = None
) -> dnnprov.ServerlessProblem:
    """A small valid serverless problem (at most ``max_functions`` functions)."""
    local = int(rng.choice([16, 32, 64, 128]))
    step = int(rng.choice([64, 128, 256]))
    max_memory = int(rng.choice([1024, 2048, 3008]))
    max_memory = max_memory - max_memory % step
    workload = dnnprov.ServerlessWorkload(
        name="random",
        dataset_mb=float(rng.uniform(20, 200)),
        samples=int(rng.integers(5000, 50001)),
        epochs=float(rng.choice([1, 2, 3])),
        model_mb=float(rng.uniform(1, 100)),
        local_batch=local,
        max_global_batch=local * int(rng.integers(1, 17)),
        rate_alpha=float(rng.uniform(0.001, 0.03)),
        rate_beta=float(rng.uniform(-2, 10)),
        storage_alpha=float(rng.uniform(0, 0.05)),
        storage_beta=float(rng.uniform(1, 10)),
        min_memory_mb=int(rng.integers(128, max_memory // 2)),
    )
    platform = dnnprov.ServerlessPlatform(
        memory_step_mb=step,
        max_memory_mb=max_memory,
        concurrency_limit=int(rng.integers(min(10, max_functions), max_functions + 1)),
        ps_bandwidth_mb_s=float(rng.uniform(300, 1500)),
        ps_price_per_h=float(rng.choice([0.0, 0.096])),
        timeout_s=float(rng.choice([300.0, 900.0])),
    )
    ps_low = int(rng.choice([1, 1, 2]))
    cons = {"ps_count": (ps_low, int(rng.integers(ps_low, 4)))}
    if rng.random() < 0.2:
        cons["functions"] = (int(rng.integers(1, 4)), None if rng.random() < 0.5 else int(rng.integers(5, 30)))
    draft = dnnprov.ServerlessProblem(
        workload=workload,
        time_s=1e9,
        platform=platform,
        constraints=dnnprov.ServerlessConstraints(**cons),
        name="random",
    )
    model = dnnprov.ServerlessModel(draft)
    grid = draft.memory_grid()
    low, high = draft.function_range()
    time_s, cost = 600.0, None
    for _ in range(20):
        n, m = int(rng.integers(low, high + 1)), grid[int(rng.integers(0, len(grid)))]
        ev = model.evaluate(n, m, ps_low)
        if np.isfinite(ev.time_s) and ev.time_s > 0:
            time_s, cost = float(ev.time_s) * float(rng.uniform(0.6, 1.4)), float(ev.cost)
            break
    if (rng.random() < 0.2 if budget is None else budget) and cost is not None:
        cons["budget_usd"] = cost * float(rng.uniform(0.8, 1.5))
    return draft.replace(time_s=time_s, constraints=dnnprov.ServerlessConstraints(**cons))


def spot_space(problem: dnnprov.SpotProblem) -> int:
    """Number of (counts, PS) plans in a spot problem's quota box."""
    cols = problem.columns()
    low, high = problem.constraints.ps_count
    return math.prod(int(up - lo + 1) for lo, up in zip(cols.lower, cols.upper)) * (high - low + 1)


def benchmark_module(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` imported as a module (the scripts are not a package); its imports
    of sibling scripts resolve as when it runs (``python benchmarks/<name>.py``)."""
    import importlib.util
    import sys

    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(folder))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
    return module


def one_error(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> None:
    """``dnnprov argv`` exits 2 with one ``dnnprov: error:`` line holding every needle."""
    from dnnprov.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dnnprov: error:"), err
    for needle in needles:
        assert needle in err[0], err[0]


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def make_resnet110():
    """The builder of the reference ResNet-110 spot problem (quotas, SLO, model as arguments)."""
    return resnet110_problem


@pytest.fixture
def resnet110():
    """Reference ResNet-110 with the code's quotas [2, 5, 5, 8, 5] and (L, T) = (0.8, 2400)."""
    return resnet110_problem()


@pytest.fixture
def resnet110_table1():
    """Table I setting: quotas [0, 5, 5, 5, 5], (L, T) = (0.8, 2600), reference model."""
    return resnet110_problem(TABLE1_QUOTAS, loss=0.8, time_s=2600.0)


@pytest.fixture
def resnet110_paper():
    """The same profile under the paper's model (eq. 3 with R, gamma_4 = 1 estimated)."""
    return resnet110_problem(model="paper", loss=0.8, time_s=4000.0, gamma_4=1.0, ps_price_per_h=0.192)


@pytest.fixture(scope="session")
def make_resnet50():
    """The builder of the ResNet50 serverless problem of Table 3."""
    return resnet50_problem


@pytest.fixture
def resnet50():
    """ResNet50 on CIFAR-10, 1 epoch, T_o = 600 s, m_max = 3008 MB (Table 3 setting)."""
    return resnet50_problem()


@pytest.fixture(scope="session")
def make_random_spot():
    """The random spot-instance builder ``random_spot_problem(rng, ...)``."""
    return random_spot_problem


@pytest.fixture(scope="session")
def make_random_serverless():
    """The random serverless-instance builder ``random_serverless_problem(rng, ...)``."""
    return random_serverless_problem


# ---------------------------------------------------------------------------- multi-region catalogs
#: The types of the region catalogs below (tests/io/test_catalog_regions.py, tests/cloud/test_export_regions.py)
REGION_TYPES: dict[str, dict] = {
    "p3.2xlarge": {"gpus": 1, "vcpus": 8, "memory_gb": 61.0, "family": "P"},
    "g3.16xlarge": {"gpus": 4, "vcpus": 64, "memory_gb": 488.0, "family": "G"},
    "g4dn.4xlarge": {"gpus": 1, "vcpus": 16, "family": "G"},
}


def region_catalog(region: str, prices: Mapping[str, float], buckets: Mapping[str, int] | None = None) -> Catalog:
    """A one-region catalog of the :data:`REGION_TYPES` in ``prices`` at those spot prices
    (``buckets``: Spot Advisor interruption buckets of some of them)."""
    return Catalog(
        name=f"aws-{region}",
        region=region,
        snapshot="2025-06-28T00:00:00Z",
        instance_types=tuple(
            CatalogEntry(
                name=name,
                spot_price_per_h=price,
                interruption_bucket=(buckets or {}).get(name),
                **REGION_TYPES[name],
            )
            for name, price in prices.items()
        ),
    )


def region_problem(catalog: Catalog, quotas: Mapping[str, int]) -> dnnprov.SpotProblem:
    """ResNet-110 (paper profile) to loss 0.8 within an hour on ``catalog``'s pools with ``quotas``."""
    profile = load_spot_profile(embedded_path("workloads", "spot", "resnet110-paper.json"))
    return build_spot_problem(catalog, profile, dnnprov.SpotSLO(loss=0.8, time_s=3600), quotas=dict(quotas))


@pytest.fixture(scope="session")
def make_region_catalog():
    """The builder of one-region catalogs of :data:`REGION_TYPES` (merge them for several regions)."""
    return region_catalog


@pytest.fixture(scope="session")
def make_region_problem():
    """The builder of the ResNet-110 problem on a (multi-region) catalog with given quotas."""
    return region_problem
