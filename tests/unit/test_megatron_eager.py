"""Megatron-LM 2019 / v1.0 as PyTorch 1.x ran it (graph.megatron_eager, graph.losses; issues 32/33): the bias
adds of F.linear on 3-D inputs, the head copies of the [b, s, np, hn] layout and the fp32 loss, against hand
counts on the 1.2B model of Shoeybi et al. 2019 (hidden 1536, 16 heads, ffn 6144, vocabulary 51,200)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model
from paraplan.graph import eager_modules as em
from paraplan.graph.losses import LOSS_IMPLS
from paraplan.graph.megatron_eager import BIAS_PASS, BSH_PERMUTE, eager_layer_ops
from paraplan.graph.transformer import LayerShape, decoder_layer_1d, lm_head_block
from paraplan.specs.model import ModelSpec

# GPT-3 Large's layer (h 1536, 16 heads, ffn 6144, vocabulary 51,200, gelu, LayerNorm) in the 1.2B's 40 layers
MODEL = load_model("gpt3-760m").model_copy(update={"name": "megatron-1.2b", "layers": 40})
TOKENS = 8 * 1024  # micro-batch 8 x sequence 1024
BOTH = (BSH_PERMUTE, BIAS_PASS)
# one GPU's micro-batch 8 x sequence 1024 in fp16, unfused attention, as the 2019 code ran it
FP16 = LayerShape(1, 1, 8, 1024, False, "unfused", "fp16")


def _ops(tp: int, impl=BOTH, attention: str = "unfused", model: ModelSpec = MODEL):
    return {o.name: o for o in eager_layer_ops(model, TOKENS, tp, 2, impl, attention)}


def test_bias_adds_by_hand():
    # forward: (+= bias on QKV 3·1536 and MLP-in 6144, split by t) + (+ bias on two 1536-wide row outputs),
    # read 2 + write 2 bytes each; backward: one 2-byte read of each output gradient
    op = _ops(1)["linear_bias_adds"]
    assert op.fwd_bytes == 4 * 8192 * (4608 + 6144 + 3072) == 452_984_832
    assert op.bwd_bytes == 2 * 8192 * (4608 + 6144 + 3072) == 226_492_416
    op8 = _ops(8)["linear_bias_adds"]
    assert (
        op8.fwd_bytes == 4 * 8192 * (576 + 768 + 3072) == 144_703_488
    )  # the row biases stay whole


def test_head_copies_by_hand():
    # forward: q, k, v copied for the batched GEMMs (3·1536) and the context back (1536), read + write 2 B;
    # backward: the context gradient (1536), the q/k/v reshapes (4608) and split's cat (4608)
    op = _ops(1)["attention_head_copies"]
    assert op.fwd_bytes == 4 * 8192 * (4608 + 1536) == 201_326_592
    assert op.bwd_bytes == 4 * 8192 * (1536 + 2 * 4608) == 352_321_536
    assert _ops(4)["attention_head_copies"].fwd_bytes == op.fwd_bytes / 4


def test_only_where_stated():
    assert _ops(1, impl=()) == {}
    assert set(_ops(1, impl=(BIAS_PASS,))) == {"linear_bias_adds"}
    assert set(_ops(1, attention="flash")) == {"linear_bias_adds"}  # no batched GEMMs, no copies
    unbiased = MODEL.model_copy(update={"bias": False})
    assert set(_ops(1, model=unbiased)) == {"attention_head_copies"}


def test_the_2019_and_v1_profiles_state_them_and_megatron_core_does_not():
    for name, loss in (
        ("megatron-lm-2019", "megatron-2019"),
        ("megatron-lm-v1.0", "megatron-v1.0"),
    ):
        impl = load_framework(name).module_impl
        assert (impl["linear"], impl["heads"], impl["loss"]) == ("bias-pass", "bsh-permute", loss)
    core = load_framework("megatron-core").module_impl
    assert "linear" not in core and "heads" not in core


def test_layer_graph_carries_the_ops():
    shape = FP16._replace(tp=2)
    plain = {o.name for o in decoder_layer_1d(MODEL, shape).ops}
    with_impl = decoder_layer_1d(MODEL, shape._replace(module_impl=em.impl_key(dict(BOTH))))
    assert {o.name for o in with_impl.ops} - plain == {"linear_bias_adds", "attention_head_copies"}


@pytest.mark.parametrize("loss, fwd, bwd", [("megatron-2019", 46, 14), ("megatron-v1.0", 38, 14)])
def test_megatron_losses_by_hand(loss, fwd, bwd):
    # 2019: .float() (r2 w4) + clone 8 + max 4 + sub_ 8 + exp 8 + sum 4 + div_ 8; v1.0 without the clone;
    # backward mul_ 8 + the gradient cast to fp16 (r4 w2)
    shape = FP16._replace(module_impl=em.impl_key({"loss": loss}))
    (op,) = [o for o in lm_head_block(MODEL, shape, False).ops if o.name == "cross_entropy"]
    logits = TOKENS * 51200
    assert op.fwd_bytes == fwd * logits and op.bwd_bytes == bwd * logits
    assert LOSS_IMPLS[loss].held_bytes == 4  # the saved fp32 softmax, as the default
