"""Plan-wide totals of a per-stage plan that step.result.Estimate holds as a uniform plan's: model and
hardware FLOPs per step, the mean peak FLOP/s of its GPUs, the name of the system it runs on and its fields
(step.per_stage.estimate_stage_plan fills them, so MFU, HFU and the records read alike on both paths)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from paraplan.cost.flops import (
    mlp_output_flops_per_token,
    model_flops_per_step,
    recompute_flops_per_token,
)
from paraplan.graph.ops import early_stop_tail, recompute_modules_of
from paraplan.graph.transformer import LayerShape
from paraplan.specs.cluster import ClusterSpec
from paraplan.specs.model import ModelSpec
from paraplan.specs.recompute import modules_of
from paraplan.specs.stage_plan import StagePlanSpec
from paraplan.specs.system import SystemSpec
from paraplan.step.blocks import BLOCK_KINDS


def stage_plan_fields(plan: StagePlanSpec) -> dict:
    """The plan as Estimate.plan holds it: its fields (model_dump), each stage's dp stated as the one it
    runs (StageSpec.data_parallel, where the plan left it to be inferred), so one plan has one record."""
    fields = plan.model_dump()
    fields["stages"] = tuple(
        dict(d, dp=s.data_parallel) for d, s in zip(fields["stages"], plan.stages)
    )
    return fields


def stage_recompute_modules(recompute: str, recompute_ops: tuple[str, ...]) -> tuple[str, ...]:
    """Modules one stage re-runs: those its per-op list names (graph.ops.recompute_modules_of, the
    modules step.per_stage marks recomputed), else selective recompute's (specs.recompute.modules_of)."""
    if recompute_ops:
        return recompute_modules_of(recompute_ops)
    return modules_of(recompute)


@lru_cache(maxsize=1024)
def early_stop_flops_per_token(
    model: ModelSpec,
    system: SystemSpec,
    shape: LayerShape,
    layers: tuple[tuple[str, ModelSpec, int], ...],
) -> float:
    """FLOPs per token that a full recomputation of ``layers`` ((block kind, its widths, how many): a
    step.blocks.BLOCK_KINDS name, as step.blocks.BlockRef holds it) does not re-run
    under torch.utils.checkpoint's early stop, where the profile runs it (checkpoint_early_stop):
    Σ n · cost.flops.mlp_output_flops_per_token(widths), 2·f·h each, over the blocks whose op graph on
    ``shape`` ends with graph.ops.early_stop_tail (the rule whose seconds step.block_sums.
    early_stop_tail_s takes out of the recomputation's time); 0 without the flag. The residual add of
    the tail does no matrix multiply (cost.flops counts those)."""
    if not system.accelerator.efficiency.checkpoint_early_stop:
        return 0.0
    skipped = 0.0
    for kind, width, n in layers:
        if early_stop_tail(BLOCK_KINDS[kind].build(model, width, shape).ops):
            skipped += n * mlp_output_flops_per_token(width)
    return skipped


def stage_plan_flops(
    model: ModelSpec,
    plan: StagePlanSpec,
    layers: Sequence[int],
    modes: Sequence[str],
    early_stop: Sequence[float],
) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one step: model FLOPs = cost.flops.model_flops_per_step;
    hardware FLOPs add each stage's share of the recomputed forward less what the early stop does not
    re-run, tokens · Σ_i ((L_i / Σ_j L_j) · recompute_flops_per_token(mode_i, modules_i) − E_i), L_i the
    transformer layers of stage i, E_i their ``early_stop_flops_per_token`` (``early_stop``: 0 for a stage
    not fully recomputed) (the uniform path's model + share · tokens · (recompute_flops_per_token − E),
    with one mode on every layer, step.estimate.estimate)."""
    ops = tuple(s.recompute_ops for s in plan.stages)
    return _flops(
        model,
        plan.seq_length,
        plan.global_batch,
        tuple(layers),
        tuple(modes),
        ops,
        tuple(early_stop),
    )


@lru_cache(maxsize=4096)
def _flops(model, seq_length, global_batch, layers, modes, ops, early_stop) -> tuple[float, float]:
    """``stage_plan_flops`` of plain values, kept for the next plan of the same stages (the searches
    price many)."""
    model_flops = model_flops_per_step(model, seq_length, global_batch)
    total = sum(layers)
    recomputed = 0.0
    for n, mode, stage_ops in zip(layers, modes, ops):
        if n and total:
            modules = stage_recompute_modules(mode, stage_ops)
            per_token = recompute_flops_per_token(model, seq_length, mode, modules)
            recomputed += n / total * per_token
    recomputed -= sum(early_stop, 0.0)
    return model_flops, model_flops + global_batch * seq_length * recomputed


def stage_slices_peak_flops(
    cluster: ClusterSpec, slices: Sequence[Sequence[tuple[str, int, int]]], dtype: str
) -> float:
    """Mean peak matrix FLOP/s of the plan's GPUs, Σ_slices gpus · peak(pool, dtype) / Σ gpus
    (specs.system.Accelerator.peak_matrix_flops): GPUs · this mean is the plan's peak, so MFU is model
    FLOP/s over the peak of the GPUs it runs on (Chowdhery et al. 2022, App. B) on mixed pools too."""
    gpus = peak = 0.0
    for stage in slices:
        for pool, _, count in stage:
            gpus += count
            peak += count * cluster.pool(pool).system.accelerator.peak_matrix_flops(dtype)
    return peak / gpus


def stage_plan_system(
    cluster: ClusterSpec, slices: Sequence[Sequence[tuple[str, int, int]]]
) -> str:
    """The name of the one system the plan's stages run on, else the cluster's name (mixed systems)."""
    names = {cluster.pool(pool).system.name for stage in slices for pool, _, _ in stage}
    return names.pop() if len(names) == 1 else cluster.name
