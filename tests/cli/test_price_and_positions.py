"""--price must be positive; a sequence longer than the model's positions warns on stderr (issues 12, 13)."""

from __future__ import annotations

import subprocess
import sys

BASE = ["-m", "gpt3-1.3b", "-s", "dgx-a100-80gb", "--gpus", "8"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "paraplan", *args], capture_output=True, text=True, timeout=120
    )


def test_zero_price_is_an_input_error():
    for command in (
        ["estimate", *BASE, "--price", "0"],
        ["search", *BASE, "--global-batch", "8", "--price", "0"],
    ):
        out = run(*command)
        assert out.returncode == 2
        assert out.stderr.strip().splitlines() == [
            "error: --price: 0.0 is not allowed; must be a positive number of USD per GPU-hour"
        ]


def test_sequence_longer_than_positions_warns():
    out = run("estimate", *BASE, "--seq-length", "4096")
    assert out.returncode == 0
    assert "warning: --seq-length 4,096 is longer than gpt3-1.3b's 2,048 positions" in out.stderr
    quiet = run("estimate", *BASE, "--seq-length", "2048")
    assert "warning" not in quiet.stderr
