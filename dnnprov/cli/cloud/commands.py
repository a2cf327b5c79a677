"""Cloud subcommands of the CLI: ``catalog fetch|import``, ``export``, ``apply``.

Registered in :data:`dnnprov.cli.COMMAND_GROUPS`; errors are
:class:`~dnnprov.errors.InvalidInputError` (cloud failures: its subclass ``CloudError``),
which ``dnnprov`` prints as one line with exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dnnprov.cli.common import EXIT_NO_PLAN, EXIT_OK, output_file, writing
from dnnprov.cloud.export import (
    KUEUE_APIS,
    TARGETS,
    ApiCall,
    ExportOptions,
    FunctionCode,
    LaunchOptions,
    PlanDocument,
    SkyPilotOptions,
    ec2_fleet_calls,
    export_files,
    load_plan,
    run_instances_calls,
)
from dnnprov.cloud.export.consumers.aws_calls import new_run_id
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import load_catalog
from dnnprov.io.catalogs.importing import SNAPSHOTS, dated_catalog_name, import_shared_data, write_catalog
from dnnprov.io.catalogs.regions import import_regions, parse_regions
from dnnprov.io.instances import read_instance
from dnnprov.problems.spot import SpotProblem


def cmd_catalog_fetch(args: argparse.Namespace) -> int:
    """Read prices, quotas and hardware from AWS and write a dated catalog file."""
    from dnnprov.cloud.aws import AwsClients, fetch_catalog_file

    types = [t for t in args.types.split(",") if t] if args.types else None
    regions = parse_regions(args.region)
    if regions is None:
        raise InvalidInputError(
            "--region", "'all' is for catalog import (the shared data's regions); list the regions to fetch: a,b,c"
        )
    if len(regions) > 1:
        from dnnprov.cloud.aws import fetch_regions_file

        print(
            fetch_regions_file(
                regions, types, out=args.out, endpoint_url=args.endpoint_url, window_hours=args.window_hours
            )
        )
        return EXIT_OK
    print(
        fetch_catalog_file(
            regions[0],
            types,
            out=args.out,
            window_hours=args.window_hours,
            clients=AwsClients(regions[0], endpoint_url=args.endpoint_url),
        )
    )
    return EXIT_OK


def cmd_catalog_import(args: argparse.Namespace) -> int:
    """Build a catalog from the real data in ../shared/data (offline)."""
    regions = parse_regions(args.region)
    snapshot, mix, estimate = args.snapshot, args.mix_dates, args.estimate_missing_spot
    if args.out:
        output_file(args.out)
    if regions is not None and len(regions) == 1:
        catalog = import_shared_data(
            regions[0], args.shared_data, snapshot=snapshot, mix_dates=mix, estimate_missing_spot=estimate
        )
    else:
        catalog = import_regions(
            regions, args.shared_data, snapshot=snapshot, mix_dates=mix, estimate_missing_spot=estimate
        )
    out = args.out or Path.cwd() / dated_catalog_name(catalog)
    with writing(out):
        print(write_catalog(catalog, out))
    return EXIT_OK


def _document(args: argparse.Namespace) -> PlanDocument:
    """The plan document of PLAN, with --instance / --catalog added when given."""
    doc = load_plan(args.plan)
    problem = read_instance(args.instance) if args.instance else doc.problem
    catalog = load_catalog(args.catalog) if args.catalog else doc.catalog
    return PlanDocument(result=doc.result, problem=problem, catalog=catalog)


def _launch(args: argparse.Namespace, default_run_id: str | None = None) -> LaunchOptions:
    """The launch options; the run id is ``--run-id``, else ``default_run_id``."""
    return LaunchOptions(
        image_id=args.image_id,
        launch_template=args.launch_template,
        launch_template_version=args.launch_template_version,
        subnet_id=args.subnet_id,
        key_name=args.key_name,
        run_id=args.run_id or default_run_id,
    )


def _export_options(args: argparse.Namespace) -> ExportOptions:
    code = None
    if args.role or args.image_uri or args.s3_bucket or args.s3_key:
        code = FunctionCode(
            role=args.role or "",
            image_uri=args.image_uri,
            s3_bucket=args.s3_bucket,
            s3_key=args.s3_key,
            runtime=args.runtime,
            handler=args.handler,
        )
    skypilot = SkyPilotOptions(
        catalog=args.skypilot_catalog,
        check_catalog=not args.no_catalog_check,
        region=args.region,
        managed_spot=args.managed_spot,
        autostop_minutes=args.autostop,
    )
    return ExportOptions(
        launch=_launch(args),
        function_name=args.function_name,
        code=code,
        queue_name=args.queue_name,
        namespace=args.namespace,
        kueue_api=f"kueue.x-k8s.io/{args.kueue_api}",
        skypilot=skypilot,
    )


def cmd_export(args: argparse.Namespace) -> int:
    """Print (or write) PLAN in a deployable form; ``skypilot`` writes one task file per cluster to --out DIR.

    Every file is built before the first is written, so a refused plan writes nothing.
    """
    if args.to == "skypilot" and not args.out:
        raise InvalidInputError(
            "--out", "the skypilot export is one task file per cluster: give the folder to write them to (--out DIR)"
        )
    files = export_files(_document(args), args.to, _export_options(args))
    if args.to == "skypilot":
        folder = Path(args.out)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for name, text in files.items():
                (folder / name).write_text(text)
            (folder / "launch.sh").chmod(0o755)
        except OSError as exc:
            raise InvalidInputError("--out", f"cannot write {folder}: {exc.strerror or exc}") from None
        for name in files:
            print(folder / name)
        return EXIT_OK
    (text,) = files.values()
    if args.out:
        try:
            Path(args.out).write_text(text)
        except OSError as exc:
            raise InvalidInputError("--out", f"cannot write {args.out}: {exc.strerror or exc}") from None
        print(args.out)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_apply(args: argparse.Namespace) -> int:
    """Issue PLAN's EC2 calls: with --dry-run as DryRun requests, else after a confirmation."""
    import boto3

    from dnnprov.cloud.aws import CloudError
    from dnnprov.cloud.launch import RegionalClients, issue_calls

    doc = _document(args)
    launch = _launch(args, new_run_id())
    calls = (ec2_fleet_calls if args.via == "fleet" else run_instances_calls)(doc, launch)
    # A multi-region plan's calls name their regions (TYPE@REGION): each goes to its region.
    named = sorted({c.region for c in calls if c.region is not None})
    if named and args.region and named != [args.region]:
        raise InvalidInputError(
            "--region", f"the plan's calls name their regions ({', '.join(named)}); --region is for plans without"
        )
    region = (named[0] if named else None) or args.region or doc.region or boto3.Session().region_name
    if region is None:
        raise InvalidInputError("region", "the plan names no region (no catalog) and none is configured: pass --region")
    where = ", ".join(named) if len(named) > 1 else region
    fleet = args.via == "fleet" and not args.dry_run
    if fleet and not isinstance(doc.problem, SpotProblem):
        raise InvalidInputError(
            "--instance",
            "an instant fleet chooses its own mix: apply --via fleet checks it "
            "against the plan's instance (quotas, deadline, budget), so give it "
            "(--instance FILE, or a plan document that holds it)",
        )
    summary = ", ".join(_describe(c) for c in calls)
    run = launch.run_id
    if not args.dry_run and not args.yes:
        try:
            answer = input(f"Launch {summary} in {where} as run {run}? This starts billing. [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("aborted: nothing launched")
            return EXIT_NO_PLAN
    try:
        outcomes = issue_calls(
            calls,
            RegionalClients(region, endpoint_url=args.endpoint_url),
            dry_run=args.dry_run,
            check_delivery=doc.check_delivery if fleet else None,
        )
    except CloudError as exc:
        if args.dry_run:
            raise
        raise CloudError(
            exc.field, f"{exc.problem} (run {run}: its instances are tagged dnnprov:run={run})", exc.code
        ) from None
    for outcome in outcomes:
        what = _describe(outcome.call) + (f" in {outcome.call.region}" if len(named) > 1 else "")
        if outcome.dry_run:
            print(f"dry run ok: {what} (DryRunOperation)")
        else:
            got = (
                f" delivered {', '.join(f'{n} x {t}' for t, n in outcome.types)} "
                f"({sum(n for _, n in outcome.types)} workers)"
                if outcome.call.operation == "CreateFleet"
                else ""
            )
            print(
                f"launched: {what}{got}: {', '.join(outcome.instance_ids) or 'no instance'}"
                + (f"; errors: {'; '.join(outcome.errors)}" if outcome.errors else "")
            )
    if not args.dry_run:
        print(
            f"run {run}: every instance is tagged dnnprov:run={run}; `apply --run-id {run}` sends the same "
            "launch calls again, which launch nothing new"
        )
    return EXIT_OK


def _describe(call: ApiCall) -> str:
    """``"5 x g3.8xlarge (spot)"`` for RunInstances; for CreateFleet its target, which is GPUs:
    ``"spot fleet of 21 GPUs of g3.16xlarge, g3.8xlarge"``."""
    p = call.params
    if call.operation == "CreateFleet":
        types = dict.fromkeys(o["InstanceType"] for c in p["LaunchTemplateConfigs"] for o in c["Overrides"])
        target = p["TargetCapacitySpecification"]
        return (
            f"{target['DefaultTargetCapacityType']} fleet of {target['TotalTargetCapacity']} GPUs of {', '.join(types)}"
        )
    market = "spot" if "InstanceMarketOptions" in p else "on-demand"
    return f"{p['MinCount']} x {p['InstanceType']} ({market})"


def _plan_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("plan", help="plan document, or the JSON of `dnnprov solve --json`")
    p.add_argument("--instance", help="the instance file the plan solved (adds GPU counts, PS type, kept workers)")
    p.add_argument("--catalog", help="the catalog file the plan was priced from (adds region, snapshot)")
    p.add_argument(
        "--image-id",
        help="AMI for RunInstances; a plan launching in several regions: REGION=AMI,REGION=AMI (AMIs are per region)",
    )
    p.add_argument("--launch-template", help="launch template name (CreateFleet needs one)")
    p.add_argument("--launch-template-version", default="$Default")
    p.add_argument("--subnet-id")
    p.add_argument("--key-name")
    p.add_argument(
        "--run-id",
        help="name of this deployment: the dnnprov:run tag of every instance and the seed of "
        "each launch's ClientToken (apply: a fresh one by default; export: none)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``catalog``, ``export``, ``apply`` and ``replan`` subcommands."""
    p = sub.add_parser("catalog", help="build catalog files from AWS or from the shared real data")
    catalog_sub = p.add_subparsers(dest="catalog_command", required=True)
    f = catalog_sub.add_parser("fetch", help="read prices, quotas and hardware from AWS (boto3)")
    f.add_argument(
        "--region", required=True, help="a region, or a comma-separated list (one multi-region catalog: TYPE@REGION)"
    )
    f.add_argument("--types", help="comma-separated instance types (default: every GPU type)")
    f.add_argument("--window-hours", type=float, help="highest spot price per AZ over this window (default: latest)")
    f.add_argument("--endpoint-url", help="send every AWS call here (testing)")
    f.add_argument("--out", help="catalog file (default: ./aws-REGION-SNAPSHOT.json)")
    f.set_defaults(run=cmd_catalog_fetch)
    i = catalog_sub.add_parser("import", help="catalog from ../shared/data (offline, real AWS data)")
    i.add_argument(
        "--region",
        default="us-east-1",
        help="a region, a comma-separated list, or 'all' (every region the data prices): several regions "
        "give one multi-region catalog whose entries are TYPE@REGION pools",
    )
    i.add_argument("--shared-data", help="folder of the shared data (default: <repo>/../shared/data)")
    i.add_argument(
        "--snapshot",
        choices=SNAPSHOTS,
        default="2025",
        help="the moment of every price: 2025 (spot = 2026 on-demand x (1 - 2025 advisor savings), "
        "default) or 2022 (the 2022-05-31 spot history, 2021 advisor buckets, no on-demand)",
    )
    i.add_argument(
        "--mix-dates",
        action="store_true",
        help="with --snapshot 2022: add the 2026 on-demand prices and 2025 buckets (dates mixed)",
    )
    i.add_argument(
        "--estimate-missing-spot",
        action="store_true",
        help="with --snapshot 2022 --mix-dates: spot = on-demand x (1 - advisor savings) where the history has none",
    )
    i.add_argument("--out", help="catalog file (default: ./NAME-SNAPSHOT.json)")
    i.set_defaults(run=cmd_catalog_import)

    p = sub.add_parser("export", help="write a plan as EC2 calls, Lambda settings, SkyPilot, Kueue or JSON")
    _plan_options(p)
    p.add_argument("--to", choices=TARGETS, required=True)
    p.add_argument("--function-name", help="Lambda function (lambda; default: the instance name)")
    p.add_argument("--role", help="execution role ARN (lambda): CreateFunction instead of UpdateFunctionConfiguration")
    p.add_argument("--image-uri", help="container image of the new function (lambda, with --role)")
    p.add_argument("--s3-bucket", help=".zip package bucket of the new function (lambda, with --role)")
    p.add_argument("--s3-key", help=".zip package key (lambda, with --s3-bucket)")
    p.add_argument("--runtime", help="runtime of a .zip function, e.g. python3.12 (lambda)")
    p.add_argument("--handler", help="handler of a .zip function, e.g. train.handler (lambda)")
    p.add_argument("--queue-name", help="ClusterQueue and LocalQueue name (kueue; default: the instance name)")
    p.add_argument("--namespace", default="default", help="namespace of the LocalQueue (kueue)")
    p.add_argument(
        "--kueue-api",
        choices=[a.rsplit("/", 1)[1] for a in KUEUE_APIS],
        default="v1beta2",
        help="Kueue API version (default %(default)s, stored from Kueue 0.16; v1beta1 for Kueue before 0.15)",
    )
    p.add_argument("--region", help="region of the SkyPilot tasks when the plan carries no catalog (skypilot)")
    p.add_argument(
        "--skypilot-catalog",
        metavar="VMS_CSV",
        help="SkyPilot's AWS catalog to check types against (skypilot; default "
        "~/.sky/catalogs/v8/aws/vms.csv, SkyPilot's own copy)",
    )
    p.add_argument(
        "--no-catalog-check", action="store_true", help="do not check the types against SkyPilot's catalog (skypilot)"
    )
    p.add_argument(
        "--managed-spot",
        action="store_true",
        help="spot workers as managed jobs, recovered after preemptions (skypilot: sky jobs launch)",
    )
    p.add_argument(
        "--autostop",
        type=int,
        default=10,
        metavar="MINUTES",
        help="tear clusters down after this many idle minutes (skypilot; default %(default)s)",
    )
    p.add_argument("--out", help="write here instead of standard output (skypilot: a folder, required)")
    p.set_defaults(run=cmd_export)

    p = sub.add_parser("apply", help="launch a spot plan on EC2 (--dry-run: DryRun requests only)")
    _plan_options(p)
    p.add_argument(
        "--via",
        choices=("run-instances", "fleet"),
        default="run-instances",
        help="RunInstances per type (exact mix, default) or one instant CreateFleet",
    )
    p.add_argument("--dry-run", action="store_true", help="send DryRun=True requests; launch nothing")
    p.add_argument("--yes", action="store_true", help="launch without the confirmation prompt")
    p.add_argument("--region", help="default: the plan's catalog region, else boto3's configured region")
    p.add_argument("--endpoint-url", help="send every AWS call here (testing)")
    p.set_defaults(run=cmd_apply)
