"""Render an :class:`~paraplan.step.result.Estimate` as readable plain text.

Everything is built from the typed fields of the result objects (no formatting chosen by key
names). ``estimate_renderables`` returns the sections (strings and tables), :class:`PlainConsole`
prints them at a width, ``render_estimate`` returns the text. Tables (:class:`SimpleTable`) lay
themselves out for the width without ever breaking inside a word (a plan label, a case name, a
number): headers and name cells wrap at spaces, a search row's plan moves to its own line, and as
a last resort each row becomes a record. With no width (output to a pipe) every row is one line,
for ``grep`` and ``cut -c``.
"""

from __future__ import annotations

import io
import sys
import textwrap
from collections.abc import Sequence

from rich.cells import cell_len

from paraplan.step.result import BREAKDOWN_PARTS, CommCost, Estimate, OpCost, StageMemory
from paraplan.specs.parallel import DEFAULT_PLACEMENT_LABEL
from paraplan.units import GiB, si_prefixed

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


class SimpleTable:
    """A borderless table of strings laid out for a given width, never breaking inside a token.

    Columns from ``numeric_from`` on are right-aligned. The layout for ``width`` characters (None:
    unlimited, one line per row, for pipes, ``grep`` and ``cut -c``), in order of preference:

    1. every column on one line per row; when that is too wide, multi-word headers wrap at their
       spaces, then the cells of the ``foldable`` columns wrap at their spaces (never narrower than
       their longest word);
    2. with a ``detach`` column (the plan of a search row): that column moves to its own line under
       each row, indented, and the other columns are laid out as in 1;
    3. one record per row: the name cells on a line, then ``header value`` pairs packed onto
       indented lines.

    A single word longer than the width stays whole (the line is then longer than the width).
    """

    def __init__(
        self,
        title: str,
        *columns: str,
        numeric_from: int = 1,
        foldable: Sequence[int] | None = None,
        detach: int | None = None,
    ):
        self.title = title
        self.columns = columns
        self.numeric_from = numeric_from
        self.foldable = tuple(range(numeric_from)) if foldable is None else tuple(foldable)
        self.detach = detach
        self.rows: list[tuple[str, ...]] = []
        self.sections: set[int] = set()  # row indexes preceded by a rule

    def add_row(self, *cells: str) -> None:
        self.rows.append(tuple(cells) + ("",) * (len(self.columns) - len(cells)))

    def add_section(self) -> None:
        self.sections.add(len(self.rows))

    # ---- layout --------------------------------------------------------------------------------
    def _widths(self, shown: list[int], width: int | None, wrap_cells: bool) -> list[int] | None:
        """Column widths for the ``shown`` columns within ``width``, or None when they cannot fit
        without breaking a word."""
        natural, header_min, cell_min = [], [], []
        for i in shown:
            cells = [r[i] for r in self.rows]
            widest = max([0] + [cell_len(c) for c in cells])
            header_word = _longest_word(self.columns[i])
            natural.append(max(widest, cell_len(self.columns[i])))
            header_min.append(max(widest, header_word))
            foldable = wrap_cells and i in self.foldable and i != self.detach
            cell_min.append(
                max(header_word, max([0] + [_longest_word(c) for c in cells]))
                if foldable
                else header_min[-1]
            )
        fixed = list(natural)
        if width is None:
            return fixed
        excess = sum(fixed) + COLUMN_GAP * (len(fixed) - 1) - width
        # first wrap the headers with the most slack at their spaces ...
        for j in sorted(range(len(fixed)), key=lambda k: header_min[k] - natural[k]):
            cut = min(max(excess, 0), fixed[j] - header_min[j])
            fixed[j] -= cut
            excess -= cut
        # ... then wrap the widest foldable column at its spaces, one character at a time
        while excess > 0:
            slack = [j for j in range(len(fixed)) if fixed[j] > cell_min[j]]
            if not slack:
                return None
            widest = max(slack, key=lambda j: fixed[j])
            fixed[widest] -= 1
            excess -= 1
        return fixed

    def lines(self, width: int | None = None) -> list[str]:
        """The table as lines of text for ``width`` characters (None: unlimited)."""
        every = list(range(len(self.columns)))
        widths = self._widths(every, width, wrap_cells=True)
        if widths is not None:
            return self._grid(every, widths, width)
        # one column on a line of its own: the given one under its row, else the widest name column above it
        detach = self.detach
        if detach is None and self.foldable:
            detach = max(
                self.foldable,
                key=lambda i: max(
                    [cell_len(self.columns[i])] + [cell_len(r[i]) for r in self.rows]
                ),
            )
        if detach is not None:
            rest = [i for i in every if i != detach]
            rest_widths = self._widths(rest, width, wrap_cells=True)
            if rest_widths is not None:
                return self._grid(rest, rest_widths, width, detach)
        return self._records(width)

    def _grid(
        self, shown: list[int], widths: list[int], width: int | None, detached: int | None = None
    ) -> list[str]:
        """Rows as lines of aligned columns; a ``detached`` column on its own line, under its row
        (indented to the second column) when it is the table's ``detach`` column, else above it."""
        below = detached is not None and detached == self.detach
        out = _wrap_prose(self.title, width)
        header_cells = [_wrap_cell(self.columns[i], w) for i, w in zip(shown, widths)]
        height = max(len(h) for h in header_cells)
        header_cells = [
            [""] * (height - len(h)) + h for h in header_cells
        ]  # headers bottom-aligned
        header = [self._join(shown, widths, [h[n] for h in header_cells]) for n in range(height)]
        indent = " " * (widths[0] + COLUMN_GAP) if below else ""
        if detached is not None:
            name = _wrap_prose(self.columns[detached], width, indent)
            header = header + name if below else name + header
        out += header
        rule = "─" * max(
            [sum(widths) + COLUMN_GAP * (len(widths) - 1)] + [cell_len(line) for line in header]
        )
        out.append(rule)
        for n, row in enumerate(self.rows):
            if n in self.sections:
                out.append(rule)
            if detached is not None and not below and row[detached]:
                out += _wrap_prose(row[detached], width)
            cells = [
                _wrap_cell(row[i], w) if i in self.foldable else [row[i]]
                for i, w in zip(shown, widths)
            ]
            for k in range(max(len(c) for c in cells)):
                out.append(self._join(shown, widths, [c[k] if k < len(c) else "" for c in cells]))
            if below and row[detached]:
                out += _wrap_prose(row[detached], width, indent)
        return out

    def _join(self, shown: list[int], widths: list[int], cells: list[str]) -> str:
        parts = []
        for i, w, cell in zip(shown, widths, cells):
            pad = " " * max(0, w - cell_len(cell))
            parts.append(pad + cell if i >= self.numeric_from else cell + pad)
        return (" " * COLUMN_GAP).join(parts).rstrip()

    def _records(self, width: int | None) -> list[str]:
        """One record per row: the name cells, then ``header value`` pairs on indented lines."""
        out = _wrap_prose(self.title, width)
        rule = "─" * (width or 1)
        out.append(rule)
        names = [i for i in range(len(self.columns)) if i < self.numeric_from and i != self.detach]
        for n, row in enumerate(self.rows):
            if n in self.sections:
                out.append(rule)
            out += _wrap_prose("  ".join(row[i] for i in names if row[i]) or "-", width)
            if self.detach is not None and row[self.detach]:
                out += _wrap_prose(row[self.detach], width, RECORD_INDENT)
            pairs = [
                f"{self.columns[i]}: {row[i]}"
                for i in range(len(self.columns))
                if i not in names and i != self.detach and row[i]
            ]
            out += _pack(pairs, width, RECORD_INDENT)
        return out

    def __rich_console__(self, console, options):
        """On a rich Console: lines at its width (kept whole; print with ``crop=False``)."""
        from rich.segment import Segment

        for line in self.lines(options.max_width):
            yield Segment(line)
            yield Segment.line()


COLUMN_GAP = 2
RECORD_INDENT = "    "


def _longest_word(text: str) -> int:
    return max([0] + [cell_len(w) for w in text.split()])


def _wrap_cell(text: str, width: int) -> list[str]:
    """A cell wrapped at its spaces to ``width`` (a longer word stays whole)."""
    if cell_len(text) <= width:
        return [text]
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]


def _wrap_prose(text: str, width: int | None, indent: str = "") -> list[str]:
    """Prose wrapped at spaces to ``width`` (None: one line), every line prefixed by ``indent``."""
    if width is None or cell_len(indent + text) <= width:
        return [indent + text]
    return textwrap.wrap(
        text,
        width,
        initial_indent=indent,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [indent]


def _pack(units: list[str], width: int | None, indent: str) -> list[str]:
    """Units (never split) packed onto lines of ``width`` with ``indent``, separated by two spaces."""
    lines: list[str] = []
    current = ""
    for unit in units:
        if (
            width is not None and cell_len(indent + unit) > width
        ):  # a unit too long for a line: wrap it alone
            if current:
                lines.append(indent + current)
                current = ""
            lines += _wrap_prose(unit, width, indent)
            continue
        candidate = f"{current}  {unit}" if current else unit
        if current and width is not None and cell_len(indent + candidate) > width:
            lines.append(indent + current)
            current = unit
        else:
            current = candidate
    if current:
        lines.append(indent + current)
    return lines


def simple_table(
    title: str,
    *columns: str,
    numeric_from: int = 1,
    foldable: Sequence[int] | None = None,
    detach: int | None = None,
) -> SimpleTable:
    """A :class:`SimpleTable` (``foldable``: indexes of the columns whose cells may wrap at spaces;
    default the name columns before ``numeric_from``; ``detach``: a column that moves to its own line
    under each row when the table is too wide)."""
    return SimpleTable(title, *columns, numeric_from=numeric_from, foldable=foldable, detach=detach)


class PlainConsole:
    """Plain-text output of a width (None: unlimited) that never breaks inside a word.

    ``print`` takes strings (prose, wrapped at spaces), :class:`SimpleTable` s and lists of them;
    no colour and no markup, so the output is the same on a terminal and in a
    pipe. The CLI's stdout (``paraplan.cli.app._stdout``)."""

    def __init__(self, width: int | None = None, file=None):
        self.width = width
        self.file = file

    def lines(self, obj) -> list[str]:
        if isinstance(obj, SimpleTable):
            return obj.lines(self.width)
        if isinstance(obj, (list, tuple)):
            return [line for r in obj for line in self.lines(r)]
        text = getattr(obj, "plain", None)  # a rich Text
        text = str(obj) if text is None else text
        return [
            line for paragraph in text.split("\n") for line in _wrap_prose(paragraph, self.width)
        ]

    def print(self, *objects) -> None:
        lines = [line for obj in (objects or ("",)) for line in self.lines(obj)]
        file = self.file if self.file is not None else sys.stdout
        file.write("".join(line.rstrip() + "\n" for line in lines))


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
    """'fits' or the prominent 'DOES NOT FIT' line with the peak stage's memory vs capacity."""
    peak = est.peak_stage
    if est.fits:
        return f"fits: peak {_gib(peak.peak_bytes)} GiB on stage {peak.stage} of {_gib(peak.capacity_bytes)} GiB per GPU"
    over = sum(1 for s in est.stages if not s.fits)
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


def ops_table(ops: Sequence[OpCost]) -> SimpleTable:
    """Per op of one micro-batch on one GPU of the busiest stage (GEMM shape = batch×m×n×k)."""
    table = simple_table(
        "Ops per micro-batch per GPU",
        "block",
        "op",
        "kind",
        "GEMM b×m×n×k",
        "fwd GFLOP",
        "eff %",
        "fwd ms",
        "bwd ms",
        "count",
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
        "block",
        "name",
        "group",
        "kind",
        "MB",
        "calls f/b",
        "ms/call",
        "group size",
        "domains",
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


def print_estimate(
    console,
    est: Estimate,
    *,
    run: dict | None = None,
    show_ops: bool = False,
    hints: Sequence[str] = (),
    parameters=None,
    notes: Sequence[str] = (),
) -> None:
    """Print the text report on ``console`` (a :class:`PlainConsole`)."""
    console.print(
        *estimate_renderables(
            est, run=run, show_ops=show_ops, hints=hints, parameters=parameters, notes=notes
        )
    )


def render_to_text(renderables: Sequence, width: int | None = 100) -> str:
    """Plain text of strings and tables at a fixed width (None: unlimited)."""
    buffer = io.StringIO()
    PlainConsole(width, buffer).print(*renderables)
    return buffer.getvalue()


def render_estimate(
    est: Estimate,
    *,
    run: dict | None = None,
    show_ops: bool = False,
    width: int | None = 100,
    hints: Sequence[str] = (),
    parameters=None,
) -> str:
    """Plain-text report of ``est`` (what ``paraplan estimate`` prints)."""
    return render_to_text(
        estimate_renderables(est, run=run, show_ops=show_ops, hints=hints, parameters=parameters),
        width=width,
    )
