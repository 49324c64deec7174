"""Readers for what users already measure: nccl-tests output, GEMM / attention / memory-kernel
benchmark tables (CSV) and measured step times (YAML/JSON).

nccl-tests (github.com/NVIDIA/nccl-tests, ``*_perf`` binaries) print a header of ``#`` lines, one
``#  Rank  N Group G Pid P on HOST device D ...`` line per rank, then one row per message size:
``size count type redop root | time algbw busbw #wrong (out-of-place) | time algbw busbw #wrong
(in-place)``, times in microseconds. The output does not name the collective, so it is taken from
the file name (``all_reduce_perf``, ``all_gather``, ``reduce_scatter``, ``alltoall``, ``sendrecv``)
or given as ``KIND=FILE``.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar, get_args

from paraplan.cost.kernel_tables import csv_causal, csv_number
from paraplan.io.documents import read_text
from paraplan.specs.errors import InputError
from paraplan.specs.system import Dtype

NCCL_KINDS = {
    "all_reduce": "all_reduce",
    "allreduce": "all_reduce",
    "all_gather": "all_gather",
    "allgather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "all_to_all": "all_to_all",
    "sendrecv": "send_recv",
    "send_recv": "send_recv",
}
_RANK_LINE = re.compile(r"^#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)")
US = 1e-6
T = TypeVar("T")


@dataclass(frozen=True)
class NcclRun:
    """One nccl-tests run: the collective, ranks and nodes, and (bytes, seconds) per message size."""

    source: str
    kind: str
    ranks: int
    nodes: int
    sizes_bytes: tuple[float, ...]
    times_s: tuple[float, ...]


def _kind_from_name(name: str) -> str | None:
    flat = name.lower().replace("-", "_")
    for key in sorted(NCCL_KINDS, key=len, reverse=True):
        if key in flat:
            return NCCL_KINDS[key]
    return None


def read_nccl_tests(ref: str) -> NcclRun:
    """Parse one nccl-tests output file; ``ref`` is FILE or KIND=FILE."""
    kind_text, sep, path_text = ref.partition("=")
    if not sep:
        path_text, kind_text = ref, ""
    path = Path(path_text)
    kind = NCCL_KINDS.get(kind_text) if kind_text else _kind_from_name(path.name)
    if kind is None:
        raise InputError(
            f"--nccl: cannot tell the collective of {ref!r}; name the file after the test "
            f"(all_reduce_perf.txt, ...) or write KIND=FILE with KIND one of {', '.join(sorted(set(NCCL_KINDS.values())))}"
        )
    return parse_nccl_tests(read_text(path, "--nccl"), kind, str(path))


def parse_nccl_tests(text: str, kind: str, source: str = "<text>") -> NcclRun:
    """Rows of an nccl-tests output: out-of-place time per size (microseconds -> seconds)."""
    hosts: dict[int, str] = {}
    sizes: list[float] = []
    times: list[float] = []
    for line in text.splitlines():
        m = _RANK_LINE.match(line)
        if m:
            hosts[int(m.group(1))] = m.group(2)
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split()
        if len(parts) < 8 or not parts[0].isdigit():
            continue
        try:
            size, time_us = float(parts[0]), float(parts[5])
        except ValueError:
            continue
        if 0 < size < math.inf and 0 < time_us < math.inf:
            sizes.append(size)
            times.append(time_us * US)
    if not hosts:
        raise InputError(
            f"--nccl: {source!r} has no '#  Rank N Group G Pid P on HOST' lines; is it nccl-tests output?"
        )
    if not sizes:
        raise InputError(
            f"--nccl: {source!r} has no result rows (size count type redop root time ...)"
        )
    return NcclRun(source, kind, len(hosts), len(set(hosts.values())), tuple(sizes), tuple(times))


def _rows(path: Path, flag: str) -> list[dict[str, str]]:
    text = read_text(path, flag)
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    try:
        rows = list(reader)
    except csv.Error as exc:  # a field over csv's 128 KiB limit, a NUL byte: one line, not a crash
        raise InputError(
            f"{flag}: {str(path)!r} is not a CSV paraplan reads (data row {reader.line_num - 1}): {exc}"
        ) from None
    if not rows:
        raise InputError(f"{flag}: {str(path)!r} has no rows")
    return [{(k or "").strip().lower(): (v or "").strip() for k, v in r.items()} for r in rows]


def row_place(flag: str, source: str, index: int) -> str:
    """A table row's place in errors, ``FLAG: FILE line N``: data row ``index`` (from 0) is line index + 2,
    the header being line 1 (comment and blank lines not counted)."""
    return f"{flag}: {source} line {index + 2}"


def each_row(flag: str, source: str, items, fn: Callable[..., T]) -> list[T]:
    """``fn(item)`` of each of a table's rows (or what was read from them) in order; an InputError one
    raises is re-raised as one line with the row's place (``row_place``) in front, so every reader and fit
    names the row the same way."""
    out = []
    for i, item in enumerate(items):
        try:
            out.append(fn(item))
        except InputError as exc:
            raise InputError(f"{row_place(flag, source, i)}: {exc}") from None
    return out


def _count(row: dict[str, str], key: str) -> int:
    """A positive whole number (a GEMM or attention dimension)."""
    value = csv_number(row, key)
    if not value.is_integer() or value >= 2**53:
        raise InputError(f"column {key!r} must be a whole number below 2^53, got {row.get(key)!r}")
    return int(value)


def _time_s(row: dict[str, str], flops: float | None = None) -> float:
    """time_s, time_ms or time_us; or (GEMM only) tflops with the 2·m·n·k convention."""
    for key, scale in (("time_s", 1.0), ("time_ms", 1e-3), ("time_us", 1e-6)):
        if row.get(key):
            return csv_number(row, key) * scale
    if flops is not None and row.get("tflops"):
        return flops / (csv_number(row, "tflops") * 1e12)
    allowed = "time_s, time_ms, time_us" + (" or tflops" if flops is not None else "")
    raise InputError(f"needs a column {allowed}")


GEMM_DTYPES: tuple[str, ...] = get_args(Dtype)  # the system spec's datatypes


def _dtype(row: dict[str, str]) -> str:
    """The row's dtype column (bf16 where absent or empty), one of the system spec's datatypes."""
    dtype = row.get("dtype") or "bf16"
    if dtype not in GEMM_DTYPES:
        raise InputError(f"dtype {dtype!r} is not allowed; allowed: {', '.join(GEMM_DTYPES)}")
    return dtype


@dataclass(frozen=True)
class GemmSample:
    batch: int
    m: int
    n: int
    k: int
    dtype: str
    time_s: float

    @classmethod
    def from_row(cls, row: dict[str, str]) -> GemmSample:
        """The sample of one CSV row."""
        b = _count(row, "batch") if row.get("batch") else 1
        m, n, k = (_count(row, c) for c in ("m", "n", "k"))
        dtype = _dtype(row)
        return cls(b, m, n, k, dtype, _time_s(row, flops=2.0 * b * m * n * k))


def read_gemm_table(path: Path) -> list[GemmSample]:
    """CSV with m,n,k,dtype and time_(s|ms|us) or tflops (2·m·n·k FLOPs), optional batch."""
    return _read_table(path, "--gemm", GemmSample.from_row)


@dataclass(frozen=True)
class AttentionSample:
    batch: int
    heads: int
    seq_len: int
    head_dim: int
    causal: bool
    direction: str
    dtype: str
    time_s: float

    @classmethod
    def from_row(cls, row: dict[str, str]) -> AttentionSample:
        """The sample of one CSV row; causal 1 where the column is absent or empty (cost.kernel_tables.
        CAUSAL_WORDS: a word it does not know is refused)."""
        direction = row.get("direction", "fwd")
        if direction not in ("fwd", "bwd"):
            raise InputError(f"direction {direction!r} is not allowed; allowed: fwd, bwd")
        b, heads, seq_len, head_dim = (
            _count(row, c) for c in ("batch", "heads", "seq_len", "head_dim")
        )
        causal = csv_causal(row.get("causal") or "1")
        return cls(b, heads, seq_len, head_dim, causal, direction, _dtype(row), _time_s(row))


def read_attention_table(path: Path) -> list[AttentionSample]:
    """CSV with batch,heads,seq_len,head_dim,causal,direction (fwd|bwd),dtype,time_(s|ms|us)."""
    return _read_table(path, "--attention", AttentionSample.from_row)


def read_memory_table(path: Path) -> list[tuple[float, float]]:
    """CSV with bytes (read + written) and time_(s|ms|us) of memory-bound kernels (copies, norms)."""
    return _read_table(path, "--memory", lambda row: (csv_number(row, "bytes"), _time_s(row)))


def _read_table(path: Path, flag: str, sample: Callable[[dict[str, str]], T]) -> list[T]:
    """``sample(row)`` of each row of the CSV table at ``path`` (``flag`` its option), an error naming
    the row (``each_row``)."""
    return each_row(flag, path.name, _rows(path, flag), sample)
