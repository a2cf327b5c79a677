"""POST /v1/export with the SkyPilot options of `dnnprov export --to skypilot`: the same files as the CLI writes.

The real server on loopback (a subprocess) and the real CLI (another subprocess) export the
same plan with the same options; their files must be equal, byte for byte. Bad options get
one 422 naming the field, as the CLI's one error line does.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import dnnprov
from dnnprov.cloud.export import plan_document
from dnnprov.io.instances import problem_from_dict, read_instance

httpx = pytest.importorskip("httpx", reason="httpx is in the test extra")
pytest.importorskip("fastapi", reason="the service extra (fastapi, uvicorn) is in the test extra")

from service_helpers import DNNPROV, server  # noqa: E402

SKY_CATALOG = Path(__file__).parents[1] / "cloud" / "fixtures" / "skypilot-aws-vms-extract.csv"
#: spotDNN Table I's types renamed to types SkyPilot's catalog (the fixture extract) has, same GPUs per node
RENAME = {
    "p3.2xlarge": "g5.2xlarge",
    "g4dn.4xlarge": "g6.xlarge",
    "g3.8xlarge": "g6e.12xlarge",
    "g3.16xlarge": "g5.48xlarge",
}


def _plan(tmp: Path, zones: bool) -> dict:
    """The plan document of Table I on launchable types, with its instance and no catalog (so no region).

    With ``zones``, g6e.12xlarge has two small us-east-1 pools (split clusters) and g6.xlarge two
    that each hold it (``any_of``)."""
    d = read_instance("embedded:spot/paper-table1.json").to_dict()
    d["instance_types"] = {
        RENAME[k]: {**v, "on_demand_quota": 3} for k, v in d["instance_types"].items() if k in RENAME
    }
    d["platform"]["ps_type"] = "m6i.12xlarge"
    d["constraints"]["markets"] = ["spot", "on-demand"]
    if zones:
        d["instance_types"]["g6e.12xlarge"]["zones"] = [
            {"zone": "us-east-1a", "capacity": 2},
            {"zone": "us-east-1c", "capacity": 4},
        ]
        d["instance_types"]["g6.xlarge"]["zones"] = [{"zone": "us-east-1b"}, {"zone": "us-east-1d"}]
    problem = problem_from_dict(d)
    doc = plan_document(dnnprov.solve(problem, "milp"), problem).to_dict()
    (tmp / f"plan-{zones}.json").write_text(json.dumps(doc))
    return doc


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Path]]:
    tmp = tmp_path_factory.mktemp("export")
    with server(tmp, "--workers", "1") as (url, _, _log):
        with httpx.Client(base_url=url, timeout=60) as client:
            yield client, tmp


def _cli_files(plan: Path, out: Path, *options: str) -> dict[str, str]:
    run = subprocess.run(
        [DNNPROV, "export", str(plan), "--to", "skypilot", "--out", str(out), *options],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    return {p.name: p.read_text() for p in sorted(out.iterdir())}


@pytest.mark.parametrize("zones", [False, True], ids=["region", "pools"])
def test_service_skypilot_files_equal_the_cli_files(api, zones: bool) -> None:
    """region, catalog text, managed spot and autostop: the service answers the CLI's files exactly."""
    client, tmp = api
    doc = _plan(tmp, zones)
    plan = tmp / f"plan-{zones}.json"
    cases = [
        (
            {"region": "us-east-1", "skypilot_catalog": SKY_CATALOG.read_text()},
            ["--region", "us-east-1", "--skypilot-catalog", str(SKY_CATALOG)],
        ),
        (
            {"region": "us-east-1", "no_catalog_check": True, "managed_spot": True, "autostop": 45},
            ["--region", "us-east-1", "--no-catalog-check", "--managed-spot", "--autostop", "45"],
        ),
    ]
    if zones:  # the pools' one region is the plan's: no region option needed
        cases.append(({"skypilot_catalog": SKY_CATALOG.read_text()}, ["--skypilot-catalog", str(SKY_CATALOG)]))
    for i, (options, flags) in enumerate(cases):
        answer = client.post("/v1/export", json={"plan": doc, "target": "skypilot", "options": options})
        assert answer.status_code == 200, answer.text
        files = answer.json()["files"]
        assert files == _cli_files(plan, tmp / f"cli-{zones}-{i}", *flags)
        assert "launch.sh" in files and len(files) >= 4
        infra = json.dumps(files)
        assert "aws/us-east-1" in infra and ("any_of" in infra) == zones
        if options.get("managed_spot"):
            assert "sky jobs launch" in files["launch.sh"] and "idle_minutes: 45" in infra


def test_bad_skypilot_options_name_the_field(api) -> None:
    """Each bad option: one 422 naming it; a type the given catalog lacks: the CLI's refusal."""
    client, tmp = api
    doc = _plan(tmp, False)
    for options, field in (
        ({"region": "Mars-1"}, "options.region"),
        ({"region": 7}, "options.region"),
        ({"autostop": 0}, "options.autostop"),
        ({"autostop": True}, "options.autostop"),
        ({"managed_spot": "yes"}, "options.managed_spot"),
        ({"no_catalog_check": 1}, "options.no_catalog_check"),
        ({"skypilot_catalog": "no,csv\n1,2"}, "options.skypilot_catalog"),
        ({"skypilot_catalog": "InstanceType,Region\n" + "x" * 200_000 + ",r"}, "options.skypilot_catalog"),
        ({"spot": True}, "spot"),
    ):
        answer = client.post("/v1/export", json={"plan": doc, "target": "skypilot", "options": options})
        assert answer.status_code == 422, (options, answer.text)
        assert answer.json()["error"]["field"] == field, (options, answer.text)
    no_g6e = "\n".join(line for line in SKY_CATALOG.read_text().splitlines() if not line.startswith("g6e.12xlarge"))
    answer = client.post(
        "/v1/export",
        json={"plan": doc, "target": "skypilot", "options": {"region": "us-east-1", "skypilot_catalog": no_g6e}},
    )
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["field"] == "result.plan.counts.g6e.12xlarge"
    assert error["message"].startswith(
        "SkyPilot cannot launch g6e.12xlarge in us-east-1: its catalog options.skypilot_catalog has no row of it"
    )
