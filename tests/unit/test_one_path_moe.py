"""One step, one path for mixture-of-experts models (issue 31): a uniform plan of an MoE model (experts, MLA,
windowed layers, MTP modules) priced by the uniform estimator (step.estimate) and the same plan restated stage
by stage (specs.uniform_stages.uniform_stage_plan: every stage the plan's ep and etp, the plan its MoE knobs →
step.per_stage) give the same step time, breakdown and memory per stage: the per-stage path costs each
block kind with the uniform path's kind costs (step.build.kind_cost_facts, kind_memory_facts: the expert GEMMs,
the dispatch and combine on cost.moe's expert spans, the local experts' parameters and activations), holds
the routed experts of each MoE layer and MTP module and the MTP modules as a uniform stage holds them
(step.stage_blocks.attached_blocks, step.layout.StageMix) and reduces their gradients on the uniform path's
expert-data-parallel group (step.stage_links.stage_gradient_groups)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paraplan.catalog import load_model
from tests.unit.test_one_path import assert_same, both_paths, draw_plan_fields

# the catalog's MoE-family models: Mixtral (8 experts), Qwen3 (128 experts, moe_ffn_hidden 768), GPT-OSS
# (windowed and full layers in turn), DeepSeek-V3 (MLA, 3 dense layers, an MTP module), Kimi K2 (MLA, 1 dense
# layer, 384 experts)
MOE_MODELS = ("mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-120b", "deepseek-v3", "kimi-k2")
EPS = (1, 2, 4, 8)  # expert-parallel degrees drawn
DISPATCHERS = ("alltoall", "allgather", "deepep")


def draw_moe_fields(pick, model) -> dict:
    """A uniform plan of the MoE ``model``: test_one_path.draw_plan_fields' degrees and knobs, sequence
    parallelism wherever tp > 1 (specs.rules_moe.moe_sequence_parallel_rule), ep in EPS and etp in (1, 2) with
    ep dividing the experts and ep·etp the stage's tp·cp·dp (specs.rules_moe.expert_degree_rules), a dispatcher,
    dropless or capacity factor 1 (not with deepep: dispatcher_rule), forced or learned balance and the a2a
    overlap switch."""
    fields = draw_plan_fields(pick, model)
    stage = fields["gpus"] // fields["pp"]
    etp = pick([e for e in (1, 2) if stage % e == 0 and model.moe_ffn_hidden % e == 0])
    ep = pick([e for e in EPS if model.experts % e == 0 and stage % (e * etp) == 0])
    dispatcher = pick(DISPATCHERS)
    capacity = None if dispatcher == "deepep" else pick((None, 1.0))
    return fields | {
        "sequence_parallel": fields["tp"] > 1,
        "ep": ep,
        "etp": etp,
        "moe_dispatcher": dispatcher,
        "capacity_factor": capacity,
        "moe_balance": pick(("learned", "forced")),
        "moe_a2a_overlap": pick((False, True)),
    }


@st.composite
def moe_plans(draw):
    """An MoE-family model and a uniform plan of it (``draw_moe_fields``)."""
    name = draw(st.sampled_from(MOE_MODELS))
    return name, draw_moe_fields(lambda options: draw(st.sampled_from(options)), load_model(name))


@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(moe_plans())
def test_uniform_and_per_stage_paths_price_an_moe_plan_alike(case):
    name, plan_fields = case
    assert_same(*both_paths(name, **plan_fields))


@pytest.mark.parametrize("ep", [1, 2, 4, 8])
def test_expert_parallel_degrees_agree(ep):
    """Mixtral 8x7B on 32 H100s, tp 2 (sequence parallel), pp 2, dp 8: every ep of its 8 experts, the
    expert-data-parallel group edp = 16/ep; the local experts' parameters fall with ep on both paths."""
    plan = {"gpus": 32, "tp": 2, "pp": 2, "ep": ep, "global_batch": 32, "micro_batch": 1}
    uniform, per_stage = both_paths("mixtral-8x7b", seq_length=2048, sequence_parallel=True, **plan)
    assert_same(uniform, per_stage)
    assert [s["ep"] for s in per_stage.stage_summary] == [ep, ep]
