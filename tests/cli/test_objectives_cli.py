"""``dnnprov pareto`` and ``dnnprov solve --objective/--budget`` (issue 29): JSON shapes, exit codes,
one-line errors. Oracle: the issue's Table I figures (2,514.09 s under $6; the front)."""

from __future__ import annotations

import json

import pytest

from dnnprov.cli import main
from dnnprov.cli.common import EXIT_BAD_INPUT, EXIT_NO_PLAN, EXIT_OK

TABLE1 = "embedded:spot/paper-table1.json"


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_pareto_json_lists_proven_points_with_the_settings(capsys):
    code, out, _ = run(capsys, "pareto", TABLE1, "--deadlines", "2400:2600", "--json")
    front = json.loads(out)
    assert code == EXIT_OK
    assert front["deadlines"] == {"from_s": 2400.0, "to_s": 2600.0} and front["method"] == "milp"
    assert front["status"] == "optimal" and front["complete"] is True and front["figure"] is None
    assert [set(p) for p in front["points"]] == [{"plan", "time_s", "cost_usd", "proven"}] * 5
    assert front["points"][-1] == {
        "plan": {"counts": {"g4dn.4xlarge": 3, "g3.8xlarge": 5, "g3.16xlarge": 2}, "ps": 1},
        "time_s": 2567.70,
        "cost_usd": 5.448374,
        "proven": True,
    }
    times = [p["time_s"] for p in front["points"]]
    assert times == sorted(times)


def test_pareto_text_and_whole_front(capsys):
    code, out, _ = run(capsys, "pareto", TABLE1)
    assert code == EXIT_OK and "37 points (37 proven)" in out and "no upper deadline" in out
    assert "   2381.24       7.233149  yes" in out


def test_pareto_with_no_plan_in_the_range_exits_1(capsys):
    code, out, _ = run(capsys, "pareto", TABLE1, "--deadlines", ":2000", "--json")
    assert code == EXIT_NO_PLAN and json.loads(out)["status"] == "infeasible" and json.loads(out)["points"] == []


def test_pareto_draws_the_figure(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    figure = tmp_path / "front.png"
    code, out, _ = run(capsys, "pareto", TABLE1, "--deadlines", "2400:", "--out", str(figure))
    assert code == EXIT_OK and out.rstrip().endswith(str(figure))
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_solve_least_time_under_a_budget(capsys):
    code, out, _ = run(capsys, "solve", TABLE1, "--objective", "time", "--budget", "6", "--json")
    result = json.loads(out)
    assert code == EXIT_OK and result["status"] == "optimal" and result["objective"] == "time"
    assert (result["time_s"], result["cost"], result["bound"], result["objective_value"]) == (
        2514.09,
        5.924872,
        2514.09,
        2514.09,
    )
    code, out, _ = run(capsys, "solve", TABLE1, "--objective", "time", "--budget", "6", "--method", "enumerate")
    assert code == EXIT_OK and "objective: time: 2514.09 s, bound 2514.09 s" in out


def test_solve_weighted(capsys):
    code, out, _ = run(capsys, "solve", TABLE1, "--objective", "weighted:0.002", "--json")
    result = json.loads(out)
    assert code == EXIT_OK and result["objective"] == "weighted:0.002"
    assert result["objective_value"] == pytest.approx(5.448374 + 0.002 * 2567.70, rel=1e-12)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("solve", TABLE1, "--objective", "time"), "constraints.budget_usd"),
        (("solve", TABLE1, "--objective", "fast"), "objective"),
        (("solve", TABLE1, "--objective", "weighted:x"), "objective"),
        (("solve", TABLE1, "--objective", "time", "--budget", "0"), "--budget"),
        (("solve", TABLE1, "--objective", "time", "--budget", "6", "--method", "heuristic"), "objective"),
        (("solve", TABLE1, "--objective", "weighted:1", "--gap", "0.1"), "gap"),
        (("solve", TABLE1, "--objective", "weighted:1", "--domain-cost"), "--domain-cost"),
        (("pareto", TABLE1, "--deadlines", "2600"), "--deadlines"),
        (("pareto", TABLE1, "--deadlines", "x:1"), "--deadlines"),
        (("pareto", TABLE1, "--deadlines", "2600:2400"), "--deadlines"),
        (("pareto", TABLE1, "--out", "front.txt"), "--out"),
        (("pareto", TABLE1, "--time-limit", "-1"), "--time-limit"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, args, field):
    code, out, err = run(capsys, *args)
    assert code == EXIT_BAD_INPUT and out == ""
    assert err.count("\n") == 1 and err.startswith(f"dnnprov: error: {field}:")
