"""What a block kind's ops fix whatever the spans: its summed op times (step.block_sums.block_compute) and its weight
tensors (graph.ops.weight_tensor_stats), per layer shape, costing no collective. The estimator's block costs
(step.build.kind_cost_facts) and the search's row tables (search.table.RowTable: the floors of every row's layer
work, the small-tensor widths) read them."""

from __future__ import annotations

from functools import lru_cache

from paraplan.graph.moe import NO_EXPERT, moe_shaped, ops_expert_knobs, without_a2a_overlap
from paraplan.graph.ops import weight_stat_fields, weight_tensor_stats
from paraplan.graph.transformer import LayerShape, cp_free_key, with_expert
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.step.block_sums import block_compute
from paraplan.step.blocks import BLOCK_KINDS


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
    return _graph_statics(model, system, name, kind_shape(model, shape, name))


def kind_small_width(model: ModelSpec, shapes, name: str) -> int:
    """The most small weight tensors ``kind_statics`` lists (its fourth entry) at any of ``shapes``, from the kind's
    weight tensors alone (``_weight_stats``: no op costed): the width a row table pads its lists to
    (search.table.RowTable) needs every layer shape's count, its costs only the shapes it evaluates. A kind that
    declares no core ops at a shape (BlockKind.core_ops ``()``: the embedding, the LM head) has every op a function of
    graph.transformer.cp_free_key(shape) (tests/search/test_cp_shared_floors.py), its weight tensors too: one shape
    of each key is walked."""
    kind, seen = BLOCK_KINDS[name], {}
    for shape in shapes:
        seen.setdefault(cp_free_key(shape) if kind.core_ops(model, shape) == () else shape, shape)
    return max(
        len(_weight_stats(model, name, _statics_shape(model, kind_shape(model, shape, name)))[2])
        for shape in seen.values()
    )


def _statics_shape(model: ModelSpec, shape: LayerShape) -> LayerShape:
    """The shape a block's statics are worked out at: its ops', which neither the dispatcher nor the a2a-overlap
    switch changes (graph.moe.ops_expert_knobs)."""
    if moe_shaped(model) and shape.expert != NO_EXPERT:
        return with_expert(shape, ops_expert_knobs(shape.expert, True))
    return shape


def _graph_statics(model: ModelSpec, system: SystemSpec, name: str, shape: LayerShape):
    """(block_compute, and weight_tensor_stats's count, largest and small tensors) of a block: they read its ops
    only (``_statics_shape``): shared."""
    return _statics_of(model, system, name, _statics_shape(model, shape))


@lru_cache(maxsize=65536)
def _weight_stats(model: ModelSpec, name: str, shape: LayerShape) -> tuple:
    """graph.ops.weight_tensor_stats of the block kind's graph for exactly this shape (one walk)."""
    graph = BLOCK_KINDS[name].graph(
        model, shape
    )  # the builders are cached: the same graph as the caller's
    return weight_tensor_stats(graph, *weight_stat_fields(model))


@lru_cache(maxsize=65536)
def _statics_of(model: ModelSpec, system: SystemSpec, name: str, shape: LayerShape):
    """_graph_statics of the block kind's graph for exactly this shape."""
    graph = BLOCK_KINDS[name].graph(model, shape)
    tensors, largest, small = _weight_stats(model, name, shape)
    bias = (model.has_bias, model.has_qkv_bias)
    return block_compute(graph, system, shape.dtype, bias), tensors, largest, small
