"""Issue 32: a calibrated system keeps the catalog system's structure (only measured constants
replaced by fits of the same quantity) and never predicts the project's validation cases worse."""

from __future__ import annotations

import csv
import statistics
from importlib import resources
from pathlib import Path

import pytest

from paraplan.calibrate import calibrate
from paraplan.calibrate.compare import by_kind, compare, main, shipped_calibrated, shipped_h100
from paraplan.catalog import load_system
from paraplan.cost import kernel_tables as kt
from paraplan.cost.compute import gemm_time_s, grouped_gemm_time_s
from paraplan.specs.fields import with_fields
from paraplan.validate.case_files import bundled_case_files
from paraplan.validate.run import mape

H100 = "h100-sxm5-80gb"
ROOT = Path(__file__).resolve().parents[2]
EFF = "accelerator.efficiency"


def shipped(name: str) -> Path:
    return Path(str(resources.files("paraplan.catalog") / "kernels" / name))


@pytest.fixture(scope="module")
def calibrated():
    return shipped_h100()


# Case files the calibrated H100 still predicts worse than the catalog (issue 32, not met), asserted still
# worse so that the test fails once one is fixed and the entry must go. hf-steps (3.83 -> 4.01 %): the only
# calibrated price its cases use is the shared table's bf16 GEMMs, and that H100 is slower than the one that
# ran them: on the LM-head GEMMs the latter timed alone (benchmarks/gpu/measured/h100-2026-11-27b/host/
# gemm_alignment.csv: 706 / 814 / 800 TFLOP/s) the table gives 634 / 704 / 676 (docs/calibration.md:
# GPU-to-GPU spread; what closes it is a table from the GPU that ran the steps).
STILL_WORSE = {"hf-steps-2026-11"}


def test_the_calibrated_h100_never_predicts_the_cases_worse_than_the_catalog(calibrated):
    results = compare(calibrated)
    assert {"nemo-llama31-h100", "gpu-steps-2026-11", "moe-visible"} <= set(results)
    for stem, errors in results.items():
        catalog, cal = mape(errors.catalog), mape(errors.calibrated)
        if stem in STILL_WORSE:
            assert cal > catalog, (stem, "now no worse: drop it from STILL_WORSE")
            continue
        assert cal <= catalog, (stem, round(catalog, 2), round(cal, 2))


# As STILL_WORSE, for the calibrated H200. gcp-gpu-recipes (5.97 -> 9.96 %): its two held-out NeMo Llama 3.1 70B /
# 405B fp8 runs on 256 / 576 H200 are predicted too fast by the catalog (-9.4, -2.5 %) and more so calibrated
# (-14.2, -5.7 %): the GEMM table alone (7.86 %: its deep-k fp8 shapes run faster than its share, 0.851 over
# the fit set's GEMMs, calibrate.fit_gemms) and
# the cuDNN attention table alone (8.06 %) each price them faster; the candidate mechanisms checked and why none
# is shipped: docs/calibration.md "What keeps the two files listed".
STILL_WORSE_H200 = {"gcp-gpu-recipes"}


def test_the_calibrated_h200_never_predicts_the_cases_worse_than_the_catalog():
    folder = shipped("h200-sxm-141gb")
    files = {"gemm": "gemm.csv", "attention": "attention_cudnn.csv", "memory": "memory.csv"}
    cal = calibrate(load_system("dgx-h200"), **{k: folder / v for k, v in files.items()})
    results = compare(cal.system)
    assert "gpu-steps-2026-11" in results
    for stem, errors in results.items():
        if stem in STILL_WORSE_H200:
            assert mape(errors.calibrated) > mape(errors.catalog), (stem, "now no worse: drop it")
            continue
        assert mape(errors.calibrated) <= mape(errors.catalog), stem


def test_by_kind_attaches_one_kind_at_a_time_and_adds_up_to_nothing_on_the_catalog():
    cal = shipped_calibrated("dgx-h200", "h200-sxm-141gb")
    gcp = [p for p in bundled_case_files() if p.stem == "gcp-gpu-recipes"]
    kinds = by_kind(cal, gcp)
    assert set(kinds) == {"gemm", "attention_cudnn"}
    full = compare(cal, gcp)["gcp-gpu-recipes"]
    for kind, results in kinds.items():
        errors = results["gcp-gpu-recipes"]
        assert errors.catalog == full.catalog, kind
        # each table alone moves the two runs part of the way the calibrated system moves them
        for alone, both, catalog in zip(errors.calibrated, full.calibrated, errors.catalog):
            assert both < alone < catalog, kind
    assert by_kind(load_system("dgx-h200"), gcp) == {}


def test_compare_refuses_an_unknown_table_with_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--table", "no-such-table"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--table" in err and "no-such-table" in err


def test_the_comparison_is_neutral_for_the_catalog_accelerator():
    for stem, errors in compare(load_system("dgx-h100-80gb")).items():
        assert errors.calibrated == pytest.approx(errors.catalog, abs=1e-9), stem


def _paths(data, prefix=""):
    if isinstance(data, dict):
        out = {}
        for k, v in data.items():
            out |= _paths(v, f"{prefix}{k}.")
        return out
    return {prefix[:-1]: data}


def test_the_calibrated_system_carries_every_catalog_field(calibrated):
    base = _paths(load_system("dgx-h100-80gb").model_dump())
    cal = _paths(calibrated.model_dump())
    assert set(base) <= set(cal)  # nothing dropped (host fields, gemm_fp8, alignment, ...)
    changed = {p for p in base if base[p] != cal[p]} | (set(cal) - set(base))
    assert changed <= {
        "name",
        "accelerator.kernel_tables",
        f"{EFF}.table_in_step_share.gemm",
        f"{EFF}.table_in_step_share.gemm_fp8",
    }, changed
    # only the kinds calibrate was given are attached (not the shipped table's eager, grouped or fp8
    # quantisation kernels), and the copies, faster alone than the base's in-step rate, are not attached
    assert calibrated.accelerator.kernel_tables == f"{H100}[gemm,attention_cudnn]"
    eff = calibrated.accelerator.efficiency
    # this H100's bf16 kernels alone are slower than the catalog's in-step rate: share 1; its fp8 kernels
    # are faster: the table divided by the share. The caps stay the catalog's: with the table attached they
    # price only what it did not measure (fp32 / tf32 GEMMs, fp8 grouped GEMMs with the fitted grouped share)
    assert eff.table_in_step_share["gemm"] == 1.0
    assert 0.7 < eff.table_in_step_share["gemm_fp8"] < 0.9
    assert (eff.gemm, eff.gemm_fp8, eff.hbm, eff.kernel_overhead_s) == (0.743, 0.56, 0.85, 4e-6)
    assert eff.attention == 0.45 and eff.gemm_ramp_s == pytest.approx(40e-6)


def test_the_in_step_share_divides_a_table_gemm_by_dtype():
    system = with_fields(load_system("dgx-h100-80gb"), {"accelerator.kernel_tables": H100})
    shared = with_fields(system, {f"{EFF}.table_in_step_share": {"gemm_fp8": 0.8}})
    ramp = system.accelerator.efficiency.gemm_ramp_s
    shape, flops = (1, 4096, 4096, 4096), 2.0 * 4096**3
    for dtype, share in (("bf16", 1.0), ("fp8", 0.8)):
        plain = gemm_time_s(flops, shape, system.accelerator, dtype) - ramp
        slow = gemm_time_s(flops, shape, shared.accelerator, dtype) - ramp
        assert slow == pytest.approx(plain / share, rel=1e-12), dtype
    grouped = (8, 2048, 4096, 1024)
    plain = grouped_gemm_time_s(8 * 2.0 * 2048 * 4096 * 1024, grouped, system.accelerator, "bf16")
    shared = with_fields(system, {f"{EFF}.table_in_step_share": {"gemm": 0.5}})
    slow = grouped_gemm_time_s(8 * 2.0 * 2048 * 4096 * 1024, grouped, shared.accelerator, "bf16")
    ramps = 2 * ramp  # ceil(8 experts / 4 streams) ramps
    assert slow - ramps == pytest.approx((plain - ramps) / 0.5, rel=1e-12)


def test_the_h100_norm_rows_are_the_recheck_median():
    """The two layernorm_fwd_bwd rows the re-measurement replaced hold its median (table.yaml)."""
    recheck = ROOT / "benchmarks/gpu/measured/h100-2026-11-27c/modules/norm_recheck.csv"
    with recheck.open() as f:
        rows = [r for r in csv.DictReader(f) if r["op"] == "layernorm_fwd_bwd"]
    table = kt.load_table(H100)
    for shape in ("16384x2048", "16384x4096"):
        median = statistics.median(float(r["time_us"]) for r in rows if r["shape"] == shape)
        (row,) = [
            r
            for r in table.rows["kernels"]
            if r["op"] == "layernorm_fwd_bwd" and r["shape"] == shape
        ]
        assert float(row["time_us"]) == pytest.approx(median, abs=1e-3), shape
    assert "norm_recheck.csv" in kt.table_provenance(H100)["kernels_recheck_source"]
