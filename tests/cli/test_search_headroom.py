"""search --memory-headroom, the 'uncertain fit' mark and search --set (issue 34)."""

from __future__ import annotations

import json

import pytest

from paraplan.cli import main
from paraplan.search.headroom import uncertain_fit

ARGS = ["search", "-m", "gpt3-13b", "-s", "dgx-a100-40gb", "--gpus", "8", "--global-batch", "16"]
ARGS += ["--micro-batch", "1,2", "--no-offload", "--default-placement", "--top", "3", "--json"]


def run(capsys, *extra) -> dict:
    with pytest.raises(SystemExit) as exc:
        main([*ARGS, *extra])
    out, err = capsys.readouterr()
    assert (exc.value.code or 0) == 0, err
    return json.loads(out)


def test_headroom_keeps_hbm_free_and_marks_near_fits(capsys):
    free, none = run(capsys), run(capsys, "--memory-headroom", "0")
    assert free["problem"]["memory_headroom"] == 0.05 and none["problem"]["memory_headroom"] == 0
    assert free["feasible"] < none["feasible"]
    assert all(r["peak_memory_gib"] <= 40 * 0.95 for r in free["plans"])
    for r in free["plans"]:
        assert r["uncertain_fit"] == (r["peak_memory_gib"] > 40 * 0.90)
    assert uncertain_fit(75 * 2**30, 80 * 2**30, 0.05) and not uncertain_fit(
        70 * 2**30, 80 * 2**30, 0.05
    )


def test_search_set_changes_the_system(capsys):
    small = run(capsys, "--set", "accelerator.hbm_capacity=30GiB", "--memory-headroom", "0")
    full = run(capsys, "--memory-headroom", "0")
    assert small["feasible"] < full["feasible"]
    assert all(r["peak_memory_gib"] <= 30 for r in small["plans"])
