"""Mixture-of-experts shapes, parameters, FLOPs, routing statistics and op graphs against hand-computed values."""

import math

import pytest
from pydantic import ValidationError

from paraplan.catalog import load_model, load_system
from paraplan.cost.comm import (
    GroupSpan,
    all_to_all_split_bytes,
    all_to_all_time_s,
    hierarchical_all_to_all_time_s,
)
from paraplan.cost.flops import model_flops_per_token
from paraplan.cost.flops import moe_model_flops_per_token
from paraplan.cost.moe import (
    expected_groups_hit,
    expert_span,
    moe_collective_time_s,
)
from paraplan.graph.moe_mlp import moe_mlp_activation_bytes
from paraplan.graph.routing import expected_max_load_factor, routed_load_factor
from paraplan.graph.mla import attention_activation_bytes, window_fraction

from paraplan.graph.moe import ExpertShape, moe_model_layer, mtp_block
from paraplan.graph.moe_mlp import routed_rows
from paraplan.graph.transformer import LayerShape
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.moe_model import is_moe_layer, mla_params
from paraplan.specs.moe_plan import MoEPlanFields, expert_data_parallel

TOY = dict(layers=4, hidden=64, heads=4, ffn_hidden=256, vocab=100, mlp="swiglu", norm="rmsnorm")


def toy(**extra) -> ModelSpec:
    return ModelSpec(**(TOY | dict(experts=8, top_k=2, moe_ffn_hidden=32) | extra))


# ---- model rules -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "extra, words",
    [
        (dict(top_k=2), "needs experts > 0"),
        (dict(experts=8, top_k=9, moe_ffn_hidden=32), "top_k=9 must be between 1 and experts=8"),
        (dict(experts=8, top_k=2), "moe_ffn_hidden is required"),
        (
            dict(experts=8, top_k=2, moe_ffn_hidden=32, dense_layers=4),
            "dense_layers=4 must be below layers=4",
        ),
        (
            dict(attention_type="mla", kv_lora_rank=16),
            "needs qk_nope_head_dim, qk_rope_head_dim, v_head_dim",
        ),
        (dict(kv_lora_rank=16), "needs attention_type=mla"),
        (dict(sliding_window_pattern=2), "needs sliding_window"),
    ],
)
def test_model_rules_name_the_field(extra, words):
    with pytest.raises(ValidationError) as err:
        ModelSpec(**(TOY | extra))
    assert words in str(err.value)


def test_mla_needs_one_kv_head_per_head():
    with pytest.raises(ValidationError, match="kv_heads=2 must equal heads=4"):
        ModelSpec(
            **TOY,
            kv_heads=2,
            attention_type="mla",
            kv_lora_rank=16,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=16,
        )


def test_moe_layer_pattern():
    m = toy(layers=8, dense_layers=2, moe_layer_interval=2)
    assert m.moe_layers == (3, 5, 7)  # (i - 2 + 1) % 2 == 0
    assert [is_moe_layer(toy(), i) for i in range(4)] == [True] * 4


# ---- parameters --------------------------------------------------------------------------------
def test_toy_parameters_by_hand():
    m = toy()
    attention = 64 * (64 + 2 * 64) + 64 * 64  # 16384
    expert = 3 * 64 * 32  # 6144
    layer_total = attention + 8 * 64 + 8 * expert + 2 * 64  # router 512, two rms norms
    layer_active = attention + 8 * 64 + 2 * expert + 2 * 64
    rest = 100 * 64 * 2 + 64  # embedding, untied head, final norm
    assert m.total_params == 4 * layer_total + rest
    assert m.active_params == 4 * layer_active + rest


def test_deepseek_v3_mla_layer_parameters_by_hand():
    parts = mla_params(load_model("deepseek-v3"))
    assert parts == {
        "q_down": 7168 * 1536,
        "q_norm": 1536,
        "q_up": 1536 * 128 * 192,
        "kv_down": 7168 * 576,
        "kv_norm": 512,
        "kv_up": 512 * 128 * 256,
        "out_proj": 128 * 128 * 7168,
    }
    assert sum(parts.values()) == 187_107_328


@pytest.mark.parametrize(
    "name, total_b, active_b",
    [  # published totals: DeepSeek-V3 report §1 (671B / 37B without the MTP module), Qwen3 report Table 2,
        # Mixtral paper §2 (46.7B / 12.9B), gpt-oss model card Table 1 (116.8B)
        ("deepseek-v3", 671, 37),
        ("qwen3-235b-a22b", 235, 22),
        ("qwen3-30b-a3b", 30.5, 3.3),
        ("mixtral-8x7b", 46.7, 12.9),
        ("gpt-oss-120b", 116.8, None),
        ("grok-1", 314, None),
    ],
)
def test_catalog_totals_match_published(name, total_b, active_b):
    from paraplan.specs.moe_model import total_params

    m = load_model(name)
    assert total_params(m, include_mtp=False) / 1e9 == pytest.approx(total_b, rel=0.01)
    if active_b is not None:
        assert total_params(m, active=True, include_mtp=False) / 1e9 == pytest.approx(
            active_b, rel=0.03
        )


def test_every_moe_catalog_model_loads_and_cites_per_field():
    from importlib import resources

    for name in (
        "deepseek-v3",
        "kimi-k2",
        "qwen3-30b-a3b",
        "qwen3-235b-a22b",
        "mixtral-8x7b",
        "mixtral-8x22b",
        "gpt-oss-120b",
        "grok-1",
    ):
        m = load_model(name)
        assert m.is_moe and m.source
        text = (resources.files("paraplan.catalog") / "models" / f"{name}.yaml").read_text()
        fields = [
            line
            for line in text.splitlines()
            if line and not line.startswith(("#", "name:", "source:"))
        ]
        assert all(
            "#" in line
            for line in fields
            if not line.startswith(
                ("shared_experts: 0", "dense_layers: 0", "moe_layer_interval: 1")
            )
        ), name


def test_moe_systems_load():
    h800 = load_system("dgx-h800")
    assert h800.node.nvlink_bandwidth == 200e9 and h800.network.nic_bandwidth == 50e9
    assert load_system("dgx-b300").accelerator.hbm_capacity == 288e9
    assert load_system("gb300-nvl72").node.gpus_per_domain == 72


# ---- FLOPs -------------------------------------------------------------------------------------
def test_dense_models_keep_the_dense_flop_count():
    m = load_model("llama3-8b")
    assert moe_model_flops_per_token(m, 4096) == pytest.approx(model_flops_per_token(m, 4096))


def test_mixtral_active_flops_by_hand():
    attention = 4096 * (4096 + 2 * 1024) + 4096 * 4096
    moe = 8 * 4096 + 2 * 3 * 4096 * 14336
    matmul = 32 * (attention + moe) + 32000 * 4096
    # attention counted causally, (s+1)/2 keys per query (cost/flops.py convention: MFU <= 1)
    expected = 6 * matmul + 32 * 6 * (4096 + 1) / 2 * (4096 + 4096)
    assert model_flops_per_token(load_model("mixtral-8x7b"), 4096) == expected == 79_713_533_952


def test_mtp_adds_a_layer_and_a_head():
    m = load_model("deepseek-v3")
    without = moe_model_flops_per_token(m.model_copy(update={"mtp_layers": 0}), 4096)
    assert moe_model_flops_per_token(m, 4096) - without > 6 * m.vocab * m.hidden


# ---- routing statistics ------------------------------------------------------------------------
def test_expected_groups_hit_by_hand():
    # E=4, k=2, G=2: a group is missed with prob C(2,2)/C(4,2) = 1/6
    assert expected_groups_hit(4, 2, 2) == pytest.approx(2 * 5 / 6)
    assert expected_groups_hit(256, 8, 1) == 1.0
    assert expected_groups_hit(8, 8, 8) == pytest.approx(8.0)


def test_load_factors():
    assert expected_max_load_factor(100, 2) == pytest.approx(1 + 0.1 * math.sqrt(2 * math.log(2)))
    assert expected_max_load_factor(100, 1) == 1.0
    assert routed_load_factor(4096, 8, 8, "learned", 1.25) == 1.25
    assert routed_load_factor(4096, 8, 8, "forced", None) == 1.0
    assert 1.0 < routed_load_factor(4096, 8, 8, "learned", None) < 1.02


# ---- all-to-all --------------------------------------------------------------------------------
def test_all_to_all_split_and_time_by_hand():
    system = load_system("dgx-h100-80gb")
    span = GroupSpan(16, 8, 2)
    intra, inter = all_to_all_split_bytes(16e6, span)
    assert (intra, inter) == (7e6, 8e6)
    nic = system.network.nic_bandwidth * system.network.efficiency
    alpha = system.network.latency
    expected = max(
        7e6 / (system.node.nvlink_bandwidth * system.node.nvlink_efficiency), 8e6 / nic
    ) + min(15 * alpha, 8 * alpha)
    assert all_to_all_time_s(16e6, span, system) == pytest.approx(expected)
    assert all_to_all_time_s(16e6, GroupSpan(1, 1, 1), system) == 0.0
    assert hierarchical_all_to_all_time_s(0.0, 0.0, span, system) == 0.0


def test_expert_span_follows_etp_stride():
    system = load_system("dgx-h100-80gb")
    assert expert_span(64, 1, system) == GroupSpan(64, 8, 8)
    assert expert_span(8, 2, system) == GroupSpan(8, 4, 2)


def test_deepep_sends_less_over_the_network_than_alltoall():
    m, system = load_model("deepseek-v3"), load_system("dgx-h800")
    span = expert_span(64, 1, system)
    size = 2 * 7168 * 4096.0
    dedup = moe_collective_time_s("all_to_all_dedup", size, span, system, m)
    plain = moe_collective_time_s("all_to_all", size * m.top_k, span, system, m)
    assert 0 < dedup < plain


# ---- op graphs ---------------------------------------------------------------------------------
SHAPE = LayerShape(
    tp=1,
    cp=1,
    micro_batch=1,
    seq_length=4096,
    sequence_parallel=False,
    attention="flash",
    dtype="bf16",
)


def test_moe_layer_expert_gemms_by_hand():
    m = load_model("qwen3-30b-a3b")
    g = moe_model_layer(m, SHAPE._replace(expert=ExpertShape(ep=8, balance="forced")), True)
    ops = {op.name: op for op in g.ops}
    # every rank sends 4096 tokens x top-8 and, balanced, receives as many rows: 32768 over its
    # 128/8 = 16 experts = 2048 rows each
    assert ops["expert_fc1"].gemm_shape == (16, 2048, 2 * 768, 2048)
    assert ops["expert_fc2"].gemm_shape == (16, 2048, 2048, 768)
    assert (
        ops["expert_fc1"].fwd_flops + ops["expert_fc2"].fwd_flops == 2 * 4096 * 8 * 3 * 2048 * 768
    )
    assert ops["router"].fwd_flops == 2 * 4096 * 128 * 2048
    assert g.expert_weight_params == 16 * 3 * 2048 * 768
    names = [c.name for c in g.collectives]
    assert names == ["ep_dispatch_all_to_all", "ep_combine_all_to_all"]
    assert g.collectives[0].bytes == 2 * 2048 * 4096 * 8  # the top-8 copies of every token


def test_expert_output_bias_pass_by_hand():
    # gpt-oss-120b carries expert biases: Megatron-Core adds the fc2 bias, scaled by the routing probability,
    # in an unfused pass (TEGroupedMLP._apply_bias); 4096 tokens x top-4 over EP 64, balanced: 16384 rows of
    # 2880 on each rank, 6 bf16 passes over them each way. A bias-free model has no such pass.
    g = moe_model_layer(
        load_model("gpt-oss-120b"),
        SHAPE._replace(expert=ExpertShape(ep=64, balance="forced")),
        True,
    )
    bias = {op.name: op for op in g.ops}["expert_output_bias"]
    assert bias.kind == "memory"
    assert bias.fwd_bytes == bias.bwd_bytes == 6 * 2 * 2880 * 16384
    plain = moe_model_layer(
        load_model("qwen3-30b-a3b"),
        SHAPE._replace(expert=ExpertShape(ep=8, balance="forced")),
        True,
    )
    assert "expert_output_bias" not in {op.name for op in plain.ops}


def test_clamped_glu_pass_by_hand():
    # gpt-oss-120b clamps its GLU (swiglu_limit 7): Megatron-Core chunks the fc1 output, clamps both halves and
    # concatenates them before the fused activation, then copies a scalar to the GPU (a host sync). 16384 rows
    # of fc1 width 2 x 2880 on each rank (EP 64, balanced): 4 bf16 passes forward; Qwen3 has none
    g = moe_model_layer(
        load_model("gpt-oss-120b"),
        SHAPE._replace(expert=ExpertShape(ep=64, balance="forced")),
        True,
    )
    names = [op.name for op in g.ops]
    clamp = g.ops[names.index("expert_glu_clamp")]
    assert clamp.kind == "memory"
    assert clamp.fwd_bytes == 4 * 2 * 16384 * 5760
    # backward: clamp_backward's masks and selects, (3e + 2) + (4e + 6) per half-row element, and the chunk's
    # concatenation 2e per element: (22 + 8) / 2 = 15 B per fc1 element in bf16
    assert clamp.bwd_bytes == 15 * 16384 * 5760
    order = ("expert_fc1", "expert_glu_clamp", "activation_host_sync", "expert_activation")
    assert [names.index(n) for n in order] == sorted(names.index(n) for n in order)
    plain = moe_model_layer(
        load_model("qwen3-30b-a3b"),
        SHAPE._replace(expert=ExpertShape(ep=8, balance="forced")),
        True,
    )
    assert not {"expert_glu_clamp", "activation_host_sync"} & {op.name for op in plain.ops}


def test_clamped_glu_keeps_its_copy_by_hand():
    # the clamps keep the fc1 output and the fused activation the clamped copy: 16384 rows x 5760 x 2 B more,
    # unless moe_act recomputation checkpoints the activation (it then keeps only its input)
    m = load_model("gpt-oss-120b")
    shape = SHAPE._replace(expert=ExpertShape(ep=64, balance="forced"))
    clamped = moe_mlp_activation_bytes(m, shape, shape.expert, ())
    plain = moe_mlp_activation_bytes(
        m.model_copy(update={"glu_clamp": None}), shape, shape.expert, ()
    )
    assert clamped - plain == 16384 * 5760 * 2
    act = ("moe_act",)
    assert moe_mlp_activation_bytes(m, shape, shape.expert, act) == moe_mlp_activation_bytes(
        m.model_copy(update={"glu_clamp": None}), shape, shape.expert, act
    )


def test_hybridep_fuses_the_permutations():
    # Hybrid-EP's dispatch reads the tokens in place and its combine reduces their copies (Megatron-Core
    # HybridEPDispatch): no permute or unpermute pass; the re-sort by expert (16 local experts) stays; the same
    # expert GEMMs; DeepEP keeps every pass, and both send one copy of the 4096 tokens (deduplicated dispatch)
    m = load_model("qwen3-30b-a3b")
    layers = {
        d: moe_model_layer(
            m, SHAPE._replace(expert=ExpertShape(ep=8, dispatcher=d, balance="forced")), True
        )
        for d in ("alltoall", "deepep", "hybridep")
    }
    names = {d: {op.name for op in g.ops} for d, g in layers.items()}
    passes = {"permute", "sort_chunks", "unsort_chunks", "unpermute"}
    assert passes <= names["alltoall"] and passes <= names["deepep"]
    assert names["hybridep"] == names["alltoall"] - {"permute", "unpermute"}
    sort = {op.name: op for op in layers["hybridep"].ops}["sort_chunks"]
    assert sort.fwd_bytes == 2 * 2 * 2048 * 4096 * 8  # read and write of the 32768 received rows
    assert layers["hybridep"].collectives[0].bytes == layers["deepep"].collectives[0].bytes
    assert layers["hybridep"].collectives[0].bytes == 2 * 2048 * 4096


def test_capacity_pads_every_expert():
    m = load_model("qwen3-30b-a3b")
    padded = routed_rows(m, SHAPE, ExpertShape(ep=8, capacity_factor=1.5))
    assert padded == 4096 * 8 * 1.5


def test_etp_and_allgather_dispatchers():
    m = load_model("mixtral-8x7b")
    g = moe_model_layer(m, SHAPE._replace(expert=ExpertShape(ep=4, etp=2, balance="forced")), True)
    assert [c.group for c in g.collectives] == ["ep", "ep", "etp", "etp"]
    ag = moe_model_layer(m, SHAPE._replace(expert=ExpertShape(ep=8, dispatcher="allgather")), True)
    assert ag.collectives[0].kind == "all_gather" and ag.collectives[0].bytes == 2 * 4096 * 4096 * 8


def test_dense_first_layers_and_mla():
    m = load_model("deepseek-v3")
    shape = SHAPE._replace(expert=ExpertShape(ep=8))
    dense = moe_model_layer(m, shape, False)
    assert dense.expert_weight_params == 0.0 and not dense.collectives
    names = [op.name for op in dense.ops]
    assert names[:8] == [
        "input_norm",
        "mla_q_down",
        "mla_q_norm",
        "mla_q_up",
        "mla_kv_down",
        "mla_kv_norm",
        "mla_kv_up",
        "mla_rotary_concat",
    ]
    attention = next(op for op in dense.ops if op.kind == "attention")
    assert attention.fwd_flops == 2 * 128 * 4096 * 4096 * (192 + 128)
    mtp = mtp_block(m, shape)
    assert "mtp_projection" in [op.name for op in mtp.ops] and "lm_head" in [
        op.name for op in mtp.ops
    ]


def test_mla_up_proj_recompute_drops_the_expanded_tensors():
    m = load_model("deepseek-v3")
    keep = attention_activation_bytes(m, SHAPE, (), True)
    drop = attention_activation_bytes(m, SHAPE, ("mla_up_proj",), True)
    # Q (a·192), K (a·192), V (a·128), 2 bytes each; the up-projection outputs q and kv die in the
    # forward (Megatron-Core multi_latent_attention.py@d7288711: rotary saves only cos/sin)
    assert keep - drop == 2 * 4096 * 128 * (192 + 192 + 128)


def test_mla_attention_activation_bytes_by_hand():
    m = load_model("deepseek-v3")
    t, tok = SHAPE.tp, SHAPE.local_tokens
    sp, ab, gin = SHAPE.sp_tokens, SHAPE.act_bytes, SHAPE.gemm_input_bytes
    h, a = 7168, 128
    norm_and_gemm_in = ab * sp * h + gin * sp * h
    latents = tok * (
        ab * (1536 + 512 + 64) + gin * (1536 + 512)
    )  # d_q, d_c, d_r latents; norm outputs
    qkv = ab * tok * a * (192 + 192 + 128) / t  # query, key (d_n+d_r = 192), value (d_v = 128)
    out_in = gin * tok * a * 128 / t
    stats = 4.0 * tok * a / t  # fp32 log-sum-exp
    base = norm_and_gemm_in + latents + out_in
    assert attention_activation_bytes(m, SHAPE, (), False) == pytest.approx(base + qkv + stats)
    assert attention_activation_bytes(m, SHAPE, ("mla_up_proj",), False) == pytest.approx(
        base + stats
    )


def test_window_fraction():
    assert window_fraction(None, 4096, 1) == pytest.approx(0.5 * (1 + 1 / 4096))
    assert window_fraction(128, 4096, 1) == pytest.approx((128 * 4096 - 128 * 127 / 2) / 4096**2)


def test_windowed_block_costs_the_mean_of_its_layers():
    # gpt-oss alternates 128-token windows and full causal layers; its layer block stands for both, so its fused
    # attention keeps the kernel call (head dim 64 shape factor, softmax exponentials' bound) and costs the mean
    # of an all-windowed and an all-full block's, each way, on a GB200
    from paraplan.cost.compute import op_times_s

    m = load_model("gpt-oss-120b")
    acc = load_system("gb200-nvl72").accelerator
    shape = SHAPE._replace(micro_batch=4, expert=ExpertShape(ep=64, balance="forced"))

    def attention(model):
        g = moe_model_layer(model, shape, True)
        return next(op for op in g.ops if op.kind == "attention")

    mixed = attention(m)
    assert mixed.attention_call == (4096, 4096, 64, True)
    windowed = attention(m.model_copy(update={"sliding_window_pattern": 0}))
    full = attention(m.model_copy(update={"sliding_window": None, "sliding_window_pattern": 0}))
    times = [op_times_s(op, acc, "bf16") for op in (mixed, windowed, full)]
    for way in (0, 1):
        assert times[0][way] == pytest.approx(0.5 * (times[1][way] + times[2][way]), rel=1e-6)


# ---- plan knobs --------------------------------------------------------------------------------
def test_plan_knobs():
    """The knobs' own fields; their rules against model and degrees: tests/unit/test_rules.py."""
    assert expert_data_parallel(tp=2, cp=1, dp=16, ep=8, etp=1) == 4
    with pytest.raises(ValidationError, match="unknown module 'attn'"):
        MoEPlanFields(recompute_modules=["attn"])


def test_expert_state_is_sharded_over_the_expert_data_parallel_group():
    """The experts' gradient group (whose size ZeRO shards their state over, step.stage_memory) is the
    expert-data-parallel group: edp = tp·cp·dp/(ep·etp) = 16/8 = 2 ranks."""
    from paraplan.step.estimate import step_inputs
    from paraplan.specs.plan import PlanSpec

    plan = PlanSpec(gpus=16, ep=8, zero=1, global_batch=64, seq_length=4096)
    groups = step_inputs(
        load_model("qwen3-30b-a3b"), load_system("dgx-h100-80gb"), plan
    ).gradient_groups
    assert groups["expert"].size == expert_data_parallel(tp=1, cp=1, dp=16, ep=8, etp=1) == 2
    assert groups["dense"].size == 16


def test_grouped_gemm_pays_fixed_costs_per_four_experts():
    from paraplan.cost.compute import gemm_efficiency, grouped_gemm_time_s

    acc = load_system("dgx-h100-80gb").accelerator
    flops = 2.0 * 16 * 2048 * 1536 * 2048
    rate = acc.peak_matrix_flops("bf16") * gemm_efficiency(1, 2048, 1536, 2048, acc, "bf16")
    fixed = acc.efficiency.gemm_ramp_s + acc.efficiency.kernel_overhead_s
    assert grouped_gemm_time_s(flops, (16, 2048, 1536, 2048), acc, "bf16") == pytest.approx(
        flops / rate + 4 * fixed
    )
    assert grouped_gemm_time_s(0.0, (16, 2048, 1536, 2048), acc, "bf16") == 0.0


def test_fp8_grouped_gemm_keeps_the_fitted_share_of_the_fp8_speed_up():
    """fp8 multi-stream expert GEMMs keep efficiency.grouped_gemm_fp8 of the dense fp8 speed-up over bf16
    (validate.fitted moe.grouped_gemm_fp8: the refit runs to its bound 0, the bf16 price)."""
    from paraplan.cost.compute import grouped_gemm_share, grouped_gemm_time_s

    acc = load_system("dgx-h100-80gb").accelerator
    assert acc.efficiency.grouped_gemm_fp8 == 0.0
    assert grouped_gemm_share(acc, "fp8") == grouped_gemm_share(acc, "bf16") == 1.0
    shape = (16, 2048, 1536, 2048)
    flops = 2.0 * 16 * 2048 * 1536 * 2048
    assert grouped_gemm_time_s(flops, shape, acc, "fp8") == pytest.approx(
        grouped_gemm_time_s(flops, shape, acc, "bf16")
    )
