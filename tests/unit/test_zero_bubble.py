"""Split-backward schedules (step/schedules.py's ZB-H1 and DualPipe entries) against the closed forms
of their papers."""

import numpy as np
import pytest

from paraplan.step.block_terms import BLOCK_TERM_NAMES
from paraplan.step.schedules import (
    SCHEDULES,
    PipelineWork,
    dualpipe_bubble_s,
    zb_h1_bubble_share,
)


def _work(pp, forward, backward, wgrad):
    """PipelineWork of pp equal stages whose slowest has forward F and backward B (W = wgrad)."""
    parts = dict.fromkeys((*BLOCK_TERM_NAMES, "pp"), 0.0) | {
        "forward": forward,
        "backward": backward,
    }
    slowest = forward + backward
    return PipelineWork(pp * slowest, slowest, pp, 1, parts, wgrad, 4 * pp)


def test_zb_h1_is_a_third_of_1f1b_when_b_is_2f():
    # Qi et al. 2023 §3.1: with T_F = T_B = T_W, ZB-H1's bubble is 1/3 of 1F1B's
    assert zb_h1_bubble_share(1.0, 2.0, 1.0) == pytest.approx(1 / 3)
    work = _work(8, 1.0, 2.0, 1.0)
    assert SCHEDULES["1f1b"].bubble.exact_s(work) == pytest.approx(7 * 3.0)  # (p-1)·(F+B)
    assert SCHEDULES["zb-h1"].bubble.exact_s(work) == pytest.approx(7.0)  # (p-1)·(F+B-2W), p = 8


def test_dualpipe_table_2():
    # DeepSeek-V3 Table 2: (PP/2 - 1)(F&B + B - 3W); p = 8, F = 1, B = 2, W = 1, F&B = F + B
    assert dualpipe_bubble_s(8, 1.0, 2.0, 1.0) == pytest.approx(3 * (3 + 2 - 3))
    assert dualpipe_bubble_s(2, 1.0, 2.0, 1.0) == 0.0
    assert dualpipe_bubble_s(np.array([4, 8]), 1.0, 2.0, 1.0, overlapped_pair_s=2.5).tolist() == [
        1.5,
        4.5,
    ]
    # a chunk is a whole stage (rank i runs stage i one way and stage p-1-i the other, deepseek-ai/
    # DualPipe's example): F, B, W the stage's; F&B = F + B where no pair is given
    assert SCHEDULES["dualpipe"].bubble.exact_s(_work(8, 2.0, 4.0, 2.0)) == pytest.approx(3 * 4)
    paired = _work(8, 2.0, 4.0, 2.0)._replace(pair_s=5.0)  # (8/2 - 1)(5 + 4 - 6)
    assert SCHEDULES["dualpipe"].bubble.exact_s(paired) == pytest.approx(3 * 3)


def test_memory_of_the_schedules():
    def in_flight(name, pp, stage, m):
        return SCHEDULES[name].in_flight.count(pp, 1, m, stage)

    assert in_flight("1f1b", 8, 0, 64) == 8
    assert in_flight("zb-h1", 8, 3, 64) == 5
    assert in_flight("dualpipe", 8, 3, 64) == 9
    assert in_flight("dualpipe", 8, 3, 4) == 4
    assert (SCHEDULES["dualpipe"].weight_copies, SCHEDULES["1f1b"].weight_copies) == (2, 1)
