"""The spans of a uniform plan's groups on its system: the tp, cp and pp groups and every gradient group, as the
placement order puts them (cost.comm.group_span), the stage-by-stage spans where the groups sit as Megatron-Core's
default order puts them (cost.group_spans), the expert-data-parallel group's closed form (cost.moe.expert_dp_span).
The estimator (step.build's re-export) and the search's placement orders (search.space) read them."""

from __future__ import annotations

from paraplan.cost.comm import GroupSpan, group_span, placement_strides
from paraplan.cost.group_spans import stage_dense_span, stage_group_spans
from paraplan.cost.moe import expert_dp_span
from paraplan.specs.parallel import GRADIENT_GROUPS
from paraplan.specs.system import SystemSpec

# the groups whose span the placement order sets: tp, cp, pp and the gradient groups but the expert one, which is
# carved out of tp·cp·dp (cost.moe.expert_dp_span)
PLACED_GROUPS: dict[str, tuple[str, ...]] = {
    **{g: (g,) for g in ("tp", "cp", "pp")},
    **{name: dims for name, dims in GRADIENT_GROUPS.items() if name != "expert"},
}


def plan_spans(degrees, system: SystemSpec) -> dict[str, GroupSpan]:
    """Spans of the tp, cp and pp groups and of every gradient group (specs.parallel.GRADIENT_GROUPS);
    ``degrees`` is anything with tp/cp/dp/pp attributes and ``placement_order``. Rank 0's
    (cost.comm.group_span), but where the groups sit as in the default order (``places_as_default``) the tp
    and cp groups' are the slowest of the plan's (cost.group_spans.stage_group_spans: a tp of 3 on 8-GPU
    domains straddles a boundary at ranks 6-8) and the dense gradient group's stage 0's on its own ranks
    (cost.group_spans.stage_dense_span: tp 6 · dp 4 puts ranks 0, 6 | 12 | 18 on three domains), as the per-stage path
    prices them."""
    strides = placement_strides(degrees)
    spans = {
        name: group_span(degrees, system, dims, strides) for name, dims in PLACED_GROUPS.items()
    }
    if places_as_default(degrees, strides):
        domain = system.node.gpus_per_domain
        tp, cp, dp = degrees.tp, degrees.cp, degrees.dp
        spans["tp"], spans["cp"] = stage_group_spans(tp, cp, dp, degrees.pp, domain)
        spans["dense"] = stage_dense_span(tp, cp * dp, 0, domain)
    if "expert" in GRADIENT_GROUPS:
        spans["expert"] = expert_dp_span(degrees, system)
    return spans


def places_as_default(degrees, strides: dict[str, int]) -> bool:
    """Whether the placement puts every group of more than one rank where Megatron-Core's default order
    (tp-cp-dp-pp) does: the same stride (``strides``: cost.comm.placement_strides) for each."""
    default = {"tp": 1, "cp": degrees.tp, "dp": degrees.tp * degrees.cp}
    default["pp"] = default["dp"] * degrees.dp
    return all(strides[g] == default[g] for g in default if getattr(degrees, g) > 1)


def default_order_key(degrees, system: SystemSpec, spans: dict | None = None) -> tuple | None:
    """What search.space.distinct_orders compares the default order by where plan_spans does not price it on rank
    0's spans (a tp group straddling a domain boundary, tp 3 on 8-GPU domains): the PLACED_GROUPS' members per
    domain where each span has ⌈size/per_domain⌉ domains as rank 0's do, else the spans themselves (no other
    order's equal them); None where they are rank 0's (``degrees``: default order; ``spans``: its plan_spans
    when the caller has them)."""
    strides = placement_strides(degrees)
    spans = plan_spans(degrees, system) if spans is None else spans
    placed = tuple(spans[name] for name in PLACED_GROUPS)
    if placed == tuple(group_span(degrees, system, d, strides) for d in PLACED_GROUPS.values()):
        return None
    if all(s.domains == -(-s.size // s.per_domain) for s in placed):
        return tuple(s.per_domain for s in placed)
    return placed


def placed_domains(degrees, system: SystemSpec) -> tuple[int, ...]:
    """The members per NVLink domain of each PLACED_GROUPS span of plan_spans: what the placement order changes."""
    strides = placement_strides(degrees)
    return tuple(
        group_span(degrees, system, dims, strides).per_domain for dims in PLACED_GROUPS.values()
    )
