"""validate.joint_refit: the constants it refits and the sets it fits them on."""

from __future__ import annotations

import math

from paraplan.validate.fitted import EngineConstant
from paraplan.validate.joint_refit import (
    calibration_cases,
    held_out_cases,
    joint_refit,
    uniform_constants,
)
from paraplan.validate.run import run_cases


def test_it_refits_the_uniform_constants_on_calibration_sets_only():
    names = {k.name for k in uniform_constants()}
    assert "h100.gemm_fp8" in names and "t4.gemm" not in names
    assert not any(isinstance(k, EngineConstant) for k in uniform_constants())
    sets = calibration_cases()
    assert set(sets) == {"korthikanti2022", "mbridge-dense", "moe-visible", "nemo-llama31-h100"}
    assert all(
        c.group not in ("gpu-steps-2026-11", "hf-steps-2026-11") for s in sets.values() for c in s
    )


def test_no_sweep_keeps_the_catalog_values():
    result = joint_refit(sweeps=0)
    assert all(was == now for was, now in result["constants"].values())
    assert result["before"] == result["after"]


def test_held_out_sets_are_reported_and_never_fitted_on():
    held_out = held_out_cases()
    assert {"gpu-steps-2026-11", "hf-steps-2026-11", "llmfoundry-mpt"} <= set(held_out)
    calibration = {c.name for cases in calibration_cases().values() for c in cases}
    assert not calibration & {c.name for cases in held_out.values() for c in cases}


def test_held_out_mapes_are_the_validate_report_s():
    """joint_refit's held-out MAPE of a set at the catalog values is `paraplan validate`'s for that source."""
    result = joint_refit(sweeps=0)
    assert result["held_out_before"] == result["held_out_after"]
    cases = held_out_cases()["hf-steps-2026-11"]
    by_source = run_cases(list(cases))["summary"]["by_source"]["hf-steps-2026-11"]
    assert math.isclose(
        result["held_out_before"]["hf-steps-2026-11"], by_source["step_time_s_mape_pct"]
    )
