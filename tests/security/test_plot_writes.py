"""Issue 37: plots are written to a temporary name and renamed; a full disk leaves the old plot
whole, no temporary file behind, and an error naming the file."""

from __future__ import annotations

import errno

import matplotlib.pyplot as plt
import pytest

from paraplan.report import plot_style
from paraplan.specs.errors import InputError


def test_a_full_disk_keeps_the_old_plot_and_leaves_no_temporary(tmp_path, monkeypatch):
    fig = plt.figure()
    stem = tmp_path / "breakdown"
    plot_style.save_figure(fig, stem)
    good = {ext: stem.with_suffix(f".{ext}").read_bytes() for ext in plot_style.FORMATS}
    real = plot_style.write_figure

    def full_disk(figure, target, ext):
        real(figure, target, ext)
        target.truncate(10)  # part of the file written, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(plot_style, "write_figure", full_disk)
    with pytest.raises(InputError, match="breakdown.png.*No space left on device"):
        plot_style.save_figure(fig, stem)
    assert {ext: stem.with_suffix(f".{ext}").read_bytes() for ext in good} == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["breakdown.png", "breakdown.svg"]
    plt.close(fig)
