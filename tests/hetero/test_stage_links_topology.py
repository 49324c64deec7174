"""A per-stage plan's groups are priced on their links by the rule a uniform plan's groups are
(review finding 1): the rate a member gets towards its a − 1 domain peers is the pool's
specs.fabric NodeSpec.peer_bandwidth, so a group inside a full-mesh node (GH200: 6 NVLink links per pair
of its 4 GPUs) gets the links to its peers, on one pool or mixed with others (step.stage_links.group_links)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_system
from paraplan.cost.comm import GroupSpan, linear_collective
from paraplan.specs.cluster import ClusterSpec, PoolSpec, uniform_cluster
from paraplan.step.stage_links import group_links

GH200 = load_system("gh200-96gb-quad")  # full mesh: 450 GB/s per GPU, 150 GB/s per pair, η 0.75
H100 = load_system("dgx-h100-80gb")  # NVSwitch


def test_a_full_mesh_pool_prices_a_group_as_the_uniform_path_does():
    cluster = uniform_cluster(GH200, 8)
    pool = cluster.pools[0].name
    # two members on each of two nodes: one peer each inside the node
    span, system = group_links(cluster, [(pool, 0), (pool, 1), (pool, 4), (pool, 5)])
    assert span == GroupSpan(4, 2, 2)
    for kind in ("all_reduce", "reduce_scatter", "all_gather"):
        stage, uniform = linear_collective(kind, span, system), linear_collective(kind, span, GH200)
        assert stage.slope_in == pytest.approx(uniform.slope_in)
        assert stage.slope_in == pytest.approx((1 if kind == "all_reduce" else 0.5) / 112.5e9)
        assert (stage.hbm_in, stage.cost_in) == pytest.approx((uniform.hbm_in, uniform.cost_in))
        assert (stage.slope_out, stage.hbm_out) == pytest.approx(
            (uniform.slope_out, uniform.hbm_out)
        )
        assert (stage.latency_in, stage.latency_out) == pytest.approx(
            (uniform.latency_in, uniform.latency_out)
        )


def test_a_mixed_group_takes_the_mesh_pools_per_peer_rate():
    """A group on an NVSwitch pool and a full-mesh pool, two members per node: its slowest intra-node
    rate is the mesh pair's 150 GB/s·0.75 = 112.5 GB/s, not the mesh GPU's whole 450 GB/s·0.75 (what
    the stage path took before, the first pool's switch deciding the topology)."""
    cluster = ClusterSpec(
        pools=(PoolSpec(name="a", system=H100, nodes=1), PoolSpec(name="b", system=GH200, nodes=1))
    )
    span, system = group_links(cluster, [("a", 0), ("a", 1), ("b", 0), ("b", 1)])
    assert span == GroupSpan(4, 2, 2)
    assert system.node.peer_bandwidth(1) == pytest.approx(150e9 * 0.75)
    form = linear_collective("all_reduce", span, system)
    assert form.slope_in == pytest.approx(2 * (2 - 1) / 2 / (150e9 * 0.75))
    # the whole node of either pool: every link in use, the slower GPU's whole rate
    whole = min(s.node.nvlink_bandwidth * s.node.nvlink_efficiency for s in (H100, GH200))
    _, system = group_links(cluster, [("a", k) for k in range(4)] + [("b", k) for k in range(4)])
    assert system.node.peer_bandwidth(3) == pytest.approx(whole)
