"""cost.gemm_alignment: GEMMs off the 16-byte grid, against the measured H100 shares."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from paraplan.catalog import load_system
from paraplan.cost.compute import gemm_time_s
from paraplan.cost.gemm_alignment import gemm_alignment_share

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
