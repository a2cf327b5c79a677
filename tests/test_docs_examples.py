"""Every example in docs/ and README.md runs here, and what it prints matches what the page shows.

Each fenced block of every page is either run by one of the tests below (``RUN``, with
the kind of check) or listed in ``NOT_RUN`` with the reason (what only a run of minutes on
a given machine prints). A synopsis with placeholders is checked against the parser of
its command (or the benchmark script's ``--help``); a benchmark's printed figures are
produced by the benchmark in a short mode where it has one (a run of minutes is not pasted as
a block: its figures are tables, with the command that made them). A new block fails
:func:`test_every_block_is_run_or_has_a_reason` until it is given one or the other.
Conventions the pages follow:

- ``console`` blocks are transcripts: ``$ dnnprov ...`` lines and the output after them,
  ``...`` standing for left-out text (as doctest's ELLIPSIS);
- a ``python`` block followed by "It prints" and a ``text`` block must print that text;
- instance files in ``json`` blocks are valid, and where the prose after one says
  "`dnnprov solve` finds/proves `PLAN` ...: T s and $C", the solve gives exactly that.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import doctest
import http.server
import io
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import benchmark_module

import dnnprov
from dnnprov.errors import InvalidInputError
from dnnprov.io.instances import problem_from_dict

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
SHARED_DATA = REPO.parent / "shared" / "data"
TABLE1 = REPO / "data/instances/spot/paper-table1.json"


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: where it is, its language, text, and the prose after it."""

    page: str
    line: int
    lang: str
    body: str
    after: str

    @property
    def key(self) -> tuple[str, str]:
        """(page, first non-blank line): stable when blocks are added or moved."""
        return self.page, next((line for line in self.body.splitlines() if line.strip()), "")


README = REPO / "README.md"


def blocks() -> list[Block]:
    """Every fenced block of every page in docs/ and of README.md, in page order."""
    found = []
    for page in [*sorted(DOCS.glob("*.md")), README]:
        text = page.read_text()
        matches = list(re.finditer(r"^( *)```(\w*)\n(.*?)^\1```", text, re.DOTALL | re.MULTILINE))
        for i, m in enumerate(matches):
            end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
            body = "".join(line[len(m.group(1)) :] + "\n" for line in m.group(3).splitlines())
            found.append(Block(page.name, text[: m.start()].count("\n") + 1, m.group(2), body, text[m.end() : end]))
    return found


BLOCKS = blocks()

#: Blocks run by the tests below: key -> which test.
RUN: dict[tuple[str, str], str] = {
    (
        "cloud.md",
        "dnnprov catalog import --region all --out all.json     # 682 spot-priced pools, 55 GPU types, 27 regions",
    ): "synopsis",
    (
        "training.md",
        "python benchmarks/real_training.py [--out DIR] [--quick] [--speed X] [--no-link] [--lr LR] [--json FILE]",
    ): "synopsis",
    ("batch.md", "from dnnprov.batch.runner import run_batch, summarize, read_results"): "python",
    ("batch.md", "           instances  solved  optimal  failed"): "output",
    (
        "batch.md",
        "$ dnnprov batch data/instances --methods milp,heuristic --out results/paper.csv --no-progress",
    ): "console",
    ("batch.md", "$ dnnprov report results/paper.csv --out results/report"): "console",
    ("batch.md", "from dnnprov.batch.reports.report import write_report"): "python",
    ("batch.md", "## Per method and family"): "output",
    ("benchmarks-sets.md", "from dnnprov.benchsets.generate import generate, build_set, read_instance_lines"): "python",
    (
        "catalog-format.md",
        "from dnnprov.io.catalogs.catalog import build_spot_problem, embedded_path, load_catalog, load_spot_profile",
    ): "python",
    ("catalog-format.md", "spot [spot, model paper] by milp: optimal"): "output",
    ("catalog-format.md", "{"): "catalog-json",
    ("cli.md", "$ dnnprov solve embedded:spot/paper-table1.json --json"): "console",
    ("cli.md", "$ dnnprov show embedded:spot/paper-table1.json"): "console",
    ("cli.md", "$ dnnprov show embedded:../../etc/passwd"): "console",
    ("cli.md", "$ dnnprov solve embedded:spot/paper-table6-vgg19-4.6-2700.json --domain-cost"): "console",
    ("cli.md", "$ dnnprov pareto embedded:spot/paper-table1.json --deadlines 2400:2600"): "console",
    (
        "cli.md",
        "$ dnnprov build --catalog aws-table3-2023-01 --profile spot/resnet110-paper --target-loss 0.8 --deadline 4000 --quota g4dn.4xlarge=10 --quota g3.8xlarge=10 --ps-price-per-h 0.192 --out resnet110-4000.json",
    ): "console",
    (
        "cloud.md",
        "dnnprov catalog import --region us-east-1            # reads <repo>/../shared/data",
    ): "catalog-import",
    ("control.md", "import boto3"): "python",
    ("control.md", "3 of 5 granted"): "output",
    ("formulations.md", "import pyomo.environ as pyo"): "python",
    ("formulations.md", "from dnnprov.formulations import side"): "python",
    ("formulations.md", "optimal 5 x g3.8xlarge, 3 x g3.16xlarge; 1 PS 5.787788"): "output",
    ("solvers.md", "import dnnprov"): "python",
    ("solvers.md", "limit 178.085 True"): "output",
    ("solvers.md", "infeasible"): "output",
    ("solvers.md", "import dataclasses"): "python",
    ("solvers.md", "optimal 37 True {'exact_solves': 38}"): "output",
    ("formulations.md", "from dnnprov.formulations.serverless import create_serverless_model"): "python",
    ("formulations.md", "from dnnprov.model_solve import solve_model_scip"): "python",
    ("instance-format.md", "import dnnprov"): "python",
    ("instance-format.md", "{"): "instance-json",
    (
        "instance-format.md",
        "slo.time_ms: unknown field; did you mean 'time_s'? (units are part of field names; see docs/instance-format.md)",
    ): "errors",
    (
        "instance-format.md",
        "slo.loss: 0.4 is not above workload.gamma_5 = 0.5, the loss the model converges to; the SLO is unreachable (eq. 3)",
    ): "errors",
    ("joint.md", "import dnnprov"): "python",
    ("profiler.md", "$ dnnprov predict embedded:spot/paper-table1.json --counts g3.8xlarge=5,g3.16xlarge=3"): "console",
    ("profiler.md", "$ dnnprov catalog import --out today.json"): "console",
    (
        "service.md",
        "$ dnnprov serve --port 8642 --db jobs.sqlite --workers 2 --token-file token > /dev/null 2>> serve.log & echo $! > serve.pid; until curl -sf localhost:8642/readyz > /dev/null; do sleep 0.5; done",
    ): "service-session",
    (
        "service.md",
        '$ curl -s -H "$AUTH" localhost:8642/v1/jobs --json \'{"instance": "embedded:spot/paper-table5-resnet110-0.8-2400.json"}\' | tee job.json',
    ): "service-session",
    (
        "service.md",
        "$ curl -s -H \"$AUTH\" localhost:8642/metrics | grep -E '^dnnprov_(solves_total|queue_depth|jobs)'",
    ): "service-session",
    (
        "service.md",
        '$ jq \'.model = "paper" | .name = "resnet110-p3" | .workload.loss_variant = "cc" | .workload.gamma_4 = 1 | .slo.time_s = 4000 | .platform.ps_price_per_h = 0.192 | .instance_types |= {"p3.2xlarge": (.["p3.2xlarge"] | .quota = 8)}\' data/instances/spot/paper-table5-resnet110-0.8-2400.json > p3.json',
    ): "service-session",
    (
        "service.md",
        '$ curl -s -H "$AUTH" localhost:8642/v1/replan --json "{\\"instance\\": \\"embedded:spot/paper-table1.json\\", \\"plan\\": $(cat plan.json), \\"revoked\\": {\\"g3.8xlarge\\": 5}, \\"elapsed_s\\": 1788, \\"loss_reached\\": 0.92}" | jq -c \'{format, status: .result.status, plan: .result.plan, cost: .result.cost, new: .result.details.new_instances}\'',
    ): "service-session",
    ("profiler.md", "from dnnprov import predict, read_instance, embedded_instance"): "python",
    (
        "sweep.md",
        "$ dnnprov sweep embedded:spot/paper-table1.json --deadlines 2300:3600:27 --out sweep --no-progress",
    ): "console",
    ("benchmarks-sets.md", "dnnprov generate SET [--out DIR] [--seed N] [--count N] [--shared-data DIR]"): "synopsis",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/scale_ladder.py                 # full ladder, ~4 min on a quiet 2-core box",
    ): "synopsis",
    ("benchmarks.md", ".venv/bin/python benchmarks/scale_ladder.py --jsonl /tmp/ladder_final.jsonl"): "synopsis",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/scale_ladder.py --time-limit 60 --jsonl /tmp/ladder_issue10.jsonl   # every rung and the targets table, ~5 min",
    ): "synopsis",
    ("benchmarks.md", ".venv/bin/python benchmarks/time_limits.py"): "synopsis",
    ("benchmarks.md", ".venv/bin/python benchmarks/service_load.py --workers 1"): "synopsis",
    ("benchmarks.md", ".venv/bin/python benchmarks/service_admission.py"): "synopsis",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/fuzz_certificates.py --count 10000 --shrink-per-kind 1 --out /tmp/fuzz-findings",
    ): "synopsis",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/fuzz_certificates.py --cell-milps --count 3400 --seed 30000 --time-limit 5 --shrink-per-kind 0",
    ): "synopsis",
    (
        "benchmarks.md",
        "F=price-magnitudes,speed-magnitudes,bandwidth-magnitudes,all-magnitudes,magnitudes-mixed,serverless-magnitudes",
    ): "synopsis",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/domain_extrapolation.py                      # the target (exit 0: met)",
    ): "synopsis",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/fuzz_objectives.py                       # 1,230 instances (30 per family), ~27 min wall",
    ): "synopsis",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/fuzz_side.py --count 1024       # binaries in the side model against brute force",
    ): "synopsis",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/kill_controller.py --runs 20 --kills 5 --seed 28 --speed 20 --policy failover --json /tmp/kill.json",
    ): "synopsis",
    ("benchmarks.md", "python benchmarks/twin_agreement.py --windows 20 --seed 0 --replay-only"): "synopsis",
    ("cloud.md", "dnnprov catalog fetch --region us-east-1 --types g4dn.4xlarge,g5.xlarge,p3.2xlarge"): "synopsis",
    (
        "cloud.md",
        "dnnprov export PLAN --to ec2-run-instances --image-id ami-... [--subnet-id S] [--key-name K] [--run-id R]",
    ): "synopsis",
    ("cloud.md", "dnnprov apply PLAN --dry-run --image-id ami-...            # DryRun=True requests only"): "synopsis",
    (
        "cloud.md",
        "dnnprov replan INSTANCE --plan PLAN --revoked g3.8xlarge=5 --elapsed 1788 --loss-reached 0.92 \\",
    ): "synopsis",
    (
        "control.md",
        "dnnprov run INSTANCE --plan PLAN [--policy P] [--endpoint-url URL] [--region R] [--state DIR] [--json]",
    ): "synopsis",
    ("control.md", "dnnprov simulate INSTANCE --plan PLAN --trace TYPE=FILE... --policy P"): "synopsis",
    (
        "control.md",
        "dnnprov twin --trace TYPE=FILE [--trace TYPE=FILE ...] --offset TICKS [--speed X | --stepped]",
    ): "synopsis",
    (
        "control.md",
        "python benchmarks/twin_agreement.py [--windows 20] [--seed 0] [--policies none,fallback,failover,uniform-progress,mpc]",
    ): "synopsis",
    (
        "control.md",
        "dnnprov run SERVERLESS-INSTANCE --plan PLAN [--lambda-endpoint-url URL] [--endpoint-url URL] [--region R]",
    ): "synopsis",
    ("control.md", "dnnprov lambda-twin INSTANCE [--speed X] [--port P] [--region R] [--function NAME]"): "synopsis",
    ("profiler.md", "dnnprov profile fit-loss FILE... [--variant cc|no-cc] [--batch-size B] [--workers K]"): "synopsis",
    ("profiler.md", "dnnprov profile fit-timing FILE [--param-size-mb S] [--ps-bandwidth-mb-s B]"): "synopsis",
    (
        "profiler.md",
        "dnnprov profile estimate --catalog C --profile P --out FILE [--types T,...] [--estimate-at point|fast|slow] [--json]",
    ): "synopsis",
    (
        "profiler.md",
        "dnnprov predict INSTANCE --counts TYPE=N,... [--ps S] [--json]                          # spot",
    ): "synopsis",
    ("reproduction.md", "python benchmarks/trace_experiment.py --count 100000 --workers 2"): "synopsis",
    (
        "revocation.md",
        "dnnprov risk fit TRACE... [--pool] [--json]        # one model per trace, or pooled",
    ): "synopsis",
    (
        "revocation.md",
        "dnnprov risk solve INSTANCE --robust K [--no-replacement] [--takeover-overhead 126] [--max-plans N] [--json]",
    ): "synopsis",
    (
        "revocation.md",
        "dnnprov risk solve INSTANCE --risk [--deadline-probability Q] [--takeover-overhead 126]",
    ): "synopsis",
    ("revocation.md", "dnnprov simulate INSTANCE --plan PLAN --trace TYPE=FILE [--trace TYPE=FILE ...]"): "synopsis",
    (
        "revocation.md",
        "python benchmarks/revocation_replay.py --runs 1000                 # set traced, (0.8, 1800 s)",
    ): "synopsis",
    ("service.md", ".venv/bin/pip install -e '.[service]'"): "synopsis",
    (
        "solvers.md",
        ".venv/bin/python benchmarks/fuzz_certificates.py --count 10000 --out /tmp/fuzz-findings",
    ): "synopsis",
    ("sweep.md", "dnnprov sweep INSTANCE --deadlines START:STOP:N [--losses L1,L2,...] [--time-limit S]"): "synopsis",
    (
        "training.md",
        "dnnprov run INSTANCE --plan PLAN --policy P --cloud local[:CONFIG.json] [--poll S] [--join S] [--horizon H] [--json]",
    ): "synopsis",
    ("control.md", "import numpy as np"): "python",
    ("control.md", "import dataclasses"): "python",
    ("control.md", "None running 135.0 11"): "output",
    ("control.md", "met 2 609.35 0.209214"): "output",
    ("profiler.md", "$ dnnprov profile fit-loss synth.csv"): "console",
    (
        "profiler.md",
        "$ dnnprov profile fit-loss ../shared/data/training-logs/whisper-large-v2-ja-trainer_state.json --batch-size 50",
    ): "console",
    ("solvers.md", "spot [spot, model paper] by milp: infeasible"): "cli-text",
    (
        "instance-format.md",
        "dnnprov: warning: instance_types.p3.2xlarge.spot_price_per_h: 91.8 $/h on 1 GPU is $91.8 per GPU-hour, above the plausible $20 per GPU-hour (real AWS GPU offers: $0.068 spot to $17.80 on demand): a price in cents? (a warning: used as given)",
    ): "warning",
    (
        "cloud.md",
        '{"format": "dnnprov/plan", "version": 1, "result": {...}, "instance": {...}, "catalog": {...}}',
    ): "shape",
    (
        "service.md",
        '{"kind": "run", "instance", "plan", "endpoint_url", "policy": "failover", "model", "region",',
    ): "shape",
    ("control.md", '{"run": "RUN", "time_s": 812.4, "loss": 1.93, "step": 1200, "finished_s": null}'): "report",
    ("revocation.md", '"instance_types": {'): "fragment",
    ("profiler.md", "run,workers,batch_wa,cc,step,loss"): "csv",
    ("control.md", "T=../shared/data/spot-traces/availability/16-node/aws-08-27-2023"): "server",
    (
        "control.md",
        '{"url": "http://127.0.0.1:41731", "clock": {"t": 0.04, "now": "2023-08-27T00:00:00.038Z", "mode": "accelerated", "speed": 60.0}, "pools": [{"name": "p3.2xlarge@us-west-2a", "type": "p3.2xlarge", "zone": "us-west-2a", "trace": "...", "offset": 100, "price_per_h": 0.0, "capacity": 0, "live": 0, "notified": 0}, ...]}',
    ): "ready-line",
    (
        "benchmarks.md",
        "Table I whole front: 37 points (37 proven), 38 exact solves, equal to brute force; CPU s over 5 runs: min 0.213, median 0.220, max 0.285 (target: at most 1)",
    ): "front-line",
    ("solvers.md", "dnnprov milp: large-003 (spot, model paper, loss cc)"): "log",
    ("architecture.md", "                       cli/        service/                      front ends"): "drawing",
    ("benchmarks.md", "1024 instances, 0 wrong or given up, 322.3 CPU s"): "fuzz-side-line",
    ("cloud.md", "import threading"): "watcher",
    ("training.md", '{"speed": 100, "offset": 40, "workdir": "runs/local",'): "local-config",
    ("training.md", "from dnnprov.training.cluster import run_cluster"): "training-script",
    # run by tests/training/test_real_training_docs.py (the long runs' figures are tables)
    ("reproduction.md", "$ python benchmarks/real_training.py --quick"): "benchmark-quick",
    ("training.md", "$ dnnprov profile fit-loss runs/2v100+1k80 runs/4v100 runs/3v100+4k80 --json"): "training-fit",
    (
        "README.md",
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/dnnprov demo",
    ): "readme-setup",
    (
        "README.md",
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/ruff check && .venv/bin/ruff format --check && .venv/bin/python .ci/typecheck.py && .venv/bin/pytest",
    ): "ci-command",
    (
        "README.md",
        ".venv/bin/dnnprov list                                              # embedded instances, catalogs, profiles",
    ): "readme-use",
    ("README.md", "import dnnprov"): "python",
    (
        "README.md",
        "dnnprov/       -> dnnprov               the core package, in rooms by role (docs/architecture.md):",
    ): "layout",
}

#: Blocks no test runs, and why (none: every block is run or checked).
NOT_RUN: dict[tuple[str, str], str] = {}

#: Examples that fail as the page has them (pages of other parts of the project): each
#: must still raise; when the page is fixed, the test says so and the entry goes.
KNOWN_BROKEN: dict[tuple[str, str], str] = {}

#: Placeholders some pages' Python fragments use, defined before they run.
PRELUDE = {
    "joint.md": "import dnnprov\npaths = [dnnprov.embedded_instance('spot/paper-table1.json'), "
    "dnnprov.embedded_instance('serverless/paper-table3-resnet50.json')]\ni = 0\n",
}


def test_every_block_is_run_or_has_a_reason():
    """Each block of docs/ is run by a test here or named with the reason it is not."""
    keys = [b.key for b in BLOCKS]
    unclassified = [f"{b.page}:{b.line}" for b in BLOCKS if b.key not in RUN and b.key not in NOT_RUN]
    assert not unclassified, (
        f"blocks neither run nor excused: {unclassified}; add each to RUN (run by a test "
        "here) or NOT_RUN (with the reason) in tests/test_docs_examples.py"
    )
    stale = [k for k in list(RUN) + list(NOT_RUN) if k not in keys]
    assert not stale, f"no such block any more: {stale}"
    assert not set(RUN) & set(NOT_RUN)


def test_transcripts_are_fenced():
    """No `$ dnnprov` transcript hides in an indented block, where no test would see it."""
    for page in [*DOCS.glob("*.md"), README]:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            assert not re.match(r"^ {4,}\$ ", line), f"{page.name}:{n}: put the transcript in a console block"


def _of(kind: str, page: str | None = None) -> list[Block]:
    return [b for b in BLOCKS if RUN.get(b.key) == kind and (page is None or b.page == page)]


def _matches(want: str, got: str) -> bool:
    return doctest.OutputChecker().check_output(want, got, doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """A scratch folder to run examples in, with the repository's data/ linked into it and
    ``../shared`` beside it (the real data, when the repository has it beside itself)."""
    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / "data").symlink_to(REPO / "data")
    if SHARED_DATA.is_dir():
        (tmp_path / "shared").symlink_to(SHARED_DATA.parent)
    monkeypatch.chdir(folder)
    return folder


# ------------------------------------------------------------------ console transcripts
def _transcript(block: Block) -> list[tuple[str, str]]:
    """(command, expected output) pairs of a console block."""
    pairs: list[tuple[str, str]] = []
    for line in block.body.splitlines():
        if line.startswith("$ "):
            pairs.append((line[2:], ""))
        elif pairs and not pairs[-1][1] and pairs[-1][0].endswith("\\"):
            pairs[-1] = (pairs[-1][0][:-1] + " " + line.strip(), "")  # a command continued on the next line
        else:
            command, out = pairs[-1]
            pairs[-1] = (command, out + line + "\n")
    return pairs


@pytest.mark.parametrize("page", sorted({b.page for b in _of("console")}))
def test_console_transcripts(page, workdir):
    """Every `$ dnnprov ...` of a page, run in order in one folder, prints what the page shows
    (a block reading ../shared/data is skipped, with the reason, where that folder is absent)."""
    skipped = []
    _setup(page, workdir)
    for block in _of("console", page):
        if "../shared/data" in block.body and not (SHARED_DATA / "MANIFEST.md").is_file():
            skipped.append(f"{page}:{block.line}")
            continue
        for command, want in _transcript(block):
            argv = shlex.split(command)
            assert argv[0] == "dnnprov"
            run = subprocess.run(
                [sys.executable, "-m", "dnnprov", *argv[1:]],
                check=False,
                capture_output=True,
                text=True,
                timeout=120,
                cwd=workdir,
            )
            got = run.stdout + run.stderr
            shown = _matches(want, got) or _matches(want, run.stderr + run.stdout)  # warnings first, as on a terminal
            assert shown, f"{page}:{block.line}: {command}\n--- page:\n{want}--- got:\n{got}"
    if skipped:
        pytest.skip(f"real data folder {SHARED_DATA} is absent: {', '.join(skipped)} not run")


# ------------------------------------------------------------------ service sessions
_MARK = "__dnnprov_docs_mark__"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _shell_session(commands: list[str], folder: Path, port: int) -> list[str]:
    """Run ``commands`` in one bash (variables carry over, as in a terminal) in ``folder``,
    with port 8642 replaced by ``port``, ``dnnprov`` on PATH and ``$AUTH`` set; the output
    of each command (stdout and stderr)."""
    import os

    script = ["exec 2>&1", 'AUTH="Authorization: Bearer $(cat token)"']
    for command in commands:
        script += [command.replace("8642", str(port)), f"printf '\\n{_MARK}\\n'"]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    try:
        run = subprocess.run(
            ["bash", "-c", "\n".join(script)],
            check=False,
            capture_output=True,
            text=True,
            timeout=600,
            cwd=folder,
            env=env,
        )
    finally:
        pid = folder / "serve.pid"
        if pid.is_file():
            subprocess.run(["kill", pid.read_text().strip()], check=False, capture_output=True)
    text = re.sub(r"(?m)^bash: line \d+: +\d+ Killed .*\n", "", run.stdout)  # bash's notice of a killed job
    outputs = text.replace(str(port), "8642").split(f"\n{_MARK}\n")
    return outputs[: len(commands)]


def _service_session(blocks: list[Block], folder: Path) -> list[str]:
    """Run service.md session blocks in one shell, each command printing what the page shows;
    the outputs, in order."""
    if shutil.which("curl") is None or shutil.which("jq") is None:
        pytest.skip("the service sessions need curl and jq")
    pytest.importorskip("fastapi", reason="the service needs the service extra")
    (folder / "token").write_text("docs-example-token\n")
    pairs = [(block, command, want) for block in blocks for command, want in _transcript(block)]
    outputs = _shell_session([command for _, command, _ in pairs], folder, _free_port())
    assert len(outputs) == len(pairs), outputs[-1:]
    for (block, command, want), got in zip(pairs, outputs):
        assert _matches(want, got), f"{block.page}:{block.line}: {command}\n--- page:\n{want}--- got:\n{got}"
    return outputs


def test_service_main_session(workdir):
    """service.md's first session (health, token, solves, bad bodies, jobs, re-planning, prediction,
    joint solve, exports, sweep, metrics, the API description) against a real server started as the
    page starts it, in one shell."""
    blocks = [
        b
        for b in _of("service-session", "service.md")
        if "v1/simulate --json" not in b.body and "kill -9" not in b.body
    ]
    assert len(blocks) == 4, [b.line for b in blocks]
    _service_session(blocks, workdir)


def test_service_kill_session(workdir):
    """service.md's second session: a server killed while a job runs re-queues it on restart."""
    _service_session([b for b in _of("service-session", "service.md") if "kill -9" in b.body], workdir)


def test_service_replay_session(workdir):
    """service.md's replays (simulate, choose-plan): the numbers shown are what the server answers."""
    if not (SHARED_DATA / "MANIFEST.md").is_file():
        pytest.skip(f"real data folder {SHARED_DATA} is absent")
    block = next(b for b in _of("service-session", "service.md") if "v1/simulate --json" in b.body)
    answers = {command: out for (command, _), out in zip(_transcript(block), _service_session([block], workdir))}
    simulated = json.loads(next(out for c, out in answers.items() if "/v1/simulate --json @simulate.json" in c))
    chosen = json.loads(next(out for c, out in answers.items() if "?wait=60" in c))
    stated = re.search(
        r"\(mean \$([\d.]+),\s+p95 \$([\d.]+), against a hindsight bound of \$([\d.]+)[^)]*\); the plan "
        r"chosen with the\s+"
        r"policy on the fitted model holds (\d+)(?: as well)? and is expected at \$([\d.]+)",
        block.after,
    )
    assert stated, "the figures after the replay session"
    assert stated.groups() == (
        f"{simulated['cost_mean']:.2f}",
        f"{simulated['cost_p95']:.2f}",
        f"{simulated['hindsight_cost_mean']:.2f}",
        str(sum(chosen["plan"]["counts"].values())),
        f"{chosen['cost']:.2f}",
    )


# ------------------------------------------------------------------ Python blocks
def _printed_after(block: Block) -> str | None:
    """The text block a python block is said to print ("It prints"), if any."""
    i = BLOCKS.index(block)
    if i + 1 < len(BLOCKS) and BLOCKS[i + 1].page == block.page and "It prints" in block.after:
        return BLOCKS[i + 1].body
    return None


def _setup(page: str, folder: Path) -> None:
    """Files the examples of ``page`` read by name."""
    if page == "instance-format.md":
        smallest = next(b for b in _of("instance-json", page))
        (folder / "my-problem.json").write_text(smallest.body)
    if page == "profiler.md":  # six model-generated runs: ResNet-110's coefficients, gamma_4 = 1, noise 0.01
        from dnnprov.profiling.fits.loss import synthetic_log

        true = {"gamma_1": 876.5, "gamma_2": -0.2, "gamma_3": 2507.6, "gamma_4": 1.0, "gamma_5": 0.5}
        clusters = [
            (1024, 0.71, 2),
            (2048, 0.80, 4),
            (3000, 0.90, 7),
            (1536, 0.55, 2),
            (4096, 0.85, 7),
            (1200, 0.87, 4),
        ]
        synthetic_log(true, "cc", clusters, noise=0.01, seed=0).write_csv(folder / "synth.csv")


@pytest.mark.parametrize("page", sorted({b.page for b in _of("python")}))
def test_python_examples(page, workdir, monkeypatch):
    """The Python blocks of a page run in order in one namespace; what they print is what
    the page shows after them. Paths ``/tmp/NAME`` are folders of the scratch folder, and
    AWS credentials are set as the pages ask (any: the endpoints are twins on 127.0.0.1)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "docs-example")
    if page == "formulations.md":
        pytest.importorskip("pyomo")
    _setup(page, workdir)
    namespace: dict[str, Any] = {}
    exec(PRELUDE.get(page, "import dnnprov\n"), namespace)  # noqa: S102 (documentation examples)
    for block in _of("python", page):
        if "solve_model_scip" in block.body:
            pytest.importorskip("pyscipopt", reason="the SCIP example needs the scip extra")
        body = re.sub(r'"/tmp/([\w-]+)"', lambda m: repr(str(workdir / m.group(1))), block.body)
        out = io.StringIO()
        code = compile(body, f"{page}:{block.line}", "exec")
        if block.key in KNOWN_BROKEN:
            with pytest.raises(Exception), contextlib.redirect_stdout(out):  # noqa: B017 (any failure of a broken page)
                exec(code, namespace)  # noqa: S102
            continue
        with contextlib.redirect_stdout(out):
            exec(code, namespace)  # noqa: S102
        want = _printed_after(block)
        if want is not None:
            assert _matches(want, out.getvalue()), f"{page}:{block.line}\n--- page:\n{want}--- got:\n{out.getvalue()}"


def test_every_output_block_belongs_to_an_example():
    """Each `output` block is the "It prints" text of the python block before it."""
    for block in _of("output"):
        i = BLOCKS.index(block)
        assert RUN.get(BLOCKS[i - 1].key) == "python" and _printed_after(BLOCKS[i - 1]) == block.body


# ------------------------------------------------------------------ files in pages
_SOLVES = re.compile(r"`dnnprov solve` (?:finds|proves) (?:the same )?`([^`]+)`[^:]*: ([\d,.]+) s\s+and \$(\d+\.\d+)")


def test_instance_examples_load_and_solve_as_stated():
    """Each instance file of instance-format.md is valid; where the text says what
    `dnnprov solve` finds, it finds exactly that (plan, time, cost)."""
    stated = 0
    for block in _of("instance-json"):
        problem = dnnprov.problem_from_dict(json.loads(block.body))
        for plan, time_s, cost in _SOLVES.findall(block.after.split("```")[0]):
            result = dnnprov.solve(problem)
            assert result.status.value == "optimal", (block.line, result.summary())
            assert str(result.plan) == plan, (block.line, str(result.plan))
            assert f"{result.time_s:,.2f}" == time_s and f"{result.cost:.6f}" == cost, (block.line, result.summary())
            stated += 1
    assert stated >= 4


def test_shipped_serverless_example_is_the_embedded_file():
    """The 'as it ships' serverless example is the embedded file (notes shortened)."""
    shown = next(json.loads(b.body) for b in _of("instance-json") if '"paper-table3-resnet50"' in b.body)
    shipped = json.loads((REPO / "data/instances/serverless/paper-table3-resnet50.json").read_text())
    assert shown["notes"].endswith("...") and shipped["notes"].startswith(shown["notes"][:-3].rstrip())
    assert dict(shown, notes="") == dict(shipped, notes="")


def test_catalog_examples_load(tmp_path):
    """The catalog, spot workload and serverless workload files of catalog-format.md load."""
    from dnnprov.io.catalogs.catalog import load_catalog, load_spot_profile
    from dnnprov.io.paper import load_serverless_workload

    loaders = {
        "dnnprov/catalog": load_catalog,
        "dnnprov/spot-workload": load_spot_profile,
        "dnnprov/serverless-workload": load_serverless_workload,
    }
    kinds = []
    for block in _of("catalog-json"):
        data = json.loads(block.body)
        path = tmp_path / f"{block.line}.json"
        path.write_text(block.body)
        assert loaders[data["format"]](path) is not None
        kinds.append(data["format"])
    assert sorted(kinds) == sorted(loaders)


def test_catalog_import_example(workdir):
    """`dnnprov catalog import --region us-east-1` writes a dated catalog from the shared data."""
    if not (SHARED_DATA / "MANIFEST.md").is_file():
        pytest.skip(f"real data folder {SHARED_DATA} is absent")
    block = _of("catalog-import")[0]
    argv = shlex.split(block.body.splitlines()[0].split("#")[0])
    run = subprocess.run(
        [sys.executable, "-m", "dnnprov", *argv[1:]],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=workdir,
    )
    assert run.returncode == 0, run.stderr
    written = Path(run.stdout.strip())
    assert written.parent == workdir and written.name.startswith("aws-us-east-1")
    from dnnprov.io.catalogs.catalog import load_catalog

    assert load_catalog(written).region == "us-east-1"


# ------------------------------------------------------------------ error messages
def _type(d: dict) -> dict:
    return d["instance_types"]["g3.8xlarge"]


#: One change to paper-table1.json per message shown in instance-format.md.
ERROR_CHANGES: dict[str, Callable[[dict], None]] = {
    "slo.time_ms": lambda d: d["slo"].update(time_ms=d["slo"].pop("time_s")),
    "workload.gamma_5": lambda d: d["workload"].pop("gamma_5"),
    "instance_types.g3.8xlarge.quota: '5'": lambda d: _type(d).update(quota="5"),
    "version": lambda d: d.update(version=2),
    "slo.loss": lambda d: d["slo"].update(loss=0.4),
    "instance_types.g3.8xlarge.compute_time_s": lambda d: _type(d).update(compute_time_s=0.5),
    "constraints.existing.g3.8xlarge:on-demand": lambda d: d.setdefault("constraints", {}).update(
        existing={"g3.8xlarge:on-demand": 1}
    ),
    "instance_types.g3.8xlarge.quota: 5000": lambda d: _type(d).update(quota=5000),
}

#: The resource-limit table's errors: the change that gives each (file-level ones apart).
LIMIT_CHANGES: dict[str, Callable[[dict], None]] = {
    "instance_types.g3.8xlarge.quota: a number": lambda d: _type(d).update(quota=2**63),
    "instance_types: 5,000 types": lambda d: d.update(instance_types={f"g{i}.x": dict(_type(d)) for i in range(5000)}),
    "instance_types.g3.8xlarge.quota: 5000": lambda d: _type(d).update(quota=5000),
    "instance_types: plans of up to 20,000": lambda d: d.update(
        instance_types={f"g{i}.x": dict(_type(d), quota=4000) for i in range(5)}
    ),
    "instance_types.g3.8xlarge.gpus": lambda d: _type(d).update(gpus=65),
    "constraints.ps_count[1]": lambda d: d.setdefault("constraints", {}).update(ps_count=[1, 100]),
    "name: a name of 300": lambda d: d.update(name="x" * 300),
    "instance_types.g3.8xlarge.spot_price_per_h": lambda d: _type(d).update(spot_price_per_h=1e308),
    "workload.bandwidth_req_mb_s": lambda d: d["workload"].update(bandwidth_req_mb_s=1e-12),
}
SERVERLESS_LIMIT_CHANGES: dict[str, Callable[[dict], None]] = {
    "platform.concurrency_limit": lambda d: d["platform"].update(concurrency_limit=10**6),
    "platform.memory_step_mb": lambda d: d["platform"].update(memory_step_mb=1, max_memory_mb=20000),
    "constraints.functions": lambda d: d["platform"].update(
        memory_step_mb=1, max_memory_mb=10240, concurrency_limit=100000
    ),
    "workload.samples": lambda d: d["workload"].update(samples=10**13),
}


def _error_of(base: Path, change: Callable[[dict], None]) -> str:
    data = json.loads(base.read_text())
    change(data)
    with pytest.raises(InvalidInputError) as info:
        problem_from_dict(data)
    return str(info.value)


def test_error_messages_are_what_dnnprov_says():
    """Every message in the Errors section is what the change it stands for gives."""
    lines = [line for b in _of("errors") for line in b.body.splitlines() if line.strip()]
    assert len(lines) == len(ERROR_CHANGES)
    for line in lines:
        key = next(k for k in ERROR_CHANGES if line.startswith(k))
        assert _error_of(TABLE1, ERROR_CHANGES[key]) == line


def test_resource_limit_table_is_what_dnnprov_says(tmp_path):
    """Every error in the resource-limit table is the message of exceeding that limit."""
    text = (DOCS / "instance-format.md").read_text()
    section = text.split("## Resource limits", 1)[1].split("\n## ", 1)[0]
    shown = re.findall(r"^\|[^|]+\|[^|]+\| `([^`]+)` \|$", section, re.MULTILINE)
    serverless = REPO / "data/instances/serverless/paper-table3-resnet50.json"
    checked = 0
    for message in shown:
        if message.startswith("FILE: "):
            path = tmp_path / "big.json"
            path.write_bytes(b" " * 9 * 1024 * 1024)
            with pytest.raises(InvalidInputError) as info:
                dnnprov.read_instance(path)
            assert str(info.value) == message.replace("FILE", str(path))
        elif message.startswith("notes: nested"):
            path = tmp_path / "deep.json"
            path.write_text('{"notes": ' + "[" * 40 + "]" * 40 + "}")
            with pytest.raises(InvalidInputError) as info:
                dnnprov.read_instance(path)
            assert str(info.value) == message
        elif "integer literal of 40 digits" in message:
            text = TABLE1.read_text()
            at = text.index('"quota": 5', text.index('"g3.8xlarge"'))
            path = tmp_path / "digits.json"
            path.write_text(text[:at] + '"quota": ' + "9" * 40 + text[at + len('"quota": 5') :])
            with pytest.raises(InvalidInputError) as info:
                dnnprov.read_instance(path)
            assert str(info.value) == message
        else:
            changes = {
                **{k: (TABLE1, v) for k, v in LIMIT_CHANGES.items()},
                **{k: (serverless, v) for k, v in SERVERLESS_LIMIT_CHANGES.items()},
            }
            key = next(k for k in changes if message.startswith(k))
            assert _error_of(*changes[key]) == message
        checked += 1
    assert checked == len(shown) >= 16


def test_duplicate_key_message_of_the_page(tmp_path):
    """The duplicate-key message the page quotes is what a repeated `quota` gives."""
    text = TABLE1.read_text()
    at = text.index('"quota"', text.index('"g3.8xlarge"'))
    path = tmp_path / "dup.json"
    path.write_text(text[:at] + '"quota": 1, ' + text[at:])
    with pytest.raises(InvalidInputError) as info:
        dnnprov.read_instance(path)
    quoted = "instance_types.g3.8xlarge.quota: key given twice in one object (duplicate keys are\n   refused)"
    assert " ".join(quoted.split()) == str(info.value)
    assert quoted in (DOCS / "instance-format.md").read_text()


def test_speed_example_of_the_page():
    """180 samples/s: fine at a per-GPU batch of 1024, refused at 16, as the page says."""
    data = json.loads(next(b.body for b in _of("instance-json")))
    entry = data["instance_types"]["p3.2xlarge"]
    entry.update(speed_samples_per_s=180)
    assert dnnprov.problem_from_dict(copy.deepcopy(data)).columns().compute_time[0] > 0
    entry.update(batch_per_gpu=16)
    with pytest.raises(InvalidInputError, match="speed_samples_per_s: implies a non-positive compute time"):
        dnnprov.problem_from_dict(data)


# ------------------------------------------------------------------ synopses and benchmark commands
def _commands_of(block: Block) -> list[str]:
    """The commands of a synopsis or command block: a line starting with a program begins
    one, the lines under it (options, comments) continue it."""
    starts = ("dnnprov ", "python ", ".venv/bin/", "st ")
    commands: list[str] = []
    for line in block.body.replace("\\\n", " ").splitlines():
        text = line.strip()
        if text.startswith(starts) and not line.startswith(" "):
            commands.append(text)
        elif text and commands and not re.match(r"^[A-Z]+=", text):
            commands[-1] += " " + text
    return commands


def _options_of(command: str) -> tuple[set[str], dict[str, set[str]]]:
    """The ``--options`` a command line names, and the values it lists as ``--opt a|b|c``."""
    options = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", command))
    listed = {m[0]: set(m[1].split("|")) for m in re.findall(r"(--[a-z][\w-]*)[ =]([\w.-]+(?:\|[\w.-]+)+)", command)}
    return options, listed


def _dnnprov_parser(words: list[str]) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``words`` name: ``dnnprov risk fit ...`` -> `risk fit`'s."""
    from dnnprov.cli import build_parser

    parser: argparse.ArgumentParser = build_parser()
    for word in words:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        parser = subs[0].choices[word]
    return parser


def _check_dnnprov_synopsis(command: str) -> None:
    parser = _dnnprov_parser(command.split()[1:])
    options, listed = _options_of(command)
    known = parser._option_string_actions
    assert options <= set(known), f"{command}\n  options {sorted(options - set(known))} not in `{parser.prog}`"
    for option, values in listed.items():
        choices = known[option].choices
        if choices is not None:
            assert values <= set(choices), f"{command}\n  {option}: {sorted(values - set(choices))} not accepted"


def _check_script_command(command: str, helps: dict[str, str]) -> None:
    """A benchmark's command line: the script exists and its --help names every option used."""
    argv = shlex.split(command, comments=True)
    script = next(a for a in argv if a.endswith(".py") or a.startswith("tests/"))
    assert (REPO / script).exists(), f"{command}: no {script}"
    if argv[0].endswith("pytest"):
        assert all((REPO / a.split("::")[0]).exists() for a in argv[1:] if a.startswith("tests/")), command
        return
    if script not in helps:
        run = subprocess.run(
            [sys.executable, str(REPO / script), "--help"], check=False, capture_output=True, text=True, timeout=60
        )
        assert run.returncode == 0, f"{script} --help: {run.stderr[-500:]}"
        helps[script] = run.stdout
    options, _ = _options_of(command.split("#")[0])
    missing = {o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", helps[script])}
    assert not missing, f"{command}\n  options {sorted(missing)} not in {script} --help"


def test_synopses_name_the_options_the_cli_has():
    """Every synopsis of a command names only options (and listed values) its parser accepts;
    every benchmark command names an existing script and only options its --help lists."""
    helps: dict[str, str] = {}
    checked = 0
    for block in _of("synopsis"):
        for command in _commands_of(block):
            if command.startswith("dnnprov "):
                _check_dnnprov_synopsis(command)
            elif command.startswith(".venv/bin/pip install"):
                extra = re.search(r"\.\[(\w+)\]", command).group(1)
                assert f"\n{extra} = [" in (REPO / "pyproject.toml").read_text(), command
            else:
                _check_script_command(command, helps)
            checked += 1
    assert checked >= 40


# ------------------------------------------------------------------ what the CLI prints of a page's file
def _cli(args: list[str], folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dnnprov", *args], check=False, capture_output=True, text=True, timeout=120, cwd=folder
    )


def test_infeasible_solve_prints_the_reasons_shown(workdir):
    """solvers.md: `dnnprov solve` on the infeasible example's file prints the reasons shown."""
    source = next(b for b in _of("python", "solvers.md") if "short = " in b.body)
    namespace: dict[str, Any] = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(source.body, f"solvers.md:{source.line}", "exec"), namespace)  # noqa: S102
    (workdir / "short.json").write_text(json.dumps(namespace["short"]))
    run = _cli(["solve", "short.json"], workdir)
    assert run.returncode == 1, run.stderr
    (want,) = _of("cli-text", "solvers.md")
    assert _matches(want.body, run.stdout), f"--- page:\n{want.body}--- got:\n{run.stdout}"


def test_plausibility_warning_is_what_the_cli_prints(workdir):
    """instance-format.md: Table I's spot prices typed in cents give the warning line shown."""
    data = json.loads(TABLE1.read_text())
    for entry in data["instance_types"].values():
        entry["spot_price_per_h"] = round(entry["spot_price_per_h"] * 100, 6)
    (workdir / "cents.json").write_text(json.dumps(data))
    run = _cli(["solve", "cents.json"], workdir)
    assert run.returncode == 0, run.stderr
    (block,) = _of("warning", "instance-format.md")
    assert block.body.strip() in run.stderr.splitlines(), run.stderr


# ------------------------------------------------------------------ shapes and fragments
def _shape(text: str) -> dict[str, Any]:
    """A schematic object of a page (``{...}`` and ``"..."`` for left-out values, bare
    ``"name"`` for a field without a default) as a dict, ``...`` standing for any value."""
    text = re.sub(r'(?<!: )("[\w.-]+")(?=\s*[,}\n])', r"\1: null", text.strip())
    return json.loads(text.replace("{...}", '"..."').replace(", ...]", "]"))


def _same_shape(shown: Any, real: Any, where: str = "") -> None:
    """``real`` has the fields ``shown`` has (recursively); values equal unless shown as ``...``."""
    if shown == "..." or shown is None:
        return
    if isinstance(shown, dict):
        assert isinstance(real, dict) and set(shown) <= set(real), f"{where}: {sorted(shown)} vs {sorted(real)}"
        for key, value in shown.items():
            _same_shape(value, real[key], f"{where}.{key}")
    elif isinstance(shown, list):
        assert isinstance(real, list) and len(real) >= len(shown), where
        for i, value in enumerate(shown):
            _same_shape(value, real[i], f"{where}[{i}]")
    elif isinstance(shown, float) or isinstance(real, float):
        assert real == pytest.approx(shown), f"{where}: page {shown!r}, dnnprov {real!r}"
    else:
        assert shown == real, f"{where}: page {shown!r}, dnnprov {real!r}"


def test_plan_document_schematic_is_what_export_writes():
    """cloud.md: a plan document has the fields of the page's schematic, and only those."""
    from dnnprov.cloud.export.plan import plan_document
    from dnnprov.io.catalogs.catalog import build_spot_problem, embedded_path, load_catalog, load_spot_profile

    catalog = load_catalog(embedded_path("catalogs", "aws-table3-2023-01.json"))
    profile = load_spot_profile(embedded_path("workloads", "spot", "resnet110-paper.json"))
    quotas = {"g4dn.4xlarge": 10, "g3.8xlarge": 10}
    problem = build_spot_problem(catalog, profile, dnnprov.SpotSLO(loss=0.8, time_s=4000), quotas=quotas)
    real = plan_document(dnnprov.solve(problem), problem, catalog).to_dict()
    (block,) = _of("shape", "cloud.md")
    shown = _shape(block.body)
    _same_shape(shown, real)
    assert set(real) <= set(shown), sorted(set(real) - set(shown))


def test_progress_report_is_the_protocols():
    """control.md: the report shown is read by the loop's reader and written back as shown."""
    from dnnprov.control.trainer import read_report, write_report

    (block,) = _of("report", "control.md")
    path = Path(tempfile.mkdtemp()) / "report.json"
    path.write_text(block.body)
    report = read_report(str(path))
    assert report is not None and report.to_dict() == json.loads(block.body)
    write_report(path, report)
    assert json.loads(path.read_text()) == json.loads(block.body)


def test_run_job_body_is_the_services():
    """service.md: a run job's fields and defaults are the service's (its OpenAPI schema)."""
    from dnnprov.service.http.openapi import openapi_document
    from dnnprov.service.kinds.run_jobs import RUN_FIELDS

    (block,) = _of("shape", "service.md")
    shown = _shape(block.body)
    schema = openapi_document(auth=True)["components"]["schemas"]["RunRequest"]["properties"]
    assert shown.pop("kind") == "run" and set(shown) == set(schema) == RUN_FIELDS
    assert {k: v for k, v in shown.items() if v is not None} == {
        k: s["default"] for k, s in schema.items() if "default" in s
    }


def test_interruption_fragment_loads():
    """revocation.md: the interruption field, put in Table I's p3.2xlarge, loads and round-trips."""
    (block,) = _of("fragment", "revocation.md")
    shown = json.loads("{" + block.body + "}")["instance_types"]["p3.2xlarge"]
    data = json.loads(TABLE1.read_text())
    entry = data["instance_types"]["p3.2xlarge"]
    entry.update({k: v for k, v in shown.items() if k != "..."})
    problem = dnnprov.problem_from_dict(data)
    assert problem.to_dict()["instance_types"]["p3.2xlarge"]["interruption"] == shown["interruption"]


def test_csv_contract_excerpt_round_trips(tmp_path):
    """profiler.md: the CSV excerpt is read by the contract's reader and written back as shown."""
    from dnnprov.profiling.readers import read_loss_csv

    (block,) = _of("csv", "profiler.md")
    (tmp_path / "in.csv").write_text(block.body)
    log = read_loss_csv(tmp_path / "in.csv")
    assert len(log) == 1
    log.write_csv(tmp_path / "out.csv")
    assert (tmp_path / "out.csv").read_text() == block.body


def test_twin_starts_as_the_page_shows(workdir):
    """control.md: the twin command of the page, run as shown, prints the ready line shown
    (its port and its clock's first instants vary), and stops on SIGTERM."""
    import os
    import select

    if not (SHARED_DATA / "MANIFEST.md").is_file():
        pytest.skip(f"real data folder {SHARED_DATA} is absent")
    (command,) = _of("server", "control.md")
    (ready,) = _of("ready-line", "control.md")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    script = command.body.replace("\\\n", " ").replace("\ndnnprov twin", "\nexec dnnprov twin")
    twin = subprocess.Popen(["bash", "-c", script], cwd=workdir, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert select.select([twin.stdout], [], [], 60)[0], "no ready line within 60 s"
        line = twin.stdout.readline()
    finally:
        twin.terminate()
        code = twin.wait(timeout=30)
    real, shown = json.loads(line), _shape(ready.body)
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", real.pop("url")) and shown.pop("url")
    assert 0 <= real["clock"].pop("t") <= 60 and shown["clock"].pop("t") == pytest.approx(0.04)
    assert real["clock"].pop("now")[:15] == shown["clock"].pop("now")[:15] == "2023-08-27T00:0"
    _same_shape(shown, real)
    assert [p["name"] for p in real["pools"]] == [
        "p3.2xlarge@us-west-2a",
        "p3.2xlarge@us-west-2c",
        "p3.2xlarge@us-east-2b",
    ]
    assert code == 0


# ------------------------------------------------------------------ outputs of timed runs
def _figures(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+(?:\.\d+)?", text.replace(",", ""))]


def test_table1_front_line_is_what_the_benchmark_prints():
    """benchmarks.md: the first line of benchmarks/fuzz_objectives.py (Table I's whole front,
    timed 5 times): counts as shown, CPU seconds within 10 x the figures shown."""
    (block,) = _of("front-line", "benchmarks.md")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert benchmark_module("fuzz_objectives").table1_front(5)
    shown, got = block.body.strip(), out.getvalue().strip()
    timed = r"min [\d.]+, median [\d.]+, max [\d.]+"
    assert re.sub(timed, "", got) == re.sub(timed, "", shown), got
    cpu = _figures(re.search(timed, got).group())
    assert 0 < cpu[0] <= cpu[1] <= cpu[2] <= 10 * _figures(re.search(timed, shown).group())[2], got


def test_solver_log_is_what_solve_log_prints(workdir):
    """solvers.md: the log of `dnnprov solve large-003.json --log --work-limit 1000` is the one
    shown: header, rows and the end, the times aside (the work limit stops the search at the
    same node on any machine; a row printed once a second on a slow one only has to be of the
    log's form)."""
    (block,) = _of("log", "solvers.md")
    command = re.search(r"\(`(dnnprov solve [^`]+)`", block.after).group(1)
    assert "--work-limit" in command and "--time-limit" not in command
    run = _cli(shlex.split(command)[1:], workdir)
    shown, got = block.body.splitlines(), run.stderr.splitlines()
    assert got[:3] == shown[:3], run.stderr
    row = re.compile(
        r"^[* ] +\d+\.\d\d +(-|\d+\.\d+) +\d+\.\d+ +(-|\d+\.\d\d %)  (\d+ open, \d+ MILPs|heuristic seed)$"
    )
    assert all(row.match(line) for line in got[3:-1]), run.stderr

    def untimed(lines: list[str]) -> list[str]:
        return [re.sub(r"^([* ]) +\d+\.\d\d|after \d+\.\d\d s", r"\1", x) for x in lines]

    marked = [x for x in got[3:-1] if x.startswith("*")]  # the incumbents, in order
    assert untimed(marked) == untimed([x for x in shown[3:-1] if x.startswith("*")]), run.stderr
    assert untimed(got[3:4]) == untimed(shown[3:4]), run.stderr  # the root bound
    assert untimed(got[-1:]) == untimed(shown[-1:]), run.stderr


def test_architecture_drawing_names_every_room():
    """architecture.md: the drawing names each package and top-level module of dnnprov, and
    nothing else (the import rule it draws is tests/test_architecture.py's)."""
    (block,) = _of("drawing", "architecture.md")
    drawn = set(re.findall(r"(\w+)/", block.body)) | set(re.findall(r"\w+\.py", block.body))
    package = REPO / "dnnprov"
    rooms = {p.name for p in package.iterdir() if (p / "__init__.py").is_file()} | {"formulations", "solvers"}
    modules = {p.name for p in package.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    assert drawn == rooms | modules, (sorted(drawn - rooms - modules), sorted(rooms | modules - drawn))


def test_side_fuzz_line_is_what_the_benchmark_prints():
    """benchmarks.md: benchmarks/fuzz_side.py in a short mode (16 instances, one per family, as
    the 1,024 of the page start) prints the line shown: none wrong, CPU s per instance within
    10 x the page's."""
    (block,) = _of("fuzz-side-line", "benchmarks.md")
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/fuzz_side.py"), "--count", "16"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    form = r"(\d+) instances, 0 wrong or given up, ([\d.]+) CPU s"
    shown, got = re.fullmatch(form, block.body.strip()), re.fullmatch(form, run.stdout.strip())
    assert run.returncode == 0 and shown and got, run.stdout + run.stderr
    assert float(got[2]) / 16 <= 10 * float(shown[2]) / int(shown[1]), run.stdout


# ------------------------------------------------------------------ the interruption watcher
class _Metadata(http.server.BaseHTTPRequestHandler):
    """An instance metadata service (IMDSv2) of a g3.8xlarge with a spot interruption notice."""

    ANSWERS: ClassVar[dict[str, str]] = {
        "/latest/meta-data/spot/instance-action": '{"action": "terminate", "time": "2022-05-31T18:20:00Z"}',
        "/latest/meta-data/instance-id": "i-0123456789abcdef0",
        "/latest/meta-data/instance-type": "g3.8xlarge",
    }

    def do_PUT(self) -> None:
        ok = self.path == "/latest/api/token" and "X-aws-ec2-metadata-token-ttl-seconds" in self.headers
        self._reply(200 if ok else 400, "token" if ok else "")

    def do_GET(self) -> None:
        known = self.headers.get("X-aws-ec2-metadata-token") == "token" and self.path in self.ANSWERS
        self._reply(200 if known else 404, self.ANSWERS.get(self.path, ""))

    def _reply(self, status: int, body: str) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        """Quiet."""


def test_interruption_watcher_example_replans_on_a_notice():
    """cloud.md: the watcher example, against an IMDSv2 on 127.0.0.1 serving a notice for a
    g3.8xlarge of the paper's Table I plan (29.8 min in, loss 0.92), prints the takeover plan."""
    import threading

    from dnnprov.revocation.replan import replan

    (block,) = _of("watcher", "cloud.md")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metadata)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    problem = dnnprov.read_instance(TABLE1)
    running = {"g3.8xlarge": 5, "g3.16xlarge": 3}
    namespace: dict[str, Any] = {
        "problem": problem,
        "running": running,
        "elapsed": lambda: 1788.0,
        "current_loss": lambda: 0.92,
        "metadata_url": f"http://127.0.0.1:{server.server_address[1]}",
    }
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(block.body, f"cloud.md:{block.line}", "exec"), namespace)  # noqa: S102
    finally:
        server.shutdown()
        server.server_close()
    expected = replan(problem, running, {"g3.8xlarge": 1}, 1788.0, 0.92).summary() + "\n"
    untimed = re.compile(r"solve: [\d.]+ s")
    assert untimed.sub("", out.getvalue()) == untimed.sub("", expected), out.getvalue()


def test_local_cloud_config_reads_as_the_page_says(tmp_path):
    """training.md: the local-cloud config, beside the two real traces it names, reads into
    the job, hardware, traces (zones from the file names), offset and folder it states."""
    from dnnprov.training.local_cloud import LocalConfig

    traces = SHARED_DATA / "spot-traces/availability/16-node/aws-08-27-2023"
    if not traces.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent")
    (block,) = _of("local-config", "training.md")
    for name in json.loads(block.body)["traces"]["p3.2xlarge"]:
        (tmp_path / name).symlink_to(traces / name)
    (tmp_path / "local.json").write_text(block.body)
    config = LocalConfig.read(str(tmp_path / "local.json"))
    assert (config.job.speed, config.job.seed, config.job.lr, config.offset) == (100, 0, 0.05, 40)
    assert config.workdir == "runs/local" and config.types["p3.2xlarge"].compute_s == 6.0
    assert [t.zone for t in config.traces["p3.2xlarge"]] == ["us-west-2a", "us-west-2c"]


# ------------------------------------------------------------------ real training runs
def test_profiling_runs_train_and_the_profiler_reads_them(workdir):
    """training.md: the profiling-run example trains its cluster to the target loss (as a
    script, as the page runs it), beside the two other clusters the profiler command names
    (the same example with their workers, 150 updates each); `dnnprov profile fit-loss` then
    fits their logs. Real runs of up to a minute of wall time, side by side (a few CPU s: the
    workers mostly wait out the emulated GPU)."""
    (example,) = _of("training-script", "training.md")
    (fit,) = _of("training-fit", "training.md")
    clusters = {"2v100+1k80": "[fast, fast, slow]", "4v100": "[fast] * 4", "3v100+4k80": "[fast] * 3 + [slow] * 4"}
    runs = {}
    for name, kinds in clusters.items():
        script = example.body.replace("[fast, fast, slow]", kinds).replace("runs/2v100+1k80", f"runs/{name}")
        if name != "2v100+1k80":  # the page's run to its target; the others' first 150 updates, for the fit
            script = script.replace("target_loss=0.42)", "target_loss=0.42, max_steps=150)")
        (workdir / f"{name}.py").write_text(script)
        runs[name] = subprocess.Popen(
            [sys.executable, f"{name}.py"], cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    for name, run in runs.items():
        out, err = run.communicate(timeout=900)
        assert run.returncode == 0, f"{name}: {err[-2000:]}"
        assert name != "2v100+1k80" or 0 < float(out.split()[0]) < float("inf"), out  # it reached the target
    command = shlex.split(fit.body.strip().removeprefix("$ "))
    answer = _cli(command[1:], workdir)
    assert answer.returncode == 0, answer.stderr
    fitted = json.loads(answer.stdout)
    assert fitted, answer.stdout


# ------------------------------------------------------------------ README.md
def _readme(kind: str) -> Block:
    (block,) = _of(kind, "README.md")
    return block


def test_readme_setup_installs_an_extra_that_exists_and_demo_runs(workdir):
    """The set-up line installs an extra pyproject.toml defines; `dnnprov demo` then solves Table I."""
    body = _readme("readme-setup").body
    extra = re.search(r"\.\[(\w+)\]", body)
    assert extra and f"\n{extra.group(1)} = [" in (REPO / "pyproject.toml").read_text(), body
    run = _cli(["demo"], workdir)
    assert run.returncode == 0, run.stderr
    assert "paper-table1" in run.stdout and "optimal" in run.stdout


def test_readme_check_command_is_what_ci_runs():
    """ "this is what `.ci/run` does": the README's command is .ci/run's last line, word for word."""
    ci = [line for line in (REPO / ".ci/run").read_text().splitlines() if line.strip()]
    assert _readme("ci-command").body.strip() == ci[-1].strip()


def test_readme_use_block_is_run_by_its_own_test():
    """README's Use block runs command by command in tests/cli/test_readme.py (right after the
    set-up, with ``.venv/bin/``): the block that test reads is this one."""
    sys.path.insert(0, str(REPO / "tests" / "cli"))
    try:
        import test_readme
    finally:
        sys.path.remove(str(REPO / "tests" / "cli"))
    assert test_readme._block_after("## Use") == _readme("readme-use").body


def test_readme_table1_figures_are_what_the_solvers_return():
    """The paragraph after README's Python example: the authors' heuristic's plan and cost and
    milp's proven plan, cost and saving on Table I."""
    prose = _readme("python").after
    stated = re.search(
        r"heuristic returns (.+?) at\s+\$([\d.]+); `milp` proves (.+?) at \$([\d.]+)\s+optimal \(([\d.]+) % cheaper\)",
        prose,
    )
    assert stated, prose[:400]
    problem = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    heuristic, milp = dnnprov.solve(problem, "reference-heuristic"), dnnprov.solve(problem, "milp")

    def plan(text: str) -> dict[str, int]:
        return {t: int(n) for n, t in re.findall(r"(\d+) x ([\w.]+)", text)}

    assert heuristic.plan is not None and milp.plan is not None and milp.status.value == "optimal"
    assert plan(stated.group(1)) == {t: n for t, n in heuristic.plan.counts.items() if n}
    assert plan(stated.group(3)) == {t: n for t, n in milp.plan.counts.items() if n}
    assert (stated.group(2), stated.group(4)) == (f"{heuristic.cost:.6f}", f"{milp.cost:.6f}")
    assert stated.group(5) == f"{100 * (1 - milp.cost / heuristic.cost):.1f}"


def test_readme_layout_names_existing_folders_and_every_room():
    """README's layout names only folders and modules that exist, and every room of dnnprov/."""
    named: set[str] = set()
    for line in _readme("layout").body.splitlines():
        root = REPO / "dnnprov" if line.startswith("  ") else REPO
        for name in re.findall(r"(?:^|\s)([a-z_]+/|[a-z_]+\.py)(?=\s|$)", line):
            assert (root / name).exists(), f"README layout: {root.relative_to(REPO) / name} does not exist"
            named.add(str((root / name).relative_to(REPO)).rstrip("/"))
    rooms = {f"dnnprov/{p.parent.name}" for p in (REPO / "dnnprov").glob("*/__init__.py")}
    assert rooms <= named, f"rooms missing from README's layout: {sorted(rooms - named)}"


# ------------------------------------------------------------------ the full schemathesis run
def test_schemathesis_run_is_a_command_the_tool_takes_on_this_api():
    """service.md's full schemathesis run (inline; its figures are in benchmarks.md): its options
    are `st`'s and its configuration file exists (the run itself takes minutes of CPU:
    tests/service/test_contract.py runs a bounded one on every test run)."""
    st = Path(sys.executable).parent / "st"
    if not st.exists():
        pytest.skip("schemathesis (`st`, the test extra) is not installed")
    text = " ".join((REPO / "docs" / "service.md").read_text().split())
    (command,) = re.findall(r"`(st --config-file [^`]+)`", text)
    argv = shlex.split(command)
    assert argv[:2] == ["st", "--config-file"] and (REPO / argv[2]).is_file(), command
    helps = {
        "st": subprocess.run([str(st), "--help"], capture_output=True, text=True, check=True).stdout,
        "run": subprocess.run([str(st), "run", "--help"], capture_output=True, text=True, check=True).stdout,
    }
    for option in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", command):
        where = "st" if option == "--config-file" else "run"
        assert re.search(rf"(?<![\w-]){option}(?![\w-])", helps[where]), f"{option} not in `st {where} --help`"
