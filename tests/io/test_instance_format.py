"""The JSON instance format: embedded files, the schemas, and how bad files are refused."""

from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from dnnprov import (
    InstanceType,
    InvalidInputError,
    ServerlessConstraints,
    ServerlessPlatform,
    ServerlessProblem,
    ServerlessWorkload,
    SpotConstraints,
    SpotPlatform,
    SpotProblem,
    SpotSLO,
    SpotWorkload,
    VcpuQuota,
    dumps_instance,
    embedded_instance,
    problem_from_dict,
    read_instance,
    write_instance,
)
from dnnprov.io.catalogs.catalog import embedded_path
from dnnprov.io.instances import schema
from dnnprov.problems.spot import LOSS_VARIANTS, MARKETS, MODELS

INSTANCE_FILES = sorted(
    p.relative_to(embedded_path("instances")).as_posix() for p in embedded_path("instances").rglob("*.json")
)


def schema_file(name: str) -> dict[str, Any]:
    """One of the embedded schemas by file stem, e.g. ``catalog-v1``."""
    return json.loads(embedded_path("schema", f"{name}.schema.json").read_text())


def required_fields(cls: type, exclude: tuple[str, ...] = ()) -> set[str]:
    """Dataclass fields without a default."""
    return {
        f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING and f.name not in exclude
    }


def field_names(cls: type, exclude: tuple[str, ...] = ()) -> set[str]:
    """All dataclass field names."""
    return {f.name for f in fields(cls) if f.name not in exclude}


@pytest.fixture
def table1() -> dict[str, Any]:
    """The paper's Table I instance as a plain dict."""
    return json.loads(embedded_instance("spot/paper-table1.json").read_text())


@pytest.fixture
def resnet50() -> dict[str, Any]:
    """The λDNN Table 3 instance as a plain dict."""
    return json.loads(embedded_instance("serverless/paper-table3-resnet50.json").read_text())


def refusal(data: dict[str, Any]) -> InvalidInputError:
    """The error ``problem_from_dict`` raises for ``data`` (fails the test if none)."""
    with pytest.raises(InvalidInputError) as info:
        problem_from_dict(data)
    return info.value


# ---------------------------------------------------------------- embedded instances


def test_instances_are_embedded() -> None:
    """Both kinds of instance files ship with the package."""
    assert any(f.startswith("spot/") for f in INSTANCE_FILES)
    assert any(f.startswith("serverless/") for f in INSTANCE_FILES)


@pytest.mark.parametrize("relative", INSTANCE_FILES)
def test_embedded_instance_matches_schema(relative: str) -> None:
    """Every embedded instance file is valid under its kind's JSON Schema."""
    data = json.loads(embedded_instance(relative).read_text())
    jsonschema.validate(data, schema(relative.split("/")[0]), cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize("relative", INSTANCE_FILES)
def test_embedded_instance_round_trips_text(relative: str) -> None:
    """Reading an embedded file and writing it again gives identical text."""
    path = embedded_instance(relative)
    assert dumps_instance(read_instance(path)) == path.read_text()


@pytest.mark.parametrize("relative", INSTANCE_FILES)
def test_embedded_instance_round_trips_problem(relative: str, tmp_path: Path) -> None:
    """A problem written to disk and read back is equal to the original."""
    problem = read_instance(embedded_instance(relative))
    again = read_instance(write_instance(problem, tmp_path / "copy.json"))
    assert again == problem
    assert type(again) is type(problem)


# ---------------------------------------------------------------- schema vs dataclasses


def test_spot_schema_lists_every_dataclass_field() -> None:
    """The spot schema's objects have exactly the dataclasses' fields."""
    s = schema("spot")
    props = s["properties"]
    assert set(props) == field_names(SpotProblem) | {"format", "version"}
    assert set(s["$defs"]["instance_type"]["properties"]) == field_names(InstanceType, ("name",))
    assert set(s["$defs"]["workload"]["properties"]) == field_names(SpotWorkload)
    assert set(s["$defs"]["vcpu_quota"]["properties"]) == field_names(VcpuQuota)
    assert set(props["platform"]["properties"]) == field_names(SpotPlatform)
    assert set(props["slo"]["properties"]) == field_names(SpotSLO)
    assert set(props["constraints"]["properties"]) == field_names(SpotConstraints)


def test_spot_schema_requires_what_the_dataclasses_require() -> None:
    """Required properties are the dataclass fields without a default."""
    s = schema("spot")
    assert set(s["$defs"]["instance_type"]["required"]) == required_fields(InstanceType, ("name",))
    assert set(s["$defs"]["workload"]["required"]) == required_fields(SpotWorkload)
    assert set(s["properties"]["slo"]["required"]) == required_fields(SpotSLO)
    assert set(s["required"]) == {"format", "version"} | required_fields(SpotProblem)


def test_serverless_schema_lists_every_dataclass_field() -> None:
    """The serverless schema's objects have exactly the dataclasses' fields."""
    s = schema("serverless")
    props = s["properties"]
    assert set(props) == field_names(ServerlessProblem, ("time_s",)) | {"format", "version", "slo"}
    assert set(s["required"]) == {"format", "version", "workload", "slo"}
    assert set(s["$defs"]["workload"]["properties"]) == field_names(ServerlessWorkload)
    assert set(s["$defs"]["workload"]["required"]) == required_fields(ServerlessWorkload)
    assert set(props["platform"]["properties"]) == field_names(ServerlessPlatform)
    assert set(props["constraints"]["properties"]) == field_names(ServerlessConstraints)
    assert set(props["slo"]["properties"]) == {"time_s"}


@pytest.mark.parametrize("kind, cls", [("spot", SpotPlatform), ("serverless", ServerlessPlatform)])
def test_schema_defaults_are_the_dataclass_defaults(kind: str, cls: type) -> None:
    """Every documented platform default equals the dataclass default."""
    props = schema(kind)["properties"]["platform"]["properties"]
    for f in fields(cls):
        assert props[f.name]["default"] == f.default, f.name


def test_schema_enums_match_the_code() -> None:
    """Model, loss-variant and market enums list exactly what the code accepts."""
    s = schema("spot")
    assert tuple(s["properties"]["model"]["enum"]) == MODELS
    assert tuple(s["$defs"]["workload"]["properties"]["loss_variant"]["enum"]) == LOSS_VARIANTS
    assert tuple(s["$defs"]["vcpu_quota"]["properties"]["market"]["enum"]) == MARKETS
    assert tuple(s["properties"]["constraints"]["properties"]["markets"]["items"]["enum"]) == MARKETS


@pytest.mark.parametrize("name", ["spot-v1", "serverless-v1", "catalog-v1", "spot-workload-v1"])
def test_schema_is_valid_draft_2020_12(name: str) -> None:
    """Each schema file is itself a valid Draft 2020-12 schema."""
    s = schema_file(name)
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(s)


@pytest.mark.parametrize("name", ["spot-v1", "serverless-v1", "catalog-v1", "spot-workload-v1"])
def test_schema_closes_and_describes_every_object(name: str) -> None:
    """Every object forbids unknown keys and every property has a description."""

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                assert node.get("additionalProperties") is False, path
                for key, sub in node["properties"].items():
                    assert sub.get("description") or "$ref" in sub, f"{path}.{key}"
            for key, sub in node.items():
                walk(sub, f"{path}.{key}")
        elif isinstance(node, list):
            for i, sub in enumerate(node):
                walk(sub, f"{path}[{i}]")

    walk(schema_file(name), name)


def test_shared_definitions_do_not_drift() -> None:
    """The workload and vCPU-quota definitions are identical wherever they appear."""
    spot, profile, catalog = schema("spot"), schema_file("spot-workload-v1"), schema_file("catalog-v1")
    assert profile["$defs"]["workload"] == spot["$defs"]["workload"]
    assert catalog["$defs"]["vcpu_quota"] == spot["$defs"]["vcpu_quota"]


def test_schema_accepts_every_optional_spot_field() -> None:
    """A problem using every optional field writes a file the schema accepts and reads back equal."""
    problem = read_instance(embedded_instance("spot/paper-table1.json")).replace(model="paper")
    first = problem.instance_types[0]
    types = (
        InstanceType(
            name=first.name,
            gpus=1,
            spot_price_per_h=1.0,
            quota=2,
            gpu_memory_gb=16,
            compute_time_s=0.5,
            vcpus=8,
            on_demand_price_per_h=3.0,
            on_demand_quota=1,
            family="P",
        ),
    ) + problem.instance_types[1:]
    workload = SpotWorkload(
        **{
            **{f.name: getattr(problem.workload, f.name) for f in fields(SpotWorkload)},
            "loss_variant": "cc",
            "alpha_2": 64.0,
            "beta_2": 0.0,
        }
    )
    full = problem.replace(
        instance_types=types,
        workload=workload,
        slo=SpotSLO(loss=0.8, time_s=2600, takeover_overhead_s=30),
        platform=SpotPlatform(ps_price_per_h=0.192),
        constraints=SpotConstraints(
            existing={"g3.8xlarge": 1},
            ps_count=(1, 2),
            workers=(1, 20),
            budget_usd=50.0,
            markets=("spot", "on-demand"),
            vcpu_quotas=(VcpuQuota("G", "spot", 256),),
        ),
    )
    data = json.loads(dumps_instance(full))
    jsonschema.validate(data, schema("spot"), cls=jsonschema.Draft202012Validator)
    assert problem_from_dict(data) == full


# ---------------------------------------------------------------- refusals


def test_unknown_field_is_refused(table1: dict[str, Any]) -> None:
    """An unknown key is refused, naming the key itself."""
    table1["platform"]["colour"] = "red"
    err = refusal(table1)
    assert err.field == "platform.colour"
    assert "unknown field" in err.problem


def test_unknown_top_level_field_is_refused(table1: dict[str, Any]) -> None:
    """An unknown top-level key is refused as well."""
    table1["solver"] = "cplex"
    err = refusal(table1)
    assert err.field == "solver"
    assert "unknown field" in err.problem


def test_wrong_unit_suffix_is_refused(table1: dict[str, Any]) -> None:
    """``time_ms`` instead of ``time_s`` is refused; the message suggests the right name."""
    table1["slo"]["time_ms"] = table1["slo"].pop("time_s") * 1000
    err = refusal(table1)
    assert err.field == "slo.time_ms"
    assert "'time_s'" in err.problem
    assert "units" in err.problem


def test_wrong_unit_suffix_in_serverless_platform_is_refused(resnet50: dict[str, Any]) -> None:
    """``max_memory_gb`` instead of ``max_memory_mb`` is refused in a serverless file."""
    resnet50["platform"]["max_memory_gb"] = resnet50["platform"].pop("max_memory_mb") / 1024
    err = refusal(resnet50)
    assert err.field == "platform.max_memory_gb"
    assert "'max_memory_mb'" in err.problem


def test_missing_required_field_is_refused(table1: dict[str, Any]) -> None:
    """A missing required coefficient is refused, naming its object and the field."""
    del table1["workload"]["gamma_5"]
    err = refusal(table1)
    assert err.field.startswith("workload")
    assert "gamma_5" in str(err)


def test_missing_serverless_slo_is_refused(resnet50: dict[str, Any]) -> None:
    """A serverless file without its SLO is refused."""
    del resnet50["slo"]
    err = refusal(resnet50)
    assert "slo" in str(err)


def test_wrong_type_is_refused_with_its_path(table1: dict[str, Any]) -> None:
    """A string where an integer belongs is refused with the full dotted path."""
    table1["instance_types"]["p3.2xlarge"]["quota"] = "5"
    err = refusal(table1)
    assert err.field == "instance_types.p3.2xlarge.quota"


def test_wrong_type_in_serverless_workload_is_refused(resnet50: dict[str, Any]) -> None:
    """A boolean where a number belongs is refused with its path."""
    resnet50["workload"]["dataset_mb"] = True
    err = refusal(resnet50)
    assert err.field == "workload.dataset_mb"


def test_fractional_count_is_refused(table1: dict[str, Any]) -> None:
    """A count with a fractional part is not an integer."""
    table1["instance_types"]["g3.8xlarge"]["gpus"] = 2.5
    assert refusal(table1).field == "instance_types.g3.8xlarge.gpus"


def test_out_of_range_value_is_refused(table1: dict[str, Any]) -> None:
    """A negative quota is refused by the schema's minimum."""
    table1["instance_types"]["g3.8xlarge"]["quota"] = -1
    err = refusal(table1)
    assert err.field == "instance_types.g3.8xlarge.quota"


def test_unknown_enum_value_is_refused(table1: dict[str, Any]) -> None:
    """A model variant outside the enum is refused."""
    table1["model"] = "exact"
    assert refusal(table1).field == "model"


def test_unknown_estimated_name_is_refused(table1: dict[str, Any]) -> None:
    """``estimated`` may only name workload fields."""
    table1["workload"]["estimated"] = ["gamma_9"]
    assert refusal(table1).field.startswith("workload.estimated")


def test_on_demand_suffix_in_type_name_is_refused(table1: dict[str, Any]) -> None:
    """A type name may not contain the on-demand column suffix."""
    table1["instance_types"]["p3.2xlarge:on-demand"] = table1["instance_types"].pop("p3.2xlarge")
    assert refusal(table1).field.startswith("instance_types")


@pytest.mark.parametrize("fmt, version, field", [("dnnprov/spot", 2, "version"), ("dnnprov/gpu", 1, "format")])
def test_format_and_version_are_checked(table1: dict[str, Any], fmt: str, version: int, field: str) -> None:
    """An unknown format or version is refused before anything else."""
    table1["format"], table1["version"] = fmt, version
    assert refusal(table1).field == field


def test_meaning_is_checked_after_the_schema(table1: dict[str, Any]) -> None:
    """A schema-valid file whose SLO loss is below the loss floor is still refused."""
    data = copy.deepcopy(table1)
    data["slo"]["loss"] = data["workload"]["gamma_5"]
    jsonschema.validate(data, schema("spot"), cls=jsonschema.Draft202012Validator)
    assert refusal(data).field == "slo.loss"


def test_documented_examples_are_valid_instances() -> None:
    """Every JSON example in docs/instance-format.md reads as a problem."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "instance-format.md").read_text()
    blocks = re.findall(r"```json\n(.*?)```", text, flags=re.DOTALL)
    assert len(blocks) == 4
    kinds = [type(problem_from_dict(json.loads(block))).__name__ for block in blocks]
    assert kinds == ["SpotProblem", "SpotProblem", "ServerlessProblem", "ServerlessProblem"]


# ---------------------------------------------------------------- reading hostile files (issue 14)
def _read_error(path: Path) -> InvalidInputError:
    with pytest.raises(InvalidInputError) as info:
        read_instance(path)
    return info.value


def test_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    """A UTF-8 file with a byte-order mark reads like one without."""
    text = embedded_instance("spot/paper-table1.json").read_text()
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert read_instance(path) == read_instance(embedded_instance("spot/paper-table1.json"))


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (lambda t: t.encode("utf-16"), "looks like UTF-16"),
        (lambda t: t.encode("utf-16-le"), "looks like UTF-16"),
        (lambda t: t.replace("spotDNN", "caf\xe9", 1).encode("latin-1"), "byte 0xe9"),
        (lambda t: b"[" * 5000 + b"]" * 5000, "nested more than 32 levels"),
        (lambda t: t.replace('"quota": 5', '"quota": ' + "1" * 4400, 1).encode(), "integer literal of 4400 digits"),
        (lambda t: b" " * (8 * 1024 * 1024 + 1), "larger than the limit"),
    ],
)
def test_unreadable_files_name_the_file(tmp_path: Path, data, words) -> None:
    """Other encodings, deep nesting, huge literals and huge files: one error on the file."""
    path = tmp_path / "bad.json"
    path.write_bytes(data(embedded_instance("spot/paper-table1.json").read_text()))
    error = _read_error(path)
    assert words in error.problem and error.field in (str(path), "(top level)", "", "instance_types.g4dn.4xlarge.quota")


def test_repeated_key_is_refused_at_its_place(table1: dict[str, Any], tmp_path: Path) -> None:
    """A key repeated in one object is refused with its dotted path, never silently dropped."""
    text = json.dumps(table1, indent=1)
    at = text.index('"slo": {') + len('"slo": {')
    path = tmp_path / "dup.json"
    path.write_text(text[:at] + '"loss": 9, ' + text[at:])
    error = _read_error(path)
    assert error.field == "slo.loss" and "given twice" in error.problem


def test_fifo_and_folder_are_refused_without_waiting(tmp_path: Path) -> None:
    """A named pipe (which would block a reader) and a folder are refused at once."""
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    assert "not a regular file" in _read_error(fifo).problem
    assert "is a folder" in _read_error(tmp_path).problem


def test_embedded_names_stay_inside_the_package() -> None:
    """embedded_instance refuses absolute paths, '..' and names that leave the folder."""
    for bad in ("/etc/passwd", "../../../../etc/passwd", "spot/../../schema/spot-v1.schema.json", ""):
        with pytest.raises(InvalidInputError):
            embedded_instance(bad)
    assert read_instance("embedded:spot/paper-table1.json").name == "paper-table1"
    assert embedded_instance("spot").is_dir()
