"""One plan's pipeline as the step composition prices it, stage by stage: each pipeline stage's
per-micro-batch forward F, backward B (recompute and exposed communication included), its
weight-gradient part W, and point-to-point seconds; the schedule that orders their passes
(step/schedules.py, ``schedule_order``); and the composition's pipeline time m·S + bubble, plus the
A2A overlap's unpaired passes at pp 1 (step.compose.pipeline_bound_s; the drawing does not show those). The plan explorer draws its timeline from these (web/timeline.py).
"""

from __future__ import annotations

from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import SystemSpec
from paraplan.step.compose import pipeline_bound_s, split_backward_on, stage_works
from paraplan.step.dualpipe import overlapped_pair_s
from paraplan.step.estimate import check_plan, step_inputs
from paraplan.step.inputs import backward_s, forward_s, sum_blocks, work_total
from paraplan.step.schedules import SCHEDULES


def pipeline_stages(model: ModelSpec, system: SystemSpec, plan: PlanSpec) -> dict:
    """Per pipeline stage (0 .. pp − 1) its per-micro-batch ``forward_s`` (step.inputs.forward_s),
    ``backward_s`` (step.inputs.backward_s, W included), ``wgrad_s`` (W, BlockTerms.wgrad summed),
    ``p2p_s``, ``work_s`` (the sum the composition takes the slowest of) and ``pair_s`` (a forward and a
    backward chunk as DualPipe's overlapped pair, step.dualpipe.overlapped_pair_s); the schedule, m, v,
    whether it splits the backward, the routes micro-batches take (``directions``: 2 for DualPipe,
    step.schedule_orders.route_position), and ``pipeline_s``, the composition's m·S + bubble (+ the A2A overlap's unpaired passes at pp 1)."""
    check_plan(model, system, plan)
    inp = step_inputs(model, system, plan)
    split = split_backward_on(inp.knobs)
    stages: list[dict | None] = [None] * plan.pp
    # an entry stands for `count` identical stages from `index` on; its work as the composition prices it
    for entry, work in zip(inp.stages, stage_works(inp)):
        if int(entry.count) <= 0:
            continue
        row = {
            "forward_s": float(forward_s(work)),
            "backward_s": float(backward_s(work)),
            "wgrad_s": float(sum_blocks(entry, lambda b: b.terms.wgrad)),
            "p2p_s": float(work["pp"]),
            "work_s": float(work_total(work)),
            # a forward and a backward chunk run as DualPipe's overlapped pair (step.dualpipe)
            "pair_s": float(
                overlapped_pair_s(
                    work,
                    sum_blocks(entry, lambda b: b.terms.ep_comm),
                    (entry.inputs or inp).pair_compute_share,
                )
            ),
        }
        for index in range(int(entry.index), int(entry.index) + int(entry.count)):
            stages[index] = row
    schedule = plan.pipeline_schedule
    return {
        "schedule": schedule,
        "pp": plan.pp,
        "vpp": plan.vpp,
        "microbatches": plan.microbatches,
        "split_backward": bool(split),
        "directions": SCHEDULES[schedule].directions,
        "stages": [dict(row or {}, stage=i) for i, row in enumerate(stages)],
        "pipeline_s": float(pipeline_bound_s(inp)),
    }
