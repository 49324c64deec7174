"""The FP4 GEMM share of Blackwell Ultra (efficiency.fp4_gemm_share, AcceleratorSpec.gemm_efficiency_cap): an NVFP4
GEMM kernel's share of the FP4 peak over an FP8 kernel's share of the fp8 peak, from Transformer Engine's GEMM
profiling tutorial on a B300 (docs/examples/gemm_profiling/gemm_profiling.rst @ d0067d0, --pre-quantize: one
layer's 12 GEMMs, hidden 4096, intermediate 16384, 15,872 tokens, kernels only)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_system

# per-layer GEMM kernel time (ms) on the B300, pre-quantised inputs: the same 12 shapes in every precision
B300_PREQUANT_MS = {"bf16": 13.102, "fp8_current": 6.812, "mxfp8": 7.161, "nvfp4": 3.764}


def test_share_by_hand():
    # the FLOPs cancel: share = (t_fp8 / t_fp4) x (fp8 peak / FP4 peak) = (6.812 / 3.764) x (4.5 / 13.5)
    t = B300_PREQUANT_MS
    share = (t["fp8_current"] / t["nvfp4"]) * (4.5 / 13.5)
    assert share == pytest.approx(0.6033, abs=1e-4)
    for name in ("dgx-b300", "gb300-nvl72"):
        acc = load_system(name).accelerator
        assert acc.peak_matrix_flops("fp8") / acc.peak_matrix_flops("nvfp4") == pytest.approx(1 / 3)
        assert acc.efficiency.fp4_gemm_share == pytest.approx(share, abs=5e-4)
    # the layer's FLOPs: 3 x 2 x 15872 x 4096 x (12288 + 4096 + 16384 + 16384) = 1.917e13; NVFP4 at 5.09 PFLOPS
    flops = 3 * 2 * 15872 * 4096 * (12288 + 4096 + 16384 + 16384)
    assert flops / (t["nvfp4"] * 1e-3) == pytest.approx(5.093e15, rel=1e-3)
    assert flops / (t["fp8_current"] * 1e-3) == pytest.approx(2.814e15, rel=1e-3)


def test_cap_applies_to_fp4_only():
    acc = load_system("gb300-nvl72").accelerator
    eff = acc.efficiency
    assert acc.gemm_efficiency_cap("nvfp4") == pytest.approx(eff.gemm_fp8 * eff.fp4_gemm_share)
    assert acc.gemm_efficiency_cap("mxfp4") == pytest.approx(eff.gemm_fp8 * eff.fp4_gemm_share)
    assert (
        acc.gemm_efficiency_cap("fp8") == eff.gemm_fp8
        and acc.gemm_efficiency_cap("bf16") == eff.gemm
    )
    # Blackwell (not Ultra) parts keep the fp8 share: no FP8-vs-NVFP4 pair measured alike there
    for name in ("dgx-b200", "gb200-nvl72"):
        other = load_system(name).accelerator
        assert other.efficiency.fp4_gemm_share == 1.0
        assert other.gemm_efficiency_cap("nvfp4") == other.gemm_efficiency_cap("fp8")


def test_fp4_still_outruns_fp8_on_blackwell_ultra():
    # 0.603 x the 3x peak ratio: NVFP4 GEMMs at 1.81x the fp8 rate, as the B300 kernels ran
    acc = load_system("gb300-nvl72").accelerator
    fp4 = acc.peak_matrix_flops("nvfp4") * acc.gemm_efficiency_cap("nvfp4")
    fp8 = acc.peak_matrix_flops("fp8") * acc.gemm_efficiency_cap("fp8")
    assert fp4 / fp8 == pytest.approx(3 * 0.603, rel=1e-6)
