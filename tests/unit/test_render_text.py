"""The text report: every section present, console-width safe, and a plan that does not fit says so."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from paraplan.api import estimate
from paraplan.report.render import SimpleTable, render_estimate, render_to_text


@pytest.fixture(scope="module")
def fitting():
    return estimate("llama3-70b", "dgx-h100-80gb", gpus=64, tp=8, pp=4, vpp=5, zero=1, sequence_parallel=True, with_ops=True)


@pytest.fixture(scope="module")
def too_big():
    return estimate("llama3-8b", "dgx-h100-80gb", gpus=8)  # ZeRO 0: 16 B/param of 8B params > 80 GiB


@pytest.mark.parametrize("width", [60, 80, 100, 160])
def test_lines_fit_the_width(fitting, width):
    run = fitting.run_totals(1e12, 2.0)
    text = render_estimate(fitting, run=run, show_ops=True, width=width)
    assert max(len(line) for line in text.splitlines()) <= width


def test_sections(fitting):
    text = render_estimate(fitting, run=fitting.run_totals(15e12, None), show_ops=True, width=200)
    for title in ("Key metrics", "Time per step", "Memory per GPU", "Ops per micro-batch", "Collectives per micro-batch", "Run of 15.00T tokens"):
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
    assert f"{peak.peak_bytes / 2**30:.2f} GiB" in lines[1] and f"{peak.capacity_bytes / 2**30:.2f} GiB" in lines[1]


def test_long_pipelines_collapse_middle_stages():
    est = estimate("llama3-405b", "dgx-h100-80gb", gpus=1152, tp=8, pp=18, zero=1, seq_length=4096)
    text = render_estimate(est, width=200)
    assert "…" in text
    assert re.search(r"^17 ", text, flags=re.M) and re.search(r"^0 ", text, flags=re.M)


def test_simple_table_never_crops():
    table = SimpleTable("t", "name", "a long header", "value", numeric_from=1)
    table.add_row("a-rather-long-name-here", "123456.789", "[bracketed]")
    for width in (20, 30, 60):
        text = render_to_text([table], width=width)
        assert max(len(line) for line in text.splitlines()) <= width
        missing = Counter("a-rather-long-name-here123456.789[bracketed]") - Counter(text)
        assert not missing, (width, text)
