"""One training step of one plan: the reference the search is tested against.

Read top-down: ``estimate`` → ``step_inputs`` (step.build.row_facts → step.build.row_blocks →
step.build.build_step_inputs on the plan's split) → ``step.compose.compose_step`` (pipeline,
data-parallel tail, offload) and ``stage_memory_terms`` (memory of every pipeline stage). The
search builds the same ``StepInputs`` with numpy arrays through the same functions.
"""

from __future__ import annotations

from dataclasses import fields
from functools import lru_cache
from operator import attrgetter

from paraplan.cost.comm import collective_time_s
from paraplan.cost.compute import op_times_s
from paraplan.cost.flops import model_flops_per_step, recompute_flops_per_token
from paraplan.cost.moe import EXPERT_GROUPS, expert_group_span, moe_collective_time_s
from paraplan.cost.summa import grid_spans
from paraplan.graph.transformer import LayerShape
from paraplan.specs.errors import InputError, Violation
from paraplan.specs.model import ModelSpec
from paraplan.specs.parallel import ParallelDims
from paraplan.specs.plan import (
    RUNTIME_FIELDS,
    STATE_FIELDS,
    PlanSpec,
    RuntimeFields,
    plan_violations,
)
from paraplan.specs.recompute import modules_of
from paraplan.specs.rules import deepspeed_cp_rule, uniform_model_violations
from paraplan.specs.rules_offload import host_capacity_bytes, pool_offload_violations
from paraplan.specs.rules_precision import accelerator_rules
from paraplan.specs.rules_stack import (
    dp_reduce_fallback,
    engine_dp_overlap_rule,
    engine_schedule_rule,
    engine_zero_rule,
    stack_rules,
)
from paraplan.specs.system import SystemSpec
from paraplan.step.build import (
    BLOCK_KINDS,
    GridKnobs,
    build_step_inputs,
    model_block_kinds,
    row_blocks,
    row_facts,
    system_terms,
)
from paraplan.step.compose import StepInputs, compose_step
from paraplan.step.constants import stack_shape_fields
from paraplan.step.plan_spans import plan_spans
from paraplan.step.inputs import replaced
from paraplan.step.layer_shape import expert_shape_of, layer_shape_from
from paraplan.step.layout import StageMix, model_layer_counts
from paraplan.step.placement import (
    StageDims,
    placed_stage_inputs,
    plan_stages_tile,
    position_spans,
)
from paraplan.step.schedules import schedule_flags
from paraplan.step.result import CommCost, Estimate, OpCost, StageMemory, TimeBreakdown
from paraplan.step.stage_memory import (
    ddp_buckets,
    dualpipe_memory_terms,
    memory_at,
    stage_holdings,
)
from paraplan.step.stage_totals import early_stop_flops_per_token

_BREAKDOWN_FIELDS = tuple(f.name for f in fields(TimeBreakdown))
_MEMORY_FIELDS = tuple(f.name for f in fields(StageMemory))


def layer_shape(plan: PlanSpec, system: SystemSpec) -> LayerShape:
    """The plan's per-layer shape (step.layer_shape.layer_shape_from) with the system's module implementations
    (step.constants.stack_shape_fields)."""
    return layer_shape_from(
        plan.tp,
        plan.cp,
        plan.micro_batch,
        plan.seq_length,
        plan.sequence_parallel,
        plan.attention,
        plan.dtype,
        expert_shape_of(plan, plan.ep, plan.etp),
        recompute_modules(plan),
        plan.tp_layout,
        plan.tp_rows,
        plan.summa_panels,
        plan.cp_algorithm,
        stack_shape_fields(system),
    )


def recompute_share(plan: PlanSpec, inp: StepInputs) -> float:
    """Share of the decoder layers whose recomputation FLOPs count (all, unless recompute_num_layers)."""
    if plan.recompute_num_layers is None:
        return 1.0
    from paraplan.step.partial_recompute import recomputed_layer_share

    return recomputed_layer_share(inp)


def recompute_modules(plan: PlanSpec) -> tuple[str, ...]:
    """Modules selective recomputation re-runs (specs.recompute.modules_of)."""
    return modules_of(plan.recompute, plan.recompute_modules)


def _system_violations(plan: PlanSpec, system: SystemSpec) -> list[Violation]:
    """The plan's rules on this system: dtype, fp8 recipe and attention kernel
    (specs.rules_precision.accelerator_rules), the ZeRO stages its pipeline runtime takes at its depth
    and the schedules (specs.rules_stack.engine_zero_rule, engine_schedule_rule; efficiency.runtime.
    pipeline_engine: the framework profile's) and its DP overlap (engine_dp_overlap_rule), the model-parallel kinds the stack's loop runs
    (specs.rules_stack.stack_rules, efficiency.runtime.parallelism), ring CP on DeepSpeed
    (specs.rules.deepspeed_cp_rule), offloading over a declared host link into declared host memory (specs.rules_offload.pool_offload_violations)."""
    acc = system.accelerator
    runtime = acc.efficiency.runtime
    out = [Violation(*rule) for rule in accelerator_rules(acc, plan.dtype, plan.attention)]
    out += [Violation(*r) for r in stack_rules(runtime.parallelism, plan.gpus, plan)]
    deepspeed = runtime.pipeline_engine == "deepspeed"
    if deepspeed and (rule := deepspeed_cp_rule(plan.cp, plan.cp_algorithm)):
        out.append(Violation("plan.cp", plan.cp, rule))
    if rule := engine_zero_rule(runtime.pipeline_engine, plan.zero, plan.pp):
        out.append(Violation("plan.zero", plan.zero, rule))
    overlap = plan.overlap_dp_grad_reduce
    engine, facts = runtime.pipeline_engine, (plan.dtype, plan.grad_dtype, plan.offload_optimizer)
    fallback = dp_reduce_fallback(runtime, engine, plan.zero, *facts)
    if rule := engine_dp_overlap_rule(engine, overlap, plan.pp, fallback):
        out.append(Violation("plan.overlap_dp_grad_reduce", overlap, rule))
    schedule = plan.pipeline_schedule
    if rule := engine_schedule_rule(runtime.pipeline_engine, schedule, plan.vpp, plan.pp):
        out.append(Violation("plan.schedule", schedule, rule))
    return out + pool_offload_violations(plan, [system])


def check_plan(model: ModelSpec, system: SystemSpec, plan: PlanSpec) -> None:
    """Raise InputError naming the first broken rule (field, value, what is allowed)."""
    violations = _kept(_violations, model, system, plan)
    if violations:
        raise InputError.from_violations(list(violations))


@lru_cache(maxsize=1024)
def _violations(model: ModelSpec, system: SystemSpec, plan: PlanSpec) -> tuple[Violation, ...]:
    """Every rule the plan breaks on this model and system: a pure function of the frozen specs, so
    kept for the next estimate of the same plan."""
    return tuple(
        uniform_model_violations(model)
        + plan_violations(plan, model)
        + _system_violations(plan, system)
    )


def grid_knobs(plan: PlanSpec) -> GridKnobs:
    """The plan's schedule, ZeRO, overlap and offload knobs (stages.GridKnobs)."""
    return GridKnobs(
        vpp=plan.vpp,
        **schedule_flags(plan.pipeline_schedule),
        **{name: getattr(plan, name) for name in STATE_FIELDS},
        offload_activation_layers=plan.offload_activation_layers or 0,
    )


def _plan_row(
    model: ModelSpec,
    system: SystemSpec,
    plan: PlanSpec,
    recompute: str,
    stage: tuple | None = None,
):
    """(row_facts, row_blocks) of the plan's shape, spans and micro-batches under ``recompute``; with
    ``stage``, on those (tp span, cp span) (a stage's own: step.placement.position_spans)."""
    return _row(
        model,
        system,
        layer_shape(plan, system),
        plan.dims,
        plan.pp,
        plan.microbatches,
        recompute,
        plan.overlap_tp_comm,
        stage,
    )


@lru_cache(maxsize=1024)
def _row(
    model: ModelSpec,
    system: SystemSpec,
    shape: LayerShape,
    dims: ParallelDims,
    pp: int,
    microbatches: int,
    recompute: str,
    overlap_tp_comm: bool,
    stage: tuple | None = None,
):
    """The facts and per-block costs of a row (per-layer configuration): pure functions of the specs'
    values, so kept for the next plan of the same row (plain floats and tuples: nothing downstream
    changes them). With ``stage``, on those (tp span, cp span) (a stage's own:
    step.placement.position_spans)."""
    spans = plan_spans(dims, system)
    if stage is not None:
        spans["tp"], spans["cp"] = stage
    facts = row_facts(model, system, shape, spans, pp, microbatches, recompute, overlap_tp_comm)
    return facts, row_blocks(facts)


def step_inputs(
    model: ModelSpec,
    system: SystemSpec,
    plan: PlanSpec,
    split: tuple | None = None,
    tiles: bool | None = None,
) -> StepInputs:
    """StepInputs of one plan (all floats), one Stage entry per split group (specs/split.py; ``split``:
    the plan's, ``tiles``: step.placement.plan_stages_tile of its degrees, when the caller has them)."""
    facts, blocks = _plan_row(model, system, plan, plan.recompute)
    split = plan.split(model.layers, model.mtp_layers) if split is None else split
    knobs = grid_knobs(plan)
    constants = _system_terms(system, plan.dtype, _runtime_values(plan))
    inp = build_step_inputs(facts, blocks, knobs, split, constants)
    if tiles is None:
        tiles = plan_stages_tile(plan.dims, system.node.gpus_per_domain)
    placed = not tiles
    if placed:  # stage by stage (step.placement), each on its own tp and cp spans
        grouped = inp.stages

        def entries_at(position: int):
            own = position_spans(plan.dims, system, position)
            if own is None:
                return grouped
            f, b = _plan_row(model, system, plan, plan.recompute, own)
            return build_step_inputs(f, b, knobs, split, constants).stages

        dims = StageDims(plan.tp, plan.cp, plan.dp, plan.pp)
        inp = placed_stage_inputs(inp, split, facts.pipeline, system, dims, True, entries_at)
    if (
        plan.recompute_num_layers is not None
    ):  # only some layers recomputed (schedule.partial_recompute)
        from paraplan.step.partial_recompute import split_recompute_layers

        def kept_at(position: int):
            own = position_spans(plan.dims, system, position) if placed else None
            return _plan_row(model, system, plan, "none", own)[1]["decoder"]

        inp = split_recompute_layers(inp, kept_at, plan.recompute_num_layers, plan.vpp)
    return inp


_runtime_values = attrgetter(*RUNTIME_FIELDS)  # a plan -> its run-wide knobs' values, in order


@lru_cache(maxsize=64)
def _system_terms(system: SystemSpec, dtype: str, runtime: tuple) -> dict:
    """step.constants.system_terms of the system, the datatype and the run-wide knobs' values
    (RUNTIME_FIELDS order: all system_terms reads of a plan), kept per system like the row's costs (a dict
    nothing downstream changes: build_step_inputs spreads it into StepInputs)."""
    return system_terms(system, dtype, RuntimeFields(**dict(zip(RUNTIME_FIELDS, runtime))))


@lru_cache(maxsize=256)
def _plan_inputs(model: ModelSpec, system: SystemSpec, plan: PlanSpec) -> tuple:
    """(the plan's split, its StepInputs, the same with its present entries only, each stage entry with
    the pipeline positions it stands for): the per-stage block costs ``compose_step`` and the memory
    terms read and their layout, a pure function of the frozen specs (nothing downstream changes them:
    frozen records, plain floats), so kept for the next estimate of the same plan; the composition and
    the memory run on every call. The present entries (count > 0) are what the composition reads of one
    plan: an absent entry never attains a maximum (``_argmax``, ``_at_max``, the bubble's largest over
    the present stages) and adds count 0 × its work, +0.0, to every sum, so leaving it out gives the
    same floats without pricing its work and tail. The positions: the split's groups in order (a
    group's second entry, when its stages' links differ, holds the same blocks:
    step.layout.build_step_inputs), or one entry per position (step.placement); an entry that stands
    for no position (count 0) is left out."""
    split = plan.split(model.layers, model.mtp_layers)
    tiles = plan_stages_tile(plan.dims, system.node.gpus_per_domain)
    inp = step_inputs(model, system, plan, split, tiles)
    present = tuple(entry for entry in inp.stages if entry.count > 0)
    composed = inp if len(present) == len(inp.stages) else replaced(inp, stages=present)
    if tiles:
        placed = [
            (entry, tuple(range(int(group.index), int(group.index) + int(group.count))))
            for group, entry in zip(split, inp.stages)
        ]
    else:
        placed = [(entry, (int(entry.index),)) for entry in inp.stages]
    placed = tuple((entry, positions) for entry, positions in placed if positions)
    return split, inp, composed, placed


def _kept(function, model: ModelSpec, system: SystemSpec, plan: PlanSpec):
    """``function``'s value kept on the frozen specs, or computed afresh for a plan that holds an
    unhashable value (pydantic's ``model_copy(update=...)`` validates nothing: a list where the schema
    has a tuple), which no cache can key on."""
    try:
        hash(plan)
    except TypeError:
        return function.__wrapped__(model, system, plan)
    return function(model, system, plan)


@lru_cache(maxsize=256)
def _flops(
    model: ModelSpec, seq_length: int, global_batch: int, recompute: str, modules: tuple[str, ...]
) -> tuple[float, float]:
    """(cost.flops.model_flops_per_step, cost.flops.recompute_flops_per_token) of the model and shape:
    pure functions of the specs' values, kept like the row's costs."""
    return (
        model_flops_per_step(model, seq_length, global_batch),
        recompute_flops_per_token(model, seq_length, recompute, modules),
    )


def plan_early_stop_flops(model: ModelSpec, system: SystemSpec, plan: PlanSpec) -> float:
    """FLOPs per token a full recomputation of the plan's layers does not re-run under the early stop
    (step.stage_totals.early_stop_flops_per_token of every layer kind a uniform plan holds,
    step.layout.model_layer_counts, on the plan's layer shape); 0 unless the plan recomputes fully."""
    if plan.recompute != "full":
        return 0.0
    layers = tuple((kind, model, n) for kind, n in model_layer_counts(model))
    return early_stop_flops_per_token(model, system, layer_shape(plan, system), layers)


# what an estimate keeps between calls, each keyed on frozen specs (benchmarks/estimate_speed.py clears
# them for its cold column)
ESTIMATE_CACHES = (
    _row,
    _violations,
    _plan_inputs,
    _system_terms,
    _flops,
    early_stop_flops_per_token,
)


def _stage_memories(inp: StepInputs, plan: PlanSpec, system: SystemSpec, placed: tuple) -> list:
    """StageMemory of every pipeline position (``placed``: each entry with its positions), in position
    order: ``memory_at`` of the entry's holdings (the same at every position of the entry), or under
    DualPipe ``dualpipe_memory_terms`` of every entry's own holdings. The DDP buckets are read once (the
    same at every position)."""
    acc = system.accelerator
    capacity, host_capacity = acc.hbm_capacity, host_capacity_bytes(acc.host_memory)
    paired = (
        [stage_holdings(inp, e, 1.0) for e in inp.stages]
        if plan.pipeline_schedule == "dualpipe"
        else None
    )
    buckets, names = ddp_buckets(inp), None
    stages = []
    for entry, positions in placed:
        holdings = stage_holdings(inp, entry) if paired is None else None
        for index in positions:
            if paired is None:
                terms = memory_at(inp, holdings, index, buckets=buckets)
            else:
                terms = dualpipe_memory_terms(inp, paired, index)[0]
            if names is None:  # the same keys at every position
                names = [name for name in _MEMORY_FIELDS if name in terms]
            stages.append(
                StageMemory(
                    stage=index,
                    capacity_bytes=capacity,
                    host_capacity_bytes=host_capacity,
                    **{name: float(terms[name]) for name in names},
                )
            )
    stages.sort(key=lambda s: s.stage)
    return stages


def estimate(
    model: ModelSpec, system: SystemSpec, plan: PlanSpec, with_ops: bool = False
) -> Estimate:
    """Predict step time, its breakdown, memory per stage, FLOPs and utilisation for one plan."""
    check_plan(model, system, plan)
    split, inp, composed, placed = _kept(_plan_inputs, model, system, plan)
    step = {k: float(v) for k, v in compose_step(composed).items()}
    breakdown = TimeBreakdown(**{name: step[name] for name in _BREAKDOWN_FIELDS})
    acc = system.accelerator
    stages = _stage_memories(inp, plan, system, placed)
    tokens = plan.global_batch * plan.seq_length
    model_flops, recomputed = _flops(
        model, plan.seq_length, plan.global_batch, plan.recompute, recompute_modules(plan)
    )
    recomputed -= plan_early_stop_flops(model, system, plan)
    hardware_flops = model_flops + recompute_share(plan, inp) * tokens * recomputed
    ops, comms = (
        _op_table(
            model,
            plan,
            system,
            [s.layers for s in split if s.count],
        )
        if with_ops
        else ((), ())
    )
    return Estimate(
        model=model.name,
        system=system.name,
        plan=plan.model_dump(),
        step_time_s=step["step_time_s"],
        breakdown=breakdown,
        stages=tuple(stages),
        tokens_per_step=tokens,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=hardware_flops,
        peak_flops_per_gpu=acc.peak_matrix_flops(plan.dtype),
        gpus=plan.gpus,
        ops=ops,
        comms=comms,
    )


def _op_table(model: ModelSpec, plan: PlanSpec, system: SystemSpec, stage_layer_counts: list[int]):
    """Per-op and per-collective rows of every block kind a stage runs (decoder layers × the fullest stage's
    count) for ``--ops``."""
    acc = system.accelerator
    shape = layer_shape(plan, system)
    spans = plan_spans(plan.dims, system)
    if shape.tp_layout == "2d":
        spans["tp_row"], spans["tp_col"] = grid_spans(spans["tp"], shape.tp_rows)
    fullest = max(stage_layer_counts)
    dense = min(fullest, model.dense_layers) if model.is_moe else fullest
    # the fullest stage's layers, the embedding and LM head once (StageMix fields); the routed experts one
    # block per MoE layer, as moe_layer: the block has no rows of its own (step.blocks._experts_graph: its
    # time is in moe_layer's ops, only its parameters are its own), so its count shows nowhere
    counts = StageMix(1, fullest, dense, fullest, fullest, model.mtp_layers, 1)
    ops, comms = [], []
    for name in model_block_kinds(model):
        kind = BLOCK_KINDS[name]
        block = kind.graph(model, shape)
        count = getattr(counts, kind.stage_count) if kind.stage_count else 1
        if count == 0:  # a kind no stage runs (a MoE model without dense layers): no rows
            continue
        for op in block.ops:
            f, b = op_times_s(op, acc, plan.dtype)
            eff = (
                op.fwd_flops / (f * acc.peak_matrix_flops(plan.dtype))
                if op.kind in ("gemm", "grouped_gemm") and f > 0
                else None
            )
            ops.append(
                OpCost(
                    block.name,
                    op.name,
                    op.kind,
                    count,
                    op.fwd_flops,
                    op.bwd_flops,
                    op.fwd_bytes,
                    op.gemm_shape,
                    eff,
                    f,
                    b,
                )
            )
        for c in block.collectives:
            if c.group in EXPERT_GROUPS:
                span = expert_group_span(c.group, plan.ep, plan.etp, system)
                time = moe_collective_time_s(c.kind, c.bytes, span, system, model)
            else:
                span = spans[c.group]
                time = collective_time_s(c.kind, c.bytes, span, system)
            comms.append(
                CommCost(
                    block.name,
                    c.name,
                    c.group,
                    c.kind,
                    c.bytes,
                    c.count_fwd,
                    c.count_bwd,
                    time,
                    span.size,
                    span.domains,
                )
            )
    return tuple(ops), tuple(comms)
