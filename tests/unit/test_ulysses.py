"""Context parallelism by all-to-all over the heads (DeepSpeed-Ulysses, Jacobs et al. 2023 §3.1) beside the
K/V ring: collective volumes, the attention's shape, the plan rule and the profile default, by hand."""

from __future__ import annotations

import math

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.comm import all_to_all_time_s
from paraplan.step.estimate import estimate
from paraplan.cost.frameworks import framework_plan_fields
from paraplan.graph.layers import decoder_layer
from paraplan.graph.transformer import LayerShape
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec
from paraplan.step.build import block_comm
from paraplan.step.plan_spans import plan_spans

S, CP = 65536, 8


def _layer(algorithm: str):
    model = load_model("llama3-8b")  # h 4096, 32 heads, 8 KV heads of 128
    return model, decoder_layer(
        model, LayerShape(1, CP, 1, S, False, "flash", "bf16", cp_algorithm=algorithm)
    )


def test_ulysses_moves_q_k_v_and_the_output_by_all_to_all():
    """Each buffer is this GPU's b·s/c tokens × width/t in bf16: Q and O 2·8192·4096 B, K and V 2·8192·1024 B;
    one call each in forward and one on the gradients in backward."""
    _, layer = _layer("all-to-all")
    cp = {c.name: c for c in layer.collectives if c.group == "cp"}
    assert {n: (c.kind, c.bytes, c.count_fwd, c.count_bwd) for n, c in cp.items()} == {
        "cp_ulysses_q": ("all_to_all", 2 * 8192 * 4096, 1, 1),
        "cp_ulysses_k": ("all_to_all", 2 * 8192 * 1024, 1, 1),
        "cp_ulysses_v": ("all_to_all", 2 * 8192 * 1024, 1, 1),
        "cp_ulysses_out": ("all_to_all", 2 * 8192 * 4096, 1, 1),  # every query head's output, a·d
    }
    ring = [c for c in _layer("ring")[1].collectives if c.group == "cp"]
    assert [c.kind for c in ring] == ["ring_exchange"]


def test_ulysses_attention_is_whole_sequences_of_fewer_heads():
    """Same attention FLOPs as the ring (a/(t·c) heads × s queries = a/t heads × s/c queries); the causal
    share loses the ring's c diagonal chunks: (s+1)/2s instead of (s+1)/2s + (c−1)/2s."""
    (_, ring), (_, uly) = _layer("ring"), _layer("all-to-all")
    a = next(op for op in ring.ops if op.kind == "attention")
    b = next(op for op in uly.ops if op.kind == "attention")
    assert a.fwd_flops == b.fwd_flops
    assert math.isclose(b.causal_fraction, (S + 1) / (2 * S)) and math.isclose(
        a.causal_fraction - b.causal_fraction, (CP - 1) / (2 * S)
    )
    assert b.attention_call == (S, S, 128, True) and a.attention_call == (
        S // CP,
        S // CP,
        128,
        True,
    )


def test_ulysses_all_to_alls_are_exposed():
    """block_comm counts the all-to-alls as CP time the attention waits for: forward = Σ of the four calls."""
    model, layer = _layer("all-to-all")
    system = load_system("dgx-h100-80gb")
    plan = PlanSpec(gpus=16, tp=1, cp=CP, seq_length=S, global_batch=2)
    span = plan_spans(plan, system)["cp"]
    comm = block_comm(layer, system, plan_spans(plan, system)["tp"], span)
    expected = sum(
        all_to_all_time_s(c.bytes, span, system) for c in layer.collectives if c.group == "cp"
    )
    assert math.isclose(comm.cp_sync_forward, expected) and math.isclose(
        comm.cp_sync_backward, expected
    )
    assert comm.cp_forward == 0.0


def test_ulysses_rule_and_profiles():
    model, system = load_model("llama3-8b"), load_system("dgx-h100-80gb")
    with pytest.raises(InputError, match="plan.cp_algorithm: 'all-to-all'.*kv_heads=8"):
        estimate(
            model,
            system,
            PlanSpec(gpus=16, tp=2, cp=8, seq_length=S, global_batch=1, cp_algorithm="all-to-all"),
        )
    with pytest.raises(InputError, match="tp_layout='1d'"):
        estimate(
            model,
            system,
            PlanSpec(
                gpus=16,
                tp=4,
                cp=4,
                seq_length=S,
                global_batch=1,
                cp_algorithm="all-to-all",
                tp_layout="2d-seq",
            ),
        )
    assert framework_plan_fields(load_framework("deepspeed"), {})["cp_algorithm"] == "all-to-all"
    assert framework_plan_fields(load_framework("megatron-core"), {})["cp_algorithm"] == "ring"
    ring = estimate(model, system, PlanSpec(gpus=16, tp=1, cp=8, seq_length=S, global_batch=2))
    uly = estimate(
        model,
        system,
        PlanSpec(gpus=16, tp=1, cp=8, seq_length=S, global_batch=2, cp_algorithm="all-to-all"),
    )
    assert (
        uly.breakdown.cp_comm_s > ring.breakdown.cp_comm_s
    )  # exposed, where the ring hides behind attention
