"""The FP4 GEMM share of Blackwell Ultra (efficiency.fp4_gemm_share, AcceleratorSpec.gemm_efficiency_cap): an NVFP4
GEMM kernel's share of the FP4 peak over an FP8 kernel's share of the fp8 peak, from Transformer Engine's GEMM
profiling tutorial on a B300 (docs/examples/gemm_profiling/gemm_profiling.rst at 1609c890e, --pre-quantize: one
layer's 12 GEMMs, hidden 4096, intermediate 16384, 15,872 tokens, through tex.generic_gemm)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_system
from paraplan.cost.compute import scale_swizzle_s
from paraplan.specs.fields import with_fields

# per-layer GEMM time (ms) on the B300, pre-quantised inputs: the same 12 shapes in every precision
B300_PREQUANT_MS = {"bf16": 13.102, "fp8_current": 6.812, "mxfp8": 7.161, "nvfp4": 3.764}
M, H, F = 31 * 512, 4096, 16384
FPROP = [
    (M, H, 3 * H),
    (M, H, H),
    (M, H, F),
    (M, F, H),
]  # (M, K, N): QKV, attention out, MLP up, MLP down


def layer_swizzles_s() -> float:
    """The 24 scale swizzles of the layer's 12 NVFP4 GEMM calls (two operands each), on dgx-b300's HBM roofline: at
    the tutorial's commit NVFP4 tensors carry unswizzled scales, so generic_gemm swizzles them inside the timing."""
    system = with_fields(
        load_system("dgx-b300"), {"accelerator.efficiency.runtime.nvfp4_scale_swizzle": True}
    )
    acc = system.accelerator
    total = 0.0
    for (
        m,
        k,
        n,
    ) in (
        FPROP
    ):  # fprop (b, m, n, k), dgrad (b, m, k, n), wgrad (b, k, n, m) as cost.compute prices them
        for shape in ((1, m, n, k), (1, m, k, n), (1, k, n, m)):
            total += scale_swizzle_s(shape, acc, "nvfp4")
    return total


def test_swizzles_by_hand():
    # scale bytes read + written: 2/16 B per operand element; 24 kernels of 4 us; 8 TB/s x 0.85
    elements = sum((m * k + k * n) + (m * n + n * k) + (k * m + m * n) for m, k, n in FPROP)
    expected = 2 * elements / 16 / (8e12 * 0.85) + 24 * 4e-6
    assert layer_swizzles_s() == pytest.approx(expected)
    assert expected == pytest.approx(0.1416e-3, rel=1e-3)


def test_share_by_hand():
    # the FLOPs cancel: share = (t_fp8 / t_fp4 kernels) x (fp8 peak / FP4 peak) = (6.812 / 3.622) x (4.5 / 13.5)
    t = B300_PREQUANT_MS
    kernels_ms = t["nvfp4"] - layer_swizzles_s() * 1e3
    assert kernels_ms == pytest.approx(3.622, abs=1e-3)
    share = (t["fp8_current"] / kernels_ms) * (4.5 / 13.5)
    assert share == pytest.approx(0.6268, abs=1e-4)
    for name in ("dgx-b300", "gb300-nvl72"):
        acc = load_system(name).accelerator
        assert acc.peak_matrix_flops("fp8") / acc.peak_matrix_flops("nvfp4") == pytest.approx(1 / 3)
        assert acc.efficiency.fp4_gemm_share == pytest.approx(share, abs=5e-4)
    # the layer's FLOPs: 3 x 2 x 15872 x 4096 x (12288 + 4096 + 16384 + 16384) = 1.917e13
    flops = sum(3 * 2 * m * k * n for m, k, n in FPROP)
    assert flops / (t["fp8_current"] * 1e-3) == pytest.approx(2.814e15, rel=1e-3)
    assert flops / (kernels_ms * 1e-3) == pytest.approx(5.293e15, rel=1e-3)


def test_cap_applies_to_fp4_only():
    acc = load_system("gb300-nvl72").accelerator
    eff = acc.efficiency
    assert acc.gemm_efficiency_cap("nvfp4") == pytest.approx(eff.gemm_fp8 * eff.fp4_gemm_share)
    assert acc.gemm_efficiency_cap("mxfp4") == pytest.approx(eff.gemm_fp8 * eff.fp4_gemm_share)
    assert (
        acc.gemm_efficiency_cap("fp8") == eff.gemm_fp8
        and acc.gemm_efficiency_cap("bf16") == eff.gemm
    )
    # Blackwell (not Ultra) parts keep the fp8 share: no FP8-against-NVFP4 pair timed alike there
    for name in ("dgx-b200", "gb200-nvl72"):
        other = load_system(name).accelerator
        assert other.efficiency.fp4_gemm_share == 1.0
        assert other.gemm_efficiency_cap("nvfp4") == other.gemm_efficiency_cap("fp8")


def test_fp4_still_outruns_fp8_on_blackwell_ultra():
    # 0.627 x the 3x peak ratio: NVFP4 GEMMs at 1.88x the fp8 rate, as the B300 kernels ran
    acc = load_system("gb300-nvl72").accelerator
    fp4 = acc.peak_matrix_flops("nvfp4") * acc.gemm_efficiency_cap("nvfp4")
    fp8 = acc.peak_matrix_flops("fp8") * acc.gemm_efficiency_cap("fp8")
    assert fp4 / fp8 == pytest.approx(3 * 0.627, rel=1e-6)
