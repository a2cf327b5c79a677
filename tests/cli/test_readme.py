"""The README's Use section works right after its set-up command (issue 22).

The set-up installs into ``.venv`` and puts nothing on PATH, so every command of the Use
block must name ``.venv/bin/``; each one runs here, in a scratch folder holding the
repository's data/, with ``.venv/bin/`` standing for the folder of this test's Python,
and must exit 0.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def _block_after(heading: str) -> str:
    section = README.split(f"\n{heading}\n", 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)


def _commands(block: str) -> list[str]:
    """The block's command lines, continuations joined and comments dropped."""
    joined = block.replace("\\\n", " ")
    return [shlex.join(shlex.split(line, comments=True)) for line in joined.splitlines() if line.strip()]


def test_setup_installs_the_command_the_use_section_calls():
    setup = _block_after("## Set up and run (Python 3.11)")
    assert "python3 -m venv .venv" in setup and ".venv/bin/pip install" in setup
    commands = _commands(_block_after("## Use"))
    assert len(commands) >= 5
    assert all(c.startswith(".venv/bin/dnnprov ") for c in commands), commands


def test_use_section_runs(tmp_path):
    (tmp_path / "data").symlink_to(REPO / "data")
    bin_dir = Path(sys.executable).parent
    stated = re.search(r"PS (\$[\d.]+/h)", _block_after("## Use"))
    assert stated, "the Use block states the PS price build charges"
    for command in _commands(_block_after("## Use")):
        argv = shlex.split(command)
        argv[0] = str(bin_dir / Path(argv[0]).name)
        run = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert run.returncode == 0, f"{command}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
        if argv[1] == "build":  # the comment's PS price is the one build charges
            assert f"PS {stated.group(1)}" in run.stdout + run.stderr, run.stdout
    assert (tmp_path / "my-instance.json").is_file() and (tmp_path / "results/report/index.html").is_file()
