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


def test_the_searched_system_takes_the_profile_then_set_then_the_headroom():
    """search.setup.search_specs, by hand: llm-foundry on a DGX H100 (80 GiB) reserves 0.5 GiB of CUDA
    context + 1.0 GiB of NCCL buffers + 0.05 x 80 GiB of fragmentation = 5.5 GiB, taken from the full HBM as
    estimate takes it; the 5 % headroom then leaves 76 GiB to fit in. A --set capacity (96 GiB) comes after
    the profile (the reserve stays 5.5 GiB, as in estimate --set) and before the headroom (91.2 GiB)."""
    from paraplan.catalog import load_framework, load_model, load_system
    from paraplan.cli.estimate_plan import set_overrides
    from paraplan.search.setup import search_specs

    gib = 2**30
    system, profile = load_system("dgx-h100-80gb"), load_framework("llm-foundry")
    model = load_model("llama2-7b")
    _, searched, full = search_specs(model, system, profile, None, 0.05)
    assert full == 80 * gib
    assert searched.accelerator.reserved_memory == pytest.approx(5.5 * gib, rel=1e-12)
    assert searched.accelerator.hbm_capacity == pytest.approx(76 * gib, rel=1e-12)
    bigger = set_overrides(["accelerator.hbm_capacity=96GiB"])
    _, searched, full = search_specs(model, system, profile, bigger, 0.05)
    assert full == 96 * gib
    assert searched.accelerator.reserved_memory == pytest.approx(5.5 * gib, rel=1e-12)
    assert searched.accelerator.hbm_capacity == pytest.approx(91.2 * gib, rel=1e-12)
