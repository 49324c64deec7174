"""Where a uniform plan's stages sit when they do not tile the nodes, stage by stage (issue 31).

Megatron-Core places ranks tp fastest, then cp, (ep,) dp, pp slowest (parallel_state.RankGenerator, order
"tp-cp-ep-dp-pp", NVIDIA/Megatron-LM core_r0.8.0 megatron/core/parallel_state.py), so stage s of a plan of
S = tp·cp·dp GPUs per stage holds ranks [s·S, (s+1)·S) and rank r sits on node ⌊r/D⌋ of D GPUs. When S divides
D or D divides S (the stages tile the nodes) every stage sits alike up to which of its links cross a node, and
step.layout.build_step_inputs prices the split's groups of stages at once (step.p2p.uniform_group_p2p, the
rank-0 spans of cost.comm.group_span). Otherwise (e.g. S = 3 on 8-GPU nodes: stage 2 holds ranks 6-8 on two
nodes) stages differ: a stage's data-parallel group spans the nodes its ranks sit on (cost.comm.placed_span) and
a boundary crosses nodes when some replica's two GPUs do (``boundary_crosses``). ``placed_stage_inputs`` then
lays the stages out one by one, each with its own links and gradient group, as the per-stage path
(step.per_stage on step.stage_links) prices the same plan, and the step waits for the slowest stage.
"""

from __future__ import annotations

from dataclasses import replace

from paraplan.cost.comm import placed_span
from paraplan.specs.parallel import DEFAULT_PLACEMENT, ParallelDims
from paraplan.specs.split import SplitGroup
from paraplan.specs.system import SystemSpec
from paraplan.step.build import gradient_group
from paraplan.step.compose import Stage, StepInputs
from paraplan.step.p2p import PipelineLinks, stage_p2p_s


def stages_tile(dims: ParallelDims, domain: int) -> bool:
    """Whether every stage sits alike on D-GPU nodes: a placement other than Megatron-Core's default
    (its groups priced on rank 0's spans), or S = tp·cp·dp GPUs per stage with S | D or D | S."""
    stage = dims.stage_gpus
    return dims.placement_order != DEFAULT_PLACEMENT or stage % domain == 0 or domain % stage == 0


def boundary_crosses(a: int, b: int, dims: ParallelDims, domain: int) -> bool:
    """Whether the transfers between stages a and b cross nodes: replica k of stage a (its tp-rank-0 GPU,
    rank a·S + k·tp) sends to replica k of stage b, and the slowest pair sets the exchange (step.stage_links
    .p2p_time_s), so it crosses when some pair's GPUs sit on two nodes."""
    stage, tp = dims.stage_gpus, dims.tp
    return any(
        (a * stage + k * tp) // domain != (b * stage + k * tp) // domain for k in range(stage // tp)
    )


def placed_p2p_s(links: PipelineLinks, position: int, dims: ParallelDims, vpp: int, domain: int):
    """Point-to-point seconds per micro-batch of the stage at ``position`` (step.p2p.stage_p2p_s): each
    neighbour's exchanges on the node's link or, when ``boundary_crosses``, the network's; the end stages'
    wrapping neighbour (interleaved) is the other end stage."""
    pp = dims.pp
    before, after = (position - 1) % pp, (position + 1) % pp

    def seconds(a: int, b: int) -> float:
        return links.outer_s if boundary_crosses(a, b, dims, domain) else links.inner_s

    return stage_p2p_s(seconds(before, position), seconds(position, after), position, pp, vpp)


def placed_gradient_groups(
    groups: dict, system: SystemSpec, dims: ParallelDims, position: int
) -> dict:
    """The gradient groups of the stage at ``position``: the dense group (cp·dp ranks, tp apart, from the
    stage's first rank) on its own span (cost.comm.placed_span), the others as the plan's."""
    if "dense" not in groups:
        return groups
    span = placed_span(
        position * dims.stage_gpus, dims.cp * dims.dp, dims.tp, system.node.gpus_per_domain
    )
    return {**groups, "dense": gradient_group(system, span)}


def placed_stage_inputs(
    inp: StepInputs,
    groups: tuple[SplitGroup, ...],
    links: PipelineLinks,
    system: SystemSpec,
    dims: ParallelDims,
    vpp: int,
) -> StepInputs:
    """``inp`` (step.layout.build_step_inputs of the split ``groups``: its first len(groups) entries hold
    their blocks) with one Stage entry per position, each with its own point-to-point seconds
    (``placed_p2p_s``) and its own inputs carrying its gradient groups (``placed_gradient_groups``)."""
    domain = system.node.gpus_per_domain
    base = replace(inp, stages=())
    stages = []
    for g, entry in zip(groups, inp.stages):
        for s in range(int(g.index), int(g.index) + int(g.count)):
            own = replace(
                base, gradient_groups=placed_gradient_groups(inp.gradient_groups, system, dims, s)
            )
            stages.append(
                Stage(s, 1, entry.blocks, placed_p2p_s(links, s, dims, vpp, domain), inputs=own)
            )
    return replace(inp, stages=tuple(stages))
