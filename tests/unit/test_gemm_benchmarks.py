"""The bf16 GEMM caps against the published GEMM benchmark they come from (catalog.gemm_benchmarks).

Each catalog cap is kernel cap x one fitted in-step share. The kernel cap must reproduce the benchmark: on the
catalog accelerator with the cap divided by the share and no ramp, gemm_time_s at the benchmark's shape takes
the benchmark's time, F / R (R its TFLOPS: MAMF, or a wall-clock loop of torch.mm on the V100 systems), written
below as the arithmetic on the source's numbers.
"""

from __future__ import annotations

import pytest

from paraplan.catalog import load_system
from paraplan.catalog.gemm_benchmarks import (
    GEMM_BENCHMARK_BF16,
    GEMM_BENCHMARK_FP8,
    GEMM_BENCHMARK_SOURCE,
)
from paraplan.cost.compute import gemm_benchmark_cap, gemm_time_s, kernel_cap
from paraplan.specs.system import AcceleratorSpec
from paraplan.validate.fitted import FITTED_CONSTANTS

SHARE_CONSTANT = next(c for c in FITTED_CONSTANTS if c.name == "gemm.bf16")
# the fitted in-step share: dgx-a100-80gb's catalog cap over its kernel cap (the constant's value is that cap)
SHARE = SHARE_CONSTANT.catalog_value() / kernel_cap("dgx-a100-80gb")

V100_SXM2 = ("dgx-1-v100", "aws-p3.16xlarge", "aws-p3.8xlarge")
# (system, m, n, k, expected kernel time in s = 2·m·n·k / (MAMF TFLOPS · 1e12)), MAMF table at ml-engineering 744d01e
BENCHMARK_TIMES = [
    (
        "dgx-a100-80gb",
        1024,
        10240,
        5120,
        2 * 1024 * 10240 * 5120 / 271.2e12,
    ),  # A100 SXM 271.2: 395.9 us
    ("dgx-a100-40gb", 1024, 10240, 5120, 2 * 1024 * 10240 * 5120 / 271.2e12),  # same A100 SXM row
    (
        "dgx-h100-80gb",
        2048,
        2048,
        13312,
        2 * 2048 * 2048 * 13312 / 794.5e12,
    ),  # H100 SXM 794.5: 140.6 us
    ("dgx-h200", 2048, 2048, 13312, 2 * 2048 * 2048 * 13312 / 794.5e12),  # "H200 is the same"
    (
        "dgx-h800",
        2048,
        2048,
        13312,
        2 * 2048 * 2048 * 13312 / 794.5e12,
    ),  # H100 SXM compute datasheet
    (
        "dgx-b200",
        1792,
        16128,
        3072,
        2 * 1792 * 16128 * 3072 / 1745.0e12,
    ),  # B200 SXM 1745.0: 101.8 us
    ("gb200-nvl72", 4096, 9728, 2048, 2 * 4096 * 9728 * 2048 / 1822.0e12),  # GB200 1822.0: 89.6 us
    (
        "dgx-b300",
        12288,
        18432,
        1024,
        2 * 12288 * 18432 * 1024 / 1769.0e12,
    ),  # B300 SXM 1769.0: 262.2 us
    ("mi300x-8", 10240, 15360, 8192, 2 * 10240 * 15360 * 8192 / 668.4e12),  # MI300X 668.4: 3855 us
    ("mi355x-8", 12288, 8192, 8192, 2 * 12288 * 8192 * 8192 / 1565.0e12),  # MI355X 1565.0: 1054 us
    # RTX 4090 bf16 173.31 TFLOPS at 8192^3 (torch-performance-test-data): 6.344 ms, above the rated peak
    ("rtx-4090-8", 8192, 8192, 8192, 2 * 8192**3 / 173.31e12),
    # RTX 3090 bf16 76.34 TFLOPS at 8192^3 (torch-performance-test-data): 14.40 ms, above the rated 71 TFLOPS
    ("rtx-3090-4", 8192, 8192, 8192, 2 * 8192**3 / 76.34e12),
    # L4 bf16 70.89 TFLOPS at 8192^3 (torch-performance-test-data): 15.51 ms, 0.586 of the 121 TFLOPS datasheet
    ("aws-g6.48xlarge", 8192, 8192, 8192, 2 * 8192**3 / 70.89e12),
    # V100-SXM2 fp16 97.36 TFLOPS at 8192^3 (torch-performance-test-data): 11.29 ms; the fallback cap of the V100
    # systems, which price GEMMs from the DeepBench kernel table (removed here: the benchmark's kernel alone)
    *((s, 8192, 8192, 8192, 2 * 8192**3 / 97.36e12) for s in V100_SXM2),
]
DTYPE: dict[str, str] = {s: "fp16" for s in V100_SXM2}  # Volta has no bf16: its benchmark ran fp16


def _kernel_accelerator(acc: AcceleratorSpec) -> AcceleratorSpec:
    """The catalog accelerator with its cap divided by the in-step share and no ramp (the benchmark's kernel)."""
    eff = acc.efficiency.model_copy(
        update={"gemm": acc.efficiency.gemm / SHARE, "gemm_ramp_s": 0.0}
    )
    return acc.model_copy(update={"efficiency": eff, "kernel_tables": None})


def test_every_benchmarked_system_is_listed():
    assert {s for s, *_ in BENCHMARK_TIMES} == set(GEMM_BENCHMARK_BF16)
    assert set(GEMM_BENCHMARK_BF16) <= set(SHARE_CONSTANT.systems)
    assert 0.6 < SHARE < 1.0  # a share of the isolated kernel's rate, not a free cap


@pytest.mark.parametrize(("system", "m", "n", "k", "expected_s"), BENCHMARK_TIMES)
def test_catalog_cap_reproduces_the_mamf_benchmark(system, m, n, k, expected_s):
    acc = _kernel_accelerator(load_system(system).accelerator)
    # caps are written to 3 decimals: 0.1 % on a cap of 0.45 (MI300X) is the largest rounding
    dtype = DTYPE.get(system, "bf16")
    assert gemm_time_s(2.0 * m * n * k, (1, m, n, k), acc, dtype) == pytest.approx(
        expected_s, rel=2e-3
    )


def test_caps_share_one_in_step_share():
    for system in SHARE_CONSTANT.systems:
        # H100 PCIe / NVL, GH200: the H100 SXM kernel cap; dgx-2h (V100 SXM3): the V100 SXM2's
        carried = "dgx-1-v100" if system == "dgx-2h" else "dgx-h100-80gb"
        ref = system if system in GEMM_BENCHMARK_BF16 else carried
        assert load_system(system).accelerator.efficiency.gemm / kernel_cap(ref) == pytest.approx(
            SHARE, rel=2e-3
        )


def test_benchmark_cap_by_hand_a100():
    # A100 SXM MAMF 271.2 TFLOPS at 1024x10240x5120: F = 2·1024·10240·5120 = 107,374,182,400
    # wave: 128x256 tiles -> 8·40 = 320 tiles in 3 waves of 108 SMs -> 320/324; depth 5120/(5120+32)
    # cap = F / (312e12 · 320/324 · 5120/5152 · (F/271.2e12 - 4e-6)) = 0.8946
    acc = load_system("dgx-a100-80gb").accelerator
    f = 2 * 1024 * 10240 * 5120
    expected = f / (312e12 * (320 / 324) * (5120 / 5152) * (f / 271.2e12 - 4e-6))
    assert gemm_benchmark_cap(271.2, (1024, 10240, 5120), acc, "bf16") == pytest.approx(
        expected, rel=1e-12
    )
    assert expected == pytest.approx(0.8946, abs=1e-4)


def test_benchmark_cap_by_hand_v100():
    # V100-SXM2 fp16 97.36 TFLOPS at 8192^3: 64x32 = 2048 tiles of 128x256 on 80 SMs -> 26 waves (2080 slots);
    # depth 8192/(8192+32); cap = F / (125e12 · 2048/2080 · 8192/8224 · (F/97.36e12 - 6e-6)) = 0.7946
    acc = load_system("dgx-1-v100").accelerator
    f = 2 * 8192**3
    expected = f / (125e12 * (2048 / 2080) * (8192 / 8224) * (f / 97.36e12 - 6e-6))
    assert gemm_benchmark_cap(97.36, (8192, 8192, 8192), acc, "fp16") == pytest.approx(
        expected, rel=1e-12
    )
    assert expected == pytest.approx(0.7946, abs=1e-4)


def test_comparison_rows_are_not_model_inputs():
    # the RTX 5090 row's kernel cap (1.22: 8192^3 is 12.05 waves of 170 SMs in the tile model) x the in-step
    # share exceeds 1, so it stays a comparison row
    assert "rtx-5090-8" not in GEMM_BENCHMARK_BF16
    acc = load_system("rtx-5090-8").accelerator
    assert gemm_benchmark_cap(236.03, (8192, 8192, 8192), acc, "bf16") * SHARE > 1.0


def test_rtx_4090_cap_above_its_rated_peak():
    # GeForce boards boost above the rated 2.52 GHz behind the 165.2 TFLOPS peak: the kernel cap exceeds 1,
    # the catalog cap (kernel cap x in-step share) does not
    acc = load_system("rtx-4090-8").accelerator
    cap = gemm_benchmark_cap(173.31, (8192, 8192, 8192), acc, "bf16")
    assert cap == pytest.approx(1.0539, abs=1e-4)
    assert acc.efficiency.gemm == pytest.approx(cap * SHARE, rel=2e-3) and acc.efficiency.gemm < 1.0


def test_every_row_says_how_it_was_timed():
    # MAMF rows take the file's source; the wall-clock loop rows (torch-performance-test-data) cite their own
    rows = {**GEMM_BENCHMARK_BF16, **GEMM_BENCHMARK_FP8}
    assert {row.method for row in rows.values()} <= {"mamf", "wall_clock_loop"}
    for system, row in rows.items():
        assert (row.method == "wall_clock_loop") == bool(row.source), system
    # the V100 systems price GEMMs from the DeepBench kernel table (its share: cost.compute.table_in_step_share);
    # their fallback cap is, as every cap from a best-shape benchmark, the fp16 wall-clock row's kernel cap
    # (test_benchmark_cap_by_hand_v100) x the in-step share: 0.7946 x 0.870 = 0.691
    for system in (*V100_SXM2, "dgx-2h"):
        acc = load_system(system).accelerator
        assert system in SHARE_CONSTANT.systems and (system in GEMM_BENCHMARK_BF16) == (
            system != "dgx-2h"
        )
        assert acc.kernel_tables == "v100-sxm2-deepbench"
        assert acc.efficiency.gemm == pytest.approx(0.7946 * SHARE, abs=6e-4)
    assert GEMM_BENCHMARK_BF16["dgx-h100-80gb"].method == "mamf"
    assert "Maximum Achievable Matmul FLOPS" in GEMM_BENCHMARK_SOURCE


def test_power_capped_l4_cap_by_hand():
    # L4 (72 W): bf16 70.89 TFLOPS at 8192^3 against the 121 TFLOPS datasheet peak. F = 2 * 8192^3 =
    # 1.0995e12 FLOP; F / R = 15.510 ms; minus the 4 us kernel overhead = 15.506 ms; the tile model's wave and
    # depth factors at 8192^3 on 58 SMs are read from the model, the cap is about 0.600, well under the H100
    # SXM cap (0.855) that the catalog copied before
    acc = load_system("aws-g6.48xlarge").accelerator
    cap = gemm_benchmark_cap(70.89, (8192, 8192, 8192), acc, "bf16")
    assert cap == pytest.approx(0.5998, abs=1e-3)
    assert acc.efficiency.gemm == pytest.approx(cap * SHARE, rel=2e-3)
    # without the wave/depth factors the raw ratio of the measured rate to the datasheet peak is 0.586
    assert 70.89 / 121.0 == pytest.approx(0.586, abs=1e-3)


def test_rtx_3090_cap_above_its_rated_peak():
    # GA102 GeForce: 71 TFLOPS bf16 with FP32 accumulate (half the FP16-accumulate 142) at the rated 1.695 GHz;
    # the board boosts higher, the kernel cap exceeds 1 and the catalog cap stays below 1
    acc = load_system("rtx-3090-4").accelerator
    assert acc.peak_matrix_flops("bf16") == pytest.approx(71e12)
    cap = gemm_benchmark_cap(76.34, (8192, 8192, 8192), acc, "bf16")
    assert cap == pytest.approx(1.0808, abs=1e-3)
    assert acc.efficiency.gemm == pytest.approx(cap * SHARE, rel=2e-3) and acc.efficiency.gemm < 1.0


def test_fp4_rows_by_hand_and_the_share_they_show():
    """The NVFP4 comparison rows (pytorch/ao #2427, B200): each with the bf16 row the same script timed at the same
    square shape. TFLOPS = 2n^3 / time_sec as printed: 6144^3 = 4.638e11 FLOP, NVFP4 84.4 us -> 5495.9, bf16
    319 us -> 1454.1. Against its peak (9 and 2.25 PFLOPS dense) the NVFP4 kernel keeps 0.945 of the bf16 share
    at 6144^3 and 8192^3 (0.79 at 4096^3); as kernel caps (gemm_benchmark_cap: the tile/wave and depth factors and
    the 4 us kernel overhead) 0.98 and 0.96, where the fp8 MAMF row keeps 0.975 of the bf16 one: the data do not
    put FP4 GEMMs below the fp8 cap's share of peak at these sizes, the rule FP4 GEMMs are priced by."""
    from paraplan.catalog.gemm_benchmarks import GEMM_BENCHMARK_FP4
    from paraplan.specs.system import gemm_cap_key

    pairs = GEMM_BENCHMARK_FP4["dgx-b200"]
    times = {4096: (3.08e-5, 9.74e-5), 6144: (8.44e-5, 3.19e-4), 8192: (2.05e-4, 7.74e-4)}
    acc = load_system("dgx-b200").accelerator
    raw, caps = {}, {}
    for fp4, bf16 in pairs:
        n = fp4.shape[0]
        assert fp4.shape == bf16.shape == (n, n, n) and (fp4.dtype, bf16.dtype) == ("nvfp4", "bf16")
        assert {fp4.method, bf16.method} == {"torchao_bench_matmul"} and "#2427" in fp4.source
        t4, tb = times[n]
        assert fp4.tflops == pytest.approx(2 * n**3 / t4 / 1e12, abs=0.06)
        assert bf16.tflops == pytest.approx(2 * n**3 / tb / 1e12, abs=0.06)
        raw[n] = (fp4.tflops / 9000.0) / (bf16.tflops / 2250.0)
        caps[n] = gemm_benchmark_cap(fp4.tflops, fp4.shape, acc, "nvfp4") / gemm_benchmark_cap(
            bf16.tflops, bf16.shape, acc, "bf16"
        )
    assert raw == pytest.approx({4096: 0.7906, 6144: 0.9449, 8192: 0.9439}, abs=1e-3)
    assert caps == pytest.approx({4096: 0.8713, 6144: 0.9795, 8192: 0.9577}, abs=1e-3)
    fp8_share = kernel_cap("dgx-b200", "fp8") / kernel_cap("dgx-b200")
    assert fp8_share == pytest.approx(0.975, abs=1e-3)
    assert all(abs(caps[n] - fp8_share) < 0.02 for n in (6144, 8192))
    assert gemm_cap_key("nvfp4") == gemm_cap_key("fp8") == "gemm_fp8"
