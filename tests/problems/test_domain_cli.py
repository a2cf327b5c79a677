"""``--no-domain``, ``--extrapolation F`` and ``--domain-cost`` on ``dnnprov solve`` and ``predict``.

The oracle for each option is the same instance file edited by hand (its domain deleted or
its factor rewritten in the JSON) and solved without the option.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import one_error

from dnnprov.cli import main
from dnnprov.io.catalogs.catalog import embedded_path

AWS_006 = embedded_path("benchmarks", "aws-2025", "aws-2025-006.json")


def edited(tmp_path: Path, name: str, change) -> str:
    """aws-2025-006 with ``change(data)`` applied to its JSON, written to ``tmp_path/name``."""
    data = json.loads(AWS_006.read_text())
    change(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def solve_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    """``dnnprov solve ... --json`` (exit 0) as a dict."""
    assert main(["solve", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_no_domain_is_the_file_without_its_domain(tmp_path, capsys):
    """--no-domain solves what a file without workload.domain solves: here a plan the
    domain refuses (one worker, a handful of iterations)."""
    bare = edited(tmp_path, "bare.json", lambda d: d["workload"].pop("domain"))
    dropped = solve_json(capsys, str(AWS_006), "--no-domain")
    by_hand = solve_json(capsys, bare)
    assert dropped["plan"] == by_hand["plan"] and dropped["cost"] == by_hand["cost"]
    assert dropped["details"]["iterations"] < 100 and "domain" not in dropped["details"]
    assert solve_json(capsys, str(AWS_006))["details"]["iterations"] >= 100


def test_extrapolation_is_the_file_with_that_factor(tmp_path, capsys):
    """--extrapolation 2 solves what the file with domain.extrapolation 2 solves, and it
    replaces per-axis factors the file states."""

    def factor_two(d):
        d["workload"]["domain"]["extrapolation"] = 2

    two = edited(tmp_path, "two.json", factor_two)
    by_option = solve_json(capsys, str(AWS_006), "--extrapolation", "2")
    assert by_option["plan"] == solve_json(capsys, two)["plan"]
    assert by_option["details"]["workers"] == 1  # |N| 1 is admitted at x2

    def pinned(d):
        d["workload"]["domain"]["extrapolation_workers"] = 1

    fixed = edited(tmp_path, "pinned.json", pinned)
    assert solve_json(capsys, fixed, "--extrapolation", "2")["plan"] == by_option["plan"]


def test_domain_cost_reports_the_proven_ratio(tmp_path, capsys):
    """--domain-cost: the domain-free optimum and the ratio, equal to two separate solves."""
    out = solve_json(capsys, str(AWS_006), "--domain-cost")
    free = solve_json(capsys, str(AWS_006), "--no-domain")
    report = out["details"]["domain_cost"]
    assert report["proven"] is True
    assert report["without_domain"]["cost"] == free["cost"]
    assert report["without_domain"]["plan"] == free["plan"]
    assert report["ratio"] == pytest.approx(out["cost"] / free["cost"], rel=1e-12)
    assert report["ratio"] > 1 and report["ratio_bounds"] == [report["ratio"]] * 2
    assert "domain cost: x" in out["message"] and "(proven;" in out["message"]


def test_domain_cost_of_a_heuristic_is_labelled_not_proven(capsys):
    """A heuristic proves no bound: no ratio, only [1, ...] bounds, and the note says so."""
    out = solve_json(capsys, str(AWS_006), "--method", "heuristic", "--domain-cost")
    report = out["details"]["domain_cost"]
    assert report["proven"] is False and report["ratio"] is None
    assert report["ratio_bounds"][0] >= 1 and report["ratio_bounds"][1] is None
    assert "domain cost: not proven" in out["message"]


def test_predict_takes_the_domain_options(capsys):
    """predict --no-domain admits the one-worker plan the domain refuses; --extrapolation 2
    admits its |N| but not its iterations (below the floor)."""
    argv = ["predict", str(AWS_006), "--counts", "p4d.24xlarge=1", "--json"]
    assert main(argv) == 1  # infeasible: outside the domain
    refused = json.loads(capsys.readouterr().out)
    assert not refused["inside_domain"]
    assert main(argv + ["--no-domain"]) == 0
    assert json.loads(capsys.readouterr().out)["inside_domain"]
    assert main(argv + ["--extrapolation", "2"]) == 1
    widened = json.loads(capsys.readouterr().out)
    assert any("below the domain's floor of 100" in r for r in widened["reasons"])


@pytest.mark.parametrize(
    "argv, needles",
    [
        (["solve", str(AWS_006), "--extrapolation", "0.5"], ["--extrapolation", ">= 1"]),
        (["solve", str(AWS_006), "--extrapolation", "2", "--no-domain"], ["--extrapolation", "--no-domain"]),
        (["solve", str(AWS_006), "--domain-cost", "--no-domain"], ["--domain-cost", "--no-domain"]),
        (["predict", str(AWS_006), "--counts", "p4d.24xlarge=1", "--extrapolation", "nan"], ["--extrapolation"]),
    ],
)
def test_bad_domain_options_give_one_error(capsys, argv, needles):
    one_error(capsys, argv, *needles)


def test_options_need_a_domain(tmp_path, capsys):
    bare = edited(tmp_path, "bare.json", lambda d: d["workload"].pop("domain"))
    one_error(capsys, ["solve", bare, "--extrapolation", "2"], "--extrapolation", "no workload.domain")
    one_error(capsys, ["solve", bare, "--domain-cost"], "--domain-cost", "no workload.domain")
