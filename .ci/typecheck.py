"""mypy over the package under the names it installs as.

`formulations/` and `solvers/` install as `dnnprov.formulations` and `dnnprov.solvers`
(`[tool.setuptools.package-dir]` in pyproject.toml), a mapping mypy's command line cannot
express: run on the folders, it would check them as top-level `formulations` and `solvers`
and leave every `from dnnprov.solvers... import` of the core unresolved. This script reads the
configuration of `mypy` (`[tool.mypy]`: the files, the strictness), renames those two
folders' modules, and runs the same build. Errors name the files in the checkout. It always
checks every module (the others are needed to resolve imports); paths given as arguments only
narrow the report to those files or folders.

    .venv/bin/python .ci/typecheck.py                          # the gate, as .ci/run runs it
    .venv/bin/python .ci/typecheck.py solvers/objectives/front.py dnnprov/cli/
"""

from __future__ import annotations

import sys

from mypy.build import build
from mypy.errors import CompileError
from mypy.main import process_options
from mypy.modulefinder import BuildSource

#: checkout folder -> the package it installs as
RENAMED = {"formulations": "dnnprov.formulations", "solvers": "dnnprov.solvers"}


def installed_name(source: BuildSource) -> BuildSource:
    """The source under its installed module name (``solvers.front`` -> ``dnnprov.solvers.objectives.front``)."""
    top, _, rest = source.module.partition(".")
    if top not in RENAMED:
        return source
    module = RENAMED[top] + (f".{rest}" if rest else "")
    return BuildSource(source.path, module, source.text, None, source.followed)


def main(paths: list[str]) -> int:
    """Type-check; print mypy's messages (on ``paths`` if given); 0 when there are none, 1 otherwise."""
    sources, options = process_options([])
    try:
        result = build([installed_name(source) for source in sources], options)
        messages = result.errors
    except CompileError as error:
        messages = error.messages
    if paths:
        messages = [line for line in messages if line.startswith(tuple(paths))]
    for line in messages:
        print(line)
    errors = sum(": error:" in line for line in messages)
    files = len({line.split(":", 1)[0] for line in messages if ": error:" in line})
    if errors:
        print(f"Found {errors} errors in {files} files (checked {len(sources)} source files)")
        return 1
    print(f"Success: no issues found in {len(sources)} source files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
