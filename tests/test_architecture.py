"""The package's rooms and their import rule (docs/architecture.md), read from the source."""

from __future__ import annotations

import ast
import tomllib
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


def type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """The nodes inside ``if TYPE_CHECKING:`` blocks: read by type checkers, never run."""
    skipped: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.body:
                skipped.update(ast.walk(child))
    return skipped


def imports(path: Path, *, run_time_only: bool = False) -> set[str]:
    """The dnnprov modules a file imports (at any depth of the file, lazy imports included;
    with ``run_time_only``, not those of ``if TYPE_CHECKING:`` blocks)."""
    names = set()
    tree = ast.parse(path.read_text())
    skipped = type_checking_only(tree) if run_time_only else set()
    for node in ast.walk(tree):
        if node in skipped:
            continue
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
    assert room("dnnprov.cli.sets.batch") == "cli" and room("dnnprov.errors") == "basics"
    # revocation handling and the cloud side are two tools: neither imports the other
    assert room("dnnprov.revocation.replay.simulate") == "revocation"
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


def import_cycles() -> list[list[str]]:
    """The strongly connected components (more than one module) of the run-time import graph,
    function-level imports included: modules that need each other to load."""
    graph = {
        m: sorted(n for n in imports(p, run_time_only=True) if n in MODULES and n != m) for m, p in MODULES.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return cycles


def test_no_import_cycles():
    """No two modules need each other to load, lazy imports included (docs/architecture.md)."""
    assert import_cycles() == []


def test_no_private_name_crosses_a_room():
    """A name starting with ``_`` is private to its room: no module of another room imports it."""
    crossing = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "dnnprov"):
                continue
            private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            if any(part.startswith("_") and not part.startswith("__") for part in node.module.split(".")):
                private = [a.name for a in node.names]
            if private and room(node.module) != room(module):
                crossing.append(f"{module} imports {node.module}: {private}")
    assert not crossing


def test_every_package_is_installed():
    """Every folder with an ``__init__.py`` is listed in pyproject.toml's packages (else a wheel
    misses it while an editable install hides the gap)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set()
    for package, folder in config["package-dir"].items():
        for init in (REPO / folder).rglob("__init__.py"):
            found.add(".".join([package, *init.parent.relative_to(REPO / folder).parts]))
    assert found == set(config["packages"])


#: about 1,500 lines of modules, as ruff format writes them: a room larger than this has subrooms
MAX_ROOM_LINES = 1_600


def test_large_rooms_have_subrooms():
    """A folder whose own modules pass ~1,500 lines groups some of them in subrooms
    (docs/architecture.md); no room is exempt."""
    crowded = []
    for folder in {path.parent for path in MODULES.values()}:
        own = sum(len(p.read_text().splitlines()) for p in folder.glob("*.py"))
        subrooms = [d for d in folder.iterdir() if (d / "__init__.py").exists()]
        name = folder.relative_to(REPO).as_posix()
        if own > MAX_ROOM_LINES and not subrooms:
            crowded.append(f"{name} ({own} lines)")
    assert not crowded
