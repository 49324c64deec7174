"""The expert axes of a mixture-of-experts model's plans, one rule for every search that lists them: the (ep, etp)
pairs (``expert_degrees``) and the (dispatcher, a2a overlap) switches of a pair (``expert_switches``). The uniform
search (search.space.SearchProblem.expert_options) asks them for one stage's degrees, the per-stage searches
(search.staged.experts) for every stage of a candidate at once (issue 31: one ep and etp per plan,
specs.rules_moe.stage_expert_rule)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from paraplan.search import launch
from paraplan.search.divisors import divisors
from paraplan.specs.model import ModelSpec
from paraplan.specs.moe_plan import SEARCH_DISPATCHERS
from paraplan.specs.parallel import ParallelDims
from paraplan.specs.rules_moe import dispatcher_rule, expert_degree_rules
from paraplan.specs.rules_stack import stack_parallelism_rules


def expert_degrees(
    model: ModelSpec,
    stages: Sequence[ParallelDims],
    eps: tuple[int, ...] | None,
    etps: tuple[int, ...] | None,
    stacks: Sequence[tuple[str, ...]],
) -> list[tuple[int, int]]:
    """The (ep, etp) pairs every stage of ``stages`` (its tp, cp, dp) takes: ep over ``eps`` (None: every
    divisor of the experts), etp over ``etps`` (None: 1 and each stage's tp, Megatron-Core's two settings:
    experts not split, or split like the dense layers), ep outermost; a pair kept where no stage breaks the
    expert degree rules (specs.rules_moe.expert_degree_rules: ep divides the experts, ep·etp the stage's
    tp·cp·dp, etp an expert's width) and every stack of ``stacks`` (efficiency.runtime.parallelism) runs
    its degrees (specs.rules_stack.stack_parallelism_rules)."""
    eps = eps or tuple(divisors(model.experts))
    etps = etps or tuple(sorted({1, *(d.tp for d in stages)}))
    return [
        (ep, etp)
        for ep in eps
        for etp in etps
        if all(_takes(model, replace(d, ep=ep, etp=etp), stacks) for d in stages)
    ]


def _takes(model: ModelSpec, dims: ParallelDims, stacks: Sequence[tuple[str, ...]]) -> bool:
    """No expert degree rule broken on ``dims`` and every stack of ``stacks`` runs them."""
    return not expert_degree_rules(model, dims) and not any(
        stack_parallelism_rules(runs, dims) for runs in stacks
    )


def expert_switches(
    framework: str | None,
    dispatchers: tuple[str, ...] | None,
    capacity_factor: float | None,
    vary_overlap: bool,
    ep: int,
    etp: int,
) -> tuple[tuple[str, bool], ...]:
    """(moe_dispatcher, moe_a2a_overlap) options of an (ep, etp): every dispatcher of ``dispatchers`` (None:
    specs.moe_plan.SEARCH_DISPATCHERS) the capacity allows (specs.rules_moe.dispatcher_rule); the overlap of
    dispatch and combine only where there is one (ep·etp > 1) and ``vary_overlap``; those the framework's
    launcher states (search.launch.a2a_overlap_allowed)."""
    allowed = [
        d for d in (dispatchers or SEARCH_DISPATCHERS) if not dispatcher_rule(d, capacity_factor)
    ]
    overlaps = [False, True] if ep * etp > 1 and vary_overlap else [False]
    return tuple(
        (d, ov) for d in allowed for ov in overlaps if launch.a2a_overlap_allowed(framework, ov)
    )
