"""The hidden price of NCCL collectives from the CTAs they hold (cost.comm_contention, issue 33)."""

from __future__ import annotations

import pytest
from pytest import approx

from paraplan.catalog import load_model, load_system
from paraplan.cost import comm
from paraplan.cost.comm_contention import collective_sm_share, nccl_ctas, tier_overlap_costs
from paraplan.specs.plan import PlanSpec
from paraplan.step.estimate import estimate

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


def test_nccl_channels_by_tier():
    # NCCL's ring graph: 24 channels on one 8-GPU NVSwitch node, 16 across nodes with a NIC per GPU
    assert nccl_ctas(False, H100) == 24 and nccl_ctas(True, H100) == 16
    assert tier_overlap_costs(False, H100) == approx((24 / 132, 24 / 132))
    assert tier_overlap_costs(True, H100) == approx((16 / 132, 16 / 132))
    assert tier_overlap_costs(False, A100) == approx((24 / 108, 24 / 108))


def test_explicit_override_wins_per_tier():
    s = _with(H100, node__nvlink_overlap_cost=0.15, network__overlap_cost=0.02)
    assert tier_overlap_costs(True, s) == (0.15, 0.02)
    s = _with(H100, network__overlap_cost=0.05)
    assert tier_overlap_costs(True, s) == approx((16 / 132, 0.05))


def test_hidden_price_of_a_dp_all_reduce_by_hand():
    # 1 GB all-reduce over 16 GPUs on 2 nodes: t_in = 2*7/8 * 1e9 / (450e9*0.75), t_out = 2*1/2*(1e9/8)/(50e9*0.85)
    span = comm.GroupSpan(16, 8, 2)
    time, price = comm.collective_time_and_price_s("all_reduce", 1e9, span, H100)
    t_in = 2 * 7 / 8 * 1e9 / (450e9 * 0.75)
    t_out = 1e9 / 8 / (50e9 * 0.85)
    latency = 2 * (
        7 * 5e-6 + 1 * 10e-6
    )  # NCCL's tree: chain in the node, one hop across, up and down
    assert time == approx(t_in + t_out + latency)
    assert price == approx(16 / 132 * time)


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


def test_more_sms_never_make_a_step_slower():
    model = load_model("llama3-8b")
    plan = PlanSpec(gpus=8, zero=3, global_batch=16, seq_length=4096)
    small = H100.model_copy(
        update={"accelerator": H100.accelerator.model_copy(update={"sm_count": 100})}
    )
    assert estimate(model, small, plan).step_time_s >= estimate(model, H100, plan).step_time_s
