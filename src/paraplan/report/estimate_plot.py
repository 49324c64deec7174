"""The one-estimate summary (``paraplan estimate --plot FILE``, PNG or SVG): the time breakdown of a
step, the memory of its peak pipeline stage, and with several stages every stage's memory.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from paraplan.report.plot_style import (
    FORMATS,
    MEMORY_PARTS,
    TIME_PARTS,
    fmt_count,
    fmt_seconds,
    light_grid,
    stacked_bar,
    write_figure,
)
from paraplan.specs.errors import InputError
from paraplan.units import GiB


def plot_estimate(est, path: Path) -> Path:
    """One estimate (``paraplan estimate --plot FILE``), written atomically into an existing
    directory: see :func:`estimate_figure`."""
    path = Path(path)
    check_plot_path(path)
    ext = path.suffix.lower().lstrip(".")
    fig = estimate_figure(est)
    from paraplan.io.documents import atomic_path

    try:
        with atomic_path(path, field="--plot") as temp, open(temp, "wb") as handle:
            write_figure(fig, handle, ext)
    except OSError as exc:
        raise InputError(f"--plot: cannot write {str(path)!r}: {exc.strerror}") from None
    return path


def check_plot_path(path: Path) -> None:
    """``--plot FILE``: the name ends in .png or .svg and the directory exists."""
    if path.suffix.lower().lstrip(".") not in FORMATS:
        raise InputError(
            f"--plot: {str(path)!r} is not allowed; the file name must end in .png or .svg"
        )
    if not path.parent.is_dir():
        raise InputError(
            f"--plot: {str(path)!r} is not allowed; the directory {str(path.parent)!r} does not exist "
            "(create it first)"
        )


def estimate_figure(est) -> Figure:
    """The time breakdown of a step (bars with shares) and the memory per component of the peak
    pipeline stage against the HBM capacity; with several pipeline stages also every stage's memory
    by component (stacked bars, the peak stage marked)."""
    from dataclasses import asdict

    from paraplan.specs.plan_label import plan_label
    from paraplan.specs.plan import PlanSpec

    breakdown = asdict(est.breakdown)
    parts = [
        (label, breakdown[key], color) for key, label, color in TIME_PARTS if breakdown[key] > 0
    ]
    staged = len(est.stages) > 1
    fig = Figure(figsize=(13, 9.6 if staged else 5.2))
    if staged:
        grid = fig.add_gridspec(2, 2, width_ratios=[1.25, 1], height_ratios=[1, 0.85])
        ax_t, ax_m, ax_s = (
            fig.add_subplot(grid[0, 0]),
            fig.add_subplot(grid[0, 1]),
            fig.add_subplot(grid[1, :]),
        )
    else:
        ax_t, ax_m = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.25, 1]})
    names = [p[0] for p in parts][::-1]
    seconds = [p[1] for p in parts][::-1]
    ax_t.barh(names, seconds, color=[p[2] for p in parts][::-1])
    for y, s in enumerate(seconds):
        ax_t.text(
            s, y, f"  {fmt_seconds(s)} ({100 * s / est.step_time_s:.1f}%)", va="center", fontsize=9
        )
    ax_t.set_xlim(0, max(seconds) * 1.45)
    ax_t.set_xlabel("seconds per step")
    ax_t.set_title(
        f"Time per step: {fmt_seconds(est.step_time_s)}  ·  {fmt_count(est.tokens_per_s)} tokens/s  ·  "
        f"MFU {100 * est.mfu:.1f}%",
        fontsize=10,
    )
    light_grid(ax_t, "x")

    stage = est.peak_stage
    d = stage.to_dict()
    cap = stage.capacity_bytes / GiB
    n = len(MEMORY_PARTS)
    ys = [n - 1 - i for i in range(n)]  # components top to bottom, the stacked total above them
    values = [d[f"{key}_gib"] for key, _, _ in MEMORY_PARTS]
    ax_m.barh(ys, values, color=[c for _, _, c in MEMORY_PARTS], height=0.7)
    left = 0.0
    for value, (_, _, color) in zip(values, MEMORY_PARTS):
        ax_m.barh(
            [n + 0.3], [value], left=left, color=color, height=0.8, edgecolor="white", linewidth=0.5
        )
        left += value
    for y, v in zip([n + 0.3, *ys], [left, *values]):
        ax_m.text(v, y, f"  {v:.2f} GiB", va="center", fontsize=9)
    ax_m.set_yticks([n + 0.3, *ys])
    ax_m.set_yticklabels(["peak (stacked)", *(label for _, label, _ in MEMORY_PARTS)])
    ax_m.axvline(cap, color="black", linewidth=2)
    ax_m.text(cap, n + 1.15, f"HBM capacity {cap:.0f} GiB ", ha="right", va="center", fontsize=9)
    ax_m.set_xlim(0, max(left * 1.3, cap * 1.05))
    ax_m.set_ylim(-0.6, n + 1.5)
    ax_m.set_xlabel("memory per GPU (GiB)")
    fit = "fits" if stage.fits else "DOES NOT FIT"
    ax_m.set_title(
        f"Memory per GPU, peak stage {stage.stage}: {left:.1f} of {cap:.0f} GiB ({fit})",
        fontsize=10,
    )
    light_grid(ax_m, "x")
    if staged:
        _stage_memory(ax_s, est)
    label = plan_label(PlanSpec.model_validate(est.plan))
    fig.suptitle(
        f"{est.model} on {est.gpus:,} × {est.system}: {label}\n"
        f"global batch {est.plan['global_batch']}, seq {est.plan['seq_length']}, {est.plan['dtype']}",
        fontsize=11,
    )
    fig.tight_layout()
    return fig


def _stage_memory(ax, est) -> None:
    """Memory per GPU of every pipeline stage, stacked by component, with the HBM capacity; the peak
    stage's bar is outlined and starred."""
    stages = [s.to_dict() for s in est.stages]
    xs = list(range(len(stages)))
    bottoms = [0.0] * len(stages)
    peak = est.peak_stage.stage
    for key, label, color in MEMORY_PARTS:
        values = [s[f"{key}_gib"] for s in stages]
        bottoms = stacked_bar(ax, xs, values, bottoms, color, label)
    cap = est.peak_stage.capacity_bytes / GiB
    ax.axhline(cap, color="black", linewidth=2, label=f"HBM capacity ({cap:.0f} GiB)")
    ax.bar([peak], [bottoms[peak]], width=0.75, fill=False, edgecolor="black", linewidth=1.5)
    ax.text(
        peak, bottoms[peak], f"peak\n{bottoms[peak]:.1f} GiB", ha="center", va="bottom", fontsize=8
    )
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x) for x in xs], fontsize=8 if len(xs) > 24 else 9)
    ax.set_xlim(-0.7, len(xs) - 0.3)
    ax.set_ylim(0, max(max(bottoms), cap) * 1.18)
    ax.set_xlabel("pipeline stage")
    ax.set_ylabel("memory per GPU (GiB)")
    over = sum(1 for s in est.stages if not s.fits)
    ax.set_title(
        f"Memory per GPU by pipeline stage ({over} of {len(stages)} stages over capacity)"
        if over
        else f"Memory per GPU by pipeline stage (all {len(stages)} fit)",
        fontsize=10,
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    light_grid(ax, "y")
