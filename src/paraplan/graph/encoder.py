"""Op graphs of layers beyond decoder-only GPT: encoders (BERT, ViT), T5's encoder-decoder, layer lists.

The block kinds that use them, and a model's block list, are step.blocks' (one registry); here are
the op graphs and the per-layer facts of a model (``layer_kinds``, ``layer_models``: the kind and the
widths of each transformer layer). The op types and cost facts are those of ``graph/transformer.py``;
only what differs is built here:

- encoder layer: the decoder layer with bidirectional attention, every score computed (no causal
  discount; BERT, Devlin et al. 2019 §3; ViT, Dosovitskiy et al. 2021 §3.1);
- T5 decoder layer: causal self-attention + cross-attention whose queries come from the decoder
  and keys/values from the encoder output + MLP (Raffel et al. 2020 §2.1; Vaswani et al. 2017 §3.2.3);
- ViT patch embedding: one GEMM of (b·s) × h × (c·p²) (Dosovitskiy et al. 2021 Eq. 1) and the
  classification head on the class token only.
"""

from __future__ import annotations

from functools import lru_cache

from paraplan.graph.layers import decoder_layer
from paraplan.graph.ops import LayerGraph, Op
from paraplan.graph.tp_collectives import tp_collectives
from paraplan.graph.transformer import (
    LayerShape,
    _gemm,
    _memory,
    layer_weight_params,
)
from paraplan.specs.model import ModelSpec
from paraplan.specs.moe_model import is_moe_layer, moe_shaped


def layer_models(model: ModelSpec) -> list[ModelSpec]:
    """The shape of each transformer layer in order (the model's own, or its layer_widths groups)."""
    if model.layer_widths is None:
        return [model] * model.total_layers
    out: list[ModelSpec] = []
    for group in model.layer_widths:
        out += [model.widened(group)] * group.count
    return out


def layer_kinds(model: ModelSpec) -> tuple[str, ...]:
    """The kind of each transformer layer in order (step.blocks.BLOCK_KINDS names): T5's encoder layers then
    its decoder layers with cross-attention; for a model graph/moe.py builds its dense and MoE layers
    (specs.moe_model.is_moe_layer, the rule step.layout.layer_mix counts a uniform plan's stage by); the model's
    own layer ("decoder": causal for decoders, bidirectional for encoder-only models) otherwise."""
    if model.architecture == "encoder_decoder":
        return ("encoder",) * model.n_encoder_layers + ("cross_decoder",) * model.layers
    if moe_shaped(model):
        return tuple(
            "moe_layer" if is_moe_layer(model, i) else "dense_layer" for i in range(model.layers)
        )
    return ("decoder",) * model.layers


def bidirectional(op: Op) -> Op:
    """Fused attention without the causal mask: every score tile is computed (causal_fraction 1)."""
    return op._replace(causal_fraction=1.0) if op.kind == "attention" else op


@lru_cache(maxsize=4096)
def encoder_layer(model: ModelSpec, shape: LayerShape) -> LayerGraph:
    """A pre-norm encoder layer: the decoder layer's ops with bidirectional attention."""
    layer = decoder_layer(model, shape)
    return LayerGraph(
        "encoder_layer",
        tuple(bidirectional(op) for op in layer.ops),
        layer.collectives,
        layer.weight_params,
    )


def cross_attention_ops(model: ModelSpec, shape: LayerShape, encoder_seq: int) -> list[Op]:
    """Cross-attention of one decoder layer: Q projection of the b·s_dec decoder tokens, K/V projections of
    the b·s_enc encoder outputs, attention of s_dec queries over s_enc keys (no mask: 4·b·(a/t)·s_dec·s_enc·d
    FLOPs), output projection, residual and norm (Vaswani et al. 2017 §3.2.3; Raffel et al. 2020 §2.1)."""
    t, h, ab = shape.tp, model.hidden, shape.act_bytes
    tokens = shape.local_tokens
    enc_tokens = shape.micro_batch * encoder_seq // shape.cp
    mask = 1.0 if model.has_dropout else 0.0
    heads_local = model.heads // t
    q_tokens = tokens // shape.micro_batch
    batch = shape.micro_batch * heads_local
    d = model.d_head
    if shape.attention == "flash":
        fwd = 4.0 * batch * q_tokens * encoder_seq * d
        io_bytes = ab * (tokens * 2 * model.q_width + enc_tokens * 2 * model.kv_width) / t
        core = [
            Op(
                "cross_flash_attention",
                "attention",
                fwd,
                io_bytes,
                2.5 * fwd,
                2.0 * io_bytes,
                selective_recompute=True,
            )
        ]
    else:
        scores = batch * q_tokens * encoder_seq
        per_score = (4 * ab + 1) if model.has_dropout else 2 * ab
        core = [
            _gemm("cross_attention_scores", batch, q_tokens, encoder_seq, d)._replace(
                selective_recompute=True
            ),
            _memory("cross_softmax_dropout", per_score * scores)._replace(selective_recompute=True),
            _gemm("cross_attention_over_values", batch, q_tokens, d, encoder_seq)._replace(
                selective_recompute=True
            ),
        ]
    return [
        _memory("cross_attention_norm", 2 * ab * shape.sp_tokens * h),
        _gemm("cross_q_projection", 1, tokens, model.q_width / t, h),
        _gemm("cross_kv_projection", 1, enc_tokens, 2 * model.kv_width / t, h),
        *core,
        _gemm("cross_attention_projection", 1, tokens, h, model.q_width / t),
        _memory("cross_attention_residual", (3 * ab + mask) * shape.sp_tokens * h),
    ]


def cross_attention_weight_params(model: ModelSpec, tp: int) -> float:
    """Cross-attention weights on one GPU: h·(q + 2kv) + q·h split by t, its norm replicated (and biases)."""
    h = model.hidden
    matrices = h * (model.q_width + 2 * model.kv_width) + model.q_width * h
    bias = (model.q_width + 2 * model.kv_width) / tp + h if model.has_bias else 0.0
    return matrices / tp + bias + (2 if model.norm == "layernorm" else 1) * h


@lru_cache(maxsize=4096)
def cross_decoder_layer(model: ModelSpec, shape: LayerShape, encoder_seq: int) -> LayerGraph:
    """A T5 decoder layer on ``shape`` (decoder tokens): causal self-attention, cross-attention over
    ``encoder_seq`` encoder outputs, MLP. Cross-attention adds a TP all-reduce pair like self-attention
    (row-parallel output projection, column-parallel input; Shoeybi et al. 2019 §3)."""
    self_layer = decoder_layer(model, shape)
    ops = list(self_layer.ops)
    split = next(i for i, op in enumerate(ops) if op.name == "post_attention_norm")
    ops[split:split] = cross_attention_ops(model, shape, encoder_seq)
    coll = list(self_layer.collectives)
    extra = tp_collectives(shape.local_tokens, model.hidden, shape.act_bytes, shape)
    coll += [
        c._replace(name="cross_" + c.name, count_fwd=c.count_fwd // 2, count_bwd=c.count_bwd // 2)
        for c in extra
    ]
    params = layer_weight_params(model, shape.tp) + cross_attention_weight_params(model, shape.tp)
    return LayerGraph("cross_decoder_layer", tuple(ops), tuple(coll), params)


def patch_embedding_weight_params(model: ModelSpec, seq_length: int) -> float:
    """ViT input: patch projection (c·p²)·h + bias h, class token h, learned positions s·h (replicated)."""
    c, p, h = model.image_channels, model.patch_size or 1, model.hidden
    return c * p * p * h + h + h + seq_length * h


@lru_cache(maxsize=1024)
def patch_embedding_block(model: ModelSpec, shape: LayerShape) -> LayerGraph:
    """ViT patch embedding: GEMM (b·s) × h × (c·p²) on the flattened patches, plus position add and
    dropout (Dosovitskiy et al. 2021 Eq. 1). Replicated over TP (small): no collective."""
    c, p, h, ab = model.image_channels, model.patch_size or 1, model.hidden, shape.act_bytes
    tokens = shape.local_tokens
    ops = (
        _gemm("patch_projection", 1, tokens, h, c * p * p),
        _memory("position_add", 3 * ab * tokens * h),
    )
    return LayerGraph(
        "patch_embedding", ops, (), patch_embedding_weight_params(model, shape.seq_length)
    )


def classifier_weight_params(model: ModelSpec) -> float:
    """ViT head: h → classes (``vocab``) with bias, and the final norm; replicated over TP."""
    norm = (2 if model.norm == "layernorm" else 1) * model.hidden
    return model.vocab * model.hidden + model.vocab + norm


@lru_cache(maxsize=1024)
def classifier_block(model: ModelSpec, shape: LayerShape) -> LayerGraph:
    """ViT head: final norm on all tokens, then a linear layer h → classes (``vocab``) on the class
    token of each sample (Dosovitskiy et al. 2021 Eq. 4); replicated over TP."""
    h, ab = model.hidden, shape.act_bytes
    ops = (
        _memory("final_norm", 2 * ab * shape.sp_tokens * h),
        _gemm("classifier", 1, shape.micro_batch, model.vocab, h),
    )
    return LayerGraph("classifier", ops, (), classifier_weight_params(model))


def decoder_seq(model: ModelSpec, seq_length: int) -> int:
    """Decoder (target) length of a T5 model: decoder_seq_length, default the plan's seq_length."""
    return model.decoder_seq_length or seq_length


def cross_layer_extra_activation_bytes(
    model: ModelSpec, shape: LayerShape, encoder_seq: int, recompute: str
) -> float:
    """Stored activations the cross-attention adds to a decoder layer, per micro-batch (Korthikanti et
    al. 2022 §4.1 counting applied to the cross block): norm input and residual mask 2+1 per decoder
    token·h, Q and projection input 2·q/t per decoder token, K and V 2·2kv/t per encoder token, and the
    attention internals (flash: fp32 log-sum-exp, 4·a/t per decoder token). Full recompute keeps none."""
    if recompute == "full":
        return 0.0
    ab, t, h = shape.act_bytes, shape.tp, model.hidden
    tokens = shape.local_tokens
    enc_tokens = shape.micro_batch * encoder_seq / shape.cp
    mask = 1.0 if model.has_dropout else 0.0
    sp_div = t if shape.sequence_parallel else 1
    kept = (
        tokens * h * (ab + mask) / sp_div
        + (tokens * 2 * ab * model.q_width + enc_tokens * 2 * ab * model.kv_width) / t
    )
    if recompute == "none":
        if shape.attention == "flash":
            kept += tokens * model.heads * 4.0 / t
        else:
            kept += (
                tokens * model.heads * encoder_seq * ((2 * ab + 1) if model.has_dropout else ab) / t
            )
    return kept


__all__ = [
    "classifier_block",
    "classifier_weight_params",
    "cross_attention_ops",
    "cross_attention_weight_params",
    "cross_decoder_layer",
    "cross_layer_extra_activation_bytes",
    "decoder_seq",
    "encoder_layer",
    "layer_kinds",
    "layer_models",
    "patch_embedding_block",
    "patch_embedding_weight_params",
]
