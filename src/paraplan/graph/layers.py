"""The decoder layer's op graph under any tensor-parallel layout: 1D (graph/transformer.py, with
2d-seq's context exchange) or the 2D SUMMA grid (graph/summa.py; docs/model.md §9)."""

from __future__ import annotations

from paraplan.graph.ops import LayerGraph
from paraplan.graph.summa import decoder_layer_2d
from paraplan.graph.transformer import LayerShape, decoder_layer_1d
from paraplan.specs.model import ModelSpec


def decoder_layer(model: ModelSpec, shape: LayerShape) -> LayerGraph:
    """All ops of one decoder layer for one micro-batch on one GPU: the SUMMA grid's graph when
    ``shape.tp_layout`` is "2d", else the 1D layer (both memoised by their builders)."""
    if shape.tp_layout == "2d":
        return decoder_layer_2d(model, shape)
    return decoder_layer_1d(model, shape)
