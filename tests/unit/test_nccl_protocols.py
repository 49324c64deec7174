"""NCCL's LL / LL128 / NVLS latencies beside the Simple protocol (cost.nccl_protocols), by hand."""

from __future__ import annotations

import pytest
from pytest import approx

from paraplan.catalog import load_system
from paraplan.cost.comm import GroupSpan, collective_time_s, linear_collective
from paraplan.cost.nccl_protocols import (
    protocol_latency,
    ring_protocol_latency,
    tree_protocol_latency,
)

US = 1e-6


def test_ring_latency_by_hand():
    """tuning.cc@v2.21.5-1: 8 GPUs, one node, all-reduce ring LL 6.6 + 14·0.6 = 15.0 us, LL128 14 + 14·1.9 =
    40.6 us; 16 GPUs on 2 nodes, all-gather LL: 6.6 + 14·max(0.6, 1.0) + 1·2.7 = 23.3 us."""
    assert sum(ring_protocol_latency("LL", 14, 0, 1)) == approx(15.0 * US)
    assert sum(ring_protocol_latency("LL128", 14, 0, 1)) == approx(40.6 * US)
    inner, outer = ring_protocol_latency("LL", 15, 1, 2)
    assert inner == approx((6.6 + 14 * 1.0) * US) and outer == approx(2.7 * US)


def test_tree_latency_by_hand():
    """Tree LL, 8 per node on 4 nodes: 6.8 + 2·7·0.6 = 15.2 us NVLink, 2·2·5.0 = 20 us network."""
    inner, outer = tree_protocol_latency("LL", 8, 4)
    assert inner == approx(15.2 * US) and outer == approx(20.0 * US)


def test_all_reduce_takes_the_cheaper_of_ring_and_tree():
    """32 GPUs, 8 per node, LL: ring 6.6 + (62 − 6)·1.0 + 6·2.7 = 78.8 us; tree 15.2 + 20 = 35.2 us."""
    lat = protocol_latency("LL", "all_reduce", (62, 6), 8, 4)
    assert sum(lat) == approx(35.2 * US)
    assert sum(protocol_latency("LL", "all_gather", (31, 3), 8, 4)) == approx(
        (6.6 + 28 * 1.0 + 3 * 2.7) * US
    )


def test_small_all_reduce_on_an_h100_node_by_hand():
    """8 H100, 8 bytes: LL 15.0 us + 8 B at half the ring's bus bandwidth (≈0); the catalog's protocol-blind
    5 us per hop gave 70 us. 1 MB: LL 15 + 1e6·1.75/337.5e9/0.5 = 25.4 us at the ring's bandwidth, not
    NVLS's (nccl-tests on 8 H100 run ring LL up to 1 MB, NVIDIA/nccl-tests issue #309)."""
    system = load_system("dgx-h100-80gb")
    span = GroupSpan(8, 8, 1)
    assert collective_time_s("all_reduce", 8, span, system) == approx(15.0 * US, rel=1e-3)
    assert collective_time_s("all_reduce", 1e6, span, system) == approx(
        15.0 * US + 1e6 * 1.75 / 337.5e9 / 0.5, rel=1e-9
    )


def test_nvls_latency_inside_a_domain():
    """72 GB200 GPUs in one NVL72, Simple: min(2·71·5 us, NVLS 25 us) = 25 us; across two domains the tree."""
    system = load_system("gb200-nvl72")
    assert linear_collective("all_reduce", GroupSpan(72, 72, 1), system).latency_in == approx(
        25 * US
    )
    split = linear_collective("all_reduce", GroupSpan(16, 8, 2), system)
    assert split.latency_in == approx(14 * 5 * US) and split.latency_out == approx(2 * 10 * US)


def test_systems_without_the_flag_keep_simple_alone():
    """A PCIe system (no node.nccl_ll_protocols): no LL latencies, the protocol-blind α as before."""
    system = load_system("l40s-8")
    form = linear_collective("all_gather", GroupSpan(8, 8, 1), system)
    assert form.ll_latency_in == float("inf") and form.ll128_latency_in == float("inf")


@pytest.mark.parametrize(
    "system_name", ["gb200-nvl72", "gb300-nvl72", "dgx-h100-80gb", "dgx-a100-80gb"]
)
@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter"])
def test_one_domain_is_never_slower_than_two(system_name, kind):
    """Property: a group inside one NVLink domain is never priced slower than the same group split over two
    domains (same size, same collective), for every even group size the domain holds, 8 B to 1 GiB."""
    system = load_system(system_name)
    domain = system.node.gpus_per_domain
    for n in range(2, domain + 1, 2):
        for size in [2.0**k for k in range(3, 31, 2)]:
            inside = collective_time_s(kind, size, GroupSpan(n, n, 1), system)
            split = collective_time_s(kind, size, GroupSpan(n, n // 2, 2), system)
            assert inside <= split * (1 + 1e-12), (n, size, inside, split)
