"""The README's first command, as a newcomer runs it: at the default settings it prints a
right completion for the repository's example file.

The command is read from the README itself (the last `&&` step of the first code block's first
line), so the test and the README cannot drift apart. Its output is the bundled model's
greedy decoding at the default settings, the same computation on every run.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def first_command() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("```", 2)[1]
    install_and_run = block.strip().split("\n")[0]
    return shlex.split(install_and_run.split(" && ")[-1])


def test_the_readme_runs_the_example_at_the_default_settings():
    command = first_command()
    assert command[:2] == ["dg-lsp", "complete"]
    assert not any(arg.startswith("--") for arg in command)  # the defaults, nothing turned off


def test_the_readme_command_prints_the_right_completion():
    command = first_command()
    executable = Path(sys.executable).with_name(command[0])
    done = subprocess.run([str(executable), *command[1:]], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert (done.returncode, done.stdout, done.stderr) == (0, "pop()\n", "")
    path, line, column = command[2].rsplit(":", 2)
    typed = (ROOT / path).read_text(encoding="utf-8").split("\n")[int(line) - 1]
    assert typed[: int(column) - 1] + done.stdout.strip() == "        return self.items.pop()"
