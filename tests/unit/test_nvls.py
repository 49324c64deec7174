"""NVLink SHARP (NVLS) all-reduce (cost.comm.nvls_all_reduce_slope): where the NVSwitch domain runs it, the
all-reduce's NVLink tier moves ~S per GPU at B·η·e·(c−1)/c instead of the ring's 2(a−1)/a·S at B·η; NCCL's
tuner takes the faster, and all-gather / reduce-scatter keep the ring."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_system
from paraplan.cost.comm import GroupSpan, linear_collective, nvls_all_reduce_slope


def _without_nvls(system):
    node = system.node.model_copy(update={"nvls_efficiency": 0.0})
    return system.model_copy(update={"node": node})


def test_h100_node_all_reduce_by_hand():
    """8 H100 SXM: B·η = 450 GB/s · 0.75 = 337.5 GB/s; ring 1.75 / 337.5e9 s/B, NVLS 1 / (337.5e9 · 0.85 · 15/16)
    (nvlsEfficiency 0.85, 16 NVLS channels): bus bandwidth 337.5 → 470.6 GB/s."""
    system = load_system("dgx-h100-80gb")
    nvls = linear_collective("all_reduce", GroupSpan(8, 8, 1), system)
    ring = linear_collective("all_reduce", GroupSpan(8, 8, 1), _without_nvls(system))
    assert ring.slope_in == pytest.approx(1.75 / 337.5e9, rel=1e-12)
    assert nvls.slope_in == pytest.approx(1.0 / (337.5e9 * 0.85 * 15 / 16), rel=1e-12)
    assert 1.75 / nvls.slope_in == pytest.approx(470.6e9, rel=1e-3)
    assert nvls.latency_in == ring.latency_in  # latency: NCCL's ring / tree hops either way


def test_two_members_keep_the_ring_and_gathers_are_unchanged():
    """a = 2: the ring moves S/2 per GPU, 1/337.5e9 < 1/(337.5e9·0.797): the ring stays; all-gather and
    reduce-scatter never use NVLS; a full-mesh domain or e = 0 has none."""
    system = load_system("dgx-h100-80gb")
    assert nvls_all_reduce_slope(2, 337.5e9, system.node) == pytest.approx(1 / 337.5e9)
    for kind in ("all_gather", "reduce_scatter"):
        on = linear_collective(kind, GroupSpan(8, 8, 1), system)
        off = linear_collective(kind, GroupSpan(8, 8, 1), _without_nvls(system))
        assert on == off
    mesh = system.node.model_copy(update={"topology": "full_mesh"})
    assert nvls_all_reduce_slope(8, 1e11, mesh) == pytest.approx(1.75 / 1e11)


def test_blackwell_across_domains_keeps_the_nic_term():
    """GB200 NVL72, 4 per domain over 2 domains: NVLink tier 1/(B·η·0.74·23/24) (< ring 1.5/(B·η)),
    the NIC tier's ring term unchanged."""
    system = load_system("gb200-nvl72")
    rate = system.node.nvlink_bandwidth * system.node.nvlink_efficiency
    on = linear_collective("all_reduce", GroupSpan(8, 4, 2), system)
    off = linear_collective("all_reduce", GroupSpan(8, 4, 2), _without_nvls(system))
    assert on.slope_in == pytest.approx(1.0 / (rate * 0.74 * 23 / 24), rel=1e-12)
    assert off.slope_in == pytest.approx(1.5 / rate, rel=1e-12)
    assert on.slope_out == off.slope_out
