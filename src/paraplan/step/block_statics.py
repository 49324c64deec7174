"""What a block kind's ops fix whatever the spans: its summed op times (step.block_sums.block_compute) and its weight
tensors (graph.ops.weight_tensor_stats), per layer shape, costing no collective. The estimator's block costs
(step.build.kind_cost_facts) and the search's row tables (search.table.RowTable: the floors of every row's layer
work, the small-tensor widths) read them."""

from __future__ import annotations

from functools import lru_cache

from paraplan.graph.layers import cp_split_core, decoder_core_ops
from paraplan.graph.moe import NO_EXPERT, moe_shaped, ops_expert_knobs, without_a2a_overlap
from paraplan.graph.ops import LayerGraph, weight_stat_fields, weight_tensor_stats
from paraplan.graph.transformer import LayerShape, cp_free_key, cp_free_memo, with_expert
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.step.block_sums import block_compute
from paraplan.step.blocks import BLOCK_KINDS, Width


def kind_shape(model: ModelSpec, shape: LayerShape, name: str) -> LayerShape:
    """The layer shape a block kind is costed at (``kind_cost_facts``): without expert knobs for an expert-free
    kind of an MoE-shaped model, without a2a overlap for its other kinds; ``shape`` for a dense model."""
    if not moe_shaped(model):
        return shape
    if BLOCK_KINDS[name].expert_free:
        return with_expert(shape, NO_EXPERT)
    if shape.expert.a2a_overlap:
        return with_expert(shape, without_a2a_overlap(shape.expert))
    return shape


def kind_statics(model: ModelSpec, system: SystemSpec, shape: LayerShape, name: str):
    """(compute, weight tensors, largest weight params, small weight numels) of ``kind_cost_facts``: what the
    kind's ops fix whatever the spans (``_graph_statics``), without costing a collective."""
    return _graph_statics(model, system, name, kind_shape(model, shape, name), model)


def kind_small_width(model: ModelSpec, shapes, name: str) -> int:
    """The most small weight tensors ``kind_statics`` lists (its fourth entry) at any of ``shapes``, from the kind's
    weight tensors alone (``_weight_stats``: no op costed): the width a row table pads its lists to
    (search.table.RowTable) needs every layer shape's count, its costs only the shapes it evaluates. A kind that
    declares no core ops at a shape (BlockKind.core_ops ``()``: the embedding, the LM head) has every op a function of
    graph.transformer.cp_free_key(shape) (tests/search/test_cp_shared_floors.py), and a dense decoder layer every op
    but its core attention (``splits_core``), which holds no weight tensor (graph.ops._is_weight_gemm): one shape of
    each key is walked (the core ops of the input and output blocks alone asked: a layer kind's are a graph)."""
    kind, seen, splits = BLOCK_KINDS[name], {}, kind_splits(model, name)
    for shape in shapes:
        if splits and cp_split_core(shape):
            shared = True
        else:  # the input and output blocks' core ops are declared without building a graph
            shared = kind.every_model and kind.core_ops(model, shape) == ()
        seen.setdefault(cp_free_key(shape) if shared else shape, shape)
    shapes = (_statics_shape(model, kind_shape(model, shape, name)) for shape in seen.values())
    return max(len(_weight_stats(model, name, shape, model)[2]) for shape in shapes)


def kind_splits(model: ModelSpec, name: str) -> bool:
    """Whether the kind is a dense decoder layer (not of an MoE-shaped model or an encoder), whose ops split into its
    core attention and ops of graph.transformer.cp_free_key alone at the shapes graph.layers.cp_split_core admits."""
    return name == "decoder" and not moe_shaped(model) and model.architecture != "encoder"


def splits_core(model: ModelSpec, shape: LayerShape, name: str) -> bool:
    """Whether the kind's ops split at ``shape`` (``kind_splits``, graph.layers.decoder_core_ops)."""
    return kind_splits(model, name) and cp_split_core(shape)


def split_computes(model: ModelSpec, system: SystemSpec, shape: LayerShape, name: str):
    """(block_compute of the kind's ops but its core attention, block_compute of the core attention) at ``shape``: the
    first costed once per cp_free_key (``_rest_compute``), the second once per distinct core ops; None where the kind
    does not split (``splits_core``) or the key's first graph does not hold the core ops as listed."""
    if not splits_core(model, shape, name):
        return None
    rest = _rest_compute(model, shape, system, name)
    return (
        None
        if rest is None
        else (rest, _core_compute(decoder_core_ops(model, shape), system, shape.dtype))
    )


@cp_free_memo
def _rest_compute(model: ModelSpec, shape: LayerShape, system: SystemSpec, name: str):
    """split_computes' first part: the ops of the kind's graph at ``shape`` but its core attention, summed (a function
    of cp_free_key: graph.layers.decoder_core_ops); None when the graph does not hold every core op."""
    graph, core = BLOCK_KINDS[name].graph(model, shape), decoder_core_ops(model, shape)
    rest = tuple(op for op in graph.ops if op not in core)
    if len(rest) != len(graph.ops) - len(core):
        return None
    return block_compute.__wrapped__(LayerGraph(name, rest, (), 0.0), system, shape.dtype)


@lru_cache(maxsize=16384)
def _core_compute(core: tuple, system: SystemSpec, dtype: str):
    """split_computes' second part: block_compute of the core attention ops (keyed on their values)."""
    return block_compute.__wrapped__(LayerGraph("core attention", core, (), 0.0), system, dtype)


def _statics_shape(model: ModelSpec, shape: LayerShape) -> LayerShape:
    """The shape a block's statics are worked out at: its ops', which neither the dispatcher nor the a2a-overlap
    switch changes (graph.moe.ops_expert_knobs)."""
    if moe_shaped(model) and shape.expert != NO_EXPERT:
        return with_expert(shape, ops_expert_knobs(shape.expert, True))
    return shape


def _graph_statics(
    model: ModelSpec, system: SystemSpec, name: str, shape: LayerShape, width: Width
):
    """(block_compute, and weight_tensor_stats's count, largest and small tensors) of a block built at ``width``
    (the model's own, or a per-stage plan's layer_widths group's: step.blocks.BlockRef.width): they read its ops
    only (``_statics_shape``): shared."""
    return _statics_of(model, system, name, _statics_shape(model, shape), width)


@lru_cache(maxsize=65536)
def _weight_stats(model: ModelSpec, name: str, shape: LayerShape, width: Width) -> tuple:
    """graph.ops.weight_tensor_stats of the block kind's graph at ``width`` for exactly this shape (one walk)."""
    graph = BLOCK_KINDS[name].build(
        model, width, shape
    )  # the builders are cached: the same graph as the caller's
    return weight_tensor_stats(graph, *weight_stat_fields(width))


@lru_cache(maxsize=65536)
def _statics_of(model: ModelSpec, system: SystemSpec, name: str, shape: LayerShape, width: Width):
    """_graph_statics of the block kind's graph at ``width`` for exactly this shape (the kernels the host issues:
    the widths' bias and qkv bias)."""
    graph = BLOCK_KINDS[name].build(model, width, shape)
    tensors, largest, small = _weight_stats(model, name, shape, width)
    bias = (width.has_bias, width.has_qkv_bias)
    return block_compute(graph, system, shape.dtype, bias), tensors, largest, small
