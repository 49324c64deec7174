"""specs.power.power_bound_rate_ratio and the GB300 fractions derived through it (catalog gb300-nvl72); the GB300
fp8 GEMM fraction, taken from a measured GB300 / GB200 cuBLASLt ratio instead."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_system
from paraplan.specs.power import power_bound_rate_ratio


def test_the_rate_ratio_by_hand():
    # same SMs: the cube root of the power ratio; 1,200 W / 1,000 W -> 1.2^(1/3) = 1.06266
    assert power_bound_rate_ratio(148, 1200, 148, 1000) == pytest.approx(1.0626586, rel=1e-6)
    # same power: more SMs at a lower clock, (160/148)^(2/3) = 1.05335
    assert power_bound_rate_ratio(160, 1000, 148, 1000) == pytest.approx(1.0533487, rel=1e-6)
    # GB300 against GB200: 1.05335 x (1400/1200)^(1/3) = 1.05335 x 1.05271 = 1.10889
    assert power_bound_rate_ratio(160, 1400, 148, 1200) == pytest.approx(1.1088882, rel=1e-6)
    assert power_bound_rate_ratio(148, 1200, 148, 1200) == 1.0


def test_the_ratio_is_monotone_and_inverse():
    forward = power_bound_rate_ratio(160, 1400, 148, 1200)
    assert power_bound_rate_ratio(148, 1200, 160, 1400) == pytest.approx(1.0 / forward)
    assert power_bound_rate_ratio(160, 1300, 148, 1200) < forward
    assert power_bound_rate_ratio(150, 1400, 148, 1200) < forward


def test_the_check_against_mamf_gb200_over_b200():
    """MAMF (S. Bekman, ML Engineering Open Book @ 744d01e): GB200 fp8 3,615.6 and bf16 1,822.0 TFLOPS against
    B200 3,432.5 and 1,745.0, ratios 1.053 and 1.044; the law 1.063, the datasheets 5.0 / 4.5 = 1.111."""
    law = power_bound_rate_ratio(148, 1200, 148, 1000)
    assert abs(law - 3615.6 / 3432.5) < 0.015 and abs(law - 1822.0 / 1745.0) < 0.02
    assert abs(law - 5.0 / 4.5) > 0.04


@pytest.mark.parametrize("field", ["gemm", "attention"])
def test_gb300_fractions_are_the_gb200_ones_times_the_rate_ratio(field):
    gb200, gb300 = (load_system(n).accelerator for n in ("gb200-nvl72", "gb300-nvl72"))
    ratio = power_bound_rate_ratio(gb300.sm_count, gb300.tdp_w, gb200.sm_count, gb200.tdp_w)
    assert (gb300.sm_count, gb300.tdp_w, gb200.sm_count, gb200.tdp_w) == (160, 1400, 148, 1200)
    # written to 3 decimals in the catalog
    expected = getattr(gb200.efficiency, field) * ratio
    assert getattr(gb300.efficiency, field) == pytest.approx(expected, abs=6e-4)
    # the datasheet peaks stay as cited (MFU is against them): the same dense bf16 / fp8 on both parts
    for dtype in ("bf16", "fp8"):
        assert gb300.matrix_flops[dtype] == gb200.matrix_flops[dtype]


# Azure AI-benchmarking-guide (github.com/egmsft/AI-benchmarking-guide, Benchmarks/NVIDIA/GEMMCublasLt.py: superbench
# cublaslt_gemm, fp8e4m3, random inputs, 10,000 warm-up and 1,000 timed iterations): TFLOPS at the five shapes with
# every dimension >= 4,096 (4096^3, 8192^3, 16384^3, 32768^3, 6144 x 12288 x 12288)
AZURE_FP8_GB300 = (
    3257.0,
    3286.3,
    3308.5,
    3271.3,
    3279.5,
)  # ND_GB300_v6_results.md @ 18e80a2 (CUDA 13.0)
AZURE_FP8_GB200 = (
    2694.7,
    2781.5,
    2819.5,
    2755.3,
    2798.7,
)  # ND_GB200_v6_results.md @ 3862f8f (CUDA 12.8)


def test_gb300_fp8_gemm_fraction_is_the_gb200_one_times_the_measured_ratio():
    """The fp8 GEMM fraction of gb300-nvl72 is the GB200's times the sustained cuBLASLt fp8 rate ratio of the two
    parts in one benchmark harness: mean 3,280.5 / 2,770.0 TFLOPS = 1.184 (per shape 1.17-1.21), where the power
    law gives 1.109 (the law's check on MAMF's GB200 / B200 still holds, above)."""
    gb200, gb300 = (load_system(n).accelerator for n in ("gb200-nvl72", "gb300-nvl72"))
    ratio = sum(AZURE_FP8_GB300) / sum(AZURE_FP8_GB200)
    assert ratio == pytest.approx(1.1843, abs=1e-4)
    assert all(1.17 < a / b < 1.21 for a, b in zip(AZURE_FP8_GB300, AZURE_FP8_GB200))
    assert gb300.efficiency.gemm_fp8 == pytest.approx(gb200.efficiency.gemm_fp8 * ratio, abs=6e-4)
    law = power_bound_rate_ratio(gb300.sm_count, gb300.tdp_w, gb200.sm_count, gb200.tdp_w)
    assert ratio > law + 0.07
    # the in-step fraction stays below the benchmark's sustained kernel rate on both parts (5 PFLOPS dense fp8)
    for acc, rows in ((gb200, AZURE_FP8_GB200), (gb300, AZURE_FP8_GB300)):
        kernel = sum(rows) / len(rows) / 5000.0
        assert acc.efficiency.gemm_fp8 < kernel < 1.1 * acc.efficiency.gemm_fp8


def test_rejects_non_positive_inputs():
    with pytest.raises(ValueError):
        power_bound_rate_ratio(0, 1400, 148, 1200)
    with pytest.raises(ValueError):
        power_bound_rate_ratio(160, 1400, 148, 0)


def _attention_fwd_bwd_s(system: str) -> tuple[float, float]:
    """The model's fused-attention forward and backward at the cuDNN benchmark's Llama 3.1 shape (batch 2,
    64 query heads, head dim 128, 8,192 tokens, causal), bf16."""
    from paraplan.cost.compute import attention_time_s
    from paraplan.cost.flops import softmax_exponentials

    acc = load_system(system).accelerator
    fwd = 4.0 * 2 * 64 * 8192 * 8192 * 128  # Q·Kᵀ and P·V, whole score matrix
    call = (8192, 8192, 128, True)
    exps = softmax_exponentials(fwd, 0.5, 128)
    return (
        attention_time_s(fwd, 0.5, acc, "bf16", call, "fwd", exps),
        attention_time_s(2.5 * fwd, 0.5, acc, "bf16", call, "bwd", exps),
    )


def test_gb300_attention_gain_matches_the_cudnn_benchmark():
    """cuDNN's SDPA training benchmark on both parts with the same software (NVIDIA/cudnn-frontend
    benchmark/sdpa_benchmark_training/results/llama3.1/gb200 and gb300, cuDNN backend 9.22, 2026-04-24): bf16,
    causal, 8,192 tokens, head dim 128: forward 1,574 -> 1,856 TFLOPS, backward (non-deterministic) 1,332 ->
    1,435; a forward plus a backward of 2.5x its FLOPs is 1.10x faster on GB300. The model's gain through the
    rate ratio (exponentials not binding at this head dim) is within 2 % of it."""
    f200, b200 = _attention_fwd_bwd_s("gb200-nvl72")
    f300, b300 = _attention_fwd_bwd_s("gb300-nvl72")
    measured = (1 / 1574 + 2.5 / 1332) / (1 / 1856 + 2.5 / 1435)
    assert measured == pytest.approx(1.1015, abs=1e-3)
    assert (f200 + b200) / (f300 + b300) == pytest.approx(measured, rel=0.02)
