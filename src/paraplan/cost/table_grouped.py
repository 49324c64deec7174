"""One-kernel grouped GEMMs of a named library from a published table (cost.kernel_tables' kind
``grouped_gemm_<implementation>``): the rate of one launch over all experts at a shape.

A file of this kind has the grouped-GEMM columns (experts, tokens_per_expert, k, n, dtype) and ``time_us``, one
kernel over every expert as the library's benchmark timed it (the DeepGEMM README's m-grouped fp8 GEMMs,
catalog/kernels/h800-deepgemm). It is read by the rule of cost.kernel_tables' grouped files: the rate
2·b·m·n·k / t interpolated by inverse-distance weights over (log2 experts, log2 tokens per expert, log2 k,
log2 n), a measured shape returning its own rate, each coordinate clamped to the measured edges outside them
(the rate there kept, the time scaling with the work). No floor from the table: its smallest rows are tens of
microseconds of work, not launch-bound kernels (the attention rule of cost.kernel_tables; the caller takes
the system's kernel_overhead_s as floor, cost.compute.library_grouped_s).
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from paraplan.cost import kernel_tables as kt

# efficiency.runtime.grouped_gemm implementation -> the table kind holding its one-kernel rows
LIBRARY_KINDS = {"deepgemm": "grouped_gemm_deepgemm"}
LIBRARY_TIME = kt.GROUPED_MM_TIME  # one kernel over every expert, as the torch._grouped_mm column


@lru_cache(maxsize=64)
def library_rates(ref: str, l2: float | None, implementation: str) -> dict[str, kt.Scatter]:
    """dtype -> rates of the table's one-kernel rows of ``implementation`` (floor 0); {} where it has none."""
    kind = LIBRARY_KINDS.get(implementation)
    table = kt.load_table(ref, l2)
    if kind is None or kind not in table.files:
        return {}
    rates = kt._by_dtype(
        table.rows[kind], table.name, table.files[kind], "grouped_gemm", LIBRARY_TIME
    )
    return {dtype: replace(r, floor_s=0.0) for dtype, r in rates.items()}


@lru_cache(maxsize=64)
def fastest_rate(ref: str, l2: float | None, implementation: str, dtype: str) -> float | None:
    """The fastest FLOP/s of ``implementation``'s one-kernel rows in ``dtype`` (None where the table has none): no
    shape is priced faster, since the rule averages log rates with positive weights and holds the edge rates
    outside the measured box (module docstring)."""
    rates = library_rates(ref, l2, implementation).get(kt._dtype(dtype))
    return None if rates is None else float(2.0 ** rates.log_rate.max())


@lru_cache(maxsize=65536)
def library_grouped_time_s(
    ref: str, l2: float | None, implementation: str, b: int, m: int, n: int, k: int, dtype: str
) -> float | None:
    """Table time of one ``implementation`` kernel over b experts of m×n×k (module docstring: 2·b·m·n·k / the
    interpolated rate), or None where the table has no rows of it in this dtype (fp16 read as bf16)."""
    rates = library_rates(ref, l2, implementation).get(kt._dtype(dtype))
    if rates is None:
        return None
    return rates.time_s(2.0 * b * m * n * k, (b, m, k, n))


@lru_cache(maxsize=64)
def prices_kernels(ref: str, l2: float | None, implementation: str) -> bool:
    """Whether the table ``ref`` prices any kernel a system running ``implementation``'s grouped GEMMs
    runs: a table whose files are all one-kernel library rows (LIBRARY_KINDS) prices only that library's
    grouped GEMMs, so nothing for any other implementation (the search keeps its analytical floors there,
    search.bounds.affine_floors)."""
    kinds = set(kt.load_table(ref, l2).files)
    library = set(LIBRARY_KINDS.values())
    return bool(kinds - library) or LIBRARY_KINDS.get(implementation) in kinds


kt.CACHES_ELSEWHERE += [library_rates, library_grouped_time_s, prices_kernels, fastest_rate]
