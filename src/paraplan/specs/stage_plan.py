"""A non-uniform plan: a list of pipeline stages, each with its own GPUs, layers, tp, dp and recompute.

This is the plan AMP (Li et al. 2022, arXiv:2210.07297) and Aceso (Liu et al. 2024, EuroSys) search
over: stage i holds a contiguous range of the model's blocks (``step.blocks.model_blocks``: input
block, transformer layers, output block) on ``tp_i · cp · dp_i`` GPUs taken from the named pools of a
cluster (specs/cluster.py). Stages run in the listed order; activations flow from stage i to i+1.

Context parallelism: a stage may state ``cp`` (default 1; dp then defaults to gpus / (tp·cp)), checked by
a uniform plan's cp rules (specs.rules.stage_rules: cp_rule, ulysses_rule under the plan's cp_algorithm)
and priced as a uniform plan prices it (step.per_stage). Every stage runs the same cp
(specs.rules.stage_cp_rule: Megatron-Core and torchtitan run one context-parallel group size per model,
and no engine reshards a sequence between stages); the per-stage searches search the cp degrees of
``--cp`` (search.staged.axes, default 1).

Expert parallelism: a stage of a mixture-of-experts model may state ``ep`` and ``etp`` (default 1; the expert
grid etp·ep·edp carved out of its tp·cp·dp ranks), the plan the run's MoE knobs (EXPERT_KNOBS, a uniform
plan's), checked by a uniform plan's MoE rules (specs.rules_moe.stage_expert_violations), every stage the same
ep and etp (stage_expert_rule: Megatron-Core's one expert grid per model), one pool per MoE stage
(stage_pools_rule), and priced as a uniform plan prices them (step.per_stage); the per-stage searches search
them (search.staged.experts).

Micro-batching: the global batch is cut into ``microbatches`` micro-batches that flow through the
pipeline; stage i splits each over its dp_i replicas, so one GPU of stage i works on
global_batch / (microbatches · dp_i) samples per micro-batch (Aceso's per-stage data parallelism).
``micro_batch`` may be given instead of ``microbatches`` when every stage has the same dp (AMP's
and Megatron-LM's convention: samples per micro-batch per replica).

Recompute per stage (``none | selective | full``) or per op (``recompute_ops``: names of the ops of
the stage's layers that are re-run in backward, as listed by ``paraplan estimate --ops``).

File form (YAML or JSON; ``paraplan estimate --plan FILE`` recognises it by its ``stages`` key)::

    global_batch: 32
    seq_length: 1024
    microbatches: 8
    dtype: fp16
    stages:
      - {pool: v100, gpus: 4, layers: 5, tp: 1}
      - {devices: [{pool: v100, gpus: 2}, {pool: t4, gpus: 2}], layers: 7, tp: 2, recompute: full}

(a long-context plan gives every stage the same ``cp``: ``{pool: h100, gpus: 8, layers: 16, tp: 2, cp: 2}``)
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationError, model_validator

from paraplan.specs.choices import Recompute, Schedule
from paraplan.specs.cluster import ClusterSpec, PoolName
from paraplan.specs.errors import InputError, Violation, input_error_from_pydantic
from paraplan.specs.model import ModelSpec
from paraplan.specs.moe_plan import Balance, Dispatcher, MoEPlanFields
from paraplan.specs.parallel import ParallelDims
from paraplan.specs.plan import PlanSpec, RuntimeFields
from paraplan.specs.rules import (
    batch_rule,
    deepspeed_cp_rule,
    interleave_model_rule,
    stage_cp_rule,
    stage_rules,
    stage_spec_rule,
)
from paraplan.specs.rules_moe import stage_expert_rule, stage_expert_violations, stage_pools_rule
from paraplan.specs.rules_offload import offload_layers_rule, pool_offload_violations
from paraplan.specs.rules_precision import accelerators_rules
from paraplan.specs.rules_schedule import schedule_vpp_rule
from paraplan.specs.rules_stack import engine_dp_overlap_rule, engine_zero_rule
from paraplan.specs.stage_schedule import stage_schedule_violations
from paraplan.specs.stage_stack import (
    STACK_ENGINES,
    stage_dp_overlap,
    stage_engine_stack_violations,
    stage_stack_violations,
)
from paraplan.specs.strict import InputModel


class DeviceSlice(InputModel):
    """``gpus`` GPUs of pool ``pool``; taken in order, after those the earlier stages took from it."""

    pool: PoolName
    gpus: int = Field(gt=0)


class StageSpec(InputModel):
    """One pipeline stage. Give ``layers`` (transformer layers; the input block goes to the first stage
    and the output block to the last) or ``blocks`` ([start, stop) into the model's block list)."""

    devices: tuple[DeviceSlice, ...] = Field(min_length=1)
    layers: int | None = Field(None, ge=0)
    blocks: tuple[int, int] | None = None
    tp: int = Field(1, gt=0)
    cp: int = Field(1, gt=0, description="context-parallel degree (the same on every stage)")
    ep: int = Field(
        1,
        gt=0,
        description="expert-parallel degree, carved out of tp·cp·dp (the same on every stage)",
    )
    etp: int = Field(1, gt=0, description="expert tensor-parallel degree (the same on every stage)")
    dp: int = Field(0, ge=0, description="0 = infer from the stage's GPUs / (tp·cp)")
    recompute: Recompute = "none"  # a stage states the plan granularities (specs.recompute)
    recompute_ops: tuple[str, ...] = Field(
        (), description="op names re-run in backward (per-op recompute)"
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data):
        """``pool`` + ``gpus`` is one device slice; dp defaults to gpus / (tp·cp)."""
        if isinstance(data, dict):
            data = dict(data)
            if "pool" in data or "gpus" in data:
                if "devices" in data:
                    raise ValueError("give either devices or pool + gpus, not both")
                data["devices"] = [{"pool": data.pop("pool", None), "gpus": data.pop("gpus", None)}]
        return data

    @model_validator(mode="after")
    def _check(self) -> "StageSpec":
        if rule := stage_spec_rule(self):
            raise ValueError(rule)
        return self

    @property
    def gpus(self) -> int:
        return sum(d.gpus for d in self.devices)

    @property
    def data_parallel(self) -> int:
        return self.dp or self.gpus // (self.tp * self.cp)

    @property
    def dims(self) -> ParallelDims:
        """The stage's degrees: tp × cp × dp of its GPUs, its expert grid ep·etp carved out of them."""
        return ParallelDims(tp=self.tp, cp=self.cp, dp=self.data_parallel, ep=self.ep, etp=self.etp)


# a mixture-of-experts model's run-wide knobs a per-stage plan states (StagePlanSpec), a uniform plan's
EXPERT_KNOBS = (
    "moe_dispatcher",
    "capacity_factor",
    "moe_balance",
    "expert_load_cv",
    "moe_a2a_overlap",
)


class StagePlanSpec(RuntimeFields):
    """A whole non-uniform plan (module docstring). The run-wide implementation knobs (grad_dtype, fp8 weight
    copies, ZeRO-3 units and prefetch, cp_algorithm: specs.plan.RuntimeFields) and the overlap switches are a
    uniform plan's, with its defaults (a framework profile sets them: cost.frameworks.PLAN_DEFAULTS)."""

    global_batch: int = Field(gt=0)
    seq_length: int = Field(gt=0)
    microbatches: int | None = Field(
        None, gt=0, description="micro-batches per step (gradient accumulation)"
    )
    micro_batch: int | None = Field(
        None, gt=0, description="samples per micro-batch per replica (equal dp only)"
    )
    dtype: Literal["fp32", "tf32", "fp16", "bf16", "fp8", "nvfp4", "mxfp4"] = "bf16"
    schedule: Schedule = "1f1b"  # a uniform plan's (specs.rules_schedule.SCHEDULE_RULES)
    vpp: int = Field(
        1,
        gt=0,
        description="model chunks per stage (schedule interleaved): each stage's layers in vpp chunks, "
        "as Megatron-LM's interleaved schedule runs them (specs.split.chunk_layer_counts)",
    )
    attention: Literal["flash", "unfused"] = "flash"
    sequence_parallel: bool = False
    zero: int = Field(0, ge=0, le=3)
    overlap_dp_grad_reduce: bool | None = Field(
        None,
        description="DP gradient reduction overlaps backward (as specs.plan.PlanSpec); None: the value the "
        "stacks run, decided with the pools (settled_stage_plan, specs.stage_stack.stage_dp_overlap): "
        "false on DeepSpeed's PipelineEngine with pp > 1 and where a pool's stack reduces after the "
        "backward on DeepSpeedEngine (specs.rules_stack.dp_reduce_fallback), true otherwise",
    )
    overlap_param_gather: bool = Field(
        True, description="ZeRO parameter all-gather overlaps forward (as specs.plan.PlanSpec)"
    )
    overlap_tp_comm: bool = Field(
        False, description="TP collectives overlap GEMMs, within one NVLink domain (as PlanSpec)"
    )
    engine: Literal["megatron", "deepspeed"] = Field(
        "megatron",
        description="pipeline runtime: Megatron-LM's or DeepSpeed's PipelineEngine "
        "(step.engines.ENGINES)",
    )
    engine_stack: Literal["amp2022"] | None = Field(
        None,
        description="the training stack the plan ran on its engine, whose rules and calibrated "
        "constants replace the engine's (step.engines.ENGINE_STACKS): amp2022, Megatron-LM "
        "v1.1.5 in fp16 on DeepSpeed's PipelineEngine as AMP's trials ran it; None: the engine's "
        "own rules and the pools' stacks",
    )
    # a mixture-of-experts model's run-wide knobs: a uniform plan's (specs.moe_plan.MoEPlanFields), the stages
    # stating ep and etp
    moe_dispatcher: Dispatcher = MoEPlanFields.model_fields["moe_dispatcher"]
    capacity_factor: float | None = MoEPlanFields.model_fields["capacity_factor"]
    moe_balance: Balance = MoEPlanFields.model_fields["moe_balance"]
    expert_load_cv: float | None = MoEPlanFields.model_fields["expert_load_cv"]
    moe_a2a_overlap: bool = MoEPlanFields.model_fields["moe_a2a_overlap"]
    offload_weights: bool = PlanSpec.model_fields["offload_weights"]
    offload_activations: bool = PlanSpec.model_fields["offload_activations"]
    offload_activation_layers: int | None = PlanSpec.model_fields["offload_activation_layers"]
    offload_optimizer: bool = PlanSpec.model_fields["offload_optimizer"]
    stages: tuple[StageSpec, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> "StagePlanSpec":
        if (self.microbatches is None) == (self.micro_batch is None):
            raise ValueError("give exactly one of microbatches or micro_batch")
        if self.micro_batch is not None:
            dps = {s.data_parallel for s in self.stages}
            if len(dps) > 1:
                raise ValueError(
                    f"micro_batch needs one dp for every stage (got {sorted(dps)}); give microbatches"
                )
            if rule := batch_rule(self.global_batch, dps.pop(), self.micro_batch):
                raise ValueError(f"global_batch={self.global_batch} {rule}")
        if rule := schedule_vpp_rule(self.schedule, self.vpp):
            raise ValueError(rule)
        if rule := offload_layers_rule(self.offload_activation_layers, self.offload_activations):
            raise ValueError(rule)
        if rule := engine_zero_rule(self.engine, self.zero, len(self.stages)):
            raise ValueError(rule)
        overlap = self.overlap_dp_grad_reduce  # the pools' fallback: stage_plan_violations
        if rule := engine_dp_overlap_rule(self.engine, bool(overlap), len(self.stages)):
            raise ValueError(f"overlap_dp_grad_reduce={overlap}: {rule}")
        if self.engine_stack is not None and STACK_ENGINES[self.engine_stack] != self.engine:
            ran_on = STACK_ENGINES[self.engine_stack]
            raise ValueError(
                f"engine_stack={self.engine_stack} ran on engine {ran_on}, not {self.engine}"
            )
        kinds = {s.layers is None for s in self.stages}
        if len(kinds) > 1:
            raise ValueError("every stage gives layers, or every stage gives blocks; not a mix")
        return self

    @property
    def pp(self) -> int:
        return len(self.stages)

    @property
    def gpus(self) -> int:
        return sum(s.gpus for s in self.stages)

    @property
    def n_microbatches(self) -> int:
        if self.microbatches is not None:
            return self.microbatches
        return self.global_batch // (self.micro_batch * self.stages[0].data_parallel)

    def stage_micro_batch(self, i: int) -> int:
        """Samples one GPU of stage i handles per micro-batch: global_batch / (microbatches · dp_i)."""
        return self.global_batch // (self.n_microbatches * self.stages[i].data_parallel)


def stage_block_ranges(plan: StagePlanSpec, n_blocks: int) -> list[tuple[int, int]]:
    """[start, stop) of each stage in the model's block list (input block = 0, output = n_blocks − 1)."""
    if plan.stages[0].blocks is not None:
        return [tuple(s.blocks) for s in plan.stages]  # type: ignore[misc]
    out, start = [], 0
    for i, s in enumerate(plan.stages):
        stop = start + s.layers + (1 if i == 0 else 0) + (1 if i == plan.pp - 1 else 0)
        out.append((start, stop))
        start = stop
    return out


def stage_devices(plan: StagePlanSpec, cluster: ClusterSpec) -> list[list[tuple[str, int, int]]]:
    """Per stage, its (pool, first GPU index inside the pool, count) slices: each pool hands out its
    GPUs in order, stage by stage (so stage 0 sits on the pool's first nodes)."""
    used: dict[str, int] = {}
    out = []
    for s in plan.stages:
        slices = []
        for d in s.devices:
            first = used.get(d.pool, 0)
            slices.append((d.pool, first, d.gpus))
            used[d.pool] = first + d.gpus
        out.append(slices)
    return out


def stage_plan_violations(
    plan: StagePlanSpec, model: ModelSpec, cluster: ClusterSpec
) -> list[Violation]:
    """Every rule the plan breaks for this model and cluster, each naming field, value and rule: the
    stages' cp and expert grid (``_grid_violations``), the stages cover the model's blocks in order, each
    stage keeps specs.rules.stage_rules, names pools of the cluster and takes no more GPUs than they
    have, and a stage holding no transformer layer recomputes no op."""
    out = _grid_violations(plan, model)
    out += _coverage_violations(plan, model)
    out += stage_schedule_violations(plan)
    if rule := interleave_model_rule(model, plan.vpp):
        out.append(Violation("plan.vpp", plan.vpp, rule))
    pools = {p.name: p for p in cluster.pools}
    taken: dict[str, int] = {}
    for i, s in enumerate(plan.stages):
        for j, d in enumerate(s.devices):
            if d.pool not in pools:
                field, allowed = f"plan.stages.{i}.devices.{j}.pool", ", ".join(pools)
                out.append(Violation(field, d.pool, f"allowed: {allowed}"))
            taken[d.pool] = taken.get(d.pool, 0) + d.gpus
        slices = tuple(d.gpus if d.pool in pools else s.tp for d in s.devices)  # unknown: named
        out += [
            Violation(*rule)
            for rule in stage_rules(
                model,
                i,
                s.dims,
                slices,
                plan.global_batch,
                plan.n_microbatches,
                plan.seq_length,
                plan.sequence_parallel,
                plan.cp_algorithm,
            )
        ]
        empty = s.layers == 0 or (s.blocks is not None and s.blocks[0] == s.blocks[1])
        if s.recompute_ops and empty:
            ops, rule = list(s.recompute_ops), "the stage holds no transformer layer"
            out.append(Violation(f"plan.stages.{i}.recompute_ops", ops, rule))
    used = [pools[name] for name in taken if name in pools]
    out += stage_accelerator_violations(plan, used)
    out += stage_stack_violations(plan, used)
    if rule := stage_dp_overlap(plan, used)[1]:
        out.append(Violation("plan.overlap_dp_grad_reduce", plan.overlap_dp_grad_reduce, rule))
    out += stage_engine_stack_violations(plan)
    for name, count in taken.items():
        if name in pools and count > pools[name].gpu_count:
            rule = f"GPUs taken exceed the pool's {pools[name].gpu_count}"
            out.append(Violation(f"plan.stages (pool {name})", count, rule))
    return out


def _grid_violations(plan: StagePlanSpec, model: ModelSpec) -> list[Violation]:
    """Each stage's cp (specs.rules.stage_cp_rule: the first stage's; deepspeed_cp_rule on DeepSpeed's engine)
    and expert grid (specs.rules_moe: stage_expert_rule, the first stage's ep and etp, then a uniform plan's
    MoE rules on the stage, stage_expert_violations; stage_pools_rule, one pool per MoE stage)."""
    out, first = [], plan.stages[0]
    for i, s in enumerate(plan.stages):
        if rule := stage_cp_rule(model, s.cp, first.cp):
            out.append(Violation(f"plan.stages.{i}.cp", s.cp, rule))
        elif plan.engine == "deepspeed" and (rule := deepspeed_cp_rule(s.cp, plan.cp_algorithm)):
            out.append(Violation(f"plan.stages.{i}.cp", s.cp, rule))
        if rule := stage_expert_rule(s.ep, s.etp, (first.ep, first.etp)):
            out.append(Violation(f"plan.stages.{i}.ep", s.ep, rule))
        else:
            out += stage_expert_violations(model, i, s.dims, plan)
        pools = len({d.pool for d in s.devices})
        if rule := stage_pools_rule(model, pools):
            out.append(Violation(f"plan.stages.{i}.devices", pools, rule))
    return out


def stage_accelerator_violations(plan: StagePlanSpec, pools) -> list[Violation]:
    """The plan's dtype and attention kernel on each accelerator its stages use (specs.rules_precision.
    accelerators_rules, a uniform plan's check) and its offloads on each pool's system (pool_offload_violations)."""
    accelerators = [pool.system.accelerator for pool in pools]
    out = [Violation(*r) for r in accelerators_rules(accelerators, plan.dtype, plan.attention)]
    return out + pool_offload_violations(plan, [pool.system for pool in pools])


def _coverage_violations(plan: StagePlanSpec, model: ModelSpec) -> list[Violation]:
    """The stages' layers sum to the model's, or their block ranges cover its blocks in order."""
    n_blocks = model.total_layers + 2
    if plan.stages[0].layers is not None:
        total = sum(s.layers for s in plan.stages)  # type: ignore[misc]
        if total != model.total_layers:
            rule = f"layers over all stages must sum to the model's {model.total_layers}"
            return [Violation("plan.stages.layers", total, rule)]
        return []
    ranges = stage_block_ranges(plan, n_blocks)
    expect = 0
    for i, (a, b) in enumerate(ranges):
        if a != expect:
            rule = f"must start at {expect} (stages cover the blocks in order)"
            return [Violation(f"plan.stages.{i}.blocks", [a, b], rule)]
        expect = b
    if expect != n_blocks:
        rule = f"must end at {n_blocks} (the model has {n_blocks} blocks)"
        return [Violation(f"plan.stages.{plan.pp - 1}.blocks", list(ranges[-1]), rule)]
    return []


def settled_stage_plan(plan: StagePlanSpec, cluster: ClusterSpec) -> StagePlanSpec:
    """The plan with the run-wide value it leaves to its pools' stacks decided on ``cluster``:
    overlap_dp_grad_reduce left unset takes the value the stacks of the pools its stages use run
    (specs.stage_stack.stage_dp_overlap); a stated plan is returned as it is."""
    if plan.overlap_dp_grad_reduce is not None:
        return plan
    names = {d.pool for s in plan.stages for d in s.devices}
    overlap, _ = stage_dp_overlap(plan, [p for p in cluster.pools if p.name in names])
    return plan.model_copy(update={"overlap_dp_grad_reduce": overlap})


def check_stage_plan(plan: StagePlanSpec, model: ModelSpec, cluster: ClusterSpec) -> None:
    """Raise InputError naming the first broken rule."""
    violations = stage_plan_violations(plan, model, cluster)
    if violations:
        raise InputError.from_violations(violations)


# ---- files ---------------------------------------------------------------------------------------
def is_stage_plan(data: object) -> bool:
    """True for a mapping shaped like a non-uniform plan (it has a ``stages`` list)."""
    return isinstance(data, dict) and isinstance(data.get("stages"), list)


def stage_plan_from_dict(data: object, field: str = "plan") -> StagePlanSpec:
    if not isinstance(data, dict):
        raise InputError(f"{field}: {data!r} is not allowed; give a mapping with a 'stages' list")
    try:
        return StagePlanSpec.model_validate(data)
    except ValidationError as exc:
        raise input_error_from_pydantic(exc, field, StagePlanSpec) from None


def stage_plan_to_dict(plan: StagePlanSpec) -> dict:
    """The plan as plain data (defaults left out; ``pool`` + ``gpus`` shorthand for one-slice stages)."""
    data = plan.model_dump(mode="json", exclude_defaults=True)
    data["stages"] = []
    for s in plan.stages:
        entry = s.model_dump(mode="json", exclude_defaults=True, exclude={"devices"})
        if len(s.devices) == 1:
            entry = {"pool": s.devices[0].pool, "gpus": s.devices[0].gpus, **entry}
        else:
            entry = {"devices": [d.model_dump() for d in s.devices], **entry}
        data["stages"].append(entry)
    return data
