"""The pipeline schedules' plan rules (specs.rules names them too), and each schedule's in one entry of
:data:`SCHEDULE_RULES` (issue 31: a new schedule is one entry here and one in step.schedules.SCHEDULES, whose
entries read theirs from here: ``PipelineSchedule.rules``).

An entry says whether the schedule runs vpp > 1 model chunks per GPU (``chunked``: the interleaved schedule needs
them, every other takes vpp = 1) and which micro-batch counts it runs (``batch_rule``, one of the rules below). The
uniform plan (specs.plan), the per-stage plan (specs.stage_plan), the smallest batch a plan accepts
(specs.plan_fields), the search's schedule options (search.grid_axes) and the interleaved instruction order
(step.schedule_orders) all ask these entries, never a schedule's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable

from paraplan.specs.choices import Schedule


def min_global_batch(dp: int, micro_batch: int, pp: int, schedule: str = "1f1b") -> int:
    """Smallest global batch a plan accepts: dp·micro_batch times the smallest micro-batch count
    ``schedule`` runs on pp stages (its entry's ``min_count``: 1; pp interleaved; 2·pp DualPipe)."""
    return dp * micro_batch * SCHEDULE_RULES[schedule].min_count(pp)


def dualpipe_rule(pp: int, microbatches: int) -> str | None:
    """DualPipe feeds micro-batches from both ends of a pipeline of stage pairs (DeepSeek-V3 §3.2.1):
    pp even, an even micro-batch count m >= 2·pp, as ``DualPipe.step`` asserts (deepseek-ai/DualPipe
    dualpipe/dualpipe.py:332-333 at 3da1bbe: num_ranks % 2 == 0, num_chunks % 2 == 0 and
    num_chunks >= num_ranks * 2; num_ranks the pipeline group's size, num_chunks m)."""
    if pp % 2 or microbatches % 2 or microbatches < 2 * pp:
        return (
            f"needs an even pp and an even micro-batch count of at least 2·pp = {2 * pp} "
            f"(got pp={pp}, micro-batches={microbatches})"
        )
    return None


def vpp_rule(pp: int, vpp: int) -> str | None:
    """Virtual pipeline stages (vpp > 1) interleave chunks of a pipeline: they need pp > 1."""
    return "needs pp > 1" if vpp > 1 and pp == 1 else None


def interleave_batch_rule(microbatches: int, pp: int) -> str | None:
    """Megatron-LM's interleaved schedule needs the micro-batch count to be a multiple of pp."""
    if microbatches % pp:
        return (
            f"interleaved schedule needs micro-batches ({microbatches}) to be a multiple of pp={pp}"
        )
    return None


def _one(pp: int) -> int:
    """The smallest micro-batch count of a schedule that runs any count: 1."""
    return 1


def _pp_count(pp: int) -> int:
    """The smallest multiple of pp (interleave_batch_rule): pp."""
    return pp


def _dualpipe_count(pp: int) -> int:
    """The smallest even count of at least 2·pp (dualpipe_rule): 2·pp (an odd pp is refused there)."""
    return 2 * pp


def _any_count(pp: int, microbatches: int) -> str | None:
    """GPipe, 1F1B and ZB-H1 run any micro-batch count."""
    return None


def _interleave_count(pp: int, microbatches: int) -> str | None:
    """specs.rules.interleave_batch_rule, in the entries' argument order."""
    return interleave_batch_rule(microbatches, pp)


@dataclass(frozen=True)
class ScheduleRules:
    """One schedule's plan rules."""

    name: Schedule
    # runs vpp > 1 model chunks per GPU, and needs them (Megatron-LM's interleaved schedule); False: vpp = 1
    chunked: bool
    # (pp, micro-batches) → what the count breaks, or None (each a rule of specs.rules)
    batch_rule: Callable[[int, int], str | None]
    # the plan field a uniform plan's check blames for a count the rule refuses: "schedule" where the rule
    # also constrains pp (DualPipe), "global_batch" where the batch sets the count alone
    batch_field: str = "global_batch"
    # pp → the smallest micro-batch count batch_rule accepts (the smallest default batch:
    # min_global_batch, specs.plan_fields.default_global_batch)
    min_count: Callable[[int], int] = _one
    # each pipeline rank runs two stages, i and p − 1 − i (DualPipe's two directions): a per-stage plan gives
    # both the same GPUs and degrees (``mirrored_stages_rule``)
    mirrored: bool = False


SCHEDULE_RULES: MappingProxyType[str, ScheduleRules] = MappingProxyType(
    {
        r.name: r
        for r in (
            ScheduleRules("1f1b", False, _any_count),
            ScheduleRules("interleaved", True, _interleave_count, min_count=_pp_count),
            ScheduleRules("gpipe", False, _any_count),
            ScheduleRules("zb-h1", False, _any_count),
            ScheduleRules("dualpipe", False, dualpipe_rule, "schedule", _dualpipe_count, True),
        )
    }
)
DEFAULT_SCHEDULE: Schedule = (
    "1f1b"  # the schedule of a plan without pipeline stages, and of vpp = 1
)
CHUNKED_SCHEDULE: Schedule = next(r.name for r in SCHEDULE_RULES.values() if r.chunked)


def default_schedule(vpp: int) -> Schedule:
    """The schedule a plan that names none runs: the chunked one with vpp > 1, else the default."""
    return CHUNKED_SCHEDULE if vpp > 1 else DEFAULT_SCHEDULE


def schedule_vpp_rule(schedule: str, vpp: int) -> str | None:
    """A chunked schedule needs vpp > 1 model chunks per GPU; every other runs one (vpp = 1)."""
    if SCHEDULE_RULES[schedule].chunked:
        if vpp == 1:
            return f"schedule={schedule} needs vpp > 1 (model chunks per GPU); give --vpp"
    elif vpp > 1:
        return f"schedule={schedule} cannot use vpp={vpp}; use {CHUNKED_SCHEDULE!r}"
    return None


def schedule_batch_rule(schedule: str, pp: int, microbatches: int) -> str | None:
    """What ``microbatches`` per step on ``pp`` stages break under ``schedule`` (its entry's ``batch_rule``)."""
    return SCHEDULE_RULES[schedule].batch_rule(pp, microbatches)


def mirrored_stages_rule(schedule: str, stages: list) -> tuple[int, str] | None:
    """(stage, rule) for the first stage i of a per-stage plan whose ``stages[i]`` (its GPUs and degrees, any
    comparable value) differs from stage p − 1 − i's under a schedule whose ranks run both (its entry's
    ``mirrored``): DualPipe's rank i holds stage i for one direction and stage p − 1 − i for the other, on its
    own GPUs (deepseek-ai/DualPipe examples/example_dualpipe.py:138 at 3da1bbe: ``local_full_modules =
    nn.Sequential(full_modules[rank], full_modules[pp_size - 1 - rank])``), so the two stages run on the same
    GPUs at the same degrees; None when they do, or the schedule pairs no stages."""
    if not SCHEDULE_RULES[schedule].mirrored:
        return None
    pp = len(stages)
    for i in range(pp // 2):
        if stages[i] != stages[pp - 1 - i]:
            return i, (
                f"schedule={schedule} runs stage {i} and stage {pp - 1 - i} on the same ranks (each "
                f"rank holds stage i and stage pp − 1 − i); give them the same devices, tp, cp and dp"
            )
    return None


def per_stage_schedules_rule(schedules: tuple[str, ...] | None) -> tuple[list[str], str] | None:
    """(the schedules refused, why) or None: the per-stage searches (search.staged: HeteroProblem.schedules,
    ``--schedule``) list no schedule whose stages run mirrored (ScheduleRules ``mirrored``: DualPipe's rank i
    runs stages i and p − 1 − i, ``mirrored_stages_rule``), whose range matrices would need each range paired
    with its mirror's (step.per_stage.stage_terms holds a stage's memory unpaired); ``estimate --plan`` prices
    such a per-stage plan. An unknown name is refused too."""
    allowed = [r.name for r in SCHEDULE_RULES.values() if not r.mirrored]
    refused = [s for s in schedules or () if s not in allowed]
    if refused:
        why = "the per-stage searches pair no mirrored stages (DualPipe: estimate --plan prices it)"
        return refused, f"{why}; allowed: {', '.join(allowed)}"
    return None
