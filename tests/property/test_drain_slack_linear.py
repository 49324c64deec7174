"""step.tail.drain_slack_s sums the work in front of each stage entry by step.tail.sum_in_front (review of
issue 31: a sorted prefix sum for scalar entries, the elementwise ``where``s for arrays): the same numbers as
the quadratic formula on random schedules of scalar and array entries, ties and absent entries included."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from paraplan.cost.elementwise import where
from paraplan.step.inputs import backward_s
from paraplan.step.schedules import by_schedule
from paraplan.step.tail import SLACK_RULES, drain_slack_s, sum_in_front

N_CANDIDATES = 64


def _old_drain_slack_s(inp, works, totals, slowest):
    """The quadratic formula as it was (every entry against every other)."""
    windows = [backward_s(w) + w["pp"] for w in works]
    out = []
    for stage, total in zip(inp.stages, totals):
        before = 0.0
        for other, window in zip(inp.stages, windows):
            before = before + where(other.index < stage.index, other.count * window, 0.0)
        idle = slowest - total
        out.append(
            by_schedule(
                inp.knobs, lambda s, b=before, i=idle: SLACK_RULES[s.name](b, inp.knobs.vpp, i)
            )
        )
    return out


def _value(rng, arrays: bool, low: float, high: float, integer: bool = False):
    if integer:
        v = rng.integers(int(low), int(high) + 1, N_CANDIDATES if arrays else None)
        return v if arrays else int(v)
    return rng.uniform(low, high, N_CANDIDATES) if arrays else float(rng.uniform(low, high))


def _schedule(seed: int):
    rng = np.random.default_rng(seed)
    arrays = bool(seed % 2)
    n = int(rng.integers(1, 9))
    stages, works = [], []
    for _ in range(n):
        # some entries scalar among arrays (as a search's first stage is), ties and count 0 frequent
        on = arrays and rng.random() < 0.7
        stages.append(
            SimpleNamespace(
                index=_value(rng, on, 0, 4, integer=True), count=_value(rng, on, 0, 3, integer=True)
            )
        )
        works.append(
            {
                "backward": _value(rng, on, 0.0, 2.0),
                "pp": _value(rng, on, 0.0, 0.1),
                "forward": _value(rng, on, 0.0, 1.0),
                "recompute": _value(rng, on, 0.0, 0.5),
                "tp_backward": _value(rng, on, 0.0, 0.2),
                "cp_backward": 0.0,
                "ep_backward": _value(rng, on, 0.0, 0.2),
            }
        )
    totals = [backward_s(w) + w["pp"] + w["forward"] for w in works]
    slowest = totals[0]
    for t in totals[1:]:
        slowest = np.maximum(slowest, t)
    flags = {}
    for flag in ("interleaved", "gpipe", "zb", "dualpipe"):
        flags[flag] = rng.random(N_CANDIDATES) < 0.25 if arrays else bool(rng.random() < 0.25)
    knobs = SimpleNamespace(vpp=_value(rng, arrays, 1, 4, integer=True), **flags)
    return SimpleNamespace(stages=tuple(stages), knobs=knobs), works, totals, slowest


@pytest.mark.parametrize("seed", range(40))
def test_linear_slack_equals_the_quadratic_formula(seed):
    inp, works, totals, slowest = _schedule(seed)
    new = drain_slack_s(inp, works, totals, slowest)
    old = _old_drain_slack_s(inp, works, totals, slowest)
    assert len(new) == len(old)
    for stage, a, b in zip(
        inp.stages, new, old
    ):  # an absent entry's slack is never read (compose_step)
        present = np.broadcast_to(np.asarray(stage.count) > 0, np.shape(a))
        np.testing.assert_allclose(
            np.where(present, a, 0.0), np.where(present, b, 0.0), rtol=1e-12, atol=1e-15
        )


def test_sum_in_front_by_hand():
    """Entries at indices 2, 0, 2, 1: in front of index 2 are the entries at 0 and 1, not the other 2."""
    assert sum_in_front([2, 0, 2, 1], [1.0, 10.0, 100.0, 1000.0]) == [1010.0, 0.0, 1010.0, 10.0]
    arr = sum_in_front([np.array([2, 0]), 0, np.array([1, 1])], [1.0, np.array([10.0, 20.0]), 5.0])
    np.testing.assert_array_equal(arr[0], [15.0, 0.0])
    np.testing.assert_array_equal(arr[1], [0.0, 0.0])
    np.testing.assert_array_equal(arr[2], [10.0, 21.0])
