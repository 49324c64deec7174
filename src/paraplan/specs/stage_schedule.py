"""The pipeline schedule's rules on a per-stage plan (specs.stage_plan.StagePlanSpec), each a uniform plan's rule
in the uniform plan's words (specs.plan._schedule_violations, step.estimate._system_violations): vpp with pp > 1,
the micro-batch counts the schedule runs (its specs.rules_schedule.SCHEDULE_RULES entry, blamed on the field its
``batch_field`` names), the schedules the pipeline engine runs (specs.rules_stack.engine_schedule_rule), and, for
a schedule whose ranks run two stages (DualPipe), the mirrored stages (specs.rules_schedule.mirrored_stages_rule).
"""

from __future__ import annotations

from paraplan.specs.errors import Violation
from paraplan.specs.rules import vpp_rule
from paraplan.specs.rules_schedule import SCHEDULE_RULES, mirrored_stages_rule, schedule_batch_rule
from paraplan.specs.rules_stack import engine_schedule_rule


def stage_schedule_violations(plan) -> list[Violation]:
    """Every schedule rule ``plan`` (a StagePlanSpec) breaks (module docstring), each naming field, value and
    rule: ``plan.vpp`` without a pipeline; else a micro-batch count the schedule does not run, on
    ``plan.schedule`` where its entry's ``batch_field`` is the schedule (DualPipe), else on
    ``plan.microbatches``; ``plan.schedule`` for a schedule the engine does not run; ``plan.stages.i`` for
    stage i whose devices, tp, cp and dp differ from stage p − 1 − i's under a mirrored schedule."""
    out = []
    if rule := vpp_rule(plan.pp, plan.vpp):
        out.append(Violation("plan.vpp", plan.vpp, rule))
    elif rule := schedule_batch_rule(plan.schedule, plan.pp, plan.n_microbatches):
        if SCHEDULE_RULES[plan.schedule].batch_field == "schedule":
            out.append(Violation("plan.schedule", plan.schedule, rule))
        else:
            out.append(Violation("plan.microbatches", plan.n_microbatches, rule))
    if rule := engine_schedule_rule(plan.engine, plan.schedule, plan.vpp, plan.pp):
        out.append(Violation("plan.schedule", plan.schedule, rule))
    mirrors = [(s.devices, s.tp, s.cp, s.data_parallel) for s in plan.stages]
    if broken := mirrored_stages_rule(plan.schedule, mirrors):
        out.append(Violation(f"plan.stages.{broken[0]}", plan.schedule, broken[1]))
    return out
