"""Deployable forms of a plan: EC2 launch calls, Lambda settings, SkyPilot, Kueue, JSON.

One module per consumer in :mod:`.consumers` (EC2 and Lambda calls, SkyPilot, Kueue), the plan
document they all read (:mod:`.plan`) and the names each consumer accepts (:mod:`.names`).
:func:`export_files` builds every file of a target in memory, ``{file name: text}``,
before anything is written; YAML is written by PyYAML's safe dumper only, so names stay data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from dnnprov.cloud.export.consumers.aws_calls import (
    CALLS_FORMAT,
    ApiCall,
    FunctionCode,
    LaunchOptions,
    calls_json,
    ec2_fleet_calls,
    lambda_calls,
    run_instances_calls,
)
from dnnprov.cloud.export.consumers.kueue import KUEUE_API, KUEUE_APIS, kueue_documents, kueue_yaml
from dnnprov.cloud.export.consumers.skypilot import SkyPilotCatalog, SkyPilotOptions, skypilot_files, skypilot_tasks
from dnnprov.cloud.export.plan import (
    FEASIBLE,
    PLAN_FORMAT,
    PlanDocument,
    check_serverless_plan,
    check_spot_plan,
    dump_yaml,
    load_plan,
    plan_document,
    plan_json,
    split_label,
)
from dnnprov.errors import InvalidInputError
from dnnprov.problems.validation import checks as check

__all__ = [
    "CALLS_FORMAT",
    "FEASIBLE",
    "FILE_NAMES",
    "KUEUE_API",
    "KUEUE_APIS",
    "PLAN_FORMAT",
    "TARGETS",
    "ApiCall",
    "ExportOptions",
    "FunctionCode",
    "LaunchOptions",
    "PlanDocument",
    "SkyPilotCatalog",
    "SkyPilotOptions",
    "calls_json",
    "check_serverless_plan",
    "check_spot_plan",
    "dump_yaml",
    "ec2_fleet_calls",
    "export",
    "export_files",
    "kueue_documents",
    "kueue_yaml",
    "lambda_calls",
    "load_plan",
    "plan_document",
    "plan_json",
    "run_instances_calls",
    "skypilot_files",
    "skypilot_tasks",
    "split_label",
]

TARGETS = ("ec2-fleet", "ec2-run-instances", "lambda", "skypilot", "kueue", "json")

#: File name of each single-file export.
FILE_NAMES = {
    "ec2-fleet": "ec2-fleet.json",
    "ec2-run-instances": "ec2-run-instances.json",
    "lambda": "lambda.json",
    "kueue": "kueue.yaml",
    "json": "plan.json",
}


@dataclass(frozen=True)
class ExportOptions:
    """Options of the exports beyond the plan (each export reads the ones it needs)."""

    launch: LaunchOptions = LaunchOptions()
    function_name: str | None = None
    code: FunctionCode | None = None
    queue_name: str | None = None
    namespace: str = "default"
    kueue_api: str = KUEUE_API
    skypilot: SkyPilotOptions = SkyPilotOptions()


def export_files(doc: PlanDocument, target: str, options: ExportOptions = ExportOptions()) -> dict[str, str]:
    """The files of ``doc`` exported to ``target`` (one of :data:`TARGETS`): ``{file name: text}``.

    Every target is one file except ``skypilot``: one task file per cluster and ``launch.sh``.
    Every file is complete when this returns: a refusal leaves nothing half-built.
    """
    target = check.choice("target", target, TARGETS)
    if target == "skypilot":
        return skypilot_files(doc, options.skypilot)
    if target == "ec2-fleet":
        text = calls_json(doc, ec2_fleet_calls(doc, options.launch))
    elif target == "ec2-run-instances":
        text = calls_json(doc, run_instances_calls(doc, options.launch))
    elif target == "lambda":
        text = calls_json(doc, lambda_calls(doc, options.function_name, options.code))
    elif target == "kueue":
        text = kueue_yaml(doc, options.queue_name, namespace=options.namespace, api_version=options.kueue_api)
    else:
        text = json.dumps(plan_json(doc), indent=2) + "\n"
    return {FILE_NAMES[target]: text}


def export(doc: PlanDocument, target: str, options: ExportOptions = ExportOptions()) -> str:
    """The text of ``doc`` exported to a single-file ``target`` (every target but ``skypilot``)."""
    if target == "skypilot":
        raise InvalidInputError(
            "target", "the skypilot export is one task file per cluster: use export_files() (CLI: --out DIR)"
        )
    (text,) = export_files(doc, target, options).values()
    return text
