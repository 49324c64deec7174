"""The uniform seed of the per-stage search (``paraplan search --non-uniform``): the uniform exact search's
best plans (search.run.search, the path of ``paraplan search --system S --gpus N``) restated stage by stage
(specs.uniform_stages.uniform_stage_plan). A uniform plan is a per-stage plan with equal stages, priced
alike by both paths (tests/unit/test_one_path.py), so a per-stage search that keeps it, or alleviates from
it, never returns a plan slower than the best uniform plan a per-stage plan can state.

The uniform search is restricted to what a per-stage plan states rather than its plans dropped: the
per-stage problem's axes (search.staged.axes: its cp degrees, ``--cp``, default 1; its schedules, ``--schedule``,
default SEARCHED_SCHEDULES: 1f1b, interleaved, gpipe, zb-h1 where asked; DualPipe never: the searches' range
matrices hold each stage's memory unpaired, step.per_stage.stage_terms; its offload switches where it varies
them, default none), the default placement and layer split, 1-D tp inside a node (the per-stage searches keep
tp within NVLink, as AMP and Aceso do), and the problem's run-wide knobs, overlap defaults and framework
(search.launch), and its MoE axes and knobs (MOE_SEARCH_FIELDS); ZeRO, sequence parallelism, interleaving
(vpp), recompute, the overlap switches, the micro-batch and an MoE model's ep, etp, dispatcher and a2a overlap
vary as in the uniform search. A plan it still cannot restate (specs.uniform_stages.
unsupported_field_violations) is left out. Only for the Megatron-LM pipeline runtime (``engine``
megatron): the uniform path prices no other.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from paraplan.search.run import search
from paraplan.search.space import SearchProblem
from paraplan.search.staged.axes import OFFLOAD_SWITCH_FIELDS
from paraplan.search.staged.experts import EXPERT_AXES
from paraplan.search.staged.hetero import _powers_of_two
from paraplan.search.staged.problem import HeteroProblem
from paraplan.specs.errors import InputError
from paraplan.specs.stage_plan import StagePlanSpec
from paraplan.specs.uniform_stages import uniform_stage_plan, unsupported_field_violations

# the schedules the per-stage searches search (module docstring): those they searched before a per-stage plan
# took every schedule of specs.rules_schedule.SCHEDULE_RULES
SEARCHED_SCHEDULES = ("1f1b", "interleaved", "gpipe")
# uniform plans asked for: the best first, the next ones kept among the returned plans
SEED_PLANS = 3


# the MoE axes and fixed knobs the uniform search takes as the per-stage problem states them (the same names)
MOE_SEARCH_FIELDS = (*EXPERT_AXES, "capacity_factor", "moe_balance", "expert_load_cv")

# the run-wide settings a seed gives the per-stage problem that prices moves from it (HeteroProblem fields,
# read off the seed's per-stage plan, StagePlanSpec)
SEEDED_FIELDS = (
    "schedule",
    "vpp",
    "zero",
    "sequence_parallel",
    "overlap_dp_grad_reduce",
    "overlap_param_gather",
    "overlap_tp_comm",
    *OFFLOAD_SWITCH_FIELDS,
    "moe_dispatcher",  # an MoE model's switch (search.staged.experts.switched); a dense seed's default
    "moe_a2a_overlap",
)


def seed_schedules(problem: HeteroProblem) -> tuple[str, ...]:
    """The schedules the seeds' uniform search lists: SEARCHED_SCHEDULES, or the problem's where it lists
    them (``--schedule``, search.staged.axes; DualPipe refused: specs.rules_schedule.per_stage_schedules_rule)."""
    return SEARCHED_SCHEDULES if problem.schedules is None else problem.schedules


class _OutOfTime(Exception):
    """The deadline passed during the uniform search (raised from its progress callback)."""


@dataclass(frozen=True)
class UniformSeed:
    """One uniform plan as a per-stage plan: its step time (the uniform estimate's), the per-stage plan,
    and the per-stage problem with the plan's run-wide settings (schedule, vpp, ZeRO, sequence
    parallelism, overlap switches), under which the per-stage search prices moves from it."""

    step_time_s: float
    plan: StagePlanSpec
    problem: HeteroProblem


def uniform_problem(problem: HeteroProblem) -> SearchProblem:
    """The uniform search problem of this one-pool per-stage problem, restricted to what a per-stage
    plan states (module docstring)."""
    pool = problem.cluster.pools[0]
    return SearchProblem(
        model=problem.model,
        system=pool.system,
        gpus=problem.cluster.gpus,
        seq_length=problem.seq_length,
        global_batch=problem.global_batch,
        dtype=problem.dtype,
        attention=problem.attention,
        tp=tuple(_powers_of_two(pool.gpus_per_node)),
        cp=problem.cps,
        schedules=seed_schedules(problem),
        vary_offload=problem.vary_offload,
        vary_placement=False,
        framework=problem.framework,
        default_overlaps=(
            problem.overlap_tp_comm,
            problem.overlap_dp_grad_reduce,
            problem.overlap_param_gather,
        ),
        runtime=problem.runtime,
        **{name: getattr(problem, name) for name in MOE_SEARCH_FIELDS},
    )


def uniform_seeds(problem: HeteroProblem, deadline: float) -> list[UniformSeed]:
    """The best uniform plans of ``problem`` (at most SEED_PLANS, best first) as per-stage plans, or none
    when the problem is not one pool, its engine is not Megatron-LM's, the uniform search refuses it
    (InputError) or ``deadline`` (time.perf_counter) passes during that search."""
    if not problem.cluster.is_uniform or problem.engine != "megatron":
        return []
    sp = uniform_problem(problem)

    def progress(done: int, total: int | None = None, phase: str = "") -> None:
        if time.perf_counter() > deadline:
            raise _OutOfTime

    try:
        sp.check()
        result = search(sp, top_k=SEED_PLANS, workers=1, progress=progress)
    except (InputError, _OutOfTime):
        return []
    seeds = []
    for ranked in result.plans:
        if unsupported_field_violations(ranked.plan):
            continue
        plan = uniform_stage_plan(
            ranked.plan, problem.model, problem.cluster.pools[0].name, problem.engine
        )
        try:
            seeded = replace(problem, **{name: getattr(plan, name) for name in SEEDED_FIELDS})
        except InputError:  # run-wide settings the framework's launcher cannot state
            continue
        seeds.append(UniformSeed(ranked.estimate.step_time_s, plan, seeded))
    return seeds
