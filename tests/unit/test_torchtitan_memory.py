"""torchtitan's memory (issues 32/33): the loss it runs (fp32 logits eager, Inductor's fused loss when the
December 2024 code did not yet compile it), the reserved peak it logs (torch.cuda.max_memory_reserved) and the
validator's reserved-peak metric, with bytes by hand."""

from __future__ import annotations

import copy
import json
from importlib import resources
from types import SimpleNamespace

import pytest

from paraplan.catalog import load_framework
from paraplan.specs.errors import InputError
from paraplan.step.estimate import estimate
from paraplan.step.result import StageMemory
from paraplan.units import GiB
from paraplan.validate.case_files import SCOPE_STAGE, load_cases
from paraplan.validate.run import predicted_metrics, run_cases

CASES = resources.files("paraplan.validate") / "cases" / "torchtitan-llama3.json"
CP8 = "torchtitan2412-llama31-8b-fsdp1-cp8-s262144"
# benchmarks/llama3_h100_202412_torchtitan.md (torchtitan b5bcd76c), Memory(GiB) of Tables 1-4
TABLE_GIB = {
    "torchtitan2412-llama31-8b-fsdp8-eager": 82.4,
    "torchtitan2412-llama31-8b-fsdp8-compile": 77.0,
    "torchtitan2412-llama31-8b-fsdp8-compile-fp8": 76.8,
    "torchtitan2412-llama31-8b-fsdp128-eager": 67.0,
    "torchtitan2412-llama31-8b-fsdp128-compile": 62.0,
    "torchtitan2412-llama31-8b-fsdp128-compile-fp8": 61.8,
    "torchtitan2412-llama31-8b-fsdp8-cp1-s32768": 83.9,
    "torchtitan2412-llama31-8b-fsdp4-cp2-s65536": 84.2,
    "torchtitan2412-llama31-8b-fsdp2-cp4-s131072": 84.0,
    "torchtitan2412-llama31-8b-fsdp1-cp8-s262144": 84.5,
    "torchtitan2412-llama31-70b-fsdp32-tp8-fp8": 71.9,
    "torchtitan2412-llama31-70b-fsdp32-tp8-fp8-asynctp": 67.6,
}


def _raw_cases() -> list[dict]:
    return json.loads(CASES.read_text())["cases"]


def _load(tmp_path, raws: list[dict]):
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"cases": raws}))
    return load_cases([path])


def test_the_profiles_state_the_loss_torchtitan_runs():
    assert load_framework("torchtitan").module_impl["loss"] == "dtensor-loss-parallel"
    assert load_framework("torchtitan-compiled").module_impl["loss"] == "inductor-fused"
    for case in _raw_cases():
        impl = case.get("framework_overrides", {}).get("module_impl")
        if case["name"].startswith("torchtitan2412") and case["framework"] == "torchtitan-compiled":
            # 9dec370's train.py left the loss uncompiled
            assert impl == {"rotary": "torchtitan-complex", "loss": "dtensor-loss-parallel"}, case[
                "name"
            ]
        else:
            assert impl is None, case["name"]


def test_the_cases_compare_the_reserved_peak_of_every_run_without_pipeline():
    stated = {c["name"]: c["measured"].get("peak_reserved_gib") for c in _raw_cases()}
    assert {k: v for k, v in stated.items() if v is not None} == TABLE_GIB


def test_the_fp32_logits_held_at_the_cp8_peak_by_hand(tmp_path):
    """8B at CP 8 over 262,144 tokens: 32,768 local tokens × 128,256 logits; fp32-logits holds 12 B per
    logit (log_softmax's output, nll_loss's and log_softmax's gradients), the fused loss 4 B."""
    raw = next(c for c in _raw_cases() if c["name"] == CP8)
    fused = copy.deepcopy(raw)
    fused["name"] += "-fused"
    fused["framework_overrides"]["module_impl"] = {"rotary": "torchtitan-complex", "loss": "fused"}
    cases = {c.name: c for c in _load(tmp_path, [raw, fused])}
    mem = {
        name: estimate(c.model, c.system, c.plan).first_stage.activations_bytes
        for name, c in cases.items()
    }
    logits = 32_768 * 128_256
    assert logits == 4_202_692_608
    assert mem[CP8] - mem[CP8 + "-fused"] == pytest.approx((12 - 4) * logits, rel=1e-12)
    assert (12 - 4) * logits == 33_621_540_864  # 31.3 GiB the model missed


def test_the_reserved_peak_is_the_peak_less_context_and_communication_buffers():
    stage = StageMemory(0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0)  # peak 21 B, reserve 6 B
    est = SimpleNamespace(first_stage=stage, step_time_s=1.0, fits=True, fit="fits", mfu=0.5)
    predicted = predicted_metrics(est, SCOPE_STAGE, 1.5 * GiB)
    assert predicted["peak_reserved_gib"] == pytest.approx(21.0 / GiB - 1.5)
    assert predicted["peak_allocated_gib"] == pytest.approx(15.0 / GiB)
    assert "peak_reserved_gib" not in predicted_metrics(est, SCOPE_STAGE)


def test_validate_compares_the_reserved_peak(tmp_path):
    raw = next(c for c in _raw_cases() if c["name"] == CP8)
    report = run_cases(_load(tmp_path, [raw]))
    entry = report["cases"][0]
    case = _load(tmp_path, [raw])[0]
    peak = estimate(case.model, case.system, case.plan).first_stage.peak_bytes
    outside = 0.5 * GiB + 1.0 * GiB  # the torchtitan profile's cuda_context + communication_buffers
    assert entry["predicted"]["peak_reserved_gib"] == pytest.approx((peak - outside) / GiB)
    assert entry["error_pct"]["peak_reserved_gib"] == pytest.approx(
        100 * (entry["predicted"]["peak_reserved_gib"] / 84.5 - 1)
    )
    assert report["summary"]["peak_reserved_gib_cases"] == 1


def test_a_reserved_peak_needs_the_cases_framework(tmp_path):
    raw = copy.deepcopy(next(c for c in _raw_cases() if c["name"] == CP8))
    del raw["framework"], raw["framework_overrides"]
    with pytest.raises(InputError, match="measured.peak_reserved_gib: needs the case's framework"):
        _load(tmp_path, [raw])


def _fsdp8_memory(tmp_path, **overrides) -> StageMemory:
    raw = copy.deepcopy(next(c for c in _raw_cases() if c["name"].endswith("8b-fsdp8-eager")))
    raw["framework_overrides"].update(overrides)
    case = _load(tmp_path, [raw])[0]
    return estimate(case.model, case.system, case.plan).first_stage


def test_fsdp2_keeps_fp32_sharded_parameters_as_their_own_master(tmp_path):
    """Llama 3.1 8B, 8,030,261,248 parameters over FSDP 8: 1,003,782,656 per GPU, fp32 (4 B) with fp32 Adam
    moments (8 B), no bf16 copy beside them."""
    mem = _fsdp8_memory(tmp_path)
    assert mem.weights_bytes == 4 * 1_003_782_656 == 4_015_130_624
    assert mem.optimizer_bytes == 8 * 1_003_782_656


def test_fsdp2s_root_stays_gathered_by_hand(tmp_path):
    """The 8B layer: 4096·(4096 + 1024 + 1024 + 4096) + 3·4096·14336 + 2·4096 = 218,112,000 parameters, two
    gathered (the layer computing and the prefetched one) in bf16; FSDP2's root (embedding and LM head,
    2·128,256·4096, and the final norm's 4096) held gathered too: 1,050,677,248 × 2 B."""
    layers = 2 * 218_112_000 * 2
    root = (2 * 128_256 * 4096 + 4096) * 2
    assert root == 2_101_354_496
    assert _fsdp8_memory(tmp_path).buffers_bytes == layers + root
    assert _fsdp8_memory(tmp_path, zero3_root_held=False).buffers_bytes == layers


def test_under_pp_torchtitan_keeps_every_layer_of_the_stage_gathered(tmp_path):
    """Llama 3.1 405B at TP 8: a layer holds (16384·(16384 + 2·1024 + 16384) + 3·16384·53248) / 8 sharded
    parameters and its two norms' 2·16384 whole, 398,491,648 per GPU; stage 0 of the 8-stage plan runs 15
    layers, so keeping them all gathered (reshard_after_forward=False) holds 15 − 2 layers more than the
    computing and prefetched pair, in fp8 (the run's torchao fp8 all-gather, fp8_param_gather: 1 B)."""
    raw = next(c for c in _raw_cases() if c["name"].endswith("405b-fsdp8-tp8-pp8-1f1b"))
    resharded = copy.deepcopy(raw)
    resharded["name"] += "-resharded"
    resharded["framework_overrides"]["zero3_pp_reshard"] = True
    cases = _load(tmp_path, [raw, resharded])
    buffers = [estimate(c.model, c.system, c.plan).first_stage.buffers_bytes for c in cases]
    layer = (16384 * (16384 + 2 * 1024 + 16384) + 3 * 16384 * 53248) // 8 + 2 * 16384
    assert layer == 398_491_648
    assert buffers[0] - buffers[1] == (15 - 2) * layer * 1
    assert load_framework("torchtitan").zero3_pp_reshard is False
    assert load_framework("megatron-core").zero3_pp_reshard is True


def test_loss_parallel_holds_16_bytes_per_local_logit_by_hand(tmp_path):
    """70B at TP 8, local batch 16 × 8192: 131,072 tokens × 128,256 / 8 = 2,101,346,304 local logits; DTensor's
    fused nll_loss + log_softmax backward holds 16 B each (saved output, zeros_like grad_input, exp, sum),
    fp32-logits 12; at TP 1 the two are the same."""
    raw = next(c for c in _raw_cases() if c["name"].endswith("70b-fsdp32-tp8-fp8"))
    plain = copy.deepcopy(raw)
    plain["name"] += "-plain"
    plain["framework_overrides"]["module_impl"]["loss"] = "fp32-logits"
    acts = [
        estimate(c.model, c.system, c.plan).first_stage.activations_bytes
        for c in _load(tmp_path, [raw, plain])
    ]
    logits = 16 * 8192 * 128_256 // 8
    assert logits == 2_101_346_304
    assert acts[0] - acts[1] == pytest.approx((16 - 12) * logits, rel=1e-12)
    tp1 = copy.deepcopy(next(c for c in _raw_cases() if c["name"] == CP8))
    tp1_plain = copy.deepcopy(tp1)
    tp1_plain["name"] += "-plain"
    tp1_plain["framework_overrides"]["module_impl"]["loss"] = "fp32-logits"
    tp1_acts = {
        estimate(c.model, c.system, c.plan).first_stage.activations_bytes
        for c in _load(tmp_path, [tp1, tp1_plain])
    }
    assert len(tp1_acts) == 1
