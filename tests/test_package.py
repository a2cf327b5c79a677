"""The package's public surface: lazy at run time, explicit for type checkers (issue 32)."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import dnnprov

INIT = Path(dnnprov.__file__)


def type_checking_imports() -> dict[str, str]:
    """Public name -> module, as imported under ``if TYPE_CHECKING:`` in dnnprov/__init__.py."""
    names = {}
    for node in ast.parse(INIT.read_text()).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                for alias in imp.names:
                    assert alias.asname == alias.name, f"{alias.name}: re-exported as itself"
                    names[alias.name] = imp.module
    return names


def test_import_loads_no_numpy():
    """`import dnnprov` (and reading its version) imports no NumPy, Pyomo or HiGHS."""
    code = (
        "import sys, dnnprov; dnnprov.__version__; "
        "print(sorted(m for m in ('numpy', 'pyomo', 'highspy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_solve_is_the_function():
    """`dnnprov.solve` is the function, also once its module has been imported; the module keeps its names."""
    import dnnprov.dispatch

    assert inspect.isfunction(dnnprov.solve)
    assert dnnprov.solve is dnnprov.dispatch.solve
    assert dnnprov.dispatch.METHODS == dnnprov.METHODS
    assert type(dnnprov).__name__ == "module"  # no class swap of the package module


def test_type_checkers_see_every_public_name():
    """The imports type checkers read, the lazy table and `__all__` name the same things."""
    seen = type_checking_imports()
    assert seen == dnnprov._EXPORTS
    assert sorted(dnnprov.__all__) == sorted(seen)
    for name, module in seen.items():
        assert getattr(dnnprov, name) is getattr(sys.modules[module], name)
