"""paraplan.io.documents.atomic_write_text: the one writer of result files (temp + fsync + rename)."""

from __future__ import annotations

import pytest

from paraplan.specs.errors import InputError
from paraplan.io.documents import atomic_write_text


def test_it_creates_the_folder_and_replaces_the_file_whole(tmp_path):
    target = tmp_path / "a" / "b" / "plan.json"
    assert atomic_write_text(target, "one\n", make_parents=True) == target
    assert target.read_text() == "one\n"
    atomic_write_text(target, "two\n")
    assert target.read_text() == "two\n"
    assert sorted(p.name for p in target.parent.iterdir()) == [
        "plan.json"
    ]  # no temporary file left


def test_a_folder_it_cannot_create_is_a_one_line_error_and_nothing_is_written(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("kept\n")
    with pytest.raises(InputError, match=r"^out: cannot write .*the file was left unchanged$"):
        atomic_write_text(blocker / "sub" / "plan.json", "x", field="out", make_parents=True)
    assert blocker.read_text() == "kept\n"


def test_without_make_parents_a_missing_folder_is_named(tmp_path):
    with pytest.raises(InputError, match=r"^output: directory .*missing' does not exist$"):
        atomic_write_text(tmp_path / "missing" / "plan.json", "x")
    assert not (tmp_path / "missing").exists()
