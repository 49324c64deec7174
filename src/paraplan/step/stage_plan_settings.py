"""A per-stage plan read as what step/per_stage.py prices: its plan-wide settings (step.stage_links.Common,
``common_of``), each stage's GPUs, degrees, micro-batch and recompute (StageSetting, ``stage_settings``), a
stage's layer shape (``layer_shape_for``) and its pipeline neighbours (``stage_neighbours``). The searches
(search/staged) build the same Common from their problem.
"""

from __future__ import annotations

from dataclasses import replace

from paraplan.graph.transformer import LayerShape
from paraplan.specs.cluster import ClusterSpec
from paraplan.specs.plan import runtime_of
from paraplan.specs.stage_plan import StagePlanSpec, stage_devices
from paraplan.step.layer_shape import DENSE, expert_shape_of, layer_shape_from
from paraplan.step.stage_links import Common, StageSetting
from paraplan.step.stage_totals import stage_recompute_modules


def layer_shape_for(common: Common, setting: StageSetting) -> LayerShape:
    """A stage's layer shape (step.layer_shape.layer_shape_from): its tp, cp (with the run's cp_algorithm) and
    micro-batch, its ep and etp with the run's MoE knobs (Common.expert), the modules it re-runs
    (step.stage_totals.stage_recompute_modules: its per-op list's, else selective recompute's); each pool adds its stack's fields (``stage_arrays``)."""
    return layer_shape_from(
        setting.dims.tp,
        setting.dims.cp,
        setting.micro_batch,
        common.seq_length,
        common.sequence_parallel,
        common.attention,
        common.dtype,
        expert=common.expert._replace(ep=setting.dims.ep, etp=setting.dims.etp),
        recompute_modules=stage_recompute_modules(setting.recompute, setting.recompute_ops),
        cp_algorithm=common.runtime.cp_algorithm,
    )


def stage_recompute_mode(setting: StageSetting) -> str:
    """Per-op recompute is selective recompute of the modules the ops belong to (``recompute_modules_of``:
    the op graph marks their ops re-run, graph.ops.mark_recomputed; memory drops what they store)."""
    return "selective" if setting.recompute_ops else setting.recompute


def common_of(plan) -> Common:
    """The plan-wide settings of a StagePlanSpec, or of a per-stage search problem stating the same fields
    (search.staged.hetero.HeteroProblem, whose run-wide knobs are one RuntimeFields, ``runtime``)."""
    runtime = getattr(plan, "runtime", None) or runtime_of(plan)
    return Common(
        plan.seq_length,
        plan.dtype,
        plan.attention,
        plan.sequence_parallel,
        plan.zero,
        plan.schedule,
        plan.overlap_dp_grad_reduce,
        plan.engine,
        engine_stack=getattr(plan, "engine_stack", None),
        vpp=plan.vpp,
        overlap_param_gather=plan.overlap_param_gather,
        overlap_tp_comm=plan.overlap_tp_comm,
        runtime=runtime,
        # the run-wide MoE knobs (a per-stage search's problem states none: it searches dense models)
        expert=expert_shape_of(plan, 1, 1) if hasattr(plan, "moe_dispatcher") else DENSE,
        # the run-wide offloads (a per-stage search's problem states none: it searches without offload)
        offload_weights=getattr(plan, "offload_weights", False),
        offload_activations=getattr(plan, "offload_activations", False),
        offload_activation_layers=getattr(plan, "offload_activation_layers", None) or 0,
        offload_optimizer=getattr(plan, "offload_optimizer", False),
    )


def stage_settings(plan: StagePlanSpec, cluster: ClusterSpec) -> list[StageSetting]:
    devices = stage_devices(plan, cluster)
    return [
        StageSetting(
            tuple(devices[i]),
            replace(s.dims, pp=plan.pp),
            plan.stage_micro_batch(i),
            s.recompute,
            s.recompute_ops,
            i,
            plan.n_microbatches,
        )
        for i, s in enumerate(plan.stages)
    ]


def stage_neighbours(
    settings: list[StageSetting], i: int, vpp: int
) -> tuple[StageSetting | None, StageSetting | None, StageSetting | None]:
    """(previous, next, wrapping) neighbours of stage i: the wrapping one only for an end stage of an
    interleaved pipeline (vpp > 1: the last stage feeds the first stage's next chunk, step.p2p.exchanges)."""
    pp = len(settings)
    wrap = None
    if vpp > 1 and pp > 1 and i in (0, pp - 1):
        wrap = settings[pp - 1 - i]
    return (settings[i - 1] if i else None, settings[i + 1] if i + 1 < pp else None, wrap)
