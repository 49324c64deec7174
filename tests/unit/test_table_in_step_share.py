"""One in-step rule for a kernel table's GEMMs (cost.compute.table_in_step_share, docs/model.md §6).

A table GEMM costs its measured kernel time / s + the step's GEMM ramp, s the share calibrate set
(efficiency.table_in_step_share) or, where none was set, UNCALIBRATED_TABLE_SHARE (1) for every table alike. The
share 1 rests on the shipped half-precision tables: timed alone at their own shapes, their kernels are no faster
than the in-step rate the catalog's analytical cap (MAMF kernel cap x the fitted share 0.870) prices for the same
GEMMs, r >= 1 (calibrate.in_step.in_step_ratios); fp8 kernels alone are faster (r < 1), which is why fp8 tables
take calibrate's share.
"""

from __future__ import annotations

import math

import pytest

from paraplan.calibrate.in_step import in_step_ratios
from paraplan.calibrate.readers import GemmSample
from paraplan.catalog import load_system
from paraplan.cost import kernel_tables as kt
from paraplan.cost.compute import (
    UNCALIBRATED_TABLE_SHARE,
    gemm_time_s,
    table_in_step_share,
)
from paraplan.specs.fields import with_fields

# DeepBench V100 fp16 4096 x 7000 x 4096 (M, N, K): NN 2.092 ms, TN 2.147 ms (results/train/DeepBench_NV_V100.xlsx
# at 30c5115, rows 24 and 44), one point at the geometric-mean rate: sqrt(2.092 * 2.147) ms = 2.119322 ms
SHAPE = (1, 7000, 4096, 4096)
FLOPS = 2.0 * 7000 * 4096 * 4096
TABLE_S = math.sqrt(2.092e-3 * 2.147e-3)


def _kernel_s(system, **share) -> float:
    acc = load_system(system).accelerator
    if share:
        acc = with_fields(acc, {"efficiency.table_in_step_share": share})
    return gemm_time_s(FLOPS, SHAPE, acc, "fp16") - acc.efficiency.gemm_ramp_s


def test_every_uncalibrated_table_takes_the_same_share():
    assert UNCALIBRATED_TABLE_SHARE == 1.0
    for system, dtype in (("dgx-1-v100", "fp16"), ("dgx-2h", "fp32"), ("dgx-h800", "fp8")):
        acc = load_system(system).accelerator
        assert acc.kernel_tables and not acc.efficiency.table_in_step_share
        assert table_in_step_share(acc, dtype) == UNCALIBRATED_TABLE_SHARE


def test_a_table_gemm_by_hand():
    # share 1: the table's time, 2.119322 ms; the DGX-2H's SXM3 at 125/130 of it: 2.037810 ms
    assert TABLE_S == pytest.approx(2.119322e-3, rel=1e-6)
    assert _kernel_s("dgx-1-v100") == pytest.approx(2.119322e-3, rel=1e-6)
    assert _kernel_s("dgx-2h") == pytest.approx(2.037810e-3, rel=1e-6)
    # a calibrated share of the cap that prices fp16 (gemm) divides it: 2.119322 / 0.8 = 2.649152 ms;
    # the fp8 cap's share leaves an fp16 GEMM alone
    assert _kernel_s("dgx-1-v100", gemm=0.8) == pytest.approx(2.649152e-3, rel=1e-6)
    assert _kernel_s("dgx-1-v100", gemm_fp8=0.8) == pytest.approx(2.119322e-3, rel=1e-6)


def _ratios(table: str, system: str) -> dict[str, float]:
    rows = kt.load_table(table).rows["gemm"]
    samples = [GemmSample.from_row(row) for row in rows]
    return in_step_ratios(samples, load_system(system))


@pytest.mark.parametrize(
    ("table", "system", "bf16", "fp8"),
    [
        ("h100-sxm5-80gb", "dgx-h100-80gb", 1.052, 0.828),
        ("h200-sxm-141gb", "dgx-h200", 1.083, 0.855),
    ],
)
def test_half_precision_kernels_alone_are_no_faster_than_the_in_step_rate(table, system, bf16, fp8):
    # r = sum of the table's times / sum of the catalog's in-step kernel times of the same GEMMs (141 rows per
    # dtype): bf16 r >= 1, so a bf16 table needs no further share; fp8 r < 1 (Transformer Engine's fp8 steps
    # keep less than torch._scaled_mm alone: docs/model.md §6)
    r = _ratios(table, system)
    assert r["gemm"] == pytest.approx(bf16, abs=2e-3) and r["gemm"] >= 1.0
    assert r["gemm_fp8"] == pytest.approx(fp8, abs=2e-3) and r["gemm_fp8"] < 1.0
