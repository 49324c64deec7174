"""Render an :class:`~paraplan.report.result.Estimate` as readable text with rich tables.

Everything is built from the typed fields of the result objects (no formatting chosen by key
names). ``estimate_renderables`` returns rich renderables (print them on any Console);
``render_estimate`` returns plain text of a given width, without colour, for tests and logs.
Tables let rich fold long names, so output stays inside the console width.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from paraplan.report.result import CommCost, Estimate, OpCost, StageMemory
from paraplan.units import GiB

MB = 1e6
MAX_STAGE_ROWS = 12  # longer pipelines show the first, the last and the peak stages

BREAKDOWN_LABELS = (
    ("forward_s", "forward"),
    ("backward_s", "backward"),
    ("recompute_s", "recompute"),
    ("optimizer_s", "optimizer step"),
    ("bubble_s", "pipeline bubble"),
    ("tp_comm_s", "TP comm (exposed)"),
    ("cp_comm_s", "CP comm (exposed)"),
    ("pp_comm_s", "PP comm (exposed)"),
    ("dp_comm_s", "DP comm (exposed)"),
    ("offload_s", "offload (exposed)"),
)


# ---- small formatters ------------------------------------------------------------------------
def _gib(n_bytes: float) -> str:
    return f"{n_bytes / GiB:.2f}"


def _seconds(value_s: float) -> str:
    if value_s >= 100:
        return f"{value_s:.1f}"
    if value_s >= 1:
        return f"{value_s:.3f}"
    return f"{value_s:.4f}"


def _ms(value_s: float) -> str:
    return f"{value_s * 1e3:.3f}"


def _count(value: float) -> str:
    """Large numbers with an SI suffix: 1.2e12 -> '1.20T'."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.2f}{suffix}"
    return f"{value:.0f}"


def _table(title: str, *columns: str, numeric_from: int = 1, fold: Sequence[str] = ()) -> Table:
    """A borderless table; numeric columns right-aligned. Columns named in ``fold`` give way first
    when the console is narrow (their text folds); the others keep their width as long as they can."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, expand=False)
    for i, col in enumerate(columns):
        table.add_column(
            col,
            justify="right" if i >= numeric_from else "left",
            no_wrap=col not in fold,
            overflow="fold",
            ratio=1 if col in fold else None,
        )
    return table


# ---- sections --------------------------------------------------------------------------------
def plan_line(est: Estimate) -> str:
    """One line: model, system, degrees, batch, datatype, recompute, ZeRO and non-default options."""
    p = est.plan
    dp = p.get("dp") or 0
    mb = p.get("micro_batch", 1)
    microbatches = p["global_batch"] // (dp * mb) if dp else 0
    schedule = p.get("schedule") or ("interleaved" if p.get("vpp", 1) > 1 else "1f1b")
    parts = [
        f"{est.model} on {est.system}",
        f"{p['gpus']} GPUs = tp {p['tp']} × pp {p['pp']} × cp {p['cp']} × dp {dp}"
        + (f" (vpp {p['vpp']})" if p.get("vpp", 1) > 1 else ""),
        f"micro-batch {mb}, global batch {p['global_batch']} ({microbatches} micro-batches/step), seq {p['seq_length']}",
        f"{p['dtype']}, {p['attention']} attention, recompute {p['recompute']}, zero {p['zero']}, schedule {schedule}"
        + (", sequence parallel" if p.get("sequence_parallel") else ""),
    ]
    extras = [name for name in ("offload_weights", "offload_activations", "offload_optimizer", "overlap_tp_comm") if p.get(name)]
    extras += [f"no {name}" for name in ("overlap_dp_grad_reduce", "overlap_param_gather") if p.get(name) is False]
    placement = p.get("placement", "tp-cp-dp-pp")
    if placement != "tp-cp-dp-pp":
        extras.append(f"placement {placement}")
    if extras:
        parts.append(", ".join(e.replace("_", " ") for e in extras))
    return "plan: " + " | ".join(parts)


def fit_line(est: Estimate) -> str:
    """'fits' or the prominent 'DOES NOT FIT' line with the peak stage's memory vs capacity."""
    peak = est.peak_stage
    if est.fits:
        return (
            f"fits: peak {_gib(peak.peak_bytes)} GiB on stage {peak.stage} of {_gib(peak.capacity_bytes)} GiB per GPU"
        )
    over = sum(1 for s in est.stages if not s.fits)
    return (
        f"DOES NOT FIT: stage {peak.stage} needs {_gib(peak.peak_bytes)} GiB per GPU but has "
        f"{_gib(peak.capacity_bytes)} GiB (over by {_gib(peak.peak_bytes - peak.capacity_bytes)} GiB; "
        f"{over} of {len(est.stages)} stages over capacity)"
    )


def metrics_table(est: Estimate) -> Table:
    """Step time, throughput and utilisation."""
    table = _table("Key metrics", "metric", "value")
    table.add_row("step time (s)", _seconds(est.step_time_s))
    table.add_row("tokens / s", f"{est.tokens_per_s:,.0f}")
    table.add_row("tokens / step", f"{est.tokens_per_step:,}")
    table.add_row("MFU", f"{est.mfu * 100:.1f}%")
    table.add_row("HFU", f"{est.hfu * 100:.1f}%")
    table.add_row("model TFLOP/s per GPU", f"{est.model_tflops_per_gpu:.1f}")
    table.add_row("peak TFLOP/s per GPU", f"{est.peak_flops_per_gpu / 1e12:.1f}")
    return table


def breakdown_table(est: Estimate) -> Table:
    """Each part of the critical path in seconds and as a share of the step."""
    table = _table("Time per step (critical path)", "component", "seconds", "% of step")
    step = est.step_time_s
    for attr, label in BREAKDOWN_LABELS:
        value = getattr(est.breakdown, attr)
        table.add_row(label, _seconds(value), f"{100 * value / step:.1f}" if step > 0 else "-")
    table.add_section()
    table.add_row("step", _seconds(step), "100.0")
    return table


def _stages_to_show(stages: Sequence[StageMemory], peak: int) -> list[StageMemory | None]:
    """All stages, or for long pipelines the first three, the peak and the last two (None = gap)."""
    if len(stages) <= MAX_STAGE_ROWS:
        return list(stages)
    keep = sorted({0, 1, 2, peak, len(stages) - 2, len(stages) - 1})
    out: list[StageMemory | None] = []
    for i, idx in enumerate(keep):
        if i and idx != keep[i - 1] + 1:
            out.append(None)
        out.append(stages[idx])
    return out


def memory_table(est: Estimate) -> Table:
    """GiB per GPU on each pipeline stage; the peak stage is marked with '*'."""
    table = _table(
        "Memory per GPU (GiB) by pipeline stage; optim. = optimizer state, activ. = activations, * = peak stage",
        "stage", "weights", "grads", "optim.", "activ.", "buffers", "reserved", "peak", "capacity", "fits",
    )
    peak = est.peak_stage.stage
    for s in _stages_to_show(est.stages, peak):
        if s is None:
            table.add_row("…", *([""] * 9))
            continue
        table.add_row(
            f"{s.stage}{' *' if s.stage == peak else ''}",
            _gib(s.weights_bytes),
            _gib(s.gradients_bytes),
            _gib(s.optimizer_bytes),
            _gib(s.activations_bytes),
            _gib(s.buffers_bytes),
            _gib(s.reserved_bytes),
            _gib(s.peak_bytes),
            _gib(s.capacity_bytes),
            "yes" if s.fits else "NO",
        )
    return table


def _gemm_shape(shape: tuple[int, int, int, int] | None) -> str:
    if shape is None:
        return "-"
    b, m, n, k = shape
    return f"{b}×{m}×{n}×{k}"


def ops_table(ops: Sequence[OpCost]) -> Table:
    """Per op of one micro-batch on one GPU of the busiest stage (GEMM shape = batch×m×n×k)."""
    table = _table(
        "Ops per micro-batch per GPU",
        "block", "op", "kind", "GEMM b×m×n×k", "fwd GFLOP", "eff %", "fwd ms", "bwd ms", "count",
        numeric_from=3,
        fold=("block", "op", "GEMM b×m×n×k"),
    )
    previous = None
    for op in ops:
        table.add_row(
            op.block if op.block != previous else "",
            op.name,
            op.kind,
            _gemm_shape(op.gemm_shape),
            f"{op.fwd_flops / 1e9:.2f}",
            "-" if op.efficiency is None else f"{op.efficiency * 100:.0f}",
            _ms(op.fwd_time_s),
            _ms(op.bwd_time_s),
            str(op.count_per_gpu),
        )
        previous = op.block
    return table


def comms_table(comms: Sequence[CommCost]) -> Table:
    """Per collective of one micro-batch: volume, calls, time per call and the group's placement."""
    table = _table(
        "Collectives per micro-batch per GPU",
        "block", "name", "group", "kind", "MB", "calls f/b", "ms/call", "group size", "domains",
        numeric_from=4,
        fold=("block", "name"),
    )
    previous = None
    for c in comms:
        table.add_row(
            c.block if c.block != previous else "",
            c.name,
            c.group,
            c.kind,
            f"{c.bytes / MB:.2f}",
            f"{c.calls_fwd}/{c.calls_bwd}",
            _ms(c.time_per_call_s),
            str(c.group_size),
            str(c.domains_spanned),
        )
        previous = c.block
    return table


def run_table(run: dict) -> Table:
    """Totals of a whole run (``Estimate.run_totals``)."""
    table = _table(f"Run of {_count(run['tokens'])} tokens", "quantity", "value")
    table.add_row("steps", f"{run['steps']:,.0f}")
    table.add_row("days", f"{run['days']:,.2f}")
    table.add_row("GPU-hours", f"{run['gpu_hours']:,.0f}")
    if run.get("cost_usd") is None:
        table.add_row("cost (USD)", "- (no price: pass --price)")
    else:
        table.add_row("cost (USD)", f"{run['cost_usd']:,.0f} at {run['price_per_gpu_hour']:.2f}/GPU-hour")
    return table


def estimate_renderables(est: Estimate, *, run: dict | None = None, show_ops: bool = False) -> list[RenderableType]:
    """The sections of the text report, in reading order."""
    fit = Text(fit_line(est), style="bold" if est.fits else "bold red")
    out: list[RenderableType] = [Text(plan_line(est)), fit, Text(""), metrics_table(est), breakdown_table(est), memory_table(est)]
    if show_ops:
        if est.ops:
            out.append(ops_table(est.ops))
        if est.comms:
            out.append(comms_table(est.comms))
    if run is not None:
        out.append(run_table(run))
    if not est.fits:
        out.append(fit)
    return out


def print_estimate(console: Console, est: Estimate, *, run: dict | None = None, show_ops: bool = False) -> None:
    """Print the text report on ``console``."""
    console.print(Group(*estimate_renderables(est, run=run, show_ops=show_ops)))


def render_to_text(renderables: Sequence[RenderableType], width: int = 100) -> str:
    """Plain text (no colour, no markup) of renderables at a fixed width."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False, highlight=False)
    for r in renderables:
        console.print(r)
    return buffer.getvalue()


def render_estimate(est: Estimate, *, run: dict | None = None, show_ops: bool = False, width: int = 100) -> str:
    """Plain-text report of ``est`` (what ``paraplan estimate`` prints)."""
    return render_to_text(estimate_renderables(est, run=run, show_ops=show_ops), width=width)
