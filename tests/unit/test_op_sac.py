"""torchtitan's per-op selective activation checkpointing (issue 33): recompute_modules ['op_sac']
(graph.ops.OP_SAC_SOURCE, torchtitan 9dec370 parallelize_llama.py _save_list / _custom_policy) re-runs
every second mm of a Llama block (wk, wo, w3) and the element-wise ops, and keeps the block input, the
outputs of wq, wv, w1, w2 and SDPA (and the reduce-scatters with sequence parallelism)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.cost.memory import layer_activation_bytes, layer_activation_parts, op_sac_kept_bytes
from paraplan.graph.ops import OP_SAC
from paraplan.graph.transformer import LayerShape, decoder_layer_1d as decoder_layer
from paraplan.specs.plan import PlanSpec
from paraplan.specs.rules import recompute_violations
from paraplan.step.estimate import estimate

from tests.unit.test_one_path import assert_same, both_paths


def _shape(modules=(OP_SAC,), tp=1, sp=False):
    return LayerShape(
        tp=tp,
        cp=1,
        micro_batch=2,
        seq_length=8192,
        sequence_parallel=sp,
        attention="flash",
        dtype="bf16",
        recompute_modules=modules,
    )


def _gemm_flops(graph, rerun=None):
    return sum(
        op.fwd_flops
        for op in graph.ops
        if op.kind == "gemm" and (rerun is None or op.selective_recompute == rerun)
    )


def test_every_second_mm_of_the_llama_block_is_rerun():
    """Llama 3 8B (h 4096, q 4096, kv 1024, f 14336): wk + wo + w3 of wq wk wv wo w1 w3 w2 by hand."""
    model = load_model("llama3-8b")
    sac = decoder_layer(model, _shape())
    plain = decoder_layer(model, _shape(()))
    h, q, kv, f = 4096, 4096, 1024, 14336
    share = (kv * h + q * h + f * h) / (q * h + 2 * kv * h + q * h + 3 * f * h)
    assert _gemm_flops(sac, True) / _gemm_flops(sac) == pytest.approx(share)
    assert share == pytest.approx(0.3654, abs=1e-4)  # the case notes' "about 37 %"
    assert _gemm_flops(sac) == pytest.approx(_gemm_flops(plain))
    rerun = {op.name for op in sac.ops if op.selective_recompute and op.kind != "gemm"}
    assert rerun == {
        "input_norm",
        "rotary_embedding",
        "attention_residual",
        "post_attention_norm",
    } | {"mlp_activation"}
    assert not any(op.selective_recompute for op in sac.ops if op.kind == "attention")


@pytest.mark.parametrize("tp,sp", [(1, False), (8, True)])
def test_kept_bytes_by_hand(tp, sp):
    model = load_model("llama3-8b")
    shape = _shape(tp=tp, sp=sp)
    h, q, kv, f, heads, tokens = 4096, 4096, 1024, 14336, 32, 2 * 8192
    per_token = 2 * h / tp + 2 * (q + kv + q + f) / tp + 2 * h + (2 * 2 * h / tp if sp else 0)
    expected = tokens * (per_token + 4 * heads / tp)
    assert op_sac_kept_bytes(model, shape, layer_activation_parts(model, shape)) == pytest.approx(
        expected
    )
    assert layer_activation_bytes(model, shape, "selective") == pytest.approx(expected)
    # between full recompute and Megatron's selective (attention core only)
    megatron = layer_activation_bytes(model, _shape(("core_attn",), tp=tp, sp=sp), "selective")
    full = layer_activation_bytes(model, shape, "full")
    assert full < expected < megatron


def test_op_sac_costs_more_time_and_less_memory_than_megatron_selective():
    model, system = load_model("llama3-8b"), load_system("hgx-h100-96gb-500w")
    base = dict(gpus=8, dp=8, micro_batch=2, global_batch=16, seq_length=8192, zero=3)
    sel = estimate(model, system, PlanSpec(**base, recompute="selective"))
    sac = estimate(
        model, system, PlanSpec(**base, recompute="selective", recompute_modules=[OP_SAC])
    )
    assert sac.step_time_s > sel.step_time_s
    assert sac.stages[0].activations_bytes < sel.stages[0].activations_bytes


@pytest.mark.parametrize("tp,sp", [(1, False), (2, True)])
def test_uniform_and_per_stage_paths_agree(tp, sp):
    uniform, per_stage = both_paths(
        "llama3-8b",
        gpus=4 * tp,
        tp=tp,
        pp=2,
        dp=2,
        micro_batch=1,
        global_batch=8,
        seq_length=2048,
        recompute="selective",
        recompute_modules=[OP_SAC],
        sequence_parallel=sp,
    )
    assert_same(uniform, per_stage)


@pytest.mark.parametrize(
    "model,modules",
    [("llama3-8b", [OP_SAC, "core_attn"]), ("gpt3-1.3b", [OP_SAC]), ("mixtral-8x7b", [OP_SAC])],
)
def test_op_sac_is_refused_off_a_dense_swiglu_layer_or_beside_a_module(model, modules):
    plan = PlanSpec(
        gpus=8,
        dp=8,
        global_batch=8,
        seq_length=2048,
        recompute="selective",
        recompute_modules=modules,
    )
    violations = recompute_violations(plan, load_model(model))
    assert [v.field for v in violations] == ["plan.recompute_modules"]


def test_hardware_flops_count_the_rerun_mms_of_the_graph():
    """cost.flops.recompute_flops_per_token's op_sac term is the graph's re-run GEMM FLOPs per token."""
    from paraplan.cost.flops import recompute_flops_per_token

    model = load_model("llama3-8b")
    graph = decoder_layer(model, _shape())
    per_token = _gemm_flops(graph, True) * model.layers / (2 * 8192)
    assert recompute_flops_per_token(model, 8192, "selective", (OP_SAC,)) == pytest.approx(
        per_token
    )


def test_op_sac_with_context_parallelism_is_refused_not_mispriced():
    """Its re-run beside a context-parallel ring is not priced: cp > 1 is refused by field."""
    model = load_model("llama3-8b")
    fields = dict(gpus=8, global_batch=8, seq_length=8192, recompute="selective")
    ok = PlanSpec(dp=8, recompute_modules=[OP_SAC], **fields)
    assert recompute_violations(ok, model) == []
    (v,) = recompute_violations(PlanSpec(dp=4, cp=2, recompute_modules=[OP_SAC], **fields), model)
    assert v.field == "plan.recompute_modules" and "cp=1" in v.rule


def test_op_sac_round_trips_through_torchtitan_and_megatron_stacks_refuse_it():
    """torchtitan writes per-op SAC as selective with selective_ac_option 'op' (v0.2.2
    distributed/activation_checkpoint.py:177) and reads it back to the same plan and time; the Megatron
    family refuses it by name (not a Megatron-Core recompute module); layer SAC ('2') stays refused."""
    import math

    from paraplan.export import ExportRefused, export_plan, import_plan

    model, system = load_model("llama3-8b"), load_system("dgx-h100-80gb")
    plan = PlanSpec(
        gpus=8, dp=8, zero=3, global_batch=8, seq_length=8192, micro_batch=1,
        recompute="selective", recompute_modules=[OP_SAC],
    )  # fmt: skip
    text = export_plan("torchtitan", plan, model)
    assert 'selective_ac_option = "op"' in text
    back = PlanSpec(**import_plan("torchtitan", text, model, plan.seq_length))
    assert back.recompute == "selective" and tuple(back.recompute_modules) == (OP_SAC,)
    t0, t1 = (estimate(model, system, p).step_time_s for p in (plan, back))
    assert math.isclose(t0, t1, rel_tol=1e-9)
    for name in ("megatron", "nemo", "megatron-bridge"):
        with pytest.raises(ExportRefused, match="plan.recompute_modules=.*per-op checkpointing"):
            export_plan(name, plan, model)
    with pytest.raises(ExportRefused, match="selective_ac_option 'op'"):
        import_plan("torchtitan", text.replace('"op"', '"2"'), model, plan.seq_length)
