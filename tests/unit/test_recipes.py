"""Recipes as inputs (issue 33): recipe profiles, TP comm-GEMM overlap's SM contention from Transformer Engine's
userbuffers configurations, and the DeepSpeed pipeline engine's ZeRO refusal."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.frameworks import apply_framework, framework_system
from paraplan.cost.overlap import (
    shared_sm_slowdown,
    sm_margin_slowdown,
    userbuffers_contention_s,
)
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec
from paraplan.specs.rules_stack import engine_zero_rule
from paraplan.specs.stage_plan import stage_plan_from_dict
from paraplan.step.estimate import estimate


def test_sm_contention_by_hand():
    # a GEMM on 132 - 24 SMs takes 132/108 as long; a kernel sharing 4 of 132 SMs takes 4/132 of it
    assert sm_margin_slowdown(24.0, 132) == pytest.approx(24 / 108)
    assert shared_sm_slowdown(4.0, 132) == pytest.approx(4 / 132)


def test_userbuffers_contention_per_gemm():
    """NeMo's H100 70B userbuffers configuration, GEMM by GEMM (cost.overlap: UB_* constants)."""
    f, b = 1.0, 2.0
    # column-parallel: forward beside a 1-SM ring exchange; backward beside qkv_dgrad (4) and qkv_wgrad (24)
    assert userbuffers_contention_s("qkv_projection", f, b, 132, "bf16") == pytest.approx(
        (1 / 132, 0.5 * 2.0 * 28 / 132)
    )
    # row-parallel, bf16: the pipelined reduce-scatter keeps 24 SMs for itself (set_sm_margin)
    assert userbuffers_contention_s("attention_projection", f, b, 132, "bf16") == pytest.approx(
        (24 / 108, 0.5 * 2.0 / 132)
    )
    # fp8 configurations run that reduce-scatter as a 1-SM ring exchange: far less contention
    fp8 = userbuffers_contention_s("mlp_out_projection", f, b, 132, "fp8")[0]
    bf16 = userbuffers_contention_s("mlp_out_projection", f, b, 132, "bf16")[0]
    assert fp8 == pytest.approx(1 / 131) and bf16 == pytest.approx(16 / 116)
    # more SMs, less contention (B200: 148)
    assert userbuffers_contention_s("mlp_out_projection", f, b, 148, "bf16")[0] < bf16
    # the core attention, the LM head and expert GEMMs are not overlapped with TP traffic
    for name in ("attention_scores", "lm_head", "expert_fc1"):
        assert userbuffers_contention_s(name, f, b, 132, "bf16") == (0.0, 0.0)


def test_tp_overlap_costs_nothing_without_tp_traffic():
    model, system = load_model("llama3-8b"), load_system("dgx-h100-80gb")
    base = dict(gpus=8, tp=1, global_batch=64, seq_length=8192, zero=1)
    on = estimate(model, system, PlanSpec(**base, overlap_tp_comm=True)).step_time_s
    off = estimate(model, system, PlanSpec(**base, overlap_tp_comm=False)).step_time_s
    assert on == pytest.approx(off, rel=1e-12)


def test_tp_overlap_is_cheaper_than_exposed_tp():
    model, system = load_model("llama3-70b"), load_system("dgx-h100-80gb")
    base = dict(gpus=64, tp=8, pp=4, global_batch=64, seq_length=8192, zero=1)
    base |= dict(sequence_parallel=True)
    on = estimate(model, system, PlanSpec(**base, overlap_tp_comm=True)).step_time_s
    off = estimate(model, system, PlanSpec(**base, overlap_tp_comm=False)).step_time_s
    assert on < off
    # the fp8 configurations keep fewer SMs from the GEMMs than the bf16 ones: a smaller share of the step
    fp8_on = estimate(model, system, PlanSpec(**base, dtype="fp8", overlap_tp_comm=True))
    fp8_off = estimate(model, system, PlanSpec(**base, dtype="fp8", overlap_tp_comm=False))
    assert fp8_on.step_time_s < fp8_off.step_time_s


def test_recipe_profile_refines_its_stack_and_turns_on_what_the_recipe_ran():
    nemo = load_framework("nemo-24.09")
    assert nemo.base == "megatron-core" and nemo.version
    assert load_framework(nemo.base).base is None
    _, plan = apply_framework(nemo, load_system("dgx-h100-80gb"), {})
    assert (
        plan["overlap_tp_comm"] is True and plan["grad_dtype"] == "bf16"
    )  # grad_sync_dtype: bf16 (dgxc v24.11.1 cfg)
    for field in ("overlap_tp_comm", "overlap_p2p_comm", "grad_dtype", "fp8_recipe"):
        assert field in nemo.sources


def test_deepspeed_pipeline_engine_refuses_zero2_and_zero3():
    assert engine_zero_rule("deepspeed", 2, 2) and engine_zero_rule("deepspeed", 3, 4)
    assert engine_zero_rule("deepspeed", 1, 4) is None
    assert engine_zero_rule("deepspeed", 3, 1) is None  # no pipeline, no PipelineEngine
    assert engine_zero_rule("megatron", 2, 4) is None
    rule = engine_zero_rule("deepspeed", 3, 2)
    assert "ZeRO-3" in rule and "pp=2" in rule and rule.endswith("allowed: zero 0 or 1 (or pp=1)")
    # a uniform plan's pipeline runtime is its profile's (efficiency.runtime.pipeline_engine)
    system = framework_system(load_framework("megatron-deepspeed"), load_system("dgx-h100-80gb"))
    assert system.accelerator.efficiency.runtime.pipeline_engine == "deepspeed"
    uniform = PlanSpec(gpus=8, pp=2, zero=2, global_batch=16, seq_length=2048)
    with pytest.raises(InputError, match="plan.zero: 2 is not allowed; DeepSpeed's PipelineEngine"):
        estimate(load_model("llama3-8b"), system, uniform)
    estimate(load_model("llama3-8b"), load_system("dgx-h100-80gb"), uniform)  # Megatron-LM's engine
    plan = {
        "global_batch": 8,
        "seq_length": 1024,
        "microbatches": 4,
        "dtype": "fp16",
        "engine": "deepspeed",
        "zero": 2,
        "stages": [{"pool": "a", "gpus": 2, "layers": 4}, {"pool": "a", "gpus": 2, "layers": 4}],
    }
    with pytest.raises(InputError, match="zero"):
        stage_plan_from_dict(plan)
    stage_plan_from_dict(plan | {"zero": 1})


def test_every_recipe_profile_names_a_stack_profile_and_cites_what_it_states():
    from paraplan.catalog import framework_chain, framework_names

    names = set(framework_names())
    assert {"nemo-24.09", "megatron-bridge-25.11", "megatron-deepspeed", "llm-foundry"} <= names
    for name in names:
        profile = load_framework(name)
        assert profile.version, name
        if profile.base is not None:
            # a recipe refines a stack profile, directly or through another recipe (a benchmark's launcher
            # environment over the container recipe it runs: dgxc-benchmarking-24.11 over nemo-24.09)
            chain = framework_chain(name)
            assert all(n in names for n in chain) and load_framework(chain[-1]).base is None, name
            recipes = [load_framework(n) for n in chain[:-1]]
            for field in ("overlap_tp_comm", "grad_dtype", "pipeline_engine"):
                assert any(field in r.sources for r in recipes), (name, field)
        if profile.fp8_recipe != "none" or profile.cuda_graph_scope != "none":
            assert {"fp8_recipe", "cuda_graph_scope"} & set(profile.sources), name


# the issue-33 features every profile states with a source somewhere in its base chain (catalog._over_base merges
# the chain's sources per field into the profile's), whether the profile sets the value or takes the default: TP
# comm-GEMM overlap, p2p overlap, the gradient dtype and its reduction's, the fp8 recipe and fp8 weight all-gather,
# the optimizer-state precision, the CUDA-graph scope, the grouped-GEMM implementation and the pipeline engine
CITED_FEATURES = (
    "overlap_tp_comm",
    "overlap_p2p_comm",
    "grad_dtype",
    "grad_reduce_dtype",
    "fp8_recipe",
    "fp8_param_gather",
    "optimizer_state",
    "cuda_graph_scope",
    "grouped_gemm",
    "pipeline_engine",
)


def test_every_profile_cites_each_issue_33_feature_somewhere_in_its_chain():
    from paraplan.catalog import framework_names

    for name in framework_names():
        sources = load_framework(name).sources
        for field in CITED_FEATURES:
            assert field in sources, (name, field)
    # the stacks whose experts run as one grouped kernel say so: torchtitan's torch._grouped_mm
    assert load_framework("torchtitan-compiled").grouped_gemm == "torch-grouped-mm"
    assert load_framework("megatron-bridge-25.11").grouped_gemm == "te-multistream"


def test_deepspeed_engine_accumulates_gradients_per_micro_batch():
    """The per-stage engine's bytes come from the one table the framework profiles read
    (cost.runtimes.GRAD_ACCUMULATION_BYTES): fused 0 (the stack's, resolved by
    step.constants.at_zero_stage), AMP's stated fp16 param.grad 6 B; the BF16 optimizer's 18 B, which the
    megatron-deepspeed profile no longer states (its optimizer's rule, step.constants.at_zero_stage)."""
    from paraplan.catalog import load_framework
    from paraplan.cost.runtimes import GRAD_ACCUMULATION_BYTES, runtime_costs
    from paraplan.step.engines import ENGINES, engine_rules_of, grad_accumulation_bytes

    assert grad_accumulation_bytes(ENGINES["megatron"]) == 0.0  # fused into the wgrad GEMM
    assert grad_accumulation_bytes(ENGINES["deepspeed"]) == 0.0  # the stack's, as on a uniform plan
    # fp16 param.grad += fresh gradient: read 2 + 2 B, write 2 B per parameter
    assert grad_accumulation_bytes(engine_rules_of("deepspeed", "amp2022")) == 6.0
    assert GRAD_ACCUMULATION_BYTES["bf16_optimizer"] == 2.0 + 4.0 + 3.0 * 4.0
    profile = runtime_costs(load_framework("megatron-deepspeed"))
    assert profile.grad_accumulation_bytes == 0.0


def test_nemo_2409_fp8_keeps_the_pipelined_reduce_scatter():
    """NeMo 24.09's launcher runs one userbuffers configuration for bf16 and fp8 (pipeline, 24 / 16 SMs after the
    row-parallel GEMMs); the later fp8 configurations use a 1-SM ring exchange (cost.overlap)."""
    f, b = 1.0, 2.0
    assert userbuffers_contention_s(
        "attention_projection", f, b, 132, "fp8", fp8_pipeline=True
    ) == userbuffers_contention_s("attention_projection", f, b, 132, "bf16")
    assert userbuffers_contention_s("mlp_out_projection", f, b, 132, "fp8", fp8_pipeline=True)[
        0
    ] == pytest.approx(16 / 116)
    # column-parallel GEMMs and bf16 runs do not depend on it
    for name, dtype in (("qkv_projection", "fp8"), ("mlp_out_projection", "bf16")):
        assert userbuffers_contention_s(
            name, f, b, 132, dtype, fp8_pipeline=True
        ) == userbuffers_contention_s(name, f, b, 132, dtype)
    nemo = load_framework("nemo-24.09")
    assert nemo.tp_overlap_fp8_reduce_scatter == "pipeline"
    assert "tp_overlap_fp8_reduce_scatter" in nemo.sources
    assert load_framework("megatron-bridge-25.11").tp_overlap_fp8_reduce_scatter == "ring_exchange"
    model, system = load_model("llama3-70b"), load_system("dgx-h100-80gb")
    plan = dict(gpus=64, tp=4, pp=4, global_batch=64, seq_length=8192, zero=1, dtype="fp8")
    plan |= dict(sequence_parallel=True, overlap_tp_comm=True)
    ring = framework_system(
        nemo.model_copy(update={"tp_overlap_fp8_reduce_scatter": "ring_exchange"}), system
    )
    pipe = framework_system(nemo, system)
    assert (
        estimate(model, pipe, PlanSpec(**plan)).step_time_s
        > estimate(model, ring, PlanSpec(**plan)).step_time_s
    )


def _case(**extra):
    """A small case under megatron-bridge-25.11 (full-iteration CUDA graphs by default)."""
    plan = dict(gpus=8, tp=1, pp=1, global_batch=16, seq_length=2048, dtype="fp8")
    return dict(
        name="overrides",
        source="test",
        model="llama3-8b",
        system="dgx-b200",
        plan=plan,
        measured={"step_time_s": 1.0},
        framework="megatron-bridge-25.11",
        **extra,
    )


def test_a_case_states_where_its_recipe_departs_from_the_profile():
    from paraplan.validate.case_files import _case_from_raw

    default = _case_from_raw(_case(), "t", 0)
    assert default.system.accelerator.efficiency.cuda_graph_scope == "full_iteration"
    off = _case_from_raw(_case(framework_overrides={"cuda_graph_scope": "none"}), "t", 0)
    assert off.system.accelerator.efficiency.cuda_graph_scope == "none"
    assert off.framework == "megatron-bridge-25.11"  # the stack the case speaks for is unchanged
    # the shipped cases whose recipes leave CUDA graphs off (Megatron-Bridge v0.2.0 workload configs)
    from paraplan.validate.case_files import load_cases

    scopes = {c.name: c.system.accelerator.efficiency.cuda_graph_scope for c in load_cases()}
    assert scopes["mbridge2511-llama31-405b-b200-128-fp8"] == "none"
    assert scopes["mbridge2511-qwen3-235b-h100-256-fp8"] == "none"
    assert scopes["mbridge2511-llama3-8b-b200-8-fp8"] == "full_iteration"


@pytest.mark.parametrize(
    "extra, field",
    [
        ({"framework_overrides": {"cuda_graph_scope": "sometimes"}}, "cuda_graph_scope"),
        ({"framework_overrides": {"name": "other"}}, "framework_overrides"),
        ({"framework_overrides": ["cuda_graph_scope"]}, "framework_overrides"),
    ],
)
def test_bad_framework_overrides_name_the_field(extra, field):
    from paraplan.validate.case_files import _case_from_raw

    with pytest.raises(InputError, match=field):
        _case_from_raw(_case(**extra), "t", 0)
    raw = _case(**extra)
    del raw["framework"]
    with pytest.raises(InputError, match="framework_overrides: needs a framework"):
        _case_from_raw(raw, "t", 0)
