"""Issue 37: outputs never follow a symbolic link they did not create. ``sweep --resume`` appended
its journal through a planted ``points.jsonl`` link to wherever it pointed."""

from __future__ import annotations

import json
import os

import pytest

from paraplan.io.documents import append_line
from paraplan.specs.errors import InputError
from paraplan.sweep.journal import CONFIG_FILE, POINTS_FILE, PointWriter, open_output

RECORD = {"sweep": {"model": "m"}, "specs": {}}


def _planted(tmp_path, name: str):
    """An output folder whose ``name`` is a link to a file outside it; (folder, outside file)."""
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    out.mkdir()
    victim.write_text("precious\n")
    if name != CONFIG_FILE:
        (out / CONFIG_FILE).write_text(json.dumps(RECORD))
    os.symlink(victim, out / name)
    return out, victim


@pytest.mark.parametrize("name", [POINTS_FILE, CONFIG_FILE])
def test_resume_refuses_a_linked_journal_and_leaves_the_target_alone(tmp_path, name):
    out, victim = _planted(tmp_path, name)
    with pytest.raises(InputError, match="symbolic link"):
        open_output(out, RECORD, [], [], resume=True, force=False)
    assert victim.read_text() == "precious\n"


def test_the_journal_writer_never_appends_through_a_link(tmp_path):
    out, victim = _planted(tmp_path, POINTS_FILE)
    with pytest.raises(InputError, match="symbolic link"):
        PointWriter(out / POINTS_FILE, None)({"index": 0})
    with pytest.raises(InputError, match="symbolic link"):
        append_line(out / POINTS_FILE, "x")
    assert victim.read_text() == "precious\n"


def test_the_journal_writer_refuses_a_fifo(tmp_path):
    fifo = tmp_path / POINTS_FILE
    os.mkfifo(fifo)
    fd = os.open(
        fifo, os.O_RDONLY | os.O_NONBLOCK
    )  # a reader, so that opening it for writing does not block
    try:
        with pytest.raises(InputError, match="not a regular file"):
            append_line(fifo, "x")
    finally:
        os.close(fd)
