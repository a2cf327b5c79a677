"""The OpenAPI contract of `dnnprov serve`, checked by schemathesis (`st run --checks all`) against
the real server on loopback, with and without a token: zero failures.

The run is bounded (5 examples per operation, deterministic generation, `--max-time-limit 1`
on the server so no solve runs long) and skips schemathesis' coverage phase, whose thousands
of systematic cases cost minutes of CPU: docs/service.md gives the command of the full run
(every phase) and what it found. `tests/service/schemathesis.toml` says why 422 is an accepted
answer to a schema-valid body.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("schemathesis", reason="schemathesis is in the test extra")
pytest.importorskip("fastapi", reason="the service extra (fastapi, uvicorn) is in the test extra")
httpx = pytest.importorskip("httpx", reason="httpx is in the test extra")
openapi_spec_validator = pytest.importorskip("openapi_spec_validator", reason="in the test extra")

from service_helpers import TOKEN, server  # noqa: E402

ST = str(Path(sys.executable).with_name("st"))
CONFIG = Path(__file__).with_name("schemathesis.toml")


@pytest.mark.parametrize("with_token", [True, False], ids=["token", "open"])
def test_schemathesis_finds_no_failure(tmp_path: Path, with_token: bool) -> None:
    """`st run --checks all` over every operation (and the links from job creation): 0 failures."""
    options = [
        "--workers",
        "1",
        "--max-time-limit",
        "1",
        "--max-pending",
        "8",
        "--max-auth-failures",
        "1000000",
        "--rate-limit",
        "1000",
        "--quiet",
    ]
    headers: list[str] = []
    phases = ["--phases", "examples,fuzzing,stateful"]
    if with_token:
        (tmp_path / "tokens").write_text(f"tenant-a {TOKEN}\n")
        options += ["--token-file", str(tmp_path / "tokens")]
        headers = ["-H", f"Authorization: Bearer {TOKEN}"]
    with server(tmp_path, *options) as (url, _, log):
        spec = httpx.get(f"{url}/openapi.json", headers=dict([headers[1].split(": ")]) if headers else {}).json()
        openapi_spec_validator.validate(spec)
        run = subprocess.run(
            [
                ST,
                "--config-file",
                str(CONFIG),
                "--no-color",
                "run",
                f"{url}/openapi.json",
                "--checks",
                "all",
                "--max-examples",
                "5",
                "--seed",
                "20",
                "--request-timeout",
                "30",
                "--generation-deterministic",
                *phases,
                *headers,
            ],
            capture_output=True,
            text=True,
            timeout=540,
            cwd=tmp_path,
        )
        internal = [line for line in log.read_text().splitlines() if '"internal_error"' in line]
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "Failures:" not in run.stdout and "Tested: 20" in run.stdout and not internal
