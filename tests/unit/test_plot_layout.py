"""Plots and the sweep table: facet titles apart, bars labelled with their plan, per-stage memory
of a pipelined estimate, the global batch of every sweep point."""

from __future__ import annotations

import pytest

from paraplan.api import estimate
from paraplan.report.estimate_plot import estimate_figure
from paraplan.report.sweep_bars import _overlap, breakdown_figure, memory_figure
from paraplan.report.render import render_to_text
from paraplan.step.result import BREAKDOWN_FIELDS, MEMORY_PARTS
from paraplan.report.sweep_view import sweep_table

SYSTEMS = [
    "a-rather-long-system-name-one",
    "a-rather-long-system-name-two",
    "another-long-system-name-3",
]


def point(system: str, value: str, feasible: bool = True) -> dict:
    memory = {f"{p.key}_gib": 5.0 for p in MEMORY_PARTS}
    memory.update(capacity_gib=80.0, peak_gib=30.0, fits=True, stage=0)
    return {
        "system": system,
        "gpus": 8,
        "model.layers": value,
        "feasible": feasible,
        "global_batch": 48,
        "plan_label": f"tp2 pp1 cp1 dp4 mb{value} rc:none zero1" if feasible else None,
        "step_time_s": 1.5,
        "tokens_per_s": 65536.0,
        "mfu": 0.5,
        "memory": memory if feasible else None,
        "breakdown": {k: 0.15 for k in BREAKDOWN_FIELDS},
        "nearest_miss": None
        if feasible
        else {
            "plan_label": "tp1 pp1 cp1 dp8 mb1 rc:none zero0",
            "memory": {**memory, "peak_gib": 90.0},
        },
        "reason": None if feasible else "no plan fits in memory",
    }


@pytest.fixture(scope="module")
def document() -> dict:
    sweep = {
        "model": "gpt3-1.3b",
        "systems": SYSTEMS,
        "gpus": [8],
        "seq_length": 2048,
        "global_batch": None,
        "max_global_batch": 64,
        "dtype": "bf16",
        "tokens": None,
        "sets": [{"path": "model.layers", "values": ["1", "2"]}],
    }
    points = [
        point(s, v, feasible=not (s == SYSTEMS[2] and v == "2"))
        for s in SYSTEMS
        for v in ("1", "2")
    ]
    return {"sweep": sweep, "points": points}


@pytest.mark.parametrize("build", [breakdown_figure, memory_figure])
def test_facet_titles_do_not_collide_and_bars_name_their_plan(document, build):
    fig = build(document)
    ax = fig.axes[0]
    titles = [t for t in ax.texts if t.get_text() in SYSTEMS]
    assert [t.get_text() for t in titles] == SYSTEMS
    assert _overlap(fig, titles) <= 1.0  # neighbouring facet titles have room
    assert fig.get_size_inches()[0] > 8.0  # the figure was widened for them
    texts = {t.get_text() for t in ax.texts}
    for p in document["points"]:
        if p["feasible"]:
            assert p["plan_label"] in texts
    if build is memory_figure:  # the nearest miss a point shows is labelled too
        assert "tp1 pp1 cp1 dp8 mb1 rc:none zero0" in texts


def test_estimate_plot_shows_every_pipeline_stage():
    staged = estimate(
        "llama3-70b", "dgx-h100-80gb", gpus=64, tp=8, pp=4, zero=1, sequence_parallel=True
    )
    fig = estimate_figure(staged)
    assert len(fig.axes) == 3
    stages = fig.axes[2]
    assert stages.get_xlabel() == "pipeline stage"
    assert [t.get_text() for t in stages.get_xticklabels()] == ["0", "1", "2", "3"]
    assert (
        len(stages.patches) == 4 * len(MEMORY_PARTS) + 1
    )  # stacked parts per stage, the peak outlined
    flat = estimate("llama3-8b", "dgx-h100-80gb", gpus=8, zero=1)
    assert len(estimate_figure(flat).axes) == 2


def test_sweep_table_shows_the_global_batch(document):
    text = render_to_text([sweep_table(document)], width=None)
    lines = text.splitlines()
    header = lines[1]
    assert "global batch" in header and "best plan" in header
    row = next(line for line in lines if "mb1 rc:none zero1" in line)
    assert row.split()[row.split().index("zero1") + 1] == "48"
    narrow = render_to_text([sweep_table(document)], width=80).splitlines()
    assert all(len(line) <= 80 for line in narrow)
    assert any(
        line.strip() == "tp2 pp1 cp1 dp4 mb1 rc:none zero1" for line in narrow
    )  # plan on its own line
