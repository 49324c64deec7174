"""--price must be positive; a sequence longer than the model's positions warns on stderr (issues 12, 13).
The commands run in-process (conftest's ``cli``); tests/cli/test_cli.py and test_search_cli.py run
``estimate`` and ``search`` in a new process (test_console_script_process)."""

from __future__ import annotations

BASE = ["-m", "gpt3-1.3b", "-s", "dgx-a100-80gb", "--gpus", "8"]


def test_zero_price_is_an_input_error(cli):
    for command in (
        ["estimate", *BASE, "--price", "0"],
        ["search", *BASE, "--global-batch", "8", "--price", "0"],
    ):
        code, _, err = cli(*command)
        assert code == 2
        assert err.strip().splitlines() == [
            "error: --price: 0.0 is not allowed; must be a positive number of USD per GPU-hour"
        ]


def test_sequence_longer_than_positions_warns(cli):
    code, _, err = cli("estimate", *BASE, "--seq-length", "4096")
    assert code == 0
    assert "warning: --seq-length 4,096 is longer than gpt3-1.3b's 2,048 positions" in err
    _, _, quiet = cli("estimate", *BASE, "--seq-length", "2048")
    assert "warning" not in quiet
