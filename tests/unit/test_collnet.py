"""InfiniBand SHARP in-network all-reduce (cost.collnet, issue 33): where the fabric has it and the run enabled
NCCL CollNet, an all-reduce's NIC tier moves S/a per GPU once each way at B_nic·η·e instead of the ring's
2(o−1)/o·S/a at B_nic·η; off by default (NCCL_COLLNET_ENABLE defaults to 0), and the ring stays where faster."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_system
from paraplan.cost.collnet import (
    sharp_all_reduce,
    sharp_all_reduce_latency_s,
    sharp_all_reduce_slope,
)
from paraplan.cost.comm import GroupSpan, linear_collective
from paraplan.cost.frameworks import framework_system


def _network(system, **update):
    return system.model_copy(update={"network": system.network.model_copy(update=update)})


def test_dgx_h100_four_nodes_by_hand():
    """32 GPUs on 4 DGX H100 (a = 8, o = 4), CollNet on: NIC tier 1 / (8 · 50e9 · 0.85 · 0.85) = 1 / 289e9 s/B
    against the ring's 2·3/4 / (8 · 42.5e9) = 1.5 / 340e9; latency 2·(5 µs + 7·0.4 µs) = 15.6 µs inside the node
    and 31 µs through the switch tree; the NVLink tier (NVLS) unchanged."""
    base = load_system("dgx-h100-80gb")
    span = GroupSpan(32, 8, 4)
    ring = linear_collective("all_reduce", span, base)
    sharp = linear_collective("all_reduce", span, _network(base, collnet_enabled=True))
    assert ring.slope_out == pytest.approx(1.5 / 340e9, rel=1e-12)
    assert sharp.slope_out == pytest.approx(1 / 289e9, rel=1e-12)
    assert sharp.latency_in == pytest.approx(15.6e-6, rel=1e-12)
    assert sharp.latency_out == pytest.approx(31e-6, rel=1e-12)
    assert sharp.slope_in == ring.slope_in
    # a 1 GiB gradient bucket: NIC tier 3.72 ms → 2.95 ms at 289 / (340 / 1.5) = 1.275× the rate
    assert ring.slope_out / sharp.slope_out == pytest.approx(1.275, rel=1e-12)


def test_off_unless_the_run_enables_it_and_the_fabric_has_it():
    """Catalog DGX H100: SHARP in the fabric, CollNet off (NCCL's default): the ring's all-reduce; enabled on a
    fabric without SHARP (e = 0): the ring too."""
    base = load_system("dgx-h100-80gb")
    span = GroupSpan(32, 8, 4)
    assert base.network.sharp_efficiency == 0.85 and not base.network.collnet_enabled
    plain = _network(base, sharp_efficiency=0.0)
    ring = linear_collective("all_reduce", span, plain)
    assert linear_collective("all_reduce", span, base) == ring
    assert linear_collective("all_reduce", span, _network(plain, collnet_enabled=True)) == ring


def test_two_nodes_keep_the_ring_and_gathers_are_unchanged():
    """o = 2: the ring moves S/a once each way at B·η, 1/340e9 < 1/289e9: the ring stays (NCCL's tuner makes the
    same choice on bandwidth); one domain: nothing crosses; all-gather / reduce-scatter never change."""
    on = _network(load_system("dgx-h100-80gb"), collnet_enabled=True)
    assert sharp_all_reduce(8, 2, 1 / 340e9, on.network, 5e-6) is None
    assert sharp_all_reduce(8, 1, 0.0, on.network, 5e-6) is None
    off = load_system("dgx-h100-80gb")
    for kind in ("all_gather", "reduce_scatter"):
        span = GroupSpan(32, 8, 4)
        assert linear_collective(kind, span, on) == linear_collective(kind, span, off)


def test_slope_and_latency_by_hand():
    """One GPU per node: 1 / (1 · 50e9 · 0.85 · 0.85) s/B, latency (0, α_out) as NCCL charges the tree's network
    latency at ppn = 1; four per node: 2·(α_in + 3·0.4 µs) and 31 µs."""
    network = load_system("dgx-h100-80gb").network
    assert sharp_all_reduce_slope(1, network) == pytest.approx(1 / 36.125e9, rel=1e-12)
    assert sharp_all_reduce_latency_s(1, 5e-6, 10e-6) == (0.0, 10e-6)
    inner, outer = sharp_all_reduce_latency_s(4, 5e-6, 10e-6)
    assert inner == pytest.approx(12.4e-6, rel=1e-12)
    assert outer == pytest.approx(31e-6, rel=1e-12)


def test_framework_profile_enables_collnet():
    """A profile whose launcher sets NCCL_COLLNET_ENABLE=1 turns the run's CollNet on; the default profile
    leaves it as the system states it (off)."""
    system = load_system("dgx-h100-80gb")
    profile = load_framework("megatron-core")
    assert not framework_system(profile, system).network.collnet_enabled
    enabled = profile.model_copy(update={"nccl_collnet_enable": True})
    assert framework_system(enabled, system).network.collnet_enabled


def test_framework_profile_disables_nvls():
    """A recipe that exports NCCL_NVLS_ENABLE=0 runs the ring inside the node: node.nvls_efficiency 0; NCCL's
    default (2: on where the NVSwitch supports it) keeps the catalog's 0.85."""
    system = load_system("dgx-h100-80gb")
    profile = load_framework("megatron-core")
    assert framework_system(profile, system).node.nvls_efficiency == 0.85
    off = profile.model_copy(update={"nccl_nvls_enable": False})
    assert framework_system(off, system).node.nvls_efficiency == 0.0
