"""The text report: every section present, console-width safe, and a plan that does not fit says so."""

from __future__ import annotations

import re

import pytest

from paraplan.api import estimate
from paraplan.report.render import render_estimate, render_to_text
from paraplan.report.text_table import SimpleTable


@pytest.fixture(scope="module")
def fitting():
    return estimate(
        "llama3-70b",
        "dgx-h100-80gb",
        gpus=64,
        tp=8,
        pp=4,
        vpp=5,
        zero=1,
        sequence_parallel=True,
        with_ops=True,
    )


@pytest.fixture(scope="module")
def too_big():
    return estimate(
        "llama3-8b", "dgx-h100-80gb", gpus=8
    )  # ZeRO 0: 16 B/param of 8B params > 80 GiB


@pytest.mark.parametrize("width", [60, 80, 100, 160])
def test_lines_fit_the_width(fitting, width):
    run = fitting.run_totals(1e12, 2.0)
    text = render_estimate(fitting, run=run, show_ops=True, width=width)
    assert max(len(line) for line in text.splitlines()) <= width


def test_sections(fitting):
    text = render_estimate(fitting, run=fitting.run_totals(15e12, None), show_ops=True, width=200)
    for title in (
        "Key metrics",
        "Time per step",
        "Memory per GPU",
        "Ops per micro-batch",
        "Collectives per micro-batch",
        "Run of 15.00T tokens",
    ):
        assert title in text
    assert "vpp 5" in text and "schedule interleaved" in text and "sequence parallel" in text
    # the peak stage is flagged, once
    peak = fitting.peak_stage.stage
    assert len(re.findall(rf"^{peak} \*", text, flags=re.M)) == 1
    assert "no price" in text


def test_does_not_fit_is_prominent(too_big):
    text = render_estimate(too_big, width=200)
    lines = text.splitlines()
    assert lines[0].startswith("plan: ") and lines[1].startswith("DOES NOT FIT: stage 0 needs")
    assert lines[-1].startswith("DOES NOT FIT")  # repeated after the tables
    peak = too_big.peak_stage
    assert (
        f"{peak.peak_bytes / 2**30:.2f} GiB" in lines[1]
        and f"{peak.capacity_bytes / 2**30:.2f} GiB" in lines[1]
    )


def test_long_pipelines_collapse_middle_stages():
    est = estimate("llama3-405b", "dgx-h100-80gb", gpus=1152, tp=8, pp=18, zero=1, seq_length=4096)
    text = render_estimate(est, width=200)
    assert "…" in text
    assert re.search(r"^17 ", text, flags=re.M) and re.search(r"^0 ", text, flags=re.M)


def _words(text: str) -> set[str]:
    return set(text.split())


def test_simple_table_never_crops_nor_breaks_a_word():
    table = SimpleTable("t", "name", "a long header", "value", numeric_from=1)
    table.add_row("a-rather-long-name-here", "123456.789", "[bracketed]")
    for width in (20, 30, 60):
        text = render_to_text([table], width=width)
        for line in text.splitlines():  # longer than the width only when one word is
            assert len(line) <= width or line.strip() == "a-rather-long-name-here", line
        assert {"a-rather-long-name-here", "123456.789", "[bracketed]"} <= _words(text), (
            width,
            text,
        )


def test_table_layouts_from_wide_to_narrow():
    """Wide: one line per row. Narrower: headers wrap, then the detach column (a plan) moves under
    its row. Narrowest: records of 'header: value'. No word is ever split."""
    table = SimpleTable(
        "Plans", "#", "plan", "global batch", "step s", numeric_from=2, foldable=(), detach=1
    )
    table.add_row(
        "1", "tp8 pp4 cp1 dp32 mb4 interleaved/v12 rc:none sp zero1 tp-overlap", "1024", "10.554"
    )
    table.add_row("2", "tp8 pp2 cp1 dp64 mb4 1f1b rc:full zero2", "1024", "10.577")
    wide = render_to_text([table], width=None).splitlines()
    assert wide[1].split() == ["#", "plan", "global", "batch", "step", "s"]
    assert wide[3].startswith(
        "1  tp8 pp4 cp1 dp32 mb4 interleaved/v12 rc:none sp zero1 tp-overlap"
    ) and wide[3].endswith("10.554")
    detached = render_to_text([table], width=40).splitlines()
    assert detached[1:3] == ["#  global batch  step s", "   plan"]
    assert detached[4:6] == ["1          1024  10.554", "   tp8 pp4 cp1 dp32 mb4 interleaved/v12"]
    assert detached[6] == "   rc:none sp zero1 tp-overlap"  # the plan wraps at a space, indented
    records = render_to_text([table], width=16).splitlines()  # 17 is the narrowest grid
    assert records[2:4] == ["1", "    tp8 pp4 cp1"]
    assert "    batch: 1024" in records and "    10.554" in records
    for text in ("\n".join(wide), "\n".join(detached), "\n".join(records)):
        assert {"interleaved/v12", "rc:none", "tp-overlap", "10.554", "1024"} <= _words(text)


def test_name_column_moves_above_its_row_when_too_long():
    """validate-style: a long case name goes on its own line above the row's numbers."""
    table = SimpleTable("Predicted vs measured", "case", "metric", "predicted", numeric_from=2)
    table.add_row("korthikanti2022-tab5-megatron-22b-full", "step time (s)", "1.441")
    lines = render_to_text([table], width=30).splitlines()
    assert "korthikanti2022-tab5-megatron-22b-full" in lines
    row = lines.index("korthikanti2022-tab5-megatron-22b-full")
    assert lines[row + 1].split() == ["step", "time", "(s)", "1.441"]
    assert all(len(line) <= 30 for line in lines if line != lines[row])


def test_headers_wrap_at_spaces_before_anything_else():
    table = SimpleTable("t", "name", "global batch", "peak GiB", numeric_from=1)
    table.add_row("x", "1024", "75.8")
    lines = render_to_text([table], width=18).splitlines()
    assert lines[1:3] == ["      global  peak", "name   batch   GiB"]
    assert lines[4] == "x       1024  75.8"


def test_no_trailing_spaces_and_unlimited_width_keeps_rows_whole(fitting):
    text = render_estimate(fitting, show_ops=True, width=None)
    assert all(line == line.rstrip() for line in text.splitlines())
    assert text.splitlines()[0].startswith("plan: ") and " | " in text.splitlines()[0]  # one line


def test_host_memory_overflow_names_the_host():
    """Offloaded activations that fit no host: the line names host memory, not a negative GPU overflow."""
    est = estimate(
        "llama3-70b",
        "gb300-nvl72",
        gpus=64,
        micro_batch=2,
        global_batch=256,
        seq_length=8192,
        zero=3,
        offload_activations=True,
    )
    line = next(
        x for x in render_estimate(est, width=200).splitlines() if x.startswith("DOES NOT FIT")
    )
    stage = max(est.stages, key=lambda s: s.host_bytes)
    assert stage.peak_bytes <= stage.capacity_bytes < stage.host_bytes and not est.fits
    assert line.startswith(
        f"DOES NOT FIT: stage {stage.stage} offloads {stage.host_bytes / 2**30:.2f} GiB per GPU to host memory"
    )
    assert (
        f"host has {stage.host_capacity_bytes / 2**30:.2f} GiB per GPU" in line
        and "-" not in line.split("over by")[1]
    )
