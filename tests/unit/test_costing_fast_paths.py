"""The costing hot path's shortcuts give what the plain rules give: graph.ops.weight_tensor_stats against the
three walks it replaces, graph.ops.mark_recomputed's direct construction against dataclasses.replace,
graph.transformer.with_expert against replace, for every block of dense, MoE and learned-position models."""

from __future__ import annotations


import pytest

from paraplan.catalog import load_model
from paraplan.graph.ops import (
    DS_PERSISTENCE_THRESHOLD,
    ExpertShape,
    Op,
    _with_recompute_flag,
    largest_weight_params,
    weight_stat_fields,
    weight_tensor_stats,
)
from paraplan.graph.transformer import LayerShape, with_expert
from paraplan.step.build import BLOCK_KINDS, model_block_kinds


@pytest.mark.parametrize("name", ["gpt3-175b", "llama3-8b", "deepseek-v3", "mixtral-8x7b"])
def test_weight_tensor_stats_equal_the_separate_walks(name):
    """One walk gives the count, the small tensors and the largest tensor, the last equal to
    largest_weight_params's own walk bit for bit."""
    model = load_model(name)
    for tp, expert in ((1, ExpertShape()), (4, ExpertShape(ep=8, etp=2))):
        shape = LayerShape(tp, 1, 1, 2048, tp > 1, "flash", "bf16", expert=expert)
        for kind in model_block_kinds(model):
            graph = BLOCK_KINDS[kind].graph(model, shape)
            stats = weight_tensor_stats(graph, *weight_stat_fields(model))
            count, largest, small = stats
            assert largest == largest_weight_params(graph)  # its own walk over the weight GEMMs
            assert count >= len(small) and all(x < DS_PERSISTENCE_THRESHOLD for x in small)


def test_recompute_flag_copy_equals_replace():
    """_with_recompute_flag copies every field of Op (a field added to Op must be added there too)."""
    op = Op(
        "x",
        "gemm",
        1.0,
        2.0,
        3.0,
        4.0,
        (1, 2, 3, 4),
        False,
        0.5,
        (8, 8, 64, True),
        ("add", 2.0, 4.0),
        "tf32",
        False,
        (128, 0.5, 0.03),
        "dglu_dbias",
        True,
    )
    assert set(Op._fields) == {
        "name",
        "kind",
        "fwd_flops",
        "fwd_bytes",
        "bwd_flops",
        "bwd_bytes",
        "gemm_shape",
        "selective_recompute",
        "causal_fraction",
        "attention_call",
        "kernel",
        "dtype",
        "input_grad",
        "attention_window",
        "dgrad_epilogue",
        "one_kernel",
    }
    for flag in (False, True):
        assert _with_recompute_flag(op, flag) == op._replace(selective_recompute=flag)


def test_with_expert_equals_replace():
    """with_expert (cached) derives the shape _replace derives, for equal and different expert knobs."""
    shape = LayerShape(
        2,
        1,
        1,
        4096,
        True,
        "flash",
        "bf16",
        expert=ExpertShape(ep=8),
        recompute_modules=("core_attn",),
    )
    for expert in (
        ExpertShape(),
        ExpertShape(ep=8),
        ExpertShape(ep=16, etp=2, dispatcher="deepep", a2a_overlap=True),
    ):
        assert with_expert(shape, expert) == shape._replace(expert=expert)
