"""Mixture-of-experts models in the per-stage searches (``search --cluster``, ``--non-uniform``; issue 31): the
expert axes a candidate takes, its stages' expert rules, and the fields its per-stage plan states.

A per-stage plan of an MoE model states one ep and etp for every stage (specs.rules_moe.stage_expert_rule:
Megatron-Core's one expert grid per model) and the run-wide MoE knobs of a uniform plan (specs.stage_plan.
EXPERT_KNOBS). The searches list them as the uniform search does (search.expert_axes, the same rules): the
(ep, etp) pairs every stage of a candidate takes (``expert_degrees``: ep over the divisors of the experts, etp
over 1 and the stages' tp, or the ``ep`` / ``etp`` restrictions), for each pair the (dispatcher, a2a overlap)
switches (``expert_switches``); the capacity factor, balance and expert spread fixed for the search. A candidate
is priced under the problem of its switches (``switched``: moe_dispatcher and moe_a2a_overlap are run-wide, so
they live on the problem whose Common every stage reads, step.stage_plan_settings.common_of). A stage of an MoE
model takes one pool's GPUs (specs.rules_moe.stage_pools_rule) and keeps the uniform MoE rules
(stage_expert_violations) and the launcher's (search.launch.experts_allowed). A dense model has one option,
(ep, etp) = (1, 1) under the problem itself, so its search is unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from paraplan.search import launch
from paraplan.search.expert_axes import expert_axis_values, expert_degrees, expert_switches
from paraplan.specs.parallel import ParallelDims
from paraplan.specs.rules_moe import stage_expert_violations, stage_pools_rule
from paraplan.specs.stage_plan import EXPERT_KNOBS

if TYPE_CHECKING:
    from paraplan.search.staged.problem import HeteroProblem
    from paraplan.step.stage_links import StageSetting

# the problem's MoE fields: the axes (restrictions; None: every value the rules allow) and, with the knobs a
# per-stage plan states (EXPERT_KNOBS), those fixed for the search or set per candidate (``switched``)
EXPERT_AXES = ("ep", "etp", "dispatchers")


def expert_options(
    problem: HeteroProblem, stages: list[ParallelDims]
) -> list[tuple[list[ParallelDims], HeteroProblem]]:
    """(the stages' degrees with one (ep, etp), the problem of one (dispatcher, a2a overlap) switch of it) of
    every expert option of a candidate whose stages have degrees ``stages`` (module docstring), in the
    uniform search's order (ep, then etp, then dispatcher, then overlap); [(stages, problem)] for a dense model."""
    if not problem.model.is_moe:
        return [(stages, problem)]
    stacks = [p.system.accelerator.efficiency.runtime.parallelism for p in problem.cluster.pools]
    out = []
    for ep, etp in expert_degrees(problem.model, stages, problem.ep, problem.etp, stacks):
        dims = [replace(d, ep=ep, etp=etp) for d in stages]
        for dispatcher, overlap in _switches(problem, ep, etp):
            if all(_launched(problem, d, dispatcher) for d in dims):
                out.append((dims, switched(problem, dispatcher, overlap)))
    return out


def _switches(problem: HeteroProblem, ep: int, etp: int) -> tuple[tuple[str, bool], ...]:
    """search.expert_axes.expert_switches of the problem (the overlap varied, as the uniform search's default)."""
    return expert_switches(
        problem.framework, problem.dispatchers, problem.capacity_factor, True, ep, etp
    )


def _launched(problem: HeteroProblem, dims: ParallelDims, dispatcher: str) -> bool:
    """Does the framework's launcher state this stage's expert split (search.launch.experts_allowed)?"""
    return launch.experts_allowed(
        problem.framework, dims.tp, dims.cp, dims.dp, dims.ep, dims.etp, dispatcher
    )


def switched(problem: HeteroProblem, dispatcher: str, overlap: bool) -> HeteroProblem:
    """The problem pricing candidates of this (dispatcher, a2a overlap) switch: ``problem`` itself where it
    states them, else a copy, memoised on ``problem`` (the candidates of one switch share its Common, so the
    stage costs' caches, step.per_stage.stage_arrays, hit across them; a problem stated with lists, as the
    Python API may, is not hashable, so no lru_cache)."""
    if (problem.moe_dispatcher, problem.moe_a2a_overlap) == (dispatcher, overlap):
        return problem
    memo = problem.__dict__.setdefault("_switched", {})
    if (dispatcher, overlap) not in memo:
        memo[(dispatcher, overlap)] = replace(
            problem, moe_dispatcher=dispatcher, moe_a2a_overlap=overlap
        )
    return memo[(dispatcher, overlap)]


def plan_problem(problem: HeteroProblem, plan) -> HeteroProblem:
    """The problem that prices moves from a searched per-stage ``plan`` (the alleviation's starts): its
    (dispatcher, a2a overlap) switch; ``problem`` for a dense model."""
    if not problem.model.is_moe:
        return problem
    return switched(problem, plan.moe_dispatcher, plan.moe_a2a_overlap)


def expert_stage_ok(
    problem: HeteroProblem, index: int, dims: ParallelDims, slices: tuple[tuple[str, int, int], ...]
) -> bool:
    """Stage ``index`` of an MoE model keeps the per-stage plan's expert rules: one pool
    (specs.rules_moe.stage_pools_rule) and the uniform MoE rules on its degrees (stage_expert_violations:
    ep·etp divides its tp·cp·dp, the dispatcher and capacity, sequence parallelism with tp > 1). True for a
    dense model (whose ep and etp stay 1)."""
    if not problem.model.is_moe:
        return True
    if stage_pools_rule(problem.model, len({pool for pool, _, _ in slices})):
        return False
    return not stage_expert_violations(problem.model, index, dims, problem)


def expert_space_factor(problem: HeteroProblem, tps: list[int]) -> int:
    """Expert options per candidate before the rules (the searches' space counts): Σ over the (ep, etp) pairs
    of the axes (search.expert_axes.expert_axis_values of ``tps`` and the problem's restrictions) of
    their (dispatcher, overlap) switches; 1 for a dense model."""
    if not problem.model.is_moe:
        return 1
    eps, etps = expert_axis_values(problem.model, tps, problem.ep, problem.etp)
    return sum(len(_switches(problem, ep, etp)) for ep in eps for etp in etps)


def stage_expert_fields(problem: HeteroProblem, setting: StageSetting) -> dict:
    """The ep and etp a searched plan's stage states (none for a dense model: the plan's defaults)."""
    if not problem.model.is_moe:
        return {}
    return {"ep": setting.dims.ep, "etp": setting.dims.etp}


def plan_expert_fields(problem: HeteroProblem) -> dict:
    """The run-wide MoE knobs a searched plan states (specs.stage_plan.EXPERT_KNOBS; none for a dense model)."""
    if not problem.model.is_moe:
        return {}
    return {name: getattr(problem, name) for name in EXPERT_KNOBS}


def expert_label(problem: HeteroProblem, settings: list[StageSetting]) -> str:
    """The end of a searched plan's label for an MoE model: its ep and etp (every stage's), dispatcher and a2a
    overlap; "" for a dense model."""
    if not problem.model.is_moe:
        return ""
    dims = settings[0].dims
    overlap = " a2a-overlap" if problem.moe_a2a_overlap else ""
    return f"; ep{dims.ep} etp{dims.etp} {problem.moe_dispatcher}{overlap}"
