"""The goodput chart of a ``sweep --goodput`` (PNG and SVG, matplotlib's Agg backend, no pyplot
state; report.plot_style): against the GPU count, one line per combination of the other swept
dimensions,
- left: the effective training time ratio of each point's best plan (failures, checkpoints, restarts
  and pauses; docs/goodput.md);
- right: its expected days to train --tokens with the Monte Carlo's P10-P90 band shaded, and the
  failure-free days dotted (the gap between them is the badput)."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter, PercentFormatter

from paraplan.report import plot_style as ps


def _series(document: dict) -> dict[str, list[dict]]:
    """Label -> the points with a finite goodput of one combination of the non-GPU dimensions."""
    sweep = document["sweep"]
    others = [(n, v) for n, v in ps.sweep_axes(sweep) if n != "gpus"]
    varying = [n for n, v in others if len(v) > 1]
    out: dict[str, list[dict]] = {}
    for p in document["points"]:
        label = ", ".join(ps.value_text(n, p[n]) for n in varying) or str(p["system"])
        items = out.setdefault(label, [])
        good = p.get("goodput") or {}
        if p["feasible"] and good.get("expected_days") is not None:
            items.append(p)
    return out


def plot_goodput(document: dict, stem: Path) -> list[Path]:
    """The two panels of the module docstring, written as ``stem``.png and .svg."""
    sweep = document["sweep"]
    fig = Figure(figsize=(13, 5.4))
    ax_ettr, ax_days = fig.subplots(1, 2)
    for k, (label, items) in enumerate(_series(document).items()):
        style = {
            "color": ps.LINE_COLORS[k % len(ps.LINE_COLORS)],
            "marker": ps.MARKERS[k % len(ps.MARKERS)],
        }
        if not items:
            ax_days.plot([], [], **style, label=f"{label} (nothing fits)")
            continue
        g = [p["gpus"] for p in items]
        good = [p["goodput"] for p in items]
        ax_ettr.plot(g, [x["effective_training_time_ratio"] for x in good], **style, lw=2)
        ax_days.plot(g, [x["expected_days"] for x in good], **style, lw=2, label=label)
        ax_days.fill_between(
            g,
            [x["days_p10"] for x in good],
            [x["days_p90"] for x in good],
            color=style["color"],
            alpha=0.18,
            linewidth=0,
        )
        ax_days.plot(
            g, [x["useful_days"] for x in good], color=style["color"], ls=":", lw=1.2, alpha=0.9
        )
    ax_days.plot([], [], color="black", ls=":", lw=1.2, label="failure-free")
    ax_days.fill_between([], [], [], color="black", alpha=0.18, label="P10-P90")
    ax_ettr.set_title("Effective training time of the best plan")
    ax_ettr.set_ylabel("effective training time (useful / wall-clock)")
    ax_ettr.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax_days.set_title(f"Days to train {ps.fmt_tokens(sweep['tokens'])} tokens")
    ax_days.set_ylabel("days (expected; log scale)")
    ax_days.set_yscale("log")
    ps.log_labels(ax_days, fmt=lambda v: f"{v:g}")
    for ax in (ax_ettr, ax_days):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sweep["gpus"])
        ax.xaxis.set_major_formatter(FuncFormatter(ps.int_label))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("GPUs (log scale)")
        ax.grid(True, which="major", alpha=0.35)
    ax_days.legend(loc="best", fontsize=9)
    fig.suptitle(f"Time to train with failures — {ps.subtitle(sweep)}", fontsize=12)
    fig.tight_layout()
    return ps.save_figure(fig, stem)
