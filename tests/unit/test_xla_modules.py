"""MaxText's one-hot embedding GEMM and fp32 logits dot (graph.xla_modules), against hand-computed values."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.cost.compute import gemm_time_s, op_times_s
from paraplan.graph.transformer import LayerShape, decoder_layer_1d, embedding_block, lm_head_block
from paraplan.graph.xla_modules import fp32_logits_op, one_hot_embedding_op

H100 = load_system("dgx-h100-80gb").accelerator


def _shape(impl: tuple = (), dtype: str = "bf16", tp: int = 1) -> LayerShape:
    return LayerShape(
        tp=tp,
        cp=1,
        micro_batch=4,
        seq_length=4096,
        sequence_parallel=False,
        attention="flash",
        dtype=dtype,
        module_impl=impl,
    )


def test_one_hot_embedding_flops_and_shape():
    # llama2-7b, 4 x 4096 tokens: 2 · 16384 · 32000 · 4096 = 4.294967296e12 FLOPs each way
    op = one_hot_embedding_op(16384, 32000.0, 4096, "bf16")
    assert op.kind == "gemm" and op.name == "embedding_lookup"
    assert op.fwd_flops == pytest.approx(4.294967296e12)
    assert op.bwd_flops == pytest.approx(4.294967296e12)  # dW alone: the one-hot has no gradient
    assert op.gemm_shape == (1, 16384, 4096, 32000)
    assert op.input_grad is False and op.dtype is None
    # jnp.dot, not a quantised DenseGeneral: bf16 under an fp8 recipe
    assert one_hot_embedding_op(16384, 32000.0, 4096, "fp8").dtype == "bf16"


def test_one_hot_backward_is_the_weight_gradient_alone():
    op = one_hot_embedding_op(16384, 32000.0, 4096, "bf16")
    fwd, bwd = op_times_s(op, H100, "bf16")
    assert fwd == pytest.approx(gemm_time_s(op.fwd_flops, (1, 16384, 4096, 32000), H100, "bf16"))
    # dW[V, h] = one_hotᵀ[V, tokens] · dY[tokens, h]: (b, k, n, m), depth = the tokens
    assert bwd == pytest.approx(gemm_time_s(op.fwd_flops, (1, 32000, 4096, 16384), H100, "bf16"))


def test_one_hot_gemm_in_bf16_under_fp8():
    op = one_hot_embedding_op(16384, 32000.0, 4096, "fp8")
    fwd, _ = op_times_s(op, H100, "fp8")
    assert fwd == pytest.approx(gemm_time_s(op.fwd_flops, op.gemm_shape, H100, "bf16"))


def test_fp32_logits_run_at_tf32():
    head = lm_head_block(load_model("llama2-7b"), _shape((("logits", "fp32-dot"),)), False)
    op = next(o for o in head.ops if o.name == "lm_head")
    assert op.dtype == "tf32" and op.gemm_shape == (1, 16384, 32000, 4096)
    fwd, bwd = op_times_s(op, H100, "bf16")
    assert fwd == pytest.approx(gemm_time_s(op.fwd_flops, op.gemm_shape, H100, "tf32"))
    # TF32's dense peak is half of bf16's on H100 SXM (494.7 vs 989.4 TFLOP/s): at least ~1.8x the time
    bf16_fwd, bf16_bwd = op_times_s(op._replace(dtype=None), H100, "bf16")
    assert fwd > 1.8 * bf16_fwd and bwd > 1.8 * bf16_bwd
    assert fp32_logits_op(op._replace(dtype=None)) == op


def test_blocks_follow_module_impl():
    model = load_model("llama2-7b")
    plain = embedding_block(model, _shape())
    assert [o.kind for o in plain.ops] == ["memory"]
    gemm = embedding_block(model, _shape((("embedding", "one-hot-gemm"),), tp=2))
    (op,) = gemm.ops
    # vocab-parallel rows: k = V / t = 16000
    assert op.kind == "gemm" and op.gemm_shape == (1, 16384, 4096, 16000)
    head = lm_head_block(model, _shape(), False)
    assert next(o for o in head.ops if o.name == "lm_head").dtype is None


def test_separate_projections_split_qkv_and_mlp_in():
    # llama2-7b (MHA: q = kv = 4096, SwiGLU f = 11008), 16384 tokens: q, k, v 16384×4096×4096 each, gate and
    # up 16384×11008×4096 each; FLOPs sum to the fused GEMMs'
    model = load_model("llama2-7b")
    fused = decoder_layer_1d(model, _shape())
    apart = decoder_layer_1d(model, _shape((("projections", "separate"),)))
    qkv = [o for o in apart.ops if o.name == "qkv_projection"]
    mlp_in = [o for o in apart.ops if o.name == "mlp_in_projection"]
    assert [o.gemm_shape for o in qkv] == [(1, 16384, 4096, 4096)] * 3
    assert [o.gemm_shape for o in mlp_in] == [(1, 16384, 11008, 4096)] * 2
    assert sum(o.fwd_flops for o in qkv) == pytest.approx(2 * 16384 * 12288 * 4096)
    assert sum(o.fwd_flops for o in apart.ops) == pytest.approx(sum(o.fwd_flops for o in fused.ops))
    # GQA: llama3-8b q 4096, k and v 1024 each
    gqa = decoder_layer_1d(load_model("llama3-8b"), _shape((("projections", "separate"),)))
    widths = [o.gemm_shape[2] for o in gqa.ops if o.name == "qkv_projection"]
    assert widths == [4096, 1024, 1024]
