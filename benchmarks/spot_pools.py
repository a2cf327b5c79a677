"""Spot capacity on held-out traces (issue 18, docs/revocation.md): policies x plans x pools.

Workload: ResNet-110 with the spec's section-6 profile (embedded ``spot/paper-table1.json``)
under the paper model (eq. 3 with R, gamma_4 = 1, estimated, as the replay tests use), on
p3.2xlarge only (the type the traces cover): spot $0.918/h, on-demand $3.06/h, quota 8,
one PS priced at $0.192/h (m5.xlarge on demand). The loss target is set so that 4
workers train for the job length J; T_obj = slack x J; the plan is dnnprov's nominal
optimum for that T_obj (``milp``, spot market).

Capacity: the three 16-node V100 availability traces of aws-08-27-2023 (us-east-2b,
us-west-2a, us-west-2c), aligned in time (cut to their common 11.3 days). Every model is
fitted on the first half (``--fit``), every replay window starts in the second half
(``--replay``): held out. Per cell, with the same windows for every option:

- ``fallback-1z``: ``fallback`` in one zone (each zone as home in turn, averaged: one zone
  drawn per run);
- ``uniform-progress``: Can't Be Late's rule over the three zones (the baseline);
- ``failover``, ``mpc``: over the three zones, on the nominal plan;
- ``mpc+plan``: ``mpc`` on the plan ``dnnprov risk plan`` chooses on the fitted model;
- the hindsight bound of each option's plan: a proven lower bound of any policy meeting
  T_obj with that plan on those windows (the table shows the nominal plan's, and the best
  option's cost over its own plan's bound).

Costs are relative to the nominal plan run on-demand, and charged: a run that misses
T_obj costs what it paid plus the whole job on-demand (finishing late is not free). The
best dnnprov option is the cheapest of failover / mpc / mpc+plan meeting >= 99 % of
deadlines. Targets per cell: >= 99 % met, <= 0.75 x fallback-1z, <= 1.25 x hindsight,
<= uniform-progress. Prints the table, writes the figure, exits 1 when a target is missed
(unless ``--allow-miss``).

    python benchmarks/spot_pools.py --runs 200 --figure docs/figures/spot-pools-held-out.png

``--choose-on-fit`` also picks, per cell, the option a user could pick beforehand (the
cheapest of failover / mpc / mpc+plan meeting >= 99 % when replayed on the fit period) and
reports its held-out targets beside the best option's (the exit code stays the best option's).

Needs ../shared/data (the traces); exits 2 with a message when it is absent (0 with
``--allow-skip``).

Since issue 28 every option runs on the control loop on the trace cloud (``dnnprov simulate``'s
one engine); the figures in docs/revocation.md were measured with the removed tick engine.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

import dnnprov
from dnnprov.benchsets.generate import resolve_shared_data
from dnnprov.control.plan_choice import choose_plan
from dnnprov.control.replay import Simulation
from dnnprov.errors import InvalidInputError
from dnnprov.problems.interruption import load_trace
from dnnprov.revocation.availability import fit_availability

TRACES = "spot-traces/availability/16-node/aws-08-27-2023/*_v100_1.json"
SPOT, ON_DEMAND, PS_PRICE, QUOTA, REFERENCE_WORKERS = 0.918, 3.06, 0.192, 8, 4
SLACKS = (1.05, 1.25, 1.5, 2.0)
HOURS = (0.5, 1.0, 2.0, 4.0, 8.0)
OPTIONS = ("fallback-1z", "uniform-progress", "failover", "mpc", "mpc+plan")
DNNPROV = ("failover", "mpc", "mpc+plan")


def base_problem() -> dnnprov.SpotProblem:
    """The spec's ResNet-110 on p3.2xlarge under the paper model (module docstring)."""
    table1 = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    p3 = next(t for t in table1.instance_types if t.name == "p3.2xlarge")
    p3 = replace(p3, quota=QUOTA, spot_price_per_h=SPOT, on_demand_price_per_h=ON_DEMAND)
    workload = replace(table1.workload, loss_variant="cc", gamma_4=1.0, estimated=("gamma_4",))
    return table1.replace(
        instance_types=(p3,),
        workload=workload,
        model="paper",
        platform=replace(table1.platform, ps_price_per_h=PS_PRICE),
        constraints=dnnprov.SpotConstraints(ps_count=(1, 1)),
        name="resnet110-pools",
    )


def job(problem: dnnprov.SpotProblem, hours: float, slack: float) -> dnnprov.SpotProblem:
    """The loss target at which 4 workers train ``hours``; T_obj = slack x that."""
    low, high = problem.workload.gamma_5 + 1e-6, 5.0
    for _ in range(100):
        mid = (low + high) / 2
        trial = problem.replace(slo=dnnprov.SpotSLO(loss=mid, time_s=1e9))
        t = float(dnnprov.SpotModel(trial).evaluate([[REFERENCE_WORKERS]], 1).time_s[0])
        low, high = (mid, high) if t > hours * 3600 else (low, mid)
    return problem.replace(
        slo=dnnprov.SpotSLO(loss=high, time_s=slack * hours * 3600), name=f"resnet110-pools-{hours:g}h-{slack:g}x"
    )


def charged(summary: dict[str, Any], runs: list, penalty: float) -> float:
    """Mean cost with each missed run charged the whole job on-demand."""
    return float(np.mean([r.cost + (0.0 if r.met_deadline else penalty) for r in runs]))


class Replayed:
    """The runs of one :class:`dnnprov.control.replay.Simulation` (the loop on the trace cloud) as
    this benchmark reads them: ``summary()`` and ``runs`` with ``cost`` and ``met_deadline``."""

    def __init__(self, out: dict[str, Any]) -> None:
        self.out = out
        self.runs = [SimpleNamespace(cost=r["cost"], met_deadline=r["met_deadline"]) for r in out["per_run"]]

    def summary(self) -> dict[str, Any]:
        return self.out


def replay_pools(
    problem: dnnprov.SpotProblem,
    plan: dnnprov.SpotPlan,
    traces: dict,
    *,
    policy: str,
    zones: bool = True,
    model: Any = None,
    hindsight: bool = False,
    **options: Any,
) -> Replayed:
    """``simulate`` on the loop (every trace of a type is one of its aligned pools: ``zones``)."""
    return Replayed(
        Simulation(problem, plan, traces, policy=policy, model=model, hindsight=hindsight, **options).to_dict(
            per_run=True
        )
    )


def cell(problem: dnnprov.SpotProblem, traces: list, args: argparse.Namespace) -> dict[str, Any]:
    """Every option of one (job length, slack) cell on the same held-out windows."""
    plan = dnnprov.solve(problem, "milp").plan
    od_cost = (
        (plan.workers * ON_DEMAND + PS_PRICE)
        * float(dnnprov.SpotModel(problem).evaluate([[plan.workers]], 1).time_s[0])
        / 3600
    )
    common = dict(zones=True, runs=args.runs, seed=args.seed, period=args.replay)
    model = fit_availability(traces, QUOTA, args.fit)
    out: dict[str, Any] = {"plan": plan.to_dict(), "on_demand_cost": od_cost}
    singles = []
    for z in range(len(traces)):
        rotated = traces[z:] + traces[:z]
        singles.append(replay_pools(problem, plan, {"p3.2xlarge": rotated}, policy="fallback", **common))
    met = float(np.mean([r.summary()["met_deadline"] for r in singles]))
    cost = float(np.mean([charged(r.summary(), list(r.runs), od_cost) for r in singles]))
    out["fallback-1z"] = {"met": met, "cost": cost / od_cost}
    chosen = choose_plan(problem, {"p3.2xlarge": traces}, zones=True, fit_period=args.fit).plan
    out["chosen_plan"] = chosen.to_dict() if chosen else None
    for name in ("uniform-progress", "failover", "mpc", "mpc+plan"):
        policy, use = ("mpc", chosen) if name == "mpc+plan" else (name, plan)
        if use is None:
            out[name] = {"met": 0.0, "cost": math.inf}
            continue
        r = replay_pools(
            problem,
            use,
            {"p3.2xlarge": traces},
            policy=policy,
            model=model if policy == "mpc" else None,
            hindsight=policy == "mpc",
            **common,
        )
        s = r.summary()
        out[name] = {"met": s["met_deadline"], "cost": charged(s, list(r.runs), od_cost) / od_cost}
        if policy == "mpc":  # the bound of the option's own plan
            out[name]["hindsight"] = (s["hindsight_cost_mean"] or math.inf) / od_cost
    out["failover"]["hindsight"] = out["mpc"]["hindsight"]  # the same (nominal) plan
    ok = [n for n in DNNPROV if out[n]["met"] >= 0.99]
    out["best"] = min(ok, key=lambda n: out[n]["cost"]) if ok else None
    out["targets"] = targets(out, out["best"])
    if args.choose_on_fit:
        # the option a user could pick beforehand: the cheapest meeting >= 99 % on the fit period
        on_fit = {}
        for name in DNNPROV:
            policy, use = ("mpc", chosen) if name == "mpc+plan" else (name, plan)
            if use is None:
                continue
            r = replay_pools(
                problem,
                use,
                {"p3.2xlarge": traces},
                policy=policy,
                model=model if policy == "mpc" else None,
                **{**common, "period": args.fit},
            )
            s = r.summary()
            on_fit[name] = {"met": s["met_deadline"], "cost": charged(s, list(r.runs), od_cost) / od_cost}
        fit_ok = [n for n in on_fit if on_fit[n]["met"] >= 0.99]
        out["fit_choice"] = min(fit_ok, key=lambda n: on_fit[n]["cost"]) if fit_ok else None
        out["fit_choice_targets"] = targets(out, out["fit_choice"], need_met=True)
    return out


def targets(out: dict[str, Any], option: str | None, need_met: bool = False) -> dict[str, bool]:
    """The four targets of one option of a cell (all missed without an option)."""
    if option is None:
        return {"deadlines": False, "vs_fallback": False, "vs_hindsight": False, "vs_uniform": False}
    b = out[option]["cost"]
    return {
        "deadlines": out[option]["met"] >= 0.99 if need_met else True,
        "vs_fallback": b <= 0.75 * out["fallback-1z"]["cost"],
        "vs_hindsight": b <= 1.25 * out[option]["hindsight"],
        "vs_uniform": b <= out["uniform-progress"]["cost"] * (1 + 1e-9),
    }


def figure(results: list[dict[str, Any]], path: Path) -> None:
    """Cost against deadline attainment, one marker per (cell, option)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, marker in zip(OPTIONS, "osD^v"):
        ax.scatter(
            [100 * r[name]["met"] for r in results],
            [r[name]["cost"] for r in results],
            label=name,
            marker=marker,
            alpha=0.75,
        )
    ax.scatter(
        [100.0] * len(results),
        [r["mpc"]["hindsight"] for r in results],
        label="hindsight bound (nominal plan)",
        marker="_",
        color="black",
    )
    ax.set_xlabel("deadlines met, % of held-out windows")
    ax.set_ylabel("mean cost / plan on-demand (missed runs charged)")
    ax.set_title("ResNet-110 on 3 aligned V100 zones, held out (20 cells: 0.5-8 h x 1.05-2x slack)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    """Run the sweep, print the table, write the figure and JSON, check the targets."""
    from dnnprov.revocation.availability import parse_period

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fit", type=parse_period, default=(0.0, 0.5), help="fit period (default 0:0.5)")
    parser.add_argument("--replay", type=parse_period, default=(0.5, 1.0), help="replay period (default 0.5:1)")
    parser.add_argument("--hours", default=",".join(f"{h:g}" for h in HOURS))
    parser.add_argument("--slacks", default=",".join(f"{s:g}" for s in SLACKS))
    parser.add_argument("--figure", type=Path, help="write the cost/attainment figure (PNG)")
    parser.add_argument("--json", type=Path, help="write every cell's numbers")
    parser.add_argument("--allow-miss", action="store_true", help="exit 0 even when a target is missed")
    parser.add_argument(
        "--choose-on-fit",
        action="store_true",
        help="also pick the option on the fit period and report its held-out targets",
    )
    parser.add_argument("--allow-skip", action="store_true", help="exit 0 when the traces are absent")
    args = parser.parse_args(argv)
    shared = resolve_shared_data(None)
    files = sorted(glob.glob(str(shared / TRACES))) if shared else []
    if len(files) != 3:
        print("the 16-node V100 traces (../shared/data/spot-traces) are absent: nothing to replay")
        return 0 if args.allow_skip else 2
    traces = [load_trace(f) for f in files]
    problem = base_problem()
    results = []
    started = time.process_time()
    print(
        f"{'J h':>4} {'slack':>5} {'plan':>4} | "
        + " | ".join(f"{n:>16}" for n in OPTIONS)
        + f" | {'hindsight':>9} | {'best/bound':>10} | best, targets"
    )
    for hours in [float(h) for h in args.hours.split(",")]:
        for slack in [float(s) for s in args.slacks.split(",")]:
            try:
                r = cell(job(problem, hours, slack), traces, args)
            except InvalidInputError as exc:
                print(f"{hours:4g} {slack:5g}: {exc}")
                continue
            r.update(hours=hours, slack=slack)
            results.append(r)
            cells = " | ".join(f"{100 * r[n]['met']:5.1f}% {r[n]['cost']:7.3f}x" for n in OPTIONS)
            missed = [k for k, v in r["targets"].items() if not v]
            print(
                f"{hours:4g} {slack:5g} {sum(r['plan']['counts'].values()):>4} | {cells} | "
                f"{r['mpc']['hindsight']:8.3f}x | "
                f"{(r[r['best']]['cost'] / r[r['best']]['hindsight']) if r['best'] else math.inf:9.3f}x | "
                f"{r['best']}, {'all met' if not missed else 'missed: ' + ', '.join(missed)}",
                flush=True,
            )
    cpu = time.process_time() - started
    met = {k: sum(r["targets"][k] for r in results) for k in ("deadlines", "vs_fallback", "vs_hindsight", "vs_uniform")}
    print(f"targets met in cells (of {len(results)}): " + ", ".join(f"{k} {v}" for k, v in met.items()))
    if args.choose_on_fit:
        fit = {k: sum(r["fit_choice_targets"][k] for r in results) for k in met}
        picks = [r["fit_choice"] for r in results]
        print(
            f"option chosen on the fit period ({', '.join(f'{n} {picks.count(n)}' for n in DNNPROV)}, "
            f"none {picks.count(None)}), held-out targets met in cells: "
            + ", ".join(f"{k} {v}" for k, v in fit.items())
        )
    print(f"{cpu:.0f} CPU-s ({args.runs} runs per option and cell; the machine was shared)")
    if args.figure:
        figure(results, args.figure)
    if args.json:
        args.json.write_text(json.dumps({"cells": results, "cpu_s": cpu, "runs": args.runs}, indent=1))
    every = all(all(r["targets"].values()) for r in results)
    return 0 if every or args.allow_miss else 1


if __name__ == "__main__":
    sys.exit(main())
