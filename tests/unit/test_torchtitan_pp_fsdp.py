"""torchtitan's FSDP2 under pipeline parallelism (issue 33, review findings): what torch.distributed.pipelining
makes FSDP2 hold and move per step, with bytes and calls by hand."""

from __future__ import annotations

import copy
import json
from importlib import resources

from paraplan.step.estimate import estimate
from paraplan.validate.run import load_cases

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
