"""Every example in docs/ runs here, and what it prints matches what the page shows.

Each fenced block of every page is either run by one of the tests below (``RUN``) or
listed in ``NOT_RUN`` with the reason (a synopsis with placeholders, a call to AWS, a
benchmark of minutes). A new block fails :func:`test_every_block_is_run_or_has_a_reason`
until it is given one or the other. Conventions the pages follow:

- ``console`` blocks are transcripts: ``$ dnnprov ...`` lines and the output after them,
  ``...`` standing for left-out text (as doctest's ELLIPSIS);
- a ``python`` block followed by "It prints" and a ``text`` block must print that text;
- instance files in ``json`` blocks are valid, and where the prose after one says
  "`dnnprov solve` finds/proves `PLAN` ...: T s and $C", the solve gives exactly that.
"""

from __future__ import annotations

import contextlib
import copy
import doctest
import io
import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

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


def blocks() -> list[Block]:
    """Every fenced block of every page in docs/, in page order."""
    found = []
    for page in sorted(DOCS.glob("*.md")):
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
    ("batch.md", "from dnnprov.batch.runner import run_batch, summarize, read_results"): "python",
    ("batch.md", "           instances  solved  optimal  failed"): "output",
    (
        "batch.md",
        "$ dnnprov batch data/instances --methods milp,heuristic --out results/paper.csv --no-progress",
    ): "console",
    ("batch.md", "$ dnnprov report results/paper.csv --out results/report"): "console",
    ("batch.md", "from dnnprov.batch.report import write_report"): "python",
    ("batch.md", "## Per method and family"): "output",
    ("benchmarks-sets.md", "from dnnprov.benchsets.generate import generate, build_set, read_instance_lines"): "python",
    (
        "catalog-format.md",
        "from dnnprov.io.catalog import build_spot_problem, embedded_path, load_catalog, load_spot_profile",
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
}

#: Blocks no test runs, and why.
NOT_RUN: dict[tuple[str, str], str] = {
    (
        "benchmarks-sets.md",
        "dnnprov generate SET [--out DIR] [--seed N] [--count N] [--shared-data DIR]",
    ): "synopsis with placeholders; tests/test_generate.py runs the command",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/scale_ladder.py                 # full ladder, ~4 min on a quiet 2-core box",
    ): "benchmark runs of 20 s to minutes; the page's tables hold what they printed",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/scale_ladder.py --jsonl /tmp/ladder_final.jsonl",
    ): "the full benchmark (minutes); its numbers are the page's table",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/scale_ladder.py --time-limit 60 --jsonl /tmp/ladder_issue10.jsonl   # every rung and the targets table, ~5 min",
    ): "the issue 10 benchmark commands (minutes); the page's tables hold what they printed",
    (
        "architecture.md",
        "                       cli/        service/                      front ends",
    ): "a drawing of the rooms; tests/test_architecture.py checks the rule it draws",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/domain_extrapolation.py                      # the target (exit 0: met)",
    ): "the issue 23 domain benchmark (120 milp solves and exhaustive checks, minutes); its table follows it",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/fuzz_objectives.py                       # 1,230 instances (30 per family), ~27 min wall",
    ): "the issue 29 benchmarks (minutes to half an hour); the tables after them hold what they printed",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/fuzz_side.py --count 1024       # binaries in the side model against brute force",
    ): "the issue 29 side-variable benchmarks (minutes); the text after them holds what they printed",
    (
        "benchmarks.md",
        "1024 instances, 0 wrong or given up, 322.3 CPU s",
    ): "what benchmarks/fuzz_side.py printed (minutes of CPU)",
    (
        "benchmarks.md",
        "Table I whole front: 37 points (37 proven), 38 exact solves, equal to brute force; CPU s over 5 runs: min 0.213, median 0.220, max 0.285 (target: at most 1)",
    ): "the first line the issue 29 benchmark printed; tests/solvers/test_objectives.py checks the front itself",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/kill_controller.py --runs 20 --kills 5 --seed 28 --speed 20 --policy failover --json /tmp/kill.json",
    ): "the issue 28 kill -9 benchmark (40 twins, 140 controller processes, ~37 min); its table follows it",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/time_limits.py",
    ): "the time-limit benchmark (minutes of real CLI runs); its table follows it on the page",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/service_load.py --workers 1",
    ): "a load benchmark (a server and 200 requests); the page's table holds what it measured",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/service_admission.py",
    ): "the admission benchmark (a server and 200 solves at 50 concurrent, minutes); its table follows it",
    (
        "service.md",
        ".venv/bin/pip install -e '.[service]'",
    ): "synopsis of the install and the options; tests/test_service.py starts the server",
    (
        "service.md",
        '$ st --config-file tests/service/schemathesis.toml run http://127.0.0.1:18643/openapi.json --checks all --max-examples 5 --generation-deterministic --request-timeout 30 -H "Authorization: Bearer $(cat token)"',
    ): "a schemathesis run of minutes against a running server; tests/service/test_contract.py runs a bounded one",
    (
        "instance-format.md",
        "dnnprov: warning: instance_types.p3.2xlarge.spot_price_per_h: 91.8 $/h on 1 GPU is $91.8 per GPU-hour, above the plausible $20 per GPU-hour (real AWS GPU offers: $0.068 spot to $17.80 on demand): a price in cents? (a warning: used as given)",
    ): "a warning line of Table I in cents; tests/problems/test_plausibility.py checks that the CLI prints this line",
    (
        "sweep.md",
        "dnnprov sweep INSTANCE --deadlines START:STOP:N [--losses L1,L2,...] [--time-limit S]",
    ): "synopsis with placeholders; the Table I transcript below runs",
    (
        "solvers.md",
        "spot [spot, model paper] by milp: infeasible",
    ): "the text form of the example above (a file it would write first); tests/solvers/test_infeasibility.py "
    "checks these lines through dnnprov.cli.main",
    (
        "solvers.md",
        "dnnprov milp: large-003 (spot, model paper, loss cc)",
    ): "the log of a 3 s solve of large-003, whose timings vary from run to run",
    (
        "solvers.md",
        ".venv/bin/python benchmarks/fuzz_certificates.py --count 10000 --out /tmp/fuzz-findings",
    ): "fuzz runs of a minute or more; tests/test_fuzz_certificates.py runs the harness (CI slice)",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/fuzz_certificates.py --count 10000 --shrink-per-kind 1 --out /tmp/fuzz-findings",
    ): "the 10,000-instance fuzz run (over a minute); its counts are the page's table",
    (
        "benchmarks.md",
        ".venv/bin/python benchmarks/fuzz_certificates.py --cell-milps --count 3400 --seed 30000 --time-limit 5 --shrink-per-kind 0",
    ): "a fuzz run of minutes; its outcome follows it on the page",
    (
        "benchmarks.md",
        "F=price-magnitudes,speed-magnitudes,bandwidth-magnitudes,all-magnitudes,magnitudes-mixed,serverless-magnitudes",
    ): "the magnitude fuzz runs (minutes each); tests/fuzz runs a bounded slice of the same families",
    (
        "cloud.md",
        "dnnprov catalog fetch --region us-east-1 --types g4dn.4xlarge,g5.xlarge,p3.2xlarge",
    ): "calls AWS; tests/test_aws_fetch.py runs it against a moto server on 127.0.0.1",
    (
        "cloud.md",
        '{"format": "dnnprov/plan", "version": 1, "result": {...}, "instance": {...}, "catalog": {...}}',
    ): "a schematic of the plan document, not a file",
    (
        "cloud.md",
        "dnnprov export PLAN --to ec2-run-instances --image-id ami-... [--subnet-id S] [--key-name K] [--run-id R]",
    ): "synopsis with placeholders; tests/test_export.py runs every target",
    (
        "cloud.md",
        "dnnprov apply PLAN --dry-run --image-id ami-...            # DryRun=True requests only",
    ): "synopsis; launching needs AWS (tests/test_aws_apply.py runs it against moto on 127.0.0.1)",
    (
        "cloud.md",
        "dnnprov replan INSTANCE --plan PLAN --revoked g3.8xlarge=5 --elapsed 1788 --loss-reached 0.92 \\",
    ): "synopsis with placeholders; tests/test_replan.py runs the command",
    (
        "cloud.md",
        "from dnnprov.revocation.replan import watch_interruptions, replan",
    ): "polls the EC2 instance metadata service in an endless loop (needs an EC2 host)",
    (
        "profiler.md",
        "run,workers,batch_wa,cc,step,loss",
    ): "a two-line excerpt of the CSV contract; tests/test_profiler.py round-trips and reads such files",
    (
        "profiler.md",
        "dnnprov profile fit-loss FILE... [--variant cc|no-cc] [--batch-size B] [--workers K]",
    ): "synopsis with placeholders; tests/test_profiler.py runs the command",
    (
        "profiler.md",
        "dnnprov profile estimate --catalog C --profile P --out FILE [--types T,...] [--estimate-at point|fast|slow] [--json]",
    ): "synopsis with placeholders; the worked example after it runs, tests/profiling/test_estimate.py runs each",
    (
        "profiler.md",
        "dnnprov profile fit-timing FILE [--param-size-mb S] [--ps-bandwidth-mb-s B]",
    ): "synopsis with placeholders; tests/test_profiler.py runs the command",
    (
        "profiler.md",
        "dnnprov predict INSTANCE --counts TYPE=N,... [--ps S] [--json]                          # spot",
    ): "synopsis with placeholders; tests/test_predict.py runs the command",
    (
        "profiler.md",
        "$ dnnprov profile fit-loss synth.csv",
    ): "its input is written by dnnprov.profiling.profiler.synthetic_log; tests/test_profiler.py checks the recovery for 4 seeds",
    (
        "profiler.md",
        "$ dnnprov profile fit-loss ../shared/data/training-logs/whisper-large-v2-ja-trainer_state.json --batch-size 50",
    ): "reads ../shared/data, outside the examples' folder; tests/test_profiler.py fits the same file",
    (
        "reproduction.md",
        "python benchmarks/trace_experiment.py --count 100000 --workers 2",
    ): "100,000 jobs, minutes of solving; the page holds what it printed",
    (
        "revocation.md",
        '"instance_types": {',
    ): "a fragment of an instance file showing the interruption field; tests/test_risk.py round-trips it",
    (
        "revocation.md",
        "dnnprov risk fit TRACE... [--pool] [--json]        # one model per trace, or pooled",
    ): "synopsis with placeholders; the traces live in ../shared/data, tests/test_risk.py runs the commands",
    (
        "revocation.md",
        "dnnprov risk solve INSTANCE --robust K [--no-replacement] [--takeover-overhead 126] [--max-plans N] [--json]",
    ): "synopsis with placeholders; tests/test_risk.py and tests/test_robust.py run it",
    (
        "revocation.md",
        "dnnprov risk solve INSTANCE --risk [--deadline-probability Q] [--takeover-overhead 126]",
    ): "synopsis with placeholders; tests/test_risk.py and tests/test_robust.py run it",
    (
        "revocation.md",
        "dnnprov simulate INSTANCE --plan PLAN --trace TYPE=FILE [--trace TYPE=FILE ...]",
    ): "synopsis with placeholders; tests/revocation/test_simulate.py runs the command",
    (
        "control.md",
        "dnnprov run INSTANCE --plan PLAN --policy P [--endpoint-url URL] [--region R] [--state DIR] [--json]",
    ): "synopsis with placeholders; tests/control/test_run_cli.py runs run, status and cancel against moto",
    (
        "control.md",
        '{"run": "RUN", "time_s": 812.4, "loss": 1.93, "step": 1200, "finished_s": null}',
    ): "the protocol's report shape; tests/control/test_loop.py reads reports of the stand-in trainer",
    (
        "control.md",
        "python benchmarks/twin_agreement.py [--windows 20] [--seed 0] [--policies none,fallback,failover,uniform-progress,mpc]",
    ): "the agreement benchmark (reads ../shared/data, minutes of CPU); docs/benchmarks.md holds what it printed",
    (
        "control.md",
        "dnnprov simulate INSTANCE --plan PLAN --trace TYPE=FILE... --policy P",
    ): "synopsis with placeholders; tests/control/test_loop_simulate.py runs it with --per-run --json",
    (
        "revocation.md",
        "python benchmarks/revocation_replay.py --runs 1000                 # set traced, (0.8, 1800 s)",
    ): "the replay benchmark (reads ../shared/data); the page's table holds what it printed",
    (
        "control.md",
        "dnnprov twin --trace TYPE=FILE [--trace TYPE=FILE ...] --offset TICKS [--speed X | --stepped]",
    ): "synopsis with placeholders; tests/control/test_twin.py runs the command",
    (
        "control.md",
        "T=../shared/data/spot-traces/availability/16-node/aws-08-27-2023",
    ): "a server that runs until stopped; tests/control/test_twin.py starts the command and stops it",
    (
        "control.md",
        '{"url": "http://127.0.0.1:41731", "clock": {"t": 0.0, "now": "2023-08-27T00:00:00.000Z", "mode": "stepped", "speed": 1.0}, "pools": [{"name": "p3.2xlarge@us-west-2a", "type": "p3.2xlarge", "zone": "us-west-2a", "trace": "...", "offset": 100, "price_per_h": 0.0, "capacity": 0, "live": 0, "notified": 0}, ...]}',
    ): "the ready line's shape (its port varies); tests/control/test_twin.py checks its fields",
    (
        "control.md",
        "dnnprov run SERVERLESS-INSTANCE --plan PLAN [--lambda-endpoint-url URL] [--endpoint-url URL] [--region R]",
    ): "synopsis with placeholders; tests/control/test_serverless_run.py runs run and resume on the twins",
    (
        "control.md",
        "dnnprov lambda-twin INSTANCE [--speed X] [--port P] [--region R] [--function NAME]",
    ): "synopsis with placeholders; tests/control/test_serverless_run.py starts the command and runs against it",
    (
        "control.md",
        "import dataclasses",
    ): "needs AWS credentials in the environment (any); tests/control/test_serverless_run.py runs it with "
    "fake ones and checks that it prints the text after it",
    (
        "control.md",
        "met 2 609.35 0.209214",
    ): "what the serverless example prints; tests/control/test_serverless_run.py checks it",
    (
        "training.md",
        "from dnnprov.training.cluster import run_cluster",
    ): "a real training run (a minute of wall time); tests/training/test_trainer.py runs run_cluster",
    (
        "training.md",
        "$ dnnprov profile fit-loss runs/2v100+1k80 runs/4v100 runs/3v100+4k80 --json",
    ): "needs the logs of three training runs; tests/training/test_trainer.py reads a run's logs with the profiler",
    (
        "training.md",
        "dnnprov run INSTANCE --plan PLAN --policy P --cloud local[:CONFIG.json] [--poll S] [--join S] [--horizon H] [--json]",
    ): "synopsis with placeholders; tests/training/test_trainer.py runs `dnnprov run --cloud local:CONFIG`",
    (
        "training.md",
        '{"speed": 100, "offset": 40, "workdir": "runs/local",',
    ): "a local-cloud config naming trace files beside it; tests/training/test_trainer.py runs a config",
    (
        "training.md",
        "python benchmarks/real_training.py [--out DIR] [--quick] [--speed X] [--no-link] [--json FILE]",
    ): "the issue 34 benchmark (real training runs, minutes); docs/reproduction.md has its figures",
    (
        "reproduction.md",
        "$ nice -n 10 python benchmarks/real_training.py --out /tmp/ct-full --json /tmp/ct-full.json   # speed 100; 154 s wall, 8.4 CPU s",
    ): "the issue 34 benchmark's output (real training runs, minutes, machine-dependent figures)",
    (
        "reproduction.md",
        "$ nice -n 10 python benchmarks/real_training.py --out /tmp/ct-rep2 --json /tmp/ct-rep2.json   # 166 s wall, 11.7 CPU s",
    ): "the issue 34 benchmark's output (real training runs, minutes, machine-dependent figures)",
    (
        "reproduction.md",
        "$ nice -n 10 python benchmarks/real_training.py --no-link --out /tmp/ct-nolink --json /tmp/ct-nolink.json   # 139 s wall, 10.0 CPU s",
    ): "the issue 34 benchmark's output without the link (real training runs, minutes)",
    (
        "reproduction.md",
        "$ nice -n 10 python benchmarks/real_training.py --revocation --profile-json /tmp/ct-rep2.json --out /tmp/ct-rev   # 59 s wall, 6.7 CPU s",
    ): "the issue 34 run through revocations (real training on the local cloud, a minute)",
    (
        "benchmarks.md",
        "$ python benchmarks/real_training.py --out /tmp/rt1 --json /tmp/rt1.json      # speed 100; 197 s wall, 10.2 CPU s",
    ): "the issue 34 benchmark's output (real training runs, minutes, machine-dependent figures)",
    (
        "benchmarks.md",
        "$ python benchmarks/real_training.py --plans 750 --speed 20 --profile-json /tmp/rt20.json --out /tmp/pl20b   # 67 s wall, 4.0 CPU s",
    ): "the issue 34 plans comparison's output (real training runs, a minute, machine-dependent figures)",
    (
        "benchmarks.md",
        "$ python benchmarks/real_training.py --out /tmp/rt20 --speed 20 --json /tmp/rt20.json   # 507 s wall, 9.3 CPU s",
    ): "the issue 34 benchmark's output at speed 20 (real training runs, minutes, machine-dependent figures)",
    (
        "benchmarks.md",
        "$ python benchmarks/real_training.py --revocation --speed 20 --profile-json /tmp/rt20.json --out /tmp/rv20b   # 62 s wall, 4.4 CPU s",
    ): "the issue 34 revocation run's output (real training, a minute, machine-dependent figures)",
    (
        "control.md",
        "import numpy as np",
    ): "needs AWS credentials in the environment (any); tests/control/test_api.py runs it with fake ones and "
    "checks that it prints the text after it",
    ("control.md", "None running 135.0 11"): "what the run API example prints; tests/control/test_api.py checks it",
    (
        "service.md",
        '{"kind": "run", "instance", "plan", "endpoint_url", "policy": "failover", "region": "us-east-1",',
    ): "the shape of a run job's body; tests/service/test_run_jobs.py posts run jobs to a server",
}

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
    for page in DOCS.glob("*.md"):
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
            assert _matches(want, got), f"{page}:{block.line}: {command}\n--- page:\n{want}--- got:\n{got}"
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


@pytest.mark.parametrize("page", sorted({b.page for b in _of("python")}))
def test_python_examples(page, workdir):
    """The Python blocks of a page run in order in one namespace; what they print is what
    the page shows after them."""
    if page == "formulations.md":
        pytest.importorskip("pyomo")
    _setup(page, workdir)
    namespace: dict[str, Any] = {}
    exec(PRELUDE.get(page, "import dnnprov\n"), namespace)  # noqa: S102 (documentation examples)
    for block in _of("python", page):
        if "solve_model_scip" in block.body:
            pytest.importorskip("pyscipopt", reason="the SCIP example needs the scip extra")
        body = block.body.replace('"/tmp/small"', repr(str(workdir / "small")))
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
    from dnnprov.io.catalog import load_catalog, load_spot_profile
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
    from dnnprov.io.catalog import load_catalog

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
    "instance_types: 300 types": lambda d: d.update(instance_types={f"g{i}.x": dict(_type(d)) for i in range(300)}),
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
