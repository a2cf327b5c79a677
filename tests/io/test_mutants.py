"""Hostile input: hundreds of seeded mutants of valid instance files through the CLI.

Every mutant must give either exit 2 with exactly one ``dnnprov: error: FIELD: PROBLEM``
line on standard error that names a field (or the file), or a clean result, within 20 s;
never a traceback, a hang or an internal error. Most mutants run through
``dnnprov.cli.main`` in this process (fast); the ones where the process matters
(encodings, recursion, a closed standard output, a FIFO) run the real CLI in a subprocess.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dnnprov
from dnnprov.cli import main

EMBEDDED = Path(str(dnnprov.embedded_instance("spot/paper-table1.json"))).parents[1]
REPO = Path(__file__).resolve().parents[2]
BASES = sorted(EMBEDDED.rglob("*.json")) + [
    REPO / "data/benchmarks/small/serverless-000.json",
    REPO / "data/benchmarks/large/large-000.json",
]
TOP_LEVEL = {
    "format",
    "version",
    "name",
    "notes",
    "model",
    "instance_types",
    "workload",
    "platform",
    "slo",
    "constraints",
    "(top level)",
}
HANG_GUARD_S = 300.0  # a subprocess that has not answered by then hangs: not a timing target
MUTANTS = 400

HOSTILE: list[Any] = [
    None,
    True,
    False,
    -1,
    0,
    1.5,
    -0.0,
    1e308,
    -1e308,
    2**63,
    2**64 + 7,
    10**6,
    1e-320,
    "",
    "x",
    "5",
    "\x1b[31mred",
    "\u202e",
    "a" * 5000,
    "\ud800",
    [],
    {},
    [1, 2, 3],
    [[[]]],
    {"a": 1},
    math.nan,
    math.inf,
    -math.inf,
    10**40,
]


# ------------------------------------------------------------------ mutations
def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (tuple of keys and indexes) to a node below ``node``."""
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            found += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += _paths(v, prefix + (i,))
    return found


def _parent(doc: Any, path: tuple) -> Any:
    for key in path[:-1]:
        doc = doc[key]
    return doc


def _tree_mutant(doc: dict, rng: np.random.Generator) -> tuple[str, dict]:
    """One change to the parsed instance: (description, mutated document)."""
    doc = copy.deepcopy(doc)
    paths = _paths(doc)
    path = paths[int(rng.integers(len(paths)))]
    parent, key = _parent(doc, path), path[-1]
    op = int(rng.integers(8))
    if op <= 2:  # a hostile value
        value = HOSTILE[int(rng.integers(len(HOSTILE)))]
        parent[key] = copy.deepcopy(value)
        return f"set {path} = {str(value)[:30]!r}", doc
    if op == 3 and isinstance(parent, dict):
        del parent[key]
        return f"delete {path}", doc
    if op == 4 and isinstance(parent, dict):
        parent[f"{key}_ms" if rng.random() < 0.5 else f"x{key}"] = parent.pop(key)
        return f"rename {path}", doc
    if op == 5 and isinstance(parent[key], (int, float)) and not isinstance(parent[key], bool):  # scale far out
        factor = [10**6, -1, 0, 10**4, 1e-9][int(rng.integers(5))]
        parent[key] = parent[key] * factor
        return f"scale {path} x {factor}", doc
    if op == 6:  # deep nesting
        value: Any = parent[key]
        for _ in range(int(rng.integers(30, 60))):
            value = [value]
        parent[key] = value
        return f"nest {path}", doc
    other = paths[int(rng.integers(len(paths)))]  # op 7 and fall-through: copy another node here
    parent[key] = copy.deepcopy(_parent(doc, other)[other[-1]])
    return f"copy {other} to {path}", doc


def _text_mutant(text: str, doc: dict, rng: np.random.Generator) -> tuple[str, bytes]:
    """One change to the file's bytes: duplicate keys, truncation, encodings, bad bytes."""
    op = int(rng.integers(7))
    if op == 0:
        keys = sorted({str(p[-1]) for p in _paths(doc) if isinstance(p[-1], str)})
        k = keys[int(rng.integers(len(keys)))]
        at = text.find(f'"{k}":')
        return f"duplicate key {k!r}", (text[:at] + f'"{k}": 0, ' + text[at:]).encode()
    if op == 1:
        cut = int(rng.integers(1, len(text)))
        return f"truncate at {cut}", text[:cut].encode()
    if op == 2:
        raw = bytearray(text.encode())
        i = int(rng.integers(len(raw)))
        raw[i] = int(rng.integers(128, 256))
        return f"byte 0x{raw[i]:02x} at {i}", bytes(raw)
    if op == 3:
        return "UTF-16", text.encode("utf-16")
    if op == 4:
        return "latin-1 name", text.replace('"name": "', '"name": "caf\xe9 ', 1).encode("latin-1")
    if op == 5:
        i = int(rng.integers(len(text)))
        return f"NUL at {i}", text[:i].encode() + b"\x00" + text[i:].encode()
    return "UTF-8 BOM (valid)", b"\xef\xbb\xbf" + text.encode()


def mutants(seed: int = 14, count: int = MUTANTS) -> list[tuple[str, bytes]]:
    """``count`` seeded mutants of the base files: (description, file bytes)."""
    rng = np.random.default_rng(seed)
    docs = [(b.name, json.loads(b.read_text())) for b in BASES]
    out = []
    for i in range(count):
        name, doc = docs[i % len(docs)]
        if rng.random() < 0.7:
            what, mutated = _tree_mutant(doc, rng)
            if rng.random() < 0.3:  # a second change on top
                more, mutated = _tree_mutant(mutated, rng)
                what += f"; {more}"
            try:
                data = json.dumps(mutated).encode("utf-8", "surrogatepass")
            except ValueError:
                data = json.dumps(mutated, ensure_ascii=True).encode()
        else:
            what, data = _text_mutant(json.dumps(doc, indent=1), doc, rng)
        out.append((f"{name}: {what}", data))
    return out


# ------------------------------------------------------------------ running the CLI
def run_in_process(argv: list[str]) -> tuple[int, str, str]:
    """``dnnprov.cli.main(argv)`` with captured output: (code, stdout, stderr).

    No timings are asserted here (the machines that run the tests are shared and loaded):
    how fast bad input is refused is measured by benchmarks/cli_startup.py."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _warnings_only(stderr: str) -> bool:
    """Whether ``stderr`` holds nothing but one-line ``dnnprov: warning:`` lines (a mutant with
    an implausible magnitude is warned about, docs/instance-format.md)."""
    return all(line.startswith("dnnprov: warning: ") and line.isprintable() for line in stderr.splitlines())


def check_clean(code: int, stderr: str, path: Path, what: str) -> None:
    """Exit 0 (with nothing or only plausibility-warning lines on stderr), or exit 2 with one
    error line that names a field of the file, or the file."""
    assert code in (0, 2), f"{what}: exit {code}: {stderr}"
    if code == 0:
        assert _warnings_only(stderr), f"{what}: {stderr}"
        return
    lines = stderr.splitlines()
    assert len(lines) == 1 and stderr.endswith("\n"), f"{what}: {stderr!r}"
    assert lines[0].startswith("dnnprov: error: "), f"{what}: {stderr!r}"
    assert all(c == "\t" or c.isprintable() for c in lines[0]), f"{what}: raw control characters: {stderr!r}"
    rest = lines[0].removeprefix("dnnprov: error: ")
    if rest.startswith(str(path) + ": "):
        return
    field = rest.split(": ", 1)[0]
    assert field and field.split(".")[0].split("[")[0] in TOP_LEVEL | _top_keys(path), (
        f"{what}: no field named: {stderr!r}"
    )


def _top_keys(path: Path) -> set[str]:
    """The top-level keys of the JSON object in ``path`` (none if it does not parse)."""
    try:
        data = json.loads(path.read_bytes())
    except ValueError:
        return set()
    return set(data) if isinstance(data, dict) else set()


@pytest.fixture(scope="module")
def mutant_files(tmp_path_factory) -> list[tuple[str, Path]]:
    """The mutants written to files."""
    folder = tmp_path_factory.mktemp("mutants")
    files = []
    for i, (what, data) in enumerate(mutants()):
        path = folder / f"mutant-{i:03d}.json"
        path.write_bytes(data)
        files.append((what, path))
    return files


def test_there_are_enough_mutants_of_every_kind(mutant_files):
    """At least 300 mutants, over every base file, most of them refused and some valid."""
    assert len(mutant_files) >= 300
    assert len({what.split(":")[0] for what, _ in mutant_files}) == len(BASES)
    codes = [run_in_process(["show", str(p)])[0] for _, p in mutant_files[:60]]
    assert codes.count(2) >= 30 and codes.count(0) >= 3


def test_every_mutant_gives_one_clean_line_or_a_result(mutant_files):
    """`dnnprov show` on every mutant: exit 2 with one line naming the field, or exit 0;
    the valid ones are solved by the heuristic (a few by milp, 2 s limit)."""
    valid = []
    for what, path in mutant_files:
        code, out, err = run_in_process(["show", str(path)])
        check_clean(code, err, path, what)
        if code == 0:
            assert out.strip(), what
            valid.append((what, path))
    assert valid
    for i, (what, path) in enumerate(valid):
        method = ["--method", "milp", "--time-limit", "2"] if i < 5 else ["--method", "heuristic"]
        code, out, err = run_in_process(["solve", str(path), *method])
        assert code in (0, 1) and _warnings_only(err), f"{what}: exit {code}: {err}"
        assert " by " in out.splitlines()[0], what


@pytest.mark.parametrize(
    ("what", "change", "field"),
    [
        (
            "a quota of 1e6",
            lambda d: d["instance_types"]["g3.8xlarge"].update(quota=10**6),
            "instance_types.g3.8xlarge.quota",
        ),
        (
            "5,000 types",
            lambda d: d.update(
                instance_types={f"t{i}.x": dict(d["instance_types"]["g3.8xlarge"]) for i in range(5000)}
            ),
            "instance_types",
        ),
        (
            "a PS range to 1e6",
            lambda d: d.setdefault("constraints", {}).update(ps_count=[1, 10**6]),
            "constraints.ps_count[1]",
        ),
        (
            "quota 2^63",
            lambda d: d["instance_types"]["g3.8xlarge"].update(quota=2**63),
            "instance_types.g3.8xlarge.quota",
        ),
        (
            "quota 1e308",
            lambda d: d["instance_types"]["g3.8xlarge"].update(quota=1e308),
            "instance_types.g3.8xlarge.quota",
        ),
        ("format a list", lambda d: d.update(format=["dnnprov/spot"]), "format"),
        ("version 99", lambda d: d.update(version=99), "version"),
        ("ps_type a number", lambda d: d["platform"].update(ps_type=123), "platform.ps_type"),
        ("a lone surrogate", lambda d: d.update(name="a\ud800b"), "name"),
        (
            "an escape sequence in a type name",
            lambda d: d["instance_types"].update({"g\x1b[2J": d["instance_types"].pop("g3.8xlarge")}),
            "instance_types.g\\x1b[2J",
        ),
    ],
)
def test_issue_inputs_are_refused_at_once(what, change, field, tmp_path):
    """The inputs of issue 14 and issue 8: one line naming the field."""
    doc = json.loads((EMBEDDED / "spot/paper-table1.json").read_text())
    change(doc)
    path = tmp_path / "bad.json"
    path.write_bytes(json.dumps(doc).encode("utf-8", "surrogatepass"))
    code, _, err = run_in_process(["show", str(path)])
    check_clean(code, err, path, what)
    assert code == 2 and err.startswith(f"dnnprov: error: {field}: "), err


@pytest.mark.parametrize("kind", ["spot", "serverless"])
def test_from_dict_checks_format_and_version(kind):
    """The Python API refuses what the file reader refuses: version 99, another format."""
    rel = "spot/paper-table1.json" if kind == "spot" else "serverless/paper-table3-resnet50.json"
    doc = json.loads((EMBEDDED / rel).read_text())
    cls = dnnprov.SpotProblem if kind == "spot" else dnnprov.ServerlessProblem
    with pytest.raises(dnnprov.InvalidInputError) as info:
        cls.from_dict(dict(doc, version=99))
    assert info.value.field == "version"
    other = "dnnprov/serverless" if kind == "spot" else "dnnprov/spot"
    with pytest.raises(dnnprov.InvalidInputError) as info:
        cls.from_dict(dict(doc, format=other))
    assert info.value.field == "format"


def test_duplicate_keys_are_refused_naming_the_key(tmp_path):
    """`{"quota": -7, "quota": 5}` and a type listed twice are refused at their place."""
    text = (EMBEDDED / "spot/paper-table1.json").read_text()
    at = text.index('"quota"', text.index('"g3.8xlarge"'))
    cases = {
        "instance_types.g3.8xlarge.quota": text[:at] + '"quota": -7, ' + text[at:],
        "instance_types.g3.8xlarge": text.replace('"instance_types": {', '"instance_types": {"g3.8xlarge": {}, ', 1),
    }
    for field, content in cases.items():
        path = tmp_path / "dup.json"
        path.write_text(content)
        code, _, err = run_in_process(["show", str(path)])
        assert code == 2 and field in err and "key given twice" in err, err


# ------------------------------------------------------------------ the real CLI
def _cli(*args: str, stdin: Any = subprocess.DEVNULL, **kwargs: Any) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dnnprov", *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _hostile_files(folder: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, the start of the expected error's field or message)."""
    text = (EMBEDDED / "spot/paper-table1.json").read_text()
    files: dict[str, tuple[Path, str]] = {}

    def put(name: str, data: bytes, expect: str) -> None:
        path = folder / name
        path.write_bytes(data)
        files[name] = (path, expect)

    put("utf16.json", text.encode("utf-16"), "not UTF-8 text (it looks like UTF-16)")
    put("latin1.json", text.replace("spotDNN", "caf\xe9").encode("latin-1"), "not UTF-8 text")
    put("deep.json", b'{"notes": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested more than 32 levels")
    put(
        "digits.json",
        text.replace('"quota": 5', '"quota": ' + "9" * 5000, 1).encode(),
        "integer literal of 5000 digits",
    )
    put("huge.json", b" " * (9 * 1024 * 1024) + text.encode(), "larger than the limit")
    fifo = folder / "fifo.json"
    os.mkfifo(fifo)
    files["fifo.json"] = (fifo, "not a regular file")
    return files


def test_real_cli_on_hostile_files(tmp_path):
    """Encodings, 100,000 levels of nesting, a 5,000-digit integer, a 9 MB file and a FIFO:
    the real CLI exits 2 with one line, at once (no hang on the FIFO)."""
    files = _hostile_files(tmp_path)
    procs = {name: (_cli("show", str(path)), path, expect) for name, (path, expect) in files.items()}
    for name, (proc, path, expect) in procs.items():
        out, err = proc.communicate(timeout=HANG_GUARD_S)
        assert proc.returncode == 2 and out == "", (name, err)
        assert err.count("\n") == 1 and expect in err and "Traceback" not in err, (name, err)


def test_show_escapes_control_characters_on_the_terminal(tmp_path):
    """Notes with ANSI escapes, a newline and a bidi override print escaped: no raw ESC,
    no forged `dnnprov: error:` line."""
    doc = json.loads((EMBEDDED / "spot/paper-table1.json").read_text())
    doc["notes"] = "\x1b[31mred\x1b[0m\ndnnprov: error: forged \u202e"
    path = tmp_path / "ansi.json"
    path.write_text(json.dumps(doc))
    proc = _cli("show", str(path))
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 0 and err == ""
    assert "\x1b" not in out and "\u202e" not in out
    assert not any(line.startswith("dnnprov: error") for line in out.splitlines())
    assert "\\x1b[31mred\\x1b[0m\\x0adnnprov: error: forged \\u202e" in out


def test_closed_stdout_exits_quietly():
    """Standard output closed before dnnprov writes: exit 141, nothing on standard error."""
    proc = _cli("show", "embedded:spot/paper-table1.json")
    proc.stdout.close()  # the reader is gone before dnnprov has imported numpy
    _, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 141 and err == "", err


@pytest.mark.parametrize(
    "spec",
    [
        "embedded:../../../../etc/passwd",
        "embedded:/etc/passwd",
        "embedded:spot/../../schema/spot-v1.schema.json",
        "embedded:no/such.json",
    ],
)
def test_embedded_paths_stay_inside_the_shipped_instances(spec):
    """`embedded:` cannot reach files outside the shipped instances, in every command."""
    for argv in (
        ["show", spec],
        ["solve", spec],
        ["batch", spec, "--no-progress"],
        ["replan", spec, "--plan", "x.json", "--revoked", "a=1", "--elapsed", "1", "--loss-reached", "1"],
    ):
        code, out, err = run_in_process(argv)
        assert code == 2 and out == "" and err.startswith(f"dnnprov: error: {spec}: "), (argv, err)


def test_embedded_paths_work_in_every_command(tmp_path):
    """`embedded:REL` is accepted by show, solve, replan, export --instance, batch and solve-many
    (replan may find no plan: exit 1 is an answer; a refused path would be exit 2)."""
    spec = "embedded:spot/paper-table1.json"
    code, out, _ = run_in_process(["solve", spec, "--json"])
    assert code == 0
    plan = tmp_path / "plan.json"
    plan.write_text(out)
    checks = [
        ["show", spec],
        [
            "replan",
            spec,
            "--plan",
            str(plan),
            "--revoked",
            "g3.8xlarge=1",
            "--elapsed",
            "600",
            "--loss-reached",
            "1.5",
            "--method",
            "heuristic",
        ],
        ["export", str(plan), "--instance", spec, "--to", "json"],
        ["solve-many", spec, "embedded:serverless/paper-table3-resnet50.json", "--time-limit", "20"],
        ["batch", "embedded:serverless", "--methods", "heuristic", "--workers", "1", "--no-progress"],
    ]
    for argv in checks:
        code, out, err = run_in_process(argv)
        assert code in (0, 1) and out.strip() and err == "", (argv, err)
