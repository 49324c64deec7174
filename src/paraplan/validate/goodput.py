"""``paraplan validate --goodput``: published time-to-train figures recomputed from their inputs by
paraplan.goodput (cases in ``validate/cases/goodput/published.json``; docs/goodput.md).

Case kinds: ``failure_count`` (expected unexpected interruptions of a job of ``gpus`` over ``days``),
``interruption_count`` (the same with the planned ones, failures.planned_per_day),
``mean_interval_h`` (its mean time between interruptions), ``prob_at_least_one`` (1 - e^(-N r T) at an
annualised per-GPU rate), ``ettr`` (effective training time ratio of goodput.time_to_train). A case
passes when the prediction is within ``tolerance`` (relative or absolute) or, for ``at_least``, not
below the published value."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from paraplan.goodput import closed_forms as cf
from paraplan.goodput.checkpoint import CheckpointCost, snapshot_time_s, write_time_s
from paraplan.goodput.inputs import SECONDS_PER_DAY, FailureInputs, default_inputs
from paraplan.goodput.time_to_train import time_to_train
from paraplan.io.documents import read_document
from paraplan.specs.errors import InputError


def bundled_goodput_file():
    return resources.files("paraplan.validate") / "cases" / "goodput" / "published.json"


def load_goodput_cases(path: Path | str | None = None) -> dict:
    """The case document: ``{"cases": [...], "not_reproduced": [...]}``."""
    data = read_document(path if path is not None else bundled_goodput_file(), "cases")
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise InputError("cases: a goodput case file holds a mapping with a list under 'cases'")
    return data


def _failures(inputs: dict) -> FailureInputs:
    if "annual_gpu_failure_rate" in inputs:  # GPUs only, at an annualised rate
        rate = cf.annual_rate_to_per_day(inputs["annual_gpu_failure_rate"])
        return FailureInputs(
            gpu_failures_per_day=rate, server_failures_per_day=0.0, gpus_per_server=8
        )
    return default_inputs().failures


def _ettr(inputs: dict) -> float:
    defaults = default_inputs()
    ck = defaults.checkpoint
    rank, total, host = inputs["rank_bytes"], inputs["total_bytes"], inputs["host_bandwidth"]
    write = write_time_s(rank, total, ck.storage_write_bandwidth, host)
    stall = write if ck.mode == "sync" else snapshot_time_s(rank, host)
    load = write_time_s(rank, total, ck.storage_read_bandwidth, host)
    ckpt = CheckpointCost(rank, total, stall, max(write, stall), load, ck.mode)
    useful = inputs["useful_days"] * SECONDS_PER_DAY
    run = time_to_train(useful, inputs["step_s"], inputs["gpus"], ckpt, defaults)
    return run.effective_training_time_ratio


def predict(case: dict) -> float:
    """The quantity a case's ``kind`` names, from its ``inputs``."""
    kind, inputs = case["kind"], case["inputs"]
    if kind == "ettr":
        return _ettr(inputs)
    rate = cf.job_failure_rate_per_s(inputs["gpus"], _failures(inputs))
    if kind == "failure_count":
        return rate * inputs["days"] * SECONDS_PER_DAY
    if kind == "interruption_count":  # unexpected and planned
        planned = _failures(inputs).planned_per_day * inputs["days"]
        return rate * inputs["days"] * SECONDS_PER_DAY + planned
    if kind == "mean_interval_h":
        return 1.0 / rate / 3600.0
    if kind == "prob_at_least_one":
        return cf.prob_at_least_one_failure(rate, inputs["days"] * SECONDS_PER_DAY)
    raise InputError(f"cases: {case.get('name')!r}: unknown goodput case kind {kind!r}")


def passes(predicted: float, case: dict) -> bool:
    published, how = case["published"], case["comparison"]
    if how == "at_least":
        return predicted >= published
    if how == "relative":
        return abs(predicted - published) <= case["tolerance"] * abs(published)
    return abs(predicted - published) <= case["tolerance"]


def run_goodput_cases(data: dict | None = None) -> dict:
    """Report: each case's prediction against its published value, and the summary of passes."""
    data = data if data is not None else load_goodput_cases()
    rows = []
    for case in data["cases"]:
        predicted = predict(case)
        rows.append(
            {
                "name": case["name"],
                "kind": case["kind"],
                "source": case["source"],
                "inputs": case["inputs"],
                "predicted": predicted,
                "published": case["published"],
                "comparison": case["comparison"],
                "tolerance": case.get("tolerance"),
                "passed": passes(predicted, case),
            }
        )
    passed = sum(r["passed"] for r in rows)
    return {
        "cases": rows,
        "not_reproduced": data.get("not_reproduced", []),
        "summary": {"cases": len(rows), "passed": passed, "failed": len(rows) - passed},
    }
