"""One block-cost source for both paths (issue 31): a per-stage plan's block of a layer_widths group is costed by the
uniform path's step.build.kind_cost_facts / kind_memory_facts at the group's widths (step.blocks.BlockRef.width),
as a model of those widths is costed on its own."""

from __future__ import annotations

from paraplan.catalog import load_system
from paraplan.cost.comm import GroupSpan
from paraplan.graph.encoder import layer_models
from paraplan.graph.transformer import LayerShape
from paraplan.specs.model import ModelSpec
from paraplan.step.build import kind_cost_facts, kind_memory_facts
from paraplan.step.stage_blocks import NO_SPAN, _block_facts, distinct_blocks

H, F, TP = 1024, 4096, 2
MODEL = ModelSpec(
    layers=4,
    hidden=H,
    heads=16,
    ffn_hidden=F,
    vocab=32000,
    layer_widths=[{"count": 2}, {"count": 2, "ffn_hidden": 2 * F}],
)
SHAPE = LayerShape(TP, 1, 1, 2048, True, "flash", "bf16")
TP_SPAN = GroupSpan(TP, TP, 1)


def test_a_block_at_a_groups_widths_is_costed_as_a_model_of_those_widths():
    system = load_system("dgx-a100-80gb")
    wide = layer_models(MODEL)[-1]  # the second group's widths: ffn_hidden 2F
    at = kind_cost_facts(MODEL, system, SHAPE, TP_SPAN, NO_SPAN, "decoder", width=wide)
    assert at == kind_cost_facts(wide, system, SHAPE, TP_SPAN, NO_SPAN, "decoder")
    memory = kind_memory_facts(MODEL, SHAPE, "decoder", "selective", wide)
    assert memory == kind_memory_facts(wide, SHAPE, "decoder", "selective")
    # and not the model's own widths: the gelu MLP's two GEMMs grow by 2·h·F weights and its first bias by F
    # elements, split over the TP ranks (column-parallel fc1 weight and bias, row-parallel fc2 weight)
    own = kind_cost_facts(MODEL, system, SHAPE, TP_SPAN, NO_SPAN, "decoder")
    assert at.params - own.params == (2 * H * F + F) / TP
    assert at.compute.gemm_forward > own.compute.gemm_forward
    assert memory.activation_bytes > kind_memory_facts(MODEL, SHAPE, "decoder", "selective")[0]


def test_a_per_stage_block_is_the_uniform_kind_cost_at_its_widths():
    """step.stage_blocks._block_facts of every distinct block of a layer_widths model: kind_cost_facts and
    kind_memory_facts at its BlockRef's widths (the engine's memory factor 1, no shared head)."""
    system = load_system("dgx-a100-80gb")
    refs = distinct_blocks(MODEL)
    assert len({ref.width for ref in refs}) == 2
    for ref in refs:
        facts = _block_facts(MODEL, system, ref, SHAPE, "full", 1.0, None, True, TP_SPAN)
        cost = kind_cost_facts(MODEL, system, SHAPE, TP_SPAN, NO_SPAN, ref.kind, width=ref.width)
        memory = kind_memory_facts(MODEL, SHAPE, ref.kind, "full", ref.width)
        assert (facts.compute, facts.comm, facts.params) == (cost.compute, cost.comm, cost.params)
        assert (facts.activation_bytes, facts.held_bytes, facts.buffer_bytes) == memory
