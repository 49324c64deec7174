"""A uniform plan (specs/plan.py) restated as the per-stage plan (specs/stage_plan.py) that costs it, for
the models the uniform builder does not compose: encoder-decoders (T5, issue 10). ``paraplan estimate``
and ``paraplan search`` take the uniform flags for them and cost the result with
step.per_stage.estimate_stage_plan / search.staged.hetero, so there is one cost model for T5, not two.
For the other models it restates a uniform plan exactly (its own split), which tests/unit/test_one_path.py
uses to check that both paths price a plan alike.
"""

from __future__ import annotations

from dataclasses import replace
from typing import get_args

from paraplan.specs.errors import InputError, Violation
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import OFFLOAD_FIELDS, RUNTIME_FIELDS, PlanSpec, runtime_fields_of
from paraplan.specs.rules import (
    batch_rule,
    degree_rule,
    pp_rule,
    sequence_parallel_rule,
    stage_cp_rule,
    tp_rules,
)
from paraplan.specs.rules import costed_by_stages, interleave_model_rule  # noqa: F401 (named here too)
from paraplan.specs.rules_moe import moe_plan_violations
from paraplan.specs.rules_stack import engine_schedule_rule
from paraplan.specs.stage_plan import EXPERT_KNOBS, StagePlanSpec, stage_plan_from_dict

# The PlanSpec fields a per-stage plan carries (uniform_stage_plan); every other PlanSpec field must keep
# its default (unsupported_field_violations compares against PlanSpec's own defaults, so a field added to
# PlanSpec later is refused until it is carried here).
CARRIED_FIELDS = frozenset(
    {
        "gpus",
        "tp",
        "pp",
        "dp",
        "cp",
        "ep",
        "etp",
        *EXPERT_KNOBS,
        "micro_batch",
        "global_batch",
        "seq_length",
        "sequence_parallel",
        "recompute",
        "recompute_modules",
        "zero",
        "dtype",
        "attention",
        "schedule",
        "vpp",
        "overlap_dp_grad_reduce",
        "overlap_param_gather",
        "overlap_tp_comm",
        *OFFLOAD_FIELDS,
        *RUNTIME_FIELDS,
    }
)
STAGE_ENGINES: tuple[str, ...] = get_args(StagePlanSpec.model_fields["engine"].annotation)


def stage_engine(pipeline_engine: str) -> str:
    """The per-stage plan's pipeline runtime (StagePlanSpec.engine) of a stack whose framework profile states
    ``pipeline_engine`` (efficiency.runtime.pipeline_engine): the profile's own where the per-stage estimator
    has its rules (step.engines.ENGINES: megatron, deepspeed); megatron for torch and none, whose EngineRules
    fields at 0 read the stack's own exchanges, batch syncs and tied-gradient bytes, as a uniform plan of that
    stack reads them."""
    return pipeline_engine if pipeline_engine in STAGE_ENGINES else "megatron"


def even_layer_split(layers: int, stages: int) -> tuple[int, ...]:
    """``layers`` over ``stages`` as evenly as possible, the first (layers mod stages) stages one layer more."""
    base, extra = divmod(layers, stages)
    return tuple(base + (1 if i < extra else 0) for i in range(stages))


def stage_layer_split(plan: PlanSpec, model: ModelSpec) -> tuple[int, ...]:
    """Transformer layers per stage: the plan's own split (PlanSpec.split, specs/split.py) for the models the
    uniform path costs, so the per-stage plan is the same plan; ``even_layer_split`` of the encoder and decoder
    layers for an encoder-decoder, which has no uniform split (``uniform_stage_plan``)."""
    if costed_by_stages(model):
        return even_layer_split(model.total_layers, plan.pp)
    return tuple(
        g.layers for g in plan.split(model.layers, model.mtp_layers) for _ in range(g.count)
    )


def unsupported_field_violations(plan: PlanSpec) -> list[Violation]:
    """Every PlanSpec field outside CARRIED_FIELDS that is not at its default (the schedule is carried: a
    per-stage plan's schedule field is a uniform plan's, specs.choices.Schedule)."""
    out = []
    for name, info in PlanSpec.model_fields.items():
        value = getattr(plan, name)
        if name not in CARRIED_FIELDS and value != info.default:
            out.append(
                Violation(
                    f"plan.{name}",
                    value,
                    f"a plan restated stage by stage (uniform_stage_plan, for the per-stage estimator "
                    f"step.per_stage) carries no {name}: its per-stage plan (specs.stage_plan) has no such "
                    f"field; allowed: {info.default!r}",
                )
            )
    return out


def uniform_plan_violations(plan: PlanSpec, model: ModelSpec) -> list[Violation]:
    """The uniform plan's own rules a per-stage plan relies on (specs.plan: degrees, tp, pp, the MoE knobs,
    batch, sequence parallelism; the per-stage plan's cp rule, specs.rules.stage_cp_rule), then the knobs it
    cannot carry."""
    out = unsupported_field_violations(plan)
    if rule := interleave_model_rule(model, plan.vpp):
        out.append(Violation("plan.vpp", plan.vpp, rule))
    if broken := degree_rule(plan.gpus, plan.dims):
        out.append(broken)
    out += [Violation("plan.tp", plan.tp, rule) for rule in tp_rules(model, plan.tp)]
    if rule := stage_cp_rule(model, plan.cp, plan.cp):  # an encoder-decoder's stages: cp 1
        out.append(Violation("plan.cp", plan.cp, rule))
    if rule := pp_rule(model, plan.pp):
        out.append(Violation("plan.pp", plan.pp, rule))
    # ep, etp and the MoE knobs (a dense model: ep 1), on the degrees as specs.plan.plan_violations reads them
    out += moe_plan_violations(model, plan.dims if plan.dp else replace(plan.dims, dp=1), plan)
    if plan.dp and (rule := batch_rule(plan.global_batch, plan.dp, plan.micro_batch)):
        out.append(Violation("plan.global_batch", plan.global_batch, rule))
    if plan.sequence_parallel and (
        rule := sequence_parallel_rule(plan.seq_length, plan.cp, plan.tp)
    ):
        out.append(Violation("plan.seq_length", plan.seq_length, rule))
    return out


def uniform_stage_plan(
    plan: PlanSpec, model: ModelSpec, pool: str, pipeline_engine: str = "megatron"
) -> StagePlanSpec:
    """The per-stage plan of a uniform plan on pool ``pool``: pp stages of tp·cp·dp GPUs each, the model's
    transformer layers (encoder, then decoder) split by stage_layer_split, the run-wide knobs (the
    interleaved schedule's vpp among them) carried over, the pipeline runtime the stack's profile states
    (``pipeline_engine``: efficiency.runtime.pipeline_engine, as plan.engine by stage_engine), whose rules
    the per-stage plan then keeps (specs.rules_stack, StagePlanSpec's check).
    Megatron-LM (before Megatron-Core) instead gives each T5 stage encoder or decoder layers only, split at
    --pipeline-model-parallel-split-rank (pretrain_t5.py, "Pipeline parallelism for T5"), with a second
    embedding on the split rank (megatron/training.py get_model: pre_process = rank == 0 or rank ==
    split_rank), which a per-stage plan of contiguous blocks cannot state; for an even pp and equal encoder
    and decoder depths the even split matches split rank pp/2 up to that embedding.
    InputError (one line naming field, value and what is allowed) for a plan it cannot carry."""
    violations = uniform_plan_violations(plan, model)
    engine, schedule = stage_engine(pipeline_engine), plan.pipeline_schedule
    if rule := engine_schedule_rule(
        engine, schedule, plan.vpp, plan.pp
    ):  # the per-stage plan's check
        violations.append(Violation("plan.schedule", schedule, rule))
    if violations:
        raise InputError.from_violations(violations)
    stages = [
        {
            "pool": pool,
            "gpus": plan.tp * plan.cp * plan.dp,
            "tp": plan.tp,
            "cp": plan.cp,
            "ep": plan.ep,
            "etp": plan.etp,
            "dp": plan.dp,
            "layers": layers,
            # selective recompute by module is per-op recompute of those modules (step.per_stage._recompute_mode)
            "recompute": "none" if plan.recompute_modules else plan.recompute,
            "recompute_ops": list(plan.recompute_modules or ()),
        }
        for layers in stage_layer_split(plan, model)
    ]
    return stage_plan_from_dict(
        {
            "global_batch": plan.global_batch,
            "seq_length": plan.seq_length,
            "micro_batch": plan.micro_batch,
            "dtype": plan.dtype,
            "schedule": plan.pipeline_schedule,
            "vpp": plan.vpp,
            "attention": plan.attention,
            "sequence_parallel": plan.sequence_parallel,
            "zero": plan.zero,
            "overlap_dp_grad_reduce": plan.overlap_dp_grad_reduce,
            "overlap_param_gather": plan.overlap_param_gather,
            "overlap_tp_comm": plan.overlap_tp_comm,
            **runtime_fields_of(plan),
            **{name: getattr(plan, name) for name in OFFLOAD_FIELDS},
            **{name: getattr(plan, name) for name in EXPERT_KNOBS},
            "engine": engine,
            "stages": stages,
        }
    )
