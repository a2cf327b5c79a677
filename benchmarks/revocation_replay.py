"""Revocation replay: plans x policies on the real spot traces (issue 12, docs/revocation.md).

ResNet-110 (paper model, embedded Table III prices and workload profile), spot and
on-demand markets, 1-2 PS, at the SLO given. Two instance sets:

- ``traced`` (default, SLO 0.8 / 1800 s): the two types the real traces cover, p3.2xlarge
  (1 V100, quota 8) with the three 16-node V100 availability traces (aws-08-27-2023,
  11-16 days) and p2.8xlarge (8 K80, quota 4) with the two 8-K80 1-node availability
  traces (aws-10-26-2022, 27 days);
- ``table1`` (SLO 0.8 / 2600 s): the paper's Table I types, quota 5 each. No trace covers
  the T4 and M60 pools, so each of g4dn.4xlarge, g3.8xlarge and g3.16xlarge replays one
  zone of the 16-node V100 availability traces (us-east-2b, us-west-2a, us-west-2c) as a
  stand-in, and p2.8xlarge its own 8-K80 traces.

Each spot type's interruption model is fitted from its traces (pooled). Plans: ``milp``
(plain), ``robust-1`` (``--robust 1``), ``robust-1-unreplaced`` (``--robust 1
--no-replacement``), ``risk`` (``--risk``, on-demand replacement,
deadline in expectation), ``risk-p0.95`` (the same, deadline met with probability >=
0.95), the paper heuristic (planned on the spot market, as the paper does), and on-demand
only (milp over the on-demand market). Each is replayed under each policy (none, replan,
fallback, uniform-progress) with the same seeds, ``--runs`` runs per cell. Under ``replan`` the heuristic's
takeovers are solved by the heuristic on the spot market (spotDNN's re-provisioning); the
other plans use dnnprov's exact takeover, which may buy on-demand workers. The table
reports deadline attainment, the mean and p95 cost relative to the on-demand-only plan's
cost, the mean cost charged (each missed run charged the whole job on-demand), revocations
and replans.

The target (issue 12): the best dnnprov option meets >= 95 % of deadlines at a lower mean
cost than the paper heuristic + replan and than Can't Be Late's uniform-progress rule on a
plain plan, costs charged (:func:`verdict`). Two corrections of the contract as first coded:
issue 12 names "uniform-progress fallback" (its ``fallback`` was Can't Be Late's rule); since
issue 28 that rule is ``uniform-progress`` and ``fallback`` is spotDNN's home-zone event rule,
so the baseline is ``milp + uniform-progress``. And a run that misses its deadline has not
trained the model: its spend is not the price of the job. Uncharged means let a baseline that
misses 25 % of deadlines look cheaper than an option that misses none (the paper's spotDNN
claims its cost for plans that meet the SLO); the charged mean prices every miss as the whole
job on-demand, for every cell alike, as ``benchmarks/spot_pools.py`` does. Both means are printed.

    python benchmarks/revocation_replay.py --runs 1000 [--set traced|table1] [--json out.json]

Needs ../shared/data (the traces); exits 2 with a message when it is absent (0 with
``--allow-skip``), and 1 when the target is not met (0 with ``--allow-missed``).

Since issue 28 the runs are the control loop on the trace cloud (``dnnprov simulate``'s one
engine: the traces of a type are its aligned pools, 120 s notices, refused launches, polls
every 15 s); the figures in docs/revocation.md were measured with the removed tick and event
engines. The pools are read tick by tick from one offset, so every trace goes on the finest
tick of the set (:func:`on_one_grid`: the 600 s K80 traces' ticks repeated on 300 s; the
interruption models are fitted on the traces as recorded). The rates are fitted on the
replayed traces themselves; the held-out experiment is ``benchmarks/spot_pools.py``.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import platform
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from dnnprov.solvers.revocation.risk import solve_risk
from dnnprov.solvers.revocation.robust import solve_robust

import dnnprov
from dnnprov.benchsets.generate import resolve_shared_data
from dnnprov.control.replay import Simulation
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import build_spot_problem, embedded_path, load_catalog, load_spot_profile
from dnnprov.problems.interruption import Trace, fit_traces, load_trace

POLICIES = ("none", "replan", "fallback", "uniform-progress")
V100_16 = "spot-traces/availability/16-node/aws-08-27-2023/"
K80_8 = "spot-traces/availability/1-node/aws-10-26-2022/*_k80_8.json"
SETS: dict[str, dict[str, Any]] = {
    "traced": {
        "quotas": {"p3.2xlarge": 8, "p2.8xlarge": 4},
        "slo": (0.8, 1800.0),
        "traces": {"p3.2xlarge": V100_16 + "*_v100_1.json", "p2.8xlarge": K80_8},
    },
    "table1": {
        "quotas": {"g4dn.4xlarge": 5, "g3.8xlarge": 5, "g3.16xlarge": 5, "p2.8xlarge": 5},
        "slo": (0.8, 2600.0),
        "traces": {
            "g4dn.4xlarge": V100_16 + "us-east-2b_v100_1.json",
            "g3.8xlarge": V100_16 + "us-west-2a_v100_1.json",
            "g3.16xlarge": V100_16 + "us-west-2c_v100_1.json",
            "p2.8xlarge": K80_8,
        },
    },
}


def load_traces(shared: Path, patterns: dict[str, str]) -> dict[str, list]:
    """The real traces of each type (sorted file names)."""
    out = {}
    for name, pattern in patterns.items():
        files = sorted(glob.glob(str(shared / pattern)))
        if not files:
            raise InvalidInputError("shared_data", f"no trace matches {pattern} in {shared}")
        out[name] = [load_trace(f) for f in files]
    return out


def on_one_grid(traces: dict[str, list[Trace]]) -> dict[str, list[Trace]]:
    """The traces on one tick, the finest (gcd) of their ``gap_seconds``: the loop reads every
    pool tick by tick from one offset. A coarser trace's ticks are repeated, which keeps its
    capacity and its changes exactly (they fall on the finer grid); the traced set's 600 s K80
    traces go to the V100 traces' 300 s."""
    gaps = {round(t.gap_s) for items in traces.values() for t in items}
    gap = math.gcd(*gaps)
    return {
        name: [Trace(t.path, float(gap), np.repeat(t.alive, round(t.gap_s) // gap)) for t in items]
        for name, items in traces.items()
    }


def build_problem(
    traces: dict[str, list], quotas: dict[str, int], loss: float, time_s: float, name: str
) -> dnnprov.SpotProblem:
    """The benchmark instance with interruption models fitted from the traces."""
    catalog = load_catalog(embedded_path("catalogs", "aws-table3-2023-01.json"))
    profile = load_spot_profile(embedded_path("workloads", "spot", "resnet110-paper.json"))
    problem = build_spot_problem(
        catalog,
        profile,
        dnnprov.SpotSLO(loss=loss, time_s=time_s),
        quotas=quotas,
        constraints=dnnprov.SpotConstraints(markets=("spot", "on-demand"), ps_count=(1, 2)),
        name=f"resnet110-{name}-{loss:g}-{time_s:g}",
        notes="ResNet-110 (paper model); revocation replay benchmark (benchmarks/revocation_replay.py)",
    )
    types = tuple(replace(t, interruption=fit_traces(traces[t.name]).interruption) for t in problem.instance_types)
    return problem.replace(instance_types=types)


def spot_only(problem: dnnprov.SpotProblem) -> dnnprov.SpotProblem:
    """The same instance on the spot market only (how the paper plans)."""
    return problem.replace(constraints=replace(problem.constraints, markets=("spot",)))


def plans(problem: dnnprov.SpotProblem) -> dict[str, dnnprov.Result]:
    """The seven plans of the table."""
    od = problem.replace(constraints=replace(problem.constraints, markets=("on-demand",)))
    return {
        "milp": dnnprov.solve(problem, "milp"),
        "robust-1": solve_robust(problem, 1),
        "robust-1-unreplaced": solve_robust(problem, 1, replaced=False),
        "risk": solve_risk(problem),
        "risk-p0.95": solve_risk(problem, deadline_probability=0.95),
        "heuristic": dnnprov.solve(spot_only(problem), "heuristic"),
        "on-demand": dnnprov.solve(od, "milp"),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the experiment and print the table (and write JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", choices=sorted(SETS), default="traced")
    parser.add_argument("--loss", type=float, help="target loss (default: the set's)")
    parser.add_argument("--time", type=float, help="T_obj in seconds (default: the set's)")
    parser.add_argument("--shared-data", default=None)
    parser.add_argument("--json", help="write every cell's summary here")
    parser.add_argument("--allow-missed", action="store_true", help="exit 0 even when the target is not met")
    parser.add_argument("--allow-skip", action="store_true", help="exit 0 when the traces are absent")
    args = parser.parse_args(argv)
    chosen = SETS[args.set]
    loss = args.loss if args.loss is not None else chosen["slo"][0]
    time_s = args.time if args.time is not None else chosen["slo"][1]
    try:
        traces = load_traces(resolve_shared_data(args.shared_data), chosen["traces"])
    except InvalidInputError as exc:
        print(f"revocation_replay: {exc}", file=sys.stderr)
        return 0 if args.allow_skip else 2
    problem = build_problem(traces, chosen["quotas"], loss, time_s, args.set)
    traces = on_one_grid(traces)
    started = time.process_time()
    results = plans(problem)
    on_demand_cost = results["on-demand"].cost
    cells: list[dict[str, Any]] = []
    for name, result in results.items():
        if result.plan is None:
            print(f"{name}: no plan ({result.status.value}: {result.message})")
            continue
        for policy in POLICIES:
            # The paper heuristic re-provisions with its own Algorithm 1 on the spot market
            # (spotDNN); dnnprov's plans with dnnprov's exact takeover.
            heuristic = name == "heuristic"
            s = Simulation(
                spot_only(problem) if heuristic else problem,
                result.plan,
                traces,
                policy=policy,
                runs=args.runs,
                seed=args.seed,
                replan_method="heuristic" if heuristic and policy == "replan" else "exact",
            ).to_dict(per_run=True)
            runs = s.pop("per_run")
            s.update(
                cost_charged_rel=charged(runs, on_demand_cost) / on_demand_cost,
                plan_name=name,
                plan=str(result.plan),
                planned_cost=result.details.get("nominal_cost", result.cost),
                cost_mean_rel=s["cost_mean"] / on_demand_cost,
                cost_p95_rel=s["cost_p95"] / on_demand_cost,
            )
            cells.append(s)
    elapsed = time.process_time() - started
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).resolve().parent
    ).stdout.strip()
    print(
        f"instance {problem.name}; {args.runs} runs per cell, seed {args.seed}; on-demand plan "
        f"{results['on-demand'].plan} at ${on_demand_cost:.4f}; commit {commit}; "
        f"{elapsed:.1f} CPU-s on {platform.processor() or platform.machine()} (shared)"
    )
    for t in problem.instance_types:
        print(
            f"  {t.name}: {t.interruption.rate_per_h:.4f} revocations/instance-hour, mean regain "
            f"{(t.interruption.mean_regain_s or 0) / 60:.0f} min ({len(traces[t.name])} traces)"
        )
    print()
    print(
        "| plan | planned | policy | met deadline | cost mean / on-demand | charged | cost p95 / on-demand | revocations | replans | on-demand launched |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c in cells:
        print(
            f"| {c['plan_name']} | {c['plan']} | {c['policy']} | {100 * c['met_deadline']:.1f} % | "
            f"{c['cost_mean_rel']:.3f} | {c['cost_charged_rel']:.3f} | {c['cost_p95_rel']:.3f} | {c['revocations_mean']:.2f} | "
            f"{c['replans_mean']:.2f} | {c['on_demand_launched_mean']:.2f} |"
        )
    print()
    outcome = verdict(cells)
    print(outcome)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "runs": args.runs,
                    "seed": args.seed,
                    "commit": commit,
                    "on_demand_cost": on_demand_cost,
                    "cells": cells,
                },
                indent=2,
            )
        )
    return 0 if outcome.startswith("target: met") or args.allow_missed else 1


def charged(runs: list[dict[str, Any]], on_demand_cost: float) -> float:
    """Mean cost with each missed run charged the whole job on-demand (what getting the job
    done after a miss costs), as ``benchmarks/spot_pools.py`` charges them."""
    return float(np.mean([r["cost"] + (0.0 if r["met_deadline"] else on_demand_cost) for r in runs]))


def verdict(cells: list[dict[str, Any]]) -> str:
    """Issue 12's target: the best dnnprov option meets >= 95 % of deadlines at a lower mean cost
    than the paper heuristic + replan and than Can't Be Late's uniform-progress rule on a plain
    (milp) plan, costs charged (:func:`charged`)."""
    by = {(c["plan_name"], c["policy"]): c for c in cells}
    heuristic = by.get(("heuristic", "replan"))
    uniform = by.get(("milp", "uniform-progress"))
    ours = [
        c
        for c in cells
        if c["plan_name"] in ("milp", "robust-1", "robust-1-unreplaced", "risk", "risk-p0.95")
        and c["met_deadline"] >= 0.95
    ]
    if not ours or heuristic is None or uniform is None:
        return "target: NOT met (no dnnprov option meets the deadline in >= 95 % of replays)"
    best = min(ours, key=lambda c: c["cost_charged_rel"])
    beats = best["cost_charged_rel"] < min(heuristic["cost_charged_rel"], uniform["cost_charged_rel"])
    return (
        f"target: {'met' if beats else 'NOT met'}: best dnnprov option {best['plan_name']} + {best['policy']} "
        f"meets the deadline in {100 * best['met_deadline']:.1f} % at mean cost {best['cost_charged_rel']:.3f} x "
        f"on-demand, charged ({best['cost_mean_rel']:.3f} uncharged); heuristic + replan "
        f"{100 * heuristic['met_deadline']:.1f} % at {heuristic['cost_charged_rel']:.3f} "
        f"({heuristic['cost_mean_rel']:.3f}); milp + uniform-progress {100 * uniform['met_deadline']:.1f} % at "
        f"{uniform['cost_charged_rel']:.3f} ({uniform['cost_mean_rel']:.3f})"
    )


if __name__ == "__main__":
    sys.exit(main())
