"""Op graph of a mixture-of-experts layer (and of the dense / MTP layers of an MoE or MLA model).

One MoE layer on one GPU, one micro-batch (Megatron-Core's MoE layer, megatron/core/transformer/moe):

1. the attention half (graph.mla: MLA or GQA, windowed or not);
2. pre-MLP norm, router GEMM T·E·h and its softmax/top-k (memory-bound, fp32 scores);
3. permute: the T tokens are copied into k expert-ordered rows (memory-bound gather);
4. dispatch: the rows travel to the ranks holding their experts over the "ep" group (all-to-all,
   all-gather, or DeepEP's deduplicating kernels), then over "etp" when experts are tensor-parallel;
5. grouped GEMM: each of the E/ep local experts multiplies its own batch of m = R/(E/ep) rows
   (R rows on the busiest rank, see graph.routing.routed_load_factor), efficiency from
   cost.compute's wave/tile model for a batch of E/ep GEMMs;
6. combine (the reverse collective) and un-permute (weighted sum of the k copies);
7. shared experts, a tensor-parallel dense MLP beside the routed ones (DeepSeekMoE §3).

The ops, collectives and kept bytes of steps 2-7 (and of a dense layer's MLP) are graph.moe_mlp's; this
module assembles the layer from them and the attention half, splits its weights between the dense and
the expert gradient groups, and builds the MTP module.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from paraplan.graph.mla import (
    attention_activation_bytes,
    attention_half_collectives,
    attention_half_ops,
    core_attention_ops,
)
from paraplan.graph.moe_mlp import (
    dense_mlp_activation_bytes,
    dense_mlp_ops,
    dispatch_collectives,
    expert_knob_parts,
    fp8_cast_op,
    fuses_permutes,
    mlp_tp_collectives,
    moe_mlp_activation_bytes,
    moe_tokens,
    routed_rows,
    router_ops,
)
from paraplan.graph.ops import (
    Collective,
    ExpertShape,
    LayerGraph,
    Op,
    mark_recomputed,
)
from paraplan.graph.transformer import (
    LayerShape,
    _gemm,
    _memory,
    lm_head_block,
    norm_kernel,
    with_expert,
)
from paraplan.specs.model import ModelSpec
from paraplan.specs.moe_model import (
    attention_params,
    expert_params,
    mlp_params,
    moe_shaped,  # noqa: F401 (re-exported: step.build)
    shared_width,
)


@dataclass(frozen=True, eq=False)
class MoELayerGraph(LayerGraph):
    """A layer of an MoE/MLA model: ``weight_params`` are the dense-gradient-group parameters on this
    GPU, ``expert_weight_params`` the routed experts' (reduced over the expert-data-parallel group)."""

    expert_weight_params: float = 0.0
    activation_bytes: float = (
        0.0  # bytes kept for backward (one micro-batch), after recompute_modules
    )
    dispatch_buffer_bytes: float = 0.0  # send + receive buffers of the dispatch (transient)


# Megatron-LM recompute module -> the ops it re-runs (selective recomputation by module name).
def window_share(model: ModelSpec) -> float:
    """Share of the layers that use the sliding window: 1 for pattern 0, (n−1)/n for every n-th full."""
    if model.sliding_window is None:
        return 0.0
    n = model.sliding_window_pattern
    return 1.0 if n == 0 else (n - 1) / n


def layer_window(model: ModelSpec) -> tuple[int | None, float]:
    """(window, share of windowed layers) of the attention of one layer block: a windowed model's block stands for
    its window pattern (moe_model_layer)."""
    return model.sliding_window, window_share(model)


@lru_cache(maxsize=4096)
def layer_core_ops(model: ModelSpec, shape: LayerShape) -> tuple[Op, ...]:
    """The core attention ops of one layer (graph.mla.core_attention_ops at layer_window), marked for the shape's
    recompute modules as _expert_free_parts marks them: the ops of a dense or MoE layer that read the
    context-parallel split beyond the local tokens (graph.transformer.cp_free_key). Memoised: the dense layer, the MoE
    layer and the MTP module ask for the same shape's."""
    return tuple(
        mark_recomputed(
            core_attention_ops(model, shape, *layer_window(model)), shape.recompute_modules
        )
    )


NO_EXPERT = ExpertShape()


@lru_cache(maxsize=4096)
def ops_expert_knobs(expert: ExpertShape, moe: bool) -> ExpertShape:
    """The expert knobs a layer's ops, parameters and memory read: ep, etp, capacity and balance of an
    MoE layer, and whether the dispatcher fuses the permutations (graph.moe_mlp.fuses_permutes: Hybrid-EP
    keeps its name; another dispatcher changes only the collectives, the a2a-overlap switch nothing of the
    graph); none of a dense layer's."""
    if not moe:
        return NO_EXPERT
    kept = expert.dispatcher if fuses_permutes(expert) else "alltoall"
    return expert._replace(dispatcher=kept, a2a_overlap=False)


@lru_cache(maxsize=4096)
def without_a2a_overlap(expert: ExpertShape) -> ExpertShape:
    """The expert knobs with the a2a-overlap switch off (step.build.block_cost_facts costs the MoE kinds so)."""
    return expert._replace(a2a_overlap=False)


@lru_cache(maxsize=4096)
def moe_model_layer(model: ModelSpec, shape: LayerShape, moe: bool) -> MoELayerGraph:
    """All ops of one layer of an MoE / MLA / windowed model (one micro-batch, one GPU): the attention
    half, then the MoE MLP (``moe``) or the dense MLP of width ffn_hidden. A windowed model's layer
    block stands for its window pattern (the attention's score share is the pattern mean).

    The ops are built once per ops_expert_knobs knobs: another dispatcher takes that graph with its own
    collectives, the a2a-overlap switch and a dense layer's expert knobs take it as is (the same values);
    the parts that read no expert knob (_expert_free_parts) are built once for every expert option."""
    base = ops_expert_knobs(shape.expert, moe)
    if base != shape.expert:
        graph = moe_model_layer(model, with_expert(shape, base), moe)
        if moe and shape.expert.dispatcher != base.dispatcher:
            parts = _shared_expert_free_parts(model, with_expert(shape, NO_EXPERT), moe)
            graph = replace(graph, collectives=_layer_collectives(model, shape, moe, parts))
        return graph
    return _assemble_layer(
        model, shape, moe, _shared_expert_free_parts(model, with_expert(shape, NO_EXPERT), moe)
    )


def build_moe_model_layer(model: ModelSpec, shape: LayerShape, moe: bool) -> MoELayerGraph:
    """moe_model_layer's graph built from scratch for exactly this shape (no cache, no sharing)."""
    return _assemble_layer(model, shape, moe, _expert_free_parts(model, shape, moe))


def _expert_free_parts(model: ModelSpec, shape: LayerShape, moe: bool) -> tuple:
    """The parts of a layer that read no expert knob, marked for the shape's recompute modules: (ops before the
    routed experts: attention half, pre-MLP norm, router; ops after them: shared experts or the dense MLP, residual;
    the attention half's collectives; the shared experts' or dense MLP's TP collectives)."""
    h, ab, modules = model.hidden, shape.act_bytes, shape.recompute_modules
    before = attention_half_ops(model, shape, *layer_window(model))
    rows = shape.sp_tokens
    before.append(
        _memory("post_attention_norm", 2 * ab * rows * h, kernel=norm_kernel(model, rows, h))
    )
    after, after_coll = [], []
    if moe:
        before += router_ops(model, shape)
        if model.shared_experts:
            after += dense_mlp_ops(model, shape, shared_width(model), "shared_expert")
            after_coll += mlp_tp_collectives(shape, h, "shared_expert")
    else:
        after += dense_mlp_ops(model, shape, model.ffn_hidden, "mlp")
        after_coll += mlp_tp_collectives(shape, h, "mlp")
    after.append(_memory("mlp_residual", 3 * ab * rows * h, kernel=("add", rows, float(h))))
    return (
        mark_recomputed(before, modules),
        mark_recomputed(after, modules),
        tuple(attention_half_collectives(model, shape)),
        tuple(after_coll),
    )


# keyed on the expert-free shape (graph.transformer.with_expert(shape, NO_EXPERT)): one build for every expert option
_shared_expert_free_parts = lru_cache(maxsize=4096)(_expert_free_parts)


def expert_free_ops(model: ModelSpec, shape: LayerShape, moe: bool) -> tuple[Op, ...]:
    """The ops of moe_model_layer's layer that read no expert knob (its ops less expert_knob_parts'), in order."""
    before, after, _, _ = _shared_expert_free_parts(model, with_expert(shape, NO_EXPERT), moe)
    return (*before, *after)


def _assemble_layer(model: ModelSpec, shape: LayerShape, moe: bool, parts: tuple) -> MoELayerGraph:
    """A layer's graph from its _expert_free_parts and the shape's expert knobs: the routed experts' ops between the
    two op parts, the dispatch / combine between the two collective parts, as build_moe_model_layer lists them."""
    before, after, _, _ = parts
    expert, modules, t = shape.expert, shape.recompute_modules, shape.tp
    if moe:
        routed, trailing = expert_knob_parts(model, shape, expert)
    else:  # a dense layer's fp8 casts have no routed rows
        routed, trailing = (
            [],
            ([fp8_cast_op(model, shape, 0.0, False)] if shape.dtype == "fp8" else []),
        )
    ops = before + mark_recomputed(routed, modules) + after + mark_recomputed(trailing, modules)
    coll = _layer_collectives(model, shape, moe, parts)
    weights, experts = layer_weight_split(model, t, expert, moe)
    acts, buffers = moe_layer_memory_bytes(model, shape, moe)
    return MoELayerGraph(
        "moe_layer" if moe else "dense_layer",
        ops,
        coll,
        weights,
        expert_weight_params=experts,
        activation_bytes=acts,
        dispatch_buffer_bytes=buffers,
    )


def _layer_collectives(
    model: ModelSpec, shape: LayerShape, moe: bool, parts: tuple
) -> tuple[Collective, ...]:
    """Collectives of one layer from its _expert_free_parts: the attention half's, then the MoE MLP's dispatch/combine
    at the shape's expert knobs, then the shared experts' TP collectives, or the dense MLP's."""
    _, _, attention_coll, after_coll = parts
    return (
        attention_coll
        + (tuple(dispatch_collectives(model, shape, shape.expert)) if moe else ())
        + after_coll
    )


@lru_cache(maxsize=16384)
def moe_layer_memory_bytes(model: ModelSpec, shape: LayerShape, moe: bool) -> tuple[float, float]:
    """(bytes kept for backward, dispatch buffer bytes) of one layer at the shape's expert knobs: moe_layer_activation_bytes,
    and the dispatch's send + receive buffers, b·h·(T·k + R) elements of the activation type (none in a dense layer);
    at the knobs moe_model_layer builds the layer with (ops_expert_knobs). Memoised: the MoE layer and MTP module of
    a shape, and the search's memory floors of its recompute modes, ask again."""
    shape = with_expert(shape, ops_expert_knobs(shape.expert, moe))
    acts = moe_layer_activation_bytes(model, shape, moe)
    if not moe:
        return acts, 0.0
    return acts, shape.act_bytes * model.hidden * (
        moe_tokens(shape) * model.top_k + routed_rows(model, shape, shape.expert)
    )


def moe_layer_activation_bytes(model: ModelSpec, shape: LayerShape, moe: bool) -> float:
    """Bytes one layer keeps for backward under the shape's recompute modules (attention half from
    graph.mla.attention_activation_bytes, then the MoE or dense MLP)."""
    modules = shape.recompute_modules
    acts = attention_activation_bytes(model, shape, modules, "core_attn" in modules)
    if moe:
        return acts + moe_mlp_activation_bytes(model, shape, shape.expert, modules)
    return acts + dense_mlp_activation_bytes(model, shape, modules)


@lru_cache(maxsize=4096)
def layer_weight_split(
    model: ModelSpec, tp: int, expert: ExpertShape, moe: bool
) -> tuple[float, float]:
    """(dense-group, expert-group) parameters of one layer on one GPU. Attention: MLA's down
    projections and latent norms are duplicated on every TP rank, the rest split by t (GQA: all
    matrices split by t); two norms replicated. MoE MLP: router E·h replicated, shared experts
    split by t, routed experts (E/ep)·P_expert/etp in the expert group."""
    from paraplan.specs.moe_model import mla_params

    norms = (2 if model.norm == "layernorm" else 1) * 2 * model.hidden
    if model.is_mla:
        parts = mla_params(model)
        duplicated = sum(
            v for k, v in parts.items() if k in ("q_down", "q_norm", "kv_down", "kv_norm")
        )
        attention = duplicated + (attention_params(model) - duplicated) / tp
    else:
        attention = attention_params(model) / tp
    if not moe:
        return attention + norms + mlp_params(model, model.ffn_hidden) / tp, 0.0
    shared = mlp_params(model, shared_width(model)) / tp if model.shared_experts else 0.0
    routed = (model.experts / expert.ep) * expert_params(model) / expert.etp
    return attention + norms + model.experts * model.hidden + shared, routed


@lru_cache(maxsize=16384)
def mtp_block(model: ModelSpec, shape: LayerShape) -> MoELayerGraph:
    """One DeepSeek-V3 MTP module (§2.2, Fig. 3) on the last stage: norms of the hidden state and
    of the next token's embedding, projection 2h→h, one Transformer block (MoE when the model is),
    then the shared output head and its cross-entropy again (graph.transformer.lm_head_block)."""
    h = model.hidden
    layer = moe_model_layer(model, shape, model.is_moe)
    entry, head = _mtp_entry_and_head(model, with_expert(shape, NO_EXPERT))
    ops = (*entry, *layer.ops, *head.ops)
    norms = 3 * (2 if model.norm == "layernorm" else 1) * h
    weights = layer.weight_params + 2 * h * h / shape.tp + norms
    acts, buffers = mtp_memory_bytes(model, shape)
    return MoELayerGraph(
        "mtp",
        ops,
        layer.collectives + head.collectives,
        weights,
        expert_weight_params=layer.expert_weight_params,
        activation_bytes=acts,
        dispatch_buffer_bytes=buffers,
    )


def mtp_memory_bytes(model: ModelSpec, shape: LayerShape) -> tuple[float, float]:
    """(bytes kept for backward, dispatch buffer bytes) of one MTP module: its Transformer block's
    (moe_layer_memory_bytes), the projection's inputs and output (3·b·s·h) and the fp32 logits of its
    output head (4·b·s·V/t)."""
    acts, buffers = moe_layer_memory_bytes(model, shape, model.is_moe)
    tokens = shape.local_tokens
    return (
        acts + shape.act_bytes * tokens * 3 * model.hidden + 4.0 * tokens * model.vocab / shape.tp,
        buffers,
    )


def mtp_outer_ops(model: ModelSpec, shape: LayerShape) -> tuple[Op, ...]:
    """The MTP module's ops around its Transformer block (moe_model_layer's ops at the same shape): mtp_block's ops are
    the entry ops, the block's, then the output head's."""
    entry, head = _mtp_entry_and_head(model, with_expert(shape, NO_EXPERT))
    return (*entry, *head.ops)


@lru_cache(maxsize=4096)
def _mtp_entry_and_head(model: ModelSpec, shape: LayerShape) -> tuple[tuple[Op, ...], LayerGraph]:
    """The MTP module's ops before its Transformer block (embedding lookup, norms, projection 2h→h) and its output
    head (graph.transformer.lm_head_block): they read no expert knob, one build for every expert option."""
    h, ab, tokens = model.hidden, shape.act_bytes, shape.local_tokens
    entry = (
        _memory("mtp_embedding_lookup", 2 * ab * tokens * h),
        _memory("mtp_norms", 4 * ab * shape.sp_tokens * h),
        _gemm("mtp_projection", 1, tokens, h / shape.tp, 2 * h),
    )
    return entry, lm_head_block(model, shape, True)
