"""Measured per-shape kernel tables: kernel times read from measurements instead of analytical forms.

A table is a folder holding ``table.yaml`` (provenance: device, software, date, source; ``files``:
kind -> CSV) and CSVs in the formats ``paraplan calibrate`` reads (docs/calibration.md). Tables
shipped in the package live in ``catalog/kernels/<name>/``; ``accelerator.kernel_tables`` names one,
or a folder (``paraplan calibrate`` writes one next to the system it calibrates).

Each table is read as achieved rates (work / measured time), interpolated in log space over shape by
cost.table_interp's rule (a Scatter: the log2 ratio of the rate to a prior, the analytical form's relative
rate of the shape where one is given, 1 otherwise):

- GEMM (m, n, k; per dtype, fp16 read as bf16): inverse-distance weighting of log2 FLOP/s over the
  ``IDW_NEIGHBOURS`` (table_interp) nearest measured shapes in (log2 m, log2 n, log2 k), weight 1/d²; a measured
  shape returns its own rate (rows of one shape, e.g. under other transposes, their geometric mean).
  A batch of b GEMMs is one GEMM of b·m rows.
- grouped GEMM (experts, tokens per expert, k, n; bf16): the same over four log2 coordinates, from
  the per-expert loop column ``loop_time_us`` (one GEMM per expert, as Transformer Engine's
  GroupedLinear and eager MoE layers run them); its ``time_us`` column, where every row has one, is one
  torch._grouped_mm over all experts (``grouped_mm_time_s``, cost.compute.torch_grouped_mm_s).
  A library's one-kernel grouped file (kind ``grouped_gemm_deepgemm``) is cost.table_grouped's.
- fused attention (per kernel fa2 / cudnn / fa3; sequence, head dim, causal, fwd / bwd): the kernel's
  shape factor (cost.attention.attention_shape_factor, FlashAttention-3 paper Fig. 5) as prior, the
  ratio measured / shape factor linear in log2 over log2 sequence length at the nearest measured head
  dim (same mask first); a head dim or mask the table lacks scales by the kernel's shape-factor ratio. FLOPs are counted as the
  graph counts them: forward 4·b·h·s²·d, backward 2.5× forward, causal share (s+1)/2s. The lookup is
  cost.table_attention's (bwd rows timed on leaf inputs read less their gradients' accumulation,
  cost.leaf_grads).
- memory-bound kernels (bytes moved): linear interpolation of log2 bytes/s over log2 bytes, from
  the HBM-resident rows only: a copy whose bytes moved (read + write) fit in the L2 cache
  (``accelerator.l2_cache``) runs from cache in a loop of identical copies, which a training step's
  kernels do not (their operands were written by other kernels in between). Cache-resident rows
  set only the per-kernel floor below.
- named memory-bound kernels (``kernels``: op, shape ``ROWSxWIDTH`` or ``N``, time; norms, activations,
  residual add, casts, cross-entropy, optimizer step as eager PyTorch runs them): per op, elements/s
  over (log2 rows, log2 width) by the GEMM rule (inverse-distance weights, a measured shape returns
  its own rate), or log-log linear over log2 N; cost.eager_kernels prices the op graph's eager ops
  from them, with the copies' floor (below). ``fp8_kernels`` (op, tokens, width, time: the
  quantisation kernels of a tensor-wise fp8 recipe around a GEMM operand) joins them, op names
  prefixed ``fp8_``.

Outside a table's range each coordinate is clamped to the nearest measured edge: the ratio to the
prior there is kept (the rate itself where there is no prior: GEMMs, copies, named kernels), the prior
follows the shape, and the time scales with the work (time = work / rate); no raw time is extrapolated. No GEMM or memory-bound kernel runs
faster than the fastest measured kernel of its kind (``floor_s``: the smallest GEMM and copy
measured are launch-bound, so their time is the launch and tail cost the table shows); attention
rows all do ≥ 16k tokens of work, so attention takes the system's ``kernel_overhead_s`` as floor
(cost.compute).
A table whose table.yaml states the measured part's ``peak_matrix_flops`` prices another part of the same
silicon at the ratio of the datasheet peaks (cost.compute.table_clock_ratio; the clock ratio).
Where no table covers a kernel (no table, another dtype or attention kernel), the analytical
forms of cost.compute apply. Every log rate is a weighted mean of measured log rates (less the prior,
which depends on shape alone) with weights fixed by shape, so a slower measured kernel never makes any
prediction faster.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from functools import lru_cache

from paraplan.cost.table_interp import Scatter, scatter
from paraplan.cost.table_refs import FIELD, TABLE_KINDS, kept_files, shipped_tables, table_folder
from paraplan.graph.mla import window_fraction
from paraplan.graph.transformer import FLASH_BACKWARD_FLOP_RATIO
from paraplan.specs.errors import InputError
from paraplan.specs.system import LOW_PRECISION


@dataclass(frozen=True)
class KernelTable:
    """One measured table: provenance and its interpolants (module docstring)."""

    name: str
    folder: str
    provenance: dict
    gemm: dict[str, Scatter]
    grouped_gemm: dict[str, Scatter]
    # attention kind -> its rows as timed (attention_rows), checked at load; cost.table_attention.curves
    # makes the rates steps read from them (the kernel's shape prior, rows less their leaf gradients)
    attention: dict[str, list[MeasuredRow]]
    memory: Scatter | None
    memory_cache_rows: int
    kernels: dict[str, Scatter]  # named memory-bound kernel -> elements/s over its shape
    files: dict[str, str]  # kind -> CSV file name
    rows: dict[str, list[dict[str, str]]]  # kind -> the CSV's rows (lower-case column names)
    # dtype -> rates of the grouped file's one-kernel column (GROUPED_MM_TIME), where every row has it
    grouped_mm: dict[str, Scatter] = field(default_factory=dict)


def attention_work(
    batch: float, heads: float, seq: float, head_dim: float, causal: bool, direction: str
) -> float:
    """FLOPs × causal share as the graph counts them: 4·b·h·s²·d forward, 2.5× that backward
    (graph/transformer.py FLASH_BACKWARD_FLOP_RATIO), times (s+1)/2s when causal."""
    return attention_flops(batch, heads, seq, head_dim, direction) * causal_share(seq, causal)


def attention_flops(
    batch: float, heads: float, seq: float, head_dim: float, direction: str
) -> float:
    """FLOPs of a full (unmasked) fused attention pass: 4·b·h·s²·d forward, 2.5× that backward
    (graph/transformer.py FLASH_BACKWARD_FLOP_RATIO)."""
    fwd = 4.0 * batch * heads * seq * seq * head_dim
    return fwd if direction == "fwd" else FLASH_BACKWARD_FLOP_RATIO * fwd


def causal_share(seq: float, causal: bool) -> float:
    """The share of the scores a causal mask keeps, (s+1)/2s; 1 without one."""
    return 0.5 * (1.0 + 1.0 / seq) if causal else 1.0


def _text(folder, file: str, ref: str) -> str:
    try:
        return (folder / str(file)).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{FIELD}: {ref}: cannot read {file!r}: {exc}") from None


def _rows(folder, file: str, ref: str) -> list[dict[str, str]]:
    text = _text(folder, file, ref)
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return [
        {k.strip().lower(): (v or "").strip() for k, v in row.items()}
        for row in csv.DictReader(io.StringIO("\n".join(lines)))
    ]


def csv_number(row: dict[str, str], key: str, where: str = "") -> float:
    """Column ``key`` of a measured row: a finite positive number; InputError naming ``where`` (when
    given) and the column otherwise (the tables here and calibrate's CSVs)."""
    at = f"{where}: " if where else ""
    try:
        value = float(row[key])
    except (KeyError, ValueError):
        raise InputError(f"{at}column {key!r} must be a number, got {row.get(key)!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"{at}column {key!r} must be a finite positive number, got {value}")
    return value


# The causal column's words (any case): 1 / 0, true / false, yes / no, and the attention masks of cuDNN's SDPA
# benchmark (github.com/NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/benchmark_single_sdpa.py at
# 3929da2ef4c1, --attn_mask: "'top_left' (causal) or 'no_mask' (bidirectional)"; top_left and bottom_right both
# bound the scores at the diagonal, right_bound 0, aligned at the top-left or the bottom-right corner: one mask
# where queries and keys are one length, as a row's seq_len states, and one FLOP count, the lower triangle).
CAUSAL_WORDS = {
    **dict.fromkeys(("1", "true", "yes", "top_left", "bottom_right"), True),
    **dict.fromkeys(("0", "false", "no", "no_mask"), False),
}


def csv_causal(text: str | None, where: str = "") -> bool:
    """A row's causal column (CAUSAL_WORDS); InputError naming ``where`` (when given), the value and the
    allowed words otherwise: a word it does not know is refused, not read as non-causal."""
    word = (text or "").strip().lower()
    if word not in CAUSAL_WORDS:
        at = f"{where}: " if where else ""
        raise InputError(
            f"{at}causal {text!r} is not allowed; allowed: {', '.join(CAUSAL_WORDS)} (any case)"
        )
    return CAUSAL_WORDS[word]


@dataclass(frozen=True)
class MeasuredRow:
    """One parsed table row: its interpolation point, work (FLOPs or bytes), measured time, the
    group it is interpolated in (GEMMs: the dtype, fp16 read as bf16; attention: head dim, causal,
    direction) and its dtype as written; attention rows keep their shape columns (ATTENTION_SHAPE) too."""

    point: tuple[float, ...]
    work: float
    time_s: float
    group: tuple
    dtype: str
    shape: tuple[float, ...] = ()  # attention: batch, heads, seq_len, head_dim as read


# GEMM kinds: the shape columns (the interpolation point), and the time column
GEMM_COLUMNS = {
    "gemm": (("m", "n", "k"), "time_us"),
    "grouped_gemm": (("experts", "tokens_per_expert", "k", "n"), "loop_time_us"),
}
ATTENTION_SHAPE = ("batch", "heads", "seq_len", "head_dim")
# a grouped file's one-kernel column: torch._grouped_mm over all experts in one launch (gpu_components.py
# section_grouped times it beside the per-expert loop, loop_time_us)
GROUPED_MM_TIME = "time_us"


def gemm_rows(rows, ref, file, kind: str, time_key: str | None = None) -> list[MeasuredRow]:
    """The rows of a GEMM or grouped-GEMM table: work 2·∏shape at the shape's point, time from the kind's
    time column (GEMM_COLUMNS) or ``time_key``."""
    cols, kind_time = GEMM_COLUMNS[kind]
    time_key = time_key or kind_time
    out = []
    for i, row in enumerate(rows):
        where = f"{FIELD}: {ref}/{file} row {i + 1}"
        p = tuple(csv_number(row, k, where) for k in cols)
        dtype = row.get("dtype", "bf16")
        t = csv_number(row, time_key, where) * 1e-6
        out.append(MeasuredRow(p, 2.0 * math.prod(p), t, (_dtype(dtype),), dtype))
    return out


def attention_rows(rows, ref, file) -> list[MeasuredRow]:
    """The rows of an attention table: work attention_work, interpolated over sequence length, grouped by
    (head dim, causal, direction, window); an optional ``window`` column (empty: none) marks a causal
    sliding window of w keys, whose work is the scores it keeps (graph.mla.window_fraction)."""
    out = []
    for i, row in enumerate(rows):
        where = f"{FIELD}: {ref}/{file} row {i + 1}"
        b, h, s, d = (csv_number(row, k, where) for k in ATTENTION_SHAPE)
        causal = csv_causal(row.get("causal"), where)
        direction = row.get("direction", "fwd")
        if direction not in ("fwd", "bwd"):
            raise InputError(f"{where}: direction must be fwd or bwd, got {direction!r}")
        window = int(csv_number(row, "window", where)) if row.get("window") else None
        work = attention_work(b, h, s, d, causal, direction)
        if window is not None and causal and window < s:
            work *= window_fraction(window, int(s), 1) / causal_share(s, True)
        t = csv_number(row, "time_us", where) * 1e-6
        group = (int(d), causal, direction, window)
        out.append(MeasuredRow((s,), work, t, group, row.get("dtype", "bf16"), (b, h, s, d)))
    return out


def groups(measured: list[MeasuredRow]) -> dict[tuple, tuple[list, list, list]]:
    """Group -> (points, works, times) of its rows, in the order the groups first appear."""
    out: dict[tuple, tuple[list, list, list]] = {}
    for r in measured:
        g = out.setdefault(r.group, ([], [], []))
        g[0].append(r.point), g[1].append(r.work), g[2].append(r.time_s)
    return out


def _by_dtype(rows, ref, file, kind: str, time_key: str | None = None) -> dict[str, Scatter]:
    measured = gemm_rows(rows, ref, file, kind, time_key)
    return {key[0]: scatter(*g) for key, g in groups(measured).items()}


def _grouped_mm(rows, ref, file) -> dict[str, Scatter]:
    """Rates of a grouped file's one-kernel column (GROUPED_MM_TIME) where every row has it; {} otherwise."""
    if not rows or not all(r.get(GROUPED_MM_TIME) for r in rows):
        return {}
    return _by_dtype(rows, ref, file, "grouped_gemm", GROUPED_MM_TIME)


def l2_resident(bytes_moved: float, l2_bytes: float | None) -> bool:
    """A copy whose bytes moved (read + write) fit in the L2 cache runs from cache in a loop of
    identical copies, not from HBM (module docstring; issue 32: H100 copies of 32 MiB ran 1.13×
    faster than the HBM peak, H100 L2 = 50 MB). Never, when the accelerator gives no L2 size."""
    return l2_bytes is not None and bytes_moved <= l2_bytes


def memory_pairs(rows, where: str) -> list[tuple[float, float]]:
    """(bytes moved, seconds) of each row of a memory table."""
    return [(csv_number(r, "bytes", where), csv_number(r, "time_us", where) * 1e-6) for r in rows]


def kernel_row_shape(row: dict[str, str]) -> tuple[str, tuple[float, ...]]:
    """(the shape as written, its coordinates) of a kernels / fp8_kernels row: ``shape`` ROWSxWIDTH or N,
    or the ``tokens`` and ``width`` columns; () where that is not a shape of finite positive numbers."""
    shape = row.get("shape") or f"{row.get('tokens', '')}x{row.get('width', '')}"
    try:
        point = tuple(float(x) for x in shape.lower().split("x"))
    except ValueError:
        return shape, ()
    return shape, point if all(math.isfinite(x) and x > 0 for x in point) else ()


def kernel_rows(rows, ref, file, prefix: str = "") -> list[MeasuredRow]:
    """The rows of a kernels / fp8_kernels table: work = elements (∏shape) at the shape's point
    (``shape`` ROWSxWIDTH or N, or ``tokens`` and ``width`` columns), grouped by op name prefixed
    by ``prefix``; every row of an op with the same number of dimensions."""
    out: list[MeasuredRow] = []
    dims: dict[str, int] = {}
    for i, row in enumerate(rows):
        where = f"{FIELD}: {ref}/{file} row {i + 1}"
        op = prefix + row["op"] if row.get("op") else ""
        shape, point = kernel_row_shape(row)
        if not op or not point:
            raise InputError(f"{where}: needs an op and a shape ROWSxWIDTH or N, got {shape!r}")
        if dims.setdefault(op, len(point)) != len(point):
            raise InputError(
                f"{where}: shape {shape!r} has not the dimensions of {op}'s other rows"
            )
        t = csv_number(row, "time_us", where) * 1e-6
        out.append(MeasuredRow(point, math.prod(point), t, (op,), row.get("dtype", "")))
    return out


def _kernels(rows, ref, file, prefix: str = "") -> dict[str, Scatter]:
    """Named kernels: elements/s per op over its shape (kernel_rows); floor 0 (the caller's)."""
    out = {}
    for (op,), g in groups(kernel_rows(rows, ref, file, prefix)).items():
        rates = scatter(*g)
        out[op] = Scatter(rates.coords, rates.log_rate, 0.0)
    return out


def _memory(rows, ref, file, l2_bytes: float | None) -> tuple[Scatter | None, int]:
    """HBM-resident rows (not l2_resident) as the rate; every row's time for the floor."""
    pairs = memory_pairs(rows, f"{FIELD}: {ref}/{file}")
    if not pairs:
        return None, 0
    hbm = [(b, t) for b, t in pairs if not l2_resident(b, l2_bytes)]
    if not hbm:
        return None, len(pairs)
    rates = scatter([(b,) for b, _ in hbm], [b for b, _ in hbm], [t for _, t in hbm])
    floor = min(t for _, t in pairs)
    return Scatter(rates.coords, rates.log_rate, floor), len(pairs) - len(hbm)


@lru_cache(maxsize=32)
def load_table(ref: str, l2_bytes: float | None = None) -> KernelTable:
    """Read a table (shipped name or folder) into interpolants; InputError naming the field on bad data."""
    import yaml

    folder = table_folder(ref)
    try:
        meta = yaml.safe_load(_text(folder, "table.yaml", ref)) or {}
    except yaml.YAMLError as exc:
        raise InputError(f"{FIELD}: {ref}/table.yaml is not YAML: {exc}".splitlines()[0]) from None
    files = meta.get("files") if isinstance(meta, dict) else None
    if not isinstance(files, dict) or not files:
        raise InputError(f"{FIELD}: {ref}/table.yaml needs 'files: {{kind: CSV}}'")
    unknown = sorted(set(files) - set(TABLE_KINDS))
    if unknown:
        raise InputError(
            f"{FIELD}: {ref}/table.yaml files: unknown kinds {unknown}; allowed: {', '.join(TABLE_KINDS)}"
        )
    files = kept_files(ref, files)
    rows = {kind: _rows(folder, file, ref) for kind, file in files.items()}
    gemm, grouped = (
        _by_dtype(rows.get(kind, []), ref, files.get(kind), kind) for kind in GEMM_COLUMNS
    )
    attention = {
        kind: attention_rows(rows[kind], ref, files[kind])
        for kind in files
        if kind.startswith("attention_")
    }
    memory, cached = (
        _memory(rows["memory"], ref, files["memory"], l2_bytes) if "memory" in rows else (None, 0)
    )
    kernels = _kernels(rows["kernels"], ref, files["kernels"]) if "kernels" in rows else {}
    if "fp8_kernels" in rows:
        kernels |= _kernels(rows["fp8_kernels"], ref, files["fp8_kernels"], "fp8_")
    provenance = {k: v for k, v in meta.items() if k != "files"}
    return KernelTable(
        ref,
        str(folder),
        provenance,
        gemm,
        grouped,
        attention,
        memory,
        cached,
        kernels,
        files,
        rows,
        _grouped_mm(rows.get("grouped_gemm", []), ref, files.get("grouped_gemm")),
    )


def _dtype(dtype: str) -> str:
    return "bf16" if dtype == "fp16" else dtype


def has_gemm_rows(ref: str, l2: float | None, dtype: str) -> bool:
    """Whether the table has dense GEMM rows of ``dtype`` (fp16 read as bf16): where ``gemm_time_s``
    prices a GEMM from the table."""
    return _dtype(dtype) in load_table(ref, l2).gemm


@lru_cache(maxsize=262144)
def gemm_time_s(ref: str, l2: float | None, b: int, m: int, n: int, k: int, dtype: str):
    """Measured time of a (b·m)×n×k GEMM, or None where the table has no rows of this dtype."""
    rates = load_table(ref, l2).gemm.get(_dtype(dtype))
    if rates is None:
        return None
    return rates.time_s(2.0 * b * m * n * k, (b * m, n, k))


@lru_cache(maxsize=65536)
def grouped_gemm_time_s(ref: str, l2: float | None, b: int, m: int, n: int, k: int, dtype: str):
    """Measured time of b per-expert GEMMs of m×n×k, or None where not measured in this dtype. Where the
    table has no grouped rows of the dtype: b × t(m×n×k), t the dense GEMM rows' time (gemm_time_s), as
    Transformer Engine's GroupedLinear runs one cuBLAS GEMM per expert (general_grouped_gemm over the
    per-expert weights, transformer_engine/pytorch/module/grouped_linear.py at TE v2.8); None in the
    low-precision dtypes (LOW_PRECISION), whose per-expert loop keeps a share of the dense fp8 speed-up over
    bf16 (cost.compute.te_multistream_grouped_s, efficiency.grouped_gemm_fp8), and where the dense rows lack
    the dtype too."""
    rates = load_table(ref, l2).grouped_gemm.get(_dtype(dtype))
    if rates is not None:
        return rates.time_s(2.0 * b * m * n * k, (b, m, k, n))
    if dtype in LOW_PRECISION:
        return None
    t = gemm_time_s(ref, l2, 1, m, n, k, dtype)
    return None if t is None else b * t


@lru_cache(maxsize=65536)
def grouped_mm_time_s(ref: str, l2: float | None, b: int, m: int, n: int, k: int, dtype: str):
    """Measured time of one torch._grouped_mm over b experts of m×n×k (the grouped file's GROUPED_MM_TIME
    column, interpolated as the per-expert loop), or None where the table has no such column in this dtype."""
    rates = load_table(ref, l2).grouped_mm.get(_dtype(dtype))
    if rates is None:
        return None
    return rates.time_s(2.0 * b * m * n * k, (b, m, k, n))


@lru_cache(maxsize=65536)
def memory_time_s(ref: str, l2: float | None, bytes_moved: float):
    """Measured time of a memory-bound kernel moving ``bytes_moved`` (HBM-resident rows), or None."""
    rates = load_table(ref, l2).memory
    if rates is None or bytes_moved <= 0:
        return None
    return rates.time_s(bytes_moved, (bytes_moved,))


@lru_cache(maxsize=65536)
def kernel_time_s(ref: str, l2: float | None, op: str, shape: tuple[float, ...]):
    """Measured time of the named kernel ``op`` (kernels.csv) on ``shape`` (rows, width) or (N,), with
    no floor, or None where the table has no such kernel of that many dimensions."""
    rates = load_table(ref, l2).kernels.get(op)
    if rates is None or rates.coords.shape[1] != len(shape):
        return None
    return math.prod(shape) / rates.rate(shape)


@lru_cache(maxsize=256)
def top_rows_scatter(ref: str, l2: float | None, op: str) -> Scatter | None:
    """Elements/s of the fp8_kernels op ``op`` over its width (a 1-D Scatter) from its rows at the
    table's largest token count (kernel_rows: ``tokens`` and ``width`` columns or a ROWSxWIDTH
    ``shape``); None where the table has no two-dimensional row of ``op``."""
    table = load_table(ref, l2)
    rows = [r for r in table.rows.get("fp8_kernels", []) if r.get("op") == op]
    flat = [m for m in kernel_rows(rows, ref, table.files.get("fp8_kernels")) if len(m.point) == 2]
    top = [m for m in flat if m.point[0] == max(p.point[0] for p in flat)]
    if not top:
        return None
    return scatter([(m.point[1],) for m in top], [m.work for m in top], [m.time_s for m in top])


# lookups of other modules built on load_table (cost.table_attention), cleared with this module's
CACHES_ELSEWHERE: list = []


def clear_caches() -> None:
    """Forget read tables and cached lookups (a table folder was rewritten): every lru_cache here and in
    CACHES_ELSEWHERE."""
    for f in [*globals().values(), *CACHES_ELSEWHERE]:
        if hasattr(f, "cache_clear"):
            f.cache_clear()


def table_provenance(ref: str) -> dict:
    """A table's table.yaml fields other than ``files`` (device, software, date, source, accelerators):
    those ``load_table`` (cached) read."""
    return load_table(ref).provenance


def tables_measured_on(accelerator: str) -> list[str]:
    """Shipped tables whose table.yaml lists ``accelerator`` (a catalog accelerator name)."""
    return [
        n for n in shipped_tables() if accelerator in table_provenance(n).get("accelerators", [])
    ]
