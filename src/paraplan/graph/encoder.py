"""Blocks of models beyond decoder-only GPT: encoders (BERT, ViT), T5's encoder-decoder, layer lists.

A model is an ordered list of blocks (``model_blocks``): an input block (token embedding, or
ViT's patch embedding), the transformer layers (each with its own widths when the model gives
``layer_widths``), and an output block (LM head, or ViT's classification head). A stage of a
non-uniform plan holds a contiguous range of that list. The op types and cost facts are those of
``graph/transformer.py``; only what differs is built here:

- encoder layer: the decoder layer with bidirectional attention, every score computed (no causal
  discount; BERT, Devlin et al. 2019 §3; ViT, Dosovitskiy et al. 2021 §3.1);
- T5 decoder layer: causal self-attention + cross-attention whose queries come from the decoder
  and keys/values from the encoder output + MLP (Raffel et al. 2020 §2.1; Vaswani et al. 2017 §3.2.3);
- ViT patch embedding: one GEMM of (b·s) × h × (c·p²) (Dosovitskiy et al. 2021 Eq. 1) and the
  classification head on the class token only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from paraplan.graph.ops import RECOMPUTE_MODULE_OPS, LayerGraph, Op
from paraplan.graph.layers import decoder_layer
from paraplan.graph.transformer import (
    LayerShape,
    _gemm,
    _memory,
    _tp_collectives,
    embedding_block,
    layer_weight_params,
    lm_head_block,
)
from paraplan.specs.model import ModelSpec

BlockKind = Literal[
    "embedding", "patch_embedding", "decoder", "encoder", "cross_decoder", "lm_head", "classifier"
]


@dataclass(frozen=True)
class BlockRef:
    """One entry of a model's block list: its kind and the shape (widths) it is built with."""

    kind: BlockKind
    width: ModelSpec

    @property
    def is_layer(self) -> bool:
        return self.kind in ("decoder", "encoder", "cross_decoder")


def _layer_models(model: ModelSpec) -> list[ModelSpec]:
    """The shape of each transformer layer in order (the model's own, or its layer_widths groups)."""
    if model.layer_widths is None:
        return [model] * model.total_layers
    out: list[ModelSpec] = []
    for group in model.layer_widths:
        out += [model.widened(group)] * group.count
    return out


@lru_cache(maxsize=256)
def model_blocks(model: ModelSpec) -> tuple[BlockRef, ...]:
    """The model as an ordered block list: input block, transformer layers, output block."""
    layers = _layer_models(model)
    if model.architecture == "encoder_decoder":
        n_enc = model.n_encoder_layers
        kinds = ["encoder"] * n_enc + ["cross_decoder"] * model.layers
    elif model.architecture == "encoder":
        kinds = ["encoder"] * model.layers
    else:
        kinds = ["decoder"] * model.layers
    first = BlockRef("patch_embedding" if model.is_vit else "embedding", layers[0])
    last = BlockRef("classifier" if model.is_vit else "lm_head", layers[-1])
    return (first, *(BlockRef(k, m) for k, m in zip(kinds, layers)), last)


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
    extra = _tp_collectives(shape.local_tokens, model.hidden, shape.act_bytes, shape)
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


def encoder_output_seq(model: ModelSpec, seq_length: int) -> int:
    """Encoder length of an encoder-decoder model: the plan's seq_length."""
    return seq_length


def decoder_seq(model: ModelSpec, seq_length: int) -> int:
    """Decoder (target) length of a T5 model: decoder_seq_length, default the plan's seq_length."""
    return model.decoder_seq_length or seq_length


def block_graph(
    model: ModelSpec, ref: BlockRef, shape: LayerShape, first_and_last: bool = False
) -> LayerGraph:
    """The op graph of one block of ``model`` (``ref`` from ``model_blocks``) on ``shape`` (encoder length);
    T5's decoder-side blocks run on the decoder length."""
    width = ref.width
    dec_shape = shape._replace(seq_length=decoder_seq(model, shape.seq_length))
    if ref.kind == "embedding":
        return embedding_block(width, shape)
    if ref.kind == "patch_embedding":
        return patch_embedding_block(width, shape)
    if ref.kind == "decoder":
        return decoder_layer(width, shape)
    if ref.kind == "encoder":
        return encoder_layer(width, shape)
    if ref.kind == "cross_decoder":
        return cross_decoder_layer(width, dec_shape, shape.seq_length)
    if ref.kind == "classifier":
        return classifier_block(width, shape)
    head_shape = dec_shape if model.architecture == "encoder_decoder" else shape
    return lm_head_block(width, head_shape, first_and_last)


def boundary_bytes(
    model: ModelSpec, blocks: tuple[BlockRef, ...], after: int, shape: LayerShape
) -> float:
    """Activation bytes sent forward after block ``after`` per micro-batch (gradients of the same size
    come back): b·(s/c)·h half-precision elements split over TP (Narayanan et al. 2021 §4.1); inside
    T5's decoder the encoder output travels along with the decoder state (every decoder layer reads it)."""
    ref = blocks[min(after, len(blocks) - 1)]
    nxt = blocks[min(after + 1, len(blocks) - 1)]
    if (
        nxt.kind in ("cross_decoder", "lm_head")
        and model.architecture == "encoder_decoder"
        and ref.kind != "embedding"
    ):
        dec = decoder_seq(model, shape.seq_length)
        enc_bytes = (
            shape.act_bytes * shape.micro_batch * shape.seq_length * ref.width.hidden / shape.cp
        )
        dec_bytes = shape.act_bytes * shape.micro_batch * dec * ref.width.hidden / shape.cp
        return (enc_bytes + (dec_bytes if ref.kind == "cross_decoder" else 0.0)) / shape.tp
    return shape.act_bytes * shape.local_tokens * ref.width.hidden / shape.tp


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


@lru_cache(maxsize=256)
def recomputable_names(
    model: ModelSpec, seq_length: int, attention: str, dtype: str
) -> frozenset[str]:
    """What a per-op recompute list (StagePlanSpec ``recompute_ops``) may name for this model: every module
    of graph.ops.RECOMPUTE_MODULE_OPS whose ops its layers have, and those ops."""
    shape = LayerShape(
        tp=1,
        cp=1,
        micro_batch=1,
        seq_length=seq_length,
        sequence_parallel=False,
        attention=attention,
        dtype=dtype,
    )
    present: set[str] = set()
    for ref in {r.kind: r for r in model_blocks(model) if r.is_layer}.values():
        present |= {op.name for op in block_graph(model, ref, shape).ops}
    names: set[str] = set()
    for module, ops in RECOMPUTE_MODULE_OPS.items():
        found = present.intersection(ops)
        if found:
            names |= {module, *found}
    return frozenset(names)


def recomputable_modules(
    model: ModelSpec, seq_length: int, attention: str, dtype: str
) -> tuple[str, ...]:
    """The module names among ``recomputable_names``, in RECOMPUTE_MODULE_OPS order."""
    allowed = recomputable_names(model, seq_length, attention, dtype)
    return tuple(m for m in RECOMPUTE_MODULE_OPS if m in allowed)


__all__ = [
    "BlockKind",
    "BlockRef",
    "block_graph",
    "boundary_bytes",
    "classifier_block",
    "classifier_weight_params",
    "cross_attention_ops",
    "cross_decoder_layer",
    "cross_layer_extra_activation_bytes",
    "encoder_layer",
    "model_blocks",
    "patch_embedding_block",
    "recomputable_modules",
    "recomputable_names",
]
