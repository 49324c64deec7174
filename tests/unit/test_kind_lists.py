"""Kind lists are read off the block-kind registry (step.blocks.BLOCK_KINDS), not re-derived (issue 31):
the layer kinds a search table builds and the kinds partial recomputation splits."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model
from paraplan.search import table
from paraplan.step import partial_recompute
from paraplan.step.blocks import BLOCK_KINDS
from paraplan.step.layout import model_layer_kinds


@pytest.mark.parametrize(
    "name, kinds",
    [
        ("gpt3-2.7b", ("decoder",)),  # a dense decoder
        ("llama3-8b", ("decoder",)),
        ("deepseek-v3", ("dense_layer", "moe_layer")),  # 3 dense first layers, then MoE
        ("mixtral-8x7b", ("moe_layer",)),  # every layer MoE
    ],
)
def test_model_layer_kinds_by_hand(name, kinds):
    assert model_layer_kinds(load_model(name)) == kinds


def test_search_table_reads_the_registry():
    assert not hasattr(table, "_layer_kinds")
    assert table.model_layer_kinds is model_layer_kinds


def test_partial_recompute_reads_the_registry():
    assert not hasattr(partial_recompute, "RECOMPUTED_KIND")
    split = {name for name, kind in BLOCK_KINDS.items() if kind.counted_recompute}
    assert partial_recompute.COUNTED_RECOMPUTE_KINDS == split == {"decoder"}
