"""validate.joint_refit: the constants it refits and the sets it fits them on."""

from __future__ import annotations

from paraplan.validate.fitted import EngineConstant
from paraplan.validate.joint_refit import calibration_cases, joint_refit, uniform_constants


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
