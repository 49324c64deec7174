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

Tokens per rank T: b·s/c, divided by t when tensor parallelism is on (Megatron-Core requires
sequence parallelism with MoE and TP: the MoE MLP sees the SP shard). Rows per rank
R = T·k·etp·load (ETP ranks all-gather their rows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from paraplan.graph.routing import routed_load_factor
from paraplan.graph.mla import (
    attention_activation_bytes,
    attention_half_collectives,
    attention_half_ops,
    core_attention_ops,
)
from paraplan.graph.ops import (
    RECOMPUTE_MODULE_OPS,
    Collective,
    ExpertShape,
    LayerGraph,
    Op,
    mark_recomputed,
)  # noqa: F401 (re-exported)
from paraplan.graph.transformer import (
    LayerShape,
    _gemm,
    _memory,
    lm_head_block,
    mlp_intermediate_bytes,
    with_expert,
)
from paraplan.specs.model import ModelSpec
from paraplan.specs.moe_model import (
    attention_params,
    expert_params,
    mlp_params,
    moe_shaped,
    shared_width,
)  # noqa: F401 (moe_shaped re-exported)

ROUTER_SCORE_BYTES = (
    4  # router logits/probabilities in fp32 (Megatron-Core moe_router_dtype / router softmax)
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


def moe_tokens(shape: LayerShape) -> float:
    """T: tokens one rank routes per micro-batch, b·s/c, divided by t with tensor parallelism."""
    return shape.local_tokens / shape.tp if shape.tp > 1 else float(shape.local_tokens)


def routed_rows(model: ModelSpec, shape: LayerShape, expert: ExpertShape) -> float:
    """R: expert rows the busiest rank computes, T·k·etp·load (graph.routing.routed_load_factor)."""
    load = routed_load_factor(
        moe_tokens(shape), model.top_k, expert.ep, expert.balance, expert.capacity_factor
    )
    return moe_tokens(shape) * model.top_k * expert.etp * load


def _grouped_gemm(name: str, experts: int, m: int, n: float, k: float) -> Op:
    """Grouped GEMM of ``experts`` (m, n, k) GEMMs: FLOPs as graph.transformer._gemm, costed per expert
    by cost.compute.grouped_gemm_time_s."""
    return _gemm(name, experts, m, n, k, "grouped_gemm")


def router_ops(model: ModelSpec, shape: LayerShape) -> list[Op]:
    """Router GEMM T·E·h (Fedus et al. 2022 §2.1) and softmax + top-k over fp32 scores (read,
    write probabilities, read again for top-k: 3 passes over T·E·4 bytes)."""
    tokens = moe_tokens(shape)
    return [
        _gemm("router", 1, int(tokens), model.experts, model.hidden),
        _memory("router_softmax_topk", 3 * ROUTER_SCORE_BYTES * tokens * model.experts),
    ]


def expert_ops(model: ModelSpec, shape: LayerShape, expert: ExpertShape) -> list[Op]:
    """Permute, grouped expert GEMMs, activation, un-permute on the busiest rank.

    Permute reads T rows and writes the R/etp routed copies; un-permute reads them back and
    writes T rows (memory-bound gathers/scatters, 2-byte elements). With more than one local
    expert the received rows arrive in source-rank order and are re-sorted by expert before the
    GEMMs and back after them (Megatron-Core "permutation 2", sort_chunks_by_idxs, or the
    transpose-copy of drop-and-pad): one read and one write of the R/etp rows each. A dropless
    dispatch adds one host synchronisation (host_synchronises). Grouped GEMMs: E/ep experts
    each with m = ⌈R/(E/ep)⌉ rows, fc1 n = p·f_e/etp, fc2 n = h."""
    h, ab, f = model.hidden, shape.act_bytes, (model.moe_ffn_hidden or 0) // expert.etp
    tokens = moe_tokens(shape)
    rows = routed_rows(model, shape, expert)
    local = model.experts // expert.ep
    m = math.ceil(rows / local)
    p = model.mlp_input_projections
    sent = rows / expert.etp
    ops = [_memory("permute", ab * h * (tokens + sent))]
    if local > 1:  # permutation 2: received rows re-sorted from source-rank order to expert order
        ops.append(_memory("sort_chunks", 2 * ab * h * sent))
    ops += [
        _grouped_gemm("expert_fc1", local, m, p * f, h),
        _memory("expert_activation", ab * local * m * f * (3 if model.mlp == "swiglu" else 2)),
        _grouped_gemm("expert_fc2", local, m, h, f),
    ]
    if local > 1:
        ops.append(_memory("unsort_chunks", 2 * ab * h * sent))
    ops.append(_memory("unpermute", ab * h * (tokens + sent)))
    if host_synchronises(expert):
        ops.append(Op("dispatch_host_sync", "host_sync", 0.0, 0.0, 0.0, 0.0))
    return ops


def expert_knob_inputs(shape: LayerShape) -> tuple:
    """What expert_knob_ops reads of the shape besides the expert knobs (the datatype, the activation bytes, the
    tokens a rank routes; with fp8 casts also tp, the local tokens and sequence parallelism): two shapes equal
    on it give the same ops (tests/search/test_moe_search.py)."""
    fp8 = shape.dtype == "fp8"
    return (
        shape.dtype,
        shape.act_bytes,
        moe_tokens(shape),
        (shape.tp, shape.local_tokens, shape.sequence_parallel) if fp8 else (),
    )


def expert_knob_parts(
    model: ModelSpec, shape: LayerShape, expert: ExpertShape
) -> tuple[list[Op], list[Op]]:
    """The ops of an MoE layer that read the expert knobs (ep, etp, capacity, balance), in the two places the layer
    has them (_assemble_layer): expert_ops between the router and the shared experts, and at the end the fp8 casts,
    whose element count includes the routed rows; every other op of the layer is the same for every expert option."""
    trailing = (
        [fp8_cast_op(model, shape, routed_rows(model, shape, expert), True)]
        if shape.dtype == "fp8"
        else []
    )
    return expert_ops(model, shape, expert), trailing


def expert_knob_ops(model: ModelSpec, shape: LayerShape, expert: ExpertShape) -> list[Op]:
    """expert_knob_parts as one list (search.expert_floors costs the rest of the layer once: expert_computes)."""
    routed, trailing = expert_knob_parts(model, shape, expert)
    return routed + trailing


def host_synchronises(expert: ExpertShape) -> bool:
    """True when the dispatch needs the per-expert token counts on the host: every dropless dispatch
    (capacity_factor None). Megatron-Core's MoEAlltoAllTokenDispatcher.preprocess keeps
    cuda_sync_point "no_sync" only with drop-and-pad (moe_pad_expert_input_to_capacity; the counts are
    then the constant capacity) and otherwise synchronises before the EP all-to-all or the expert
    GEMMs, whose per-expert row counts (Transformer Engine GroupedLinear m_splits) are host integers."""
    return expert.capacity_factor is None


def dense_mlp_ops(model: ModelSpec, shape: LayerShape, width: int, prefix: str) -> list[Op]:
    """Tensor-parallel MLP of inner width f (a dense layer's MLP or the shared experts): column-
    parallel in-projection p·f/t, activation, row-parallel out-projection (Shoeybi et al. 2019 §3)."""
    t, tokens, ab = shape.tp, shape.local_tokens, shape.act_bytes
    return [
        _gemm(
            f"{prefix}_in_projection",
            1,
            tokens,
            model.mlp_input_projections * width / t,
            model.hidden,
        ),
        _memory(
            f"{prefix}_activation", ab * tokens * width / t * (3 if model.mlp == "swiglu" else 2)
        ),
        _gemm(f"{prefix}_out_projection", 1, tokens, model.hidden, width / t),
    ]


def mlp_tp_collectives(shape: LayerShape, hidden: int, prefix: str) -> list[Collective]:
    """TP collectives of one tensor-parallel MLP: as the attention half's (one column-parallel input,
    one row-parallel output; Korthikanti et al. 2022 §4.2.2 with SP)."""
    if shape.tp == 1:
        return []
    size = float(shape.act_bytes * shape.local_tokens * hidden)
    if shape.sequence_parallel:
        return [
            Collective(f"{prefix}_tp_all_gather", "tp", "all_gather", size, 1, 1),
            Collective(f"{prefix}_tp_reduce_scatter", "tp", "reduce_scatter", size, 1, 0),
            Collective(
                f"{prefix}_tp_input_regather", "tp", "all_gather", size, 0, 1, overlaps_with="dgrad"
            ),
            Collective(
                f"{prefix}_tp_grad_reduce_scatter",
                "tp",
                "reduce_scatter",
                size,
                0,
                1,
                overlaps_with="wgrad",
            ),
        ]
    return [
        Collective(f"{prefix}_tp_all_reduce", "tp", "all_reduce", size, 1, 0),
        Collective(
            f"{prefix}_tp_grad_all_reduce", "tp", "all_reduce", size, 0, 1, overlaps_with="wgrad"
        ),
    ]


def dispatch_collectives(
    model: ModelSpec, shape: LayerShape, expert: ExpertShape
) -> list[Collective]:
    """Dispatch and combine of one MoE layer (each once in forward and once in backward, reversed).

    alltoall (Megatron-Core MoEAlltoAllTokenDispatcher): all-to-all over "ep" of the R/etp rows
    (per-rank send buffer, the busiest rank's volume), then all-gather / reduce-scatter over "etp".
    allgather (MoEAllGatherTokenDispatcher): all-gather of the T tokens over the ep·etp ranks, and
    a reduce-scatter of the outputs. deepep (DeepEP, Zhao et al. 2025, deepseek-ai/DeepEP):
    a token is sent once per destination GPU (and once per destination NVLink domain across the
    network), kind "all_to_all_dedup", bytes = one copy of the T tokens (priced by cost.moe.moe_collective_time_s)."""
    h, ab = model.hidden, shape.act_bytes
    tokens = moe_tokens(shape)
    rows = routed_rows(model, shape, expert)
    if expert.dispatcher == "allgather":
        size = float(ab * h * tokens * expert.ep * expert.etp)
        return [
            Collective("ep_allgather_dispatch", "ep", "all_gather", size, 1, 1),
            Collective("ep_reduce_scatter_combine", "ep", "reduce_scatter", size, 1, 1),
        ]
    if expert.dispatcher == "deepep":
        load = rows / (tokens * model.top_k * expert.etp)
        size = float(ab * h * tokens * load)
        return [
            Collective("ep_deepep_dispatch", "ep", "all_to_all_dedup", size, 1, 1),
            Collective("ep_deepep_combine", "ep", "all_to_all_dedup", size, 1, 1),
        ]
    size = float(ab * h * rows / expert.etp)
    out = [
        Collective("ep_dispatch_all_to_all", "ep", "all_to_all", size, 1, 1),
        Collective("ep_combine_all_to_all", "ep", "all_to_all", size, 1, 1),
    ]
    if expert.etp > 1:
        gathered = float(ab * h * rows)
        out += [
            Collective("etp_all_gather", "etp", "all_gather", gathered, 1, 1),
            Collective("etp_reduce_scatter", "etp", "reduce_scatter", gathered, 1, 1),
        ]
    return out


def moe_mlp_activation_bytes(
    model: ModelSpec, shape: LayerShape, expert: ExpertShape, modules: tuple[str, ...]
) -> float:
    """Bytes the MoE MLP keeps for backward: pre-MLP norm input and output (SP shard, 2 B·h each),
    fp32 router probabilities 4·E per token; per routed row (R rows, the top_k copies of the tokens)
    the fc1 input h and the fc2 input f_e/etp at LayerShape.gemm_input_bytes (fp8 copies in fp8 recipes), the
    fc1 output p·f_e/etp at 2 B and the row's fp32 routing weight. The fc2 output is not kept:
    Megatron-Core's TEGroupedMLP multiplies the routing weights inside the activation
    (weighted SwiGLU, moe_apply_probs_on_input off), so un-permute is a plain scatter-add.
    Shared experts keep f_s/t × cost.memory.mlp_intermediate_bytes per token.
    ``layernorm`` drops the norm input, ``moe_act`` the activation output, ``shared_experts`` the
    shared internals, ``moe`` everything after the norm output (Megatron-LM recompute modules)."""
    h, ab, t = model.hidden, shape.act_bytes, shape.tp
    gin = shape.gemm_input_bytes
    tokens = moe_tokens(shape)
    norm = (0.0 if "layernorm" in modules else ab * tokens * h) + ab * tokens * h
    if "moe" in modules:
        return norm
    rows = routed_rows(model, shape, expert)
    f = (model.moe_ffn_hidden or 0) / expert.etp
    p = model.mlp_input_projections
    routed = rows * (
        gin * h + ab * p * f + (0.0 if "moe_act" in modules else gin * f) + ROUTER_SCORE_BYTES
    )
    router = ROUTER_SCORE_BYTES * tokens * model.experts
    shared = 0.0
    if model.shared_experts and "shared_experts" not in modules:
        fs = shared_width(model)
        shared = shape.local_tokens * fs * mlp_intermediate_bytes(model, shape) / t
    return norm + router + routed + shared


def dense_mlp_activation_bytes(
    model: ModelSpec, shape: LayerShape, modules: tuple[str, ...]
) -> float:
    """Dense MLP (Korthikanti et al. 2022 §4.1): norm input (2 B·h) and MLP input (the fc1 GEMM input,
    gemm_input_bytes·h), both SP shards; intermediates per token split by t: the fc1 output (2·f
    SwiGLU, f GeLU, at 2 B) and the fc2 GEMM input f at gemm_input_bytes; ``mlp`` drops the
    intermediates, ``layernorm`` the norm input."""
    h, ab, gin, t = model.hidden, shape.act_bytes, shape.gemm_input_bytes, shape.tp
    sp = shape.sp_tokens
    norm = (0.0 if "layernorm" in modules else ab * sp * h) + gin * sp * h
    inner = (
        0.0
        if "mlp" in modules
        else shape.local_tokens * model.ffn_hidden / t * mlp_intermediate_bytes(model, shape)
    )
    return norm + inner


def fp8_cast_op(model: ModelSpec, shape: LayerShape, rows: float, moe: bool) -> Op:
    """FP8 casts of GEMM operands (Micikevicius et al. 2022, arXiv:2209.05433): each GEMM input is
    read in bf16 (2 B) and written in fp8 (1 B), in forward the activations and in backward the
    output gradients (taken as the same element counts)."""
    t, h = shape.tp, model.hidden
    tokens = shape.local_tokens
    elems = tokens * 2 * h / max(1, t if shape.sequence_parallel else 1)
    if moe:
        elems += rows * (h + (model.moe_ffn_hidden or 0))
        if model.shared_experts:
            elems += tokens * shared_width(model) / t
    else:
        elems += tokens * model.ffn_hidden / t
    return Op("fp8_casts", "memory", 0.0, 3.0 * elems, 0.0, 3.0 * elems)


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
    MoE layer (the dispatcher changes only its collectives, the a2a-overlap switch nothing of the
    graph); none of a dense layer's."""
    return expert._replace(dispatcher="alltoall", a2a_overlap=False) if moe else NO_EXPERT


@lru_cache(maxsize=4096)
def without_a2a_overlap(expert: ExpertShape) -> ExpertShape:
    """The expert knobs with the a2a-overlap switch off (stages.block_cost_facts costs the MoE kinds so)."""
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
    before.append(_memory("post_attention_norm", 2 * ab * shape.sp_tokens * h))
    after, after_coll = [], []
    if moe:
        before += router_ops(model, shape)
        if model.shared_experts:
            after += dense_mlp_ops(model, shape, shared_width(model), "shared_expert")
            after_coll += mlp_tp_collectives(shape, h, "shared_expert")
    else:
        after += dense_mlp_ops(model, shape, model.ffn_hidden, "mlp")
        after_coll += mlp_tp_collectives(shape, h, "mlp")
    after.append(_memory("mlp_residual", 3 * ab * shape.sp_tokens * h))
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
