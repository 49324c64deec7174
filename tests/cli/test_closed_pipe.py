"""A closed pipe (``paraplan search ... | head -1``) ends quietly, with the status a shell gives a writer that
SIGPIPE ends (141, as ``yes | head -1``), never exit 1 ("no plan fits") and never a traceback (issue 34)."""

from __future__ import annotations

import os
import subprocess
import sys

from paraplan.cli.main import EXIT_CLOSED_PIPE

SEARCH = (
    "search --model llama3-8b --system dgx-h100-80gb --gpus 16 --global-batch 64 --seq-length 4096"
)


def _into_a_closed_pipe(args: list[str]) -> tuple[int, str]:
    """Run ``paraplan ARGS`` into a pipe whose reader has gone (closed before the first write, so every
    write meets EPIPE: deterministic, unlike a reader racing the writer)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # every line is written as printed
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "paraplan", *args],
            check=False,
            stdout=write,
            stderr=subprocess.PIPE,
            env=env,
            timeout=120,
        )
    finally:
        os.close(write)
    return proc.returncode, proc.stderr.decode()


def test_search_into_a_closed_pipe_ends_quietly_with_the_shells_status():
    code, err = _into_a_closed_pipe(SEARCH.split())
    assert code == EXIT_CLOSED_PIPE == 141
    assert "Traceback" not in err and "error" not in err.lower()


def test_json_search_into_a_closed_pipe_ends_quietly_too():
    code, err = _into_a_closed_pipe([*SEARCH.split(), "--json"])
    assert code == 141
    assert err.strip() == ""
