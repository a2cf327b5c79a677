"""The ``profile`` and ``predict`` subcommands.

    dnnprov profile fit-loss FILE... [--variant cc|no-cc] [--batch-size B] [--workers K]
                                     [--worker-batch B] [--weighting auto|relative|absolute] [--tail-from LOSS]
                                     [--base PROFILE --out PROFILE] [--extrapolation F] [--json]
    dnnprov profile fit-timing FILE [--param-size-mb S] [--ps-bandwidth-mb-s B] [--pcie-bandwidth-mb-s B]
                                    [--storage-cap-mb-s B] [--base FILE --out FILE] [--json]
    dnnprov profile to-csv FILE... --out CSV [--batch-size B] [--workers K] [--worker-batch B]
    dnnprov profile estimate --catalog C --profile P --out FILE [--types T,...] [--estimate-at point|fast|slow] [--json]
    dnnprov profile plan --catalog C --profile P [--types T,...] [--iterations N] [--overhead-s S]
                         [--epoch-samples N [--loss-type T]] [--ps-type T] [--ps-price-per-h P] [--json]
    dnnprov predict INSTANCE --counts TYPE=N,... [--ps S] [--json]                 (spot)
    dnnprov predict INSTANCE --functions N --memory-mb M [--ps S] [--local-batch B] [--json]  (serverless)

Registered in :data:`dnnprov.cli.COMMAND_GROUPS`. Exit codes: 0 success (predict: the
plan is feasible), 1 predict: the plan is infeasible (the reasons are printed), 2 bad input.
A fit the data support only weakly still exits 0 and prints each
:class:`dnnprov.errors.ProfileWarning` as one ``dnnprov: warning: ...`` line on stderr.
See docs/profiler.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import sys
import warnings
from collections.abc import Iterator

from dnnprov.cli.solving.domain import add_domain_options, apply_domain_options
from dnnprov.errors import InvalidInputError, ProfileWarning
from dnnprov.io.instances import embedded_instance, read_instance
from dnnprov.io.paper import load_serverless_workload
from dnnprov.json_files import read_json_file
from dnnprov.models.predict import predict
from dnnprov.problems.validation import checks as check
from dnnprov.problems.validation.checks import MAX_QUOTA

EXIT_OK, EXIT_INFEASIBLE = 0, 1


def _out_needs_base(args: argparse.Namespace, *writing: str) -> None:
    """``--out`` needs ``--base``, and ``--base`` and the options ``writing`` (which shape only the
    written profile) need ``--out``: none is dropped unseen. Checked before any fit."""
    from dnnprov.cli.solving.inventory import embedded_or_path

    if args.out is not None and args.base is None:
        raise InvalidInputError(
            "--out",
            "needs --base: a profile that supplies the fields this fit does not produce "
            "(a file or an embedded profile's name, e.g. spot/resnet110-paper)",
        )
    if args.out is None:
        for option in ("--base", *writing):
            value = getattr(args, option.removeprefix("--").replace("-", "_"))
            if value is not None and value is not False:
                raise InvalidInputError(option, "goes with --out: it shapes the profile written there")
    if args.base is not None:
        embedded_or_path(args.base, "workloads", "--base")


def _non_finite(data: object, path: str = "") -> str | None:
    """The path of the first NaN or infinite number in a fit's JSON form, or ``None``."""
    if isinstance(data, float) and not math.isfinite(data):
        return path or "value"
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        found = _non_finite(value, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def _require_finite(data: dict, source: str) -> None:
    """Refuse a fit whose coefficients, errors or leave-one-out figures are not finite
    (nothing with inf or NaN is printed or written)."""
    where = _non_finite(data)
    if where is not None:
        raise InvalidInputError(
            source,
            f"the fit is not finite at {where}: the data do not determine it "
            "(values too large or too few distinct points)",
        )


@contextlib.contextmanager
def _profile_warnings() -> Iterator[list[str]]:
    """Print every :class:`ProfileWarning` raised inside as one ``dnnprov: warning: ...`` line;
    yields the list that receives their messages (filled when the block ends)."""
    messages: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ProfileWarning)
        try:
            yield messages
        finally:
            messages += dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, ProfileWarning))
            for message in messages:
                print(f"dnnprov: warning: {message}", file=sys.stderr)


def _read_base_notes(path: str) -> str:
    data = read_json_file(path)
    return str(data.get("notes", "")) if isinstance(data, dict) else ""


def cmd_fit_loss(args: argparse.Namespace) -> int:
    """Fit eq. (3) to loss logs; print the coefficients and errors; optionally write a profile."""
    from dnnprov.profiling import (
        profiler,  # scipy: imported by the commands that fit, not by every start
    )

    _out_needs_base(args, "--name", "--param-size-mb", "--keep-base-timings", "--measured-on", "--extrapolation")
    if args.extrapolation is not None:
        check.number("--extrapolation", args.extrapolation, minimum=1)
    log = profiler.read_loss_logs(
        args.files, batch_size=args.batch_size, workers=args.workers, worker_batch=args.worker_batch
    )
    with _profile_warnings() as messages:
        fit = profiler.fit_loss(log, args.variant, args.weighting, args.tail_from)
        loo = (
            profiler.leave_one_run_out(log, args.variant, args.weighting, args.tail_from)
            if len(log.runs()) >= 2
            else []
        )
    fit = dataclasses.replace(fit, warnings=tuple(messages))  # leave-one-run-out's too
    _require_finite({**fit.to_dict(), "leave_one_run_out": loo}, ", ".join(map(str, args.files)))
    if args.out is not None:
        from dnnprov.cli.solving.inventory import load_profile_arg
        from dnnprov.profiling.identity import logged_workload, with_identity

        profile = profiler.with_loss_fit(
            load_profile_arg(args.base, "--base"),
            fit,
            ", ".join(map(str, args.files)),
            loo,
            extrapolation=1.0 if args.extrapolation is None else args.extrapolation,
        )
        with _profile_warnings():
            profile = with_identity(
                profile,
                logged_workload(args.files),
                name=args.name,
                param_size_mb=args.param_size_mb,
                keep_base_timings=args.keep_base_timings,
                measured_on=args.measured_on,
            )
        profiler.write_json(profile.to_dict(), args.out)
    if args.json:
        print(json.dumps({**fit.to_dict(), "leave_one_run_out": loo}, indent=2))
        return EXIT_OK
    print(
        f"fit of eq. (3), variant {fit.variant}: {fit.points} steps of {len(fit.runs)} runs, RMSE {fit.rmse:.4g} "
        f"(largest residual {abs(fit.residuals).max():.4g})"
    )
    for name, e in fit.estimates.items():
        print("  " + profiler.format_estimate(name, e))
    print("  " + profiler.format_uncertainty(fit.uncertainty))
    d = fit.domain
    assert d.cc is not None  # a loss fit's domain always has its R range
    print(
        f"  domain: b_w (per-worker average batch, eq. 4) {d.batch_wa[0]:g}-{d.batch_wa[1]:g}, "
        f"|N| {d.workers[0]}-{d.workers[1]}" + (f", R {d.cc[0]:.3f}-{d.cc[1]:.3f}" if d.cc is not None else "")
    )
    for r in loo:
        it = r["iterations_error_pct"]
        le = r["loss_error_pct"]
        print(
            f"  leave out {r['run']}: loss error {'n/a' if le is None else f'{le:.2f} %'}, iterations to loss "
            f"{r['target_loss']:.4g}: {'n/a' if it is None else f'{it:.2f} %'}"
        )
    if args.out is not None:
        print(f"wrote {args.out}")
    return EXIT_OK


def cmd_fit_timing(args: argparse.Namespace) -> int:
    """Fit the timing coefficients (spot or serverless, by the CSV header)."""
    from dnnprov.profiling import (
        profiler,  # scipy: imported by the commands that fit, not by every start
    )

    _out_needs_base(args)
    if profiler.timing_kind(args.file) == "spot":
        _fit_spot_timing(args)
    else:
        _fit_serverless_timing(args)
    if args.out is not None and not args.json:
        print(f"wrote {args.out}")
    return EXIT_OK


def _fit_spot_timing(args: argparse.Namespace) -> None:
    from dnnprov.cli.solving.inventory import load_profile_arg
    from dnnprov.profiling import profiler

    if args.param_size_mb is None:
        raise InvalidInputError("--param-size-mb", "needed for a spot timing fit (S_parm, the model's parameter size)")
    with _profile_warnings():
        fit = profiler.fit_spot_timing(
            args.file,
            param_size_mb=args.param_size_mb,
            ps_bandwidth_mb_s=args.ps_bandwidth_mb_s,
            pcie_bandwidth_mb_s=args.pcie_bandwidth_mb_s,
        )
    _require_finite(fit.to_dict(), args.file)
    if args.out is not None:
        profile = profiler.with_spot_timing_fit(load_profile_arg(args.base, "--base"), fit, args.file)
        profiler.write_json(profile.to_dict(), args.out)
    if args.json:
        print(json.dumps(fit.to_dict(), indent=2))
        return
    print(f"spot timing fit of {args.file}: {fit.to_dict()['rows']} rows")
    for name, e in (("bandwidth_req_mb_s", fit.bandwidth_req), ("alpha_1", fit.alpha_1), ("beta_1", fit.beta_1)):
        print("  " + profiler.format_estimate(name, e))
    for t, e in fit.compute_time.items():
        print("  " + profiler.format_estimate(f"compute_time_s[{t}]", e))
    print(f"  domain: |N| {fit.workers[0]}-{fit.workers[1]}")
    for r in fit.leave_one_out:
        print(f"  leave out {r['run']} (|N| {r['workers']}): iteration-time error {r['time_error_pct']:.2f} %")


def _fit_serverless_timing(args: argparse.Namespace) -> None:
    from dnnprov.profiling import profiler

    with _profile_warnings():
        fit = profiler.fit_serverless_timing(args.file, storage_cap_mb_s=args.storage_cap_mb_s)
    _require_finite(fit.to_dict(), args.file)
    if args.out is not None:
        from dnnprov.cli.solving.inventory import embedded_or_path  # --base as build --profile reads it

        base = embedded_or_path(args.base, "workloads", "--base")
        workload = profiler.with_serverless_timing_fit(load_serverless_workload(base), fit)
        notes = profiler.serverless_timing_notes(_read_base_notes(str(base)), fit, args.file)
        profiler.write_json(profiler.serverless_workload_dict(workload, notes), args.out)
    if args.json:
        print(json.dumps(fit.to_dict(), indent=2))
        return
    print(f"serverless timing fit of {args.file}: {fit.to_dict()['rows']} rows")
    for name, e in (
        ("rate_alpha", fit.rate_alpha),
        ("rate_beta", fit.rate_beta),
        ("storage_alpha", fit.storage_alpha),
        ("storage_beta", fit.storage_beta),
    ):
        print("  " + profiler.format_estimate(name, e))
    print(f"  min_memory_mb {fit.min_memory_mb} ({fit.min_memory_note})")
    print(f"  domain: {fit.memory_mb[0]:g}-{fit.memory_mb[1]:g} MB, {fit.functions[0]}-{fit.functions[1]} functions")
    for r in fit.leave_one_out:
        print(
            f"  leave out {r['run']} ({r['memory_mb']:g} MB): rate error {r['rate_error_pct']:.2f} %, "
            f"storage error {r['storage_error_pct']:.2f} %"
        )


def cmd_to_csv(args: argparse.Namespace) -> int:
    """Convert loss logs to the CSV contract."""
    from dnnprov.profiling import (
        profiler,  # scipy: imported by the commands that fit, not by every start
    )

    log = profiler.read_loss_logs(
        args.files, batch_size=args.batch_size, workers=args.workers, worker_batch=args.worker_batch
    )
    try:
        log.write_csv(args.out)
    except OSError as exc:
        raise InvalidInputError(args.out, f"cannot write file: {exc.strerror or exc}") from None
    print(f"wrote {len(log)} rows of {len(log.runs())} runs to {args.out}")
    return EXIT_OK


def _types(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


def cmd_estimate(args: argparse.Namespace) -> int:
    """Write the profile with ESTIMATED entries for the catalog's types it does not measure."""
    from dnnprov.cli.solving.inventory import load_catalog_arg, load_profile_arg
    from dnnprov.profiling import estimate, profiler

    catalog, profile = load_catalog_arg(args.catalog), load_profile_arg(args.profile)
    found = estimate.estimate_types(profile, catalog, _types(args.types))
    out = estimate.with_estimates(profile, catalog, end=args.estimate_at, types=list(found))
    profiler.write_json(out.to_dict(), args.out)
    if args.json:
        print(json.dumps({"out": args.out, "estimated": [e.to_dict() for e in found.values()]}, indent=2))
        return EXIT_OK
    for e in found.values():
        print(
            f"{e.type_name:<16} {e.gpu:<10} ESTIMATED {e.at(args.estimate_at):.4g} s per iteration "
            f"[{e.interval[0]:.4g}, {e.interval[1]:.4g}] from {e.reference.name} ({e.reference.gpu})"
        )
    print(f'wrote {args.out}: {len(found)} estimated types (each entry\'s "estimate" says how)')
    return EXIT_OK


def cmd_plan(args: argparse.Namespace) -> int:
    """Which short runs would measure the types the profile only estimates (and, given the
    data set's samples per epoch, its loss model), and what they cost."""
    from dnnprov.cli.solving.inventory import load_catalog_arg, load_profile_arg, ps_price
    from dnnprov.profiling import estimate

    catalog, profile = load_catalog_arg(args.catalog), load_profile_arg(args.profile)
    ps_per_h, ps_source = ps_price(catalog, args.ps_type, args.ps_price_per_h)
    runs = estimate.profiling_plan(
        profile,
        catalog,
        types=_types(args.types),
        iterations=args.iterations,
        overhead_s=args.overhead_s,
        ps_price_per_h=ps_per_h,
        epoch_samples=args.epoch_samples,
        loss_type=args.loss_type,
    )
    minutes, cost = estimate.plan_total(runs)
    if args.json:
        print(
            json.dumps(
                {
                    "workload": profile.workload.name,
                    "catalog": catalog.name,
                    "snapshot": catalog.snapshot,
                    "overhead_s": args.overhead_s,
                    "ps": {"type": args.ps_type, "price_per_h": ps_per_h, "price": ps_source},
                    "runs": [r.to_dict() for r in runs],
                    "total_minutes": round(minutes, 2),
                    "total_cost": round(cost, 4),
                },
                indent=2,
            )
        )
        return EXIT_OK
    timing = [r for r in runs if r.purpose == "timing"]
    loss = [r for r in runs if r.purpose == "loss"]
    print(
        f"profiling plan of {profile.workload.name} on {len(timing)} types of {catalog.name} ({catalog.snapshot}), "
        f"as spotDNN profiles; {args.overhead_s:g} s launch overhead a run (an assumption), timed at the estimates' "
        f"slow end, each run with 1 PS at ${ps_per_h:g}/h ({ps_source})"
    )
    print(f"timing runs: one worker per type, {args.iterations} iterations at its per-GPU batch")
    for r in timing:
        price = "unpriced" if r.cost is None else f"${r.cost:.4f} at ${r.price_per_h:g}/h"
        print(f"  {r.type_name:<16} batch {r.gpus} x {r.batch_per_gpu}, {r.expected_s / 60:.1f} min, {price}")
    if loss:
        entry = profile.per_type.get(loss[0].type_name)
        measured = entry is not None and entry.get("estimate") is None
        print(
            f"loss runs: {estimate.LOSS_EPOCHS} epochs of {args.epoch_samples:,} samples on {loss[0].type_name} "
            f"({'measured' if measured else 'timing ESTIMATED'}; eq. 3's gamma_i, eq. 9's alpha_1 and beta_1)"
        )
        for r in loss:
            price = "unpriced" if r.cost is None else f"${r.cost:.4f} at {r.workers} x ${r.price_per_h:g}/h"
            print(f"  {r.workers} workers, {r.iterations:,} updates, {r.expected_s / 60:.1f} min, {price}")
    else:
        print(
            f"loss runs: give --epoch-samples (the data set's samples per epoch) for spotDNN's "
            f"{estimate.LOSS_EPOCHS} epochs on {', '.join(map(str, estimate.LOSS_CLUSTERS))} workers"
        )
    print(f"total: {minutes:.1f} min, ${cost:.4f}; then dnnprov profile fit-timing and fit-loss on the measured runs")
    return EXIT_OK


def parse_counts(text: str) -> dict[str, int]:
    """``TYPE=N,TYPE=N`` -> ``{TYPE: N}``."""
    counts: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        label, sep, value = item.rpartition("=")
        if not sep or not label:
            raise InvalidInputError("--counts", f"expected TYPE=N, got {item!r}")
        try:
            n = int(value)
        except ValueError:
            raise InvalidInputError(f"--counts {label}", f"expected an integer count, got {value!r}") from None
        if not 0 <= n <= MAX_QUOTA:
            raise InvalidInputError(
                f"--counts {label}",
                f"must be from 0 to {MAX_QUOTA:,} (a column's quota limit), got {value.strip()[:30]}",
            )
        if label in counts:
            raise InvalidInputError(f"--counts {label}", "given twice")
        counts[label] = n
    return counts


def cmd_predict(args: argparse.Namespace) -> int:
    """Predict one plan of an instance."""
    path = args.file
    problem = read_instance(embedded_instance(path.removeprefix("embedded:")) if path.startswith("embedded:") else path)
    problem = apply_domain_options(problem, args)
    out = predict(
        problem,
        counts=parse_counts(args.counts) if args.counts else None,
        ps=args.ps,
        functions=args.functions,
        memory_mb=args.memory_mb,
        local_batch=args.local_batch,
    )
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(_summary(out))
    return EXIT_OK if out["feasible"] else EXIT_INFEASIBLE


def _summary(out: dict) -> str:
    """Readable lines of a prediction."""
    plan = out["plan"]
    if out["kind"] == "spot":
        used = ", ".join(f"{n} x {label}" for label, n in plan["counts"].items())
        lines = [
            f"{out['instance']} [spot, model {out['model']}]: {used}; {plan['ps']} PS",
            f"  time : {out['time_s']:.2f} s"
            if out["time_s"] is not None
            else "  time : n/a (the loss SLO is unreachable)",
            f"  cost : ${out['cost']:.6f}" if out["cost"] is not None else "  cost : n/a",
            f"  b_w {out['batch_wa']:.6g}, R {out['cc']:.4f}{'' if out['cc_in_loss_model'] else ' (not in the no-cc loss)'}, "
            f"|N| {out['workers']}, iterations "
            + (f"{out['iterations']:.1f}" if out["iterations"] is not None else "n/a")
            + f" to loss {out['loss_objective']:g}",
            f"  B_wk {out['bandwidth_mb_s']:.2f} MB/s (P = {out['contention_probability']:.3f}, PS {out['ps_bandwidth_mb_s']:g} MB/s)",
        ]
    else:
        lines = [
            (
                f"{out['instance']} [serverless]: {plan['functions']} functions x {plan['memory_mb']} MB, local batch "
                f"{plan['local_batch']:g} ({out['local_batch_rule']}); {plan['ps']} PS"
            ),
            f"  time : {out['time_s']:.2f} s ({out['launches']} launches)"
            if out["time_s"] is not None
            else "  time : n/a",
            f"  cost : ${out['cost']:.6f}" if out["cost"] is not None else "  cost : n/a",
            (
                f"  R {out['rate_samples_per_s']:.4g} samples/s, B_f^s {out['storage_bandwidth_mb_s']:.4g} MB/s, "
                f"B_f^p {out['ps_bandwidth_mb_s']:.4g} MB/s, {out['iterations']:.1f} iterations"
            ),
        ]
    lines.append(
        f"  feasible: {'yes' if out['feasible'] else 'no'}; inside the validity domain: "
        f"{'yes' if out['inside_domain'] else 'no'}"
    )
    note = out["domain"].get("note")
    if note and out["inside_domain"]:
        lines.append(f"  domain: {note}")
    lines += [f"  - {r}" for r in out["reasons"]]
    return "\n".join(lines)


def _loss_inputs(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="CSV run,workers,batch_wa,cc,step,loss; a trainer_state.json; or a folder of TF worker logs",
    )
    p.add_argument(
        "--batch-size",
        type=float,
        default=None,
        help="samples per optimizer step of one worker of a trainer_state.json run: b_w, the per-worker "
        "batch (eq. 4), not the cluster's global batch",
    )
    p.add_argument("--workers", type=int, help="identical workers of a trainer_state.json run (default 1)")
    p.add_argument(
        "--worker-batch",
        type=int,
        default=None,
        help="batch of every TF worker (default: the _b<batch>_ token of each log's name)",
    )


def _catalog_and_profile(q: argparse.ArgumentParser) -> None:
    q.add_argument("--catalog", required=True, help="catalog file, or an embedded catalog's name (dnnprov list)")
    q.add_argument("--profile", required=True, help="spot workload profile file, or an embedded one's name")
    q.add_argument(
        "--types",
        default=None,
        help="comma-separated types (default: every catalog type with a known GPU the profile does not measure)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``profile`` and ``predict`` to the ``dnnprov`` parser."""
    p = sub.add_parser(
        "profile",
        help="fit workload profiles from measurements (loss logs, timings)",
        description="Fit the coefficients of a workload profile from profiling runs, with "
        "standard errors, validity domain and leave-one-run-out error (docs/profiler.md).",
    )
    psub = p.add_subparsers(dest="profile_command", required=True)

    q = psub.add_parser("fit-loss", help="fit gamma_1..gamma_5 of spotDNN's eq. (3) to loss logs")
    _loss_inputs(q)
    q.add_argument("--variant", choices=("cc", "no-cc"), default="cc", help="loss model with or without R")
    q.add_argument(
        "--weighting",
        choices=("auto", "relative", "absolute"),
        default="auto",
        help="residual weights: fitted loss^theta, theta estimated (auto), 1 (relative) or 0 (absolute); default auto",
    )
    q.add_argument(
        "--tail-from",
        type=float,
        default=None,
        metavar="LOSS",
        help="fit each run's tail only: its steps from where its smoothed loss first reaches LOSS "
        "(a value a little above the target loss the fit is to predict; default: the whole curves)",
    )
    q.add_argument(
        "--base",
        default=None,
        help="spot workload profile to copy the other fields from (with --out): "
        "a file or an embedded profile's name (spot/resnet110-paper)",
    )
    q.add_argument("--out", default=None, help="write the base profile with the fitted loss model and domain")
    q.add_argument(
        "--name",
        default=None,
        help="the logged workload's name, when it is not --base's (then "
        "--param-size-mb is needed and --base's per-type timings are dropped)",
    )
    q.add_argument("--param-size-mb", type=float, default=None, help="S_parm of the --name workload, MB")
    q.add_argument(
        "--keep-base-timings",
        action="store_true",
        help="with --name: keep --base's per-type timings, each marked as an estimate",
    )
    q.add_argument(
        "--measured-on",
        default=None,
        metavar="TYPE",
        help="the one-GPU type a Trainer state's run used: its train_samples_per_second gives that "
        "type's compute time per iteration at the logged batch",
    )
    q.add_argument(
        "--extrapolation",
        type=float,
        default=None,
        help="extrapolation factor f >= 1 the written domain allows (default 1: the fitted ranges)",
    )
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(run=cmd_fit_loss)

    q = psub.add_parser(
        "fit-timing", help="fit B_req, T_comp, alpha_1/beta_1 (spot) or the rate/storage lines (serverless)"
    )
    q.add_argument(
        "file",
        help="timing CSV (spot: run,type,gpus,workers,ps,batch_per_gpu,iteration_s,comm_s; "
        "serverless: run,memory_mb,functions,samples_per_s,storage_mb_s,failed)",
    )
    q.add_argument("--param-size-mb", type=float, default=None, help="S_parm, MB (spot)")
    q.add_argument("--ps-bandwidth-mb-s", type=float, default=1200.0, help="B_ps of one PS, MB/s (spot; default 1200)")
    q.add_argument("--pcie-bandwidth-mb-s", type=float, default=10000.0, help="B_pcie, MB/s (spot; default 10000)")
    q.add_argument("--storage-cap-mb-s", type=float, default=115.0, help="B_s, MB/s (serverless; default 115)")
    q.add_argument(
        "--base", default=None, help="profile (spot) or serverless workload file to copy the other fields from"
    )
    q.add_argument("--out", default=None, help="write the base with the fitted numbers")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(run=cmd_fit_timing)

    q = psub.add_parser("to-csv", help="convert loss logs to the CSV run,workers,batch_wa,cc,step,loss")
    _loss_inputs(q)
    q.add_argument("--out", required=True, help="CSV file to write")
    q.set_defaults(run=cmd_to_csv)

    q = psub.add_parser(
        "estimate",
        help="write a profile with ESTIMATED speeds for types it does not measure",
        description=cmd_estimate.__doc__,
    )
    _catalog_and_profile(q)
    q.add_argument(
        "--estimate-at",
        choices=("point", "fast", "slow"),
        default="point",
        help="the compute time written: the bandwidth-ratio point or an end of the interval",
    )
    q.add_argument("--out", required=True, help="profile file to write")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(run=cmd_estimate)

    q = psub.add_parser(
        "plan",
        help="the short runs that would measure the estimated types, with minutes and cost",
        description=cmd_plan.__doc__,
    )
    _catalog_and_profile(q)
    q.add_argument("--iterations", type=int, default=30, help="iterations per type (default 30, as spotDNN profiles)")
    q.add_argument(
        "--overhead-s",
        type=float,
        default=300.0,
        help="seconds per run before the first iteration: launch, image, data (default 300, an assumption)",
    )
    q.add_argument(
        "--epoch-samples",
        type=int,
        default=None,
        help="samples in one epoch of the data set: adds spotDNN's loss runs (3 epochs on 2, 4 and 7 workers)",
    )
    q.add_argument(
        "--loss-type",
        default=None,
        help="the type of the loss runs' workers (default: the priced type whose samples cost least on one worker)",
    )
    q.add_argument("--ps-type", default="m5.xlarge", help="the PS of every run (default m5.xlarge)")
    q.add_argument(
        "--ps-price-per-h",
        type=float,
        default=None,
        help="the PS's $/h (default: the catalog's on-demand price of --ps-type, else m5.xlarge's list price)",
    )
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(run=cmd_plan)

    p = sub.add_parser(
        "predict",
        help="predict time, cost and loss curve of one given plan",
        description="The papers' performance predictor: time, cost, b_w, R, bandwidths, loss curve, "
        "feasibility and validity domain of one plan. Exit 0 feasible, 1 infeasible, 2 bad input.",
    )
    p.add_argument("file", help="instance file (or embedded:spot/paper-table1.json)")
    p.add_argument("--counts", default=None, help="spot: TYPE=N,... (column labels; TYPE:on-demand for on-demand)")
    p.add_argument("--ps", type=int, default=1, help="PS nodes (default 1)")
    p.add_argument("--functions", type=int, default=None, help="serverless: number of functions")
    p.add_argument("--memory-mb", type=int, default=None, help="serverless: memory per function, MB")
    p.add_argument("--local-batch", type=float, default=None, help="serverless: local batch instead of eq. (9)'s")
    p.add_argument("--json", action="store_true", help="print one JSON object (time_s and cost as solve --json)")
    add_domain_options(p)
    p.set_defaults(run=cmd_predict)
