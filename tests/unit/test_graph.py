"""The decoder-layer op graph against closed forms: FLOPs, collectives, fp8 casts, attention kinds."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model
from paraplan.cost.flops import model_flops_per_token
from paraplan.graph.layers import decoder_layer
from paraplan.graph.transformer import LayerShape, lm_head_block
from paraplan.specs.plan import PlanSpec, plan_violations

GPT = load_model("gpt3-1.3b")  # h 2048, a 16, f 8192, V 51200, 24 layers, gelu, dropout
GPT13 = load_model("gpt3-13b")  # h 5120, a 40
LLAMA = load_model("llama3-8b")  # h 4096, a 32, a_kv 8, f 14336, swiglu, no dropout, V 128256


def shape(tp=1, cp=1, b=1, s=2048, sp=False, attention="flash", dtype="bf16") -> LayerShape:
    return LayerShape(
        tp=tp,
        cp=cp,
        micro_batch=b,
        seq_length=s,
        sequence_parallel=sp,
        attention=attention,
        dtype=dtype,
    )


def forward_matmul_flops(graph) -> float:
    return sum(op.fwd_flops for op in graph.ops if op.kind in ("gemm", "attention"))


@pytest.mark.parametrize("model", [GPT, GPT13, LLAMA], ids=lambda m: m.name)
@pytest.mark.parametrize("tp", [1, 8])
@pytest.mark.parametrize("cp", [1, 2])
@pytest.mark.parametrize("attention", ["flash", "unfused"])
def test_layer_forward_flops_match_closed_form(model, tp, cp, attention):
    b, s = 2, 4096
    graph = decoder_layer(model, shape(tp=tp, cp=cp, b=b, s=s, attention=attention))
    # one GPU holds 1/(tp·cp) of one micro-batch's layer; over all layers, per token:
    per_token = forward_matmul_flops(graph) * tp * cp * model.layers / (b * s)
    # closed form without the LM head (6·V·h), forward only (/3): 2·N_layers + 2·L·(s+1)·(a·d) with the
    # causal discount; the graph lists attention's FLOPs over all s keys, 4·L·s·(a·d) (the causal
    # fraction enters its time), i.e. 2·L·(s-1)·(a·d) more
    closed = (model_flops_per_token(model, s) - 6.0 * model.vocab * model.hidden) / 3.0
    assert per_token == pytest.approx(
        closed + 2.0 * model.layers * (s - 1) * model.q_width, rel=1e-9
    )
    # what the graph charges (attention scaled by its causal fraction) is never below the closed form
    charged = sum(
        op.fwd_flops * (op.causal_fraction if op.kind == "attention" else 1.0)
        for op in graph.ops
        if op.kind in ("gemm", "attention")
    )
    assert charged * tp * cp * model.layers / (b * s) >= closed * (1 - 1e-12)


@pytest.mark.parametrize("model", [GPT, LLAMA], ids=lambda m: m.name)
def test_layer_forward_flops_by_hand(model):
    # t=1, b=1, s=2048: 2·s·(h·(q+2kv) + q·h + p·h·f + f·h) + 4·s·s·q
    h, q, kv, f, p = (
        model.hidden,
        model.q_width,
        model.kv_width,
        model.ffn_hidden,
        model.mlp_input_projections,
    )
    expected = 2 * 2048 * (h * (q + 2 * kv) + q * h + p * h * f + f * h) + 4 * 2048 * 2048 * q
    assert forward_matmul_flops(decoder_layer(model, shape())) == pytest.approx(expected, rel=1e-12)


def test_lm_head_flops():
    # 2·(b·s/c)·(V/t)·h per GPU: 2 * 1024 * 6400 * 2048 for t=8, c=2
    graph = lm_head_block(GPT, shape(tp=8, cp=2), False)
    assert forward_matmul_flops(graph) == pytest.approx(2 * 1024 * 6400 * 2048)


def test_backward_flops_are_twice_forward_for_gemms_and_2_5x_for_flash():
    for op in decoder_layer(LLAMA, shape(tp=8)).ops:
        if op.kind == "gemm":
            assert op.bwd_flops == pytest.approx(2 * op.fwd_flops)
        elif op.kind == "attention":
            assert op.bwd_flops == pytest.approx(2.5 * op.fwd_flops)


# ---- collectives ------------------------------------------------------------------------------


def by_name(graph):
    return {c.name: c for c in graph.collectives}


def test_no_tp_no_cp_no_collectives():
    assert decoder_layer(GPT, shape(tp=1)).collectives == ()
    assert decoder_layer(GPT, shape(tp=1, sp=True)).collectives == ()


def test_tp_collectives_without_sequence_parallel():
    # 2 all-reduces forward (row-parallel outputs), 2 backward beside wgrad; each of the full
    # activation b·s·h·2 B = 1 * 2048 * 2048 * 2 = 8_388_608 B
    coll = by_name(decoder_layer(GPT, shape(tp=8)))
    assert set(coll) == {"tp_all_reduce", "tp_grad_all_reduce"}
    ar, grad = coll["tp_all_reduce"], coll["tp_grad_all_reduce"]
    assert (ar.kind, ar.group, ar.bytes, ar.count_fwd, ar.count_bwd) == (
        "all_reduce",
        "tp",
        8_388_608,
        2,
        0,
    )
    assert (grad.kind, grad.bytes, grad.count_fwd, grad.count_bwd, grad.overlaps_with) == (
        "all_reduce",
        8_388_608,
        0,
        2,
        "wgrad",
    )


def test_tp_collectives_with_sequence_parallel():
    # forward: 2 all-gathers + 2 reduce-scatters; backward: 2 all-gathers of output gradients,
    # 2 re-gathers of inputs (beside dgrad), 2 reduce-scatters (beside wgrad); same 8_388_608 B buffers
    coll = by_name(decoder_layer(GPT, shape(tp=8, sp=True)))
    expected = {
        "tp_all_gather": ("all_gather", 2, 2, "none"),
        "tp_reduce_scatter": ("reduce_scatter", 2, 0, "none"),
        "tp_input_regather": ("all_gather", 0, 2, "dgrad"),
        "tp_grad_reduce_scatter": ("reduce_scatter", 0, 2, "wgrad"),
    }
    assert {
        n: (c.kind, c.count_fwd, c.count_bwd, c.overlaps_with) for n, c in coll.items()
    } == expected
    assert all(c.bytes == 8_388_608 and c.group == "tp" for c in coll.values())


def test_sequence_parallel_keeps_forward_volume():
    # ring volume: all-reduce = reduce-scatter + all-gather, so 2 AR == 2 AG + 2 RS in forward
    def fwd_units(graph):
        unit = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1}
        return sum(unit[c.kind] * c.count_fwd * c.bytes for c in graph.collectives)

    assert fwd_units(decoder_layer(GPT, shape(tp=4))) == fwd_units(
        decoder_layer(GPT, shape(tp=4, sp=True))
    )


def test_sequence_parallel_divides_norm_traffic():
    # input_norm reads and writes b·s·h·2 B: 2*2*2048*2048 = 16_777_216 B; with SP over t=8: / 8
    plain = {o.name: o for o in decoder_layer(GPT, shape(tp=8)).ops}
    sp = {o.name: o for o in decoder_layer(GPT, shape(tp=8, sp=True)).ops}
    assert plain["input_norm"].fwd_bytes == 16_777_216
    assert sp["input_norm"].fwd_bytes == 16_777_216 / 8


def test_context_parallel_ring():
    # this GPU's K and V: 2 B * (2048/2 tokens) * 2 * kv_width/t = 2 * 1024 * 2 * 2048/8 = 1_048_576 B
    ring = by_name(decoder_layer(GPT, shape(tp=8, cp=2)))["cp_kv_ring"]
    assert (
        ring.group,
        ring.kind,
        ring.bytes,
        ring.count_fwd,
        ring.count_bwd,
        ring.overlaps_with,
    ) == (
        "cp",
        "ring_exchange",
        1_048_576,
        1,
        2,
        "attention",
    )
    # Llama 3 8B (GQA): 2 * (8192/2) * 2 * 1024/8 = 2_097_152 B
    ring = by_name(decoder_layer(LLAMA, shape(tp=8, cp=2, s=8192)))["cp_kv_ring"]
    assert ring.bytes == 2_097_152
    assert "cp_kv_ring" not in by_name(decoder_layer(GPT, shape(tp=8, cp=1)))


# ---- fp8, attention kinds ---------------------------------------------------------------------


def test_fp8_adds_one_cast_op():
    bf16 = decoder_layer(GPT, shape(dtype="bf16"))
    fp8 = decoder_layer(GPT, shape(dtype="fp8"))
    assert [o.name for o in fp8.ops] == [o.name for o in bf16.ops] + ["fp8_casts"]
    cast = fp8.ops[-1]
    assert cast.kind == "memory" and cast.fwd_flops == 0.0
    # forward: 3 B (read bf16, write fp8) per GEMM input element; inputs h + q + h + f per token:
    # 3 * 2048 * (2048 + 2048 + 2048 + 8192) = 88_080_384
    assert cast.fwd_bytes == pytest.approx(88_080_384)
    # backward: output gradients (q+2kv) + h + f + h per token: 3 * 2048 * (6144 + 2048 + 8192 + 2048)
    assert cast.bwd_bytes == pytest.approx(3 * 2048 * 18432)
    # GEMM FLOPs unchanged
    assert forward_matmul_flops(fp8) == forward_matmul_flops(bf16)


def test_flash_attention_is_one_fused_op():
    ops = decoder_layer(GPT, shape(tp=2, cp=2)).ops
    attn = [o for o in ops if o.selective_recompute]
    # the fused kernel, and with the K/V ring the partial-output merges (graph.cp_ring)
    assert [(o.name, o.kind) for o in attn] == [
        ("flash_attention", "attention"),
        ("ring_attention_merge", "memory"),
    ]
    # 4·b·(a/t)·(s/c)·s·d = 4 * 1 * 8 * 1024 * 2048 * 128
    assert attn[0].fwd_flops == pytest.approx(4 * 8 * 1024 * 2048 * 128)
    # causal share of computed tiles: (1 + c/s)/2
    assert attn[0].causal_fraction == pytest.approx(0.5 * (1 + 2 / 2048))
    assert not any(
        o.name.startswith("attention_scores") or o.name == "softmax_dropout" for o in ops
    )


def test_unfused_attention_is_two_gemms_and_softmax():
    ops = decoder_layer(GPT, shape(tp=2, attention="unfused")).ops
    attn = [o for o in ops if o.selective_recompute]
    assert [(o.name, o.kind) for o in attn] == [
        ("attention_scores", "gemm"),
        ("softmax_dropout", "memory"),
        ("attention_over_values", "gemm"),
    ]
    # score matrix b·(a/t)·s·s = 8 * 2048 * 2048 = 33_554_432 elements; softmax (read 2 + write 2),
    # dropout (read 2 + write 2 + mask 1) = 9 B each
    assert attn[1].fwd_bytes == pytest.approx(9 * 33_554_432)
    assert attn[0].gemm_shape == (8, 2048, 2048, 128)
    assert attn[2].gemm_shape == (8, 2048, 128, 2048)
    # Llama (no dropout): softmax only, 4 B per score; 32/8 = 4 heads * 2048 * 2048
    llama = [
        o
        for o in decoder_layer(LLAMA, shape(tp=8, attention="unfused")).ops
        if o.name == "softmax_dropout"
    ]
    assert llama[0].fwd_bytes == pytest.approx(4 * 4 * 2048 * 2048)


def test_rotary_only_for_rope_models():
    assert "rotary_embedding" in {o.name for o in decoder_layer(LLAMA, shape()).ops}
    assert "rotary_embedding" not in {o.name for o in decoder_layer(GPT, shape()).ops}


def test_qk_norm_weights_and_traffic_by_hand():
    """Qwen3's per-head q/k RMSNorm: 2·d_head gains a layer; one read and one write of the
    q and k heads a GPU holds (tokens·(a + a_kv)·d/t elements, 2 B each)."""
    qwen = LLAMA.model_copy(update={"qk_norm": True, "head_dim": 128})
    assert qwen.total_params - LLAMA.total_params == 32 * 2 * 128
    ops = {o.name: o for o in decoder_layer(qwen, shape(tp=2)).ops}
    elements = 2048 * (32 + 8) * 128 / 2
    assert ops["qk_norm"].fwd_bytes == pytest.approx(2 * 2 * elements)
    assert "qk_norm" not in {o.name for o in decoder_layer(LLAMA, shape(tp=2)).ops}
    qwen3_moe = load_model("qwen3-30b-a3b")
    assert qwen3_moe.qk_norm and qwen3_moe.total_params == 30_532_122_624  # the Hub's count


def test_tp_must_divide_kv_heads():
    # Llama 3 8B: 8 KV heads; tp = 16 would leave half a key/value head per GPU (Megatron-LM
    # requires num_query_groups % tp == 0), so the plan is rejected naming tp.
    plan = PlanSpec(gpus=16, tp=16, global_batch=16, seq_length=8192)
    violations = plan_violations(plan, LLAMA)
    assert violations and violations[0].field == "plan.tp" and "kv_heads=8" in violations[0].rule
