"""The README's quick start: its main job's output block is what the command prints today."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _quick_start() -> tuple[str, str]:
    """(the paraplan command of the first quick-start command, the output block the README shows)."""
    text = README.read_text(encoding="utf-8")
    first = re.search(r"```bash\n(.*?)\n```", text, re.S).group(1)
    command = first.split("&&")[-1].strip()
    assert command.startswith("paraplan search "), command
    block = re.search(r"Output of the first command.*?```\n(.*?)```", text, re.S).group(1)
    return command, block


def _without_time(text: str) -> str:
    """The output without the search's own wall time (its last number: machine-dependent)."""
    return re.sub(r"; [0-9.]+ s\s*$", "", text.rstrip())


def test_the_quick_start_output_is_what_the_command_prints():
    command, block = _quick_start()
    args = command.split()[1:]
    done = subprocess.run(
        [sys.executable, "-m", "paraplan", "--width", "120", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert _without_time(done.stdout) == _without_time(block)
