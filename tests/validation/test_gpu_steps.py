"""The project's own single-GPU training steps (benchmarks/gpu/measured/*/steps) as held-out cases."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from paraplan.validate.fitted import FITTED_CONSTANTS
from paraplan.validate.run import load_cases, run_cases

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "src/paraplan/validate/cases/gpu-steps-2026-11.json"
STEPS = [
    ROOT / "benchmarks/gpu/measured/h100-2026-11-27/steps/train_steps.json",
    ROOT / "benchmarks/gpu/measured/h200-2026-11-27/steps/train_steps.json",
]


def _converter():
    spec = importlib.util.spec_from_file_location(
        "steps_to_cases", ROOT / "benchmarks/gpu/steps_to_cases.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_case_file_is_the_converters_output(tmp_path):
    out = tmp_path / "cases.json"
    _converter().main(str(out), *map(str, STEPS))
    assert json.loads(out.read_text()) == json.loads(CASES.read_text())


def test_every_measured_step_is_a_case_encoded_as_it_ran():
    cases = {c.name: c for c in load_cases([CASES])}
    records = [r for p in STEPS for r in json.loads(p.read_text())["records"]]
    assert len(cases) == len(records) == 25
    for rec in records:
        case = cases[rec["name"]]
        assert case.measured["step_time_s"] == pytest.approx(rec["measured"]["step_time_s"], 1e-5)
        stack = rec["stack"]
        assert case.plan.dtype == ("tf32" if stack["tf32_matmul"] else "bf16")
        assert case.plan.recompute == ("full" if stack.get("recompute") else "none")
        assert case.plan.global_batch == case.plan.micro_batch * stack.get("grad_accum", 1)
        expected = (
            "pytorch-compile"
            if stack.get("compile")
            else "pytorch-eager-bf16"
            if stack["param_dtype"] == "bfloat16"
            else "pytorch-eager"
        )
        assert case.framework == expected


def test_the_gpu_steps_are_held_out():
    fitted_on = {s for c in FITTED_CONSTANTS for s in c.fitted_on}
    assert "gpu-steps-2026-11" not in fitted_on
    report = run_cases(load_cases([CASES]))
    assert report["summary"]["calibration"]["step_time_cases"] == 0
    assert report["summary"]["held_out"]["step_time_cases"] == 25
