"""The plan detail's pipeline timeline (web.timeline) and the scatter's aggregation rule
(web.work.Aggregate)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from paraplan.step.schedules import schedule_order
from paraplan.web.timeline import timeline
from paraplan.web.work import Aggregate


def _pipeline(schedule, pp, vpp, m, f=1.0, b=2.0, w=1.0, p2p=0.0, last=None):
    """An api.pipeline_stages document of equal stages (``last``: the last stage's times)."""
    stage = {"forward_s": f, "backward_s": b, "wgrad_s": w, "p2p_s": p2p}
    stages = [dict(stage) for _ in range(pp)]
    if last is not None:
        stages[-1].update(last)
    for s in stages:
        s["work_s"] = s["forward_s"] + s["backward_s"] + s["p2p_s"]
    split = schedule in ("zb-h1", "dualpipe")
    return {
        "schedule": schedule,
        "pp": pp,
        "vpp": vpp,
        "microbatches": m,
        "stages": stages,
        "split_backward": split,
        "directions": 2 if schedule == "dualpipe" else 1,
        "pipeline_s": 0.0,
    }


def _bubble(schedule, pp, vpp, m, stages):
    """The composition's bubble of equal-or-last-slowest stages (step.schedules formulas)."""
    from paraplan.step.schedules import bubble_from_work_s, zb_h1_bubble_share, zb_h1_w_credit

    works = [s["work_s"] for s in stages]
    bubble = bubble_from_work_s(sum(works), max(works), vpp)
    if schedule == "zb-h1":
        slow = stages[-1]
        share = zb_h1_bubble_share(
            slow["forward_s"], slow["backward_s"], slow["wgrad_s"], zb_h1_w_credit(pp, m)
        )
        bubble *= share
    return bubble


@pytest.mark.parametrize(
    "schedule, pp, vpp, m, times",
    [
        ("1f1b", 4, 1, 8, {}),
        ("gpipe", 4, 1, 8, {}),
        ("1f1b", 8, 1, 16, {"p2p": 0.1}),
        ("1f1b", 4, 1, 8, {"last": {"forward_s": 1.3, "backward_s": 2.4}}),
        ("interleaved", 4, 2, 8, {}),
        ("interleaved", 4, 4, 16, {"p2p": 0.2}),
        ("1f1b", 2, 1, 1, {}),
        ("zb-h1", 4, 1, 8, {}),
        ("zb-h1", 8, 1, 16, {"f": 1.0, "b": 2.2, "w": 0.9}),
        ("zb-h1", 4, 1, 2, {}),
        ("zb-h1", 4, 1, 3, {}),
        ("zb-h1", 4, 1, 8, {"last": {"forward_s": 1.2, "backward_s": 2.4, "wgrad_s": 1.2}}),
    ],
)
def test_the_drawn_makespan_is_the_compositions_pipeline_time(schedule, pp, vpp, m, times):
    """m·S + bubble (step.schedules) for equal stages or the slowest last, W <= F for ZB-H1."""
    pipeline = _pipeline(schedule, pp, vpp, m, **times)
    drawn = timeline(pipeline, schedule_order, 0.0)
    slowest = max(s["work_s"] for s in pipeline["stages"])
    expected = m * slowest + _bubble(schedule, pp, vpp, m, pipeline["stages"])
    assert drawn["makespan_s"] == pytest.approx(expected, rel=1e-9)
    passes = 3 if schedule == "zb-h1" else 2
    assert len(drawn["bars"]) == passes * m * vpp * pp
    for s in range(pp):  # a stage runs one pass at a time
        mine = sorted((x["start"], x["end"]) for x in drawn["bars"] if x["stage"] == s)
        assert all(a[1] <= b_[0] + 1e-12 for a, b_ in itertools.pairwise(mine))


def test_a_slowest_middle_stage_is_drawn_shorter_than_the_composition():
    """The composition passes every other stage's whole work through fill and drain (T − S); the
    drawing only the forward of the stages before the slowest and the backward of those after."""
    pipeline = _pipeline("1f1b", 4, 1, 8)
    pipeline["stages"][1].update(forward_s=1.5, backward_s=3.0, work_s=4.5)
    drawn = timeline(pipeline, schedule_order, 0.0)
    works = [s["work_s"] for s in pipeline["stages"]]
    assert drawn["makespan_s"] < 8 * max(works) + sum(works) - max(works)


def test_zb_h1_holds_at_most_p_micro_batches_and_1f1b_p_minus_s():
    for schedule, peak_of in (("1f1b", lambda s: 4 - s), ("zb-h1", lambda s: 4)):
        drawn = timeline(_pipeline(schedule, 4, 1, 8), schedule_order, 0.0)
        for s in range(4):
            order = [x for x in sorted(drawn["bars"], key=lambda x: x["start"]) if x["stage"] == s]
            live = peak = 0
            freed = "W" if schedule == "zb-h1" else "B"
            for bar in order:
                live += 1 if bar["kind"] == "F" else -1 if bar["kind"] == freed else 0
                peak = max(peak, live)
            assert peak <= peak_of(s)


@pytest.mark.parametrize(
    "schedule, extra",
    [("1f1b", {}), ("interleaved", {"vpp": 2}), ("zb-h1", {}), ("gpipe", {}), ("dualpipe", {})],
)
def test_a_catalog_plan_is_drawn_at_the_estimators_pipeline_time(schedule, extra):
    """GPT-3 13B, pp 4 (the last stage, with the LM head, is the slowest): the drawing's makespan
    is the composition's m·S + bubble; ZB-H1 within 0.5 % (the composition takes the largest W
    share over the stages, the drawing each stage's own: 0.17 % here); DualPipe within 2 % (Table 2's
    bubble against its order placed in time, pairs locked, F : B : W = 1.6 : 2.7 : 0.9 here: 1.6 %)."""
    from paraplan import api

    plan = dict(gpus=64, tp=8, pp=4, global_batch=64, micro_batch=1, schedule=schedule, **extra)
    pipeline = api.pipeline_stages("gpt3-13b", "dgx-a100-80gb", plan)
    estimated = api.estimate("gpt3-13b", "dgx-a100-80gb", plan)
    drawn = timeline(pipeline, api.schedule_order, estimated.breakdown.bubble_s)
    rel = {"zb-h1": 5e-3, "dualpipe": 2e-2}.get(schedule, 1e-9)
    assert drawn["makespan_s"] == pytest.approx(pipeline["pipeline_s"], rel=rel)
    b = estimated.breakdown
    tail = b.optimizer_s + b.dp_comm_s + b.offload_s
    assert pipeline["pipeline_s"] == pytest.approx(estimated.step_time_s - tail, rel=1e-12)
    assert drawn["approximate"] == (schedule in ("zb-h1", "dualpipe"))


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


def test_an_empty_sink_has_no_points_and_a_read_sink_keeps_counting():
    """No plan seen: no point; reading the points compacts the rows, and plans seen after still count."""
    assert Aggregate().points() == []
    one = {"tp": np.array([1]), "pp": np.array([1]), "step_time_s": np.array([1.0])}
    one |= {"peak_memory_gib": np.array([10.0]), "objective": np.array([1.0])}
    sink = Aggregate()
    sink(one)
    assert [p["plans"] for p in sink.points()] == [1]
    sink({**one, "objective": np.array([0.5])})
    assert [(p["plans"], p["objective"]) for p in sink.points()] == [(2, 0.5)]


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


@pytest.mark.parametrize("pp, m", [(2, 4), (4, 8), (4, 12), (8, 16), (8, 20), (16, 32)])
@pytest.mark.parametrize("pair", [3.0, 2.5, 2.0])
def test_dualpipe_is_drawn_in_both_directions_at_the_compositions_pipeline_time(pp, m, pair):
    """DualPipe's own order (step.schedule_orders.dualpipe_order): m/2 micro-batches from each end,
    each rank runs every micro-batch once, its overlapped pairs (dualpipe_pairs) as one F&B that waits
    for both inputs; with equal stages at F = B − W = W the drawn makespan is the composition's
    m·S − (m − p − 1)·(S − F&B) + (p/2 − 1)·(F&B + B − 3W) (step.schedules, step.dualpipe,
    DeepSeek-V3 Table 2), whole-stage chunks: with F&B = F + B = 3, 3m + (p/2 − 1)·2."""
    from paraplan.step.dualpipe import overlapped_pairs
    from paraplan.step.schedules import dualpipe_bubble_s

    pipeline = _pipeline("dualpipe", pp, 1, m, f=1.0, b=2.0, w=1.0)
    for stage in pipeline["stages"]:
        stage["pair_s"] = pair
    pipeline["pipeline_s"] = (
        m * 3.0
        - overlapped_pairs(pp, m) * (3.0 - pair)
        + dualpipe_bubble_s(pp, 1.0, 2.0, 1.0, pair)
    )
    drawn = timeline(pipeline, schedule_order, 0.0)
    assert drawn["makespan_s"] == pytest.approx(pipeline["pipeline_s"], rel=1e-12)
    assert not drawn["approximate"] and drawn["directions"] == 2
    assert len(drawn["bars"]) == 3 * m * pp
    for s in range(pp):  # one pass at a time; both directions' micro-batches, each F, B, W once
        mine = [x for x in drawn["bars"] if x["stage"] == s]
        spans = sorted((x["start"], x["end"]) for x in mine)
        assert all(a[1] <= b_[0] + 1e-12 for a, b_ in itertools.pairwise(spans))
        assert {(x["kind"], x["mb"], x["chunk"]) for x in mine} == {
            (k, i, d) for k in "FBW" for i in range(m // 2) for d in (0, 1)
        }
    # direction 1 enters at the last stage: its first forward starts there at 0
    first = min((x for x in drawn["bars"] if x["chunk"] == 1), key=lambda x: x["start"])
    assert first["stage"] == pp - 1 and first["start"] == 0.0


def test_dualpipe_with_other_ratios_is_marked_where_it_differs():
    """Away from F = B − W = W the placed order and Table 2's formula part: marked approximate,
    both figures kept; m < 2p is not drawn (deepseek-ai/DualPipe asserts m >= 2p)."""
    pipeline = _pipeline("dualpipe", 8, 1, 16, f=1.0, b=1.5, w=0.4)
    pipeline["pipeline_s"] = 1.0
    drawn = timeline(pipeline, schedule_order, 0.0)
    assert drawn["approximate"] and drawn["makespan_s"] > 16 * 2.5
    short = timeline(_pipeline("dualpipe", 8, 1, 8), schedule_order, 0.0)
    assert short["bars"] == [] and short["makespan_s"] is None
    assert "m >= 2p" in short["note"] and short["approximate"]
