"""One training step of a non-uniform plan (specs/stage_plan.py) on a cluster of node pools.

Read top-down: ``estimate_stage_plan`` → ``stage_arrays`` and ``stage_at`` (per stage: its blocks on the
stage's own GPUs with its own StepInputs; ``stage_cost``: its parameters and memory) → ``compose_stages``
(step.compose.compose_step over stages that each carry their own StepInputs: pipeline with unequal stages,
then the data-parallel tail). The searches (search/staged/hetero.py) read the same terms for every
candidate range (``range_matrices``); both paths share every rule.

The model (issue 10, "The model"):
- a stage's blocks (step.blocks.model_blocks) are costed as the uniform path costs them
  (step.block_sums' op-time and collective sums, step.build.block_cost) on the stage's per-GPU
  micro-batch global_batch / (m · dp_i), its tp and cp (CP collectives on its slowest CP group,
  step.stage_links.cp_span; its dense gradient group the cp·dp TP-rank-0 GPUs), one entry per distinct block with its count
  (step/layout.py), so ZeRO-3 gathers block by block as on a uniform plan; a stage is a
  step.compose.Stage with its own StepInputs (gradient group on its GPUs, HBM, state bytes), whose
  work, tail and memory come from step.compose's stage_work, tail_terms and stage_memory_terms;
  when a stage's GPUs come from several pools, each pool's GPUs are costed and the slowest sets the
  stage (its data-parallel replicas meet at every gradient sync);
- pipeline with unequal stages, 1F1B or GPipe: Σ_i W_i + (m − 1)·max_i W_i (step/schedules.py's
  bubble_from_work_s: the slowest stage sets the steady state, fill and drain pass once through the
  others), W_i = per-micro-batch forward + backward (+ recompute, exposed TP) + point-to-point;
- point-to-point between neighbouring stages, as many exchanges per micro-batch as step.p2p.exchanges
  counts (interleaved pipelines' wrapping ones included), each over the link the two GPUs share: the
  NVLink/PCIe domain when on one node, else the pools' scale-out network or the cluster's explicit link;
- data-parallel gradient sync per stage on its own group, priced as a uniform plan's
  (step.build.gradient_group) with the slowest link any member uses; optimizer step on the slowest
  GPU; tied embedding gradients all-reduced between the first and the last stage after every stage's
  tail (step.p2p.tied_embedding_sync_s);
- memory per stage against the smallest GPU memory among the stage's pools, its offloaded state against the
  smallest host memory per GPU, streamed over the slowest host link (the plan's offloads, as a uniform plan's).
The plan's settings and each stage's (Common, StageSetting) are read in step/stage_plan_settings.py.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, fields, replace
from functools import lru_cache

import numpy as np

from paraplan.graph.transformer import LayerShape
from paraplan.specs.cluster import ClusterSpec
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import STATE_FIELDS
from paraplan.specs.rules_offload import host_capacity_bytes
from paraplan.specs.stage_plan import (
    StagePlanSpec,
    check_stage_plan,
    settled_stage_plan,
    stage_block_ranges,
)
from paraplan.step.blocks import model_blocks
from paraplan.step.build import system_terms
from paraplan.step.constants import (
    at_zero_stage,
    batch_sync_s,
    host_link_Bps,
    stack_shape_fields,
)
from paraplan.step.compose import (
    GridKnobs,
    Stage,
    StepInputs,
    compose_parts,
    runtime_work,
    split_backward_on,
    stage_memory_terms,
    stage_params,
    stage_work,
    tail_terms,
    work_total,
)
from paraplan.step.engines import (
    EngineRules,
    grad_accumulation_bytes,
    grad_accumulation_first_saving_bytes,
)
from paraplan.step.p2p import exchanges
from paraplan.step.layout import RangeBlocks, range_stage, stage_at
from paraplan.step.result import Estimate, StageMemory, TimeBreakdown
from paraplan.step.schedules import schedule_flags
from paraplan.step.stage_memory import pipeline_stage_memory
from paraplan.step.stage_blocks import (
    block_prefix_counts,
    per_block_parts,
    pool_units,
    recomputable_names,
)
from paraplan.step.stage_totals import (
    early_stop_flops_per_token,
    stage_plan_fields,
    stage_plan_flops,
    stage_plan_system,
    stage_slices_peak_flops,
)
from paraplan.step.stage_plan_settings import (
    common_of,
    layer_shape_for,
    stage_neighbours,
    stage_recompute_mode,
    stage_settings,
)
from paraplan.step.stage_links import (  # noqa: F401 (re-exported: the searches and the tests read them here)
    Common,
    StageSetting,
    boundary_bytes,
    cp_span,
    group_links,
    node_counts,
    p2p_exchange_s,
    p2p_links,
    p2p_time_s,
    reshard_peers,
    sent_bytes,
    stage_gradient_group,
    stage_gradient_groups,
    synthetic_system,
    tied_embedding_sync_s,
    tp_span,
)


@dataclass(frozen=True)
class StageCost:
    """One stage's parameters (its dense gradient group) and memory; its time is compose_step's
    (step.result.Estimate.stage_work_s, stage_tail_s)."""

    params: float
    memory: StageMemory


# ---- one stage -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class StageArrays:
    """One stage setting over the model's whole block list: ``blocks`` (step.layout.RangeBlocks) gives the
    stage holding any range [a, b), so the estimator reads one range and the search (search/staged/hetero.py)
    every range at once; ``capacity`` the smallest GPU memory of its pools, ``host_capacity`` the smallest host
    memory per GPU (specs.rules_offload.host_capacity_bytes) of its pools. (The per-block seconds the split
    searches bound a candidate by are ``stage_block_work_s``', worked out without these.)"""

    blocks: RangeBlocks
    capacity: float
    host_capacity: float

    @property
    def inputs(self) -> StepInputs:
        return self.blocks.inputs


@lru_cache(maxsize=8192)
def stage_arrays(
    model: ModelSpec,
    cluster: ClusterSpec,
    common: Common,
    setting: StageSetting,
    prev: StageSetting | None,
    nxt: StageSetting | None,
    wrap: StageSetting | None = None,
) -> StageArrays:
    """The blocks of ``setting`` for every block range and its own StepInputs (module docstring);
    ``wrap``: an end stage's wrapping neighbour in an interleaved pipeline (the last stage for the first,
    the first for the last; step.p2p.exchanges), None otherwise."""
    shape = layer_shape_for(common, setting)
    systems = [cluster.pool(p).system for p in stage_pools(setting)]
    rules = common.rules
    units = stage_units(model, cluster, common, setting)
    sent = sent_bytes(model, shape)
    p2p_in, p2p_out = stage_p2p(cluster, common, setting, prev or wrap, nxt or wrap, sent)
    slowest = min(systems, key=lambda s: s.accelerator.hbm_rate())
    terms = at_zero_stage(
        system_terms(slowest, common.dtype, common.runtime), common.zero, common.offload_optimizer
    )
    # offload streams over the slowest host link among the stage's pools (as the slowest GPU sets its HBM)
    terms["host_bandwidth"] = min(host_link_Bps(s.accelerator) for s in systems)
    # the gradient accumulation is the stack's resolved at the plan's ZeRO stage (at_zero_stage, as on a
    # uniform plan; DeepSpeed's BF16_Optimizer where specs.rules_stack.runs_bf16_optimizer), unless a training
    # stack the plan states sets its own (step.engines.ENGINE_STACKS: AMP's fp16 param.grad)
    if (
        rules.grad_accumulation != "fused"
    ):  # as the stack states it, the first micro-batch's saving too
        terms["grad_accumulation_bytes"] = grad_accumulation_bytes(rules)
        terms["grad_accumulation_first_saving_bytes"] = grad_accumulation_first_saving_bytes(rules)
        terms["grad_accumulation_owned_bytes"] = 0.0
        terms["grad_accumulation_owned_first_saving_bytes"] = 0.0
    # an engine that synchronises on its batch loads (step.compose.runtime_work) sets them, priced as the stack's
    if rules.batch_syncs:
        terms["batch_sync_s"] = batch_sync_s(slowest, rules.batch_syncs)
    if rules.gradient_bytes:
        terms["grad_bytes"] = rules.gradient_bytes
    terms["reserved_bytes"] = max(s.accelerator.reserved_memory for s in systems)
    knobs = GridKnobs(
        vpp=common.vpp,
        **schedule_flags(common.schedule),
        **{name: getattr(common, name) for name in STATE_FIELDS},
        offload_activation_layers=common.offload_activation_layers,
    )
    inputs = StepInputs(
        stages=(),
        pp=setting.dims.pp,
        microbatches=setting.microbatches,
        gradient_groups=stage_gradient_groups(model, cluster, setting),
        knobs=knobs,
        **terms,
    )
    return StageArrays(
        blocks=RangeBlocks(units, block_prefix_counts(model), p2p_in, p2p_out, inputs),
        capacity=min(s.accelerator.hbm_capacity for s in systems),
        host_capacity=min(host_capacity_bytes(s.accelerator.host_memory) for s in systems),
    )


def stage_pools(setting: StageSetting) -> list[str]:
    """The pools a stage's GPUs are on, sorted by name."""
    return sorted({p for p, _, _ in setting.slices})


def stage_units(
    model: ModelSpec, cluster: ClusterSpec, common: Common, setting: StageSetting
) -> dict[str, tuple]:
    """``stage_pool_units`` of a stage on each of its pools (``stage_pools``), at its layer shape
    (step.stage_plan_settings.layer_shape_for): the blocks ``stage_arrays`` lays out."""
    shape = layer_shape_for(common, setting)
    return {
        pool: stage_pool_units(model, cluster, common, setting, shape, pool)
        for pool in stage_pools(setting)
    }


def stage_block_work_s(
    model: ModelSpec, cluster: ClusterSpec, common: Common, setting: StageSetting
) -> np.ndarray:
    """[k]: per-micro-batch seconds of block k of the block list on this stage, on one of its pools
    (``stage_units``): the sum of its BlockTerms seconds (step.stage_blocks.per_block_parts; no
    point-to-point, no tail), of the pool whose whole block list takes longest. One pool's row, not each
    block's slowest pool: a stage is priced on the pool slowest over its range (step.layout._slowest_pool,
    max_p Σ_k), which no fixed pool's sum exceeds, while Σ_k max_p can (pools that rank blocks differently,
    e.g. an MI300X and an H100 GPU in one stage). What search.staged.splits.bound_s bounds a candidate's step
    with, worked out from the blocks alone (no StageArrays: its neighbours' links, its StepInputs)."""
    units = stage_units(model, cluster, common, setting)
    rows = [sum(per_block_parts(model, u).values()) for u in units.values()]
    return max(rows, key=lambda row: float(row.sum()))


def stage_pool_units(
    model: ModelSpec,
    cluster: ClusterSpec,
    common: Common,
    setting: StageSetting,
    shape: LayerShape,
    pool: str,
):
    """step.stage_blocks.pool_units of a stage on one pool's GPUs: its layer shape with the pool's stack fields,
    its recompute, its slowest TP and CP groups there (step.stage_links.tp_span, cp_span)."""
    system = cluster.pool(pool).system
    dims = setting.dims
    return pool_units(
        model,
        system,
        shape._replace(**stack_shape_fields(system)),
        stage_recompute_mode(setting),
        dims.pp == 1,
        common.rules,
        common.overlap_tp_comm,
        tp_span(cluster, setting.slices, dims.tp, pool),
        cp_span(cluster, setting.slices, dims.tp, dims.cp, pool),
    )


def stage_p2p(
    cluster: ClusterSpec,
    common: Common,
    setting: StageSetting,
    prev: StageSetting | None,
    nxt: StageSetting | None,
    sent: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(seconds with the previous stage when the stage starts at block a, [a]; with the next when it ends
    before block b, [b]): step.p2p.exchanges' count of exchanges with each neighbour, each priced on its
    own links (stage_links.p2p_exchange_s, ``sent[k]``: the activation after block k − 1). An end stage's
    wrapping exchanges (interleaved) carry an activation of the size its other boundary carries, so the
    first stage's count on them under [b] and the last stage's under [a]."""
    rules = common.rules
    with_prev, with_next = (float(n) for n in exchanges(setting.index, setting.dims.pp, common.vpp))
    back = with_prev * p2p_exchange_s(cluster, rules, common, prev, setting, sent, receiver=True)
    ahead = with_next * p2p_exchange_s(cluster, rules, common, setting, nxt, sent, receiver=False)
    zero = np.zeros(len(sent))
    if setting.dims.pp == 1:
        return zero, zero
    if setting.index == 0:
        return zero, back + ahead
    if setting.index == setting.dims.pp - 1:
        return back + ahead, zero
    return back, ahead


def stage_terms(stage: Stage, index: int, memory: dict | None = None) -> dict:
    """Per-micro-batch work and its parts, tail (exposed DP sync + optimizer + optimizer offload) and
    memory of one stage (floats, or [n+1, n+1] arrays over block ranges) through step.compose's stage_work
    under the runtime (runtime_work: what compose_step takes the slowest of), tail_terms and
    stage_memory_terms on the stage's own StepInputs (``memory``: those terms where the caller has worked
    them out, ``range_memory``)."""
    work = runtime_work(
        stage.inputs, stage, stage_work(stage, split_backward_on(stage.inputs.knobs))
    )
    dp, optimizer, offload = tail_terms(stage.inputs, stage, work)
    if memory is None:
        memory = stage_memory_terms(stage.inputs, stage, index)
    out = dict(
        work,
        dp=dp,
        optimizer=optimizer,
        params=stage_params(stage, "dense"),
        memory=memory,
        peak=memory["peak_bytes"],
    )
    out["work"] = sum(work.values())
    out["tail"] = (
        dp + optimizer + offload
    )  # the optimizer offload's transfers too (step.tail.tail_terms)
    return out


def range_memory(arr: StageArrays, index: int) -> tuple[Stage, dict[str, np.ndarray]]:
    """The stage at position ``index`` for every block range [a, b) (step.layout.range_stage) and its
    stage_memory_terms ([n+1, n+1] arrays): what a split search reads first, to see whether any split fits."""
    stage = range_stage(arr.blocks, index)
    return stage, stage_memory_terms(stage.inputs, stage, index)


def range_matrices(
    arr: StageArrays, index: int, ranged: tuple[Stage, dict] | None = None
) -> dict[str, np.ndarray]:
    """``stage_terms`` of the stage at position ``index`` for every block range [a, b) ([n+1, n+1] arrays);
    ``ranged``: its ``range_memory`` where the caller has it."""
    stage, memory = ranged or range_memory(arr, index)
    return stage_terms(stage, index, memory)


def stage_cost(
    stages: tuple[Stage, ...], index: int, capacity_bytes: float, host_capacity_bytes: float
) -> StageCost:
    """Parameters and memory of the stage at position ``index`` of ``stages`` (step.compose.stage_params;
    step.stage_memory.pipeline_stage_memory: as ``stage_terms`` reads them, or DualPipe's rank pairs)."""
    stage, terms = stages[index], pipeline_stage_memory(stages, index)
    memory = StageMemory(
        stage=index,
        **{k: float(v) for k, v in terms.items() if k != "peak_bytes"},
        capacity_bytes=capacity_bytes,
        host_capacity_bytes=host_capacity_bytes,
    )
    return StageCost(float(stage_params(stage, "dense")), memory)


def compose_stages(
    stages: tuple[Stage, ...], tied_sync_s: float = 0.0
) -> tuple[float, TimeBreakdown, tuple[float, ...], tuple[float, ...]]:
    """The step of unequal stages through step.compose.compose_step, each stage with its own StepInputs
    (Stage.inputs): m · max_i W_i + bubble (Σ W_i − max W_i, step/schedules.py) + the longest tail,
    plus ``tied_sync_s``, which follows every stage's tail (step.p2p.tied_embedding_sync_s). Returns
    (step time, breakdown, per stage its per-micro-batch work W_i, per stage its tail), the pipeline and
    the tail composed once (step.compose.compose_parts)."""
    out, works, tails = compose_parts(
        replace(stages[0].inputs, stages=stages, tied_sync_s=tied_sync_s)
    )
    breakdown = TimeBreakdown(**{f.name: float(out[f.name]) for f in fields(TimeBreakdown)})
    return (
        breakdown.total_s(),
        breakdown,
        tuple(float(work_total(w)) for w in works),
        tuple(float(t) for t in tails),
    )


def estimate_stage_plan(
    model: ModelSpec, cluster: ClusterSpec, plan: StagePlanSpec, rules: EngineRules | None = None
) -> Estimate:
    """Predict the step time and memory per stage of a non-uniform plan (module docstring) as the uniform
    path's step.result.Estimate, with its per-stage fields filled and the plan-wide totals of
    step.stage_totals; ``rules``, when given, replace the plan's engine rules
    (step.engines.engine_rules_of; validate.cv refits their fitted constants)."""
    check_stage_plan(plan, model, cluster)
    plan = settled_stage_plan(plan, cluster)  # the run-wide values left to the pools' stacks
    for i, s in enumerate(plan.stages):
        if s.recompute_ops:
            allowed = recomputable_names(model, plan.seq_length, plan.attention, plan.dtype, s.cp)
            bad = [o for o in s.recompute_ops if o not in allowed]
            if bad:
                raise InputError(
                    f"plan.stages.{i}.recompute_ops: {bad[0]!r} is not allowed; ops that can be re-run alone: {', '.join(sorted(allowed))}"
                )
    common = replace(common_of(plan), engine_rules=rules)
    settings = stage_settings(plan, cluster)
    ranges = stage_block_ranges(plan, len(model_blocks(model)))
    neighbours = [stage_neighbours(settings, i, plan.vpp) for i in range(plan.pp)]
    arrays = [stage_arrays(model, cluster, common, st, *nb) for st, nb in zip(settings, neighbours)]
    stages = tuple(
        stage_at(arr.blocks, st.index, a, b) for arr, st, (a, b) in zip(arrays, settings, ranges)
    )
    costs = [
        stage_cost(stages, st.index, arr.capacity, arr.host_capacity)
        for st, arr in zip(settings, arrays)
    ]
    tied = tied_embedding_sync_s(model, cluster, common, settings[0], settings[-1])
    step, breakdown, works, tails = compose_stages(stages, tied)
    summary = tuple(
        {
            "stage": i,
            "blocks": [a, b],
            "layers": sum(1 for ref in model_blocks(model)[a:b] if ref.is_layer),
            "devices": [{"pool": p, "gpus": n} for p, _, n in st.slices],
            "tp": st.dims.tp,
            "cp": st.dims.cp,
            **({"ep": st.dims.ep, "etp": st.dims.etp} if model.is_moe else {}),
            "dp": st.dims.dp,
            "micro_batch": st.micro_batch,
            "recompute": stage_recompute_mode(st),
        }
        for i, (st, (a, b)) in enumerate(zip(settings, ranges))
    )
    early_stop = [
        stage_early_stop_flops(model, cluster, common, st, r) for st, r in zip(settings, ranges)
    ]
    model_flops, hardware_flops = stage_plan_flops(
        model,
        plan,
        [s["layers"] for s in summary],
        [s["recompute"] for s in summary],
        early_stop,
    )
    slices = [st.slices for st in settings]
    return Estimate(
        model=model.name,
        system=stage_plan_system(cluster, slices),
        plan=stage_plan_fields(plan),
        step_time_s=step,
        breakdown=breakdown,
        stages=tuple(c.memory for c in costs),
        tokens_per_step=plan.global_batch * plan.seq_length,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=hardware_flops,
        peak_flops_per_gpu=stage_slices_peak_flops(cluster, slices, plan.dtype),
        gpus=plan.gpus,
        stage_work_s=works,
        stage_tail_s=tails,
        stage_summary=summary,
        problems=runnable_problems(costs),
    )


def stage_early_stop_flops(
    model: ModelSpec,
    cluster: ClusterSpec,
    common: Common,
    setting: StageSetting,
    blocks: tuple[int, int],
) -> float:
    """step.stage_totals.early_stop_flops_per_token of a fully recomputed stage's layers (its block range
    [a, b) of step.blocks.model_blocks) on its shape, each pool with its system and stack fields
    (``stage_arrays``), the pools weighted by their GPUs (each GPU of the stage runs its share of the
    stage's tokens); 0 for a stage not fully recomputed."""
    if stage_recompute_mode(setting) != "full":
        return 0.0
    a, b = blocks
    held = Counter((ref.kind, ref.width) for ref in model_blocks(model)[a:b] if ref.is_layer)
    layers = tuple((kind, width, n) for (kind, width), n in held.items())
    shape = layer_shape_for(common, setting)
    per_pool = [
        (
            count,
            early_stop_flops_per_token(
                model, system, shape._replace(**stack_shape_fields(system)), layers
            ),
        )
        for system, count in (
            (cluster.pool(pool).system, count) for pool, _, count in setting.slices
        )
    ]
    if len({flops for _, flops in per_pool}) == 1:  # one value: itself, not a mean's rounding
        return per_pool[0][1]
    return sum(count * flops for count, flops in per_pool) / sum(count for count, _ in per_pool)


def runnable_problems(costs: list[StageCost]) -> tuple[str, ...]:
    """Stages that cannot run whatever their memory: a stage holding no parameters gives its optimizer an
    empty parameter list, which PyTorch refuses (torch.optim.Optimizer.__init__: "optimizer got an empty
    parameter list"); both Megatron-LM and DeepSpeed build one optimizer per pipeline rank."""
    return tuple(
        f"stage {i} holds no parameters: its optimizer cannot be built"
        for i, c in enumerate(costs)
        if c.params <= 0
    )
