"""Start-up stays light: the help of the command line loads no numpy (nor the estimator, the search or rich);
each command imports what it needs when it runs (issue 31: start-up <= 0.2 s, benchmarks/cli_startup.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("numpy", "rich", "yaml", "paraplan.step.estimate", "paraplan.search.run")

_RUNNER = """
import sys
from paraplan.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stdout.flush()
print("LOADED:", *[m for m in {heavy!r} if m in sys.modules], file=sys.stderr)
"""


def _loaded(*args: str) -> list[str]:
    """The HEAVY modules loaded by ``paraplan ARGS`` in a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER.format(heavy=HEAVY), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    line = [x for x in proc.stderr.splitlines() if x.startswith("LOADED:")][-1]
    return line.split()[1:]


@pytest.mark.parametrize(
    "args", [("--help",), ("estimate", "--help"), ("search", "--help"), ("validate", "--help")]
)
def test_help_imports_no_numpy(args):
    assert _loaded(*args) == []


def test_the_runner_sees_what_a_command_imports():
    # the same runner reports numpy once a command needs it: the check above can fail
    loaded = _loaded("estimate", "-m", "gpt3-1.3b", "-s", "dgx-a100-80gb", "--gpus", "8", "--json")
    assert "numpy" in loaded and "paraplan.step.estimate" in loaded
