"""ZeRO-3 / FSDP beside expert parallelism (issue 33's MoE list): the gather and reduce-scatter groups of a MoE
plan (the dense blocks over dp·cp, the routed experts over edp = tp·cp·dp/(ep·etp), ep·etp ranks apart: torchtitan's
``fsdp`` and ``efsdp`` meshes), their bytes per layer, and one collective per block the group holds
(step.inputs.zero3_group_calls: torchtitan's apply_fsdp wraps each MoE layer's routed experts as their own FSDP2
unit on the edp mesh), by hand; the search prices it as the estimate does."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.cost.comm import GroupSpan
from paraplan.cost.moe import expert_dp_span
from paraplan.specs.plan import PlanSpec
from paraplan.step import tail
from paraplan.step.estimate import step_inputs
from paraplan.step.inputs import Stage, calls_of, stage_params, stage_work, zero3_group_calls
from paraplan.step.stage_memory import zero3_gathered_bytes, zero3_unit_params

QWEN = load_model("qwen3-30b-a3b")  # 48 MoE layers, 128 experts of 3·2048·768 parameters, top 8
H100 = load_system("dgx-h100-80gb")  # 8 GPUs per NVLink domain


def _plan(**extra) -> PlanSpec:
    fields = {"gpus": 16, "ep": 8, "global_batch": 64, "seq_length": 4096, "zero": 3}
    return PlanSpec(**(fields | extra))


def _block(group: str) -> SimpleNamespace:
    return SimpleNamespace(gradient_group=group)


def test_group_calls_by_hand():
    """A stage of an embedding, 48 MoE layers, their 48 routed-expert blocks and the LM head: L = 98 block
    calls, the dense group held by 50 blocks and the expert group by 48, so each call carries 50/98 of one dense
    collective of 1/50 of the dense parameters and 48/98 of one expert collective of 1/48 of the experts' (one
    layer's experts); a stage whose blocks are all dense keeps one collective of 1/L per call, the same
    objects."""
    blocks = ((_block("dense"), 1.0), (_block("dense"), 48.0), (_block("expert"), 48.0))
    stage = Stage(0, 1, blocks + ((_block("dense"), 1.0),), 0.0)
    calls = calls_of(stage)
    assert calls == 98.0
    per_call = 1.0 / calls
    assert zero3_group_calls(stage, "dense", calls, per_call) == (50 / 98, 1 / 50)
    assert zero3_group_calls(stage, "expert", calls, per_call) == (48 / 98, 1 / 48)
    dense = Stage(0, 1, ((_block("dense"), 1.0), (_block("dense"), 32.0)), 0.0)
    share, own = zero3_group_calls(dense, "dense", 33.0, 1.0 / 33.0)
    assert share == 1.0 and own == 1.0 / 33.0


@pytest.mark.parametrize(
    ("gpus", "tp", "ep", "etp", "expert", "span"),
    [
        (16, 1, 8, 1, 2, GroupSpan(2, 1, 2)),  # edp 16/8 = 2, 8 apart: one per 8-GPU NVLink domain
        (16, 1, 4, 1, 4, GroupSpan(4, 2, 2)),  # edp 16/4 = 4, 4 apart: two per domain
        (32, 2, 8, 1, 4, GroupSpan(4, 1, 4)),  # etp 1: the experts take the tp ranks, 2·16/8 = 4
        (32, 2, 8, 2, 2, GroupSpan(2, 1, 2)),  # etp = tp: 2·16/(8·2) = 2, 16 apart
    ],
)
def test_zero3_gather_groups_are_dp_cp_and_edp(gpus, tp, ep, etp, expert, span):
    """The dense gradient group, which gathers and reduce-scatters the attention, router, shared experts, norms,
    embedding and head, is cp·dp (torchtitan's ``fsdp`` = dp_shard·cp); the routed experts' is edp =
    tp·cp·dp/(ep·etp) (``efsdp`` = dp_shard·cp·tp/(etp·ep), parallel_dims.py at 7e4ab859), outermost of the
    sparse mesh (pp, dp_replicate, efsdp, ep, etp): its ranks ep·etp apart (cost.moe.expert_dp_span)."""
    plan = _plan(gpus=gpus, tp=tp, ep=ep, etp=etp, sequence_parallel=tp > 1)
    inp = step_inputs(QWEN, H100, plan)
    assert inp.gradient_groups["dense"].size == plan.dp == gpus // tp
    assert inp.gradient_groups["expert"].size == expert
    assert expert_dp_span(plan.dims, H100) == span


def test_layer_gathers_by_hand():
    """qwen3-30b-a3b, dp 16, ep 8, ZeRO-3: per micro-batch the stage's block gathers carry, over its L block calls,
    one dense all-gather per dense block (50: embedding, 48 MoE layers, head) of P_d/50 parameters and one expert
    all-gather per MoE layer (48) of one layer's routed experts, 16 experts × 3·2048·768, over edp = 2:
    L·g = Σ_g n_g·time_g(P_g·b/n_g) = Σ_g (P_g·b·a_g + n_g·l_g), b the gathered bytes per parameter; the
    reduce-scatters the same in the gradient bytes. Before, every call held one collective of each group, L·l_g
    latencies per group (98 instead of 50 and 48)."""
    inp = step_inputs(QWEN, H100, _plan())
    stage = inp.stages[0]
    calls = calls_of(stage)
    traffic = tail._dp_traffic(inp, stage, (3,), (calls, 1.0 / calls))
    blocks = {b.kind: n for b, n in stage.blocks if n}
    assert calls == 98 and blocks["experts"] == 48 and blocks["moe_layer"] == 48
    counts = {"dense": 50.0, "expert": 48.0}
    expert_layer = 16 * 3 * 2048 * 768
    assert stage_params(stage, "expert") == 48 * expert_layer
    for kind, form_of, b in (
        ("layer_gather", "all_gather", inp.param_gather_bytes),
        ("layer_reduce", "reduce_scatter", inp.grad_reduce_bytes),
    ):
        want = old = 0.0
        for name, n in counts.items():
            form = getattr(inp.gradient_groups[name], form_of)
            total = stage_params(stage, name) * b
            slope = form.slope_in + form.slope_out
            latency = form.latency_in + form.latency_out
            want += total * slope + n * latency
            old += total * slope + calls * latency
        assert math.isclose(calls * traffic.time[kind], want, rel_tol=1e-12)
        assert calls * traffic.time[kind] < old  # 48 + 50 fewer latencies than one of each per call
    one_layer = inp.gradient_groups["expert"].all_gather.time_s(
        expert_layer * inp.param_gather_bytes
    )
    assert one_layer > 0  # an expert layer's gather is one collective of one layer's experts


def test_dense_models_keep_one_collective_per_block_to_the_bit():
    """A dense model's blocks are all in the dense group: its ZeRO-3 traffic is the per-block price it had."""
    model, system = load_model("gpt3-13b"), load_system("dgx-a100-80gb")
    plan = PlanSpec(gpus=64, dp=64, micro_batch=1, global_batch=64, seq_length=2048, zero=3)
    inp = step_inputs(model, system, plan)
    stage = inp.stages[0]
    calls = calls_of(stage)
    traffic = tail._dp_traffic(inp, stage, (3,), (calls, 1.0 / calls))
    form = inp.gradient_groups["dense"].all_gather
    assert traffic.time["layer_gather"] == form.time_s(
        stage_params(stage, "dense") * inp.param_gather_bytes * (1.0 / calls)
    )


def test_tail_exposes_fewer_latencies_than_one_of_each_per_block(monkeypatch):
    """The stage's exposed ZeRO-3 time (step.tail.tail_terms) with the per-group calls is below the one of each
    group per block call it had."""
    inp = step_inputs(QWEN, H100, _plan())
    stage = inp.stages[0]
    work = stage_work(stage)
    now = tail.tail_terms(inp, stage, work)[0]
    monkeypatch.setattr(
        tail, "zero3_group_calls", lambda stage, name, calls, per_call: (1.0, per_call)
    )
    before = tail.tail_terms(inp, stage, work)[0]
    assert 0 < now < before


def test_gathered_unit_is_a_moe_layer_with_its_experts():
    """qwen3-30b-a3b, ep 8, ZeRO-3 at prefetch depth 1: resident gathered weights (1 + 1)·(P_layer + P_experts)
    × the gathered bytes per parameter, the MoE layer (attention, router, norms) with its 16 local experts,
    not the larger of the two alone; a dense model keeps its largest block."""
    inp = step_inputs(QWEN, H100, _plan())
    stage = inp.stages[0]
    blocks = {b.kind: b for b, n in stage.blocks if n}
    layer, experts = blocks["moe_layer"].params, blocks["experts"].params
    assert experts == 16 * 3 * 2048 * 768 and 0 < layer < experts
    assert zero3_unit_params(stage) == layer + experts
    assert inp.zero3_root_held == 0.0 and inp.gathered_weight_bytes == 2.0
    assert zero3_gathered_bytes(inp, stage) == 2.0 * (layer + experts) * 2.0
    dense = step_inputs(load_model("gpt3-13b"), H100, _plan(ep=1, global_batch=16, seq_length=2048))
    decoder = {b.kind: b for b, n in dense.stages[0].blocks if n}["decoder"]
    assert zero3_unit_params(dense.stages[0]) == decoder.params
