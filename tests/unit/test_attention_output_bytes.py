"""The attention output a layer keeps for backward: the fused attention's own copy and the output projection's
saved input (graph.mla.attention_output_bytes; TE v2.12 FusedAttnFunc / _Linear, Megatron-Core
set_save_original_input on linear_proj), hand-computed."""

import pytest

from paraplan.catalog import load_framework, load_model
from paraplan.cost.memory import layer_activation_bytes, layer_activation_parts, op_sac_kept_bytes
from paraplan.graph.mla import attention_activation_bytes, attention_output_bytes
from paraplan.graph.transformer import LayerShape


def shape(dtype: str, copy: bool, attention: str = "flash", tp: int = 1) -> LayerShape:
    return LayerShape(
        tp=tp,
        cp=1,
        micro_batch=1,
        seq_length=4096,
        sequence_parallel=tp > 1,
        attention=attention,
        dtype=dtype,
        proj_quantised_copy=copy,
    )


@pytest.mark.parametrize(
    "dtype, copy, attention, expected",
    [
        (
            "bf16",
            False,
            "flash",
            (2.0, 0.0),
        ),  # one tensor: the attention's output is the projection's input
        ("bf16", True, "flash", (2.0, 0.0)),  # no quantised copy in bf16
        ("fp8", False, "flash", (2.0, 0.0)),  # save_original_input: the bf16 output, once
        ("fp8", True, "flash", (1.0, 2.0)),  # fp8 copy (1 B) beside the kernel's bf16 output (2 B)
        (
            "fp8",
            True,
            "unfused",
            (1.0, 0.0),
        ),  # the last batched GEMM saves its inputs, not its output
        ("nvfp4", True, "flash", (0.5625, 2.0)),  # E2M1 0.5 B + an E4M3 scale per 16 elements
        ("nvfp4", False, "flash", (2.0, 0.0)),
        ("fp32", True, "flash", (4.0, 0.0)),
    ],
)
def test_attention_output_bytes_by_hand(dtype, copy, attention, expected):
    assert attention_output_bytes(shape(dtype, copy, attention)) == expected


def test_dense_layer_counts_the_output_by_hand():
    m = load_model("llama3-8b")  # h = q = 4096, 32 heads, no dropout
    tokens, q, heads = 4096, 4096, 32
    saved, copied = (layer_activation_parts(m, shape("fp8", c)) for c in (False, True))
    # the projection's saved input: 2 B (bf16 output, shared) vs its 1 B fp8 copy
    assert saved.tensor_parallel - copied.tensor_parallel == tokens * q * (2 - 1)
    # internals: the fp32 log-sum-exp, plus the kernel's own bf16 output beside the fp8 copy
    assert saved.attention_internals == tokens * heads * 4
    assert copied.attention_internals == tokens * (heads * 4 + 2 * q)
    # core_attn recomputation drops the kernel's output with the statistics: the fp8 copy alone remains
    selective = {c: layer_activation_bytes(m, shape("fp8", c), "selective") for c in (False, True)}
    assert selective[False] - selective[True] == tokens * q * (2 - 1)
    # bf16 is unchanged by the flag: one tensor
    assert layer_activation_parts(m, shape("bf16", True)) == layer_activation_parts(
        m, shape("bf16", False)
    )


def test_per_op_sac_counts_the_output_once():
    m = load_model("llama3-8b")
    parts = {c: layer_activation_parts(m, shape("fp8", c)) for c in (False, True)}
    kept = {c: op_sac_kept_bytes(m, shape("fp8", c), parts[c]) for c in (False, True)}
    assert kept[True] == pytest.approx(kept[False])  # SDPA's output is one of the saved op outputs


def test_mla_layer_counts_the_output_by_hand():
    m = load_model("deepseek-v3")  # 128 heads, value head width 128
    tokens, t = 4096, 2
    out = tokens * 128 * 128 / t
    full = {
        c: attention_activation_bytes(m, shape("fp8", c, tp=t), (), False) for c in (False, True)
    }
    # fp8 copy (1) + bf16 output (2) against the shared bf16 output (2): 1 B per element more
    assert full[True] - full[False] == pytest.approx(out * (1 + 2 - 2))
    selective = {
        c: attention_activation_bytes(m, shape("fp8", c, tp=t), (), True) for c in (False, True)
    }
    assert selective[False] - selective[True] == pytest.approx(out * (2 - 1))


@pytest.mark.parametrize(
    "name, copy",
    [
        ("megatron-core", True),  # --fp8-recipe delayed: TE rejects save_original_input
        ("nemo-24.09", True),
        ("llm-foundry", True),
        ("megatron-bridge-25.09", False),  # current scaling, core_v0.14 + TE >= 2.6
        ("megatron-bridge-25.11-mxfp8", False),
        ("megatron-bridge-26.02-nvfp4", False),  # FP4 clause, b0cc2706 + TE 2.12
        ("megatron-bridge-26.08-mxfp8", False),
        ("torchtitan", False),  # torchao's float8 linear saves its high-precision input
    ],
)
def test_profiles_state_the_projection_copy(name, copy):
    assert load_framework(name, "framework").proj_quantised_copy is copy
