"""Each cost term against a value worked out by hand.

Every expected value below is written as the arithmetic on literal numbers (with the formula in a
comment), never by calling the function under test with other arguments. Hardware numbers come
from a small synthetic system with round numbers, or from the A100 / H100 catalog entries
(A100: 312 TFLOP/s bf16, 108 SMs, GEMM cap 0.778, attention 0.6, HBM 2039 GB/s x 0.8, 26.4 us GEMM ramp,
4 us kernel overhead).
"""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.cost import comm, compute, flops, memory
from paraplan.graph.ops import Op
from paraplan.graph.layers import decoder_layer
from paraplan.graph.transformer import (
    LayerShape,
    _gemm,
    embedding_weight_params,
    layer_weight_params,
)
from paraplan.step.schedules import bubble_from_work_s
from paraplan.specs.plan import PlanSpec
from paraplan.specs.split import stage_layer_counts
from paraplan.specs.system import SystemSpec

A100 = load_system("dgx-a100-80gb")
H100 = load_system("dgx-h100-80gb")
GPT3_175B = load_model("gpt3-175b")
LLAMA3_8B = load_model("llama3-8b")

# A system with round numbers for the collectives: NVLink 100 GB/s at 50 % = 50 GB/s, 5 us;
# NIC 10 GB/s at 50 % = 5 GB/s, 10 us; 8 GPUs per NVLink domain.
ROUND = SystemSpec.model_validate(
    {
        "name": "round",
        "accelerator": {
            "name": "round-gpu",
            "matrix_flops": {"bf16": 100e12},
            "vector_flops": {"bf16": 10e12},
            "hbm_capacity": 80e9,
            "hbm_bandwidth": 1e12,
            "sm_count": 100,
        },
        "node": {
            "gpus_per_domain": 8,
            "nvlink_bandwidth": 100e9,
            "nvlink_latency": 5e-6,
            "nvlink_efficiency": 0.5,
        },
        "network": {"nic_bandwidth": 10e9, "latency": 10e-6, "efficiency": 0.5},
    }
)


def approx(x: float, rel: float = 1e-12) -> object:
    return pytest.approx(x, rel=rel, abs=0.0)


# ---------------------------------------------------------------------------------------------
# compute.py
# ---------------------------------------------------------------------------------------------


def test_wave_efficiency_one_full_wave():
    # 1536 x 2304 output = (1536/128) x (2304/256) = 12 x 9 = 108 tiles of 128x256 -> one full wave
    # on 108 SMs, no padding: 1.0 (256x128 tiles: 6 x 18 = 108 as well).
    assert compute.gemm_wave_efficiency(1, 1536, 2304, 108) == approx(1.0)


def test_wave_efficiency_partial_wave_picks_smaller_tile():
    # 1536 x 2560 output on 108 SMs:
    #   128x256: 12 x 10 = 120 tiles -> 2 waves: 1.0  * 120/216 = 0.5556
    #   128x128: 12 x 20 = 240 tiles -> 3 waves: 0.95 * 240/324 = 0.7037
    #   64x128 : 24 x 20 = 480 tiles -> 5 waves: 0.85 * 480/540 = 0.7556  <- best
    assert compute.gemm_wave_efficiency(1, 1536, 2560, 108) == approx(0.85 * 480 / 540)


def test_wave_efficiency_tile_padding():
    # 100 x 100 output, one tile whatever the shape; best is a 64x128 (or 128x64) tile:
    # 0.85 * (100*100) / (1 wave * 108 SMs * 64*128) = 0.85 * 10000 / 884736
    assert compute.gemm_wave_efficiency(1, 100, 100, 108) == approx(0.85 * 10000 / 884736)


def test_wave_efficiency_batched():
    # 4 x (384 x 768): 128x256 tiles 4 * 3 * 3 = 36 tiles on 108 SMs -> 1 wave, 36/108 = 1/3;
    # 64x128: 4 * 6 * 6 = 144 tiles -> 2 waves, 0.85 * 144/216 = 0.5667;
    # 128x128: 4 * 3 * 6 = 72 tiles -> 1 wave, 0.95 * 72/108 = 0.6333  <- best
    assert compute.gemm_wave_efficiency(4, 384, 768, 108) == approx(0.95 * 72 / 108)


def test_depth_efficiency():
    # k / (k + 32)
    assert compute.gemm_depth_efficiency(32) == approx(0.5)
    assert compute.gemm_depth_efficiency(4096) == approx(4096 / 4128)
    assert compute.gemm_depth_efficiency(96) == approx(0.75)


def test_gemm_time_a100():
    # (1, 1536, 2304, 4096): 2*1536*2304*4096 = 28_991_029_248 FLOPs; one full wave (1.0),
    # depth 4096/4128; rate = 312e12 * 0.778 * 1.0 * 4096/4128; + 26.4 us ramp + 4 us launch
    # (cap 0.778 = MAMF kernel cap 0.8946 x in-step share 0.870, ramp refitted with it; catalog.gemm_benchmarks).
    flops_ = 28_991_029_248.0
    expected = flops_ / (312e12 * 0.778 * 1.0 * (4096 / 4128)) + 26.4e-6 + 4e-6
    got = compute.gemm_time_s(flops_, (1, 1536, 2304, 4096), A100.accelerator, "bf16")
    assert got == approx(expected)


def test_gemm_time_zero_flops_is_zero():
    assert compute.gemm_time_s(0.0, (1, 128, 128, 128), A100.accelerator, "bf16") == 0.0


def test_gemm_time_fp8_uses_fp8_peak_and_cap():
    # H100 fp8: 1978.9 TFLOP/s at gemm_fp8 = 0.60. Shape (1, 1536, 2304, 4096) on 132 SMs:
    #   128x256: 108 tiles -> 1 wave: 108/132 = 0.8182
    #   128x128: 12*18 = 216 tiles -> 2 waves: 0.95*216/264 = 0.7773
    #   64x128 : 24*18 = 432 tiles -> 4 waves: 0.85*432/528 = 0.6955   => 108/132
    flops_ = 28_991_029_248.0
    expected = flops_ / (1978.9e12 * 0.560 * (108 / 132) * (4096 / 4128)) + 40e-6 + 4e-6
    assert compute.gemm_time_s(flops_, (1, 1536, 2304, 4096), H100.accelerator, "fp8") == approx(
        expected
    )


def test_memory_time():
    # 1 GB / (2039 GB/s * 0.8) + 4 us
    assert compute.memory_time_s(1e9, A100.accelerator) == approx(1e9 / (2039e9 * 0.8) + 4e-6)
    assert compute.memory_time_s(0.0, A100.accelerator) == 0.0


def test_memory_kernel_roofline_uses_vector_flops():
    """Element-wise kernels are bound by HBM unless vector FLOP/s are scarce (roofline)."""
    acc = ROUND.accelerator  # 1 TB/s HBM at 80 %, 10 TFLOP/s vector bf16
    assert compute.memory_time_s(1e9, acc, flops=1e9) == approx(1e9 / 0.8e12 + 4e-6)  # memory-bound
    assert compute.memory_time_s(1e9, acc, flops=1e11) == approx(
        1e11 / 10e12 + 4e-6
    )  # vector-bound
    slow = acc.model_copy(update={"vector_flops": {"bf16": 1e9}})
    op = decoder_layer(LLAMA3_8B, LayerShape(1, 1, 1, 2048, False, "flash", "bf16")).ops[0]
    assert (
        op.name == "input_norm" and op.fwd_flops == 4.0 * 2048 * 4096
    )  # RMSNorm: 4 FLOPs per element
    assert compute.op_times_s(op, slow, "bf16")[0] > compute.op_times_s(op, acc, "bf16")[0]


def test_attention_time():
    # 1 TFLOP, causal half: 1e12 * 0.5 / (312e12 * 0.6) + 4 us
    assert compute.attention_time_s(1e12, 0.5, A100.accelerator, "bf16") == approx(
        0.5e12 / 187.2e12 + 4e-6
    )
    # fp8 plans run attention at the bf16 peak: H100 989.4 TFLOP/s x 0.45
    assert compute.attention_time_s(1e12, 0.5, H100.accelerator, "fp8") == approx(
        0.5e12 / (989.4e12 * 0.45) + 4e-6
    )


def test_op_times_gemm_backward_is_dgrad_plus_wgrad():
    # Y[1536, 2304] = X[1536, 4096] . W[4096, 2304]; F = 28_991_029_248 FLOPs each pass.
    # forward: one full wave (1.0), depth 4096.
    # dgrad dX[1536, 4096], depth 2304: 128x256 -> 12*16 = 192 tiles, 2 waves -> 192/216 = 8/9
    #   (128x128: 384 tiles, 4 waves, 0.95*384/432 = 0.844; 64x128: 768 tiles, 8 waves, 0.756).
    # wgrad dW[4096, 2304], depth 1536: 128x256 -> 32*9 = 288 tiles, 3 waves -> 288/324 = 8/9
    #   (128x128: 576 tiles, 6 waves, 0.844; 64x128: 1152 tiles, 11 waves, 0.85*1152/1188 = 0.824).
    op = _gemm("linear", 1, 1536, 2304, 4096)
    f = 28_991_029_248.0
    assert op.fwd_flops == f and op.bwd_flops == 2 * f
    fwd, bwd = compute.op_times_s(op, A100.accelerator, "bf16")
    peak = (
        312e12 * 0.778
    )  # the A100 cap (catalog.gemm_benchmarks); fixed time 26.4 us ramp + 4 us launch
    assert fwd == approx(f / (peak * 1.0 * 4096 / 4128) + 30.4e-6)
    dgrad = f / (peak * (8 / 9) * (2304 / 2336)) + 30.4e-6
    wgrad = f / (peak * (8 / 9) * (1536 / 1568)) + 30.4e-6
    assert bwd == approx(dgrad + wgrad)


def test_op_times_attention_and_memory_ops():
    attn = Op("flash", "attention", 1e12, 0.0, 2.5e12, 0.0, causal_fraction=0.5)
    fwd, bwd = compute.op_times_s(attn, A100.accelerator, "bf16")
    assert fwd == approx(0.5e12 / 187.2e12 + 4e-6)
    assert bwd == approx(1.25e12 / 187.2e12 + 4e-6)
    mem_op = Op("norm", "memory", 0.0, 1e9, 0.0, 2e9)
    fwd, bwd = compute.op_times_s(mem_op, A100.accelerator, "bf16")
    assert fwd == approx(1e9 / 1631.2e9 + 4e-6)
    assert bwd == approx(2e9 / 1631.2e9 + 4e-6)


# ---------------------------------------------------------------------------------------------
# comm.py
# ---------------------------------------------------------------------------------------------


def plan(**kw) -> PlanSpec:
    kw.setdefault("global_batch", 1024)
    kw.setdefault("seq_length", 2048)
    return PlanSpec(**kw)


def test_group_stride_default_placement():
    p = plan(gpus=32, tp=2, cp=2, dp=4, pp=2)  # tp-cp-dp-pp
    assert [comm.group_stride(p, g) for g in ("tp", "cp", "dp", "pp")] == [1, 2, 4, 16]


def test_group_stride_dp_innermost():
    p = plan(gpus=32, tp=2, cp=2, dp=4, pp=2, placement="dp-tp-cp-pp")
    # dp 1; tp after dp: 4; cp after dp, tp: 4*2 = 8; pp: 4*2*2 = 16
    assert [comm.group_stride(p, g) for g in ("dp", "tp", "cp", "pp")] == [1, 4, 8, 16]


def test_group_span_default_placement():
    p = plan(gpus=32, tp=2, cp=2, dp=4, pp=2)
    span = lambda g: comm.group_span(p, ROUND, g)  # noqa: E731
    # tp: ranks {0, 1} -> both in domain [0, 8)
    assert span("tp") == comm.GroupSpan(2, 2, 1)
    # cp: stride 2, ranks {0, 2}
    assert span("cp") == comm.GroupSpan(2, 2, 1)
    # dp: stride 4, ranks {0, 4, 8, 12}: 0 and 4 in the first domain -> 2 per domain, 2 domains
    assert span("dp") == comm.GroupSpan(4, 2, 2)
    # pp: stride 16, ranks {0, 16} -> 1 per domain, 2 domains
    assert span("pp") == comm.GroupSpan(2, 1, 2)
    # cp x dp: ranks {0, 2} + {0, 4, 8, 12} = {0, 2, 4, 6, 8, 10, 12, 14}: 4 below 8, size 8 -> 2 domains
    assert span(("cp", "dp")) == comm.GroupSpan(8, 4, 2)


def test_group_span_dp_innermost():
    p = plan(gpus=32, tp=2, cp=2, dp=4, pp=2, placement="dp-tp-cp-pp")
    span = lambda g: comm.group_span(p, ROUND, g)  # noqa: E731
    assert span("dp") == comm.GroupSpan(4, 4, 1)  # ranks 0..3
    assert span("tp") == comm.GroupSpan(2, 2, 1)  # ranks {0, 4}
    assert span("cp") == comm.GroupSpan(2, 1, 2)  # ranks {0, 8}
    assert span("pp") == comm.GroupSpan(2, 1, 2)  # ranks {0, 16}
    # cp x dp: {0, 8} + {0, 1, 2, 3} -> {0..3} in domain 0, {8..11} in domain 1
    assert span(("cp", "dp")) == comm.GroupSpan(8, 4, 2)


INSIDE = comm.GroupSpan(8, 8, 1)  # 8 GPUs of one NVLink domain
ACROSS = comm.GroupSpan(16, 4, 4)  # 4 GPUs in each of 4 domains
ONE_PER_DOMAIN = comm.GroupSpan(4, 1, 4)


def test_all_reduce_inside_domain():
    # 2*(8-1)/8 * 1e9 / 50e9 = 0.035 s; latency NCCL ring 2*7 NVLink hops = 70us, tree chain 2*(8-1)*5us = 70us
    assert comm.all_reduce_time_s(1e9, INSIDE, ROUND) == approx(0.035 + 70e-6)


def test_all_reduce_across_domains_hierarchical():
    # inside: 2*(4-1)/4 * 1e9 / 50e9 = 0.03; across: 2*(4-1)/4 * (1e9/4) / 5e9 = 0.075
    # latency: ring 2*15 = 30 hops, 2*3 = 6 across: 24*5us + 6*10us = 180us;
    # tree 2*(4-1)*5us + 2*log2(4)*10us = 30us + 40us = 70us (NCCL picks the tree)
    assert comm.all_reduce_time_s(1e9, ACROSS, ROUND) == approx(0.03 + 0.075 + 30e-6 + 40e-6)
    # one GPU per domain: only the NIC ring, 2*3/4 * 1e9 / 5e9 = 0.3, + tree 2*log2(4)*10us = 40 us (ring 60 us)
    assert comm.all_reduce_time_s(1e9, ONE_PER_DOMAIN, ROUND) == approx(0.3 + 40e-6)


def test_all_gather_and_reduce_scatter():
    # inside: (8-1)/8 * 1e9 / 50e9 = 0.0175; latency ring only, 7 NVLink hops * 5us = 35us
    for kind in ("all_gather", "reduce_scatter"):
        assert comm.collective_time_s(kind, 1e9, INSIDE, ROUND) == approx(0.0175 + 35e-6)
        # across: 3/4 * 1e9 / 50e9 = 0.015 + 3/4 * 0.25e9 / 5e9 = 0.0375;
        # latency: flat ring of 15 hops, 3 across domains: 12*5us + 3*10us = 90us
        assert comm.collective_time_s(kind, 1e9, ACROSS, ROUND) == approx(
            0.015 + 0.0375 + 60e-6 + 30e-6
        )


def test_nccl_latency_at_scale():
    """NCCL tuning.cc's ring and tree latencies worked by hand: 1,536 ranks on 192 8-GPU nodes."""
    big = comm.GroupSpan(1536, 8, 192)
    # all-gather / reduce-scatter: ring only, 1535 hops, 191 across nodes -> 1344*5us + 191*10us = 8.63 ms
    assert comm.collective_latency_s("all_gather", big, 5e-6, 10e-6) == (
        approx(1344 * 5e-6),
        approx(191 * 10e-6),
    )
    form = comm.linear_collective("reduce_scatter", big, ROUND)
    assert form.latency_in + form.latency_out == approx(8.63e-3)
    # all-reduce: ring 2*1535 = 3070 hops, 2*191 = 382 across: 2688*5us + 382*10us = 17.26 ms;
    # tree 2*(8-1)*5us + 2*floor(log2 192)*10us = 70us + 140us = 210us -> the tree
    assert comm.ring_hops(*comm.ring_steps("all_reduce", big)) == (2688, 382)
    assert comm.tree_all_reduce_hops(8, 192) == (14, 14)
    assert comm.collective_latency_hops("all_reduce", big, 5e-6, 10e-6) == (14, 14)
    form = comm.linear_collective("all_reduce", big, ROUND)
    assert (form.latency_in, form.latency_out) == (approx(70e-6), approx(140e-6))
    # n = 8 in one node: all-gather 7 NVLink hops, all-reduce 14 (ring and tree alike), nothing on the NIC
    one = comm.GroupSpan(8, 8, 1)
    assert comm.collective_latency_s("all_gather", one, 5e-6, 10e-6) == (approx(35e-6), 0.0)
    assert comm.collective_latency_hops("all_reduce", one, 5e-6, 10e-6) == (14, 0)
    # grows with n, not with a + o: doubling the nodes doubles the all-gather latency (to first order)
    assert comm.collective_latency_s("all_gather", comm.GroupSpan(3072, 8, 384), 5e-6, 10e-6)[
        0
    ] == approx(2688 * 5e-6)
    assert comm.log2i(1) == 0 and comm.log2i(192) == 7 and comm.log2i(256) == 8
    assert comm.collective_latency_hops("all_reduce", comm.GroupSpan(1, 1, 1), 5e-6, 10e-6) == (
        0,
        0,
    )


def test_point_to_point():
    # inside: 1e8 / 50e9 + 5us; across: 1e8 / 5e9 + 10us
    assert comm.point_to_point_time_s(1e8, comm.GroupSpan(2, 2, 1), ROUND) == approx(0.002 + 5e-6)
    assert comm.point_to_point_time_s(1e8, comm.GroupSpan(2, 1, 2), ROUND) == approx(0.02 + 10e-6)


def test_ring_exchange():
    # (4-1) neighbour transfers: inside 3 * (0.002 + 5us); across 3 * (0.02 + 10us)
    assert comm.ring_exchange_time_s(1e8, comm.GroupSpan(4, 4, 1), ROUND) == approx(3 * 0.002005)
    assert comm.ring_exchange_time_s(1e8, comm.GroupSpan(4, 1, 4), ROUND) == approx(3 * 0.02001)


def test_collectives_of_one_rank_are_free():
    single = comm.GroupSpan(1, 1, 1)
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "send_recv", "ring_exchange"):
        assert comm.collective_time_s(kind, 1e9, single, ROUND) == 0.0


# ---------------------------------------------------------------------------------------------
# memory.py
# ---------------------------------------------------------------------------------------------


def test_state_bytes_per_param():
    for dtype in ("bf16", "fp16", "fp8"):
        s = memory.state_bytes_per_param(dtype)
        assert (s.weights, s.gradients, s.optimizer) == (2.0, 4.0, 12.0)  # 18 B
    s = memory.state_bytes_per_param("fp32")
    assert (s.weights, s.gradients, s.optimizer) == (4.0, 4.0, 8.0)  # 16 B


def _gpt3_shape(sp: bool) -> LayerShape:
    return LayerShape(
        tp=8,
        cp=1,
        micro_batch=1,
        seq_length=2048,
        sequence_parallel=sp,
        attention="unfused",
        dtype="bf16",
    )


# GPT-3 175B layer, s=2048, b=1, h=12288, a=96, t=8: s*b*h = 2048*12288 = 25_165_824;
# 5*a*s/(h*t) = 5*96*2048/(12288*8) = 983040/98304 = 10.
SBH = 25_165_824


def test_activations_korthikanti_no_sp_no_recompute():
    # s*b*h*(10 + 24/t + 5as/(ht)) = SBH * (10 + 3 + 10) = 23 * SBH = 578_813_952
    got = memory.layer_activation_bytes(GPT3_175B, _gpt3_shape(False), "none")
    assert got == approx(578_813_952.0)


def test_activations_korthikanti_sp_selective():
    # s*b*h*34/t = SBH * 4.25 = 106_954_752
    got = memory.layer_activation_bytes(GPT3_175B, _gpt3_shape(True), "selective")
    assert got == approx(106_954_752.0)


def test_activations_korthikanti_sp_no_recompute_and_selective_without_sp():
    # SP, none: s*b*h*(34/t + 5as/(ht)) = SBH * 14.25 = 358_612_992
    assert memory.layer_activation_bytes(GPT3_175B, _gpt3_shape(True), "none") == approx(
        358_612_992.0
    )
    # no SP, selective: s*b*h*(10 + 24/t) = 13 * SBH = 327_155_712
    assert memory.layer_activation_bytes(GPT3_175B, _gpt3_shape(False), "selective") == approx(
        327_155_712.0
    )


def test_activations_korthikanti_full_recompute():
    # 2*s*b*h = 50_331_648; with SP / t: 6_291_456
    assert memory.layer_activation_bytes(GPT3_175B, _gpt3_shape(False), "full") == approx(
        50_331_648.0
    )
    assert memory.layer_activation_bytes(GPT3_175B, _gpt3_shape(True), "full") == approx(
        6_291_456.0
    )


def test_activations_fp8_keep_gemm_inputs_in_one_byte():
    """Transformer Engine saves the fp8 copy of each GEMM input (QKV, projection, fc1, fc2 inputs; the
    projection's own copy: proj_quantised_copy, TE Linear's default): s*b*h*(8 + 19/t + 5as/(ht)) for GPT
    shapes, against (10 + 24/t + ...) in bf16; where the projection saves the bf16 output instead
    (save_original_input), 8 + 20/t + ..."""
    fp8 = LayerShape(
        tp=8,
        cp=1,
        micro_batch=1,
        seq_length=2048,
        sequence_parallel=False,
        attention="unfused",
        dtype="fp8",
        proj_quantised_copy=True,
    )
    # SBH * (8 + 19/8 + 10) = SBH * 20.375 = 512_753_664
    assert memory.layer_activation_bytes(GPT3_175B, fp8, "none") == approx(20.375 * SBH)
    saved = fp8._replace(proj_quantised_copy=False)  # SBH * (8 + 20/8 + 10)
    assert memory.layer_activation_bytes(GPT3_175B, saved, "none") == approx(20.5 * SBH)
    # selective drops the attention internals: SBH * (8 + 19/8)
    assert memory.layer_activation_bytes(GPT3_175B, fp8, "selective") == approx(10.375 * SBH)
    # recompute_modules mlp drops the intermediates (4h: GeLU input 2 B + fc2 input 1 B = 12h / t), layernorm the
    # two norm outputs (1 B each): SBH * (20.375 - 12/8 - 2)
    mods = LayerShape(
        tp=8,
        cp=1,
        micro_batch=1,
        seq_length=2048,
        sequence_parallel=False,
        attention="unfused",
        dtype="fp8",
        recompute_modules=("mlp", "layernorm"),
        proj_quantised_copy=True,
    )
    assert memory.layer_activation_bytes(GPT3_175B, mods, "selective") == approx(
        (20.375 - 1.5 - 2) * SBH
    )


# ---------------------------------------------------------------------------------------------
# step/schedules.py: the bubble from the stages' work (the schedules' entries: test_schedules.py)
# ---------------------------------------------------------------------------------------------


def test_bubble_slots():
    # unit work per stage: idle slots = (p-1) for 1f1b / gpipe, (p-1)/v interleaved, 0 for one stage
    assert bubble_from_work_s(4.0, 1.0, 1) == 3.0
    assert bubble_from_work_s(4.0, 1.0, 2) == 1.5  # (4-1)/2
    assert bubble_from_work_s(1.0, 1.0, 1) == 0.0


def test_pipeline_bubble():
    # equal stages of W = 0.1 s: (p-1)*W = 0.3 s; interleaved vpp=2: 0.15 s
    assert bubble_from_work_s(0.4, 0.1, 1) == approx(0.3)
    assert bubble_from_work_s(0.4, 0.1, 2) == approx(0.15)
    # unequal: sum - max = (1 + 2 + 1 + 1.5) - 2 = 3.5 for 1F1B
    assert bubble_from_work_s(1.0 + 2.0 + 1.0 + 1.5, 2.0, 1) == approx(3.5)
    assert bubble_from_work_s(1.0, 1.0, 1) == 0.0


# ---------------------------------------------------------------------------------------------
# graph/transformer.py parameter counts
# ---------------------------------------------------------------------------------------------


def test_layer_weight_params_gpt3_175b():
    # t=1: 12h^2 + 13h (matrices 12h^2; biases 3h + h + 4h + h = 9h; two layernorms 4h)
    # h = 12288: 12 * 150_994_944 + 13 * 12288 = 1_811_939_328 + 159_744
    assert layer_weight_params(GPT3_175B, 1) == approx(1_812_099_072.0)
    # t=8: (12h^2 + 7h)/8 + 2h + 4h = 226_492_416 + 10_752 + 73_728
    assert layer_weight_params(GPT3_175B, 8) == approx(226_576_896.0)


def test_layer_weight_params_llama3_8b():
    # h=4096, q=4096, kv=1024, f=14336, SwiGLU, no bias, two RMSNorms (2h):
    # 4096*6144 + 4096*4096 + 3*4096*14336 + 8192 = 25_165_824 + 16_777_216 + 176_160_768 + 8192
    assert layer_weight_params(LLAMA3_8B, 1) == approx(218_112_000.0)


def test_embedding_weight_params():
    # GPT-3 175B, t=8: V*h/t + 2048*h = 51200*12288/8 + 25_165_824 = 78_643_200 + 25_165_824
    assert embedding_weight_params(GPT3_175B, 8) == approx(103_809_024.0)
    # Llama 3 8B (rope, no position table), t=1: 128256*4096
    assert embedding_weight_params(LLAMA3_8B, 1) == approx(525_336_576.0)


# ---------------------------------------------------------------------------------------------
# flops.py
# ---------------------------------------------------------------------------------------------


def test_matmul_params_gpt3_175b():
    # 96 layers * 12 h^2 + V h = 96 * 1_811_939_328 + 51200 * 12288 = 173_946_175_488 + 629_145_600
    assert flops.matmul_params(GPT3_175B) == approx(174_575_321_088.0)


def _narayanan_per_token(B: int, s: int, l: int, h: int, V: int, c: float, v_div: float) -> float:
    """c·B·s·l·h²·(1 + s/(6h) + V/(v_div·h·l)) per step, divided by B·s tokens (Narayanan et al. 2021)."""
    return c * B * s * l * h * h * (1 + s / (6 * h) + V / (v_div * h * l)) / (B * s)


def test_model_flops_per_token_is_narayanan_with_the_causal_discount():
    # GPT-3 175B, s = 2048, no recompute: Narayanan et al. 2021 count 72 = 3 x 24 (forward + 2x
    # backward) x l·h²·(1 + s/(6h) + V/(12hl)) per token, attention over all s keys. We count the
    # (s+1)/2 keys a causal query sees: 6·l·(s+1)·h instead of 12·l·s·h.
    narayanan = 72 * 96 * 12288**2 * (1 + 2048 / 73728 + 51200 / (12 * 12288 * 96))
    assert narayanan == approx(_narayanan_per_token(1536, 2048, 96, 12288, 51200, 72, 12))
    causal = narayanan - 12 * 96 * 2048 * 12288 + 6 * 96 * 2049 * 12288
    assert flops.model_flops_per_token(GPT3_175B, 2048) == approx(causal, rel=1e-12)
    assert 0.986 < causal / narayanan < 0.987  # half the ~2.7 % attention term at s = 2048


def test_model_flops_per_step():
    # per token x global batch x seq length
    per_token = 6 * (96 * 12 * 12288**2 + 51200 * 12288) + 6 * 96 * 2049 * 12288
    assert flops.model_flops_per_step(GPT3_175B, 2048, 1536) == approx(per_token * 1536 * 2048)


def test_full_recompute_is_the_forward_again():
    # model + full-recompute FLOPs = 8·N_layers + 2·V·h·3 ... written out: 4 passes of the layer
    # matmuls (2·N each, Narayanan Eq. 3's 96 = 4 x 24), 3 of the LM head, 4 of causal attention
    s = 2048
    layers_n = 96 * 12 * 12288**2
    expected = 8 * layers_n + 6 * 51200 * 12288 + 4 * 2 * 96 * (s + 1) * 12288
    got = flops.model_flops_per_token(GPT3_175B, s) + flops.recompute_flops_per_token(
        GPT3_175B, s, "full"
    )
    assert got == approx(expected, rel=1e-12)


def test_recompute_flops_per_token_modes():
    # selective: the attention matmuls again, 2 * l * (s+1) * (a*d) = 2 * 96 * 2049 * 12288
    assert flops.recompute_flops_per_token(GPT3_175B, 2048, "selective") == approx(4_834_197_504.0)
    # full: 2 * 96 * 12h^2 + 2 * 96 * 2049 * 12288 = 347_892_350_976 + 4_834_197_504
    assert flops.recompute_flops_per_token(GPT3_175B, 2048, "full") == approx(352_726_548_480.0)
    assert flops.recompute_flops_per_token(GPT3_175B, 2048, "none") == 0.0


def test_model_flops_per_token_llama_gqa():
    # Llama 3 8B: N = 32 * 218_103_808 (matrices, see above) + 128256 * 4096 = 6_979_321_856 + 525_336_576
    n = 32 * 218_103_808 + 128256 * 4096
    assert flops.matmul_params(LLAMA3_8B) == approx(float(n))
    # 6N + 6 * 32 * 8193 * 4096
    assert flops.model_flops_per_token(LLAMA3_8B, 8192) == approx(6.0 * n + 6 * 32 * 8193 * 4096)


def layers_on_stage(layers: int, pp: int, stage: int) -> int:
    """Decoder layers on stage ``stage`` under the default split (PlanSpec.split, specs/split.py)."""
    plan = PlanSpec(pp=pp, gpus=pp, global_batch=64, seq_length=2048)
    return stage_layer_counts(plan.split(layers))[stage]


def test_layers_on_stage_uneven_split():
    # Llama 3 405B: 126 layers on 16 stages: 7 each (112) + 14 extra -> stages 1..14 get 8
    counts = [int(layers_on_stage(126, 16, i)) for i in range(16)]
    assert counts == [7] + [8] * 14 + [7]
    # 24 layers on 5 stages: 4 each + 4 extra: middles 1..3 get one, the first the fourth
    assert [int(layers_on_stage(24, 5, i)) for i in range(5)] == [5, 5, 5, 5, 4]
    # 25 on 2 stages: the first takes the extra (the last holds the LM head)
    assert [int(layers_on_stage(25, 2, i)) for i in range(2)] == [13, 12]
    assert [int(layers_on_stage(96, 8, i)) for i in range(8)] == [12] * 8
    assert int(layers_on_stage(24, 1, 0)) == 24
