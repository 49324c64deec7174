"""Split-backward schedules against the closed forms of their papers."""

import numpy as np
import pytest

from paraplan.step.zero_bubble import (
    dualpipe_bubble_s,
    in_flight_microbatches,
    weight_copies,
    zb_h1_bubble_s,
    zb_h1_bubble_share,
)


def test_zb_h1_is_a_third_of_1f1b_when_b_is_2f():
    # Qi et al. 2023 §3.1: with T_F = T_B = T_W, ZB-H1's bubble is 1/3 of 1F1B's
    assert zb_h1_bubble_share(1.0, 2.0, 1.0) == pytest.approx(1 / 3)
    assert zb_h1_bubble_s(7 * 3.0, 1.0, 2.0, 1.0) == pytest.approx(7.0)  # (p-1)·(F+B-2W), p = 8


def test_dualpipe_table_2():
    # DeepSeek-V3 Table 2: (PP/2 - 1)(F&B + B - 3W); p = 8, F = 1, B = 2, W = 1, F&B = F + B
    assert dualpipe_bubble_s(8, 1.0, 2.0, 1.0) == pytest.approx(3 * (3 + 2 - 3))
    assert dualpipe_bubble_s(2, 1.0, 2.0, 1.0) == 0.0
    assert dualpipe_bubble_s(np.array([4, 8]), 1.0, 2.0, 1.0, overlapped_pair_s=2.5).tolist() == [
        1.5,
        4.5,
    ]


def test_memory_of_the_schedules():
    assert in_flight_microbatches("1f1b", 8, 0, 64) == 8
    assert in_flight_microbatches("zb-h1", 8, 3, 64) == 5
    assert in_flight_microbatches("dualpipe", 8, 3, 64) == 9
    assert (weight_copies("dualpipe"), weight_copies("1f1b")) == (2, 1)
