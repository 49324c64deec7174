"""Docs that cannot drift (issue 34): every command the README and docs/*.md show runs, and the output a document
quotes after it is what the command prints today, numbers included. A model change that moves a number fails here
until the quotes are regenerated: ``python -m paraplan.report.docs_outputs --write``. The commands of
``docs_outputs.SLOW`` are in the ``slow`` set."""

from __future__ import annotations

import pytest

from paraplan.report import docs_outputs
from paraplan.report.docs_outputs import DocCommand, doc_commands, matches, regenerated

# the export block's `--to all` exits 2 on main (a refused target fails the whole command); wt-export (issue 34,
# part A) makes it exit 0 when a target was written. Not strict: passes once that is merged.


def _params():
    out = []
    for command in doc_commands():
        marks = [pytest.mark.slow] if command.slow else []
        out.append(pytest.param(command, id=command.label, marks=marks))
    return out


@pytest.mark.parametrize("command", _params())
def test_documented_command_prints_what_the_docs_quote(command: DocCommand):
    printed = docs_outputs.run(command)
    if command.output is not None:
        start, end = command.output
        quoted = command.doc.read_text(encoding="utf-8")[start:end]
        assert matches(quoted, printed), (
            f"{command.label}: the quoted output is not what the command prints; "
            "regenerate with `python -m paraplan.report.docs_outputs --write`"
        )


def test_the_readme_quick_start_and_its_output_are_found():
    """The README's quick start is the first documented command, and its output is quoted: the
    parametrized test above checks it (in the quick set: not slow)."""
    commands = doc_commands()
    first = commands[0]
    assert first.label == "README.md:13" and first.script.startswith("paraplan search ")
    assert first.output is not None and not first.slow
    assert all(c.script.startswith(("paraplan ", "cd ")) for c in commands)


def test_numbers_must_match_and_wall_times_need_not():
    quoted = "plan 1  step 11.205 s\n1 plans; 0.31 s\n"
    assert matches(quoted, "plan 1  step 11.205 s\n1 plans; 0.27 s\n")
    assert not matches(quoted, "plan 1  step 11.206 s\n1 plans; 0.31 s\n")
    assert not matches(quoted, "plan 1  step 11.205 s\n")


def test_an_elision_stands_for_any_lines_and_is_kept_when_regenerated():
    quoted = "head\n...\ntail  1.0\n"
    assert matches(quoted, "head\na\nb\ntail  1.0\n") and matches(quoted, "head\ntail  1.0\n")
    assert not matches(quoted, "head\na\ntail  2.0\n")
    assert not matches(
        quoted, "head\na\ntail  1.0\nmore\n"
    )  # not the end: the quote must end with ...
    assert matches(quoted + "...\n", "head\na\ntail  1.0\nmore\n")
    printed = "HEAD\na\ntail  2.0\nmore\n"
    assert regenerated(quoted + "...\n", printed) == "HEAD\n...\ntail  2.0\n...\n"


def test_write_rewrites_only_the_quoted_output(tmp_path, monkeypatch):
    doc = tmp_path / "README.md"
    (tmp_path / "docs").mkdir()
    doc.write_text(
        "Intro.\n\n```bash\nparaplan models\n```\n\n```\nstale\n```\n\nAfter.\n", encoding="utf-8"
    )
    monkeypatch.setattr(docs_outputs, "ROOT", tmp_path)
    monkeypatch.setattr(docs_outputs, "run", lambda command: "fresh\n")
    commands = doc_commands(tmp_path)
    assert len(commands) == 1 and commands[0].output is not None
    assert docs_outputs._check_or_write(commands, write=True) == ["README.md:3"]
    assert (
        doc.read_text() == "Intro.\n\n```bash\nparaplan models\n```\n\n```\nfresh\n```\n\nAfter.\n"
    )
    assert docs_outputs._check_or_write(doc_commands(tmp_path), write=False) == []
