"""validate.joint_refit: the constants it refits and the sets it fits them on."""

from __future__ import annotations

import math

import pytest

import paraplan.validate.joint_refit as joint_refit_module
from paraplan.validate.case_files import load_cases
from paraplan.validate.cv import step_error
from paraplan.validate.fitted import EngineConstant
from paraplan.validate.joint_refit import (
    calibration_cases,
    held_out_cases,
    joint_refit,
    main,
    set_elasticities,
    timed_cases,
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


def test_held_out_mapes_are_the_validate_report_s(monkeypatch):
    """joint_refit's held-out MAPE of a set at the catalog values is `paraplan validate`'s for that
    source; the case files are read once for the calibration and the held-out sets."""
    reads = []

    def counted_load_cases(*args):
        reads.append(args)
        return load_cases(*args)

    monkeypatch.setattr(joint_refit_module, "load_cases", counted_load_cases)
    result = joint_refit(sweeps=0)
    assert len(reads) == 1
    assert result["held_out_before"] == result["held_out_after"]
    cases = held_out_cases()["hf-steps-2026-11"]
    by_source = run_cases(list(cases))["summary"]["by_source"]["hf-steps-2026-11"]
    assert math.isclose(
        result["held_out_before"]["hf-steps-2026-11"], by_source["step_time_s_mape_pct"]
    )


def test_a_gemm_cap_s_elasticity_is_minus_its_gemm_share(monkeypatch):
    """Time ∝ 1/cap for the GEMMs a cap prices: d ln T / d ln cap lies in [-1, 0]; 0 where no GEMM of
    that dtype runs (mbridge-dense is all fp8), strictly negative on the bf16 sets it was fitted on.
    Only the cases whose system carries the cap are estimated, each twice (at c and c·1.01)."""
    estimated = []

    def counted_step_error(case, values):
        estimated.append(case)
        return step_error(case, values)

    monkeypatch.setattr(joint_refit_module, "step_error", counted_step_error)
    values = set_elasticities("gemm.bf16")
    (cap,) = (k for k in uniform_constants() if k.name == "gemm.bf16")
    carrying = [c for c in timed_cases() if c.system.name in cap.systems]
    assert 0 < len(carrying) < len(timed_cases())
    assert len(estimated) == 2 * len(carrying)
    assert {c.system.name for c in estimated} <= set(cap.systems)
    assert all(-1.0 <= v <= 1e-9 for v in values.values())
    assert abs(values["mbridge-dense"]) < 1e-9
    assert values["korthikanti2022"] < -0.5 and values["nemo-llama31-h100"] < -0.1


def test_elasticity_of_an_unknown_constant_is_a_one_line_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--elasticity", "no.such"])
    assert exc.value.code == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and "no.such" in out.err


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--hold", "gemm.bf16", "--elasticity", "gemm.bf16"], "--hold"),
        (["--hold", "no.such"], "no.such"),
        (["--holdd", "gemm.bf16"], "--holdd"),
        (["--elasticity"], "--elasticity"),
    ],
)
def test_a_bad_argument_is_a_one_line_error(capsys, argv, named):
    """One parser: --hold is refused beside --elasticity (which refits nothing), an unknown constant
    or flag is named; each in one line, exit 2, nothing estimated."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and named in out.err


def test_every_hold_reaches_the_refit(monkeypatch):
    seen = []
    monkeypatch.setattr(joint_refit_module, "joint_refit", lambda **kw: seen.append(kw))
    monkeypatch.setattr(joint_refit_module, "_print_refit", lambda result: None)
    main(["--hold", "gemm.bf16", "--hold", "h100.gemm_fp8"])
    assert seen == [{"hold": ("gemm.bf16", "h100.gemm_fp8")}]
