"""What the plots share (matplotlib's Agg backend, no pyplot state): formats and colours, number
formats, writing a figure reproducibly (SVG ids salted with a constant, no date), and the text of a
sweep's dimensions (the axes, the swept ones, the subtitle of every sweep chart).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from paraplan.step.result import BREAKDOWN_PARTS  # noqa: E402
from paraplan.step.result import MEMORY_PARTS as STAGE_MEMORY_PARTS  # noqa: E402
from paraplan.units import si_prefixed  # noqa: E402

matplotlib.rcParams["svg.hashsalt"] = "paraplan"
matplotlib.rcParams["font.size"] = 10

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


def int_label(value: float, _pos=None) -> str:
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


def write_figure(fig: Figure, target, ext: str) -> None:
    """``fig`` as ``ext`` (png or svg) to a path or an open binary file: DPI, tight bounds, and no
    date in an SVG (reproducible output)."""
    metadata = {"Date": None} if ext == "svg" else {}
    fig.savefig(target, format=ext, dpi=DPI, metadata=metadata, bbox_inches="tight")


def save_figure(fig: Figure, stem: Path, formats=FORMATS) -> list[Path]:
    """``fig`` written as ``stem``.png and ``stem``.svg, each to a temporary name renamed over the
    target (io.documents.atomic_path): a full disk leaves the old plot whole and no temporary file,
    and the InputError names the file; the paths."""
    from paraplan.io.documents import atomic_path, write_error

    out = []
    for ext in formats:
        path = stem.with_suffix(f".{ext}")
        try:
            with atomic_path(path, field="plot") as temp, open(temp, "wb") as handle:
                write_figure(fig, handle, ext)
        except OSError as exc:
            raise write_error(path, exc, field="plot") from None
        out.append(path)
    return out


def stacked_bar(ax, xs, values, bottoms, color, label) -> list[float]:
    """One component of stacked bars (white edges between the components); the new bottoms."""
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
    return [b + v for b, v in zip(bottoms, values)]


def light_grid(ax, axis: str) -> None:
    """Faint grid lines along ``axis`` ("x" or "y"), drawn behind the bars."""
    ax.grid(True, axis=axis, alpha=0.3)
    ax.set_axisbelow(True)


# ---- sweep structure ------------------------------------------------------------------------
def sweep_axes(sweep: dict) -> list[tuple[str, list]]:
    return [("system", list(sweep["systems"])), ("gpus", list(sweep["gpus"]))] + [
        (s["path"], list(s["values"])) for s in sweep.get("sets", [])
    ]


def swept_axes(sweep: dict) -> list[tuple[str, list]]:
    """The dimensions with more than one value, in cartesian order."""
    return [(n, v) for n, v in sweep_axes(sweep) if len(v) > 1]


def short_name(path: str) -> str:
    return path.split(".")[-1] if path not in ("system", "gpus") else path


def value_text(name: str, value) -> str:
    if name == "gpus":
        return f"{value:,} GPUs"
    if name == "system":
        return str(value)
    return f"{short_name(name)}={value}"


def batch_text(sweep: dict) -> str:
    if sweep.get("global_batch") is not None:
        return f"global batch {sweep['global_batch']}"
    return f"global batch ≤ {sweep['max_global_batch']}"


def subtitle(sweep: dict) -> str:
    fixed = [value_text(n, v[0]) for n, v in sweep_axes(sweep) if len(v) == 1]
    parts = [
        sweep["model"],
        *fixed,
        f"seq {sweep['seq_length']}",
        batch_text(sweep),
        sweep["dtype"],
    ]
    return ", ".join(str(p) for p in parts)


def log_labels(ax, fmt) -> None:
    """Plain numbers on a log y axis (0.5, 2, 10 instead of 5×10⁻¹); the 2 and 5 ticks labelled too
    when the data span less than two decades."""
    lo, hi = ax.get_ylim()
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: fmt(v)))
    if hi / lo < 100:
        ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _p: fmt(v)))
    else:
        ax.yaxis.set_minor_formatter(NullFormatter())


def tick_text(name: str, value) -> str:
    return f"{value:,}" if name == "gpus" else str(value)


def axis_title(name: str) -> str:
    if name == "gpus":
        return "GPUs"
    if name == "system":
        return "system"
    return f"{name} (as given to --set)"
