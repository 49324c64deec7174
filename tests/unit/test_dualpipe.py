"""DualPipe's overlapped forward-backward pair (step.dualpipe) against hand-computed values, and the
pairs of its order (step.schedule_orders.dualpipe_pairs) against deepseek-ai/DualPipe's step counts."""

from __future__ import annotations

import numpy as np
import pytest

from paraplan.step.dualpipe import (
    overlapped_pair_s,
    overlapped_pairs,
    pair_compute_share,
    pair_saving_s,
)
from paraplan.step.schedule_orders import dualpipe_order, dualpipe_pairs

PARTS = {
    "forward": 1.0,
    "backward": 2.0,
    "recompute": 0.2,
    "tp_forward": 0.1,
    "tp_backward": 0.1,
    "cp_forward": 0.0,
    "cp_backward": 0.0,
    "ep_forward": 0.4,
    "ep_backward": 0.6,
    "pp": 0.3,
}


def test_the_sm_share_left_to_compute():
    """DeepSeek-V3 §3.2.2: 20 of the H800's 132 SMs to communication."""
    assert pair_compute_share(132, 20) == pytest.approx(112 / 132)
    assert pair_compute_share(132, 0) == 1.0
    assert pair_compute_share(132, 500) == pytest.approx(1 / 132)  # never no SM at all


def test_the_pair_by_hand():
    share = 112 / 132
    slowed = 3.2 / share  # 3.7714: forward + backward + recompute on 112 SMs
    # the dispatch / combine (2.5 s) and the sends (0.3 s) hide behind it; TP (0.2 s) stays
    assert overlapped_pair_s(PARTS, 2.5, share) == pytest.approx(slowed + 0.2)
    assert overlapped_pair_s(PARTS, 2.5, share) == pytest.approx(3.971428571)
    # more communication than compute: the rest shows, 5.3 − 3.7714
    assert overlapped_pair_s(PARTS, 5.0, share) == pytest.approx(5.3 + 0.2)
    # no expert-parallel communication: no SMs given, the sends hidden behind the whole compute
    assert overlapped_pair_s(PARTS, 0.0, share) == pytest.approx(3.2 + 0.2)
    out = overlapped_pair_s(PARTS, np.array([0.0, 2.5, 5.0]), share)
    assert out.tolist() == pytest.approx([3.4, 3.971428571, 5.5])


def test_the_pairs_a_step_overlaps():
    """m − p − 1 on the middle ranks: 2·(m/2 − p + h + 1) − 1 in step 4, p/2 − h − 1 in step 5."""
    assert overlapped_pairs(16, 120) == 103
    assert overlapped_pairs(8, 16) == 7
    assert overlapped_pairs(4, 4) == 0
    # S = F + B + p2p apart (the EP exposed 1 s, sends 0.3 s): 3.2 + 0.2 + 1.0 + 0.3 = 4.7 s
    work = sum(PARTS.values())
    assert work == pytest.approx(4.7)
    assert pair_saving_s(16, 120, work, 3.971428571) == pytest.approx(103 * (4.7 - 3.971428571))


@pytest.mark.parametrize("pp, m", [(4, 8), (8, 16), (8, 40), (16, 32), (16, 120)])
def test_the_order_pairs_as_dualpipe_step_does(pp, m):
    """Each pair is an F, then the B and W of a whole backward, of the two directions; the middle
    ranks run m − p − 1 of them (``overlapped_pairs``), the end ranks m − 3p/2 + 1."""
    for s in range(pp):
        order, pairs = dualpipe_order(pp, 1, m, s), dualpipe_pairs(pp, 1, m, s)
        for i in pairs:
            (f, _, d0), (b, _, d1), (w, _, d2) = order[i : i + 3]
            assert (f, b, w) == ("F", "B", "W") and d0 != d1 == d2
        h = min(s, pp - 1 - s)
        expected = m - 3 * pp // 2 + h + 1 - (h == pp // 2 - 1)
        assert len(pairs) == expected
    assert len(dualpipe_pairs(pp, 1, m, pp // 2)) == overlapped_pairs(pp, m)
