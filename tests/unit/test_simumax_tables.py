"""The GEMM tables transcribed from SimuMax's B200 and A100 PCIe system files (issue 32, 'Tables to ship')."""

from __future__ import annotations

import math

import pytest

from paraplan.catalog import load_system
from paraplan.cost import kernel_tables as kt
from paraplan.cost.compute import gemm_kernel_time_s, table_clock_ratio
from paraplan.specs.fields import with_fields

B200 = "b200-simumax"
A100 = "a100-pcie-simumax"
PEAK = 2250e12  # accelerator.op.matmul.tflops of the B200 source file
A100_PEAK = 312e12  # ... of the A100 PCIe one

# entries copied by hand from github.com/MooreThreads/SimuMax @ 4dcaae5,
# configs/system/b200_bf16_ceperm.json, accelerator.op.matmul.accurate_efficient_factor:
# (m, k, n, layout, efficiency)
SOURCE_ROWS = [
    (4096, 8192, 10240, "TN", 0.6451614102335537),
    (4096, 10240, 8192, "NN", 0.49804462256915516),
    (10240, 4096, 8192, "NT", 0.5979461534906494),
    (4096, 5120, 160, "TN", 0.18415111332067777),
    (4096, 2560, 8192, "NN", 0.6550630815895123),
]


# the same from configs/system/a100_pcie.json @ 4dcaae5
A100_ROWS = [
    (4096, 5120, 1536, "TN", 0.7876672065615554),
    (576, 4096, 7168, "NT", 0.4499211824600599),
    (33024, 2048, 7168, "TN", 0.7316869458369244),
]


def _row(m, k, n, layout, table=B200):
    for r in kt.load_table(table).rows["gemm"]:
        if (int(r["m"]), int(r["k"]), int(r["n"]), r["layout"]) == (m, k, n, layout):
            return r
    raise AssertionError(f"no row {m}x{k}x{n} {layout}")


@pytest.mark.parametrize("row", SOURCE_ROWS)
def test_the_table_reproduces_its_source_rows(row):
    m, k, n, layout, eff = row
    got = _row(m, k, n, layout)
    assert float(got["simumax_efficiency"]) == pytest.approx(eff, rel=1e-9)
    # time = 2·m·n·k / (efficiency · 2250 TFLOPS), written to 6 significant digits
    assert float(got["time_us"]) == pytest.approx(2 * m * n * k / (eff * PEAK) * 1e6, rel=1e-5)
    assert got["simumax_key"].startswith(f"b=1, m={m}, k={k}, n={n}, layout={layout}")


@pytest.mark.parametrize("row", A100_ROWS)
def test_the_a100_table_reproduces_its_source_rows(row):
    m, k, n, layout, eff = row
    got = _row(m, k, n, layout, A100)
    assert float(got["simumax_efficiency"]) == pytest.approx(eff, rel=1e-9)
    assert float(got["time_us"]) == pytest.approx(2 * m * n * k / (eff * A100_PEAK) * 1e6, rel=1e-5)


def test_the_a100_pcie_table_is_on_no_catalog_part():
    # measured on an A100 PCIe (300 W), which the catalog lacks: opt-in by name only
    table = kt.load_table(A100)
    assert len(table.rows["gemm"]) == 183 and "acdbb66" in table.provenance["source"]
    assert table.provenance["accelerators"] == []
    assert A100 not in kt.tables_measured_on("A100-SXM4-80GB")
    # 4096 x 1536 x 5120 at 0.78767 of 312 TFLOPS: 2·4096·1536·5120 / 245.75e12 s = 262.15 us
    assert float(_row(4096, 5120, 1536, "TN", A100)["time_us"]) == pytest.approx(262.15, abs=0.01)


def test_a_hand_computed_time():
    # 4096 x 10240 x 8192 TN at 0.64516: 2·4096·10240·8192 / (0.64516 · 2.25e15) s = 473.40 us
    assert float(_row(4096, 8192, 10240, "TN")["time_us"]) == pytest.approx(473.40, abs=0.01)


def test_provenance_and_listing():
    table = kt.load_table(B200)
    assert len(table.rows["gemm"]) == 514 and all(r["simumax_key"] for r in table.rows["gemm"])
    assert "4dcaae5" in table.provenance["source"]
    assert kt.tables_measured_on("B200-SXM-180GB") == [B200]
    # shipped opt-in: the catalog B200 systems price GEMMs analytically unless a system names it
    assert load_system("dgx-b200").accelerator.kernel_tables is None


def test_no_row_beats_the_mamf_ceiling():
    # MAMF's best B200 bf16 torch.mm, 1745 TFLOPS (catalog/benchmarks/gemm.yaml): a maximum
    rates = [
        2 * int(r["m"]) * int(r["n"]) * int(r["k"]) / (float(r["time_us"]) * 1e-6)
        for r in kt.load_table(B200).rows["gemm"]
    ]
    assert max(rates) < 1745e12


def _acc():
    """dgx-b200's accelerator with the table attached (opt-in), kernels as the benchmark ran them."""
    acc = load_system("dgx-b200").accelerator
    return with_fields(acc, {"kernel_tables": B200, "efficiency.aligned_gemms_only": True})


def test_the_cost_functions_read_the_table():
    acc = _acc()
    # a measured shape measured under one layout only returns its own time
    m, n, k = 4096, 10240, 8192
    t = gemm_kernel_time_s(2 * m * n * k, (1, m, n, k), acc, "bf16")
    assert t == pytest.approx(473.401e-6, rel=1e-5)
    # inside the box: between the slowest and fastest of the four nearest measured rates
    m, n, k = 4096, 12000, 8192
    rate = 2 * m * n * k / gemm_kernel_time_s(2 * m * n * k, (1, m, n, k), acc, "bf16")
    assert 0.40 * PEAK < rate < 0.66 * PEAK
    # outside the box (m twice the largest measured): the edge rate kept, time scales with the work
    big, edge = (1, 2 * 129280, 8192, 4096), (1, 129280, 8192, 4096)
    t_big = gemm_kernel_time_s(2 * math.prod(big), big, acc, "bf16")
    t_edge = gemm_kernel_time_s(2 * math.prod(edge), edge, acc, "bf16")
    assert t_big == pytest.approx(2 * t_edge, rel=1e-9)


def test_the_gb200_reads_it_at_the_peak_ratio():
    # table.yaml peak_matrix_flops bf16 2.25 PFLOPS against the GB200's 2.5: the clock ratio 0.9
    acc = with_fields(load_system("gb200-nvl72").accelerator, {"kernel_tables": B200})
    assert table_clock_ratio(acc, "bf16") == pytest.approx(0.9)


def test_fp8_has_no_rows_and_falls_back():
    acc = _acc()
    assert kt.gemm_time_s(B200, acc.l2_cache, 1, 4096, 8192, 8192, "fp8") is None


# group_matmul entries copied by hand (same files, same commit): (table, ng, M, N, K, stage, efficiency, peak)
GROUPED_SOURCE = [
    (B200, 256, 128, 4096, 7168, "fwd", 0.20810562331591476, PEAK),
    (B200, 20, 1232, 3072, 5120, "bwd_grad_w", 0.32760011542122736, PEAK),
    (A100, 40, 616, 3072, 5120, "fwd", 0.6313438865579614, A100_PEAK),
]


@pytest.mark.parametrize("row", GROUPED_SOURCE)
def test_the_grouped_rows_reproduce_their_source(row):
    table, ng, big_m, big_n, big_k, stage, eff, peak = row
    # each stage as the GEMM it runs per expert: fwd m=M k=K n=N; bwd_grad_w m=N k=M n=K
    m, k, n = (big_m, big_k, big_n) if stage == "fwd" else (big_n, big_m, big_k)
    got = [
        r
        for r in kt.load_table(table).rows["grouped_gemm"]
        if (int(r["experts"]), int(r["tokens_per_expert"]), int(r["k"]), int(r["n"]), r["stage"])
        == (ng, m, k, n, stage)
        and "main_grad_dtype=fp32" in r["simumax_key"]
    ]
    assert len(got) == 1 and float(got[0]["simumax_efficiency"]) == pytest.approx(eff, rel=1e-9)
    want_us = 2 * ng * big_m * big_n * big_k / (eff * peak) * 1e6
    assert float(got[0]["loop_time_us"]) == pytest.approx(want_us, rel=1e-5)


def test_the_grouped_cost_function_reads_the_table():
    # 20 experts x 1232 x 5120 x 3072 fwd: measured twice (main_grad fp32 / bf16 runs, efficiencies
    # 0.51344 and 0.45022 of 2250 TFLOPS): one point at the geometric mean rate, + ⌈20/4⌉ ramps
    from paraplan.cost.compute import GROUPED_GEMM_STREAMS, grouped_gemm_time_s

    acc = _acc()
    e, m, n, k = 20, 1232, 3072, 5120
    effs = [
        float(r["simumax_efficiency"])
        for r in kt.load_table(B200).rows["grouped_gemm"]
        if (int(r["experts"]), int(r["tokens_per_expert"]), int(r["k"]), int(r["n"]), r["stage"])
        == (e, m, k, n, "fwd")
    ]
    assert len(effs) == 2
    rate = math.sqrt(effs[0] * effs[1]) * PEAK
    flops = 2 * e * m * n * k
    ramps = math.ceil(e / GROUPED_GEMM_STREAMS) * acc.efficiency.gemm_ramp_s
    assert grouped_gemm_time_s(flops, (e, m, n, k), acc, "bf16") == pytest.approx(
        flops / rate + ramps, rel=1e-5
    )
    # fp8 grouped GEMMs are not in the table: the analytical form with the fitted grouped share
    assert kt.grouped_gemm_time_s(B200, acc.l2_cache, e, m, n, k, "fp8") is None
