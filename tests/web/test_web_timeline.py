"""The plan detail's pipeline timeline (web.timeline) and the scatter's aggregation rule
(web.work.Aggregate)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from paraplan.web.timeline import timeline
from paraplan.web.work import Aggregate


def _plan(pp, vpp, schedule, m, dp=2, mb=1):
    return {
        "gpus": pp * dp,
        "seq_length": 2048,
        "pp": pp,
        "dp": dp,
        "vpp": vpp,
        "schedule": schedule,
        "micro_batch": mb,
        "global_batch": m * dp * mb,
    }


BREAKDOWN = {"forward_s": 8.0, "backward_s": 14.0, "recompute_s": 2.0, "bubble_s": 0.0}


@pytest.mark.parametrize(
    "pp, vpp, schedule, m",
    [
        (4, 1, "1f1b", 8),
        (4, 1, "gpipe", 8),
        (8, 1, "1f1b", 16),
        (4, 2, "interleaved", 8),
        (4, 4, "interleaved", 16),
        (2, 1, "1f1b", 1),
    ],
)
def test_the_drawn_bubble_is_the_schedules_formula(pp, vpp, schedule, m):
    """Equal stages: (p − 1)·(F + B)/v (Narayanan et al. 2021 §2.2), F and B per micro-batch."""
    drawn = timeline(_plan(pp, vpp, schedule, m), BREAKDOWN)
    f, b = 8.0 / m, 16.0 / m
    assert drawn["drawn_bubble_s"] == pytest.approx((pp - 1) * (f + b) / vpp, rel=1e-9)
    assert len(drawn["bars"]) == 2 * m * vpp * pp
    for s in range(pp):  # a stage runs one pass at a time
        mine = sorted((x["start"], x["end"]) for x in drawn["bars"] if x["stage"] == s)
        assert all(a[1] <= b_[0] + 1e-12 for a, b_ in itertools.pairwise(mine))


def test_1f1b_holds_p_minus_s_micro_batches_at_most():
    drawn = timeline(_plan(4, 1, "1f1b", 8), BREAKDOWN)
    for s in range(4):
        order = [x for x in sorted(drawn["bars"], key=lambda x: x["start"]) if x["stage"] == s]
        live = peak = 0
        for bar in order:
            live += 1 if bar["kind"] == "F" else -1
            peak = max(peak, live)
        assert peak == 4 - s


def test_the_aggregate_keeps_one_best_plan_per_cell_and_counts_all():
    rng = np.random.default_rng(7)
    n = 5000
    columns = {
        "tp": rng.choice([1, 2, 4], n),
        "pp": rng.choice([1, 2], n),
        "micro_batch": rng.choice([1, 2], n),
        "step_time_s": rng.uniform(1.0, 2.0, n),
        "peak_memory_gib": rng.uniform(10.0, 20.0, n),
    }
    columns["objective"] = columns["step_time_s"] / 1000
    sink = Aggregate()
    sink({k: v[:2000] for k, v in columns.items()})
    sink({k: v[2000:] for k, v in columns.items()})
    points = sink.points()
    assert sink.plans == n and sum(p["plans"] for p in points) == n
    cells = {
        (
            p["plan"]["tp"] * p["plan"]["pp"],
            int(np.floor(np.log(p["step_time_s"]) / np.log(1.01))),
            int(p["peak_memory_gib"] // 0.5),
        )
        for p in points
    }
    assert len(cells) == len(points)
    best = min(range(n), key=lambda i: columns["objective"][i])
    assert points[0]["objective"] == columns["objective"][best]


def test_the_ranked_plans_are_the_points_of_their_cells():
    columns = {
        "tp": np.array([1, 1, 2]),
        "pp": np.array([1, 1, 1]),
        "step_time_s": np.array([1.0, 1.001, 1.0]),
        "peak_memory_gib": np.array([10.0, 10.1, 10.0]),
        "objective": np.array([1.0, 1.001, 1.0]),
    }
    sink = Aggregate()
    sink(columns)

    def ranked(rank, i):
        plan = {"tp": int(columns["tp"][i]), "pp": 1}
        metrics = {k: float(columns[k][i]) for k in ("step_time_s", "peak_memory_gib", "objective")}
        return {"rank": rank, "plan": plan, **metrics}

    # ranks 2 and 3 share a cell: the better ranked is its point; the cell's count is kept
    points = sink.points([ranked(1, 2), ranked(2, 0), ranked(3, 1)])
    assert [(p.get("rank"), p["plans"]) for p in points] == [(1, 1), (2, 2)]
