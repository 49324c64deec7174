"""The drain slack of the data-parallel tail (step.tail.drain_slack_s, issue 37): the time a stage has
between its last backward and the end of the step's pipeline part, per schedule.

1F1B and GPipe: Σ over the stages in front of the entry's first stage of their backward and sends;
interleaved: that / v; ZB-H1: none; DualPipe: S − W_i. The slack only lowers the exposed reduction
(never below 0), so a step with it is never slower than one without it."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.specs.plan import PlanSpec
from paraplan.step import compose
from paraplan.step.estimate import estimate, step_inputs
from paraplan.step.inputs import backward_s, stage_work, work_total
from paraplan.step.tail import drain_slack_s

MODEL, SYSTEM = "gpt3-13b", "dgx-a100-80gb"
BASE = dict(gpus=64, tp=4, pp=8, dp=2, micro_batch=1, global_batch=64, seq_length=2048)
SCHEDULES = {
    "1f1b": {},
    "gpipe": {},
    "interleaved": {"vpp": 5},
    "zb-h1": {},
    "dualpipe": {},
}


def _slack(schedule: str):
    plan = PlanSpec(**BASE, schedule=schedule, **SCHEDULES[schedule])
    inp = step_inputs(load_model(MODEL), load_system(SYSTEM), plan)
    works = [stage_work(s) for s in inp.stages]
    totals = [work_total(w) for w in works]
    slowest = max(t for s, t in zip(inp.stages, totals) if s.count > 0)
    return inp, works, totals, slowest, drain_slack_s(inp, works, totals, slowest)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe", "interleaved"])
def test_a_stage_drains_behind_the_stages_in_front_of_it(schedule):
    inp, works, _, _, slack = _slack(schedule)
    v = inp.knobs.vpp if schedule == "interleaved" else 1
    for stage, value in zip(inp.stages, slack):
        expected = sum(
            other.count * (backward_s(w) + w["pp"])
            for other, w in zip(inp.stages, works)
            if other.index < stage.index
        )
        assert value == pytest.approx(expected / v, rel=1e-12)
        if stage.index == 0:
            assert value == 0.0  # the first stage's last backward ends the pipeline
    assert max(slack) > 0.0


def test_zb_h1_has_no_slack_and_dualpipe_the_idle_of_each_slot():
    inp, _, _, _, slack = _slack("zb-h1")
    assert all(value == 0.0 for value in slack)
    inp, _, totals, slowest, slack = _slack("dualpipe")
    for stage, total, value in zip(inp.stages, totals, slack):
        assert value == pytest.approx(max(slowest - total, 0.0), abs=1e-15)
    assert min(v for s, v in zip(inp.stages, slack) if s.count > 0) == 0.0


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_the_slack_never_makes_a_step_slower(schedule, monkeypatch):
    model, system = load_model(MODEL), load_system(SYSTEM)
    plan = PlanSpec(**BASE, schedule=schedule, **SCHEDULES[schedule])
    with_slack = estimate(model, system, plan)
    monkeypatch.setattr(compose, "drain_slack_s", lambda inp, works, *a: [0.0] * len(works))
    without = estimate(model, system, plan)
    assert with_slack.step_time_s <= without.step_time_s * (1 + 1e-12)
    assert with_slack.breakdown.dp_comm_s <= without.breakdown.dp_comm_s * (1 + 1e-12)
