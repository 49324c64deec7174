"""The run-wide axes the per-stage searches (``search --cluster``, ``--non-uniform``) vary beside each stage's
GPUs, tp and recompute (issue 31), with the uniform search's option lists and priced by the per-stage path
(step.per_stage):

- context parallelism: the degrees of ``problem.cps`` (``--cp``; default 1 alone, the space searched before),
  one cp on every stage (specs.rules.stage_cp_rule), each taken where the uniform search's cp rules take it at
  the stage's tp (``cp_allowed``);
- the pipeline schedule: ``problem.schedules`` (``--schedule``, read by the uniform search's rule
  search.grid_axes.searched_schedules; None: the problem's ``schedule`` alone, the space searched before), the
  unchunked ones for the searches' own candidates (``own_schedules``: a candidate runs one model chunk per
  stage; the interleaved schedule enters through ``--non-uniform``'s uniform seeds,
  search.staged.uniform_seed); DualPipe is refused (specs.rules_schedule.per_stage_schedules_rule);
- offload: the uniform search's switches (search.grid_axes.offload_switches) on the cluster's pools where
  ``problem.vary_offload``.

A candidate's schedule and offloads are a variant of the problem (``variants``, the fields VARIANT_FIELDS):
the variant's Common (step.stage_plan_settings.common_of) prices them, its plan states them
(search.staged.hetero._plan_from).
"""

from __future__ import annotations

from dataclasses import replace

from paraplan.search import launch
from paraplan.search.grid_axes import offload_switches, searched_schedules
from paraplan.search.staged.problem import HeteroProblem, depth_allowed
from paraplan.specs.errors import Violation
from paraplan.specs.plan import OFFLOAD_FIELDS
from paraplan.specs.rules import cp_rule, deepspeed_cp_rule, stage_cp_rule, ulysses_rule
from paraplan.specs.rules_schedule import DEFAULT_SCHEDULE, SCHEDULE_RULES, schedule_batch_rule

# the offload switches a variant sets (specs.plan.OFFLOAD_FIELDS less the activation layer count: every
# layer, as the uniform search's OffloadOption)
OFFLOAD_SWITCH_FIELDS = tuple(f for f in OFFLOAD_FIELDS if f != "offload_activation_layers")
# the HeteroProblem fields a variant sets
VARIANT_FIELDS = ("schedule", *OFFLOAD_SWITCH_FIELDS)


def own_schedules(problem: HeteroProblem) -> tuple[str, ...]:
    """The schedules of the searches' own candidates: ``problem.schedule`` where ``problem.schedules`` is
    None, else the listed ones the uniform search would list (search.grid_axes.searched_schedules: those the
    framework's launcher runs) that run one model chunk per stage (not ``chunked``)."""
    if problem.schedules is None:
        return (problem.schedule,)
    listed = searched_schedules(problem.schedules, problem.model, problem.framework)
    return tuple(s for s in listed if not SCHEDULE_RULES[s].chunked)


def variants(problem: HeteroProblem) -> list[HeteroProblem]:
    """The problem under each own schedule (``own_schedules``) and offload option (search.grid_axes.
    offload_switches on every pool's system), in that order; the problem itself where a variant sets its own
    values (by default the one variant, so that the space and its pricing are those searched before).
    Memoised on ``problem`` (the candidates of one variant share its Common, so the stage costs' caches,
    step.per_stage.stage_arrays, hit across them; search.staged.experts.switched's rule)."""
    memo = problem.__dict__.get("_variants")
    if memo is None:
        memo = problem.__dict__["_variants"] = _variants(problem)
    return memo


def _variants(problem: HeteroProblem) -> list[HeteroProblem]:
    """``variants``, worked out."""
    systems = [pool.system for pool in problem.cluster.pools]
    offloads = offload_switches(problem.vary_offload, problem.framework, systems)
    out = []
    for schedule in own_schedules(problem):
        for option in offloads:
            fields = dict(zip(VARIANT_FIELDS, (schedule, *option)))
            out.append(variant_with(problem, fields))
    return out


def variant_with(problem: HeteroProblem, fields: dict) -> HeteroProblem:
    """``problem`` with these VARIANT_FIELDS values (itself where it has them)."""
    if all(getattr(problem, name) == value for name, value in fields.items()):
        return problem
    return replace(problem, **fields)


def variant_of(problem: HeteroProblem, plan) -> HeteroProblem:
    """The variant of ``problem`` whose candidate ``plan`` is (a per-stage plan the search built): its
    schedule and offloads (VARIANT_FIELDS)."""
    return variant_with(problem, {name: getattr(plan, name) for name in VARIANT_FIELDS})


def takes_depth(problem: HeteroProblem, pp: int, microbatches: int) -> bool:
    """Does the variant run ``pp`` stages (search.staged.problem.depth_allowed: its schedule on the pipeline
    runtime) at ``microbatches`` micro-batches (specs.rules_schedule.schedule_batch_rule: the per-stage plan's
    check, specs.stage_schedule)? Where the schedules are listed (``--schedule``), one stage runs the default
    schedule alone, as in the uniform search (search.grid_axes.GridAxes.schedule_options)."""
    if pp == 1 and problem.schedules is not None and problem.schedule != DEFAULT_SCHEDULE:
        return False
    return depth_allowed(problem, pp) and not schedule_batch_rule(
        problem.schedule, pp, microbatches
    )


def cp_allowed(problem: HeteroProblem, tp: int, cp: int) -> bool:
    """Does a stage of tensor-parallel degree ``tp`` run context-parallel degree ``cp`` (``cp_refusal``)?"""
    return cp_refusal(problem, tp, cp) is None


def cp_refusal(problem: HeteroProblem, tp: int, cp: int) -> str | None:
    """Why a stage of tensor-parallel degree ``tp`` cannot run context-parallel degree ``cp``, in the first
    refusing rule's words, or None: the per-stage plan's rules (specs.rules.stage_cp_rule: an encoder-decoder
    takes cp 1; deepspeed_cp_rule on DeepSpeed's pipeline engine) and the uniform search's
    (search.space.SearchProblem.factorizations: specs.rules.cp_rule, ulysses_rule under the run's
    cp_algorithm, the launcher's search.launch.degrees_allowed)."""
    algorithm = problem.runtime.cp_algorithm
    if rule := stage_cp_rule(problem.model, cp, cp):
        return rule
    if rule := cp_rule(problem.seq_length, cp):
        return f"seq_length {problem.seq_length} {rule}"
    if problem.engine == "deepspeed" and (rule := deepspeed_cp_rule(cp, algorithm)):
        return rule
    if rule := ulysses_rule(problem.model, tp, cp, algorithm):
        return rule
    if not launch.degrees_allowed(problem.framework, tp, cp, problem.seq_length):
        return f"{problem.framework}'s launcher does not run it (search.launch.degrees_allowed)"
    return None


def searched_offloads(problem: HeteroProblem) -> dict[str, bool]:
    """The problem's offload switches by plan field (OFFLOAD_SWITCH_FIELDS), as its plans state them."""
    return {name: getattr(problem, name) for name in OFFLOAD_SWITCH_FIELDS}


def variant_note(problem: HeteroProblem, run: HeteroProblem) -> str:
    """The end of a candidate's label where the search varies the schedule or the offloads (``problem``'s
    ``schedules`` or ``vary_offload``): its variant's schedule and what it offloads; "" otherwise."""
    if problem.schedules is None and not problem.vary_offload:
        return ""
    off = [name.removeprefix("offload_") for name in OFFLOAD_SWITCH_FIELDS if getattr(run, name)]
    return f"; {run.schedule}" + (f" offload {'+'.join(off)}" if off else "")


def axes_violations(problem: HeteroProblem, seeded: bool) -> list[Violation]:
    """The listed axes a per-stage search would search nothing of, each named as the command's option: a
    ``--schedule`` list of chunked schedules only where no uniform seed runs them (``seeded`` False: the
    AMP-style search, whose candidates run one model chunk per stage, ``own_schedules``), and a ``--cp`` list
    no stage of the model takes at any tp (``cp_allowed``: an encoder-decoder takes cp 1, say)."""
    out = []
    if problem.schedules is not None and not seeded and not own_schedules(problem):
        listed = ",".join(problem.schedules)
        why = "the AMP-style search's candidates run one model chunk per stage (--non-uniform seeds run it)"
        out.append(Violation("--schedule", listed, f"{why}; allowed: {', '.join(_unchunked())}"))
    tps = [2**j for j in range(problem.cluster.gpus.bit_length())]
    if not any(cp_allowed(problem, tp, cp) for cp in problem.cps for tp in tps):
        listed = ",".join(map(str, problem.cps))
        # no tp runs it: the reason at tp 1 (the rules that do not read tp come first)
        why = cp_refusal(problem, 1, max(problem.cps))
        why = why or f"no stage of {problem.model.name} runs it at any tp (cp_allowed)"
        out.append(Violation("--cp", listed, why))
    return out


def _unchunked() -> list[str]:
    """The schedules that run one model chunk per stage and no mirrored stages (the searches' own)."""
    return [r.name for r in SCHEDULE_RULES.values() if not (r.chunked or r.mirrored)]
