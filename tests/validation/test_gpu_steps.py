"""The project's own single-GPU training steps (benchmarks/gpu/measured/*/steps) as held-out cases."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from paraplan.validate.case_files import load_cases
from paraplan.validate.fitted import FITTED_CONSTANTS
from paraplan.validate.run import run_cases

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


MEASURED_B = ROOT / "benchmarks/gpu/measured/h100-2026-11-27b"
NEW_SETS = {
    # case file -> (group, measured files, cases)
    "hf-steps-2026-11.json": (
        "hf-steps-2026-11",
        [
            MEASURED_B / "hf/train_steps.json",
            MEASURED_B / "extra/hf/train_steps.json",
            MEASURED_B / "ablation/train_steps.json",
        ],
        15,
    ),
    "tiny-steps-2026-11.json": (
        "tiny-steps-2026-11",
        [MEASURED_B / "host/tiny_steps.json", MEASURED_B / "extra/host/tiny_steps_extra.json"],
        8,
    ),
}


@pytest.mark.parametrize("name", sorted(NEW_SETS))
def test_the_new_case_files_are_the_converters_output(name, tmp_path):
    group, inputs, count = NEW_SETS[name]
    out = tmp_path / name
    _converter().main(str(out), *map(str, inputs), group=group)
    cases = json.loads(out.read_text())
    assert cases == json.loads((CASES.parent / name).read_text())
    assert len(cases["cases"]) == count and {c["group"] for c in cases["cases"]} == {group}


HF_RECORDS = {
    r["name"]: r
    for p in NEW_SETS["hf-steps-2026-11.json"][1]
    for r in json.loads(p.read_text())["records"]
    if not r["name"].endswith(("-repeat", "-ablation-base"))
}


@pytest.mark.parametrize("name", sorted(HF_RECORDS))
def test_hf_steps_read_the_config_that_ran(name):
    """Each Hugging Face case's model is paraplan's reading of the config that ran: its parameter
    count is the one the step printed, the stack hf-transformers, the plan the Trainer's."""
    rec = HF_RECORDS[name]
    case = {c.name: c for c in load_cases([CASES.parent / "hf-steps-2026-11.json"])}[name]
    assert case.framework == "hf-transformers"
    assert case.plan.dtype == ("bf16" if rec["stack"]["autocast"] else "fp32")
    assert case.plan.global_batch == case.plan.micro_batch * rec["stack"]["grad_accum"]
    assert case.model.total_params == rec["params"]


@pytest.mark.parametrize("name", sorted(NEW_SETS))
def test_the_new_steps_are_held_out(name):
    group, _, count = NEW_SETS[name]
    fitted_on = {s for c in FITTED_CONSTANTS for s in c.fitted_on}
    assert group not in fitted_on
    report = run_cases(load_cases([CASES.parent / name]))
    assert report["summary"]["calibration"]["step_time_cases"] == 0
    assert report["summary"]["held_out"]["step_time_cases"] == count


ALL_SETS = {"gpu-steps-2026-11.json": ("gpu-steps-2026-11", STEPS, 25), **NEW_SETS}
# host_fp8.py's tiny steps ran with the previous variant's model alive (steps_to_cases.py): no allocator peak
OWN_PEAKS = ("gpu-steps-2026-11.json", "hf-steps-2026-11.json")


def test_the_tiny_steps_compare_no_allocator_peak():
    report = run_cases(load_cases([CASES.parent / "tiny-steps-2026-11.json"]))
    assert all("peak_allocated_gib" not in e["measured"] for e in report["cases"])


@pytest.mark.parametrize("name", OWN_PEAKS)
def test_every_case_compares_the_allocator_peak_it_measured(name):
    """The measured allocator peak (torch.cuda.max_memory_allocated) is a compared figure of each case, and
    the predicted one is the peak less the non-allocator reserves (validate.run.predicted_metrics)."""
    group, inputs, count = ALL_SETS[name]
    records = {r["name"]: r for p in inputs for r in json.loads(p.read_text())["records"]}
    report = run_cases(load_cases([CASES.parent / name]))
    entries = [e for e in report["cases"] if e["status"] == "ok"]
    assert len(entries) == count
    for e in entries:
        measured = records[e["name"]]["measured"]["peak_allocated_gib"]
        assert e["measured"]["peak_allocated_gib"] == pytest.approx(measured, abs=1e-4)
        predicted = e["predicted"]
        assert 0 < predicted["peak_allocated_gib"] < predicted["peak_memory_gib"]
        assert e["error_pct"]["peak_allocated_gib"] == pytest.approx(
            100 * (predicted["peak_allocated_gib"] / e["measured"]["peak_allocated_gib"] - 1)
        )
    by_source = report["summary"]["by_source"][name.removesuffix(".json")]
    assert by_source["peak_allocated_gib_cases"] == count
    assert by_source["peak_allocated_gib_mape_pct"] > 0


def test_the_allocator_peak_leaves_out_the_reserves():
    from types import SimpleNamespace

    from paraplan.step.result import StageMemory
    from paraplan.units import GiB
    from paraplan.validate.case_files import SCOPE_STAGE
    from paraplan.validate.run import predicted_metrics

    stage = StageMemory(0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0)
    est = SimpleNamespace(first_stage=stage, step_time_s=1.0, fits=True, fit="fits", mfu=0.5)
    predicted = predicted_metrics(est, SCOPE_STAGE)
    assert stage.peak_bytes == 21.0 and predicted["peak_allocated_gib"] * GiB == pytest.approx(15.0)


TINY_SESSIONS = {  # host_fp8.py of 2026-11-27: each configuration profiled right after its timing
    "h100-tiny-gpt-2l-eager-amp-s256-mb4": 0,
    "h100-tiny-gpt-4l-eager-amp-s256-mb4": 1,
    "h100-tiny-gpt-8l-eager-amp-s256-mb4": 2,
    "h100-tiny-gpt-16l-eager-amp-s256-mb4": 3,
    "h100-tiny-gpt-8l-h512-eager-amp-s256-mb4": 0,
    "h100-tiny-gpt-8l-h1024-eager-amp-s256-mb4": 1,
    "h100-tiny-gpt-8l-h2048-eager-amp-s256-mb4": 2,
    "h100-tiny-gpt-8l-h256-eager-amp-s256-mb4-compile-default": 3,
    "h100-tiny-gpt-2l-eager-amp-s256-mb4-host2": 0,
    "h100-tiny-gpt-4l-eager-amp-s256-mb4-host2": 1,
    "h100-tiny-gpt-8l-eager-amp-s256-mb4-host2": 2,
    "h100-tiny-gpt-16l-eager-amp-s256-mb4-host2": 3,
}


def test_the_tiny_steps_state_the_profiler_sessions_before_their_timing():
    """Each tiny step's notes say how many torch.profiler sessions its process ran before timing it, with
    TEARDOWN_CUPTI unset (CUPTI left attached: docs/model.md §11): the i-th record of a run, i sessions."""
    files = ("tiny-steps-2026-11.json", "tiny-steps-2026-11-host2.json")
    cases = {c.name: c for c in load_cases([CASES.parent / f for f in files])}
    assert set(cases) == set(TINY_SESSIONS)
    raw = {
        c["name"]: c["notes"]
        for f in files
        for c in json.loads((CASES.parent / f).read_text())["cases"]
    }
    for name, sessions in TINY_SESSIONS.items():
        assert raw[name].endswith(
            f"timed after {sessions} torch.profiler session(s) in its process, TEARDOWN_CUPTI unset"
        )


def test_a_recorded_profiler_state_is_kept_and_other_scripts_have_none():
    convert = _converter()
    state = {"profiler_sessions_before": 0, "teardown_cupti": "1"}
    rec = {"name": "x", "profiler_state": state}
    assert convert.profiler_state_of(rec, 5, "host_fp8.py")["profiler_state"] == state
    assert "profiler_state" not in convert.profiler_state_of({"name": "x"}, 5, "train_steps.py")
    inferred = convert.profiler_state_of({"name": "x"}, 2, "host_fp8.py")["profiler_state"]
    assert inferred == {"profiler_sessions_before": 2, "teardown_cupti": None}
