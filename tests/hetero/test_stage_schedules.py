"""Per-stage plans run every schedule of specs.rules_schedule.SCHEDULE_RULES (issue 31): the plan's schedule
field is a uniform plan's (specs.choices.Schedule), priced by the uniform path's functions (step.schedules
entries through GridKnobs, step.compose; DualPipe's rank memory by step.stage_memory.dualpipe_memory_terms) and
refused by the same rules in the same words (DeepSpeed's engine_schedule_rule, DualPipe's batch rule); DualPipe
runs stage i and stage p − 1 − i on one rank, so its stages mirror (specs.rules_schedule.mirrored_stages_rule).
"""

from __future__ import annotations

import json

import pytest
import yaml

from paraplan.catalog.clusters import cluster_from_dict
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.rules_schedule import SCHEDULE_RULES, dualpipe_rule, mirrored_stages_rule
from paraplan.specs.rules_stack import engine_schedule_rule
from paraplan.specs.stage_plan import StagePlanSpec, stage_plan_from_dict, stage_plan_to_dict
from paraplan.step.per_stage import estimate_stage_plan
from tests.hetero.mixed_cluster import MIXED, MODEL
from tests.hetero.mixed_cluster import PLAN as BASE_PLAN
from tests.hetero.test_hetero_cli_and_cases import run

# 8 layers on a V100 + T4 cluster, stages mirrored (0 and 3 on two V100s, 1 and 2 on two T4s), unequal layers
MODEL8 = MODEL | {"layers": 8}
PLAN = BASE_PLAN | {
    "global_batch": 16,
    "microbatches": 8,
    "stages": [
        {"pool": "v100", "gpus": 2, "layers": 1},
        {"pool": "t4", "gpus": 2, "layers": 3},
        {"pool": "t4", "gpus": 2, "layers": 3},
        {"pool": "v100", "gpus": 2, "layers": 1},
    ],
}


def estimate(**changes):
    model = ModelSpec(**MODEL8, name="m8")
    cluster = cluster_from_dict(MIXED)
    return estimate_stage_plan(model, cluster, stage_plan_from_dict(PLAN | changes))


def refusal(**changes) -> str:
    with pytest.raises(InputError) as err:
        estimate(**changes)
    return str(err.value)


def test_the_schedule_field_is_the_uniform_plans():
    assert StagePlanSpec.model_fields["schedule"].annotation.__args__ == tuple(SCHEDULE_RULES)


def test_dualpipe_rank_holds_stage_i_and_its_mirror():
    """Rank i holds stage i's and stage 3 − i's weights and gradients (deepseek-ai/DualPipe
    examples/example_dualpipe.py:138), its own optimizer state: each the 1F1B plan's sums, by hand."""
    one, dual = estimate(), estimate(schedule="dualpipe")
    for i in range(4):
        a, b = one.stages[i], one.stages[3 - i]
        assert dual.stages[i].weights_bytes == pytest.approx(a.weights_bytes + b.weights_bytes)
        assert dual.stages[i].gradients_bytes == pytest.approx(
            a.gradients_bytes + b.gradients_bytes
        )
        assert dual.stages[i].optimizer_bytes == pytest.approx(a.optimizer_bytes)
    # the end ranks hold the embedding stage and the head stage: 0 and 3 the same weights
    assert dual.stages[0].weights_bytes == pytest.approx(dual.stages[3].weights_bytes)
    # the same work per micro-batch; DualPipe's bubble (p/2 − 1)·(F&B + B − 3W) > 0 at pp 4
    assert dual.stage_work_s == pytest.approx(one.stage_work_s)
    assert dual.breakdown.bubble_s > 0


def test_zb_h1_keeps_1f1b_memory_and_work_and_shrinks_the_bubble():
    """ZB-H1 (Qi et al. 2023 §3.1) holds 1F1B's in-flight micro-batches and weights and runs the same work per
    micro-batch; its bubble is 1F1B's times (F + B − c·W)/(F + B) < 1 (step.schedules.zb_h1_bubble_share)."""
    one, zb = estimate(), estimate(schedule="zb-h1")
    assert [s.peak_bytes for s in zb.stages] == [s.peak_bytes for s in one.stages]
    assert zb.stage_work_s == pytest.approx(one.stage_work_s)
    assert 0 < zb.breakdown.bubble_s < one.breakdown.bubble_s


def test_dualpipe_needs_mirrored_stages():
    stages = [dict(PLAN["stages"][0], tp=2), *PLAN["stages"][1:]]
    text = refusal(schedule="dualpipe", stages=stages)
    assert "\n" not in text
    assert text.startswith(
        "plan.stages.0: 'dualpipe' is not allowed; schedule=dualpipe runs stage 0"
    )
    # 1F1B takes the same stages
    assert estimate(stages=stages).step_time_s > 0


def test_mirrored_stages_rule_by_hand():
    assert mirrored_stages_rule("dualpipe", ["a", "b", "b", "a"]) is None
    assert mirrored_stages_rule("dualpipe", ["a", "b", "c", "a"])[0] == 1
    assert mirrored_stages_rule("1f1b", ["a", "b", "c", "d"]) is None
    assert [name for name, r in SCHEDULE_RULES.items() if r.mirrored] == ["dualpipe"]


def test_dualpipes_batch_rule_in_the_uniform_plans_words():
    """6 micro-batches on 4 stages: DualPipe needs at least 2·pp = 8; named on plan.schedule, as a uniform
    plan names it (SCHEDULE_RULES["dualpipe"].batch_field)."""
    text = refusal(schedule="dualpipe", microbatches=6, global_batch=12)
    assert text == f"plan.schedule: 'dualpipe' is not allowed; {dualpipe_rule(4, 6)}"


@pytest.mark.parametrize("schedule", ["zb-h1", "dualpipe", "gpipe"])
def test_deepspeeds_engine_refuses_them_in_the_uniform_plans_words(schedule):
    """DeepSpeed's PipelineEngine runs its TrainSchedule only (specs.rules_stack.engine_schedule_rule): the
    per-stage plan's line is the uniform plan's (step.estimate._system_violations: plan.schedule)."""
    text = refusal(schedule=schedule, engine="deepspeed")
    rule = engine_schedule_rule("deepspeed", schedule, 1, 4)
    assert text == f"plan.schedule: {schedule!r} is not allowed; {rule}"


@pytest.mark.parametrize("schedule", ["zb-h1", "dualpipe"])
def test_estimate_plan_file_round_trip(capsys, tmp_path, monkeypatch, schedule):
    """``estimate --plan FILE`` takes the schedule, prints it back in its JSON (plan, stage_plan), and the
    printed stage_plan, read again, is the same plan with the same price."""
    monkeypatch.setenv("COLUMNS", "200")
    paths = {}
    for name, data in (
        ("cluster", MIXED),
        ("model", MODEL8),
        ("plan", PLAN | {"schedule": schedule}),
    ):
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(yaml.safe_dump(data))
    args = ["estimate", "-m", str(paths["model"]), "--cluster", str(paths["cluster"]), "--json"]
    code, out, _ = run(capsys, *args, "--plan", str(paths["plan"]))
    assert code == 0
    data = json.loads(out)
    assert data["plan"]["schedule"] == data["stage_plan"]["schedule"] == schedule
    plan = stage_plan_from_dict(data["stage_plan"])
    assert plan == stage_plan_from_dict(PLAN | {"schedule": schedule})
    assert stage_plan_to_dict(plan) == data["stage_plan"]
    again = tmp_path / "again.json"
    again.write_text(json.dumps(data["stage_plan"]))
    code, out, _ = run(capsys, *args, "--plan", str(again))
    assert code == 0 and json.loads(out)["step_time_s"] == data["step_time_s"]
