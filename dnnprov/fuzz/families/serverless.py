"""Seeded serverless instances for the certificate fuzzer (registered in :mod:`dnnprov.fuzz.families.spot`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from dnnprov.fuzz.families.ranges import BANDWIDTH_RANGE, PARAM_SIZE_RANGE, PLAN_TRIES, PRICE_RANGE, log_uniform
from dnnprov.models.serverless import ServerlessModel
from dnnprov.problems.serverless import ServerlessConstraints, ServerlessPlatform, ServerlessProblem, ServerlessWorkload
from dnnprov.problems.validation.domain import ServerlessDomain


def serverless_instance(
    rng: np.random.Generator,
    name: str,
    *,
    timeout: bool = False,
    concurrency: bool = False,
    deadline: str = "slack",
    memory: bool = False,
    budget: str | None = None,
    domain: bool = False,
    many: bool = False,
    magnitudes: bool = False,
) -> ServerlessProblem:
    """A random λDNN instance with at most about ten thousand (n, m, s) plans.

    ``timeout``: a short function timeout with checkpoint restarts; ``concurrency``: a small
    concurrency limit and a function-count range; ``deadline``: ``"slack"`` or ``"exact"``
    (T_o is a random plan's time); ``memory``: a grid of 1-3 memory sizes; ``budget`` as in
    :func:`finish_spot`; ``domain``: a validity domain (memory and function-count ranges);
    ``many``: a concurrency limit of 100-1,000 functions (with 1-3 memory sizes);
    ``magnitudes``: prices, bandwidths and rates over many decades (see the spot ranges).
    """
    local = int(rng.choice([8, 16, 32, 64, 128]))
    step = int(rng.choice([64, 128, 256]))
    max_memory = int(rng.integers(4, 41)) * step
    min_memory = int(rng.integers(1, max_memory + 1))
    if memory or many:
        min_memory = max_memory - int(rng.integers(0, 3)) * step - int(rng.integers(0, step))
    workload = ServerlessWorkload(
        name="fuzz",
        dataset_mb=float(rng.uniform(10, 300)),
        samples=int(rng.integers(2000, 60001)),
        epochs=float(rng.choice([0.5, 1, 2, 3])),
        model_mb=float(rng.uniform(1, 150)),
        local_batch=local,
        max_global_batch=local * int(rng.integers(1, 33)),
        rate_alpha=float(rng.uniform(0.001, 0.03)),
        rate_beta=float(rng.uniform(-3, 10)),
        storage_alpha=float(rng.uniform(0, 0.05)),
        storage_beta=float(rng.uniform(-1, 10)),
        min_memory_mb=max(min_memory, 1),
        domain=ServerlessDomain.from_dict(_serverless_domain(rng, min_memory, max_memory)) if domain else None,
    )
    timeout_s = float(rng.uniform(40, 300)) if timeout else float(rng.choice([300.0, 900.0]))
    platform = ServerlessPlatform(
        memory_step_mb=step,
        max_memory_mb=max_memory,
        concurrency_limit=int(
            rng.integers(100, 1001) if many else rng.integers(2, 17) if concurrency else rng.integers(10, 61)
        ),
        ps_bandwidth_mb_s=float(rng.uniform(200, 2000)),
        ps_price_per_h=float(rng.choice([0.0, 0.096, log_uniform(rng, 1e-3, 2.0)])),
        price_per_request=float(rng.choice([0.0, 2e-7, log_uniform(rng, 1e-7, 1e-3)])),
        price_per_gb_s=float(rng.choice([0.0000166667, 0.0, log_uniform(rng, 1e-8, 1e-3)], p=[0.6, 0.1, 0.3])),
        timeout_s=timeout_s,
        checkpoint_margin_s=timeout_s * float(rng.uniform(0, 0.3)) if timeout else 30.0,
        checkpoint_overhead_s=float(rng.uniform(0, 20)) if timeout else 6.0,
    )
    if magnitudes:
        workload = replace(
            workload,
            rate_alpha=log_uniform(rng, 1e-6, 1e3),
            model_mb=log_uniform(rng, *PARAM_SIZE_RANGE),
            dataset_mb=log_uniform(rng, 1e-3, 1e9),
        )
        platform = replace(
            platform,
            ps_bandwidth_mb_s=log_uniform(rng, *BANDWIDTH_RANGE),
            ps_price_per_h=log_uniform(rng, *PRICE_RANGE),
            price_per_request=float(rng.choice([0.0, log_uniform(rng, 1e-12, 1e3)])),
            price_per_gb_s=log_uniform(rng, 1e-12, 1e3),
        )
    ps_low = int(rng.integers(1, 3))
    cons: dict[str, Any] = {"ps_count": (ps_low, ps_low + int(rng.integers(0, 3)))}
    if concurrency or rng.random() < 0.2:
        low = int(rng.integers(1, 6))
        cons["functions"] = (low, None if rng.random() < 0.4 else low + int(rng.integers(0, 12)))
    if cons.get("functions", (1, None))[0] > platform.concurrency_limit:
        cons["functions"] = (1, cons["functions"][1])
    draft = ServerlessProblem(
        workload=workload, time_s=1e9, platform=platform, constraints=ServerlessConstraints(**cons), name=name
    )
    found = _serverless_plan(rng, draft, feasible_only=False)
    time_s = float(rng.uniform(100, 3000)) if found is None else found[0]
    if deadline == "slack":
        time_s *= float(rng.uniform(0.7, 1.5))
    problem = draft.replace(time_s=time_s)
    if budget is not None:
        priced = _serverless_plan(rng, problem, feasible_only=budget == "exact")
        if priced is not None and priced[1] > 0:
            cons["budget_usd"] = priced[1] * (1.0 if budget == "exact" else float(rng.uniform(0.8, 1.5)))
            problem = problem.replace(constraints=ServerlessConstraints(**cons))
    return problem


def _serverless_domain(rng: np.random.Generator, low: int, high: int) -> dict[str, Any]:
    """Memory range inside [low, high] MB, maybe a function range, maybe extrapolated."""
    a, b = sorted(rng.uniform(low, high, size=2).tolist())
    domain: dict[str, Any] = dict(
        memory_mb=(max(a, 1.0), max(b, 1.0)), extrapolation=float(rng.choice([1.0, rng.uniform(1.0, 1.5)]))
    )
    if rng.random() < 0.5:
        first = int(rng.integers(1, 6))
        domain["functions"] = (first, first + int(rng.integers(0, 20)))
    return domain


def _serverless_plan(
    rng: np.random.Generator, problem: ServerlessProblem, *, feasible_only: bool
) -> tuple[float, float] | None:
    """(time, cost) of a random (n, m, s) with a finite time, or ``None``."""
    model = ServerlessModel(problem)
    grid = problem.memory_grid()
    low, high = problem.function_range()
    ps_low, ps_high = problem.constraints.ps_count
    for _ in range(PLAN_TRIES):
        n = int(rng.integers(low, high + 1))
        ev = model.evaluate(n, grid[int(rng.integers(0, len(grid)))], int(rng.integers(ps_low, ps_high + 1)))
        if np.isfinite(ev.time_s) and ev.time_s > 0 and (ev.feasible or not feasible_only):
            return float(ev.time_s), float(ev.cost)
    return None


def serverless_family(name: str, **options: Any) -> Callable[[np.random.Generator], ServerlessProblem]:
    """A family drawing :func:`serverless_instance` with ``options``."""

    def family(rng: np.random.Generator) -> ServerlessProblem:
        return serverless_instance(rng, name, **options)

    family.__doc__ = f"Serverless family {name!r}: {options}."
    return family


def serverless_mixed(rng: np.random.Generator) -> ServerlessProblem:
    """Serverless with a random subset of the serverless stresses at once."""
    flags = rng.random(4) < 0.6
    return serverless_instance(
        rng,
        "serverless-mixed",
        timeout=bool(flags[0]),
        concurrency=bool(flags[1]),
        memory=bool(flags[2]),
        domain=bool(flags[3]),
        deadline=("slack", "exact")[int(rng.integers(0, 2))],
        budget=(None, "slack", "exact")[int(rng.integers(0, 3))],
    )
