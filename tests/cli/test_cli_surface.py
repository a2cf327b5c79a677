"""The command line's surface (issue 22): exit codes, --version, --help, one-line errors,
standard input, ``list`` and ``build``.

Oracles: pyproject.toml for the version, docs/cli.md's table for the exit codes, the
published Table I optimum ($5.448374, README and spec) for a solve from standard input,
docs/catalog-format.md's printed result for ``build``, the files under data/ for ``list``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import dnnprov
from dnnprov.cli import COMMAND_GROUPS, COMMANDS, build_parser, main
from dnnprov.cli.common import EXIT_BAD_INPUT, EXIT_CODES, EXIT_NO_PLAN, EXIT_OK

REPO = Path(__file__).resolve().parents[2]
TABLE1 = REPO / "data/instances/spot/paper-table1.json"
CLI = [sys.executable, "-m", "dnnprov"]
TABLE1_OPTIMUM = 5.448374  # spotDNN Table I setting, proven by milp (README, docs/cli.md)


def _cli(*args: str, stdin: str | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True, timeout=120, cwd=cwd)


def _table1(**changes: object) -> str:
    data = json.loads(TABLE1.read_text())
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        data[section][key] = value
    return json.dumps(data)


# ------------------------------------------------------------------ exit codes
def test_exit_codes_follow_the_table():
    """A plan 0, a proven-infeasible answer 1 (no plan), a bad file 2."""
    optimal = _cli("solve", "-", "--json", stdin=_table1())
    assert optimal.returncode == EXIT_OK and json.loads(optimal.stdout)["status"] == "optimal"
    infeasible = _cli("solve", "-", "--json", stdin=_table1(slo__time_s=100))
    assert json.loads(infeasible.stdout)["status"] == "infeasible"
    assert infeasible.returncode == EXIT_NO_PLAN  # `dnnprov solve x && launch` does not launch
    bad = _cli("solve", "-", stdin=_table1(slo__time_s=-1))
    assert bad.returncode == EXIT_BAD_INPUT and bad.stderr.count("\n") == 1


def test_limit_with_a_plan_is_0_and_without_one_is_1():
    large = str(REPO / "data/benchmarks/large/large-024.json")
    with_plan = _cli("solve", large, "--time-limit", "2", "--json")
    out = json.loads(with_plan.stdout)
    assert out["status"] == "limit" and out["plan"] is not None and with_plan.returncode == EXIT_OK
    without = _cli("solve", large, "--method", "enumerate", "--time-limit", "0.001", "--json")
    out = json.loads(without.stdout)
    assert out["plan"] is None and without.returncode == EXIT_NO_PLAN, out


def test_one_exit_code_table_in_code_help_and_docs():
    docs = (REPO / "docs/cli.md").read_text()
    rows = dict(re.findall(r"^\| (\d+) \| (.+?) \|$", docs.split("Exit codes", 1)[1].split("\n\n", 2)[1], re.MULTILINE))
    assert {int(code): meaning.replace("\\|", "|") for code, meaning in rows.items()} == dict(EXIT_CODES)
    help_text = _cli("--help").stdout
    for code, meaning in EXIT_CODES:
        assert re.search(rf"^\s*{code}\s+{re.escape(meaning)}$", help_text, re.MULTILINE), (code, help_text)


# ------------------------------------------------------------------ version and help
def test_version_is_the_package_version():
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    run = _cli("--version")
    assert run.returncode == 0 and run.stdout.strip() == f"dnnprov {version}"
    assert dnnprov.__version__ == version


def test_help_groups_every_command_and_only_real_ones():
    """--help lists every registered subcommand once, under its group; the table names no
    command that no module registers."""
    parser = build_parser()
    registered = set(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)
    assert registered == set(COMMANDS)
    text = _cli("--help").stdout
    for title, group in COMMAND_GROUPS.items():
        listed = [line.split()[0] for line in text.split(f"  {title}:\n", 1)[1].splitlines()[: len(group)]]
        assert listed == [name for name, _, _ in group], (title, text)


def _parsers(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """Every (argv prefix, parser) of the tree, subcommands of subcommands included."""
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, (*prefix, name))


def test_every_help_shows_every_default():
    """Each option with a default (not None/False) says it in its help entry."""
    missing = []
    for prefix, parser in _parsers(build_parser()):
        for action in parser._actions:
            if (
                not action.option_strings
                or action.default in (None, False, argparse.SUPPRESS)
                or isinstance(action, (argparse._HelpAction, argparse._VersionAction))
            ):
                continue
            entry = parser._get_formatter()._format_action(action)
            if "default" not in entry:
                missing.append(f"{' '.join(prefix)} {action.option_strings[-1]}")
    assert not missing
    assert "(default: 60.0)" in " ".join(_cli("solve", "--help").stdout.split())


# ------------------------------------------------------------------ one-line errors
def _bad_command_lines(seed: int = 22) -> list[list[str]]:
    """Bad command lines from every parser: unknown options, missing and bad values, bad choices,
    unknown commands."""
    lines: list[list[str]] = [[], ["--nope"], ["solv"], ["sovle", "x"], ["--version", "extra"][1:], ["--", "solve"]]
    for prefix, parser in _parsers(build_parser()):
        if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
            lines += [[*prefix, "no-such-subcommand"], [*prefix]] if prefix else []
            continue
        lines.append([*prefix, "--no-such-option"])
        for action in parser._actions:
            if not action.option_strings or action.nargs == 0 or isinstance(action, argparse._HelpAction):
                continue
            option = action.option_strings[-1]
            lines.append([*prefix, option])  # the value is missing
            if action.choices is not None:
                lines.append([*prefix, option, "zz-not-a-choice"])
            if action.type in (int, float) or getattr(action.type, "__name__", "") in ("parse",):
                lines.append([*prefix, option, "not-a-number"])
    rng = random.Random(seed)
    words = ["--json", "--time-limit", "-x", "--out", "%s", "\x1b[31mred", "--methods", "--", "-"]
    for _ in range(60):  # unknown commands with noise
        lines.append(
            [
                "".join(rng.choice("abcdefghz-") for _ in range(rng.randint(1, 8))).lstrip("-") or "q",
                *rng.sample(words, 2),
            ]
        )
    return lines


BAD = _bad_command_lines()


def test_enough_bad_command_lines():
    assert len(BAD) >= 300


@pytest.mark.parametrize("argv", BAD, ids=lambda argv: " ".join(argv)[:60] or "(none)")
def test_every_bad_command_line_is_one_error_line(argv, capsys):
    assert main(argv) == EXIT_BAD_INPUT, argv
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert len(err) == 1 and err[0].startswith("dnnprov: error: "), captured.err
    assert "usage:" not in captured.err and captured.out == ""


# ------------------------------------------------------------------ standard input
@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_instance_from_standard_input(name):
    run = _cli("solve", name, "--json", stdin=TABLE1.read_text())
    assert run.returncode == 0, run.stderr
    assert round(json.loads(run.stdout)["cost"], 6) == TABLE1_OPTIMUM


def test_empty_standard_input_is_one_error():
    run = _cli("show", "-", stdin="")
    assert run.returncode == EXIT_BAD_INPUT and run.stderr.startswith("dnnprov: error: standard input: ")
    assert run.stderr.count("\n") == 1


# ------------------------------------------------------------------ list and build
def test_list_names_every_embedded_file_and_each_reads():
    run = _cli("list", "--json")
    assert run.returncode == 0, run.stderr
    listed = json.loads(run.stdout)
    on_disk = {
        kind: sorted(
            p.relative_to(REPO / "data" / kind).with_suffix("").as_posix()
            for p in (REPO / "data" / kind).rglob("*.json")
        )
        for kind in listed
    }
    assert {kind: sorted(e["name"] for e in entries) for kind, entries in listed.items()} == on_disk
    assert len(on_disk["instances"]) >= 17 and len(on_disk["catalogs"]) >= 2
    for entry in listed["instances"]:
        assert dnnprov.read_instance(entry["use"]).name
    text = _cli("list", "catalogs").stdout
    assert "aws-table3-2023-01" in text and "instances:" not in text


def test_build_writes_an_instance_that_solves_as_the_docs_say(tmp_path):
    """docs/catalog-format.md joins the Table III catalog and the ResNet-110 profile (SLO 0.8,
    4000 s, quota 10 on two types, one m5.xlarge PS at 0.192 $/h) and prints the optimum
    1 x g4dn.4xlarge + 3 x g3.8xlarge at $2.799967; `dnnprov build` gives the same instance."""
    out = tmp_path / "built.json"
    run = _cli(
        "build",
        "--catalog",
        "aws-table3-2023-01",
        "--profile",
        "spot/resnet110-paper",
        "--target-loss",
        "0.8",
        "--deadline",
        "4000",
        "--quota",
        "g4dn.4xlarge=10",
        "--quota",
        "g3.8xlarge=10",
        "--ps-price-per-h",
        "0.192",
        "--out",
        str(out),
    )
    assert run.returncode == 0, run.stderr
    problem = dnnprov.read_instance(out)  # validates against the schema and checks
    assert [t.name for t in problem.instance_types] == ["g4dn.4xlarge", "g3.8xlarge"]
    solved = _cli("solve", str(out), "--json")
    result = json.loads(solved.stdout)
    assert result["status"] == "optimal" and round(result["cost"], 6) == 2.799967
    assert result["plan"]["counts"] == {"g4dn.4xlarge": 1, "g3.8xlarge": 3}
    again = _cli(
        "build",
        "--catalog",
        "aws-table3-2023-01",
        "--profile",
        "spot/resnet110-paper",
        "--target-loss",
        "0.8",
        "--deadline",
        "4000",
        "--out",
        str(out),
    )
    assert again.returncode == EXIT_BAD_INPUT and "--out" in again.stderr  # no silent overwrite


def test_build_budget_and_bad_names(tmp_path):
    run = _cli(
        "build",
        "--catalog",
        "aws-table3-2023-01",
        "--profile",
        "spot/resnet110-paper",
        "--target-loss",
        "0.8",
        "--deadline",
        "4000",
        "--budget",
        "1.5",
        "--out",
        "-",
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["constraints"]["budget_usd"] == 1.5
    for option, value in (("--catalog", "no-such-catalog"), ("--profile", "spot/no-such-profile")):
        args = {"--catalog": "aws-table3-2023-01", "--profile": "spot/resnet110-paper", option: value}
        bad = _cli(
            "build",
            *[x for kv in args.items() for x in kv],
            "--target-loss",
            "0.8",
            "--deadline",
            "4000",
            "--out",
            str(tmp_path / "x.json"),
        )
        assert bad.returncode == EXIT_BAD_INPUT and bad.stderr.startswith(f"dnnprov: error: {option}"), bad.stderr
