"""The dropless MoE synchronisation's host mechanism (cost/moe_host.py), each term against hand-computed values."""

from __future__ import annotations

import pytest

from paraplan.cost import moe_host as M


def test_drain_is_one_round_trip_per_sync():
    assert M.sync_drain_s(3, 10.5e-6) == pytest.approx(31.5e-6)


def test_reissue_idle_by_hand():
    # host 10, 10, 10 us; device 0, 25, 5 us: the GPU waits 10 us, runs nothing, waits to 20 us, then runs 25 us
    # while the host issues the third call: idle max(10, 20 - 0, 30 - 25) = 20 us
    assert M.reissue_idle_s([10e-6, 10e-6, 10e-6], [0.0, 25e-6, 5e-6]) == pytest.approx(20e-6)
    # a long first kernel hides everything after it
    assert M.reissue_idle_s([5e-6, 50e-6], [1.0, 1e-6]) == pytest.approx(5e-6)
    assert M.reissue_idle_s([], []) == 0.0
    with pytest.raises(ValueError):
        M.reissue_idle_s([1e-6], [])


@pytest.mark.parametrize("seed", range(5))
def test_reissue_idle_bounds(seed):
    """Never below the first call's issue nor above the whole issue time; never negative."""
    import random

    rng = random.Random(seed)
    host = [rng.uniform(0, 50e-6) for _ in range(12)]
    device = [rng.uniform(0, 80e-6) for _ in range(12)]
    idle = M.reissue_idle_s(host, device)
    assert host[0] - 1e-15 <= idle <= sum(host) + 1e-15
    assert M.reissue_idle_s([2 * h for h in host], device) >= idle  # a slower host never idles less


def test_post_sync_sequence_order():
    section = [("permute", 1.0, 2.0), ("expert_fc1", 3.0, 4.0), ("unpermute", 5.0, 6.0)]
    host, device = M.post_sync_sequence(section, 0.5, fp8=False)
    assert host == [0.5, 3.0, 5.0] and device == [0.0, 4.0, 6.0]  # permutation 1 precedes the sync
    host, device = M.post_sync_sequence(section, 0.5, fp8=True)
    assert host == [0.5, 0.5, 0.5, 3.0, 5.0] and device == [0.0, 0.0, 0.0, 4.0, 6.0]


def test_post_clamp_sequence_order():
    section = [("expert_fc1", 1.0, 2.0), ("expert_glu_clamp", 3.0, 4.0), ("expert_fc2", 5.0, 6.0)]
    assert M.post_clamp_sequence(section) == (
        [5.0],
        [6.0],
    )  # the ops after the clamp, no dispatch call
    assert M.post_clamp_sequence(section[:1]) == ([1.0], [2.0])  # no clamp: the whole section


def test_graph_launches():
    assert M.graph_launches([True, True, False, True], whole_iteration=False) == 2
    assert (
        M.graph_launches([True, True, False, True], whole_iteration=True) == 2
    )  # split by the expert section
    assert M.graph_launches([True, True], whole_iteration=True) == 0
    assert M.graph_launches([True, True], whole_iteration=False) == 1
    assert M.graph_launches([False, False], whole_iteration=False) == 0
