"""torchtitan's FSDP2 under pipeline parallelism (issue 33, review findings): what torch.distributed.pipelining
makes FSDP2 hold and move per step, with bytes and calls by hand."""

from __future__ import annotations

import copy
import json
from importlib import resources

import pytest

from paraplan.catalog import load_framework
from paraplan.step.estimate import estimate
from paraplan.step.tail import _Traffic, zero3_pp_once_s
from paraplan.validate.case_files import load_cases
from paraplan.validate.fitted import ASSUMED_INPUTS

CASES = resources.files("paraplan.validate") / "cases" / "torchtitan-llama3.json"
PP_1F1B = "torchtitan2412-llama31-405b-fsdp8-tp8-pp8-1f1b"
# Llama 3.1 405B at TP 8: one layer's parameters per GPU (TP-sharded linears, whole norms) and the embedding
# (vocabulary-sharded over TP); stage 0 of the 8-stage plan runs the embedding and 15 layers
LAYER = (16384 * (16384 + 2 * 1024 + 16384) + 3 * 16384 * 53248) // 8 + 2 * 16384
EMBEDDING = 128_256 * 16384 // 8
STAGE0 = 15 * LAYER + EMBEDDING


def _raw(name: str) -> dict:
    return copy.deepcopy(
        next(c for c in json.loads(CASES.read_text())["cases"] if c["name"] == name)
    )


def _estimates(tmp_path, raws: list[dict]):
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"cases": raws}))
    return [estimate(c.model, c.system, c.plan) for c in load_cases([path])]


def test_the_405b_stage_0_by_hand():
    assert LAYER == 398_491_648
    assert EMBEDDING == 262_668_288
    assert STAGE0 == 6_240_043_008


def test_under_pp_fsdp2_holds_every_gradient_unsharded_in_fp32(tmp_path):
    """Every micro-batch's backward runs without gradient sync, so each parameter's bf16 gradient moves to an
    fp32 unsharded accumulator (reduce_dtype float32) until the reduce-scatters after the last one: stage 0
    holds 6,240,043,008 × 4 B = 23.2 GiB, not its 1/8 shard (the layers resharded: zero3_pp_reshard)."""
    raw = _raw(PP_1F1B)
    resharded = copy.deepcopy(raw)
    resharded["name"] += "-resharded"
    resharded["framework_overrides"]["zero3_pp_reshard"] = True
    held, sharded = (e.first_stage.gradients_bytes for e in _estimates(tmp_path, [raw, resharded]))
    assert held == 4 * STAGE0 == 24_960_172_032
    assert sharded == 4 * STAGE0 / 8


def test_pp_gathers_and_reduces_once_per_step_by_hand():
    """16 blocks of gather 10 ms and reduce-scatter 20 ms, a 320 ms forward window (20 ms a block), prefetch 1:
    only the first gather waits (10 ms), the 16 reduce-scatters (320 ms) follow the last backward, 100 ms
    hidden by the drain slack: 10 + 220 = 230 ms; the price of hiding (0 here) adds nothing."""
    traffic = _Traffic(
        {"layer_gather": 0.010, "layer_reduce": 0.020},
        dict.fromkeys(("layer_gather", "layer_reduce"), 0.0),
    )
    assert zero3_pp_once_s(traffic, 16.0, 1.0 / 16, 1.0, 0.320, 0.100) == pytest.approx(0.230)
    # gathers slower than a block's forward: each later one shows its excess, 15 × (30 − 20) ms more
    traffic.time["layer_gather"] = 0.030
    assert zero3_pp_once_s(traffic, 16.0, 1.0 / 16, 1.0, 0.320, 0.100) == pytest.approx(
        0.030 + 15 * 0.010 + 0.220
    )


def test_pp_fsdp2_collectives_do_not_grow_with_the_micro_batches(tmp_path):
    """The 405B 1F1B case at 8 and 16 micro-batches (global batch 256, 512), FSDP2's runtime copies off: the
    ZeRO-3 collectives run once per step, so the exposed DP time is the same."""
    raws = []
    for batch in (256, 512):
        raw = _raw(PP_1F1B)
        raw["name"] += f"-{batch}"
        raw["plan"]["global_batch"] = batch
        raw["framework_overrides"]["fsdp_runtime"] = "none"
        raws.append(raw)
    dp = [e.breakdown.dp_comm_s for e in _estimates(tmp_path, raws)]
    assert dp[0] > 0.1
    assert dp[1] == pytest.approx(dp[0], rel=1e-12)


def test_the_profiles_state_whether_fsdp2s_root_stays_gathered(tmp_path):
    """The torchtitan profiles (PyTorch 2.4 to the June 2025 nightlies) state it with its source; a stack without
    FSDP2 does not; the June 2025 runs (torch 38410cf9, torchtitan passing reshard_after_forward=True) state
    false: the 8B TP-8 case then holds 2·128,256·4096 / 8 embedding and LM-head parameters and the 4096 norm
    parameters fewer, in bf16."""
    for name in ("torchtitan", "torchtitan-compiled"):
        profile = load_framework(name)
        assert profile.zero3_root_held is True
        assert "#155319" in profile.sources["zero3_root_held"]
    assert load_framework("megatron-core").zero3_root_held is False
    assert load_framework("llm-foundry").zero3_root_held is False
    june = [c for c in json.loads(CASES.read_text())["cases"] if "2506" in c["name"]]
    assert june and all(c["framework_overrides"] == {"zero3_root_held": False} for c in june)
    raw = _raw("torchtitan2506-llama3-8b-fsdp8-tp8-bf16-tp")
    held = copy.deepcopy(raw)
    held["name"] += "-held"
    held["framework_overrides"]["zero3_root_held"] = True
    resharded, kept = (e.first_stage.buffers_bytes for e in _estimates(tmp_path, [raw, held]))
    assert kept - resharded == (2 * 128_256 * 4096 // 8 + 4096) * 2 == 262_676_480


def test_fp8_all_gather_holds_the_layers_gathered_in_fp8(tmp_path):
    """torchao's fp8 all-gather (fp8_param_gather) leaves the unsharded Float8Linear weights in fp8: stage 0
    keeps its 15 layers gathered at 1 B instead of 2 (15 × 398,491,648 B less), its embedding (the root,
    262,668,288 parameters) in bf16 either way."""
    raw = _raw(PP_1F1B)
    bf16 = copy.deepcopy(raw)
    bf16["name"] += "-bf16-gather"
    bf16["framework_overrides"]["fp8_param_gather"] = False
    fp8, plain = (e.first_stage.buffers_bytes for e in _estimates(tmp_path, [raw, bf16]))
    assert plain - fp8 == 15 * LAYER * (2 - 1) == 5_977_374_720
    block_buffer = fp8 - 15 * LAYER * 1 - EMBEDDING * 2
    assert (
        block_buffer == plain - 15 * LAYER * 2 - EMBEDDING * 2
    )  # the largest block's working buffer


def test_the_reserved_peak_assumptions_are_registered_with_the_profiles_values():
    """cuda_context, communication_buffers and allocator_fragmentation of the torchtitan profiles are stated
    assumptions: registered in validate.fitted.ASSUMED_INPUTS (which names the field; the value is the
    profiles' alone: 0.5 GiB, 1 GiB, 5 %), and the profiles' sources say so."""
    values = {
        "cuda_context": 0.5 * 2**30,
        "communication_buffers": 2**30,
        "allocator_fragmentation": 0.05,
    }
    assert {a.field for a in ASSUMED_INPUTS} == set(values)
    for assumed in ASSUMED_INPUTS:
        assert assumed.name.endswith(f".{assumed.field}") and assumed.data and assumed.settle
        for name in assumed.profiles:
            profile = load_framework(name)
            assert getattr(profile, assumed.field) == values[assumed.field], (name, assumed.field)
            assert "ASSUMED_INPUTS" in profile.sources[assumed.field], (name, assumed.field)
