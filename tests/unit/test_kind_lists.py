"""Kind lists are read off the block-kind registry (step.blocks.BLOCK_KINDS), not re-derived (issue 31):
the layer kinds a search table builds and the kinds partial recomputation splits."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model
from paraplan.search import table
from paraplan.step import partial_recompute
from paraplan.step.blocks import BLOCK_KINDS
from paraplan.step.layout import model_layer_counts, model_layer_kinds


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
    # the table reads each layer kind with its count (its pp-1 floors weigh every layer, session 21)
    assert not hasattr(table, "_layer_kinds")
    assert table.model_layer_counts is model_layer_counts


def test_partial_recompute_reads_the_registry():
    assert not hasattr(partial_recompute, "RECOMPUTED_KIND")
    split = {name for name, kind in BLOCK_KINDS.items() if kind.counted_recompute}
    assert partial_recompute.COUNTED_RECOMPUTE_KINDS == split == {"decoder"}


def test_a_uniform_stage_holds_the_kinds_the_registry_marks():
    """step.blocks.UNIFORM_STAGE_KINDS is read off ``stage_count`` and ``moe_family``; each kind's count is
    the step.layout.StageMix field it names."""
    from paraplan.step.blocks import UNIFORM_STAGE_KINDS
    from paraplan.step.layout import StageMix

    counted = {name: kind.stage_count for name, kind in BLOCK_KINDS.items() if kind.stage_count}
    assert set(counted.values()) == set(StageMix._fields)
    assert [n for n, _ in UNIFORM_STAGE_KINDS[False]] == ["embedding", "decoder", "head"]
    moe = ["embedding", "dense_layer", "moe_layer", "experts", "mtp", "head"]
    assert [n for n, _ in UNIFORM_STAGE_KINDS[True]] == moe
    assert {n for n, k in BLOCK_KINDS.items() if k.every_model} == {"embedding", "head"}


def test_stage_block_counts_by_hand():
    """DeepSeek-V3 (3 dense layers, every later layer MoE, 1 MTP module): the last stage of a pp-16 split
    holding layers 58-60 and the head: 0 dense, 3 MoE, 3 + 1 routed-expert blocks, 1 MTP module; a dense
    decoder's stage: its layers between the embedding and the head."""
    from paraplan.specs.split import SplitGroup
    from paraplan.step.layout import stage_block_counts

    last = SplitGroup(15, 1, 3, 0, 1)
    counts = dict(stage_block_counts(load_model("deepseek-v3"), last, 58))
    assert counts == {
        "embedding": 0,
        "dense_layer": 0,
        "moe_layer": 3,
        "experts": 4,
        "mtp": 1,
        "head": 1,
    }
    first = SplitGroup(0, 1, 4, 1, 0)
    assert stage_block_counts(None, first, 0) == (("embedding", 1), ("decoder", 4), ("head", 0))
