"""Plots (PNG and SVG, matplotlib's Agg backend): sweep charts and the one-estimate summary.

Sweep charts, drawn from a ``sweep.json`` document (``paraplan sweep`` and ``paraplan plot``):
- ``strong_scaling``: step time and throughput (or time to train) vs GPUs, one line per system
  (and ``--set`` combination), log-log, with dotted ideal-scaling lines;
- ``breakdown``: the time breakdown of each point's best plan, stacked bars as shares of the step
  time, the step time above each bar;
- ``memory``: the memory per GPU of each best plan's peak pipeline stage, stacked by component,
  with the HBM capacity; a point where nothing fits shows its nearest miss, hatched;
- ``heatmap``: tokens/s over the two swept dimensions, when exactly two are swept.
Every figure is built on its own ``Figure`` object (no pyplot state), so drawing is safe in any
process; SVG ids are salted with a constant and no date is written, so output is reproducible.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from matplotlib.colors import LogNorm, Normalize  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from paraplan.step.result import BREAKDOWN_PARTS  # noqa: E402
from paraplan.step.result import MEMORY_PARTS as STAGE_MEMORY_PARTS  # noqa: E402
from paraplan.specs.errors import InputError  # noqa: E402
from paraplan.units import GiB, si_prefixed  # noqa: E402

FORMATS = ("png", "svg")
DPI = 130

TIME_PARTS = tuple(
    (p.name, p.label, p.color) for p in BREAKDOWN_PARTS
)  # report.result: the one list
MEMORY_PARTS = tuple((p.key, p.label, p.color) for p in STAGE_MEMORY_PARTS)
LINE_COLORS = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")

matplotlib.rcParams["svg.hashsalt"] = "paraplan"
matplotlib.rcParams["font.size"] = 10


# ---- formatting -----------------------------------------------------------------------------
def fmt_count(value: float) -> str:
    """219104 -> '219k', 1.2e6 -> '1.2M' (three significant digits, no decimals from 100 up)."""
    scaled = max((v for v in (1e12, 1e9, 1e6, 1e3) if abs(value) >= v), default=1.0)
    return si_prefixed(value, ".3g" if abs(value) / scaled < 100 else ".0f")


def fmt_tokens(value: float) -> str:
    """3e11 -> '300B', 1.5e13 -> '15T' (the --tokens suffixes)."""
    return si_prefixed(value, "g", giga="B")


def fmt_seconds(value: float) -> str:
    if value >= 100:
        return f"{value:.0f} s"
    if value >= 1:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} µs"


def _int_label(value: float, _pos=None) -> str:
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


def _save(fig: Figure, stem: Path, formats=FORMATS) -> list[Path]:
    out = []
    for ext in formats:
        path = stem.with_suffix(f".{ext}")
        metadata = {"Date": None} if ext == "svg" else {}
        fig.savefig(path, format=ext, dpi=DPI, metadata=metadata, bbox_inches="tight")
        out.append(path)
    return out


# ---- sweep structure ------------------------------------------------------------------------
def _axes(sweep: dict) -> list[tuple[str, list]]:
    return [("system", list(sweep["systems"])), ("gpus", list(sweep["gpus"]))] + [
        (s["path"], list(s["values"])) for s in sweep.get("sets", [])
    ]


def _swept(sweep: dict) -> list[tuple[str, list]]:
    """The dimensions with more than one value, in cartesian order."""
    return [(n, v) for n, v in _axes(sweep) if len(v) > 1]


def _short(path: str) -> str:
    return path.split(".")[-1] if path not in ("system", "gpus") else path


def _value_text(name: str, value) -> str:
    if name == "gpus":
        return f"{value:,} GPUs"
    if name == "system":
        return str(value)
    return f"{_short(name)}={value}"


def _batch_text(sweep: dict) -> str:
    if sweep.get("global_batch") is not None:
        return f"global batch {sweep['global_batch']}"
    return f"global batch ≤ {sweep['max_global_batch']}"


def _subtitle(sweep: dict) -> str:
    fixed = [_value_text(n, v[0]) for n, v in _axes(sweep) if len(v) == 1]
    parts = [
        sweep["model"],
        *fixed,
        f"seq {sweep['seq_length']}",
        _batch_text(sweep),
        sweep["dtype"],
    ]
    return ", ".join(str(p) for p in parts)


# ---- strong scaling -------------------------------------------------------------------------
def plot_strong_scaling(document: dict, stem: Path) -> list[Path]:
    sweep, pts = document["sweep"], document["points"]
    others = [(n, v) for n, v in _axes(sweep) if n != "gpus"]
    series: dict[tuple, list[dict]] = {}
    for p in pts:
        key = tuple(p[n] for n, _ in others)
        series.setdefault(key, []).append(p)
    varying = [i for i, (_, v) in enumerate(others) if len(v) > 1]
    with_days = sweep.get("tokens") is not None
    fig = Figure(figsize=(13, 5.4))
    ax_time, ax_rate = fig.subplots(1, 2)
    misses = []
    for k, (key, items) in enumerate(series.items()):
        label = ", ".join(_value_text(others[i][0], key[i]) for i in varying) or str(key[0])
        color, marker = LINE_COLORS[k % len(LINE_COLORS)], MARKERS[k % len(MARKERS)]
        ok = [p for p in items if p["feasible"]]
        misses += [f"{label} at {p['gpus']:,} GPUs" for p in items if not p["feasible"]]
        if not ok:
            ax_time.plot([], [], color=color, marker=marker, label=f"{label} (nothing fits)")
            continue
        g = [p["gpus"] for p in ok]
        t = [p["step_time_s"] for p in ok]
        ax_time.plot(g, t, color=color, marker=marker, linewidth=2, label=label)
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
        if with_days:
            y = [p["time_to_train_days"] for p in ok]
            ideal = [y[0] * ok[0]["gpus"] / n for n in g]
        else:
            y = [p["tokens_per_s"] for p in ok]
            ideal = [y[0] * n / ok[0]["gpus"] for n in g]
        ax_rate.plot(g, y, color=color, marker=marker, linewidth=2, label=label)
        ax_rate.plot(g, ideal, color=color, linestyle=":", linewidth=1.2, alpha=0.8)
    ax_rate.plot(
        [], [], color="black", linestyle=":", linewidth=1.2, label="ideal (linear) scaling"
    )
    ax_time.set_ylabel("step time (s, log scale)")
    if with_days:
        ax_rate.set_ylabel(f"time to train {fmt_tokens(sweep['tokens'])} tokens (days, log scale)")
        ax_rate.set_title("Time to train")
    else:
        ax_rate.set_ylabel("throughput (tokens/s, log scale)")
        ax_rate.set_title("Training throughput")
    ax_time.set_title("Step time of the best plan")
    anything = any(p["feasible"] for p in pts)
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
        ax.xaxis.set_major_formatter(FuncFormatter(_int_label))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("GPUs (log scale)")
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", axis="y", alpha=0.12)
        if len(sweep["gpus"]) > 8:
            ax.tick_params(axis="x", labelrotation=45)
    if anything:
        _log_labels(ax_time, fmt=lambda v: f"{v:g}")
        _log_labels(ax_rate, fmt=(lambda v: f"{v:g}") if with_days else fmt_count)
    fig.suptitle(f"Strong scaling — {_subtitle(sweep)}", fontsize=12)
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
    return _save(fig, stem)


def _log_labels(ax, fmt) -> None:
    """Plain numbers on a log y axis (0.5, 2, 10 instead of 5×10⁻¹); the 2 and 5 ticks labelled too
    when the data span less than two decades."""
    lo, hi = ax.get_ylim()
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: fmt(v)))
    if hi / lo < 100:
        ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _p: fmt(v)))
    else:
        ax.yaxis.set_minor_formatter(NullFormatter())


# ---- bars per point -------------------------------------------------------------------------
def _bar_layout(document: dict):
    """x position, tick label per point; groups (label, first x, last x) by the outermost swept
    dimension; the x-axis title."""
    sweep, pts = document["sweep"], document["points"]
    swept = _swept(sweep)
    if not swept:
        return [0.0] * len(pts), [""] * len(pts), [], _subtitle(sweep)
    group_dim = swept[0][0] if len(swept) > 1 else None
    inner = [n for n, _ in swept if n != group_dim]
    xs, ticks, groups = [], [], []
    x = 0.0
    current = object()
    for p in pts:
        key = p[group_dim] if group_dim else None
        if group_dim and key != current:
            if groups:
                x += 0.8  # gap between groups
            groups.append([_value_text(group_dim, key), x, x])
            current = key
        xs.append(x)
        ticks.append("\n".join(_tick_text(n, p[n]) for n in inner))
        if groups:
            groups[-1][2] = x
        x += 1.0
    title = " × ".join(("GPUs" if n == "gpus" else _short(n)) for n in inner)
    return xs, ticks, groups, title


def _tick_text(name: str, value) -> str:
    if name == "gpus":
        return f"{value:,}"
    if name == "system":
        return str(value)
    return str(value)


def _decorate_bars(fig: Figure, ax, xs, ticks, groups, xtitle):
    ax.set_xticks(xs)
    lines = [t.split("\n") for t in ticks]
    long = max((len(w) for t in lines for w in t), default=0) > 7 or len(xs) > 24
    if long:  # rotated labels read better on one line: "16 · 8 · 400Gb/s"
        ticks = [" · ".join(t) for t in lines]
        xtitle = xtitle.replace(" × ", " · ")
    ax.set_xticklabels(ticks, rotation=90 if long else 0, fontsize=9 if len(xs) <= 24 else 8)
    ax.set_xlim(min(xs) - 0.7, max(xs) + 0.7)
    ax.set_xlabel(xtitle)
    for label, first, last in groups:
        ax.axvline(first - 0.9, color="#999999", linewidth=0.8) if first > 0 else None
        ax.text(
            (first + last) / 2,
            1.01,
            label,
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=10,
            fontweight="bold",
        )
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    return [t for t in ax.texts if t.get_fontweight() == "bold"]


GROUP_LABEL_GAP_PX = 12  # pixels kept between neighbouring facet titles
MAX_WIDEN = 2.5  # a figure is widened at most this much to keep facet titles apart


def _overlap(fig: Figure, texts) -> float:
    """How much wider the axes must be for neighbouring facet titles not to collide (1: they fit):
    the worst ratio of the space two titles need to the space between their centres."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    boxes = [t.get_window_extent(renderer) for t in texts]
    worst = 1.0
    for a, b in zip(boxes, boxes[1:]):
        need = (a.width + b.width) / 2 + GROUP_LABEL_GAP_PX
        distance = (b.x0 + b.x1) / 2 - (a.x0 + a.x1) / 2
        worst = max(worst, need / max(distance, 1e-9))
    return worst


def _layout_apart(fig: Figure, texts, layout=lambda fig: fig.tight_layout()) -> None:
    """Lay the figure out so that facet titles do not collide: widen it (up to MAX_WIDEN), and if
    that is not enough, shrink the titles' font."""
    layout(fig)
    if len(texts) < 2:
        return
    width, height = fig.get_size_inches()
    ratio = _overlap(fig, texts)
    if ratio > 1:
        fig.set_size_inches(min(width * ratio * 1.05, width * MAX_WIDEN), height)
        layout(fig)
    size = texts[0].get_fontsize()
    while _overlap(fig, texts) > 1 and size > 6:
        size -= 1
        for t in texts:
            t.set_fontsize(size)
        layout(fig)


def _label_bars(ax, xs, labels, y: float) -> None:
    """Each bar's plan, written up the bar from ``y`` on a light box (readable over any colour)."""
    for x, label in zip(xs, labels):
        if label:
            ax.text(
                x,
                y,
                label,
                rotation=90,
                ha="center",
                va="bottom",
                fontsize=7,
                color="black",
                clip_on=True,
                bbox={
                    "boxstyle": "round,pad=0.2",
                    "facecolor": "white",
                    "alpha": 0.75,
                    "linewidth": 0,
                },
            )


def _point_label(point: dict) -> str | None:
    """The plan of a point's bar: its best plan, or the nearest miss it shows."""
    if point["feasible"]:
        return point.get("plan_label")
    return (point.get("nearest_miss") or {}).get("plan_label")


def plot_breakdown(document: dict, stem: Path) -> list[Path]:
    return _save(breakdown_figure(document), stem)


def breakdown_figure(document: dict) -> Figure:
    """Stacked shares of the step time per point, each bar labelled with its plan."""
    sweep, pts = document["sweep"], document["points"]
    xs, ticks, groups, xtitle = _bar_layout(document)
    used = [
        part
        for part in TIME_PARTS
        if any(p["feasible"] and p["breakdown"][part[0]] > 0 for p in pts)
    ]
    fig = Figure(figsize=(max(8.0, 0.5 * len(pts) + 4.5), 6.2))
    ax = fig.subplots()
    bottoms = [0.0] * len(pts)
    for key, label, color in used:
        shares = [
            100 * p["breakdown"][key] / p["step_time_s"] if p["feasible"] else 0.0 for p in pts
        ]
        ax.bar(
            xs,
            shares,
            bottom=bottoms,
            width=0.75,
            color=color,
            label=label,
            edgecolor="white",
            linewidth=0.4,
        )
        bottoms = [b + s for b, s in zip(bottoms, shares)]
    for x, p in zip(xs, pts):
        text = fmt_seconds(p["step_time_s"]) if p["feasible"] else "no plan fits"
        ax.text(
            x,
            101.5,
            text,
            ha="center",
            va="bottom",
            rotation=90,
            fontsize=8,
            color="black" if p["feasible"] else "#C44E52",
        )
    ax.set_ylim(0, 125 if groups else 118)
    ax.set_yticks(range(0, 101, 20))
    ax.set_ylabel("share of step time (%)")
    _label_bars(ax, xs, [_point_label(p) if p["feasible"] else None for p in pts], 1.5)
    titles = _decorate_bars(fig, ax, xs, ticks, groups, xtitle)
    if used:
        ax.legend(
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize=9,
            title="time per step",
            title_fontsize=9,
        )
    fig.suptitle(
        f"Time breakdown of the best plan per point (plan on each bar, step time above it)\n{_subtitle(sweep)}",
        fontsize=11,
    )
    _layout_apart(fig, titles)
    return fig


def plot_memory(document: dict, stem: Path) -> list[Path]:
    return _save(memory_figure(document), stem)


def memory_figure(document: dict) -> Figure:
    """Memory per GPU of each point's peak stage by component against the capacity, labelled with the plan."""
    sweep, pts = document["sweep"], document["points"]
    xs, ticks, groups, xtitle = _bar_layout(document)
    shown = [
        (p["memory"] if p["feasible"] else (p.get("nearest_miss") or {}).get("memory")) for p in pts
    ]
    fig = Figure(figsize=(max(8.0, 0.5 * len(pts) + 4.5), 6.2))
    ax = fig.subplots()
    bottoms = [0.0] * len(pts)
    for key, label, color in MEMORY_PARTS:
        values = [(m[f"{key}_gib"] if m else 0.0) for m in shown]
        ok = [v if p["feasible"] else 0.0 for v, p in zip(values, pts)]
        miss = [0.0 if p["feasible"] else v for v, p in zip(values, pts)]
        ax.bar(
            xs,
            ok,
            bottom=bottoms,
            width=0.75,
            color=color,
            label=label,
            edgecolor="white",
            linewidth=0.4,
        )
        if any(miss):
            ax.bar(
                xs,
                miss,
                bottom=bottoms,
                width=0.75,
                color=color,
                alpha=0.45,
                hatch="//",
                edgecolor="#444444",
                linewidth=0.4,
            )
        bottoms = [b + v for b, v in zip(bottoms, values)]
    first_cap = True
    for x, p, m in zip(xs, pts, shown):
        if m is None:
            ax.text(
                x, 0, "no plan", ha="center", va="bottom", rotation=90, fontsize=8, color="#C44E52"
            )
            continue
        ax.hlines(
            m["capacity_gib"],
            x - 0.45,
            x + 0.45,
            colors="black",
            linewidth=2,
            label="HBM capacity" if first_cap else None,
        )
        first_cap = False
    handles, labels = ax.get_legend_handles_labels()
    if any(not p["feasible"] and m for p, m in zip(pts, shown)):
        handles.append(Patch(facecolor="#DDDDDD", hatch="//", edgecolor="#444444"))
        labels.append("nearest miss (does not fit)")
    top = max([b for b in bottoms] + [m["capacity_gib"] for m in shown if m] + [1.0])
    ax.set_ylim(0, top * (1.14 if groups else 1.06))
    ax.set_ylabel("memory per GPU, peak pipeline stage (GiB)")
    _label_bars(ax, xs, [_point_label(p) if m else None for p, m in zip(pts, shown)], top * 0.015)
    titles = _decorate_bars(fig, ax, xs, ticks, groups, xtitle)
    ax.legend(
        handles,
        labels,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=9,
        title="memory per GPU",
        title_fontsize=9,
    )
    fig.suptitle(
        f"Memory per GPU of the best plan per point (plan on each bar)\n{_subtitle(sweep)}",
        fontsize=11,
    )
    _layout_apart(fig, titles)
    return fig


# ---- heatmap --------------------------------------------------------------------------------
def plot_heatmap(document: dict, stem: Path) -> list[Path]:
    sweep, pts = document["sweep"], document["points"]
    (row_name, row_values), (col_name, col_values) = _swept(sweep)
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
        [_tick_text(col_name, v) for v in col_values],
        rotation=45 if max(len(str(v)) for v in col_values) > 8 else 0,
        ha="right" if max(len(str(v)) for v in col_values) > 8 else "center",
    )
    ax.set_yticks(range(len(row_values)))
    ax.set_yticklabels([_tick_text(row_name, v) for v in row_values])
    ax.set_xlabel(_axis_title(col_name))
    ax.set_ylabel(_axis_title(row_name))
    bar = fig.colorbar(image, ax=ax)
    bar.set_label("throughput (tokens/s" + (", log colour scale)" if log else ")"))
    bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: fmt_count(v)))
    bar.ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_title(
        f"Throughput of the best plan (tokens/s; step time below)\n{_subtitle(sweep)}", fontsize=11
    )
    fig.tight_layout()
    return _save(fig, stem)


def _axis_title(name: str) -> str:
    if name == "gpus":
        return "GPUs"
    if name == "system":
        return "system"
    return f"{name} (as given to --set)"


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
    files += plot_breakdown(document, out_dir / "breakdown")
    files += plot_memory(document, out_dir / "memory")
    if len(_swept(sweep)) == 2:
        files += plot_heatmap(document, out_dir / "heatmap")
    return files


def plot_estimate(est, path: Path) -> Path:
    """One estimate (``paraplan estimate --plot FILE``), written atomically into an existing
    directory: see :func:`estimate_figure`."""
    path = Path(path)
    ext = path.suffix.lower().lstrip(".")
    if ext not in FORMATS:
        raise InputError(
            f"--plot: {str(path)!r} is not allowed; the file name must end in .png or .svg"
        )
    if not path.parent.is_dir():
        raise InputError(
            f"--plot: {str(path)!r} is not allowed; the directory {str(path.parent)!r} does not exist "
            "(create it first)"
        )
    fig = estimate_figure(est)
    from paraplan.io.documents import atomic_path

    try:
        with atomic_path(path, field="--plot") as temp, open(temp, "wb") as handle:
            fig.savefig(
                handle,
                format=ext,
                dpi=DPI,
                metadata={"Date": None} if ext == "svg" else {},
                bbox_inches="tight",
            )
    except OSError as exc:
        raise InputError(f"--plot: cannot write {str(path)!r}: {exc.strerror}") from None
    return path


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
    ax_t.grid(True, axis="x", alpha=0.3)
    ax_t.set_axisbelow(True)

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
    ax_m.grid(True, axis="x", alpha=0.3)
    ax_m.set_axisbelow(True)
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
        ax.bar(
            xs,
            values,
            bottom=bottoms,
            width=0.75,
            color=color,
            label=label,
            edgecolor="white",
            linewidth=0.4,
        )
        bottoms = [b + v for b, v in zip(bottoms, values)]
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
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)
