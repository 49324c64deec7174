"""The decoder layer's op graph under any tensor-parallel layout: 1D (graph/transformer.py, with
2d-seq's context exchange) or the 2D SUMMA grid (graph/summa.py; docs/model.md §9)."""

from __future__ import annotations

from paraplan.graph.ops import OP_SAC, LayerGraph, Op, mark_recomputed
from paraplan.graph.summa import decoder_layer_2d
from paraplan.graph.transformer import LayerShape, attention_ops, decoder_layer_1d
from paraplan.specs.model import ModelSpec


def decoder_layer(model: ModelSpec, shape: LayerShape) -> LayerGraph:
    """All ops of one decoder layer for one micro-batch on one GPU: the SUMMA grid's graph when
    ``shape.tp_layout`` is "2d", else the 1D layer (both memoised by their builders)."""
    if shape.tp_layout == "2d":
        return decoder_layer_2d(model, shape)
    return decoder_layer_1d(model, shape)


def cp_split_core(shape: LayerShape) -> bool:
    """Whether decoder_layer_1d's ops at ``shape`` split into its core attention and ops of cp_free_key alone
    (``decoder_core_ops``): not under Ulysses or a 2D layout (the key is the whole shape), nor op_sac (its marks split
    ops)."""
    return not (shape.ulysses or shape.tp_layout != "1d" or OP_SAC in shape.recompute_modules)


def decoder_core_ops(model: ModelSpec, shape: LayerShape) -> tuple[Op, ...] | None:
    """The ops of decoder_layer_1d that read the shape beyond graph.transformer.cp_free_key: its core attention
    (``attention_ops``, marked for the shape's recompute modules as the layer marks them); every other op of the layer
    is a function of the key (``_outer_ops``, memoised on it; the eager ops and the projections' split read its
    fields). None where the key is the whole shape (Ulysses, 2D layouts) or op_sac's marks split ops
    (step.block_statics.kind_floor_compute costs such a layer whole)."""
    if not cp_split_core(shape):
        return None
    ops = attention_ops(model, shape)
    if shape.recompute_modules:
        ops = mark_recomputed(ops, shape.recompute_modules, (model.q_width, model.kv_width))
    return tuple(ops)
