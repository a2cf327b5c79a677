"""Every repository path cited in README.md and docs/ exists (issue 23: 17 cited test files
had moved with the layout of issue 9 and still named their old places).

A cited path is a word starting with one of the repository's top folders (``tests/``,
``benchmarks/``, ``docs/``, ``data/``, ``dnnprov/``, ``formulations/``, ``solvers/``); a
pytest node id (``tests/x.py::test_y``) is checked for its file; ``NOT_IN_CHECKOUT`` lists
the few cited paths that are examples or generated outputs. Not paths: words with a
placeholder (``{a,b}``, ``*``, ``<...>``, ``NAME``-style capitals after the folder) and
format names such as ``dnnprov/spot`` (``dnnprov/`` words without a file suffix or a
trailing slash). ``dnnprov/data/...`` is the installed name of ``data/...``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TOP = ("tests", "benchmarks", "docs", "data", "dnnprov", "formulations", "solvers")
CITED = re.compile(r"(?<![\w./:-])((?:" + "|".join(TOP) + r")/[\w./-]*[\w/])")
PLACEHOLDER = re.compile(r"[{}*<>]|/[A-Z][A-Z_]+(?:/|$|\.)")
#: Cited paths that are not in a checkout, and why.
NOT_IN_CHECKOUT = {
    "data/x": "docs/batch.md: an example of one folder spelt two ways for --resume",
    "data/benchmarks/trace/generated/": "written by `dnnprov generate trace`, ignored by git",
    "data/benchmarks/trace/generated/trace-100000.jsonl": "written by `dnnprov generate trace --count 100000`",
}


def cited_paths(text: str) -> list[str]:
    """The repository paths a page cites, in order (placeholders and format names left out)."""
    found = []
    for m in CITED.finditer(text):
        path, after = m.group(1), text[m.end() : m.end() + 1]
        if after in "{*<" or PLACEHOLDER.search(path):
            continue
        if path.startswith("dnnprov/") and not (path.endswith("/") or re.search(r"\.\w+$", path)):
            continue  # a format name such as dnnprov/spot
        found.append(path)
    return found


def resolve(path: str) -> Path:
    """The file or folder a cited path names in the checkout."""
    if path.startswith("dnnprov/data/"):
        path = path[len("dnnprov/") :]
    return REPO / path


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_cited_repository_path_exists(page: Path) -> None:
    """Each path a page cites names a file or folder of the repository."""
    missing = sorted({p for p in cited_paths(page.read_text()) if p not in NOT_IN_CHECKOUT and not resolve(p).exists()})
    assert not missing, f"{page.relative_to(REPO)} cites paths that do not exist: {missing}"


def test_the_checker_sees_paths_and_skips_placeholders() -> None:
    """The extraction finds real citations and leaves out placeholders and format names."""
    text = (
        "see `tests/io/test_paper_data.py::test_x`, tests/service/ and `data/workloads/serverless/"
        "{espcn,1dcnn}.json`, `dnnprov/spot` v1, dnnprov/data/instances/spot/paper-table1.json, "
        "`data/instances/spot/*.json`, ../shared/data/x.csv"
    )
    assert cited_paths(text) == [
        "tests/io/test_paper_data.py",
        "tests/service/",
        "dnnprov/data/instances/spot/paper-table1.json",
    ]
    assert all(resolve(p).exists() for p in cited_paths(text))
