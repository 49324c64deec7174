"""benchmarks/case_pairs.py: one-knob pairs of the validation cases (docs/model.md, Known limits, "One-knob
pairs")."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def case_pairs():
    bench = ROOT / "benchmarks"
    sys.path.insert(0, str(bench))  # the script imports its sibling _table
    try:
        spec = importlib.util.spec_from_file_location("case_pairs", bench / "case_pairs.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(bench))
    return module


@pytest.fixture(scope="module")
def pairs(case_pairs):
    return case_pairs.find_pairs()


def test_groups(case_pairs):
    assert case_pairs.group_of("plan.tp") == "layout"
    assert case_pairs.group_of("plan.gpus") == "scale"
    assert case_pairs.group_of("plan.grad_dtype") == "precision"
    assert case_pairs.group_of("plan.micro_batch") == "micro_batch"
    assert case_pairs.group_of("stack") == "stack"


def test_fp8_twin_pair(pairs):
    """NeMo 24.09 Llama 3.1 8B on 8 H100, bf16 against fp8, nothing else differing: measured 12.91 / 9.67 s
    (validate/cases/nemo-llama31-h100.json)."""
    (pair,) = [
        p
        for p in pairs
        if {p["a"], p["b"]} == {"dgxc2411-llama31-8b-bf16-8", "dgxc2411-llama31-8b-fp8-8"}
    ]
    assert pair["knob"] == "precision"
    assert pair["fields"] == ["dtype"]
    assert (pair["value_a"], pair["value_b"]) == (["bf16"], ["fp8"])  # oriented bf16 -> fp8
    assert pair["measured_ratio"] == pytest.approx(12.91 / 9.67)
    assert pair["disagreement_pct"] == pytest.approx(
        100 * math.log(pair["predicted_ratio"] / (12.91 / 9.67))
    )


def test_same_inputs_predict_one(pairs):
    """Cases whose canonical inputs are equal must get equal predictions (else the canonical form misses an
    input); one pair at least exists (a container release re-running a preset)."""
    same = [p for p in pairs if p["knob"] == "same inputs"]
    assert same
    assert all(p["predicted_ratio"] == 1.0 for p in same)


def test_one_group_only(case_pairs, pairs):
    for p in pairs:
        groups = {
            case_pairs.group_of(f if f in ("model", "system", "stack") else f"plan.{f}")
            for f in p["fields"]
        }
        assert len(groups) <= 1
