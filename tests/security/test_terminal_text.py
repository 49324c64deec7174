"""Issue 37: escape codes in cluster / case / model names never reach the terminal: every text
output goes through report.text_table (PlainConsole, SimpleTable), which shows them escaped."""

from __future__ import annotations

import io

import pytest

from paraplan.cli import main
from paraplan.io.terminal import printable
from paraplan.report.text_table import PlainConsole, SimpleTable

HOSTILE = "evil\x1b[31mRED\x1b]0;title\x07\r\x9b2J\u202e\u2028x"


def _raw_controls(text: str) -> list[str]:
    return [ch for ch in text if not ch.isprintable() and ch != "\n"]


def test_printable_escapes_every_control_and_keeps_plain_text():
    assert printable("llama3-8b on dgx-h100 µ 中") == "llama3-8b on dgx-h100 µ 中"
    assert printable(HOSTILE) == "evil\\x1b[31mRED\\x1b]0;title\\x07\\r\\x9b2J\\u202e\\u2028x"


@pytest.mark.parametrize("width", [None, 40, 120])
def test_plain_console_escapes_prose_and_table_cells(width):
    table = SimpleTable(f"Plans of {HOSTILE}", "name", "step (s)")
    table.add_row(HOSTILE, "1.0")
    buffer = io.StringIO()
    PlainConsole(width, buffer).print(f"{HOSTILE} header", table)
    assert _raw_controls(buffer.getvalue()) == [], repr(buffer.getvalue())
    assert "\\x1b[31m" in buffer.getvalue()


def test_a_cluster_name_with_escape_codes_is_shown_escaped(tmp_path, capsys):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        'name: "evil\\e[31mRED\\e]0;title\\a"\npools:\n'
        "  - name: p\n    system: dgx-h100-80gb\n    nodes: 1\n"
    )
    argv = ["search", "-m", "gpt3-1.3b", "--cluster", str(cluster), "--global-batch", "64"]
    with pytest.raises(SystemExit) as info:
        main([*argv, "--top", "1"])
    out, err = capsys.readouterr()
    assert (info.value.code or 0) == 0, err
    assert _raw_controls(out + err) == [] and "evil\\x1b[31mRED" in out, repr(out)
