"""Render an :class:`~paraplan.report.result.Estimate` as readable text with rich tables.

Everything is built from the typed fields of the result objects (no formatting chosen by key
names). ``estimate_renderables`` returns rich renderables (print them on any Console);
``render_estimate`` returns plain text of a given width, without colour, for tests and logs.
Tables (:class:`SimpleTable`) size themselves to the console: long cells fold onto further lines,
never past the console width and never cropped.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from paraplan.report.result import BREAKDOWN_PARTS, CommCost, Estimate, OpCost, StageMemory
from paraplan.specs.parallel import DEFAULT_PLACEMENT_LABEL
from paraplan.units import GiB, si_prefixed

MB = 1e6
MAX_STAGE_ROWS = 12  # longer pipelines show the first, the last and the peak stages
MIN_NAME_WIDTH = 8  # foldable columns first fold no narrower than this ...
MIN_FOLD_WIDTH = 3  # ... and then no narrower than this, before every column may fold



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


class SimpleTable:
    """A borderless table of strings that fits the console it is printed on.

    Columns from ``numeric_from`` on are right-aligned. When the table is wider than the console,
    multi-word headers wrap at their spaces first, then the widest name columns fold (down to
    MIN_NAME_WIDTH), and only then every cell folds; cells fold onto further lines instead of
    being cropped, so no character is ever lost.
    """

    def __init__(self, title: str, *columns: str, numeric_from: int = 1, foldable: Sequence[int] | None = None):
        self.title = title
        self.columns = columns
        self.numeric_from = numeric_from
        self.foldable = tuple(range(numeric_from)) if foldable is None else tuple(foldable)
        self.rows: list[tuple[str, ...]] = []
        self.sections: set[int] = set()  # row indexes preceded by a rule

    def add_row(self, *cells: str) -> None:
        self.rows.append(tuple(cells) + ("",) * (len(self.columns) - len(cells)))

    def add_section(self) -> None:
        self.sections.add(len(self.rows))

    def _column_widths(self) -> tuple[list[int], list[int]]:
        """(natural, narrowest) width of each column: widest cell or whole header, and widest cell
        or longest header word (headers may wrap at spaces; cells stay whole)."""
        natural, narrowest = [], []
        for i, header in enumerate(self.columns):
            cells = max([0] + [cell_len(r[i]) for r in self.rows])
            words = max([0] + [cell_len(w) for w in header.split()])
            natural.append(max(cells, cell_len(header)))
            narrowest.append(max(cells, words))
        return natural, narrowest

    def build(self, width: int) -> Table:
        """The rich Table for a console ``width`` characters wide."""
        natural, narrowest = self._column_widths()
        separators = 2 * (len(self.columns) - 1)  # right padding + column divider between columns
        widths: list[int | None] = [None] * len(self.columns)
        excess = sum(natural) + separators - width
        if excess > 0:
            fixed = list(natural)
            # first wrap the headers with the most slack at their spaces ...
            for i in sorted(range(len(fixed)), key=lambda j: narrowest[j] - natural[j]):
                cut = min(excess, fixed[i] - narrowest[i])
                fixed[i] -= cut
                excess -= cut
            # ... then fold the widest foldable (name) columns, one character at a time, down to
            # MIN_NAME_WIDTH, and if that is not enough down to MIN_FOLD_WIDTH
            for floor in (MIN_NAME_WIDTH, MIN_FOLD_WIDTH):
                while excess > 0 and self.foldable:
                    widest = max(self.foldable, key=lambda j: fixed[j])
                    if fixed[widest] <= floor:
                        break
                    fixed[widest] -= 1
                    excess -= 1
            if excess <= 0:
                widths = list(fixed)
        table = Table(
            title=Text(self.title),
            title_justify="left",
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            collapse_padding=True,
        )
        for i, col in enumerate(self.columns):
            numeric = i >= self.numeric_from
            table.add_column(
                Text(col),
                justify="right" if numeric else "left",
                overflow="fold",
                width=widths[i],
            )
        for i, row in enumerate(self.rows):
            if i in self.sections:
                table.add_section()
            table.add_row(*(Text(cell) for cell in row))  # Text: brackets in names are not markup
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.build(options.max_width)


def simple_table(title: str, *columns: str, numeric_from: int = 1, foldable: Sequence[int] | None = None) -> SimpleTable:
    """A :class:`SimpleTable` (``foldable``: indexes of the columns that fold first; default the
    name columns before ``numeric_from``)."""
    return SimpleTable(title, *columns, numeric_from=numeric_from, foldable=foldable)


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
    placement = p.get("placement", DEFAULT_PLACEMENT_LABEL)
    if placement != DEFAULT_PLACEMENT_LABEL:
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


def ops_table(ops: Sequence[OpCost]) -> SimpleTable:
    """Per op of one micro-batch on one GPU of the busiest stage (GEMM shape = batch×m×n×k)."""
    table = simple_table(
        "Ops per micro-batch per GPU",
        "block", "op", "kind", "GEMM b×m×n×k", "fwd GFLOP", "eff %", "fwd ms", "bwd ms", "count",
        numeric_from=3,
        foldable=(0, 1, 2, 3),
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


def comms_table(comms: Sequence[CommCost]) -> SimpleTable:
    """Per collective of one micro-batch: volume, calls, time per call and the group's placement."""
    table = simple_table(
        "Collectives per micro-batch per GPU",
        "block", "name", "group", "kind", "MB", "calls f/b", "ms/call", "group size", "domains",
        numeric_from=4,
        foldable=(0, 1, 3),
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


def run_table(run: dict) -> SimpleTable:
    """Totals of a whole run (``Estimate.run_totals``)."""
    table = simple_table(f"Run of {_count(run['tokens'])} tokens", "quantity", "value")
    table.add_row("steps", f"{run['steps']:,.0f}")
    table.add_row("days", f"{run['days']:,.2f}")
    table.add_row("GPU-hours", f"{run['gpu_hours']:,.0f}")
    if run.get("cost_usd") is None:
        table.add_row("cost (USD)", "- (no price: pass --price)")
    else:
        table.add_row("cost (USD)", f"{run['cost_usd']:,.0f} at {run['price_per_gpu_hour']:.2f}/GPU-hour")
    return table


def estimate_renderables(est: Estimate, *, run: dict | None = None, show_ops: bool = False) -> list[RenderableType]:
    """The sections of the text report, in reading order, separated by blank lines."""
    fit = Text(fit_line(est), style="bold" if est.fits else "bold red")
    tables: list[RenderableType] = [metrics_table(est), breakdown_table(est), memory_table(est)]
    if show_ops:
        if est.ops:
            tables.append(ops_table(est.ops))
        if est.comms:
            tables.append(comms_table(est.comms))
    if run is not None:
        tables.append(run_table(run))
    out: list[RenderableType] = [Text(plan_line(est)), fit]
    for table in tables:
        out += [Text(""), table]
    if not est.fits:
        out += [Text(""), fit]
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
