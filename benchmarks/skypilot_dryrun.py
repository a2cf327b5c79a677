"""Run SkyPilot's own `sky launch --dryrun` on dnnprov's SkyPilot exports, offline.

SkyPilot does not fit the test extra (about 50 dependencies, pins of its own), so it runs
from its own virtual environment::

    python3 -m venv .venv-sky && .venv-sky/bin/pip install "skypilot[aws]==0.14.1"
    .venv/bin/python benchmarks/skypilot_dryrun.py [--sky .venv-sky/bin/sky]

What it does, with no network but loopback:

- a temporary HOME holds SkyPilot's AWS catalog: the extract of
  tests/cloud/fixtures/skypilot-aws-vms-extract.csv (skypilot-org/skypilot-catalog,
  catalogs/v8/aws/vms.csv) at ~/.sky/catalogs/v8/aws/vms.csv, where SkyPilot reads it;
- AWS is "enabled" against a local moto server (AWS_ENDPOINT_URL; `sky check aws`), and
  every launch passes one of moto's AMIs (--image-id): the stored image catalog predates
  the CUDA 13 image tag SkyPilot 0.14.1 asks for;
- plans whose types are in the catalog (spotDNN Table I with its types renamed to catalog
  types of the same GPU count) are solved, exported (spot only, mixed markets, managed spot,
  an instance name SkyPilot's rules refuse as is, spot pools in several zones) and every
  task file goes through
  `sky launch --dryrun -y -c NAME FILE --env DNNPROV_PS_ADDR=10.0.0.1`;
- a control: a task of g3.8xlarge (spotDNN Table I's type, not in SkyPilot's catalog) must
  be refused by SkyPilot, as dnnprov's own check refuses it.

Prints one line per run; exits 1 on any failure, 2 when SkyPilot is not installed (a skip).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dnnprov
from dnnprov.cloud.export import ExportOptions, SkyPilotOptions, export_files, plan_document
from dnnprov.io.catalogs.catalog import Catalog, CatalogEntry
from dnnprov.io.instances import problem_from_dict, read_instance

ROOT = Path(__file__).resolve().parents[1]
CATALOG_EXTRACT = ROOT / "tests" / "cloud" / "fixtures" / "skypilot-aws-vms-extract.csv"
MOTO_AMI = "ami-12c6146b"  # one of the AMIs moto serves by default
RENAME = {
    "p3.2xlarge": "g5.2xlarge",
    "g4dn.4xlarge": "g6.xlarge",
    "g3.8xlarge": "g6e.12xlarge",
    "g3.16xlarge": "g5.48xlarge",
}
HARDWARE = Catalog(
    name="aws-us-east-1",
    region="us-east-1",
    snapshot="2026-11-01T00:00:00Z",
    instance_types=(
        CatalogEntry(name="g5.2xlarge", gpus=1, vcpus=8, memory_gb=32.0),
        CatalogEntry(name="g6.xlarge", gpus=1, vcpus=4, memory_gb=16.0),
        CatalogEntry(name="g5.48xlarge", gpus=8, vcpus=192, memory_gb=768.0),
        CatalogEntry(name="g6e.12xlarge", gpus=4, vcpus=48, memory_gb=384.0),
        CatalogEntry(name="m6i.12xlarge", gpus=0, vcpus=48, memory_gb=192.0),
    ),
)


def plans() -> dict[str, tuple[object, SkyPilotOptions]]:
    """Name -> (plan document, export options) of the exports to dry-run."""
    sky = SkyPilotOptions(catalog=CATALOG_EXTRACT)
    out = {}
    for label, name, markets, options in (
        ("spot", "resnet110-spot", ["spot"], sky),
        ("mixed", "resnet110-mixed", ["spot", "on-demand"], sky),
        ("managed", "resnet110-managed", ["spot"], SkyPilotOptions(catalog=CATALOG_EXTRACT, managed_spot=True)),
        ("odd-name", "2025 ResNet-110 -- run #3", ["spot", "on-demand"], sky),
        ("zones", "resnet110-zones", ["spot"], sky),
    ):
        d = read_instance("embedded:spot/paper-table1.json").to_dict()
        d["instance_types"] = {
            RENAME[k]: {**v, "on_demand_quota": 3} for k, v in d["instance_types"].items() if k in RENAME
        }
        if label == "zones":  # pools (issue 18): any_of over two zones, and a split over two that hold 2 and 4
            d["instance_types"]["g6.xlarge"]["zones"] = [
                {"zone": "us-east-1b"},
                {"zone": "us-east-1d"},
                {"zone": "us-west-2a"},
            ]
            d["instance_types"]["g6e.12xlarge"]["zones"] = [
                {"zone": "us-east-1a", "capacity": 2},
                {"zone": "us-east-1c", "capacity": 4},
            ]
        d["name"], d["platform"]["ps_type"], d["constraints"]["markets"] = name, "m6i.12xlarge", markets
        problem = problem_from_dict(d)
        result = dnnprov.solve(problem, "milp")
        if result.plan is None:
            raise SystemExit(f"{label}: no plan ({result.status.value})")
        out[label] = (plan_document(result, problem, HARDWARE), options)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sky_run(sky: str, env: dict[str, str], folder: Path, args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sky, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=600)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sky", default=str(ROOT / ".venv-sky" / "bin" / "sky"), help="SkyPilot's sky command")
    args = parser.parse_args()
    if not Path(args.sky).exists():
        print(
            f"SKIP: no SkyPilot at {args.sky}: python3 -m venv .venv-sky && "
            ".venv-sky/bin/pip install 'skypilot[aws]==0.14.1'"
        )
        return 2
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        catalog = home / ".sky" / "catalogs" / "v8" / "aws" / "vms.csv"
        catalog.parent.mkdir(parents=True)
        catalog.write_text(
            "".join(line for line in CATALOG_EXTRACT.read_text().splitlines(keepends=True) if not line.startswith("#"))
        )
        port = free_port()
        moto = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
        }
        try:
            time.sleep(2)
            check = sky_run(args.sky, env, Path(tmp), ["check", "aws"])
            if "AWS" not in check.stdout or "disabled" in check.stdout:
                print(f"FAIL: sky check aws did not enable AWS against moto:\n{check.stdout[-800:]}")
                return 1
            for label, (doc, options) in plans().items():
                folder = Path(tmp) / label
                folder.mkdir()
                for name, text in export_files(doc, "skypilot", ExportOptions(skypilot=options)).items():
                    (folder / name).write_text(text)
                for task in sorted(folder.glob("*.yaml")):
                    done = sky_run(
                        args.sky,
                        env,
                        folder,
                        [
                            "launch",
                            "--dryrun",
                            "-y",
                            "--image-id",
                            MOTO_AMI,
                            "-c",
                            task.stem,
                            task.name,
                            "--env",
                            "DNNPROV_PS_ADDR=10.0.0.1",
                        ],
                    )
                    ok = done.returncode == 0 and "Dryrun finished." in done.stdout + done.stderr
                    failures += not ok
                    print(
                        f"{'ok  ' if ok else 'FAIL'} {label:9} {task.name}"
                        + ("" if ok else f"\n{(done.stdout + done.stderr)[-1500:]}")
                    )
            control = Path(tmp) / "control"
            control.mkdir()
            (control / "g3.yaml").write_text("resources:\n  infra: aws/us-east-1\n  instance_type: g3.8xlarge\n")
            done = sky_run(
                args.sky, env, control, ["launch", "--dryrun", "-y", "--image-id", MOTO_AMI, "-c", "g3", "g3.yaml"]
            )
            refused = done.returncode != 0 and "g3.8xlarge" in done.stdout + done.stderr
            failures += not refused
            print(
                f"{'ok  ' if refused else 'FAIL'} control   g3.8xlarge refused by SkyPilot: "
                f"{[line for line in (done.stdout + done.stderr).splitlines() if 'g3.8xlarge' in line][-1:]}"
            )
        finally:
            sky_run(args.sky, env, Path(tmp), ["api", "stop"])
            moto.terminate()
            moto.wait(timeout=30)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
