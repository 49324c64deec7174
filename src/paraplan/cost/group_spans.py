"""The slowest of a plan's parallel groups where they do not all sit alike (issue 31): Megatron-Core places ranks
tp fastest, then cp, (ep,) dp, pp slowest (parallel_state.RankGenerator, order "tp-cp-ep-dp-pp", NVIDIA/Megatron-LM
at 00caa53a megatron/core/parallel_state.py), rank r on domain ⌊r/D⌋; a group of ranks is spanned as
cost.comm.placed_span states, and the step waits for the slowest group. Read by step.plan_spans.plan_spans (a uniform
plan's tp and cp groups) and step.stage_links.tp_span (a per-stage plan's stage on its GPUs)."""

from __future__ import annotations

import math
from functools import lru_cache

from paraplan.cost.comm import GroupSpan, placed_span


def slowest_span(spans) -> GroupSpan:
    """The slowest of several groups of one size, which the step waits for: the one over the most domains,
    then with the fewest members on one domain (the two-level ring sends 1/a of each member's bytes through
    its NIC to the o − 1 other domains, cost.comm's module docstring: its network share grows with o, falls with a)."""
    return max(spans, key=lambda s: (s.domains, -s.per_domain))


@lru_cache(maxsize=4096)
def strided_groups_span(
    first: int, ranks: int, members: int, stride: int, domain: int
) -> GroupSpan:
    """``slowest_span`` of the groups of ``members`` ranks ``stride`` apart that tile ranks [first, first +
    ranks) (Megatron-Core parallel_state.RankGenerator, order "tp-cp-ep-dp-pp": the tp groups are runs of tp
    ranks, stride 1; the cp groups cp ranks tp apart; NVIDIA/Megatron-LM at 00caa53a): group b·stride·members
    + j (j < stride) of ``placed_span``. A group's span depends on its first rank modulo D only, so the blocks
    b < D/gcd(stride·members, D) and the offsets j < min(stride, D) give every distinct one. Where tp | D a tp
    group never straddles a domain boundary and this is rank 0's span; tp 3 on 8-GPU domains puts ranks 6-8
    on two."""
    block = stride * members
    starts = {
        (first + b * block + j) % domain
        for b in range(min(max(1, ranks // block), domain // math.gcd(block, domain)))
        for j in range(min(stride, domain))
    }
    return slowest_span(placed_span(start, members, stride, domain) for start in sorted(starts))


@lru_cache(maxsize=4096)
def stage_spans(
    tp: int, cp: int, dp: int, position: int, domain: int
) -> tuple[GroupSpan, GroupSpan]:
    """(tp span, cp span) of the stage at ``position`` of a uniform plan in Megatron-Core's default order
    (tp-cp-dp-pp): the ``strided_groups_span`` of its ranks [s·S, (s+1)·S), S = tp·cp·dp, the tp groups runs
    of tp ranks, the cp groups cp ranks tp apart. Its collectives run on its own ranks (tp 3, pp 3 on 8-GPU
    domains: stage 2, ranks 6-8, straddles; stages 0 and 1 do not), as the per-stage path prices a stage
    (step.stage_links.tp_span)."""
    stage = tp * cp * dp
    first = position * stage
    return (
        strided_groups_span(first, stage, tp, 1, domain),
        strided_groups_span(first, stage, cp, tp, domain),
    )


def stage_dense_span(tp: int, members: int, position: int, domain: int) -> GroupSpan:
    """The dense gradient group of the stage at ``position`` of a default-order plan: its ``members`` = cp·dp
    ranks tp apart from its first rank position·S (S = tp·cp·dp), on their own span (cost.comm.placed_span: tp 6 · dp 4 puts
    ranks 0, 6 | 12 | 18 on three 8-GPU domains). Read by step.plan_spans.plan_spans (stage 0) and
    step.placement.placed_dense_group (each stage of a plan whose stages do not tile the domains)."""
    return placed_span(position * tp * members, members, tp, domain)


@lru_cache(maxsize=4096)
def stage_group_spans(
    tp: int, cp: int, dp: int, pp: int, domain: int
) -> tuple[GroupSpan, GroupSpan]:
    """(tp span, cp span) of a uniform plan in Megatron-Core's default order (tp-cp-dp-pp): the slowest of
    its stages' ``stage_spans``, which repeat every D/gcd(S, D) positions (S = tp·cp·dp). Where the stages
    tile the domains (S | D or D | S) every stage's is stage 0's."""
    stage = tp * cp * dp
    spans = [
        stage_spans(tp, cp, dp, s, domain)
        for s in range(min(pp, domain // math.gcd(stage, domain)))
    ]
    return slowest_span(t for t, _ in spans), slowest_span(c for _, c in spans)
