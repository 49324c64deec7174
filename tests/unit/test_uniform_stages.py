"""An encoder-decoder's uniform plan as a per-stage plan (specs.uniform_stages): the layer split by hand,
the estimate equal to the hand-built per-stage plan's, and every knob the per-stage plan lacks refused."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.step.per_stage import estimate_stage_plan
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec
from paraplan.specs.stage_plan import stage_plan_from_dict
from paraplan.specs.uniform_stages import CARRIED_FIELDS, even_layer_split, uniform_stage_plan

T5 = load_model("t5-3b")
A100 = load_system("dgx-a100-80gb")
POOL = "dgx-a100-80gb"  # uniform_cluster's pool name for this system


def test_48_layers_over_5_stages_by_hand():
    """48 = 5·9 + 3: the first three stages take 10, the last two 9."""
    assert T5.total_layers == 48
    assert even_layer_split(48, 5) == (10, 10, 10, 9, 9)
    assert even_layer_split(48, 2) == (24, 24) and even_layer_split(7, 7) == (1,) * 7


def test_uniform_t5_estimate_equals_the_hand_built_stage_plan():
    """tp 2, pp 5, dp 2 on 20 GPUs: five stages of 4 GPUs holding 10,10,10,9,9 layers; same estimate, bit for bit."""
    plan = PlanSpec(
        gpus=20,
        tp=2,
        pp=5,
        global_batch=32,
        micro_batch=2,
        seq_length=512,
        recompute="full",
        sequence_parallel=True,
        zero=1,
        schedule="gpipe",
        overlap_dp_grad_reduce=False,
    )
    hand = stage_plan_from_dict(
        {
            "global_batch": 32,
            "seq_length": 512,
            "micro_batch": 2,
            "dtype": "bf16",
            "schedule": "gpipe",
            "attention": "flash",
            "sequence_parallel": True,
            "zero": 1,
            "overlap_dp_grad_reduce": False,
            "stages": [
                {"pool": POOL, "gpus": 4, "tp": 2, "dp": 2, "layers": n, "recompute": "full"}
                for n in (10, 10, 10, 9, 9)
            ],
        }
    )
    cluster = uniform_cluster(A100, 20)
    assert cluster.pools[0].name == POOL
    mine = uniform_stage_plan(plan, T5, POOL)
    assert mine == hand
    assert (
        estimate_stage_plan(T5, cluster, mine).to_dict()
        == estimate_stage_plan(T5, cluster, hand).to_dict()
    )


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"cp": 2}, "plan.cp"),
        ({"vpp": 2, "pp": 2}, "plan.vpp"),
        ({"recompute": "full", "recompute_num_layers": 2}, "plan.recompute_num_layers"),
        ({"stage_layers": (30, 18), "pp": 2}, "plan.stage_layers"),
    ],
)
def test_knobs_the_stage_plan_cannot_carry_are_refused(fields, field):
    plan = PlanSpec(**({"gpus": 8, "global_batch": 8, "seq_length": 512} | fields))
    with pytest.raises(InputError) as err:
        uniform_stage_plan(plan, T5, POOL)
    text = str(err.value)
    assert "\n" not in text and f"{field}: " in text and "allowed" in text


def test_a_dense_models_ep_is_refused_by_the_uniform_rule():
    """ep is carried (every stage states it, issue 31), and a dense model's ep is 1 (specs.rules_moe.expert_free_rule),
    named on the uniform plan's field."""
    plan = PlanSpec(gpus=8, global_batch=8, seq_length=512, ep=2)
    with pytest.raises(InputError) as err:
        uniform_stage_plan(plan, T5, POOL)
    assert "plan.ep: 2 is not allowed; expert parallelism needs a mixture-of-experts model" in str(
        err.value
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"overlap_tp_comm": True},
        {"dtype": "fp8", "fp8_weight_copies": True},
        {"grad_dtype": "bf16"},
        {"overlap_param_gather": False, "zero": 3},
        {"zero3_prefetch_layers": 0, "zero3_gather_unit": "tensor", "zero": 3},
    ],
)
def test_run_wide_knobs_are_carried(fields):
    """The run-wide knobs a framework profile sets (specs.plan.RUNTIME_FIELDS, the overlap switches) are the
    per-stage plan's too, so a profile prices both paths alike (tests/property/test_one_path_frameworks.py)."""
    plan = PlanSpec(**({"gpus": 8, "global_batch": 8, "seq_length": 512} | fields))
    stage_plan = uniform_stage_plan(plan, T5, POOL)
    for name, value in fields.items():
        assert getattr(stage_plan, name) == value


@pytest.mark.parametrize("schedule", ["zb-h1", "dualpipe"])
def test_every_schedule_is_carried(schedule):
    """A per-stage plan's schedule field is a uniform plan's (specs.choices.Schedule), so a plan restated stage
    by stage keeps zb-h1 and DualPipe (pp 2, 4 micro-batches: DualPipe's 2·pp), priced by step.per_stage."""
    plan = PlanSpec(gpus=8, pp=2, global_batch=8, micro_batch=2, seq_length=512, schedule=schedule)
    stage_plan = uniform_stage_plan(plan, T5, POOL)
    assert stage_plan.schedule == schedule and stage_plan.pp == 2


def test_the_uniform_rules_still_apply():
    with pytest.raises(
        InputError,
        match=r"plan.global_batch: 12 is not allowed; must be a multiple of dp·micro_batch = 8·1",
    ):
        uniform_stage_plan(PlanSpec(gpus=8, global_batch=12, seq_length=512), T5, POOL)
    with pytest.raises(InputError, match=r"plan.tp: 3 is not allowed"):
        uniform_stage_plan(PlanSpec(gpus=6, tp=3, global_batch=12, seq_length=512), T5, POOL)
    with pytest.raises(InputError, match=r"plan.pp: 49 is not allowed; must not exceed layers=48"):
        uniform_stage_plan(PlanSpec(gpus=49, pp=49, global_batch=12, seq_length=512), T5, POOL)


def test_every_carried_field_is_a_plan_field():
    assert CARRIED_FIELDS <= set(PlanSpec.model_fields)


def test_other_uniform_paths_still_refuse_encoder_decoders(tmp_path):
    """The Python API estimate, export and sweep name the model rule (specs.rules.uniform_model_violations)."""
    from paraplan import api
    from paraplan.export import export_plan
    from paraplan.sweep.run import SweepConfig, prepare

    plan = PlanSpec(gpus=16, tp=2, pp=2, global_batch=64, micro_batch=4, seq_length=512)
    for call in (
        lambda: api.estimate("t5-3b", "dgx-a100-80gb", plan=plan),
        lambda: export_plan("megatron", plan, T5),
        lambda: prepare(
            SweepConfig(
                model="t5-3b", systems=["dgx-a100-80gb"], gpus=[16], global_batch=64, seq_length=512
            )
        ),
    ):
        with pytest.raises(
            InputError,
            match="model.architecture: 'encoder_decoder' is not allowed; .*stage by stage",
        ):
            call()
