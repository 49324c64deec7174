"""Encoder-only models (BERT, ViT) in the uniform estimate and search, through the one builder
(step.blocks.BLOCK_KINDS: the layer with bidirectional attention, ViT's patch embedding and classifier).
Hand-computed FLOPs, agreement with the per-stage (non-uniform) estimator, and fast == exhaustive search."""

from __future__ import annotations

import math

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.cost.flops import model_flops_per_token
from paraplan.step.estimate import estimate
from paraplan.step.per_stage import estimate_stage_plan
from paraplan.graph.transformer import LayerShape
from paraplan.search.exhaustive import exhaustive_search
from paraplan.search.run import search
from paraplan.search.space import SearchProblem
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec
from paraplan.specs.stage_plan import stage_plan_from_dict
from paraplan.step.build import BLOCK_KINDS


def test_bert_large_model_flops_closed_form():
    """6·N + 6·L·s·(a·d) with every query seeing all s keys: N = 24·12h² + V·h (h 1024, ffn 4h, V 30522)."""
    h, layers, vocab, s = 1024, 24, 30522, 512
    n = layers * 12 * h * h + vocab * h
    attention = 3 * 2 * s * (h + h) * layers  # passes · 2·k·(qk + v) per layer, k = s
    assert model_flops_per_token(load_model("bert-large"), s) == 6 * n + attention == 2_150_461_440


def test_vit_large_model_flops_closed_form():
    """ViT-L/16 at 197 tokens: the classifier (V·h) once per sample, the patch projection (3·16²·h) per token."""
    h, layers, classes, s = 1024, 24, 21843, 197
    n = layers * 12 * h * h + classes * h / s + 3 * 16 * 16 * h
    attention = 3 * 2 * s * 2 * h * layers
    assert math.isclose(
        model_flops_per_token(load_model("vit-large"), s), 6 * n + attention, rel_tol=1e-12
    )


def test_encoder_blocks_are_bidirectional_and_vit_blocks_are_its_own():
    bert, vit = load_model("bert-large"), load_model("vit-large")
    shape = LayerShape(1, 1, 2, 512, False, "flash", "bf16")
    layer = BLOCK_KINDS["decoder"].graph(bert, shape)
    assert layer.name == "encoder_layer"
    assert all(op.causal_fraction == 1.0 for op in layer.ops if op.kind == "attention")
    vit_shape = LayerShape(1, 1, 2, 197, False, "flash", "bf16")
    assert BLOCK_KINDS["embedding"].graph(vit, vit_shape).name == "patch_embedding"
    assert BLOCK_KINDS["head"].graph(vit, vit_shape).name == "classifier"
    assert BLOCK_KINDS["embedding"].graph(bert, shape).name != "patch_embedding"


@pytest.mark.parametrize("tp", [1, 2])
def test_uniform_bert_equals_the_per_stage_estimator(tp):
    """One stage of the non-uniform path (graph.encoder blocks, step.per_stage) and the uniform builder agree."""
    model, system = load_model("bert-large"), load_system("dgx-a100-80gb")
    cluster = uniform_cluster(system, tp)
    plan = stage_plan_from_dict(
        {
            "global_batch": 8,
            "seq_length": 512,
            "microbatches": 4,
            "dtype": "bf16",
            "stages": [{"pool": cluster.pools[0].name, "gpus": tp, "layers": 24, "tp": tp}],
        }
    )
    mine = estimate_stage_plan(model, cluster, plan)
    ref = estimate(
        model,
        system,
        PlanSpec(gpus=tp, tp=tp, global_batch=8, micro_batch=2, seq_length=512, dtype="bf16"),
    )
    assert ref.step_time_s == pytest.approx(mine.step_time_s, rel=1e-9)
    assert ref.stages[0].peak_bytes == pytest.approx(mine.stages[0].peak_bytes, rel=1e-9)


def test_encoder_decoder_still_needs_a_per_stage_plan():
    with pytest.raises(InputError, match="model.architecture: 'encoder_decoder'"):
        estimate(
            load_model("t5-3b"),
            load_system("dgx-a100-80gb"),
            PlanSpec(gpus=8, seq_length=512, global_batch=8),
        )


@pytest.mark.xdist_group("encoder-search")
@pytest.mark.parametrize("model,seq", [("bert-large", 512), ("vit-large", 197)])
def test_encoder_search_is_exact(model, seq):
    problem = SearchProblem(
        model=load_model(model),
        system=load_system("dgx-a100-80gb"),
        gpus=8,
        seq_length=seq,
        global_batch=64,
        tp=(1, 2),
        pp=(1, 2),
        micro_batch=(2, 4),
        recompute=("none", "full"),
        vary_placement=False,
        vary_offload=False,
        vary_overlap=False,
    )
    fast, slow = search(problem, top_k=5), exhaustive_search(problem, top_k=5)
    assert fast.plans and [p.plan for p in fast.plans] == [p.plan for p in slow.plans]
    for a, b in zip(fast.plans, slow.plans):
        assert a.estimate.step_time_s == pytest.approx(b.estimate.step_time_s, rel=1e-9)


def test_vit_head_memory_is_one_rule_for_both_estimators():
    """ViT head: final-norm input 2·b·s·h (bf16) + fp32 class-token logits 4·b·V; b 2, s 197, h 1024,
    V 21,843: 2·2·2·197·1024 + 4·2·21843 = 1,788,568 bytes, in the uniform and the per-stage estimate."""
    from paraplan.cost.memory import classifier_activation_bytes

    shape = LayerShape(1, 1, 2, 197, False, "flash", "bf16")
    assert (
        classifier_activation_bytes(load_model("vit-large"), shape)
        == 2 * 2 * 2 * 197 * 1024 + 4 * 2 * 21843
        == 1_788_568
    )
    model, system = load_model("vit-large"), load_system("dgx-a100-80gb")
    cluster = uniform_cluster(
        system, 1
    )  # one stage: the case where the two estimators are held equal
    plan = stage_plan_from_dict(
        {
            "global_batch": 8,
            "seq_length": 197,
            "microbatches": 2,
            "dtype": "bf16",
            "stages": [{"pool": cluster.pools[0].name, "gpus": 1, "layers": 24}],
        }
    )
    mine = estimate_stage_plan(model, cluster, plan)
    ref = estimate(
        model, system, PlanSpec(gpus=1, global_batch=8, micro_batch=4, seq_length=197, dtype="bf16")
    )
    assert ref.step_time_s == pytest.approx(mine.step_time_s, rel=1e-9)
    assert [s.peak_bytes for s in ref.stages] == pytest.approx(
        [s.peak_bytes for s in mine.stages], rel=1e-9
    )
