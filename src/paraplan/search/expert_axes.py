"""The expert axes of a mixture-of-experts model's plans, one rule for every search that lists them: the (ep, etp)
pairs (``expert_degrees``) and the (dispatcher, a2a overlap) switches of a pair (``expert_switches``). The uniform
search (search.space.SearchProblem.expert_options) asks them for one stage's degrees, the per-stage searches
(search.staged.experts) for every stage of a candidate at once (issue 31: one ep and etp per plan,
specs.rules_moe.stage_expert_rule). Both problems refuse stated axes no plan can take alike
(``expert_axes_violations``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from paraplan.search import launch
from paraplan.search.divisors import divisors
from paraplan.specs.model import ModelSpec
from paraplan.specs.moe_plan import SEARCH_DISPATCHERS
from paraplan.specs.parallel import ParallelDims
from paraplan.specs.rules_moe import (
    dispatcher_rule,
    expert_degree_rules,
    expert_free_rule,
    expert_load_cv_rule,
)
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
    eps, etps = expert_axis_values(model, [d.tp for d in stages], eps, etps)
    return [
        (ep, etp)
        for ep in eps
        for etp in etps
        if all(_takes(model, replace(d, ep=ep, etp=etp), stacks) for d in stages)
    ]


def expert_axis_values(
    model: ModelSpec, tps: Sequence[int], eps: tuple[int, ...] | None, etps: tuple[int, ...] | None
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the ep values, the etp values) the expert axes range over for stages of tensor-parallel degrees
    ``tps``: ``eps`` (None: every divisor of the experts) and ``etps`` (None: 1 and each of ``tps``,
    Megatron-Core's two settings), before the rules (expert_degrees keeps the pairs they allow)."""
    return eps or tuple(divisors(model.experts)), etps or tuple(sorted({1, *tps}))


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


def expert_axes_violations(
    model: ModelSpec,
    ep: tuple[int, ...] | None,
    etp: tuple[int, ...] | None,
    dispatchers: tuple[str, ...] | None,
    capacity_factor: float | None,
    expert_load_cv: float | None,
) -> list[tuple[str, object, str]]:
    """(field, value, why) of stated expert axes no plan of ``model`` can take, whatever its degrees: the
    router's spread (specs.rules_moe.expert_load_cv_rule); on a dense model an ``ep`` / ``etp`` other than 1
    (expert_free_rule); on an MoE model an axis every (ep, etp) pair of which breaks a rule of its values
    (expert_degree_rules on the least stage that carves it, tp·cp·dp = ep·etp: ep divides the experts, etp
    an expert's width), or ``dispatchers`` each refused by the capacity (dispatcher_rule). The one check of
    the uniform search (search.space.SearchProblem) and the per-stage ones (search.staged.problem); the
    uniform search then asks its factorizations for a layout, which the per-stage searches' candidates do."""
    out = []
    if rule := expert_load_cv_rule(model, expert_load_cv):
        out.append(("expert_load_cv", expert_load_cv, rule))
    if not model.is_moe:
        for name, values in (("ep", ep), ("etp", etp)):
            if values and (
                rule := next(filter(None, (expert_free_rule(model, v) for v in values)), None)
            ):
                out.append((name, list(values), f"{rule} ({model.name} is dense)"))
        return out
    pairs = [(e, t) for e in (ep or (1,)) for t in (etp or (1,))]
    broken = [expert_degree_rules(model, ParallelDims(dp=e * t, ep=e, etp=t)) for e, t in pairs]
    if all(broken):
        field, _value, rule = broken[0][0]  # specs.rules.Rule: (field, value, rule)
        name = field.removeprefix("plan.")
        out.append((name, list({"ep": ep, "etp": etp}[name] or (1,)), rule))
    refused = [dispatcher_rule(d, capacity_factor) for d in dispatchers or ()]
    if refused and all(refused):
        out.append(("dispatcher", list(dispatchers), refused[0]))
    return out
