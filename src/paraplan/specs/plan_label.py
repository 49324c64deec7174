"""The compact one-line text of a plan, used by every table, record and export name."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from paraplan.specs.parallel import DEFAULT_PLACEMENT_LABEL
from paraplan.specs.plan import PlanSpec
from paraplan.specs.recompute import mode_of, recompute_label
from paraplan.specs.tp_layout import grid_shape

if TYPE_CHECKING:
    from paraplan.specs.stage_plan import StagePlanSpec


def plan_label(plan: PlanSpec) -> str:
    """Compact plan text: degrees, micro-batch, schedule, recompute, SP, expert degrees and dispatcher, ZeRO, offloads, overlaps,
    placement, and a user-given stage split (layers per stage, first/last stage, embedding or loss
    counted as a layer); words are separated by single spaces and contain none."""
    parts = [f"tp{plan.tp} pp{plan.pp} cp{plan.cp} dp{plan.dp}", f"mb{plan.micro_batch}"]
    sched = plan.pipeline_schedule
    if plan.pp > 1:
        parts.append(sched + (f"/v{plan.vpp}" if plan.vpp > 1 else ""))
    parts.append(f"rc:{mode_of(plan.recompute, plan.recompute_modules)}")  # op_sac by name
    if plan.sequence_parallel:
        parts.append("sp")
    if plan.tp_layout == "2d":  # the SUMMA grid rows x columns (specs/tp_layout.py)
        rows, cols = grid_shape(plan.tp, plan.tp_rows)
        parts.append(
            f"2d:{rows}x{cols}"
            + (f"/nb{plan.summa_panels}" if plan.summa_panels is not None else "")
        )
    elif plan.tp_layout == "2d-seq":
        parts.append("2d-seq")
    if (
        plan.ep > 1 or plan.etp > 1
    ):  # expert layers (specs/moe_plan.py): degrees, dispatcher, overlap
        parts.append(
            f"ep{plan.ep}"
            + (f" etp{plan.etp}" if plan.etp > 1 else "")
            + f" {plan.moe_dispatcher}"
            + (" a2a-overlap" if plan.moe_a2a_overlap else "")
        )
    parts.append(f"zero{plan.zero}")
    offloads = [
        n
        for n, on in (
            ("w", plan.offload_weights),
            ("act", plan.offload_activations),
            ("opt", plan.offload_optimizer),
        )
        if on
    ]
    if offloads:
        parts.append("offload:" + "+".join(offloads))
    if plan.overlap_tp_comm:
        parts.append("tp-overlap")
    if not plan.overlap_dp_grad_reduce and plan.dp * plan.cp > 1:
        parts.append("no-dp-overlap")
    if not plan.overlap_param_gather and plan.zero >= 1 and plan.dp * plan.cp > 1:
        parts.append("no-gather-overlap")
    if plan.placement != DEFAULT_PLACEMENT_LABEL:
        parts.append(plan.placement)
    if plan.stage_layers is not None:
        parts.append("layers:" + "/".join(str(n) for n in plan.stage_layers))
    for name, word in (("layers_first_stage", "first"), ("layers_last_stage", "last")):
        if getattr(plan, name) is not None:
            parts.append(f"{word}:{getattr(plan, name)}")
    accounted = [
        w for w, on in (("emb", plan.embedding_as_layer), ("loss", plan.loss_as_layer)) if on
    ]
    if accounted:
        parts.append("+".join(accounted) + "-as-layer")
    return " ".join(parts)


def stage_plan_label(plan: StagePlanSpec) -> str:
    """Compact text of a per-stage plan: stages, micro-batches, schedule, ZeRO, then per stage its GPUs
    (count and pool), degrees, recompute (specs.recompute.recompute_label) and layers or blocks."""
    head = f"pp{plan.pp} m{plan.n_microbatches} {plan.schedule}"
    head += (f"/v{plan.vpp}" if plan.vpp > 1 else "") + f" zero{plan.zero}"
    stages = []
    for s in plan.stages:
        devices = "+".join(f"{d.gpus} {d.pool}" for d in s.devices)
        span = f"L{s.layers}" if s.layers is not None else f"b{s.blocks[0]}-{s.blocks[1]}"
        rc = recompute_label(s.recompute, s.recompute_ops)
        stages.append(f"{devices} tp{s.tp} dp{s.data_parallel} rc:{rc} {span}")
    return head + ": " + " | ".join(stages)


def plan_text(plan: PlanSpec | StagePlanSpec | dict) -> str:
    """plan_label of a PlanSpec or of a plan dict (validated as a PlanSpec); stage_plan_label of a
    StagePlanSpec or of a dict with a ``stages`` list or tuple (a per-stage plan's dump)."""
    # a per-stage plan exists only once its module is loaded: the uniform paths (every estimate, table and
    # search result names its plan here) load neither it nor the cluster specs (issue 31's start-up)
    stage_plans = sys.modules.get("paraplan.specs.stage_plan")
    if stage_plans is not None and isinstance(plan, stage_plans.StagePlanSpec):
        return stage_plan_label(plan)
    if isinstance(plan, dict) and isinstance(plan.get("stages"), (list, tuple)):
        from paraplan.specs.stage_plan import StagePlanSpec

        return stage_plan_label(StagePlanSpec.model_validate(plan))
    return plan_label(plan if isinstance(plan, PlanSpec) else PlanSpec.model_validate(plan))
