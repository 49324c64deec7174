"""A GEMM is never priced faster than moving its operands once at the datasheet HBM bandwidth
(cost.compute.gemm_traffic_floor_s, the roofline's memory side)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paraplan.catalog import load_system, system_names
from paraplan.cost.compute import gemm_time_s, gemm_traffic_floor_s


def test_the_floor_of_an_unfused_attention_score_gemm_by_hand():
    acc = load_system("dgx-2h").accelerator
    b, m, n, k = 128, 1024, 1024, 96  # Q·Kᵀ of 8 sequences × 16 heads at s 1024, head dim 96, fp16
    moved = (b * m * k + b * k * n) * 2 + b * m * n * 2
    assert gemm_traffic_floor_s((b, m, n, k), acc, "fp16") == pytest.approx(
        moved / acc.hbm_bandwidth
    )
    flops = 2.0 * b * m * n * k
    # the V100 table's work-scaled rate alone would price it under its own output write
    assert gemm_time_s(flops, (b, m, n, k), acc, "fp16") >= moved / acc.hbm_bandwidth


def test_fp8_inputs_are_one_byte_and_the_output_is_bf16():
    acc = load_system("dgx-h100-80gb").accelerator
    m, n, k = 4096, 8192, 64
    assert gemm_traffic_floor_s((1, m, n, k), acc, "fp8") == pytest.approx(
        ((m * k + k * n) * 1.0 + m * n * 2) / acc.hbm_bandwidth
    )


_SYSTEMS = sorted(system_names())


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    system=st.sampled_from(_SYSTEMS),
    dtype=st.sampled_from(["bf16", "fp16", "fp8"]),
    b=st.sampled_from([1, 8, 128]),
    m=st.integers(1, 1 << 15),
    n=st.integers(1, 1 << 15),
    k=st.integers(1, 1 << 14),
)
def test_no_gemm_is_priced_under_its_traffic_floor(system, dtype, b, m, n, k):
    acc = load_system(system).accelerator
    if dtype == "fp8" and "fp8" not in acc.matrix_flops:
        return
    flops = 2.0 * b * m * n * k
    assert gemm_time_s(flops, (b, m, n, k), acc, dtype) >= gemm_traffic_floor_s(
        (b, m, n, k), acc, dtype
    )
