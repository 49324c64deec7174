"""step.p2p.links_of: pipeline_links reads the shape through the exchange's bytes and the tp degree only."""

from __future__ import annotations

from paraplan.catalog import load_model, load_system
from paraplan.cost.comm import GroupSpan
from paraplan.graph.transformer import LayerShape
from paraplan.step.blocks import p2p_bytes
from paraplan.step.p2p import links_of, pipeline_links


def test_shapes_with_the_same_bytes_and_tp_have_the_same_links():
    model, system = load_model("llama3-8b"), load_system("dgx-h100-80gb")
    span = GroupSpan(4, 2, 2)
    a = LayerShape(
        2, 2, 2, 4096, False, "flash", "bf16"
    )  # b = 2, c = 2: the same tokens per GPU as
    b = LayerShape(2, 1, 1, 4096, False, "flash", "bf16")  # b = 1, c = 1
    assert p2p_bytes(model, a) == p2p_bytes(model, b) == 2 * 4096 * model.hidden / 2  # bf16, / tp
    assert pipeline_links(model, system, a, span) == pipeline_links(model, system, b, span)
    assert pipeline_links(model, system, a, span) == links_of(
        model, system, p2p_bytes(model, a), 2, span
    )
