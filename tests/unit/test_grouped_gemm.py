"""Issue 33: grouped expert GEMMs priced by implementation (cost.compute.GROUPED_GEMM_IMPLEMENTATIONS), against
hand-computed values."""

from __future__ import annotations

import math

import pytest

from paraplan.catalog import load_system
from paraplan.cost.compute import (
    GROUPED_GEMM_STREAMS,
    gemm_efficiency,
    gemm_time_s,
    grouped_gemm_time_s,
)
from paraplan.specs.fields import with_fields

SHAPE = (8, 1024, 2048, 7168)  # 8 local experts of 1024 tokens, n = 2048, k = 7168
FLOPS = 2.0 * 8 * 1024 * 2048 * 7168


def h100(**efficiency):
    acc = load_system("dgx-h100-80gb").accelerator
    eff = acc.efficiency.model_copy(update=efficiency)
    return acc.model_copy(update={"efficiency": eff})


def with_impl(acc, impl: str):
    return with_fields(acc, {"efficiency.runtime.grouped_gemm": impl})


def loop_s(acc, dtype: str) -> float:
    """By hand: Σ per-expert main loop at the dense rate + ⌈8/4⌉ = 2 × (ramp + kernel overhead)."""
    rate = acc.peak_matrix_flops(dtype) * gemm_efficiency(1, 1024, 2048, 7168, acc, dtype)
    fixed = acc.efficiency.gemm_ramp_s + acc.efficiency.kernel_overhead_s
    return FLOPS / rate + 2 * fixed


def test_the_default_implementation_is_the_transformer_engine_loop():
    acc = load_system("dgx-h100-80gb").accelerator
    assert acc.efficiency.runtime.grouped_gemm == "te-multistream" and GROUPED_GEMM_STREAMS == 4
    assert grouped_gemm_time_s(FLOPS, SHAPE, acc, "bf16") == pytest.approx(loop_s(acc, "bf16"))


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_fp8_multistream_keeps_the_share_of_the_dense_fp8_speed_up(share):
    """t = t_bf16 − s·(t_bf16 − t_fp8), both loops by hand."""
    acc = h100(grouped_gemm_fp8=share)
    bf16, fp8 = loop_s(acc, "bf16"), loop_s(acc, "fp8")
    assert fp8 < bf16
    expected = bf16 - share * (bf16 - fp8)
    assert grouped_gemm_time_s(FLOPS, SHAPE, acc, "fp8") == pytest.approx(expected)


def test_one_local_expert_is_the_dense_gemm_in_every_dtype_and_implementation():
    flops = 2.0 * 4096 * 2048 * 7168
    for impl in ("te-multistream", "cutlass-grouped", "torch-grouped-mm", "deepgemm"):
        acc = with_impl(h100(grouped_gemm_fp8=0.0), impl)
        for dtype in ("bf16", "fp8"):
            dense = gemm_time_s(flops, (1, 4096, 2048, 7168), acc, dtype)
            assert grouped_gemm_time_s(flops, (1, 4096, 2048, 7168), acc, dtype) == dense


def test_a_true_grouped_kernel_is_one_batched_launch():
    """torch._grouped_mm / CUTLASS / DeepGEMM: peak · cap · wave(8 experts' tiles) · depth, one ramp + overhead."""
    acc = with_impl(h100(), "torch-grouped-mm")
    for dtype in ("bf16", "fp8"):
        rate = acc.peak_matrix_flops(dtype) * gemm_efficiency(8, 1024, 2048, 7168, acc, dtype)
        fixed = acc.efficiency.gemm_ramp_s + acc.efficiency.kernel_overhead_s
        assert grouped_gemm_time_s(FLOPS, SHAPE, acc, dtype) == pytest.approx(FLOPS / rate + fixed)
    # one launch for all experts: cheaper than the multi-stream loop's ⌈b/4⌉ fixed costs and per-expert waves
    assert grouped_gemm_time_s(FLOPS, SHAPE, acc, "bf16") < loop_s(acc, "bf16")
    assert math.isclose(grouped_gemm_time_s(0.0, SHAPE, acc, "bf16"), 0.0)


def test_a_framework_profile_states_the_implementation():
    from paraplan.catalog import load_framework
    from paraplan.cost.runtimes import runtime_costs

    framework = load_framework("megatron-core")
    assert framework.grouped_gemm == "te-multistream"
    assert (
        runtime_costs(with_fields(framework, {"grouped_gemm": "deepgemm"})).grouped_gemm
        == "deepgemm"
    )


@pytest.mark.parametrize("impl", ["te-multistream", "cutlass-grouped", "deepgemm"])
def test_an_odd_routed_token_count_pays_no_alignment_share(impl):
    """A routed expert's token count (here 8,365 rows, off the 16-byte grid) is no operand's leading
    dimension, so one local expert runs at the aligned dense rate on a stack that does not pad
    (aligned_gemms_only False), by hand: flops / (peak · gemm_efficiency) + ramp + kernel overhead; before,
    the dense path charged cost.gemm_alignment's m share (0.19), pricing Mixtral 8x7B at ep 8 without a
    profile 3.3x slower than with megatron-core."""
    acc = with_impl(h100(aligned_gemms_only=False), impl)
    shape = (1, 8365, 4096, 28672)
    flops = 2.0 * 8365 * 4096 * 28672
    rate = acc.peak_matrix_flops("bf16") * gemm_efficiency(1, 8365, 4096, 28672, acc, "bf16")
    fixed = acc.efficiency.gemm_ramp_s + acc.efficiency.kernel_overhead_s
    assert math.isclose(
        grouped_gemm_time_s(flops, shape, acc, "bf16"), flops / rate + fixed, rel_tol=1e-12
    )
    assert gemm_time_s(flops, shape, acc, "bf16") > 2 * (
        flops / rate + fixed
    )  # a dense GEMM pays it
