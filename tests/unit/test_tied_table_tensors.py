"""A tied embedding table is one weight tensor (review finding 8): graph.ops.weight_tensor_stats counts it in
the embedding block and again as the LM head's weight, so a stage holding both blocks (pp = 1, or a per-stage
plan's only stage) counts one fewer (step.blocks.head_tensors_shared_with_embedding), on both paths; a last
stage of its own keeps its copy (Megatron-LM's second table, Narayanan et al. 2021 §4.1). By hand: a GPT-3
layer holds 12 tensors, the embedding block 2 (word and position tables), the head 3 (final LayerNorm's scale
and shift, the output weight); a Llama 3 layer 6, its embedding 1, its head 2 (final RMSNorm, untied output)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.cost.comm import GroupSpan
from paraplan.specs.plan import PlanSpec
from paraplan.step.blocks import head_tensors_shared_with_embedding, model_blocks
from paraplan.step.engines import ENGINES
from paraplan.step.estimate import layer_shape, step_inputs
from paraplan.step.inputs import sum_blocks
from paraplan.step.stage_blocks import pool_units

A100 = load_system("dgx-a100-80gb")


def _plan(pp: int) -> PlanSpec:
    return PlanSpec(gpus=8, pp=pp, global_batch=16, micro_batch=1, seq_length=2048)


def _stage_tensors(model_name: str, pp: int) -> list[float]:
    inp = step_inputs(load_model(model_name), A100, _plan(pp))
    return sorted(
        float(sum_blocks(s, lambda b: b.weight_tensors)) for s in inp.stages if s.count > 0
    )


def test_the_shared_tensors_by_hand():
    assert head_tensors_shared_with_embedding(load_model("gpt3-1.3b")) == 1.0  # tie_embeddings
    assert head_tensors_shared_with_embedding(load_model("llama3-8b")) == 0.0


def test_one_stage_counts_a_tied_table_once():
    # GPT-3 1.3B, 24 layers: 24·12 + 2 + 3 − 1 (the output weight is the word table)
    assert _stage_tensors("gpt3-1.3b", 1) == [24 * 12 + 2 + 3 - 1]
    # two stages: the first holds the table, the last its copy
    assert _stage_tensors("gpt3-1.3b", 2) == [12 * 12 + 2, 12 * 12 + 3]
    # untied Llama 3 8B, 32 layers: 32·6 + 1 + 2, nothing shared
    assert _stage_tensors("llama3-8b", 1) == [32 * 6 + 1 + 2]


@pytest.mark.parametrize("first_and_last,expected", [(True, 2.0), (False, 3.0)])
def test_a_per_stage_plans_head_leaves_out_the_table_beside_the_embedding(first_and_last, expected):
    model = load_model("gpt3-1.3b")
    units = pool_units(
        model,
        A100,
        layer_shape(_plan(1), A100),
        "none",
        first_and_last,
        ENGINES["megatron"],
        False,
        GroupSpan(1, 1, 1),
    )
    kinds = [ref.kind for ref in dict.fromkeys(model_blocks(model))]
    head = units[kinds.index("head")]
    assert head.weight_tensors == expected
