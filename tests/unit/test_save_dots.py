"""MaxText's remat_policy minimal_flash (issue 33): recompute_modules ['save_dots'] (graph.ops.SAVE_DOTS;
google/maxtext 3075bbe MaxText/layers/models.py:255-261, checkpoint_dots_with_no_batch_dims plus the
attention ``context``) keeps every weight GEMM output and the context and re-runs only element-wise ops."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model
from paraplan.cost.memory import (
    layer_activation_bytes,
    layer_activation_parts,
    save_dots_kept_bytes,
)
from paraplan.graph.ops import SAVE_DOTS
from paraplan.graph.transformer import LayerShape, decoder_layer_1d as decoder_layer
from paraplan.specs.plan import PlanSpec
from paraplan.specs.rules import recompute_violations


def _shape(modules=(SAVE_DOTS,), tp=1, sp=False):
    return LayerShape(
        tp=tp,
        cp=1,
        micro_batch=2,
        seq_length=4096,
        sequence_parallel=sp,
        attention="flash",
        dtype="bf16",
        recompute_modules=modules,
    )


def test_only_element_wise_ops_are_rerun():
    graph = decoder_layer(load_model("llama2-7b"), _shape())
    rerun = {op.name for op in graph.ops if op.selective_recompute}
    assert rerun == {
        "input_norm",
        "rotary_embedding",
        "attention_residual",
        "post_attention_norm",
        "mlp_activation",
    }
    assert all(op.kind == "memory" for op in graph.ops if op.selective_recompute)


@pytest.mark.parametrize("tp,sp", [(1, False), (4, True)])
def test_kept_bytes_by_hand(tp, sp):
    """Llama 2 7B (h 4096, q = kv 4096, f 11008, 32 heads), bf16, 2 x 4096 tokens: layer input 2h/sp,
    q/k/v and context 2(q + 2kv + q)/t, w1 and w3 2·2f/t, wo and w2 outputs 2·2h, LSE 4·heads/t."""
    model = load_model("llama2-7b")
    shape = _shape(tp=tp, sp=sp)
    h, q, kv, f, heads, tokens = 4096, 4096, 4096, 11008, 32, 2 * 4096
    per_token = 2 * h / (tp if sp else 1) + 2 * (2 * q + 2 * kv + 2 * f) / tp + 2 * 2 * h
    expected = tokens * (per_token + 4 * heads / tp)
    assert save_dots_kept_bytes(
        model, shape, layer_activation_parts(model, shape)
    ) == pytest.approx(expected)
    assert layer_activation_bytes(model, shape, "selective") == pytest.approx(expected)
    none = layer_activation_bytes(model, _shape(()), "none")
    assert layer_activation_bytes(model, _shape(), "selective") < none


@pytest.mark.parametrize(
    "model,modules", [("llama2-7b", [SAVE_DOTS, "core_attn"]), ("mixtral-8x7b", [SAVE_DOTS])]
)
def test_save_dots_is_refused_beside_a_module_or_on_moe(model, modules):
    fields = dict(gpus=8, dp=8, global_batch=8, seq_length=2048, recompute="selective")
    plan = PlanSpec(recompute_modules=modules, **fields)
    (v,) = recompute_violations(plan, load_model(model))
    assert v.field == "plan.recompute_modules" and "save_dots alone" in v.rule
    ok = PlanSpec(recompute_modules=[SAVE_DOTS], **fields)
    assert recompute_violations(ok, load_model("llama2-7b")) == []
