"""Issue 32: DeepGEMM's published fp8 m-grouped GEMM rates (catalog/kernels/h800-deepgemm, the DeepGEMM README
at 327ec92 on H800 SXM5) priced by the deepgemm implementation (cost.compute.deepgemm_grouped_s,
cost.table_grouped), against hand-computed values."""

from __future__ import annotations

import math

import pytest

from paraplan.catalog import load_system
from paraplan.cost.compute import (
    gemm_time_s,
    grouped_gemm_share,
    grouped_gemm_time_s,
    one_kernel_grouped_s,
)
from paraplan.specs.fields import with_fields

RAMP_S = 40e-6  # dgx-h800 efficiency.gemm_ramp_s


def h800(impl: str = "deepgemm", tables: str | None = "h800-deepgemm"):
    system = load_system("dgx-h800")
    fields = {"accelerator.efficiency.runtime.grouped_gemm": impl}
    if tables != "h800-deepgemm":
        fields["accelerator.kernel_tables"] = tables
    return with_fields(system, fields).accelerator


def test_the_catalog_h800_attaches_the_deepgemm_table():
    assert load_system("dgx-h800").accelerator.kernel_tables == "h800-deepgemm"


def test_a_published_row_reads_back_as_its_kernel_plus_one_ramp():
    """README contiguous row 4 groups x 8192, N 4096, K 7168 at 1346 TFLOPS: 2·4·8192·4096·7168 / 1346e12 =
    1429.53 us, + the ramp."""
    flops = 2.0 * 4 * 8192 * 4096 * 7168
    kernel = flops / 1346e12
    assert kernel == pytest.approx(1429.5285e-6, rel=1e-7)
    t = grouped_gemm_time_s(flops, (4, 8192, 4096, 7168), h800(), "fp8")
    assert t == pytest.approx(kernel + RAMP_S, rel=1e-6)


def test_between_rows_the_rate_is_the_inverse_distance_mean_of_the_four_nearest():
    """4 experts x 512 tokens, N 4096, K 7168, in (log2 experts, log2 tokens, log2 k, log2 n): the rows 2 x 512 and
    4 x 256 at the same k, n lie at distance 1 (1040 and 932 TFLOPS), the rows 2 x 512 and 4 x 256 at K 2048,
    N 7168 at d² = 1 + log2(7168/2048)² + log2(7168/4096)² = 4.9183 (916 and 815 TFLOPS); weights 1/d²:
    rate = 2^[(log2 1040 + log2 932 + (log2 916 + log2 815) / 4.9183) / (2 + 2 / 4.9183)] = 963.04 TFLOPS,
    kernel = 2·4·512·4096·7168 / rate = 124.874 us."""
    d2 = 1 + math.log2(7168 / 2048) ** 2 + math.log2(7168 / 4096) ** 2
    assert d2 == pytest.approx(4.9183, abs=1e-4)
    logs = math.log2(1040) + math.log2(932) + (math.log2(916) + math.log2(815)) / d2
    rate = 2 ** (logs / (2 + 2 / d2)) * 1e12
    assert rate == pytest.approx(963.04e12, rel=1e-5)
    flops = 2.0 * 4 * 512 * 4096 * 7168
    assert flops / rate == pytest.approx(124.874e-6, rel=1e-5)
    t = grouped_gemm_time_s(flops, (4, 512, 4096, 7168), h800(), "fp8")
    assert t == pytest.approx(
        flops / rate + RAMP_S, rel=1e-5
    )  # the csv's times hold 4 decimals of a us


def test_a_small_expert_gemm_is_held_by_the_weights_traffic():
    """8 experts x 64 tokens, N 2048, K 7168: the clamped rate gives ~17 us, below the HBM floor of reading the
    fp8 weights once: (8·64·7168 + 8·7168·2048) B + 8·64·2048·2 B = 123.3 MB / 3.35 TB/s = 36.81 us."""
    moved = 8 * 64 * 7168 + 8 * 7168 * 2048 + 8 * 64 * 2048 * 2
    floor = moved / 3.35e12
    assert floor == pytest.approx(36.81e-6, rel=1e-3)
    flops = 2.0 * 8 * 64 * 2048 * 7168
    t = grouped_gemm_time_s(flops, (8, 64, 2048, 7168), h800(), "fp8")
    assert t == pytest.approx(floor + RAMP_S, rel=1e-12)


def test_only_the_deepgemm_implementation_and_fp8_read_the_table():
    shape, flops = (4, 8192, 4096, 7168), 2.0 * 4 * 8192 * 4096 * 7168
    bare = h800(tables=None)
    # bf16: no DeepGEMM rows, the analytical one-kernel form, table or not
    assert grouped_gemm_time_s(flops, shape, h800(), "bf16") == one_kernel_grouped_s(
        flops, shape, bare, "bf16"
    )
    # the other implementations price as without the table
    for impl in ("te-multistream", "cutlass-grouped", "torch-grouped-mm"):
        for dtype in ("bf16", "fp8"):
            with_table = grouped_gemm_time_s(flops, shape, h800(impl), dtype)
            assert with_table == grouped_gemm_time_s(flops, shape, h800(impl, None), dtype)
    # and so do dense GEMMs
    assert gemm_time_s(flops, (1, 8192, 4096, 7168), h800(), "fp8") == gemm_time_s(
        flops, (1, 8192, 4096, 7168), bare, "fp8"
    )


def test_one_expert_is_the_dense_gemm_and_fp8_stays_under_bf16():
    acc = h800()
    flops = 2.0 * 1024 * 4096 * 7168
    for dtype in ("bf16", "fp8"):
        dense = gemm_time_s(flops, (1, 1024, 4096, 7168), acc, dtype, leading_dims_aligned=True)
        assert grouped_gemm_time_s(flops, (1, 1024, 4096, 7168), acc, dtype) == dense
    for shape in (
        (2, 1, 64, 64),
        (8, 64, 2048, 7168),
        (64, 16384, 16384, 16384),
        (4, 256, 7168, 2048),
    ):
        f = 2.0 * math.prod(shape)
        assert grouped_gemm_time_s(f, shape, acc, "fp8") <= grouped_gemm_time_s(
            f, shape, acc, "bf16"
        )


def test_the_search_bound_holds_where_deepgemm_beats_the_dense_rate():
    """DeepGEMM's published rates (up to 1,346 TFLOP/s) beat H800's dense fp8 rate peak · cap (1,979 × 0.58): the
    search's expert-GEMM floor (search.bounds.exposure_floors.expert_gemm_floor_s) divides by grouped_gemm_share,
    which must then exceed 1 so that no priced shape is faster than the floor."""
    acc = h800()
    share = grouped_gemm_share(acc, "fp8")
    assert share > 1.0 and grouped_gemm_share(h800("te-multistream"), "fp8") == 1.0
    dense = acc.peak_matrix_flops("fp8") * acc.gemm_efficiency_cap("fp8") * share
    for b in (2, 4, 8, 32, 64):
        for m in (128, 512, 4096, 8192, 32768):
            for n, k in ((2048, 7168), (4096, 7168), (7168, 2048), (4096, 4096)):
                flops = 2.0 * b * m * n * k
                assert grouped_gemm_time_s(flops, (b, m, n, k), acc, "fp8") >= flops / dense * (
                    1 - 1e-12
                )
