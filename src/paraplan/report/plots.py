"""Sweep charts (PNG and SVG, matplotlib's Agg backend), drawn from a ``sweep.json`` document
(``paraplan sweep`` and ``paraplan plot``):
- ``strong_scaling``: step time and throughput (or time to train) vs GPUs, one line per system
  (and ``--set`` combination), log-log, with dotted ideal-scaling lines;
- ``breakdown``: the time breakdown of each point's best plan, stacked bars as shares of the step
  time, the step time above each bar (report.sweep_bars);
- ``memory``: the memory per GPU of each best plan's peak pipeline stage, stacked by component,
  with the HBM capacity; a point where nothing fits shows its nearest miss, hatched (report.sweep_bars);
- ``heatmap``: tokens/s over the two swept dimensions, when exactly two are swept;
- ``goodput`` (``sweep --goodput``): effective training time and days against GPUs
  (report.goodput_plots).
Every figure is built on its own ``Figure`` object (no pyplot state), so drawing is safe in any
process; SVG ids are salted with a constant and no date is written, so output is reproducible
(report.plot_style). The one-estimate summary is report.estimate_plot's.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from paraplan.report.plot_style import (
    LINE_COLORS,
    MARKERS,
    axis_title,
    fmt_count,
    fmt_seconds,
    fmt_tokens,
    int_label,
    log_labels,
    save_figure,
    subtitle,
    sweep_axes,
    swept_axes,
    tick_text,
    value_text,
)
from paraplan.report.sweep_bars import breakdown_figure, memory_figure
from paraplan.specs.errors import InputError


# ---- strong scaling -------------------------------------------------------------------------
def plot_strong_scaling(document: dict, stem: Path) -> list[Path]:
    """Step time (left) and throughput or time to train (right) against GPUs, one line per
    combination of the other dimensions, each with its dotted ideal scaling."""
    sweep, pts = document["sweep"], document["points"]
    others = [(n, v) for n, v in sweep_axes(sweep) if n != "gpus"]
    series: dict[tuple, list[dict]] = {}
    for p in pts:
        key = tuple(p[n] for n, _ in others)
        series.setdefault(key, []).append(p)
    varying = [i for i, (_, v) in enumerate(others) if len(v) > 1]
    fig = Figure(figsize=(13, 5.4))
    ax_time, ax_rate = fig.subplots(1, 2)
    misses = []
    for k, (key, items) in enumerate(series.items()):
        label = ", ".join(value_text(others[i][0], key[i]) for i in varying) or str(key[0])
        style = {"color": LINE_COLORS[k % len(LINE_COLORS)], "marker": MARKERS[k % len(MARKERS)]}
        misses += [f"{label} at {p['gpus']:,} GPUs" for p in items if not p["feasible"]]
        _scaling_lines(ax_time, ax_rate, [p for p in items if p["feasible"]], label, style, sweep)
    ax_rate.plot(
        [], [], color="black", linestyle=":", linewidth=1.2, label="ideal (linear) scaling"
    )
    _scaling_axes(ax_time, ax_rate, sweep, any(p["feasible"] for p in pts))
    fig.suptitle(f"Strong scaling — {subtitle(sweep)}", fontsize=12)
    below = len(series) > 4  # many lines: one legend under the plots instead of one over each
    if below:
        handles, labels = ax_rate.get_legend_handles_labels()
        fig.tight_layout(rect=(0, 0.04 + 0.035 * math.ceil(len(labels) / 2), 1, 1))
        fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=9, frameon=False)
    else:
        ax_time.legend(loc="best", fontsize=9)
        ax_rate.legend(loc="best", fontsize=9)
        fig.tight_layout()
    if misses:
        fig.text(
            0.5,
            0.0,
            "no plan fits in memory: " + "; ".join(misses),
            ha="center",
            va="top",
            fontsize=8,
            wrap=True,
        )
    return save_figure(fig, stem)


def _scaling_lines(ax_time, ax_rate, ok: list[dict], label: str, style: dict, sweep: dict) -> None:
    """One series' lines: step time and its ideal scaling on ``ax_time``, throughput (or days to
    train) and its ideal on ``ax_rate``; ``ok`` its feasible points (none: a legend entry only)."""
    color = style["color"]
    if not ok:
        ax_time.plot([], [], **style, label=f"{label} (nothing fits)")
        return
    g = [p["gpus"] for p in ok]
    t = [p["step_time_s"] for p in ok]
    ax_time.plot(g, t, **style, linewidth=2, label=label)
    if sweep.get("max_global_batch") is not None:  # the search may pick a smaller batch: say so
        for p in ok:
            if p["global_batch"] < sweep["max_global_batch"]:
                ax_time.annotate(
                    f"batch {p['global_batch']}",
                    (p["gpus"], p["step_time_s"]),
                    xytext=(-7, -13),
                    ha="right",
                    textcoords="offset points",
                    fontsize=8,
                    color=color,
                )
    # ideal scaling from the first feasible point: time per token ∝ 1/GPUs (batch may differ by plan)
    per_token0 = ok[0]["step_time_s"] / ok[0]["global_batch"]
    ax_time.plot(
        g,
        [per_token0 * ok[0]["gpus"] / n * p["global_batch"] for n, p in zip(g, ok)],
        color=color,
        linestyle=":",
        linewidth=1.2,
        alpha=0.8,
    )
    if sweep.get("tokens") is not None:
        y = [p["time_to_train_days"] for p in ok]
        ideal = [y[0] * ok[0]["gpus"] / n for n in g]
    else:
        y = [p["tokens_per_s"] for p in ok]
        ideal = [y[0] * n / ok[0]["gpus"] for n in g]
    ax_rate.plot(g, y, **style, linewidth=2, label=label)
    ax_rate.plot(g, ideal, color=color, linestyle=":", linewidth=1.2, alpha=0.8)


def _scaling_axes(ax_time, ax_rate, sweep: dict, anything: bool) -> None:
    """Titles, log scales, GPU ticks and grids of the two strong-scaling axes; ``anything``: some
    point has a plan that fits (else both say that none does)."""
    with_days = sweep.get("tokens") is not None
    ax_time.set_ylabel("step time (s, log scale)")
    if with_days:
        ax_rate.set_ylabel(f"time to train {fmt_tokens(sweep['tokens'])} tokens (days, log scale)")
        ax_rate.set_title("Time to train")
    else:
        ax_rate.set_ylabel("throughput (tokens/s, log scale)")
        ax_rate.set_title("Training throughput")
    ax_time.set_title("Step time of the best plan")
    for ax in (ax_time, ax_rate):
        ax.set_xscale("log", base=2)
        if anything:
            ax.set_yscale("log")
        else:
            ax.text(
                0.5,
                0.5,
                "no plan fits at any point",
                transform=ax.transAxes,
                ha="center",
                color="#C44E52",
            )
        ax.set_xticks(sweep["gpus"])
        ax.xaxis.set_major_formatter(FuncFormatter(int_label))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("GPUs (log scale)")
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", axis="y", alpha=0.12)
        if len(sweep["gpus"]) > 8:
            ax.tick_params(axis="x", labelrotation=45)
    if anything:
        log_labels(ax_time, fmt=lambda v: f"{v:g}")
        log_labels(ax_rate, fmt=(lambda v: f"{v:g}") if with_days else fmt_count)


# ---- heatmap --------------------------------------------------------------------------------
def plot_heatmap(document: dict, stem: Path) -> list[Path]:
    sweep, pts = document["sweep"], document["points"]
    (row_name, row_values), (col_name, col_values) = swept_axes(sweep)
    grid = [[None] * len(col_values) for _ in row_values]
    for p in pts:
        grid[row_values.index(p[row_name])][col_values.index(p[col_name])] = p
    values = [
        [(c["tokens_per_s"] if c and c["feasible"] else math.nan) for c in row] for row in grid
    ]
    finite = [v for row in values for v in row if not math.isnan(v)]
    fig = Figure(
        figsize=(max(6.5, 1.25 * len(col_values) + 3.5), max(4.0, 0.7 * len(row_values) + 2.4))
    )
    ax = fig.subplots()
    import numpy as np

    data = np.ma.masked_invalid(np.array(values, dtype=float))
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#DDDDDD")
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    log = lo > 0 and hi / lo > 20  # e.g. a GPU-count axis: colours by order of magnitude
    norm = LogNorm(vmin=lo, vmax=hi) if log else Normalize(vmin=lo, vmax=hi)
    image = ax.imshow(data, cmap=cmap, aspect="auto", norm=norm)
    for i, row in enumerate(grid):
        for j, cell in enumerate(row):
            if cell is None:
                continue
            if cell["feasible"]:
                v = cell["tokens_per_s"]
                dark = norm(v) < 0.6 if hi > lo else True
                ax.text(
                    j,
                    i,
                    f"{fmt_count(v)}\n{fmt_seconds(cell['step_time_s'])}",
                    ha="center",
                    va="center",
                    fontsize=9,
                    color="white" if dark else "black",
                )
            else:
                ax.text(
                    j, i, "no plan\nfits", ha="center", va="center", fontsize=9, color="#C44E52"
                )
    ax.set_xticks(range(len(col_values)))
    ax.set_xticklabels(
        [tick_text(col_name, v) for v in col_values],
        rotation=45 if max(len(str(v)) for v in col_values) > 8 else 0,
        ha="right" if max(len(str(v)) for v in col_values) > 8 else "center",
    )
    ax.set_yticks(range(len(row_values)))
    ax.set_yticklabels([tick_text(row_name, v) for v in row_values])
    ax.set_xlabel(axis_title(col_name))
    ax.set_ylabel(axis_title(row_name))
    bar = fig.colorbar(image, ax=ax)
    bar.set_label("throughput (tokens/s" + (", log colour scale)" if log else ")"))
    bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: fmt_count(v)))
    bar.ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_title(
        f"Throughput of the best plan (tokens/s; step time below)\n{subtitle(sweep)}", fontsize=11
    )
    fig.tight_layout()
    return save_figure(fig, stem)


# ---- entry points ---------------------------------------------------------------------------
def plot_sweep(document: dict, out_dir: Path) -> list[Path]:
    """Every chart that applies to this sweep, as PNG and SVG in ``out_dir``; the files written."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--out: cannot create {str(out_dir)!r}: {exc.strerror}") from None
    sweep = document["sweep"]
    files: list[Path] = []
    if not document["points"]:
        return files
    if len(sweep["gpus"]) > 1:
        files += plot_strong_scaling(document, out_dir / "strong_scaling")
    if len(sweep["gpus"]) > 1 and sweep.get("goodput") is not None:
        from paraplan.report.goodput_plots import plot_goodput

        files += plot_goodput(document, out_dir / "goodput")
    files += save_figure(breakdown_figure(document), out_dir / "breakdown")
    files += save_figure(memory_figure(document), out_dir / "memory")
    if len(swept_axes(sweep)) == 2:
        files += plot_heatmap(document, out_dir / "heatmap")
    return files
