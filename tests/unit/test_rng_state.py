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


# ---- the PyTorch 1.1 softmax kernel of the same stack (cost.eager_kernels.kernel_rate_share) -------------
def test_softmax_rate_share_by_hand():
    from paraplan.cost.eager_kernels import kernel_rate_share

    old = framework_system(load_framework("megatron-lm-2019"), load_system("dgx-2h"))
    new = framework_system(load_framework("megatron-lm-v1.0"), load_system("dgx-2h"))
    assert kernel_rate_share("softmax", old.accelerator.efficiency) == 0.5
    assert kernel_rate_share("softmax_backward", old.accelerator.efficiency) == 0.5
    assert kernel_rate_share("dropout", old.accelerator.efficiency) == 1.0
    assert kernel_rate_share("softmax", new.accelerator.efficiency) == 1.0


def test_softmax_share_doubles_the_softmax_kernels_of_the_step():
    # 1.2B at tp 1, full recompute: the softmax (2·2 B per score forward, run twice) and its backward (3·2 B)
    # over 8·16·1024² scores per layer, 40 layers, at half of 900 GB/s · 0.833 instead of all of it
    profile = load_framework("megatron-lm-2019")
    fields = dict(
        gpus=1, micro_batch=8, global_batch=8, seq_length=1024, recompute="full", dtype="fp16",
        attention="unfused",
    )  # fmt: skip
    times = []
    for share in (0.5, 1.0):
        system, f = apply_framework(
            profile.model_copy(update={"softmax_rate_share": share}), load_system("dgx-2h"), fields
        )
        times.append(estimate(MODEL, system, PlanSpec(**f)).step_time_s)
    scores = 8 * 16 * 1024 * 1024
    per_layer = (
        scores * (2 * 4 + 6) / (900e9 * 0.833)
    )  # the extra time at half rate = the time at full
    assert times[0] - times[1] == pytest.approx(40 * per_layer, rel=1e-3)


@pytest.mark.parametrize(
    "field, value",
    [
        ("rng_state_copy_bytes", ".inf"),
        ("rng_copies_per_pass", ".nan"),
        ("rng_copies_per_checkpoint", "-1"),
        ("softmax_rate_share", "0"),
        ("softmax_rate_share", ".inf"),
    ],
)
def test_a_framework_file_with_a_bad_copy_or_softmax_input_exits_2_naming_the_field(
    tmp_path, field, value
):
    import subprocess
    import sys

    import yaml

    data = load_framework("megatron-lm-2019").model_dump(mode="json")
    text = yaml.safe_dump({k: v for k, v in data.items() if k != field}) + f"{field}: {value}\n"
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    run = subprocess.run(
        [sys.executable, "-m", "paraplan", "estimate", "-m", "gpt3-350m", "-s", "dgx-2h"]
        + ["--gpus", "1", "--framework", str(path)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and field in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("command", [["estimate", "--tp", "8"], ["search", "--global-batch", "8"]])
def test_a_stack_copying_the_rng_state_on_a_system_without_a_host_link_is_refused(
    tmp_path, command
):
    """specs.rules_precision.host_link_rule, the one check estimate and search ask (accelerator_rules): no byte
    term at an invented host rate."""
    import subprocess
    import sys

    import yaml

    data = load_system("dgx-2h").model_dump(mode="json")
    del data["accelerator"]["host_bandwidth"], data["accelerator"]["host_memory"]
    path = tmp_path / "no-host-link.yaml"
    path.write_text(yaml.safe_dump(data))
    run = subprocess.run(
        [sys.executable, "-m", "paraplan", *command, "--gpus", "8", "-m", "gpt3-350m"]
        + ["-s", str(path), "--framework", "megatron-lm-2019", "--dtype", "fp16"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2, run.stderr
    (error,) = [line for line in run.stderr.splitlines() if not line.startswith("note:")]
    assert error.startswith("error: accelerator.host_bandwidth") and "rng_state_copy_bytes" in error
