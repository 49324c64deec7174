"""The MI300X fp8 GEMM fraction against the measured hipBLASLt kernel rate it comes from (docs/model.md §6).

mi300x-8's ``gemm_fp8`` is the fp8 kernel cap of the best row of the Azure AI-benchmarking-guide hipBLASLt sweep
(catalog/kernels/nd-mi300x-v5-hipblaslt: 1222.9 TFLOPS at 8192^3) x the H100's fp8 in-step share of the same
guide's best row (h100.gemm_fp8 over the kernel cap of nd-h100-v5-cublaslt's 1382.2 TFLOPS at 32768^3): a share
taken against the benchmark the cap comes from, since fp8 does not follow the bf16 share (docs/model.md §6).
"""

from __future__ import annotations

import pytest

from paraplan.catalog import load_system
from paraplan.cost import kernel_tables as kt
from paraplan.cost.compute import gemm_benchmark_cap, gemm_kernel_time_s

# MI300X: F = 2·8192^3 = 1.0995e12 FLOP; F / 1222.9e12 = 899.10 us, less the 4 us kernel overhead = 895.10 us;
# 128x256 tiles: 64·32 = 2048 tiles in 7 waves of 304 CUs (2128 slots); depth 8192 / (8192 + 32)
F_MI = 2.0 * 8192**3
MI300X_KERNEL_CAP = F_MI / (2614.9e12 * (2048 / 2128) * (8192 / 8224) * (F_MI / 1222.9e12 - 4e-6))
# H100: F = 2·32768^3 = 7.0369e13 FLOP; F / 1382.2e12 = 50.911 ms, less 4 us; 128·256 = 32768 tiles of 128x256
# in 249 waves of 132 SMs (32868 slots); depth 32768 / 32800; peak fp8 1978.9 TFLOPS
F_H = 2.0 * 32768**3
H100_KERNEL_CAP = F_H / (1978.9e12 * (32768 / 32868) * (32768 / 32800) * (F_H / 1382.2e12 - 4e-6))
H100_FP8_SHARE = 0.560 / H100_KERNEL_CAP  # h100.gemm_fp8 over the same guide's H100 kernel cap


def _best(table: str) -> dict:
    return max(kt.load_table(table).rows["gemm"], key=lambda r: float(r["tflops"]))


def test_hand_values():
    assert MI300X_KERNEL_CAP == pytest.approx(0.4900, abs=1e-4)
    assert H100_KERNEL_CAP == pytest.approx(0.7013, abs=1e-4)
    assert H100_FP8_SHARE == pytest.approx(0.7985, abs=1e-4)
    assert MI300X_KERNEL_CAP * H100_FP8_SHARE == pytest.approx(0.3913, abs=1e-4)


def test_kernel_caps_from_the_tables_best_rows():
    mi, h100 = _best("nd-mi300x-v5-hipblaslt"), _best("nd-h100-v5-cublaslt")
    assert (int(mi["m"]), int(mi["n"]), int(mi["k"]), float(mi["tflops"])) == (
        8192,
        8192,
        8192,
        1222.9,
    )
    assert (int(h100["m"]), float(h100["tflops"])) == (32768, 1382.2) and mi["dtype"] == h100[
        "dtype"
    ]
    acc = load_system("mi300x-8").accelerator
    assert gemm_benchmark_cap(1222.9, (8192,) * 3, acc, "fp8") == pytest.approx(MI300X_KERNEL_CAP)
    h = load_system("dgx-h100-80gb").accelerator
    assert h.efficiency.gemm_fp8 == pytest.approx(0.560)
    assert gemm_benchmark_cap(1382.2, (32768,) * 3, h, "fp8") == pytest.approx(H100_KERNEL_CAP)


def test_catalog_fraction_is_the_hand_computed_product():
    product = MI300X_KERNEL_CAP * H100_FP8_SHARE
    # written to 3 decimals
    assert load_system("mi300x-8").accelerator.efficiency.gemm_fp8 == pytest.approx(
        product, rel=2e-3
    )
    # MI355X: MI300X's measured-rate fraction, copied (no CDNA 4 fp8 data)
    assert load_system("mi355x-8").accelerator.efficiency.gemm_fp8 == pytest.approx(
        load_system("mi300x-8").accelerator.efficiency.gemm_fp8
    )


def test_priced_fp8_gemm_no_faster_than_the_tables_kernel():
    # the catalog without a table prices the best row's GEMM no faster than hipBLASLt ran it alone (899.10 us):
    # 1 / 0.7985 = 1.25x its time, as the H100 catalog prices the H100 table's best row
    acc = load_system("mi300x-8").accelerator
    assert acc.kernel_tables is None
    priced = gemm_kernel_time_s(F_MI, (1, 8192, 8192, 8192), acc, "fp8")
    assert priced >= F_MI / 1222.9e12
    assert priced == pytest.approx(F_MI / 1222.9e12 / H100_FP8_SHARE, rel=3e-3)
