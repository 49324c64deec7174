"""The in-step share of an attached GEMM table is its ratio to the base system over the GEMMs of the steps the
base's cap was fitted on (calibrate.fit_gemms, docs/calibration.md "In-step rates")."""

from __future__ import annotations

from importlib import resources

import pytest

from paraplan.calibrate.compare import shipped_h100
from paraplan.calibrate.fit_gemms import _step_gemms, fit_set_ratio, fitted_on
from paraplan.calibrate.in_step import in_step_ratios
from paraplan.calibrate.readers import read_gemm_table
from paraplan.catalog import load_system
from paraplan.cost.compute import gemm_calls
from paraplan.specs.fields import with_fields

EFF = "accelerator.efficiency"


def test_a_weight_gemm_runs_its_forward_then_dgrad_and_wgrad():
    # Y[4,8] = X[4,16]·W[16,8]: dX = dY·Wᵀ is 4×16 deep 8, dW = Xᵀ·dY is 16×8 deep 4
    assert gemm_calls(1024.0, 2048.0, (1, 4, 8, 16), True) == [
        (1024.0, (1, 4, 8, 16)),
        (1024.0, (1, 4, 16, 8)),
        (1024.0, (1, 16, 8, 4)),
    ]
    assert gemm_calls(1024.0, 1024.0, (1, 4, 8, 16), False) == [
        (1024.0, (1, 4, 8, 16)),
        (1024.0, (1, 16, 8, 4)),
    ]


def test_the_fit_set_is_the_steps_the_cap_was_fitted_on():
    assert fitted_on("dgx-h100-80gb", "gemm_fp8") == ("nemo-llama31-h100",)
    assert fitted_on("dgx-h200", "gemm_fp8") == (
        "nemo-llama31-h100",
    )  # the same H100-silicon constant
    assert fitted_on("no-such-system", "gemm_fp8") == ()
    # the eleven fp8 DGX Cloud Llama 3.1 runs (8B on 8-128 GPUs, 70B on 64-2048), each with its GEMM calls
    steps = _step_gemms("dgx-h100-80gb", "gemm_fp8")
    assert len(steps) == 11
    assert all(calls and all(d == "fp8" for _, _, d, _ in calls) for calls in steps)


def test_a_table_slower_by_a_constant_factor_gives_that_factor():
    """Hand value: with no per-kernel overhead a GEMM's kernel time is its FLOPs over the capped rate, so a
    "table" system whose fp8 cap is 0.8 of the base's runs every fit-set GEMM 1 / 0.8 = 1.25 times as long."""
    base = with_fields(load_system("dgx-h100-80gb"), {f"{EFF}.kernel_overhead_s": 0.0})
    slower = with_fields(base, {f"{EFF}.gemm_fp8": base.accelerator.efficiency.gemm_fp8 * 0.8})
    assert fit_set_ratio(slower, base, "gemm_fp8") == pytest.approx(1.25, rel=1e-9)
    assert fit_set_ratio(base, base, "gemm_fp8") == pytest.approx(1.0, rel=1e-12)
    assert fit_set_ratio(slower, load_system("dgx-a100-80gb"), "gemm_fp8") is None


def test_the_calibrated_h100_share_is_the_fit_set_ratio_not_the_table_rows():
    """The shared H100 table's fp8 rows run at 0.828 of the base's in-step time over the table's own shapes, but
    0.843 over the fit set's GEMMs (its deep-k rows run faster against the analytical form than the
    fit steps' GEMMs): the share is the latter."""
    cal = shipped_h100()
    base = load_system("dgx-h100-80gb")
    share = cal.accelerator.efficiency.table_in_step_share["gemm_fp8"]
    assert share == pytest.approx(fit_set_ratio(cal, base, "gemm_fp8"), rel=1e-12)
    assert share == pytest.approx(0.843, abs=0.001)
    gemm = resources.files("paraplan.catalog") / "kernels" / "h100-sxm5-80gb" / "gemm.csv"
    rows = in_step_ratios(read_gemm_table(gemm), base)["gemm_fp8"]
    assert rows == pytest.approx(0.828, abs=0.001)
    # bf16: over the fit set (korthikanti2022, nemo-llama31-h100) the table is slower than the base: share 1
    assert fit_set_ratio(cal, base, "gemm") > 1.0
    assert cal.accelerator.efficiency.table_in_step_share["gemm"] == 1.0
