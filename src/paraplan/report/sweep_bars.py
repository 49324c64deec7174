"""The sweep charts with one bar per point (``breakdown`` and ``memory``): bars laid out and grouped
by the outermost swept dimension, each labelled with its plan, the facet titles kept apart.
"""

from __future__ import annotations


from matplotlib.figure import Figure
from matplotlib.patches import Patch

from paraplan.report.plot_style import (
    MEMORY_PARTS,
    TIME_PARTS,
    fmt_seconds,
    light_grid,
    short_name,
    stacked_bar,
    subtitle,
    swept_axes,
    tick_text,
    value_text,
)


def _bar_layout(document: dict):
    """x position, tick label per point; groups (label, first x, last x) by the outermost swept
    dimension; the x-axis title."""
    sweep, pts = document["sweep"], document["points"]
    swept = swept_axes(sweep)
    if not swept:
        return [0.0] * len(pts), [""] * len(pts), [], subtitle(sweep)
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
            groups.append([value_text(group_dim, key), x, x])
            current = key
        xs.append(x)
        ticks.append("\n".join(tick_text(n, p[n]) for n in inner))
        if groups:
            groups[-1][2] = x
        x += 1.0
    title = " × ".join(("GPUs" if n == "gpus" else short_name(n)) for n in inner)
    return xs, ticks, groups, title


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
    light_grid(ax, "y")
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


def _bars_figure(points: list) -> tuple[Figure, object]:
    """A one-axes figure wide enough for a bar per point."""
    fig = Figure(figsize=(max(8.0, 0.5 * len(points) + 4.5), 6.2))
    return fig, fig.subplots()


def _side_legend(ax, title: str, *handles_and_labels) -> None:
    """The legend beside the axes, top left of the space right of them."""
    ax.legend(
        *handles_and_labels,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=9,
        title=title,
        title_fontsize=9,
    )


def breakdown_figure(document: dict) -> Figure:
    """Stacked shares of the step time per point, each bar labelled with its plan."""
    sweep, pts = document["sweep"], document["points"]
    xs, ticks, groups, xtitle = _bar_layout(document)
    used = [
        part
        for part in TIME_PARTS
        if any(p["feasible"] and p["breakdown"][part[0]] > 0 for p in pts)
    ]
    fig, ax = _bars_figure(pts)
    bottoms = [0.0] * len(pts)
    for key, label, color in used:
        shares = [
            100 * p["breakdown"][key] / p["step_time_s"] if p["feasible"] else 0.0 for p in pts
        ]
        bottoms = stacked_bar(ax, xs, shares, bottoms, color, label)
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
        _side_legend(ax, "time per step")
    title = "Time breakdown of the best plan per point (plan on each bar, step time above it)"
    fig.suptitle(f"{title}\n{subtitle(sweep)}", fontsize=11)
    _layout_apart(fig, titles)
    return fig


def memory_figure(document: dict) -> Figure:
    """Memory per GPU of each point's peak stage by component against the capacity, labelled with the plan."""
    sweep, pts = document["sweep"], document["points"]
    xs, ticks, groups, xtitle = _bar_layout(document)
    shown = [
        (p["memory"] if p["feasible"] else (p.get("nearest_miss") or {}).get("memory")) for p in pts
    ]
    fig, ax = _bars_figure(pts)
    bottoms = [0.0] * len(pts)
    for key, label, color in MEMORY_PARTS:
        values = [(m[f"{key}_gib"] if m else 0.0) for m in shown]
        ok = [v if p["feasible"] else 0.0 for v, p in zip(values, pts)]
        miss = [0.0 if p["feasible"] else v for v, p in zip(values, pts)]
        stacked_bar(ax, xs, ok, bottoms, color, label)
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
    _side_legend(ax, "memory per GPU", handles, labels)
    title = "Memory per GPU of the best plan per point (plan on each bar)"
    fig.suptitle(f"{title}\n{subtitle(sweep)}", fontsize=11)
    _layout_apart(fig, titles)
    return fig
