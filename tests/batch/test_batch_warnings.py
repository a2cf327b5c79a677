"""`dnnprov batch` over many files: each plausibility warning names the file it came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dnnprov
from dnnprov.cli import main


def test_each_files_warning_names_that_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Two files with the same implausible PS price (and one that then fails to read, a .jsonl with
    a bad second line): one warning line per file, each naming it; without the file the second
    file's warning was the first's text and was shown once for both."""
    data = json.loads(dnnprov.embedded_instance("spot/paper-table1.json").read_text())
    data["platform"]["ps_price_per_h"] = 1000.0
    for name in ("a", "b"):
        (tmp_path / f"{name}.json").write_text(json.dumps({**data, "name": name}))
    (tmp_path / "c.jsonl").write_text(json.dumps({**data, "name": "c"}) + "\n{not json\n")
    main(["batch", str(tmp_path), "--methods", "heuristic", "--out", str(tmp_path / "out.csv")])
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("dnnprov: warning:")]
    assert sorted(warnings) == [
        f"dnnprov: warning: {(tmp_path / f).as_posix()}: platform.ps_price_per_h: $1000/h "
        "is above the plausible $15/h (real m5 nodes cost at most $12.82/h (spot, 2022)): "
        "a price in cents? (a warning: used as given)"
        for f in ("a.json", "b.json", "c.jsonl")
    ]
