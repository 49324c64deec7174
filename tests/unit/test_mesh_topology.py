"""A scale-up domain without a switch (node.topology full_mesh, specs.fabric): a group reaches only the links
to its own members, (a − 1)/(D − 1) of a GPU's bandwidth, a send to one peer 1/(D − 1); behind a switch every
group gets the whole per-GPU figure."""

from __future__ import annotations

from importlib.resources import files

import pytest

from paraplan.catalog import load_system
from paraplan.cost.comm import GroupSpan, collective_time_s, linear_collective

GH200 = "gh200-96gb-quad"  # 4 GPUs, 6 NVLink 4 links (150 GB/s) per pair, 450 GB/s per GPU


def _with_topology(name: str, topology: str):
    system = load_system(name)
    node = system.node.model_copy(update={"topology": topology})
    return system.model_copy(update={"node": node})


def test_the_mesh_entries_say_so_and_the_switch_entries_default():
    for name in (GH200, "alps-gh200", "mi300x-8", "mi355x-8"):
        assert load_system(name).node.topology == "full_mesh", name
    for name in ("dgx-h100-80gb", "dgx-a100-80gb", "gb200-nvl72"):
        assert load_system(name).node.topology == "switch", name


def test_peer_bandwidth_is_the_links_to_the_group():
    node = load_system(GH200).node
    whole = node.nvlink_bandwidth * node.nvlink_efficiency
    assert whole == pytest.approx(450e9 * 0.75)
    assert node.peer_bandwidth(1) == pytest.approx(150e9 * 0.75)  # one pair: 6 of 18 links
    assert node.peer_bandwidth(2) == pytest.approx(300e9 * 0.75)
    assert node.peer_bandwidth(3) == pytest.approx(whole)
    assert node.peer_bandwidth(7) == pytest.approx(whole)  # never above the GPU's links
    switch = _with_topology(GH200, "switch").node
    assert all(switch.peer_bandwidth(p) == pytest.approx(whole) for p in (1, 2, 3))
    mi = load_system("mi300x-8").node  # 7 peers x 64 GB/s
    assert mi.peer_bandwidth(1) == pytest.approx(64e9 * mi.nvlink_efficiency)


def test_a_tp2_all_reduce_on_the_mesh_runs_on_one_pair_of_links():
    mesh, switch = load_system(GH200), _with_topology(GH200, "switch")
    pair, quad = GroupSpan(2, 2, 1), GroupSpan(4, 4, 1)
    # 2(a-1)/a·S/B: a = 2 gives S/B, B the pair's 150 GB/s·η on the mesh, 450·η behind a switch
    assert linear_collective("all_reduce", pair, mesh).slope_in == pytest.approx(1 / (150e9 * 0.75))
    assert linear_collective("all_reduce", pair, switch).slope_in == pytest.approx(
        1 / (450e9 * 0.75)
    )
    # all four GPUs: every link in use, the same price on both topologies
    assert linear_collective("all_reduce", quad, mesh).slope_in == pytest.approx(
        linear_collective("all_reduce", quad, switch).slope_in
    )
    size = 134e6
    ratio = collective_time_s("all_reduce", size, pair, mesh) / collective_time_s(
        "all_reduce", size, pair, switch
    )
    assert 2.5 < ratio <= 3.0  # the bandwidth term 3x, the latency unchanged


def test_a_send_on_the_mesh_uses_one_pair_and_crossing_nodes_is_unchanged():
    mesh, switch = load_system(GH200), _with_topology(GH200, "switch")
    one = GroupSpan(2, 2, 1)
    assert linear_collective("send_recv", one, mesh).slope_in == pytest.approx(1 / (150e9 * 0.75))
    assert linear_collective("send_recv", one, switch).slope_in == pytest.approx(1 / (450e9 * 0.75))
    across = GroupSpan(8, 4, 2)
    for kind in ("all_reduce", "all_gather", "reduce_scatter"):
        assert linear_collective(kind, across, mesh).slope_out == pytest.approx(
            linear_collective(kind, across, switch).slope_out
        )


def test_a_bigger_group_never_gets_less_per_gpu_bandwidth():
    node = load_system("mi300x-8").node
    rates = [node.peer_bandwidth(p) for p in range(1, 8)]
    assert rates == sorted(rates)


def test_an_unknown_topology_is_refused_naming_the_field(cli, tmp_path):
    text = (files("paraplan.catalog") / "systems" / f"{GH200}.yaml").read_text()
    path = tmp_path / "ring.yaml"
    path.write_text(text.replace("topology: full_mesh", "topology: ring"))
    code, _, err = cli(
        "estimate",
        *("--model", "gpt3-350m", "--system", str(path), "--gpus", "4", "--global-batch", "16"),
    )
    assert code == 2
    assert "topology" in err and "ring" in err and "full_mesh" in err
    assert "Traceback" not in err


def test_a_hidden_call_on_the_mesh_moves_hbm_at_the_rate_of_its_links():
    """The HBM share of a hidden collective (cost.comm_contention.tier_overlap_costs) is the bytes its tier
    moves per second, the per-peer rate its bytes are priced at (review finding 2): on the GH200 mesh a pair
    moves 150 GB/s·η, all four GPUs 450 GB/s·η; behind a switch every group the whole 450 GB/s·η."""
    mesh, switch = load_system(GH200), _with_topology(GH200, "switch")
    acc = mesh.accelerator
    hbm = acc.hbm_bandwidth * acc.efficiency.hbm
    pair, quad = GroupSpan(2, 2, 1), GroupSpan(4, 4, 1)
    # μ = 0.1 of the byte time, h = 3 HBM bytes per wire byte (2 for a send)
    assert linear_collective("all_reduce", pair, mesh).hbm_in == pytest.approx(
        0.1 * 3 * 150e9 * 0.75 / hbm
    )
    assert linear_collective("send_recv", pair, mesh).hbm_in == pytest.approx(
        0.1 * 2 * 150e9 * 0.75 / hbm
    )
    whole = 0.1 * 3 * 450e9 * 0.75 / hbm
    assert linear_collective("all_gather", quad, mesh).hbm_in == pytest.approx(whole)
    assert linear_collective("all_reduce", pair, switch).hbm_in == pytest.approx(whole)
    # so the hidden price of the pair's all-reduce: its bytes 3x slower, the same HBM bytes moved
    size = 1e9
    t_mesh = linear_collective("all_reduce", pair, mesh).slope_in * size
    assert linear_collective("all_reduce", pair, mesh).hbm_in * t_mesh == pytest.approx(
        0.1 * 3 * size / hbm
    )
