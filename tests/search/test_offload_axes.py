"""search.grid_index: the offload options as one axis per switch (evaluate_groups' broadcast layout)."""

from __future__ import annotations

import itertools

import numpy as np

from paraplan.search.grid_index import _constant_axes_dropped, _flat, _product_axes


def test_every_combination_of_the_switches_is_one_axis_per_switch():
    every = list(itertools.product([False, True], repeat=3))
    assert _product_axes(every) == (2, 2, 2)
    assert _product_axes([(False, False, False)]) == (1,)  # no offload
    assert _product_axes([(False, x, False) for x in (False, True)]) == (2,)
    # not every combination, or another order: one axis of every option
    assert _product_axes(every[:5]) == (5,)
    assert _product_axes(every[::-1][:4] + every[4:]) == (8,)
    assert _product_axes([]) == (1,)


def test_a_switch_keeps_the_axes_it_varies_on():
    # (1, weights, activations, optimizer, G) of 2 groups: the optimizer switch varies on its own axis only
    optimizer = np.array([o for _, _, o in itertools.product([0, 1], repeat=3)] * 2).reshape(2, 8).T
    value = _constant_axes_dropped(optimizer.reshape(1, 2, 2, 2, 2))
    assert value.shape == (1, 1, 1, 2, 2)
    assert value[0, 0, 0, :, 0].tolist() == [0, 1]
    assert np.array_equal(np.broadcast_to(value, (1, 2, 2, 2, 2)), optimizer.reshape(1, 2, 2, 2, 2))


def test_flat_is_group_then_state_then_offload():
    # value[t, o, g] = 100 g + 10 t + o over 2 states, 3 offloads, 2 groups
    t, o, g = np.meshgrid(np.arange(2), np.arange(3), np.arange(2), indexing="ij")
    value = 100 * g + 10 * t + o
    assert _flat(value, (2, 3, 2)).tolist() == [0, 1, 2, 10, 11, 12, 100, 101, 102, 110, 111, 112]
    valid = np.array([[True, True], [True, False]])[:, :, None].repeat(
        3, axis=2
    )  # group 1: one state
    assert _flat(value, (2, 3, 2), valid).tolist() == [0, 1, 2, 10, 11, 12, 100, 101, 102]
