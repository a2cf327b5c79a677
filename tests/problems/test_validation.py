"""Input validation: every bad input raises InvalidInputError naming the field and the problem."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest

import dnnprov
from dnnprov import InvalidInputError

NAN, INF = math.nan, math.inf


def spot_dict(make_resnet110) -> dict:
    """The reference ResNet-110 problem as an instance-file dict."""
    return make_resnet110().to_dict()


def edit(data: dict, path: tuple, value=..., *, rename: str | None = None) -> dict:
    """A deep copy of ``data`` with ``path`` set to ``value``, deleted (``...``) or renamed."""
    data = copy.deepcopy(data)
    node = data
    for key in path[:-1]:
        node = node[key]
    if rename is not None:
        node[rename] = node.pop(path[-1])
    elif value is ...:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


def check_error(excinfo: pytest.ExceptionInfo, field: str, *words: str) -> None:
    """The error names ``field`` and its message contains every one of ``words``."""
    err = excinfo.value
    assert err.field == field, f"field {err.field!r}, message {err}"
    message = str(err)
    assert message.startswith(field)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


# ---------------------------------------------------------------- spot instance data
P3, G38 = "p3.2xlarge", "g3.8xlarge"

SPOT_CASES = [
    # negative prices
    (("instance_types", P3, "spot_price_per_h"), -0.5, f"instance_types.{P3}.spot_price_per_h", ">= 0"),
    (("platform", "ps_price_per_h"), -1.0, "platform.ps_price_per_h", ">= 0"),
    # quotas
    (("instance_types", G38, "quota"), -1, f"instance_types.{G38}.quota", ">= 0"),
    (("instance_types", G38, "quota"), 2.5, f"instance_types.{G38}.quota", "integer", "2.5"),
    (("instance_types", G38, "quota"), NAN, f"instance_types.{G38}.quota", "integer"),
    # bools and strings where numbers are expected
    (("instance_types", G38, "quota"), True, f"instance_types.{G38}.quota", "integer", "True"),
    (("instance_types", P3, "spot_price_per_h"), True, f"instance_types.{P3}.spot_price_per_h", "number", "True"),
    (("instance_types", P3, "spot_price_per_h"), "0.9", f"instance_types.{P3}.spot_price_per_h", "number"),
    (("slo", "loss"), False, "slo.loss", "number"),
    (("workload", "gamma_3"), True, "workload.gamma_3", "number"),
    (("instance_types", P3, "gpus"), True, f"instance_types.{P3}.gpus", "integer"),
    # NaN and infinities
    (("instance_types", P3, "spot_price_per_h"), NAN, f"instance_types.{P3}.spot_price_per_h", "finite"),
    (("slo", "time_s"), INF, "slo.time_s", "finite"),
    (("slo", "loss"), NAN, "slo.loss", "finite"),
    (("workload", "param_size_mb"), -INF, "workload.param_size_mb", "finite"),
    (("workload", "gamma_1"), NAN, "workload.gamma_1", "finite"),
    (("instance_types", P3, "speed_samples_per_s"), INF, f"instance_types.{P3}.speed_samples_per_s", "finite"),
    # loss SLO not above the asymptote gamma_5 (eq. 3 has no solution)
    (("slo", "loss"), 0.5, "slo.loss", "gamma_5", "unreachable"),
    (("slo", "loss"), 0.2, "slo.loss", "gamma_5", "unreachable"),
    # other ranges
    (("slo", "time_s"), 0, "slo.time_s", "> 0"),
    (("slo", "takeover_overhead_s"), 2400.0, "slo.takeover_overhead_s", "slo.time_s"),
    (("instance_types", P3, "gpus"), 0, f"instance_types.{P3}.gpus", ">= 1"),
    (("workload", "gamma_4"), -0.1, "workload.gamma_4", ">= 0"),
    (("workload", "bandwidth_req_mb_s"), 0, "workload.bandwidth_req_mb_s", "> 0"),
    (("platform", "ps_bandwidth_mb_s"), -1200, "platform.ps_bandwidth_mb_s", "> 0"),
    (("model",), "exact", "model", "paper", "reference"),
    # the reference model has no CC term
    (("workload", "loss_variant"), "cc", "workload.loss_variant", "no-cc"),
    (("workload", "loss_variant"), "with-cc", "workload.loss_variant", "cc", "no-cc"),
    # kept instances
    (("constraints", "existing"), {"t2.micro": 1}, "constraints.existing.t2.micro", "unknown instance type"),
    (
        ("constraints", "existing"),
        {f"{P3}:on-demand": 1},
        f"constraints.existing.{P3}:on-demand",
        "on-demand is not in constraints.markets",
    ),
    (("constraints", "existing"), {P3: 3}, f"constraints.existing.{P3}", "exceed the quota 2"),
    (("constraints", "existing"), {P3: -1}, f"constraints.existing.{P3}", ">= 0"),
    (("constraints", "existing"), {P3: 1.5}, f"constraints.existing.{P3}", "integer"),
    # ranges
    (("constraints", "ps_count"), [1, None], "constraints.ps_count", "upper limit"),
    (("constraints", "ps_count"), [3, 1], "constraints.ps_count", "low 3 is above high 1"),
    (("constraints", "ps_count"), [0, 2], "constraints.ps_count[0]", ">= 1"),
    (("constraints", "workers"), [5, 2], "constraints.workers", "low 5 is above high 2"),
    (("constraints", "workers"), [2], "constraints.workers", "pair"),
    (("constraints", "budget_usd"), 0, "constraints.budget_usd", "> 0"),
    (("constraints", "budget_usd"), NAN, "constraints.budget_usd", "finite"),
    # markets and vCPU quotas
    (
        ("constraints", "markets"),
        ["spot", "on-demand"],
        f"instance_types.{P3}.on_demand_price_per_h",
        "missing",
        "on-demand",
    ),
    (("constraints", "markets"), ["spot", "spot"], "constraints.markets", "twice"),
    (("constraints", "markets"), ["reserved"], "constraints.markets[0]", "spot", "on-demand"),
    (
        ("constraints", "vcpu_quotas"),
        [{"family": "Z", "market": "spot", "vcpus": 64}],
        "constraints.vcpu_quotas.Z",
        "no instance type in this family",
    ),
    (
        ("constraints", "vcpu_quotas"),
        [{"family": "G", "market": "spot", "vcpus": 64}],
        "constraints.vcpu_quotas.G",
        "needs vcpus",
    ),
    (
        ("constraints", "vcpu_quotas"),
        [{"family": "G", "market": "spot", "vcpus": 2.5}],
        "constraints.vcpu_quotas.G.vcpus",
        "integer",
    ),
    (("workload", "estimated"), ["gamma_9"], "workload.estimated", "gamma_9"),
]


@pytest.mark.parametrize(
    ("path", "value", "field", "words"),
    [(c[0], c[1], c[2], c[3:]) for c in SPOT_CASES],
    ids=[f"{'.'.join(map(str, c[0]))}={c[1]!r}" for c in SPOT_CASES],
)
def test_spot_from_dict_refuses(make_resnet110, path, value, field, words):
    """A spot instance dict with one bad value is refused, naming the field and the problem."""
    data = edit(spot_dict(make_resnet110), path, value)
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.SpotProblem.from_dict(data)
    check_error(excinfo, field, *words)


def test_spot_base_dict_is_valid(make_resnet110):
    """The unedited dict the spot cases start from is accepted and round-trips."""
    problem = make_resnet110()
    assert dnnprov.SpotProblem.from_dict(spot_dict(make_resnet110)) == problem


@pytest.mark.parametrize(
    ("present", "field"),
    [
        ({"speed_samples_per_s": 1885.0, "compute_time_s": 0.4}, f"instance_types.{P3}.compute_time_s"),
        ({}, f"instance_types.{P3}.compute_time_s"),
    ],
)
def test_exactly_one_of_speed_and_compute_time(make_resnet110, present, field):
    """An instance type needs exactly one of speed_samples_per_s and compute_time_s."""
    data = spot_dict(make_resnet110)
    entry = data["instance_types"][P3]
    entry.pop("speed_samples_per_s")
    entry.update(present)
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.SpotProblem.from_dict(data)
    check_error(excinfo, field, "exactly one", "speed_samples_per_s")


def test_batch_needs_size_or_eq10_coefficients(make_resnet110):
    """Without batch_per_gpu, eq. (10) needs gpu_memory_gb and the workload's alpha_2/beta_2."""
    data = spot_dict(make_resnet110)
    del data["instance_types"][P3]["batch_per_gpu"]
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.SpotProblem.from_dict(data)
    check_error(excinfo, f"instance_types.{P3}.batch_per_gpu", "gpu_memory_gb")
    data["instance_types"][P3]["gpu_memory_gb"] = 16.0
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.SpotProblem.from_dict(data)
    check_error(excinfo, "workload.alpha_2", "eq. (10)", P3)


def test_speed_faster_than_communication_is_refused(make_resnet110):
    """A profiled speed implying a non-positive compute time (eq. 6) is refused."""
    data = edit(spot_dict(make_resnet110), ("instance_types", P3, "speed_samples_per_s"), 1e6)
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.SpotProblem.from_dict(data)
    check_error(excinfo, f"instance_types.{P3}.speed_samples_per_s", "non-positive compute time")


@pytest.mark.parametrize(
    ("path", "field"),
    [
        (("slo",), "slo"),
        (("workload",), "workload"),
        (("instance_types",), "instance_types"),
        (("format",), "format"),
        (("slo", "time_s"), "slo.time_s"),
        (("slo", "loss"), "slo.loss"),
        (("workload", "gamma_3"), "workload.gamma_3"),
        (("workload", "bandwidth_req_mb_s"), "workload.bandwidth_req_mb_s"),
        (("instance_types", G38, "quota"), f"instance_types.{G38}.quota"),
        (("instance_types", G38, "spot_price_per_h"), f"instance_types.{G38}.spot_price_per_h"),
        (("instance_types", G38, "gpus"), f"instance_types.{G38}.gpus"),
    ],
)
def test_spot_missing_field(make_resnet110, path, field):
    """Removing a required field of a spot instance dict is refused as missing."""
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.SpotProblem.from_dict(edit(spot_dict(make_resnet110), path))
    check_error(excinfo, field, "missing")


@pytest.mark.parametrize(
    ("path", "wrong", "right"),
    [
        (("slo", "time_s"), "time_ms", "time_s"),
        (("slo", "time_s"), "time_h", "time_s"),
        (("instance_types", P3, "spot_price_per_h"), "spot_price_per_hour", "spot_price_per_h"),
        (("platform", "ps_bandwidth_mb_s"), "ps_bandwidth_gb_s", "ps_bandwidth_mb_s"),
        (("workload", "param_size_mb"), "param_size_gb", "param_size_mb"),
    ],
)
def test_spot_wrong_unit_suffix(make_resnet110, path, wrong, right):
    """A field with the wrong unit suffix is refused, and the message suggests the right name."""
    data = edit(spot_dict(make_resnet110), path, rename=wrong)
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.SpotProblem.from_dict(data)
    field = ".".join(path[:-1] + (wrong,))
    check_error(excinfo, field, "unknown field", repr(right), "units")


def test_instance_type_constructor_validates():
    """InstanceType refuses bad values when built directly in Python, not only from dicts."""
    good = dict(name="x1.large", gpus=1, spot_price_per_h=0.5, quota=2, batch_per_gpu=64, speed_samples_per_s=100.0)
    assert dnnprov.InstanceType(**good).quota == 2
    assert dnnprov.InstanceType(**{**good, "quota": 3.0}).quota == 3  # integral float is fine
    for change, field in [
        ({"quota": -2}, "quota"),
        ({"spot_price_per_h": -0.01}, "spot_price_per_h"),
        ({"quota": 2.5}, "quota"),
        ({"spot_price_per_h": NAN}, "spot_price_per_h"),
        ({"on_demand_price_per_h": -1.0}, "on_demand_price_per_h"),
        ({"vcpus": True}, "vcpus"),
        ({"compute_time_s": 0.1}, "compute_time_s"),
    ]:
        with pytest.raises(InvalidInputError) as excinfo:
            dnnprov.InstanceType(**{**good, **change})
        assert excinfo.value.field == f"instance_types.x1.large.{field}"
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.InstanceType(**{**good, "name": "x1.large:on-demand"})
    assert "on-demand" in str(excinfo.value)


def test_duplicate_instance_type_is_refused(make_resnet110):
    """Listing one type twice is refused."""
    problem = make_resnet110()
    with pytest.raises(InvalidInputError) as excinfo:
        problem.replace(instance_types=problem.instance_types + problem.instance_types[:1])
    check_error(excinfo, f"instance_types.{P3}", "twice")


def test_reference_model_refuses_cc_on_replace(make_resnet110):
    """Switching a CC-variant paper problem to the reference model is refused on replace()."""
    paper = make_resnet110(model="paper", loss_variant="cc")
    with pytest.raises(InvalidInputError) as excinfo:
        paper.replace(model="reference")
    check_error(excinfo, "workload.loss_variant", "no-cc")


def test_errors_are_value_errors(make_resnet110):
    """InvalidInputError is a ValueError, so generic callers catch it too."""
    with pytest.raises(ValueError):
        dnnprov.SpotProblem.from_dict(edit(spot_dict(make_resnet110), ("slo", "loss"), 0.1))


@pytest.mark.parametrize("kind", ["spot", "serverless"])
def test_problem_name_must_be_a_string(make_resnet110, make_resnet50, kind):
    """A problem name that is not a string is refused (it becomes Result.instance)."""
    data = make_resnet110().to_dict() if kind == "spot" else make_resnet50().to_dict()
    data["name"] = 5
    cls = dnnprov.SpotProblem if kind == "spot" else dnnprov.ServerlessProblem
    with pytest.raises(InvalidInputError) as excinfo:
        cls.from_dict(data)
    assert excinfo.value.field == "name"


# ---------------------------------------------------------------- serverless instance data
SERVERLESS_CASES = [
    (("workload", "min_memory_mb"), 4096, "workload.min_memory_mb", "4096", "max_memory_mb"),
    (("workload", "max_global_batch"), 64, "workload.max_global_batch", "below local_batch"),
    (("platform", "checkpoint_margin_s"), 900.0, "platform.checkpoint_margin_s", "timeout_s"),
    (("platform", "checkpoint_margin_s"), 1000.0, "platform.checkpoint_margin_s", "timeout_s"),
    (("platform", "price_per_gb_s"), -1e-6, "platform.price_per_gb_s", ">= 0"),
    (("platform", "price_per_request"), -1.0, "platform.price_per_request", ">= 0"),
    (("platform", "ps_price_per_h"), -0.1, "platform.ps_price_per_h", ">= 0"),
    (("workload", "samples"), 2.5, "workload.samples", "integer"),
    (("workload", "samples"), True, "workload.samples", "integer"),
    (("workload", "rate_alpha"), False, "workload.rate_alpha", "number"),
    (("workload", "dataset_mb"), NAN, "workload.dataset_mb", "finite"),
    (("workload", "storage_beta"), INF, "workload.storage_beta", "finite"),
    (("slo", "time_s"), NAN, "slo.time_s", "finite"),
    (("slo", "time_s"), INF, "slo.time_s", "finite"),
    (("slo", "time_s"), True, "slo.time_s", "number"),
    (("slo", "time_s"), -600, "slo.time_s", "> 0"),
    (("workload", "local_batch"), 0, "workload.local_batch", ">= 1"),
    (("workload", "epochs"), 0, "workload.epochs", "> 0"),
    (("platform", "memory_step_mb"), 64.5, "platform.memory_step_mb", "integer"),
    (("platform", "max_memory_mb"), 32, "platform.max_memory_mb", ">= 64"),
    (("platform", "concurrency_limit"), 0, "platform.concurrency_limit", ">= 1"),
    (("platform", "timeout_s"), 0, "platform.timeout_s", "> 0"),
    (("constraints", "ps_count"), [1, None], "constraints.ps_count", "upper limit"),
    (("constraints", "ps_count"), [2, 1], "constraints.ps_count", "low 2 is above high 1"),
    (("constraints", "functions"), [10, 3], "constraints.functions", "low 10 is above high 3"),
    (("constraints", "functions"), [0, 5], "constraints.functions[0]", ">= 1"),
    (("constraints", "budget_usd"), -1.0, "constraints.budget_usd", "> 0"),
    (("workload", "estimated"), ["speed"], "workload.estimated", "speed"),
]


@pytest.mark.parametrize(
    ("path", "value", "field", "words"),
    [(c[0], c[1], c[2], c[3:]) for c in SERVERLESS_CASES],
    ids=[f"{'.'.join(map(str, c[0]))}={c[1]!r}" for c in SERVERLESS_CASES],
)
def test_serverless_from_dict_refuses(make_resnet50, path, value, field, words):
    """A serverless instance dict with one bad value is refused, naming the field and the problem."""
    data = edit(make_resnet50().to_dict(), path, value)
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.ServerlessProblem.from_dict(data)
    check_error(excinfo, field, *words)


def test_serverless_base_dict_is_valid(make_resnet50):
    """The unedited dict the serverless cases start from is accepted and round-trips."""
    problem = make_resnet50()
    assert dnnprov.ServerlessProblem.from_dict(problem.to_dict()) == problem


@pytest.mark.parametrize(
    ("path", "field"),
    [
        (("workload",), "workload"),
        (("slo",), "slo"),
        (("slo", "time_s"), "slo.time_s"),
        (("workload", "samples"), "workload.samples"),
        (("workload", "rate_beta"), "workload.rate_beta"),
        (("workload", "storage_alpha"), "workload.storage_alpha"),
        (("workload", "max_global_batch"), "workload.max_global_batch"),
    ],
)
def test_serverless_missing_field(make_resnet50, path, field):
    """Removing a required field of a serverless instance dict is refused as missing."""
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.ServerlessProblem.from_dict(edit(make_resnet50().to_dict(), path))
    check_error(excinfo, field, "missing")


@pytest.mark.parametrize(
    ("path", "wrong", "right"),
    [
        (("slo", "time_s"), "time_ms", "time_s"),
        (("platform", "timeout_s"), "timeout_ms", "timeout_s"),
        (("platform", "max_memory_mb"), "max_memory_gb", "max_memory_mb"),
        (("workload", "dataset_mb"), "dataset_gb", "dataset_mb"),
        (("platform", "ps_price_per_h"), "ps_price_per_s", "ps_price_per_h"),
    ],
)
def test_serverless_wrong_unit_suffix(make_resnet50, path, wrong, right):
    """A serverless field with the wrong unit suffix is refused with the right name suggested."""
    data = edit(make_resnet50().to_dict(), path, rename=wrong)
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.ServerlessProblem.from_dict(data)
    check_error(excinfo, ".".join(path[:-1] + (wrong,)), "unknown field", repr(right))


def test_serverless_constructor_validates(make_resnet50):
    """ServerlessProblem checks memory bounds when built in Python (and on replace)."""
    problem = make_resnet50()
    small = dnnprov.ServerlessPlatform(max_memory_mb=2048)
    with pytest.raises(InvalidInputError) as excinfo:
        problem.replace(platform=small)
    check_error(excinfo, "workload.min_memory_mb", "2432", "2048")
    with pytest.raises(InvalidInputError) as excinfo:
        problem.replace(time_s=NAN)
    check_error(excinfo, "slo.time_s", "finite")


# ---------------------------------------------------------------- dnnprov.solve arguments
@pytest.mark.parametrize("method", ["exact", "MILP", "", "brute-force"])
def test_solve_refuses_unknown_method(make_resnet110, method):
    """An unknown method name is refused, listing the valid ones."""
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.solve(make_resnet110(), method)
    check_error(excinfo, "method", *dnnprov.METHODS)


def test_solve_refuses_reference_heuristic_for_serverless(make_resnet50):
    """The authors' reference heuristic exists for spot problems only."""
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.solve(make_resnet50(), "reference-heuristic")
    check_error(excinfo, "method", "reference-heuristic", "spot")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"time_limit_s": 0}, "time_limit_s"),
        ({"time_limit_s": -5.0}, "time_limit_s"),
        ({"gap": 1.0}, "gap"),
        ({"gap": -0.01}, "gap"),
        ({"gap": NAN}, "gap"),
    ],
)
def test_solve_refuses_bad_limits(make_resnet110, kwargs, field):
    """Out-of-range time limits and gaps are refused before any solving."""
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.solve(make_resnet110(), "enumerate", **kwargs)
    assert excinfo.value.field == field


def test_solve_refuses_non_problems():
    """Only spot and serverless problems can be solved."""
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.solve({"format": "dnnprov/spot"}, "heuristic")
    check_error(excinfo, "problem", "dict")


@pytest.mark.parametrize(
    "kwargs",
    [{"time_limit_s": NAN}, {"time_limit_s": True}, {"max_plans": "1000"}],
    ids=["time_limit_nan", "time_limit_bool", "max_plans_str"],
)
def test_solve_refuses_non_numeric_limits(make_resnet110, kwargs):
    """NaN or bool time limits and a non-integer max_plans are refused as invalid input."""
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.solve(make_resnet110(), "enumerate", **kwargs)
    assert excinfo.value.field in kwargs


# ---------------------------------------------------------------- resource limits (issue 8, 14)
REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_every_shipped_and_benchmark_file_is_inside_the_limits():
    """Every embedded instance and every benchmark file (json and jsonl) loads."""
    from dnnprov.benchsets.generate import read_instance_lines

    files = sorted((REPO / "data/instances").rglob("*.json")) + sorted(
        p for p in (REPO / "data/benchmarks").rglob("*.json") if p.name != "index.json"
    )
    assert len(files) > 100
    for path in files:
        dnnprov.read_instance(path)
    assert sum(1 for _ in read_instance_lines(REPO / "data/benchmarks/trace/trace-sample.jsonl")) > 0


def test_a_large_cluster_is_inside_the_limits(make_resnet110):
    """100 types with quota 16 (1,600 workers), quotas of 4,096 and 64 PS counts still load."""
    base = make_resnet110()
    template = base.instance_types[2]
    types = tuple(
        dnnprov.InstanceType(
            name=f"g{i}.x",
            gpus=template.gpus,
            quota=16,
            spot_price_per_h=0.5 + i / 100,
            speed_samples_per_s=template.speed_samples_per_s,
            batch_per_gpu=template.batch_per_gpu,
        )
        for i in range(100)
    )
    problem = base.replace(instance_types=types, constraints=dnnprov.SpotConstraints(ps_count=(1, 64)))
    assert len(problem.columns()) == 100 and int(problem.columns().upper.sum()) == 1600
    big = base.replace(instance_types=(dataclasses.replace(template, quota=4096),))
    assert int(big.columns().upper[0]) == 4096


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (
            lambda p: p.replace(
                instance_types=tuple(dataclasses.replace(p.instance_types[0], name=f"t{i}.x") for i in range(4097))
            ),
            "instance_types",
            ("4,097 types", "4096"),
        ),
        (
            lambda p: p.replace(instance_types=(dataclasses.replace(p.instance_types[0], quota=10**6),)),
            "instance_types.p3.2xlarge.quota",
            ("1000000", "4,096"),
        ),
        (
            lambda p: p.replace(
                instance_types=tuple(
                    dataclasses.replace(t, name=f"t{i}.x", quota=4096) for i, t in enumerate(p.instance_types * 2)
                )
            ),
            "instance_types",
            ("40,960 workers", "16,384"),
        ),
        (
            lambda p: p.replace(
                instance_types=tuple(
                    dataclasses.replace(t, name=f"t{i}.x", quota=4096) for i, t in enumerate(p.instance_types * 2)
                ),
                constraints=dnnprov.SpotConstraints(workers=(1, 20000)),
            ),
            "constraints.workers",
            ("20,000 workers",),
        ),
        (
            lambda p: p.replace(constraints=dnnprov.SpotConstraints(ps_count=(1, 10**6))),
            "constraints.ps_count[1]",
            ("64",),
        ),
        (
            lambda p: p.replace(instance_types=(dataclasses.replace(p.instance_types[0], gpus=2**63),)),
            "instance_types.p3.2xlarge.gpus",
            ("2^53",),
        ),
        (lambda p: p.replace(name="x\x1b[2Jy"), "name", ("U+001B",)),
        (lambda p: p.replace(name="x\u202ey"), "name", ("U+202E",)),
        (lambda p: p.replace(name="n" * 201), "name", ("201 characters",)),
        (lambda p: p.replace(platform=dnnprov.SpotPlatform(ps_type=123)), "platform.ps_type", ("string",)),
        (lambda p: p.replace(notes="a\ud800"), "notes", ("surrogate",)),
    ],
)
def test_spot_limits_are_refused_at_once(make_resnet110, change, field, words):
    """Sizes that cannot fit, and names that cannot be shown, are refused naming the field."""
    with pytest.raises(InvalidInputError) as excinfo:
        change(make_resnet110())
    check_error(excinfo, field, *words)


@pytest.mark.parametrize(
    ("platform", "constraints", "field", "words"),
    [
        ({"memory_step_mb": 1, "max_memory_mb": 10**9}, {}, "platform.max_memory_mb", ("1,048,576",)),
        ({"memory_step_mb": 1, "max_memory_mb": 20000}, {}, "platform.memory_step_mb", ("memory sizes", "16,384")),
        ({"concurrency_limit": 10**6}, {}, "platform.concurrency_limit", ("100,000",)),
        (
            {"memory_step_mb": 1, "max_memory_mb": 10240, "concurrency_limit": 100000},
            {"ps_count": (1, 2)},
            "constraints.functions",
            ("plans", "100,000,000"),
        ),
        ({}, {"ps_count": (1, 65)}, "constraints.ps_count[1]", ("64",)),
    ],
)
def test_serverless_limits_are_refused_at_once(make_resnet50, platform, constraints, field, words):
    """A memory grid of 1e9 sizes and similar are refused before any list is built."""
    import time

    started = time.process_time()  # CPU, not wall: the test machines are shared
    with pytest.raises(InvalidInputError) as excinfo:
        make_resnet50().replace(
            platform=dnnprov.ServerlessPlatform(**platform), constraints=dnnprov.ServerlessConstraints(**constraints)
        )
    check_error(excinfo, field, *words)
    assert time.process_time() - started < 0.5


def test_errors_stay_one_short_line_with_many_types(make_resnet110):
    """An unknown label among 256 offered types lists a few of them, not all 256."""
    base = make_resnet110()
    types = tuple(dataclasses.replace(base.instance_types[0], name=f"t{i:03d}.x") for i in range(256))
    with pytest.raises(InvalidInputError) as excinfo:
        base.replace(instance_types=types, constraints=dnnprov.SpotConstraints(existing={"nope": 1}))
    check_error(excinfo, "constraints.existing.nope", "t000.x", "(248 more)")
    assert len(str(excinfo.value)) < 200


# ---------------------------------------------------------------- hints (issue 22 item 8)
HINTS = [
    # (edit of the spot dict, field, words the one line must hold, words it must not)
    (
        lambda d: d["constraints"].update(quotas={P3: 2}),
        "constraints.quotas",
        ("instance_types.NAME.quota", "constraints.vcpu_quotas"),
        ("did you mean",),
    ),
    (lambda d: d["slo"].update(deadline_s=d["slo"].pop("time_s")), "slo.deadline_s", ("did you mean 'time_s'?",), ()),
    (
        lambda d: d["slo"].update(deadline_h=d["slo"].pop("time_s")),
        "slo.deadline_h",
        ("did you mean 'time_s'?", "units are part of field names"),
        (),
    ),
    (lambda d: d.update(deadline_s=2400), "deadline_s", ("the deadline is slo.time_s",), ()),
    (
        lambda d: d["constraints"].update(existing={f"{G38}:on-demand": 2}),
        f"constraints.existing.{G38}:on-demand",
        ("on-demand is not in constraints.markets (spot)", 'add "on-demand" there'),
        ("unknown instance type",),
    ),
    (
        lambda d: d["constraints"].update(existing={"g9.huge": 1}),
        "constraints.existing.g9.huge",
        ("unknown instance type",),
        (),
    ),
]


@pytest.mark.parametrize("change, field, words, absent", HINTS, ids=[h[1] for h in HINTS])
def test_hints_name_the_field_and_the_right_place(
    make_resnet110, tmp_path, capsys, change, field, words, absent
) -> None:
    """Each slip is one line naming the field and where the value belongs, from Python
    (``from_dict``) and from a file (the schema's check comes first there)."""
    import json

    from conftest import one_error

    data = spot_dict(make_resnet110)
    change(data)
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.SpotProblem.from_dict(data)
    check_error(excinfo, field, *words)
    path = tmp_path / "slip.json"
    path.write_text(json.dumps(data))
    one_error(capsys, ["solve", str(path)], f"dnnprov: error: {field}: ", *words)
    for word in absent:
        assert word not in str(excinfo.value)


def test_serverless_deadline_hint(make_resnet50, tmp_path, capsys) -> None:
    """A serverless ``slo.deadline_s`` suggests ``time_s`` too; ``constraints.quotas`` of a
    serverless problem gets no per-type-quota hint (it has no instance types)."""
    import json

    from conftest import one_error

    data = make_resnet50().to_dict()
    renamed = edit(data, ("slo", "time_s"), rename="deadline_s")
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.ServerlessProblem.from_dict(renamed)
    check_error(excinfo, "slo.deadline_s", "did you mean 'time_s'?")
    quotas = edit(data, ("constraints", "quotas"), {})
    with pytest.raises(InvalidInputError) as excinfo:
        dnnprov.ServerlessProblem.from_dict(quotas)
    assert "instance_types" not in str(excinfo.value)
    path = tmp_path / "slip.json"
    path.write_text(json.dumps(renamed))
    one_error(capsys, ["solve", str(path)], "slo.deadline_s: unknown field; did you mean 'time_s'?")
