"""The hidden price of NCCL collectives from the CTAs they hold (cost.comm_contention, issue 33)."""

from __future__ import annotations

import pytest
from pytest import approx

from paraplan.catalog import load_model, load_system
from paraplan.cost import comm
from paraplan.cost.comm_contention import (
    MEMORY_BOUND_SHARE,
    a2a_overlap_share,
    collective_hbm_share,
    collective_sm_share,
    dispatcher_sms,
    nccl_ctas,
    nccl_p2p_ctas,
    tier_overlap_costs,
    tier_sm_shares,
)
from paraplan.cost.moe import moe_collective_time_and_price_s
from paraplan.graph.layers import decoder_layer
from paraplan.specs.plan import PlanSpec
from paraplan.step.build import block_compute
from paraplan.step.estimate import estimate, layer_shape

H100 = load_system("dgx-h100-80gb")
A100 = load_system("dgx-a100-80gb")


def _with(system, **fields):
    data = system.model_dump()
    for path, value in fields.items():
        head, tail = path.split("__")
        data[head][tail] = value
    return type(system).model_validate(data)


def test_sm_share_by_hand():
    # 24 CTAs on 132 SMs: 24/132; on 108 SMs: 24/108; never more than every SM
    assert collective_sm_share(24, 132) == approx(0.181818, rel=1e-5)
    assert collective_sm_share(24, 108) == approx(0.222222, rel=1e-5)
    assert collective_sm_share(200, 100) == 1.0


def test_hbm_share_by_hand():
    # H100 NVLink at 450 GB/s x 0.75 = 337.5 GB/s, 3 HBM bytes per wire byte, HBM 3.35 TB/s x 0.85
    assert collective_hbm_share("all_gather", 337.5e9, 2.8475e12) == approx(1012.5 / 2847.5)
    assert collective_hbm_share("send_recv", 337.5e9, 2.8475e12) == approx(675 / 2847.5)
    assert collective_hbm_share("all_reduce", 2e12, 1e12) == 1.0


def test_tier_shares_by_hand():
    # one H100 node: (1 - 0.1) * 24/132 of the tier's time, 0.1 * 1012.5/2847.5 of its byte time
    sm_in, _ = tier_sm_shares(False, H100)
    assert sm_in == approx(0.9 * 24 / 132)
    c = tier_overlap_costs("reduce_scatter", False, H100, 7)
    assert (c.sm_in, c.hbm_in) == approx((0.9 * 24 / 132, 0.1 * 1012.5 / 2847.5))
    assert c.sm_in + c.hbm_in == approx(0.199194, abs=1e-6)
    # send/recv moves 2 HBM bytes per wire byte, the ring collectives 3; the SM share is the same
    p = tier_overlap_costs("send_recv", False, H100, 7)
    assert (p.sm_in, p.hbm_in) == approx((c.sm_in, 0.1 * 675 / 2847.5))
    # the SM share alone prices an all-to-all (comm.overlap_cost)
    assert comm.overlap_cost(comm.GroupSpan(16, 8, 2), H100) == approx(0.9 * 16 / 132)


def test_nccl_channels_and_tier_costs_by_hand():
    # NCCL's ring graph: 24 channels on one 8-GPU NVSwitch node, 16 across nodes with a NIC per GPU
    assert nccl_ctas(False, H100) == 24 and nccl_ctas(True, H100) == 16
    c = tier_overlap_costs("all_reduce", False, H100, 7)
    assert c.sm_in + c.hbm_in == approx(0.199194, abs=1e-6)
    # across nodes: 0.9 * 16/132 + 0.1 * 3 * 337.5/2847.5 (NVLink), + 0.1 * 3 * 42.5/2847.5 (NIC)
    c = tier_overlap_costs("all_reduce", True, H100, 7)
    assert c == approx(
        (0.9 * 16 / 132, 0.9 * 16 / 132, 0.1 * 1012.5 / 2847.5, 0.1 * 127.5 / 2847.5)
    )
    # A100: 108 SMs, NVLink 300 GB/s x its efficiency, HBM 2.039 TB/s x its efficiency
    a = A100.accelerator
    rate = A100.node.nvlink_bandwidth * A100.node.nvlink_efficiency
    rho = 3 * rate / (a.hbm_bandwidth * a.efficiency.hbm)
    c = tier_overlap_costs("all_gather", False, A100, 7)
    assert (c.sm_in, c.hbm_in) == approx((0.9 * 24 / 108, 0.1 * rho))


def test_explicit_override_wins_per_tier():
    s = _with(H100, node__nvlink_overlap_cost=0.15, network__overlap_cost=0.02)
    assert tier_overlap_costs("all_reduce", True, s, 7) == (0.15, 0.02, 0.0, 0.0)
    assert tier_sm_shares(True, s) == (0.15, 0.02)
    s = _with(H100, network__overlap_cost=0.05)
    c = tier_overlap_costs("all_reduce", True, s, 7)
    assert (c.sm_out, c.hbm_out) == (0.05, 0.0)
    assert (c.sm_in, c.hbm_in) == approx((0.9 * 16 / 132, 0.1 * 1012.5 / 2847.5))


def test_memory_bound_share_lies_in_what_the_op_graph_gives():
    # μ is the share of a decoder layer's backward outside GEMMs and attention, read off this model's graph
    shares = []
    for system in (H100, A100):
        for name, tp, seq, mb in (
            ("llama3-8b", 1, 8192, 1),
            ("llama3-70b", 4, 8192, 1),
            ("gpt3-175b", 8, 2048, 1),
            ("gpt3-1.3b", 1, 2048, 8),
        ):
            plan = PlanSpec(gpus=64 * tp, tp=tp, global_batch=512, seq_length=seq, micro_batch=mb)
            block = block_compute(
                decoder_layer(load_model(name), layer_shape(plan, system)), system, "bf16"
            )
            rest = block.backward - block.gemm_backward - block.attention_backward
            shares.append(rest / block.backward)
    assert min(shares) <= MEMORY_BOUND_SHARE <= max(shares)


def test_hidden_price_of_a_dp_all_reduce_by_hand():
    # 1 GB all-reduce over 16 GPUs on 2 nodes: t_in NVLS's (cost.comm.nvls_all_reduce_slope: nvlsEfficiency 0.85,
    # 16 NVLS channels; the ring's 2*7/8 * 1e9 / (450e9*0.75) is slower), t_out = 2*1/2*(1e9/8)/(50e9*0.85)
    span = comm.GroupSpan(16, 8, 2)
    time, price = comm.collective_time_and_price_s("all_reduce", 1e9, span, H100)
    t_in = 1e9 / (450e9 * 0.75 * 0.85 * 15 / 16)
    t_out = 1e9 / 8 / (50e9 * 0.85)
    lat_in, lat_out = (
        2 * 7 * 5e-6,
        2 * 10e-6,
    )  # NCCL's tree: chain in the node, one hop across, twice
    assert time == approx(t_in + t_out + lat_in + lat_out)
    c = tier_overlap_costs("all_reduce", True, H100, 7)
    # the CTAs cost their share of all the time, the HBM traffic its share of the byte time only
    expected = c.sm_in * (t_in + lat_in) + c.sm_out * (t_out + lat_out)
    assert price == approx(expected + c.hbm_in * t_in + c.hbm_out * t_out)


def test_a_faster_link_never_raises_the_price():
    # the HBM bytes a collective moves do not depend on how fast the link moves them
    span = comm.GroupSpan(8, 8, 1)
    fast = _with(H100, node__nvlink_bandwidth=900e9)
    slow_price = comm.collective_time_and_price_s("all_gather", 1e8, span, H100)[1]
    fast_price = comm.collective_time_and_price_s("all_gather", 1e8, span, fast)[1]
    assert fast_price < slow_price


@pytest.mark.parametrize(
    "field, gpus", [("node__nccl_channels", 8), ("network__nccl_channels", 16)]
)
def test_more_nccl_ctas_never_make_a_step_faster(field, gpus):
    model = load_model("llama3-8b")
    plan = PlanSpec(gpus=gpus, zero=3, global_batch=2 * gpus, seq_length=4096)
    times = [
        estimate(model, _with(H100, **{field: k}), plan).step_time_s for k in (1, 8, 16, 24, 32)
    ]
    assert times == sorted(times)
    assert times[-1] > times[0]


@pytest.mark.parametrize("gpus", [8, 16])
def test_less_hbm_bandwidth_never_makes_a_step_faster(gpus):
    model = load_model("llama3-8b")
    plan = PlanSpec(gpus=gpus, zero=3, global_batch=2 * gpus, seq_length=4096)
    times = []
    for hbm in (1.0e12, 2.0e12, 3.35e12, 5e12):
        acc = H100.accelerator.model_copy(update={"hbm_bandwidth": hbm})
        times.append(
            estimate(model, H100.model_copy(update={"accelerator": acc}), plan).step_time_s
        )
    assert times == sorted(times, reverse=True)


def test_more_sms_never_make_a_step_slower():
    model = load_model("llama3-8b")
    plan = PlanSpec(gpus=8, zero=3, global_batch=16, seq_length=4096)
    small = H100.model_copy(
        update={"accelerator": H100.accelerator.model_copy(update={"sm_count": 100})}
    )
    assert estimate(model, small, plan).step_time_s >= estimate(model, H100, plan).step_time_s


def test_a2a_overlap_share_by_dispatcher_by_hand():
    # NCCL's all-to-all holds pow2Up(ring channels) CTAs: 24 -> 32 in an H100 node, 16 across nodes
    assert nccl_p2p_ctas(False, H100) == 32
    assert nccl_p2p_ctas(True, H100) == 16
    assert dispatcher_sms("alltoall", False, H100) == 32
    assert dispatcher_sms("deepep", True, H100) == 20
    assert dispatcher_sms("hybridep", False, H100) == 16
    # DeepEP on H100 across nodes: 0.9*20/132 + 0.1*2*(50e9*0.85)/(3.35e12*0.85)
    assert a2a_overlap_share("deepep", True, 7, H100) == approx(0.9 * 20 / 132 + 0.1 * 85 / 2847.5)
    assert a2a_overlap_share("deepep", True, 7, H100) == approx(0.139349, abs=1e-6)
    # alltoall inside an A100 node: 32 CTAs of 108 SMs, 2 bytes per wire byte at 300 GB/s x 0.75
    assert a2a_overlap_share("alltoall", False, 7, A100) == approx(
        0.9 * 32 / 108 + 0.1 * 450 / 1631.2
    )
    assert a2a_overlap_share("alltoall", False, 7, A100) == approx(0.294254, abs=1e-6)
    # Hybrid-EP's 16 SMs cost less than DeepEP's 20 on the same tier
    assert a2a_overlap_share("hybridep", True, 7, H100) < a2a_overlap_share("deepep", True, 7, H100)


def test_a2a_price_reads_the_dispatcher_unless_the_system_sets_one():
    model = load_model("qwen3-30b-a3b")
    span = comm.GroupSpan(8, 8, 1)
    t, price = moe_collective_time_and_price_s("all_to_all_dedup", 8e6, span, A100, model, "deepep")
    assert price == approx(a2a_overlap_share("deepep", False, 7, A100) * t)
    # a system's fitted a2a_overlap_cost wins over the component share
    fitted = _with(
        A100,
        accelerator__efficiency={
            **A100.accelerator.efficiency.model_dump(),
            "a2a_overlap_cost": 0.3,
        },
    )
    t, price = moe_collective_time_and_price_s("all_to_all", 8e6, span, fitted, model, "alltoall")
    assert price == approx(0.3 * t)
