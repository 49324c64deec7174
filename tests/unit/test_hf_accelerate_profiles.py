"""The Hugging Face Trainer's two sharded back-ends as profiles over ``hf-transformers`` (issue 32):
``hf-transformers-fsdp`` (Accelerate's FSDP plugin, torch FSDP1) and ``hf-transformers-deepspeed``
(Accelerate's DeepSpeed plugin, DeepSpeedEngine). Each states where its runtime departs from the base:
FSDP1's copies and bf16 reduce-scatter into fp32 shards, DeepSpeed's bf16 module with bf16 gradients, its
ZeRO optimizer step and stage 2's reduce on every micro-batch."""

from __future__ import annotations

import pytest

from paraplan.catalog import framework_stack, load_framework, load_model, load_system
from paraplan.cost.frameworks import framework_plan_fields, framework_system
from paraplan.cost.runtimes import FSDP_COPY_FIELDS, fused_adamw_clip_bytes, runtime_costs
from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import OPTIMIZER_BYTES_PER_PARAM
from paraplan.step.constants import system_terms
from paraplan.step.estimate import estimate
from paraplan.validate.features import band_keys, case_population

BASE, FSDP, DS = "hf-transformers", "hf-transformers-fsdp", "hf-transformers-deepspeed"
# llama3-8b on one DGX H100, data parallel only, four micro-batches a step
PLAN = {"gpus": 8, "global_batch": 32, "seq_length": 4096, "dtype": "bf16"}


def _estimate(profile, zero: int):
    profile = load_framework(profile)
    system = framework_system(profile, load_system("dgx-h100-80gb"))
    plan = PlanSpec(**framework_plan_fields(profile, dict(PLAN, zero=zero)))
    return estimate(load_model("llama3-8b"), system, plan)


@pytest.mark.parametrize("name", [FSDP, DS])
def test_the_profiles_refine_hf_transformers_and_run_its_stack(name):
    profile = load_framework(name)
    assert profile.base == BASE and framework_stack(name) == BASE
    assert profile.pipeline_engine == "none"  # Trainer builds no pipeline
    base = load_framework(BASE)
    assert profile.host_launch_s == base.host_launch_s  # the same eager model code
    assert profile.module_impl == base.module_impl
    # the error bands pool them with the hf-transformers cases (validate.features)
    model, system = load_model("llama3-8b"), load_system("dgx-h100-80gb")
    assert band_keys(model, system, PlanSpec(**PLAN, zero=3), name).stack == BASE
    assert case_population(model, name) == "dense hf-transformers"


def _copy_terms(name: str, dtype: str) -> tuple[dict, float]:
    """The FSDP copies' StepInputs fields and the gradient reduction's bytes of a ``dtype`` run under profile
    ``name`` (step.constants.system_terms: cost.runtimes.fsdp_copy_bytes at the run's compute and reduce dtypes)."""
    profile = load_framework(name)
    system = framework_system(profile, load_system("dgx-h100-80gb"))
    plan = PlanSpec(**framework_plan_fields(profile, dict(PLAN, dtype=dtype, zero=3)))
    terms = system_terms(system, dtype, plan)
    return {field: terms[field] for field in FSDP_COPY_FIELDS}, terms["grad_reduce_bytes"]


def test_fsdp_reduce_follows_the_run_dtype_by_hand():
    """The FSDP copies take the reduce dtype the run's reduce-scatter moves: bf16 (2 B) under Accelerate's
    MixedPrecision(reduce_dtype=bf16) and llm-foundry's PURE, fp32 (4 B) under torchtitan's
    mixed_precision_reduce; an fp32 run reduces in fp32 (4 B) under every one (no MixedPrecision policy under
    Accelerate's mixed precision "no"; PURE at precision fp32; torchtitan's float32 param dtype)."""
    assert _copy_terms(FSDP, "bf16")[1] == 2.0
    assert _copy_terms("llm-foundry", "bf16")[1] == 2.0
    assert _copy_terms("torchtitan", "bf16")[1] == 4.0
    for name in (FSDP, "llm-foundry", "torchtitan"):
        assert _copy_terms(name, "fp32")[1] == 4.0, name


def test_fsdp1_copies_at_a_bf16_reduce_by_hand():
    """FSDP1 with param dtype p = 2, fp32 shards s = 4, reduce dtype r = 2 (cost.runtimes.fsdp1_*)."""
    assert runtime_costs(load_framework(FSDP)).fsdp_runtime == "fsdp1"
    fsdp, _ = _copy_terms(FSDP, "bf16")
    assert (
        fsdp["zero3_gather_copy_bytes"] == 4 + 2
    )  # the shard's cast to bf16 before the gather: s + p
    assert fsdp["zero3_compute_copy_bytes"] == 2 * 2  # the split's backward: 2p
    assert fsdp["zero3_reduce_unsharded_bytes"] == 2 * 2  # p = r: no cast, the pre-divide 2r
    assert (
        fsdp["zero3_reduce_copy_bytes"] == 2 * 2 + (2 + 4) + 3 * 4
    )  # post-divide, cast, accumulate
    assert not runtime_costs(load_framework(FSDP)).zero2_reduce_per_microbatch  # Trainer's no_sync
    for name in (BASE, DS):  # neither prices a FlatParameter's copies
        other, _ = _copy_terms(name, "bf16")
        assert set(other.values()) == {0.0}, name
    assert runtime_costs(load_framework(DS)).zero2_reduce_per_microbatch


def test_fsdp1_copies_of_an_fp32_run_by_hand():
    """An fp32 run (Accelerate's mixed precision "no": no MixedPrecision policy) gathers and reduces fp32:
    p = r = s = 4, so no cast before the gather or around the reduce-scatter (cost.runtimes.fsdp1_*)."""
    fsdp, reduce = _copy_terms(FSDP, "fp32")
    assert reduce == 4.0
    assert fsdp["zero3_gather_copy_bytes"] == 0.0  # s = p: no low-precision shard
    assert fsdp["zero3_compute_copy_bytes"] == 2 * 4  # the split's backward: 2p
    assert fsdp["zero3_reduce_unsharded_bytes"] == 2 * 4  # the pre-divide, 2r
    assert (
        fsdp["zero3_reduce_copy_bytes"] == 2 * 4 + 3 * 4
    )  # post-divide, accumulate (r = s: no cast)


def test_optimizer_step_by_hand():
    """The optimizer step streams its bytes per parameter at one rate: FSDP's fused AdamW + clipping on fp32
    shards (40 B, no autocast copy), DeepSpeed's ZeRO mixed-precision step (54 B) against the base's 46 B."""
    assert load_framework(FSDP).optimizer_step_bytes == fused_adamw_clip_bytes() == 40.0
    base = _estimate(BASE, 3).breakdown.optimizer_s
    assert _estimate(FSDP, 3).breakdown.optimizer_s == pytest.approx(base * 40.0 / 46.0, rel=1e-9)
    ds = _estimate(DS, 3).breakdown.optimizer_s
    assert ds == pytest.approx(base * OPTIMIZER_BYTES_PER_PARAM / 46.0, rel=1e-9)


def test_zero3_is_priced_apart_in_the_direction_of_each_mechanism():
    """--zero 3: DeepSpeed reduce-scatters bf16 gradients (2 B against the base's fp32 4 B) and adds no copies,
    so less DP traffic; FSDP1 reduces in bf16 too but pays its FlatParameter copies, at least the split's
    backward on the compute stream per micro-batch (4 B per parameter, exposed whole)."""
    base, fsdp, ds = (_estimate(name, 3) for name in (BASE, FSDP, DS))
    assert ds.breakdown.dp_comm_s < base.breakdown.dp_comm_s
    assert fsdp.breakdown.dp_comm_s > ds.breakdown.dp_comm_s
    assert len({base.step_time_s, fsdp.step_time_s, ds.step_time_s}) == 3
    profile, model = load_framework(FSDP), load_model("llama3-8b")
    no_copies = profile.model_copy(update={"fsdp_runtime": "none"})
    system = framework_system(no_copies, load_system("dgx-h100-80gb"))
    plan = PlanSpec(**framework_plan_fields(profile, dict(PLAN, zero=3)))
    bare = estimate(model, system, plan)
    # 4 micro-batches x 8.03e9 parameters x 4 B at 0.85 x 3.35 TB/s: 45 ms
    split_backward_s = plan.microbatches * model.total_params * 4.0 / system.accelerator.hbm_rate()
    assert 0.040 < split_backward_s < 0.050
    assert fsdp.step_time_s - bare.step_time_s >= split_backward_s


def test_zero2_reduces_every_micro_batch_under_deepspeed_only():
    """--zero 2 over four micro-batches: DeepSpeed stage 2 reduces each one, FSDP's SHARD_GRAD_OP under
    Trainer's no_sync once, so DeepSpeed pays more DP traffic although both reduce bf16 gradients."""
    fsdp, ds = _estimate(FSDP, 2), _estimate(DS, 2)
    assert ds.breakdown.dp_comm_s > fsdp.breakdown.dp_comm_s
    once = load_framework(DS).model_copy(update={"zero2_reduce_per_microbatch": False})
    system = framework_system(once, load_system("dgx-h100-80gb"))
    plan = PlanSpec(**framework_plan_fields(once, dict(PLAN, zero=2)))
    assert (
        estimate(load_model("llama3-8b"), system, plan).breakdown.dp_comm_s < ds.breakdown.dp_comm_s
    )
