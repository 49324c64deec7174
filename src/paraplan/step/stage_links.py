"""Where a per-stage plan's stages sit (specs/stage_plan.py on a cluster of node pools) and what their links
cost: a stage's GPUs and settings (``StageSetting``), the plan-wide ones (``Common``), the links its groups
use (the slowest member's), point-to-point transfers between neighbouring stages (resharding between
stages of different dp), each stage's data-parallel gradient group and the tied-embedding sync between the
first and the last stage. step/per_stage.py prices the stages' blocks on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from paraplan.cost.comm import GroupSpan, linear_collective, span_of_domains
from paraplan.cost.group_spans import slowest_span, strided_groups_span
from paraplan.cost.moe import expert_dp_span
from paraplan.graph.ops import ExpertShape
from paraplan.step.layer_shape import DENSE
from paraplan.specs.cluster import ClusterSpec
from paraplan.specs.model import ModelSpec
from paraplan.specs.parallel import ParallelDims
from paraplan.specs.plan import RuntimeFields
from paraplan.specs.system import SystemSpec
from paraplan.graph.encoder import decoder_seq
from paraplan.graph.transformer import LayerShape
from paraplan.step.blocks import BlockRef, model_blocks, model_gradient_groups
from paraplan.step.build import gradient_group
from paraplan.step.compose import GradientGroup
from paraplan.step.constants import at_zero_stage, system_terms
from paraplan.step.p2p import pipe_tp_gathers_s, tied_embedding_elements
from paraplan.step.p2p import tied_embedding_sync_s as tied_sync_rule
from paraplan.step.engines import (
    EngineRules,
    backward_transfer_bytes,
    engine_rules_of,
    forward_transfer_bytes,
)


@dataclass(frozen=True)
class StageSetting:
    """What a stage is, apart from its blocks: GPUs (per pool: first index, count), degrees (``dims``: the
    stage's tp, cp and dp, the pipeline's pp), per-GPU micro-batch, recompute, position ``index`` in the
    pipeline of ``dims.pp`` stages with ``microbatches`` micro-batches."""

    slices: tuple[tuple[str, int, int], ...]
    dims: ParallelDims
    micro_batch: int
    recompute: str
    recompute_ops: tuple[str, ...]
    index: int
    microbatches: int


@dataclass(frozen=True)
class Common:
    """Plan-wide settings."""

    seq_length: int
    dtype: str
    attention: str
    sequence_parallel: bool
    zero: int
    schedule: str
    overlap_dp_grad_reduce: bool
    engine: str = "megatron"
    engine_rules: EngineRules | None = (
        None  # replaces the engine's rules (validate.cv's refitted constants)
    )
    engine_stack: str | None = (
        None  # the training stack the plan ran on its engine (step.engines.ENGINE_STACKS)
    )
    vpp: int = 1  # model chunks per stage (interleaved schedule)
    overlap_param_gather: bool = True  # ZeRO parameter all-gather overlaps forward
    overlap_tp_comm: bool = False  # TP collectives overlap GEMMs (step.build.tp_overlap)
    # the run-wide implementation knobs (specs.plan.RUNTIME_FIELDS), read by step.constants.system_terms and
    # the layer shape as on a uniform plan
    runtime: RuntimeFields = RuntimeFields()
    # a mixture-of-experts model's run-wide knobs (step.layer_shape.expert_shape_of), each stage's ep and etp its own
    expert: ExpertShape = DENSE
    # the run-wide offloads, a uniform plan's (specs.plan.STATE_FIELDS; offload_activation_layers 0: every layer)
    offload_weights: bool = False
    offload_activations: bool = False
    offload_activation_layers: int = 0
    offload_optimizer: bool = False

    @property
    def rules(self) -> EngineRules:
        """The pipeline runtime's rules: ``engine_rules`` when given, else those of the engine and
        the stack the plan states (step.engines.engine_rules_of)."""
        return self.engine_rules or engine_rules_of(self.engine, self.engine_stack)


# ---- placement helpers ---------------------------------------------------------------------------
def _node(cluster: ClusterSpec, pool: str, index: int) -> tuple[str, int]:
    return pool, index // cluster.pool(pool).gpus_per_node


def _member_gpus(setting: StageSetting, replica_stride: int = 1) -> list[tuple[str, int]]:
    """(pool, index) of every GPU of the stage, in rank order (tp innermost, then cp, then dp)."""
    out = []
    for pool, first, count in setting.slices:
        out += [(pool, first + k) for k in range(count)]
    return out[::replica_stride]


def synthetic_system(
    base: SystemSpec,
    inner_Bps: float,
    inner_latency_s: float,
    outer_Bps: float,
    outer_latency_s: float,
) -> SystemSpec:
    """``base`` with its NVLink and scale-out rates replaced by achieved rates (efficiency 1), so that the
    collective formulas of cost.comm apply to a group whose slowest links set these rates. ``inner_Bps`` is
    already the rate a member gets towards its peers (specs.fabric NodeSpec.peer_bandwidth, whatever the
    pool's topology), so the domain is a switch: cost.comm takes it whole."""
    node = base.node.model_copy(
        update={
            "nvlink_bandwidth": inner_Bps,
            "nvlink_efficiency": 1.0,
            "nvlink_latency": inner_latency_s,
            "topology": "switch",
        }
    )
    net = base.network.model_copy(
        update={"nic_bandwidth": outer_Bps, "efficiency": 1.0, "latency": outer_latency_s}
    )
    return base.model_copy(update={"node": node, "network": net})


def node_counts(cluster: ClusterSpec, gpus) -> dict[tuple[str, int], int]:
    """GPUs of the list on each node."""
    nodes: dict[tuple[str, int], int] = {}
    for pool, idx in gpus:
        key = _node(cluster, pool, idx)
        nodes[key] = nodes.get(key, 0) + 1
    return nodes


def group_links(
    cluster: ClusterSpec, gpus: list[tuple[str, int]], active=None
) -> tuple[GroupSpan, SystemSpec]:
    """Span (members per node a, nodes) of a group of GPUs and a system whose rates are the slowest its
    members use: intra-node (NVLink / PCIe domain: each pool's NodeSpec.peer_bandwidth towards a − 1
    peers, the rule cost.comm prices a uniform plan's group by, so a full-mesh node gives the links to
    those peers) and between nodes (pool network or cluster link, with ``active``: GPUs per node sending
    at once, for nodes whose interface is shared)."""
    nodes = node_counts(cluster, gpus)
    pools = sorted({p for p, _ in gpus})
    systems = [cluster.pool(p).system for p in pools]
    span = span_of_domains(nodes.values())
    inner = min(s.node.peer_bandwidth(span.per_domain - 1) for s in systems)
    inner_lat = max(s.node.nvlink_latency for s in systems)
    busiest = {p: max((active or nodes).get(n, 1) for n in nodes if n[0] == p) for p in pools}
    pairs = [
        (a, b)
        for a in pools
        for b in pools
        if a <= b and (a != b or sum(1 for n in nodes if n[0] == a) > 1)
    ]
    rates = [cluster.link_rate(a, b, busiest[a], busiest[b]) for a, b in pairs] or [
        cluster.link_rate(pools[0], pools[0])
    ]
    outer, outer_lat = min(r for r, _ in rates), max(lat for _, lat in rates)
    return span, synthetic_system(systems[0], inner, inner_lat, outer, outer_lat)


def tp_span(cluster: ClusterSpec, slices, tp: int, pool: str) -> GroupSpan:
    """The span of the slowest tensor-parallel group of a stage's GPUs on ``pool`` (runs of tp GPUs in rank
    order from each slice's first, a TP group staying in one pool): cost.group_spans.strided_groups_span, the rule
    a uniform plan's tp groups are priced by (step.plan_spans.plan_spans), on the pool's nodes."""
    domain = cluster.pool(pool).gpus_per_node
    return slowest_span(
        strided_groups_span(first, count, tp, 1, domain) for p, first, count in slices if p == pool
    )


def cp_span(cluster: ClusterSpec, slices, tp: int, cp: int, pool: str) -> GroupSpan:
    """The span of the slowest context-parallel group of a stage's GPUs on ``pool`` (cp ranks tp apart, in
    rank order tp-cp-dp from each slice's first, a CP group staying in one pool: specs.rules.pool_slice_rule):
    cost.group_spans.strided_groups_span, the rule a uniform plan's cp groups are priced by
    (cost.group_spans.stage_spans); one GPU's span at cp = 1 (no CP collective)."""
    if cp == 1:
        return GroupSpan(1, 1, 1)
    domain = cluster.pool(pool).gpus_per_node
    return slowest_span(
        strided_groups_span(first, count, cp, tp, domain) for p, first, count in slices if p == pool
    )


def cp_reshard_peers(senders: int, receivers: int, cp: int) -> tuple[tuple[int, ...], ...]:
    """``reshard_peers`` of the cp·d_a senders and cp·d_b receivers of a boundary, rank r = replica·cp + c
    (order tp-cp-dp): CP rank c of each replica holds the same sequence chunks on both stages (one cp per
    model, specs.rules.stage_cp_rule), so it exchanges with CP rank c of the replicas whose samples overlap."""
    peers = reshard_peers(senders // cp, receivers // cp)
    return tuple(tuple(q * cp + r % cp for q in peers[r // cp]) for r in range(senders))


def boundary_bytes(
    model: ModelSpec, blocks: tuple[BlockRef, ...], after: int, shape: LayerShape
) -> float:
    """Activation bytes sent forward after block ``after`` per micro-batch (gradients of the same size
    come back): b·(s/c)·h half-precision elements split over TP (Narayanan et al. 2021 §4.1); inside
    T5's decoder the encoder output travels along with the decoder state (every decoder layer reads it)."""
    ref = blocks[min(after, len(blocks) - 1)]
    nxt = blocks[min(after + 1, len(blocks) - 1)]
    if (
        nxt.kind in ("cross_decoder", "head")
        and model.architecture == "encoder_decoder"
        and ref.kind != "embedding"
    ):
        dec = decoder_seq(model, shape.seq_length)
        enc_bytes = (
            shape.act_bytes * shape.micro_batch * shape.seq_length * ref.width.hidden / shape.cp
        )
        dec_bytes = shape.act_bytes * shape.micro_batch * dec * ref.width.hidden / shape.cp
        return (enc_bytes + (dec_bytes if ref.kind == "cross_decoder" else 0.0)) / shape.tp
    return shape.act_bytes * shape.local_tokens * ref.width.hidden / shape.tp


@lru_cache(maxsize=1024)
def sent_bytes(model: ModelSpec, shape: LayerShape) -> np.ndarray:
    """[k]: bytes of the activation a stage ending before block k sends on (``boundary_bytes`` of block k − 1;
    0 at k = 0), at the layer shape ``shape``. Memoised (read-only): the stages of a shape share it."""
    blocks = model_blocks(model)
    out = np.array(
        [0.0] + [boundary_bytes(model, blocks, k - 1, shape) for k in range(1, len(blocks) + 1)]
    )
    out.setflags(write=False)
    return out


def reshard_peers(senders: int, receivers: int) -> tuple[tuple[int, ...], ...]:
    """For each sender replica, the receiver replicas its samples go to: sender r holds the micro-batch's
    samples [r/d_a, (r+1)/d_a), receiver q needs [q/d_b, (q+1)/d_b); they exchange where these overlap
    (the tile-overlap rule of cross-mesh resharding, Zheng et al. 2022 (Alpa) §5; Aceso's stages of
    different dp hand activations over the same way)."""
    return tuple(
        tuple(
            q
            for q in range(receivers)
            if q * senders < (r + 1) * receivers and r * receivers < (q + 1) * senders
        )
        for r in range(senders)
    )


@lru_cache(maxsize=65536)
def p2p_links(
    cluster: ClusterSpec,
    a_slices,
    a_tp: int,
    b_slices,
    b_tp: int,
    receiver: bool = False,
    cp: int = 1,
) -> tuple[tuple[tuple[float, float], ...], ...]:
    """For each data-parallel replica (each CP rank of it) on one side of the boundary between stage a and
    the next stage b (the senders of a, or with ``receiver`` the receivers of b), the (achieved bytes/s,
    latency) of the link to each of its peers (reshard_peers; cp_reshard_peers with ``cp`` > 1): the node's
    NVLink/PCIe domain when the two GPUs share a node, else the pools' network or the cluster's link
    between them."""
    a_gpus = [(p, first + k) for p, first, count in a_slices for k in range(count)]
    b_gpus = [(p, first + k) for p, first, count in b_slices for k in range(count)]
    a_nodes, b_nodes = (
        node_counts(cluster, a_gpus),
        node_counts(cluster, b_gpus),
    )  # every TP rank sends
    src, dst = a_gpus[::a_tp], b_gpus[::b_tp]

    def link(pa: str, ia: int, pb: str, ib: int) -> tuple[float, float]:
        na, nb = _node(cluster, pa, ia), _node(cluster, pb, ib)
        if na == nb:
            node = cluster.pool(pa).system.node
            return node.peer_bandwidth(1), node.nvlink_latency
        return cluster.link_rate(pa, pb, a_nodes[na], b_nodes[nb])

    peers = (
        reshard_peers(len(src), len(dst)) if cp == 1 else cp_reshard_peers(len(src), len(dst), cp)
    )
    if receiver:
        return tuple(
            tuple(link(*src[r], *dst[q]) for r in range(len(src)) if q in peers[r])
            for q in range(len(dst))
        )
    return tuple(tuple(link(*src[r], *dst[q]) for q in peers[r]) for r in range(len(src)))


def p2p_time_s(
    cluster: ClusterSpec, a: StageSetting, b: StageSetting, size_bytes, receiver: bool = False
):
    """One activation (or gradient) transfer between stage a and the next stage b as one side sees it,
    ``size_bytes`` being that side's per-GPU bytes (floats or numpy arrays): the slowest replica of
    Σ_peers (size/k)/rate_peer + latency_peer over its k peers (Hockney's α + n/β per message, Hockney
    1994; the bytes split evenly over the peers, sent one after the other as blocking point-to-point)."""
    sides = p2p_links(cluster, a.slices, a.dims.tp, b.slices, b.dims.tp, receiver, a.dims.cp)
    size = np.asarray(size_bytes, dtype=float)
    worst = np.max(
        [sum(size / len(peers) / rate + lat for rate, lat in peers) for peers in sides], axis=0
    )
    return np.where(size > 0, worst, 0.0)


def p2p_exchange_s(
    cluster: ClusterSpec,
    rules: EngineRules,
    common: Common,
    a: StageSetting | None,
    b: StageSetting | None,
    sent_bytes: np.ndarray,
    receiver: bool,
) -> np.ndarray:
    """Point-to-point seconds per micro-batch between stage a and the next stage b, as seen by b (receiver)
    or a, each side with its own per-GPU bytes (stages of different dp or tp reshard: p2p_time_s): with n
    transfers per exchange (EngineRules.transfers_per_neighbour, else stack_transfers), t(max(fwd, bwd)) for
    one batched exchange (n = 1), else (n/2)·(t(fwd) + t(bwd)) for n blocking transfers, half each way; the
    forward bytes of step.engines.forward_transfer_bytes and
    the backward bytes of backward_transfer_bytes (``sent_bytes``: the activation over tp after each
    block), and the engine's all-gathers over this side's TP group that rebuild what was split over its
    TP ranks (EngineRules.tp_gathers: receiver's, sender's; step.p2p.pipe_tp_gathers_s, the uniform path's
    rule)."""
    if a is None or b is None:
        return np.zeros(len(sent_bytes))
    own = b if receiver else a  # sent_bytes are this side's (its micro-batch and tp)
    whole = sent_bytes * own.dims.tp
    fwd = forward_transfer_bytes(rules, whole, own.dims.tp, common.seq_length)
    bwd = backward_transfer_bytes(rules, whole, own.dims.tp)
    transfers = rules.transfers_per_neighbour or stack_transfers(cluster, a, b)
    if transfers == 1:
        out = p2p_time_s(cluster, a, b, np.maximum(fwd, bwd), receiver)
    else:  # n blocking transfers per exchange, half of them each way (step.p2p.pipeline_links: n · t(size))
        out = (transfers / 2.0) * (
            p2p_time_s(cluster, a, b, fwd, receiver) + p2p_time_s(cluster, a, b, bwd, receiver)
        )
    gathers = rules.tp_gathers[0 if receiver else 1]
    if gathers and rules.p2p_split_over_tp and own.dims.tp > 1:
        pool = own.slices[0][0]
        span = tp_span(cluster, own.slices, own.dims.tp, pool)
        out = out + pipe_tp_gathers_s(gathers, whole, span, cluster.pool(pool).system)
    return out


def stack_transfers(cluster: ClusterSpec, a: StageSetting, b: StageSetting) -> float:
    """Transfers one exchange between stages a and b costs on their training stack
    (efficiency.runtime.p2p_transfers_per_exchange: 1 batched, 2 separate blocking calls), the most over
    their pools: what an engine that leaves it to the stack takes (EngineRules.transfers_per_neighbour 0)."""
    pools = {p for p, _, _ in a.slices + b.slices}
    return max(
        cluster.pool(p).system.accelerator.efficiency.runtime.p2p_transfers_per_exchange
        for p in pools
    )


@lru_cache(maxsize=65536)
def stage_gradient_group(cluster: ClusterSpec, slices, tp: int, dp: int) -> GradientGroup:
    """The stage's dense gradient group (its TP-rank-0 GPUs: ``dp`` = cp·dp members, every CP rank of every
    replica, as specs.parallel.GRADIENT_GROUPS' dense group) with its collectives priced as a uniform plan's
    (step.build.gradient_group) on the span of its members and the slowest links they use (a synthetic
    system)."""
    if dp <= 1:
        return gradient_group(cluster.pools[0].system, GroupSpan(1, 1, 1))
    every = [(p, first + k) for p, first, count in slices for k in range(count)]
    span, link_system = group_links(
        cluster, every[::tp], node_counts(cluster, every)
    )  # all TP ranks reduce at once
    return gradient_group(link_system, span)


def stage_gradient_groups(
    model: ModelSpec, cluster: ClusterSpec, setting: StageSetting
) -> dict[str, GradientGroup]:
    """The stage's gradient groups, one per group that reduces some block of the model
    (step.blocks.model_gradient_groups, as a uniform plan's): the dense one on its members
    (``stage_gradient_group``: cp·dp TP-rank-0 GPUs), the expert-data-parallel one as a uniform plan prices it
    (step.plan_spans.plan_spans: cost.moe.expert_dp_span's edp = tp·cp·dp/(ep·etp) ranks, ep·etp apart, on the
    stage's pool, whose one system an MoE stage keeps: specs.rules_moe.stage_pools_rule)."""
    dims, pool = setting.dims, setting.slices[0][0]
    out = {}
    for name in model_gradient_groups(model):
        if name == "expert":
            system = cluster.pool(pool).system
            out[name] = gradient_group(system, expert_dp_span(dims, system))
        else:
            out[name] = stage_gradient_group(cluster, setting.slices, dims.tp, dims.cp * dims.dp)
    return out


def tied_embedding_sync_s(
    model: ModelSpec, cluster: ClusterSpec, common: Common, first: StageSetting, last: StageSetting
) -> float:
    """step.p2p.tied_embedding_sync_s between the first and the last stage on the link their first GPUs
    use (every GPU of both stages sending at once), at the engine's tied_grad_bytes, or where it leaves them
    to the stack (0), the run's gradient-reduction bytes on the first stage's GPUs at the plan's ZeRO stage
    and optimizer offload (system_terms' resolved by step.constants.at_zero_stage: the BF16_Optimizer's fp32
    gradients where it runs, not where the optimizer is offloaded at ZeRO 1, as a uniform plan's
    StepInputs.grad_reduce_bytes, step.layout.build_step_inputs)."""
    elements = tied_embedding_elements(model, first.dims.tp)
    if not elements or first.index == last.index:
        return 0.0
    members = [_member_gpus(first)[0], _member_gpus(last)[0]]
    span, link_system = group_links(
        cluster, members, node_counts(cluster, _member_gpus(first) + _member_gpus(last))
    )
    form = linear_collective("all_reduce", span, link_system)
    system = cluster.pool(first.slices[0][0]).system
    grad_bytes = (
        common.rules.tied_grad_bytes
        or (
            at_zero_stage(
                system_terms(system, common.dtype, common.runtime),
                common.zero,
                common.offload_optimizer,
            )["grad_reduce_bytes"]
        )
    )
    return float(tied_sync_rule(form, elements, grad_bytes, last.index + 1))
