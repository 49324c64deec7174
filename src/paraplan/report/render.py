"""Render an :class:`~paraplan.step.result.Estimate` as readable plain text.

Everything is built from the typed fields of the result objects (no formatting chosen by key
names). ``estimate_renderables`` returns the sections (strings and tables),
report.text_table's :class:`PlainConsole` prints them at a width, ``render_estimate`` returns the
text.
"""

from __future__ import annotations

import io
from collections.abc import Sequence


from paraplan.step.margin import MEMORY_MARGIN, UNCERTAIN
from paraplan.step.result import BREAKDOWN_PARTS, CommCost, Estimate, OpCost, StageMemory
from paraplan.specs.parallel import DEFAULT_PLACEMENT_LABEL
from paraplan.units import GiB, si_prefixed
from paraplan.report.text_table import PlainConsole, SimpleTable, simple_table

MB = 1e6
MAX_STAGE_ROWS = 12  # longer pipelines show the first, the last and the peak stages


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
    """Large numbers with an SI suffix: 1.2e12 -> '1.20T', 3e11 -> '300.00B'."""
    return si_prefixed(value, ".2f", giga="B")


# ---- sections --------------------------------------------------------------------------------
def parameters_text(counts) -> str:
    """'8.03B parameters' or, when fewer are active per token, '46.7B parameters, 12.9B active'
    (``counts``: graph.params.ParameterCounts)."""
    from paraplan.graph.params import format_parameters

    text = f"{format_parameters(counts.total)} parameters"
    if counts.active < counts.total:
        text += f", {format_parameters(counts.active)} active"
    return text


def plan_line(est: Estimate, parameters=None) -> str:
    """One line: model (and its parameter count, ``parameters``: graph.params.ParameterCounts),
    system, degrees, batch, datatype, recompute, ZeRO and non-default options."""
    p = est.plan
    dp = p.get("dp") or 0
    mb = p.get("micro_batch", 1)
    microbatches = p["global_batch"] // (dp * mb) if dp else 0
    schedule = p.get("schedule") or ("interleaved" if p.get("vpp", 1) > 1 else "1f1b")
    parts = [
        f"{est.model}{f' ({parameters_text(parameters)})' if parameters is not None else ''} on {est.system}",
        f"{p['gpus']} GPUs = tp {p['tp']} × pp {p['pp']} × cp {p['cp']} × dp {dp}"
        + (f" (vpp {p['vpp']})" if p.get("vpp", 1) > 1 else ""),
        f"micro-batch {mb}, global batch {p['global_batch']} ({microbatches} micro-batches/step), seq {p['seq_length']}",
        f"{p['dtype']}, {p['attention']} attention, recompute {p['recompute']}, zero {p['zero']}, schedule {schedule}"
        + (", sequence parallel" if p.get("sequence_parallel") else ""),
    ]
    extras = [
        name
        for name in (
            "offload_weights",
            "offload_activations",
            "offload_optimizer",
            "overlap_tp_comm",
        )
        if p.get(name)
    ]
    if p.get("offload_activation_layers"):
        extras[extras.index("offload_activations")] += (
            f" ({p['offload_activation_layers']} layers per stage)"
        )
    extras += [
        f"no {name}"
        for name in ("overlap_dp_grad_reduce", "overlap_param_gather")
        if p.get(name) is False
    ]
    placement = p.get("placement", DEFAULT_PLACEMENT_LABEL)
    if placement != DEFAULT_PLACEMENT_LABEL:
        extras.append(f"placement {placement}")
    if extras:
        parts.append(", ".join(e.replace("_", " ") for e in extras))
    return "plan: " + " | ".join(parts)


def fit_line(est: Estimate) -> str:
    """'fits', 'UNCERTAIN FIT' (a peak within step.margin's share of capacity, either way) or the
    prominent 'DOES NOT FIT' line with the peak stage's memory vs capacity."""
    peak = est.peak_stage
    uncertain = est.fit == UNCERTAIN
    margin = f"within the {MEMORY_MARGIN * 100:.0f} % memory margin: the model's memory error can carry it across"
    if est.fits:
        note = f" (uncertain: {margin})" if uncertain else ""
        return f"fits: peak {_gib(peak.peak_bytes)} GiB on stage {peak.stage} of {_gib(peak.capacity_bytes)} GiB per GPU{note}"
    over = sum(1 for s in est.stages if not s.fits)
    if uncertain:
        return (
            f"UNCERTAIN FIT: stage {peak.stage} needs {_gib(peak.peak_bytes)} GiB per GPU of "
            f"{_gib(peak.capacity_bytes)} GiB (over by {_gib(peak.peak_bytes - peak.capacity_bytes)} GiB, "
            f"{margin}; {over} of {len(est.stages)} stages over capacity)"
        )
    if (
        peak.peak_bytes <= peak.capacity_bytes
    ):  # every GPU holds its stage: offload overflows the host memory
        host = max(
            (s for s in est.stages if not s.fits),
            key=lambda s: s.host_bytes - s.host_capacity_bytes,
        )
        return (
            f"DOES NOT FIT: stage {host.stage} offloads {_gib(host.host_bytes)} GiB per GPU to host memory but the "
            f"host has {_gib(host.host_capacity_bytes)} GiB per GPU (over by "
            f"{_gib(host.host_bytes - host.host_capacity_bytes)} GiB; {over} of {len(est.stages)} stages over capacity)"
        )
    return (
        f"DOES NOT FIT: stage {peak.stage} needs {_gib(peak.peak_bytes)} GiB per GPU but has "
        f"{_gib(peak.capacity_bytes)} GiB (over by {_gib(peak.peak_bytes - peak.capacity_bytes)} GiB; "
        f"{over} of {len(est.stages)} stages over capacity)"
    )


def metrics_table(est: Estimate) -> SimpleTable:
    """Step time, throughput and utilisation."""
    table = simple_table("Key metrics", "metric", "value")
    table.add_row("step time (s)", _seconds(est.step_time_s))
    table.add_row("tokens / s", f"{est.tokens_per_s:,.0f}")
    table.add_row("tokens / step", f"{est.tokens_per_step:,}")
    table.add_row("MFU", f"{est.mfu * 100:.1f}%")
    table.add_row("HFU", f"{est.hfu * 100:.1f}%")
    table.add_row("model TFLOP/s per GPU", f"{est.model_tflops_per_gpu:.1f}")
    table.add_row("peak TFLOP/s per GPU", f"{est.peak_flops_per_gpu / 1e12:.1f}")
    return table


def breakdown_table(est: Estimate) -> SimpleTable:
    """Each part of the critical path in seconds and as a share of the step."""
    table = simple_table("Time per step (critical path)", "component", "seconds", "% of step")
    step = est.step_time_s
    for attr, label in ((part.name, part.label) for part in BREAKDOWN_PARTS):
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


def memory_table(est: Estimate) -> SimpleTable:
    """GiB per GPU on each pipeline stage; the peak stage is marked with '*'."""
    table = simple_table(
        "Memory per GPU (GiB) by pipeline stage; optim. = optimizer state, activ. = activations, * = peak stage",
        "stage",
        "weights",
        "grads",
        "optim.",
        "activ.",
        "buffers",
        "reserved",
        "peak",
        "capacity",
        "fits",
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


OPS_COLUMNS = (
    "block",
    "op",
    "kind",
    "GEMM b×m×n×k",
    "fwd GFLOP",
    "eff %",
    "fwd ms",
    "bwd ms",
    "count",
)
COMMS_COLUMNS = (
    "block",
    "name",
    "group",
    "kind",
    "MB",
    "calls f/b",
    "ms/call",
    "group size",
    "domains",
)


def _by_block(title: str, columns: tuple, rows, numeric_from: int, foldable) -> SimpleTable:
    """A table of per-block rows, the block (the first cell) shown once per run of its rows."""
    table = simple_table(title, *columns, numeric_from=numeric_from, foldable=foldable)
    previous = None
    for block, *cells in rows:
        table.add_row(block if block != previous else "", *cells)
        previous = block
    return table


def ops_table(ops: Sequence[OpCost]) -> SimpleTable:
    """Per op of one micro-batch on one GPU of the busiest stage (GEMM shape = batch×m×n×k)."""
    rows = (
        (
            op.block,
            op.name,
            op.kind,
            _gemm_shape(op.gemm_shape),
            f"{op.fwd_flops / 1e9:.2f}",
            "-" if op.efficiency is None else f"{op.efficiency * 100:.0f}",
            _ms(op.fwd_time_s),
            _ms(op.bwd_time_s),
            str(op.count_per_gpu),
        )
        for op in ops
    )
    return _by_block("Ops per micro-batch per GPU", OPS_COLUMNS, rows, 3, (0, 1, 2, 3))


def comms_table(comms: Sequence[CommCost]) -> SimpleTable:
    """Per collective of one micro-batch: volume, calls, time per call and the group's placement."""
    rows = (
        (
            c.block,
            c.name,
            c.group,
            c.kind,
            f"{c.bytes / MB:.2f}",
            f"{c.calls_fwd}/{c.calls_bwd}",
            _ms(c.time_per_call_s),
            str(c.group_size),
            str(c.domains_spanned),
        )
        for c in comms
    )
    return _by_block("Collectives per micro-batch per GPU", COMMS_COLUMNS, rows, 4, (0, 1, 3))


def run_table(run: dict) -> SimpleTable:
    """Totals of a whole run (``Estimate.run_totals``)."""
    table = simple_table(f"Run of {_count(run['tokens'])} tokens", "quantity", "value")
    table.add_row("steps", f"{run['steps']:,.0f}")
    table.add_row("days", f"{run['days']:,.2f}")
    table.add_row("GPU-hours", f"{run['gpu_hours']:,.0f}")
    if run.get("cost_usd") is None:
        table.add_row("cost (USD)", "- (no price: pass --price)")
    else:
        table.add_row(
            "cost (USD)", f"{run['cost_usd']:,.0f} at {run['price_per_gpu_hour']:.2f}/GPU-hour"
        )
    return table


def estimate_renderables(
    est: Estimate,
    *,
    run: dict | None = None,
    show_ops: bool = False,
    hints: Sequence[str] = (),
    parameters=None,
    notes: Sequence[str] = (),
) -> list:
    """The sections of the text report, in reading order, separated by blank lines (strings and
    :class:`SimpleTable` s, for :class:`PlainConsole`). ``hints``: what would make a plan that does
    not fit fit (``search.fit_hints``), printed after the repeated DOES NOT FIT line; ``notes``
    (framework profile, error band) follow the fit line."""
    tables: list = [metrics_table(est), breakdown_table(est), memory_table(est)]
    if show_ops:
        if est.ops:
            tables.append(ops_table(est.ops))
        if est.comms:
            tables.append(comms_table(est.comms))
    if run is not None:
        tables.append(run_table(run))
    out: list = [plan_line(est, parameters), fit_line(est), *notes]
    for table in tables:
        out += ["", table]
    if not est.fits:
        out += ["", fit_line(est), *hints]
    return out


def print_estimate(console, est: Estimate, **sections) -> None:
    """Print the text report on ``console`` (a :class:`PlainConsole`); ``sections``: the keywords of
    :func:`estimate_renderables`."""
    console.print(*estimate_renderables(est, **sections))


def render_to_text(renderables: Sequence, width: int | None = 100) -> str:
    """Plain text of strings and tables at a fixed width (None: unlimited)."""
    buffer = io.StringIO()
    PlainConsole(width, buffer).print(*renderables)
    return buffer.getvalue()


def render_estimate(est: Estimate, *, width: int | None = 100, **sections) -> str:
    """Plain-text report of ``est`` (what ``paraplan estimate`` prints); ``sections``: the keywords
    of :func:`estimate_renderables`."""
    return render_to_text(estimate_renderables(est, **sections), width=width)
