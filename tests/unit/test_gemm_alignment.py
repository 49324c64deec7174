"""cost.gemm_alignment: GEMMs off the 16-byte grid, against the measured H100 shares and, on Ampere / Ada,
the H100 align-1 kernel's rate per SM per clock (checked on an RTX 4090)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from paraplan.catalog import load_system
from paraplan.cost.compute import gemm_time_s
from paraplan.cost.gemm_alignment import gemm_alignment_share, unaligned_rate_flops

MEASURED = Path(__file__).resolve().parents[2] / (
    "benchmarks/gpu/measured/h100-2026-11-27b/host/gemm_alignment.csv"
)


def test_shares_are_the_measured_ratios():
    rows = list(csv.DictReader(MEASURED.open()))
    rate = {(r["op"], int(r["vocab"])): float(r["tflops"]) for r in rows}
    ratio = {
        kind: rate[(f"lm_head_{kind}", 50257)] / rate[(f"lm_head_{kind}", 50304)]
        for kind in ("fwd", "dgrad", "wgrad")
    }
    # forward t x V x h: the odd V is n; data gradient t x h x V: k; weight gradient V x h x t: m
    assert gemm_alignment_share(16384, 50257, 768, "bf16") == pytest.approx(ratio["fwd"])
    assert gemm_alignment_share(16384, 768, 50257, "bf16") == pytest.approx(ratio["dgrad"])
    assert gemm_alignment_share(50257, 768, 16384, "bf16") == pytest.approx(ratio["wgrad"])


def test_aligned_and_padded_widths_pay_nothing():
    assert gemm_alignment_share(16384, 50304, 768, "bf16") == 1.0
    assert gemm_alignment_share(16384, 50257 / 2, 768, "bf16") == 1.0  # split over tp: padded
    assert gemm_alignment_share(4100, 4100, 4100, "tf32") == 1.0  # 4 tf32 elements are 16 B
    assert gemm_alignment_share(16384, 50257, 768, "fp32") == 1.0  # CUDA cores: no requirement
    assert gemm_alignment_share(16384, 4100, 768, "bf16") < 1.0  # 8 bf16 elements are 16 B
    assert gemm_alignment_share(16384, 4104, 768, "fp8") < 1.0  # 16 fp8 elements are 16 B


def test_the_slower_kernel_reaches_the_gemm_time_unless_the_framework_pads():
    acc = load_system("dgx-h100-80gb").accelerator
    flops = 2.0 * 16384 * 50257 * 768
    odd = gemm_time_s(flops, (1, 16384, 50257, 768), acc, "bf16")
    padded = gemm_time_s(flops, (1, 16384, 50256, 768), acc, "bf16")
    ramp = acc.efficiency.gemm_ramp_s + acc.efficiency.kernel_overhead_s
    assert (odd - ramp) == pytest.approx(
        (padded - ramp) / gemm_alignment_share(16384, 50257, 768, "bf16"), rel=1e-3
    )
    eff = acc.efficiency.model_copy(update={"aligned_gemms_only": True})
    megatron = acc.model_copy(update={"efficiency": eff})
    assert gemm_time_s(flops, (1, 16384, 50257, 768), megatron, "bf16") == pytest.approx(
        padded, rel=1e-3
    )


# The align-1 kernel's rate per SM per clock on the H100 (module docstring), by hand:
# forward 95.4 TFLOP/s / (132 SMs x 1.98 GHz) = 365.01 FLOP per SM per clock.
H100_FWD_PER_SM_CLOCK = 95.4e12 / (132 * 1.98e9)


def test_ampere_runs_the_align1_kernel_at_the_h100_rate_per_sm_clock():
    acc = load_system("dgx-a100-40gb").accelerator
    # 365.01 x 108 SMs x 1.41 GHz = 55.585 TFLOP/s; over an aligned 200 TFLOP/s: 0.27793
    assert unaligned_rate_flops("n", acc) == pytest.approx(55.585e12, rel=1e-4)
    assert gemm_alignment_share(32768, 50257, 768, "bf16", acc, 200e12) == pytest.approx(
        0.27793, rel=1e-4
    )
    # data gradient (odd k): 141.7 / 261.36 x 108 x 1.41 = 82.56 TFLOP/s
    assert gemm_alignment_share(32768, 768, 50257, "bf16", acc, 200e12) == pytest.approx(
        0.41281, rel=1e-4
    )
    # never faster than the aligned kernel
    assert gemm_alignment_share(32768, 50257, 768, "bf16", acc, 10e12) == 1.0
    flops = 2.0 * 32768 * 50257 * 768
    odd = gemm_time_s(flops, (1, 32768, 50257, 768), acc, "bf16")
    fixed = acc.efficiency.gemm_ramp_s + acc.efficiency.kernel_overhead_s
    assert odd - fixed == pytest.approx(flops / 55.585e12, rel=1e-4)


def test_the_rule_reproduces_the_rtx4090_measurement():
    """pytorch/pytorch#181718: bf16 N x N x N on an RTX 4090, odd N = 2055 / 2057 / 2071 / 2073 on the
    align-1 kernel at 115.6 / 106.8 / 110.9 / 112.0 TFLOP/s; the rule gives 365.01 x 128 x 2.52 GHz."""
    acc = load_system("rtx-4090-8").accelerator
    rate = unaligned_rate_flops("n", acc)
    assert (
        rate
        == pytest.approx(H100_FWD_PER_SM_CLOCK * 128 * 2.52e9)
        == pytest.approx(117.74e12, rel=1e-4)
    )
    assert all(
        1.0 < rate / measured < 1.11 for measured in (115.6e12, 106.8e12, 110.9e12, 112.0e12)
    )


def test_architectures_without_data_keep_the_h100_shares():
    h100 = gemm_alignment_share(16384, 50257, 768, "bf16")
    for system in ("dgx-h100-80gb", "dgx-b200", "dgx-1-v100"):
        acc = load_system(system).accelerator
        assert unaligned_rate_flops("n", acc) is None
        assert gemm_alignment_share(16384, 50257, 768, "bf16", acc, 500e12) == h100
    no_clock = load_system("l40s-8").accelerator.model_copy(update={"sm_clock_ghz": None})
    assert gemm_alignment_share(16384, 50257, 768, "bf16", no_clock, 300e12) == h100
