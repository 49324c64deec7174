"""Where a uniform plan's stages sit when they do not tile the nodes, stage by stage (issue 31).

Megatron-Core places ranks tp fastest, then cp, (ep,) dp, pp slowest (parallel_state.RankGenerator, order
"tp-cp-ep-dp-pp", NVIDIA/Megatron-LM at 00caa53a megatron/core/parallel_state.py), so stage s of a plan of
S = tp·cp·dp GPUs per stage holds ranks [s·S, (s+1)·S) and rank r sits on node ⌊r/D⌋ of D GPUs (its
initialize_model_parallel: "the caller should make sure adjacent ranks are on the same DGX box"). When S divides
D or D divides S (the stages tile the nodes) every stage sits alike up to which of its links cross a node, and
step.layout.build_step_inputs prices the split's groups of stages at once (step.p2p.uniform_group_p2p, the
rank-0 spans of cost.comm.group_span). Otherwise (e.g. S = 3 on 8-GPU nodes: stage 2 holds ranks 6-8 on two
nodes) stages differ: a stage's data-parallel group spans the nodes its ranks sit on (cost.comm.placed_span) and
a boundary crosses nodes when some replica's two GPUs do (``boundary_crosses``). ``placed_stage_inputs`` then
lays the stages out one by one, each with its own links and gradient group, as the per-stage path
(step.per_stage on step.stage_links) prices the same plan, and the step waits for the slowest stage. Each stage's
tp and cp collectives run on its own ranks (``position_spans``, cost.group_spans.stage_spans: tp 3, pp 3 on 8-GPU
nodes, only stage 2's tp group, ranks 6-8, straddles two), its blocks costed on them, as the per-stage path
prices each stage on its own slowest tp group (step.stage_links.tp_span). The expert groups keep their closed-form
spans (cost.moe.expert_span, expert_dp_span), which assume ep·etp divides the domain.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, NamedTuple

import numpy as np

from paraplan.cost.comm import GroupSpan, LinearCollective
from paraplan.cost.elementwise import is_array, maximum, minimum, where
from paraplan.cost.group_spans import stage_dense_span, stage_group_spans, stage_spans
from paraplan.specs.parallel import DEFAULT_PLACEMENT, ParallelDims
from paraplan.specs.split import SplitGroup
from paraplan.specs.system import SystemSpec
from paraplan.step.build import gradient_group
from paraplan.step.compose import GradientGroup, StepInputs
from paraplan.step.layout import positioned_stages
from paraplan.step.p2p import PipelineLinks, stage_p2p_s

Num = Any


class StageDims(NamedTuple):
    """The degrees ``placed_stage_inputs`` reads (ints, or arrays over a search's candidates).

    ParallelDims' placed degrees, named as in specs.parallel.DIM_NAMES (tests/unit/test_parallel_dims.py
    checks): a tuple, not ParallelDims, because search.table passes each degree as a numpy array over its
    candidates, which ParallelDims' int fields and derived degrees (world, edp) do not hold."""

    tp: Num
    cp: Num
    dp: Num
    pp: Num


def stages_tile(stage_gpus: Num, domain: int, default_order: Num = True) -> Num:
    """Whether every stage sits alike on D-GPU nodes: S = tp·cp·dp GPUs per stage with S | D or D | S, or a
    placement other than Megatron-Core's default (its groups priced on rank 0's spans, cost.comm.group_span;
    ``default_order``: whether the plan places tp-cp-dp-pp)."""
    if default_order.__class__ is bool:  # one plan: no numpy scalar to negate
        return (stage_gpus % domain == 0) | (domain % stage_gpus == 0) | (not default_order)
    return (stage_gpus % domain == 0) | (domain % stage_gpus == 0) | ~np.asarray(default_order)


def plan_stages_tile(dims: ParallelDims, domain: int) -> bool:
    """``stages_tile`` of one plan's (or ParallelDims') degrees and placement order."""
    return bool(stages_tile(dims.stage_gpus, domain, dims.placement_order == DEFAULT_PLACEMENT))


def position_spans(dims, system: SystemSpec, position: int) -> tuple[GroupSpan, GroupSpan] | None:
    """The (tp span, cp span) of the stage at ``position`` of a default-order plan whose stages do not tile the
    nodes (cost.group_spans.stage_spans), where they differ from the plan's (step.plan_spans.plan_spans: the slowest
    stage's, cost.group_spans.stage_group_spans); None where they do not. Its tp and cp collectives run on its
    own ranks, as the per-stage path prices them (step.stage_links.tp_span)."""
    domain = system.node.gpus_per_domain
    own = stage_spans(dims.tp, dims.cp, dims.dp, position, domain)
    return None if own == stage_group_spans(dims.tp, dims.cp, dims.dp, dims.pp, domain) else own


def boundary_crosses(a: Num, b: Num, stage_gpus: Num, tp: Num, domain: int) -> Num:
    """Whether the transfers between stages a and b cross nodes. Replica k of stage a (its tp-rank-0 GPU,
    rank a·S + k·tp) sends to replica k of stage b and the slowest pair sets the exchange
    (step.stage_links.p2p_time_s), so it crosses when some pair's GPUs sit on two nodes: for a < b, when
    ranks a·S to b·S + S − tp (the earlier stage's first GPU, the later one's last replica) do not share
    a node. (A node boundary B in (a·S, b·S + S − tp] leaves a multiple k·tp in
    [max(0, B − b·S), min(S − tp, B − a·S − 1)], an interval at least tp wide: replica k's pair crosses it.)"""
    lo, hi = minimum(a, b), maximum(a, b)
    return (lo * stage_gpus) // domain != (hi * stage_gpus + stage_gpus - tp) // domain


def placed_p2p_s(
    links: PipelineLinks, position: Num, dims: StageDims, vpp: Num, domain: int
) -> Num:
    """Point-to-point seconds per micro-batch of the stage at ``position`` (step.p2p.stage_p2p_s): each
    neighbour's exchanges on the node's link or, when ``boundary_crosses``, the network's, each with the
    runtime's TP gathers on its side (PipelineLinks.recv_gather_s / send_gather_s); the end stages'
    wrapping neighbour (interleaved) is the other end stage."""
    pp, stage = dims.pp, dims.tp * dims.cp * dims.dp
    before = where(position == 0, pp - 1, position - 1)
    after = where(position == pp - 1, 0, position + 1)

    def seconds(a: Num, b: Num) -> Num:
        return where(boundary_crosses(a, b, stage, dims.tp, domain), links.outer_s, links.inner_s)

    return stage_p2p_s(
        seconds(before, position) + links.recv_gather_s,
        seconds(position, after) + links.send_gather_s,
        position,
        pp,
        vpp,
    )


def _stacked(groups: list[GradientGroup], which: np.ndarray) -> GradientGroup:
    """One GradientGroup whose leaves are arrays, entry i that of groups[which[i]]."""

    def forms(name: str) -> LinearCollective:
        return LinearCollective(
            *(
                np.array([getattr(getattr(g, name), f.name) for g in groups], dtype=float)[which]
                for f in fields(LinearCollective)
            )
        )

    return GradientGroup(
        np.array([g.size for g in groups], dtype=float)[which],
        forms("all_reduce"),
        forms("reduce_scatter"),
        forms("all_gather"),
    )


def placed_dense_group(system: SystemSpec, dims: StageDims, position: int) -> GradientGroup:
    """The dense gradient group of the stage at ``position``: its cp·dp ranks tp apart from its first rank
    position·S, on their own span (cost.group_spans.stage_dense_span), as step.build.gradient_group prices a span."""
    domain = system.node.gpus_per_domain
    members, stride = dims.cp * dims.dp, dims.tp
    if not is_array(members):
        return gradient_group(system, stage_dense_span(int(stride), int(members), position, domain))
    members, stride = np.broadcast_arrays(members, stride)
    keys = np.stack([members.reshape(-1), stride.reshape(-1)], axis=1).astype(np.int64)
    distinct, which = np.unique(keys, axis=0, return_inverse=True)
    groups = [
        gradient_group(system, stage_dense_span(int(t), int(n), position, domain))
        for n, t in distinct.tolist()
    ]
    return _stacked(groups, which.reshape(members.shape))


def placed_stage_inputs(
    inp: StepInputs,
    groups: tuple[SplitGroup, ...],
    links: PipelineLinks,
    system: SystemSpec,
    dims: StageDims,
    placed: Num = True,
    entries_at=None,
) -> StepInputs:
    """``inp`` where ``placed`` (the candidates whose stages do not tile the nodes) laid out one stage per
    position (step.layout.positioned_stages), each with its own point-to-point seconds (``placed_p2p_s``),
    its own dense gradient group (``placed_dense_group``) and, with ``entries_at(position)``, its blocks
    costed on its own tp and cp spans (``position_spans``)."""
    domain = system.node.gpus_per_domain
    return positioned_stages(
        inp,
        groups,
        dims.pp,
        lambda s: placed_p2p_s(links, s, dims, inp.knobs.vpp, domain),
        lambda s: placed_dense_group(system, dims, s),
        placed,
        entries_at,
    )
