"""Progress with an ETA on stderr on a terminal or when asked (PARAPLAN_PROGRESS=1), and ``--exhaustive`` saying
how long it will take when that is long (issue 34)."""

from __future__ import annotations

import io

from paraplan.api import search_problem
from paraplan.catalog import load_model, load_system
from paraplan.cli import search_cmd
from paraplan.cli.app import PROGRESS_ENV, stderr_console, want_progress
from paraplan.search.exhaustive import exhaustive_search, exhaustive_size


def _tiny():
    return search_problem(
        load_model("gpt3-125m"),
        load_system("dgx-a100-80gb"),
        1,
        None,
        None,
        global_batch=8,
        seq_length=2048,
    )


def test_exhaustive_size_counts_the_rows_and_the_candidates():
    problem = _tiny()
    rows, candidates, seconds = exhaustive_size(problem)
    found = exhaustive_search(problem, top_k=1)
    assert rows == found.rows and seconds > 0
    assert abs(candidates - found.evaluated) <= 0.25 * found.evaluated


def test_exhaustive_says_how_long_when_long(cli, monkeypatch):
    args = "search -m gpt3-125m -s dgx-a100-80gb --gpus 1 --global-batch 8".split()
    monkeypatch.setattr(search_cmd, "EXHAUSTIVE_NOTE_S", 0.0)
    code, _, err = cli(*args, "--exhaustive", "--top", "1")
    assert code == 0 and "note: --exhaustive evaluates ~" in err and "min on 1 process" in err
    monkeypatch.setattr(search_cmd, "EXHAUSTIVE_NOTE_S", 1e9)
    code, _, err = cli(*args, "--exhaustive", "--top", "1")
    assert code == 0 and "--exhaustive evaluates" not in err


def test_progress_is_drawn_when_asked(monkeypatch):
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    monkeypatch.setattr("sys.stderr", io.StringIO())  # no terminal
    assert want_progress() is False
    monkeypatch.setenv(PROGRESS_ENV, "1")
    assert want_progress() is True
    assert stderr_console().is_terminal
