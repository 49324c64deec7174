"""Text output as a user sees it: the real process on an 80-column terminal size and in a pipe.

No word (a plan label's parts, a case name, a number) is ever split across lines; in a pipe with no
width given every table row is one line (for grep and cut -c); --width overrides both.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from paraplan import api

SEARCH = [
    "search",
    "--model",
    "gpt3-1.3b",
    "--system",
    "dgx-a100-80gb",
    "--gpus",
    "8",
    "--global-batch",
    "32",
    "--seq-length",
    "2048",
    "--top",
    "3",
    "--tp",
    "1,2",
    "--micro-batch",
    "1,2",
    "--no-offload",
    "--default-placement",
]


@pytest.fixture(scope="module")
def ranked() -> list[dict]:
    """The plans of SEARCH, in process (the same as `paraplan search --json`)."""
    found = api.search(
        "gpt3-1.3b",
        "dgx-a100-80gb",
        gpus=8,
        global_batch=32,
        seq_length=2048,
        top=3,
        tp=(1, 2),
        micro_batch=(1, 2),
        vary_offload=False,
        vary_placement=False,
    )
    return found.to_dict()["plans"]


def paraplan(*argv: str, columns: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run(
        [sys.executable, "-m", "paraplan", *argv], capture_output=True, text=True, env=env
    )


def test_search_at_80_columns_keeps_every_plan_label_whole(ranked):
    proc = paraplan(*SEARCH, "--objective", "cost", "--tokens", "1T", columns="80")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    labels = [p["plan_label"] for p in ranked]
    words = {w for line in lines for w in line.split()}
    for label in labels:  # every part of every label is a whole word of the output
        assert set(label.split()) <= words, label
    # and each label, when it fits the width, is on one line
    assert all(any(label in line for line in lines) for label in labels if len(label) <= 76)


def test_search_piped_is_one_line_per_row_for_grep_and_cut(ranked):
    proc = paraplan(*SEARCH)  # no COLUMNS, not a terminal: unlimited width
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("#  plan"))
    end = header.index("step s") + len(
        "step s"
    )  # right-aligned column: values end where the header ends
    for item in ranked:
        # grep for the plan finds its whole row; a label may be the start of another ("zero2" and
        # "zero2 no-gather-overlap"), so match it up to the column gap (two spaces)
        row = [line for line in lines if item["plan_label"] + "  " in line]
        assert len(row) == 1
        assert row[0].split()[0] == str(item["rank"])
        assert (
            row[0][:end].split()[-1] == f"{item['step_time_s']:.3f}"
        )  # cut -c1-END ends with the step time
    assert all(line == line.rstrip() for line in lines)


def test_width_option_overrides_the_environment():
    proc = paraplan("--width", "60", "validate", columns="200")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    names = [c["name"] for c in api.validate()["cases"]]
    assert all(len(line) <= 60 or line in names for line in lines)
    words = {w for line in lines for w in line.split()}
    assert set(names) <= words  # case names are never split
    wide = paraplan("models", "--width", "0", columns="40").stdout.splitlines()
    assert any(line.startswith("llama3-8b ") and line.rstrip().endswith("swiglu") for line in wide)
