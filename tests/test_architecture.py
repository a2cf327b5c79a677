"""The package's rooms and their import rule (docs/architecture.md), read from the source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: where each installed package's source lives in the checkout
SOURCES = {
    "dnnprov": REPO / "dnnprov",
    "dnnprov.formulations": REPO / "formulations",
    "dnnprov.solvers": REPO / "solvers",
}
BASICS = {"errors", "result", "progress", "json_files"}
ENTRY = {"dispatch", "model_solve"}
TOOLS = {"profiling", "cloud", "revocation", "benchsets", "batch", "fuzz"}
FRONT = {"cli", "service"}
#: the control loop drives clouds (cloud/) with launch policies (revocation/): above both tools
CONTROL = {"control"}
#: the reference trainer and its local cloud (dnnprov run --cloud local): on top of the control loop
TRAINING = {"training"}
BELOW_ENTRY = {"basics", "problems", "models", "io", "formulations", "solvers"}
#: supervised execution (worker processes, the pool, Dask): for the batch tool and the service
EXECUTION = {"execution"}
#: room -> the rooms it may import (besides itself)
ALLOWED = {
    "basics": set(),
    "problems": {"basics"},
    "models": {"basics", "problems"},
    "io": {"basics", "problems", "models"},
    "formulations": {"basics", "problems", "models"},
    "solvers": {"basics", "problems", "models", "formulations"},
    "entry": BELOW_ENTRY,
    "package": BELOW_ENTRY | {"entry"},
    "execution": BELOW_ENTRY | {"entry", "package"},
    **{tool: BELOW_ENTRY | {"entry", "package"} for tool in TOOLS},
    "control": BELOW_ENTRY | {"entry", "package", "cloud", "revocation"},
    "training": BELOW_ENTRY | {"entry", "package"} | TOOLS | CONTROL,
    **{front: BELOW_ENTRY | {"entry", "package"} | EXECUTION | TOOLS | CONTROL | TRAINING | FRONT for front in FRONT},
}
ALLOWED["batch"] = ALLOWED["batch"] | {"benchsets"} | EXECUTION  # .jsonl sets are read through benchsets


def room(module: str) -> str:
    """The room of a dotted module name (``dnnprov.models.spot`` -> ``models``)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "package"
    top = parts[1]
    if top in BASICS:
        return "basics"
    if top in ENTRY:
        return "entry"
    if top == "__version__":
        return "package"
    return top


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    found = {}
    for package, folder in SOURCES.items():
        for path in folder.rglob("*.py"):
            parts = [p for p in path.relative_to(folder).with_suffix("").parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


def imports(path: Path) -> set[str]:
    """The dnnprov modules a file imports (at any depth of the file, lazy imports included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "dnnprov":
            names.add(node.module)
            known = modules()
            names.update(f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.split(".")[0] == "dnnprov")
    return names


MODULES = modules()


def test_every_room_is_known():
    """Each module belongs to a room of docs/architecture.md."""
    unknown = sorted(m for m in MODULES if room(m) not in ALLOWED and room(m) != "__main__")
    assert not unknown


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_from_a_room_above_it(module):
    """A module imports only from its own room and the rooms below it."""
    own = room(module)
    if own == "__main__":
        return
    bad = sorted(name for name in imports(MODULES[module]) if room(name) != own and room(name) not in ALLOWED[own])
    assert not bad, f"{module} ({own}) imports {bad}"


def test_the_rule_can_fail():
    """The check catches an upward import (a model importing a solver)."""
    assert "solvers" not in ALLOWED[room("dnnprov.models.spot")]
    assert room("dnnprov.solvers.spot.exact") == "solvers"
    assert room("dnnprov.cli.batch") == "cli" and room("dnnprov.errors") == "basics"
    # revocation handling and the cloud side are two tools: neither imports the other
    assert room("dnnprov.revocation.simulate") == "revocation"
    assert "revocation" not in ALLOWED["cloud"] and "cloud" not in ALLOWED["revocation"]


#: about 600 lines of the style before the formatter; ruff format grew the same code by 10-25 %
MAX_MODULE_LINES = 750


def test_long_modules_say_why():
    """A module over 750 lines (as ruff format writes it) explains at its top why it is not split
    (docs/architecture.md)."""
    silent = []
    for module, path in MODULES.items():
        lines = path.read_text().splitlines()
        if len(lines) > MAX_MODULE_LINES and "why this module is long" not in "\n".join(lines[:40]).lower():
            silent.append(f"{module} ({len(lines)} lines)")
    assert not silent
