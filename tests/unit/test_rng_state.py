"""Blocking CUDA RNG state copies (cost.rng_state): the PyTorch 1.1 MTGP32 state the 2019 Megatron-LM code
saves and restores around every attention dropout and in its activation checkpoint. Each term by hand, then
through the step."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_system
from paraplan.cost.frameworks import apply_framework, framework_system
from paraplan.cost.rng_state import layer_rng_copies_s, rng_state_copy_s
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec
from paraplan.step.estimate import estimate


def test_one_copy_by_hand():
    # 10.5 us round trip + 31.6 us issue + 824,000 B at 12 GB/s (68.667 us) = 110.767 us
    t = rng_state_copy_s(824_000.0, 12e9, 10.5e-6, 31.6e-6)
    assert t == pytest.approx(10.5e-6 + 31.6e-6 + 824_000.0 / 12e9)
    assert t == pytest.approx(110.7667e-6, rel=1e-5)
    assert rng_state_copy_s(0.0, 12e9, 10.5e-6, 31.6e-6) == 0.0  # host-side state: no copy at all


def test_profiles_state_the_copies():
    old = load_framework("megatron-lm-2019")
    assert (old.rng_state_copy_bytes, old.rng_copies_per_pass, old.rng_copies_per_checkpoint) == (
        824_000.0,
        4.0,
        4.0,
    )
    assert load_framework("megatron-lm-v1.0").rng_state_copy_bytes == 0.0  # PyTorch 1.5
    assert load_framework("megatron-core").rng_state_copy_bytes == 0.0


def test_layer_copies_by_hand():
    system = framework_system(load_framework("megatron-lm-2019"), load_system("dgx-2h"))
    eff = system.accelerator.efficiency
    per_copy = rng_state_copy_s(824_000.0, 12e9, 10.5e-6, 31.6e-6)
    # one attention dropout per layer: 4 copies each forward run, 4 per recomputed layer
    assert layer_rng_copies_s(eff, 12e9, 1, 1) == pytest.approx((4 * per_copy, 4 * per_copy))
    assert layer_rng_copies_s(eff, 12e9, 0, 0) == (0.0, 0.0)  # no attention in the block


MODEL = ModelSpec(
    name="m12b",
    layers=40,
    hidden=1536,
    heads=16,
    kv_heads=16,
    ffn_hidden=6144,
    vocab=51200,
    mlp="gelu",
    norm="layernorm",
    tie_embeddings=True,
    position_embedding="learned",
    dropout=True,
)


def _step(recompute: str, tp: int, copy_bytes: float | None = None) -> float:
    profile = load_framework("megatron-lm-2019")
    if copy_bytes is not None:
        profile = profile.model_copy(update={"rng_state_copy_bytes": copy_bytes})
    fields = dict(
        gpus=tp,
        tp=tp,
        micro_batch=8,
        global_batch=8,
        seq_length=1024,
        recompute=recompute,
        dtype="fp16",
        attention="unfused",
    )
    system, fields = apply_framework(profile, load_system("dgx-2h"), fields)
    return estimate(MODEL, system, PlanSpec(**fields)).step_time_s


@pytest.mark.parametrize("tp", [1, 8])
def test_step_adds_twelve_copies_per_checkpointed_layer(tp):
    # 40 layers x (4 fork copies x 2 forward runs + 4 checkpoint copies) = 480 copies, whatever the TP degree
    per_copy = rng_state_copy_s(824_000.0, 12e9, 10.5e-6, 31.6e-6)
    added = _step("full", tp) - _step("full", tp, copy_bytes=0.0)
    assert added == pytest.approx(480 * per_copy, rel=1e-6)


def test_step_without_recompute_keeps_the_fork_copies_only():
    per_copy = rng_state_copy_s(824_000.0, 12e9, 10.5e-6, 31.6e-6)
    added = _step("none", 1) - _step("none", 1, copy_bytes=0.0)
    assert added == pytest.approx(40 * 4 * per_copy, rel=1e-6)
