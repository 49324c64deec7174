"""A layer's shape (graph.transformer.LayerShape) from a plan's degrees and knobs: the one rule every path
builds it by (the estimator, per-stage plans, the search's rows), so sequence parallelism, the 2D grid's
rows and panels and the stack's fields are decided in one place."""

from __future__ import annotations

from paraplan.graph.ops import ExpertShape
from paraplan.graph.transformer import LayerShape
from paraplan.specs.tp_layout import grid_shape, panel_count

DENSE = ExpertShape()  # the expert knobs of a dense model (LayerShape's default)


def expert_shape_of(plan, ep: int, etp: int) -> ExpertShape:
    """The expert knobs of a layer (graph.ops.ExpertShape): ``ep`` and ``etp`` with the plan's run-wide MoE knobs
    (specs.moe_plan.MoEPlanFields': a uniform plan's, or a per-stage plan's, specs.stage_plan.EXPERT_KNOBS)."""
    return ExpertShape(
        ep,
        etp,
        plan.moe_dispatcher,
        plan.capacity_factor,
        plan.moe_balance,
        plan.moe_a2a_overlap,
        plan.expert_load_cv,
    )


def layer_shape_from(
    tp: int,
    cp: int,
    micro_batch: int,
    seq_length: int,
    sequence_parallel: bool,
    attention: str,
    dtype: str,
    expert: ExpertShape = DENSE,
    recompute_modules: tuple[str, ...] = (),
    tp_layout: str = "1d",
    tp_rows: int | None = None,
    summa_panels: int | None = None,
    cp_algorithm: str = "ring",
    stack: dict | None = None,
) -> LayerShape:
    """The one rule every path builds a layer's shape by (step.estimate.layer_shape, step.per_stage, the
    search's rows: search.shapes): sequence parallelism where the plan asks it or a 2D SUMMA grid splits
    the activations over all its GPUs (specs/tp_layout.py), and only over tp > 1; a 2D grid has
    ``tp_rows`` rows (None: specs.tp_layout.grid_shape's squarest) and ``summa_panels`` panels
    (specs.tp_layout.panel_count: None gives max(r, c)), every other layout one row and one panel.
    ``stack``: the system's module implementations (step.constants.stack_shape_fields); None leaves the
    LayerShape defaults, for a caller that adds them per system."""
    summa = tp_layout == "2d"
    rows, cols = grid_shape(tp, tp_rows) if summa else (1, tp)
    return LayerShape(
        tp,
        cp,
        micro_batch,
        seq_length,
        (sequence_parallel or summa) and tp > 1,
        attention,
        dtype,
        expert,
        recompute_modules,
        tp_layout,
        rows,
        panel_count(rows, cols, summa_panels) if summa else 1,
        cp_algorithm,
        **(stack or {}),
    )
