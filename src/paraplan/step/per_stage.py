"""One training step of a non-uniform plan (specs/stage_plan.py) on a cluster of node pools.

Read top-down: ``estimate_stage_plan`` → ``stage_costs`` (per stage: work of one micro-batch on the
stage's own GPUs, its tail, its memory) → ``compose_stages`` (schedule.step.compose_step over stages that
each carry their own StepInputs: pipeline with unequal stages, then the
data-parallel tail). The searches (search/hetero.py) call ``stage_cost`` directly for every
candidate stage; both paths share every rule.

The model (issue 10, "The model"):
- a stage's blocks are costed with the foundation's op-time and collective sums and per-block terms
  (stages.block_compute / block_comm, schedule.step.block_terms) on the stage's per-GPU micro-batch
  global_batch / (m · dp_i) and its tp; a stage is a schedule.step.Stage with its own StepInputs
  (gradient group on its GPUs, HBM, state bytes), whose work, tail and memory come from
  schedule.step's stage_work, tail_terms and stage_memory_terms;
  when a stage's GPUs come from several pools, each pool's GPUs are costed and the slowest sets the
  stage (its data-parallel replicas meet at every gradient sync);
- pipeline with unequal stages, 1F1B or GPipe: Σ_i W_i + (m − 1)·max_i W_i (step/schedules.py's
  bubble_from_work_s: the slowest stage sets the steady state, fill and drain pass once through the
  others), W_i = per-micro-batch forward + backward (+ recompute, exposed TP) + point-to-point;
- point-to-point between neighbouring stages over the link the two GPUs share: the NVLink/PCIe
  domain when on one node, else the pools' scale-out network or the cluster's explicit link;
- data-parallel gradient sync per stage on its own group: the slowest link any member uses sets
  the bandwidth (hierarchical ring of cost.comm on the group's nodes); optimizer step on the slowest
  GPU; tied embedding gradients all-reduced between the first and the last stage;
- memory per stage against the smallest GPU memory among the stage's pools.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import lru_cache

import numpy as np

from paraplan.cost import memory as mem
from paraplan.cost.comm import GroupSpan, fastest_collective, linear_collective
from paraplan.graph.encoder import (
    BlockRef,
    block_graph,
    boundary_bytes,
    cross_layer_extra_activation_bytes,
    decoder_seq,
    model_blocks,
    recomputable_names,
)
from paraplan.graph.ops import recompute_modules_of
from paraplan.graph.transformer import LayerShape
from paraplan.step.result import StageMemory, TimeBreakdown
from paraplan.step.compose import (
    BLOCK_TERM_NAMES,
    RECOMPUTE_CODES,
    BlockCost,
    BlockTerms,
    GradientGroup,
    GridKnobs,
    Stage,
    StepInputs,
    block_terms,
    compose_step,
    stage_memory_terms,
    stage_work,
    tail_terms,
)
from paraplan.specs.cluster import ClusterSpec
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.stage_plan import (
    StagePlanSpec,
    check_stage_plan,
    stage_block_ranges,
    stage_devices,
)
from paraplan.specs.system import SystemSpec
from paraplan.step.engines import (
    ENGINES,
    EngineRules,
    backward_transfer_bytes,
    forward_transfer_bytes,
    host_layer_times_s,
)
from paraplan.step.build import (
    block_comm,
    block_compute,
    gradient_group,
    layer_buffer_bytes,
    system_terms,
)

NO_SPAN = GroupSpan(1, 1, 1)


@dataclass(frozen=True)
class StageSetting:
    """What a stage is, apart from its blocks: GPUs (per pool: first index, count), tp, dp, per-GPU
    micro-batch, recompute, position in a pipeline of ``pp`` stages with ``microbatches`` micro-batches."""

    slices: tuple[tuple[str, int, int], ...]
    tp: int
    dp: int
    micro_batch: int
    recompute: str
    recompute_ops: tuple[str, ...]
    index: int
    pp: int
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
        None  # replaces ENGINES[engine] (validate.cv's refitted constants)
    )

    @property
    def rules(self) -> EngineRules:
        """The pipeline runtime's rules: ``engine_rules`` when given, else ENGINES[engine]."""
        return self.engine_rules or ENGINES[self.engine]


@dataclass(frozen=True)
class StageCost:
    """One stage holding blocks [start, stop): seconds per micro-batch by part, tail seconds, memory."""

    forward_s: float
    backward_s: float
    recompute_s: float
    tp_comm_s: float
    pp_comm_s: float
    dp_comm_s: float
    optimizer_s: float
    params: float
    memory: StageMemory

    @property
    def work_s(self) -> float:
        """Per-micro-batch wall time of the stage: compute, exposed TP and point-to-point."""
        return self.forward_s + self.backward_s + self.recompute_s + self.tp_comm_s + self.pp_comm_s

    @property
    def tail_s(self) -> float:
        return self.dp_comm_s + self.optimizer_s


# ---- placement helpers ---------------------------------------------------------------------------
def _node(cluster: ClusterSpec, pool: str, index: int) -> tuple[str, int]:
    return pool, index // cluster.pool(pool).gpus_per_node


def _member_gpus(setting: StageSetting, replica_stride: int = 1) -> list[tuple[str, int]]:
    """(pool, index) of every GPU of the stage, in rank order (tp innermost, then dp)."""
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
    collective formulas of cost.comm apply to a group whose slowest links set these rates."""
    node = base.node.model_copy(
        update={
            "nvlink_bandwidth": inner_Bps,
            "nvlink_efficiency": 1.0,
            "nvlink_latency": inner_latency_s,
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
    """Span (members per node, nodes) of a group of GPUs and a system whose rates are the slowest its
    members use: intra-node (NVLink / PCIe domain) and between nodes (pool network or cluster link,
    with ``active``: GPUs per node sending at once, for nodes whose interface is shared)."""
    nodes = node_counts(cluster, gpus)
    pools = sorted({p for p, _ in gpus})
    systems = [cluster.pool(p).system for p in pools]
    inner = min(s.node.nvlink_bandwidth * s.node.nvlink_efficiency for s in systems)
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
    per_node = max(nodes.values())
    span = (
        GroupSpan(len(gpus), per_node, len(nodes))
        if len(nodes) > 1
        else GroupSpan(len(gpus), len(gpus), 1)
    )
    return span, synthetic_system(systems[0], inner, inner_lat, outer, outer_lat)


def _tp_span(system: SystemSpec, tp: int) -> GroupSpan:
    domain = system.node.gpus_per_domain
    return GroupSpan(tp, min(tp, domain), max(1, tp // domain))


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
    cluster: ClusterSpec, a_slices, a_tp: int, b_slices, b_tp: int, receiver: bool = False
) -> tuple[tuple[tuple[float, float], ...], ...]:
    """For each data-parallel replica on one side of the boundary between stage a and the next stage b
    (the senders of a, or with ``receiver`` the receivers of b), the (achieved bytes/s, latency) of the
    link to each of its peers (reshard_peers): the node's NVLink/PCIe domain when the two GPUs share a
    node, else the pools' network or the cluster's link between them."""
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
            return node.nvlink_bandwidth * node.nvlink_efficiency, node.nvlink_latency
        return cluster.link_rate(pa, pb, a_nodes[na], b_nodes[nb])

    peers = reshard_peers(len(src), len(dst))
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
    sides = p2p_links(cluster, a.slices, a.tp, b.slices, b.tp, receiver)
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
    or a, each side with its own per-GPU bytes (stages of different dp or tp reshard: p2p_time_s): one batched exchange t(max(fwd, bwd)) or separate blocking transfers t(fwd) + t(bwd)
    (EngineRules.transfers_per_neighbour), the forward bytes of pipeline_engines.forward_transfer_bytes and
    the backward bytes of backward_transfer_bytes (``sent_bytes``: the activation over tp after each
    block), and, on the receiver, the all-gather that rebuilds an activation split over its TP ranks."""
    if a is None or b is None:
        return np.zeros(len(sent_bytes))
    own = b if receiver else a  # sent_bytes are this side's (its micro-batch and tp)
    whole = sent_bytes * own.tp
    fwd = forward_transfer_bytes(rules, whole, own.tp, common.seq_length)
    bwd = backward_transfer_bytes(rules, whole, own.tp)
    if rules.transfers_per_neighbour == 1:
        out = p2p_time_s(cluster, a, b, np.maximum(fwd, bwd), receiver)
    else:
        out = p2p_time_s(cluster, a, b, fwd, receiver) + p2p_time_s(cluster, a, b, bwd, receiver)
    if receiver and rules.gather_after_recv and rules.p2p_split_over_tp and b.tp > 1:
        system = cluster.pool(b.slices[0][0]).system
        out = out + linear_collective("all_gather", _tp_span(system, b.tp), system).time_s(whole)
    return out


# ---- one stage -----------------------------------------------------------------------------------
def layer_shape_for(common: Common, setting: StageSetting) -> LayerShape:
    return LayerShape(
        tp=setting.tp,
        cp=1,
        micro_batch=setting.micro_batch,
        seq_length=common.seq_length,
        sequence_parallel=common.sequence_parallel and setting.tp > 1,
        attention=common.attention,
        dtype=common.dtype,
        recompute_modules=recompute_modules_of(setting.recompute_ops),
    )


def _block_activation_bytes(
    model: ModelSpec, ref: BlockRef, shape: LayerShape, recompute: str
) -> float:
    """Bytes one block keeps per micro-batch (cost.memory rules; T5's cross-attention adds its own)."""
    if ref.kind == "embedding":
        return mem.embedding_activation_bytes(ref.width, shape)
    if ref.kind == "patch_embedding":
        return mem.embedding_activation_bytes(ref.width, shape)
    if ref.kind in ("lm_head", "classifier"):
        head_shape = shape
        if model.architecture == "encoder_decoder":
            head_shape = shape._replace(seq_length=decoder_seq(model, shape.seq_length))
        if ref.kind == "classifier":
            return mem.classifier_activation_bytes(ref.width, shape)
        return mem.lm_head_activation_bytes(ref.width, head_shape)
    if ref.kind == "cross_decoder":
        dec = shape._replace(seq_length=decoder_seq(model, shape.seq_length))
        return mem.layer_activation_bytes(
            ref.width, dec, recompute
        ) + cross_layer_extra_activation_bytes(ref.width, dec, shape.seq_length, recompute)
    return mem.layer_activation_bytes(ref.width, shape, recompute)


def _recompute_mode(setting: StageSetting) -> str:
    """Per-op recompute is selective recompute of the modules the ops belong to (``recompute_modules_of``:
    the op graph marks their ops re-run, graph.ops.mark_recomputed; memory drops what they store)."""
    return "selective" if setting.recompute_ops else setting.recompute


@dataclass(frozen=True)
class StageArrays:
    """Per-block terms of one stage setting over the model's whole block list (index k = block k), so
    that the stage holding any range [a, b) is a difference of prefix sums: the estimator reads one
    range, the search (search/hetero.py) every range at once. ``parts[pool]`` holds per-micro-batch
    BlockTerms seconds (schedule.step.block_terms) on that pool's GPUs; ``inputs`` is the stage's own
    StepInputs (its gradient group on its GPUs, its HBM, its state bytes) for schedule.step's
    ``tail_terms`` and ``stage_memory_terms``."""

    parts: dict[str, dict[str, np.ndarray]]
    params: np.ndarray
    acts: np.ndarray  # kept per in-flight micro-batch
    held: np.ndarray  # kept once (the head's logits, Korthikanti §4.3)
    buffers: np.ndarray  # working buffers a layer needs (the stage holds the largest)
    p2p_in: np.ndarray  # [a]: transfers with the previous stage when the stage starts at block a
    p2p_out: np.ndarray  # [b]: transfers with the next stage when the stage ends before block b
    inputs: StepInputs
    capacity: float


@lru_cache(maxsize=4096)
def _pool_parts(
    model: ModelSpec,
    system: SystemSpec,
    shape: LayerShape,
    recompute: str,
    first_and_last: bool,
    async_tp: bool = True,
    host_s: tuple[float, float] = (0.0, 0.0),
) -> dict:
    """Per-block BlockTerms seconds on one pool's GPUs: the foundation's op-time and collective sums
    (stages.block_compute / block_comm) composed by schedule.step.block_terms; without ``async_tp``
    (EngineRules.async_tp_backward) nothing hides the backward TP collectives; ``host_s`` (forward,
    backward) host seconds per transformer layer (pipeline_engines.host_layer_times_s) are added to its
    forward and backward (and to its recompute under full recomputation, which re-runs the forward)."""
    blocks = model_blocks(model)
    tp_span = _tp_span(system, shape.tp)
    arrays = {name: np.zeros(len(blocks)) for name in BLOCK_TERM_NAMES}
    seen: dict = {}
    for k, ref in enumerate(blocks):
        if ref not in seen:
            graph = block_graph(model, ref, shape, first_and_last)
            code = RECOMPUTE_CODES[recompute] if ref.is_layer else 0
            comm = block_comm(graph, system, tp_span, NO_SPAN)
            if not async_tp:
                comm = comm._replace(
                    tp_backward=comm.tp_backward
                    + comm.tp_hidden_by_dgrad
                    + comm.tp_hidden_by_wgrad,
                    tp_hidden_by_dgrad=0.0,
                    tp_hidden_by_wgrad=0.0,
                    tp_backward_price=0.0,
                )
            terms = block_terms(block_compute(graph, system, shape.dtype), comm, code, False)
            if ref.is_layer and any(host_s):
                terms = replace(
                    terms,
                    forward=terms.forward + host_s[0],
                    backward=terms.backward + host_s[1],
                    recompute=terms.recompute + (host_s[0] if recompute == "full" else 0.0),
                )
            seen[ref] = terms
        for name in BLOCK_TERM_NAMES:
            arrays[name][k] = getattr(seen[ref], name)
    return arrays


@lru_cache(maxsize=4096)
def _block_static(
    model: ModelSpec, shape: LayerShape, recompute: str, first_and_last: bool
) -> dict:
    """Per-block parameters, activation bytes, buffers and the bytes sent after each block."""
    blocks = model_blocks(model)
    memo: dict = {}
    rows = []
    for ref in blocks:
        if ref not in memo:
            mode = recompute if ref.is_layer else "none"
            memo[ref] = (
                block_graph(model, ref, shape, first_and_last).weight_params,
                _block_activation_bytes(model, ref, shape, mode),
                layer_buffer_bytes(ref.width, shape, recompute) if ref.is_layer else 0.0,
            )
        rows.append(memo[ref])
    params, acts, buffers = (np.array(col, dtype=float) for col in zip(*rows))
    is_head = np.array([ref.kind in ("lm_head", "classifier") for ref in blocks])
    sent = np.array(
        [0.0] + [boundary_bytes(model, blocks, k - 1, shape) for k in range(1, len(blocks) + 1)]
    )
    return dict(
        params=params,
        acts=np.where(is_head, 0.0, acts),
        held=np.where(is_head, acts, 0.0),
        buffers=buffers,
        sent=sent,
    )


@lru_cache(maxsize=65536)
def _gradient_group(cluster: ClusterSpec, slices, tp: int, dp: int) -> GradientGroup:
    """The stage's data-parallel group (its TP-rank-0 GPUs, every replica) with its collectives in linear
    form on the slowest links its members use (a synthetic system), each the faster of the hierarchical
    and the flat-ring shape (cost.comm.fastest_collective)."""
    if dp <= 1:
        return gradient_group(cluster.pools[0].system, GroupSpan(1, 1, 1))
    every = [(p, first + k) for p, first, count in slices for k in range(count)]
    span, link_system = group_links(
        cluster, every[::tp], node_counts(cluster, every)
    )  # all TP ranks reduce at once
    return GradientGroup(
        span.size,
        *(
            fastest_collective(k, span, link_system)
            for k in ("all_reduce", "reduce_scatter", "all_gather")
        ),
    )


@lru_cache(maxsize=8192)
def stage_arrays(
    model: ModelSpec,
    cluster: ClusterSpec,
    common: Common,
    setting: StageSetting,
    prev: StageSetting | None,
    nxt: StageSetting | None,
) -> StageArrays:
    """Every per-block term of ``setting`` and its own StepInputs (module docstring for the rules)."""
    shape = layer_shape_for(common, setting)
    recompute = _recompute_mode(setting)
    first_and_last = setting.pp == 1
    pools = sorted({p for p, _, _ in setting.slices})
    systems = [cluster.pool(p).system for p in pools]
    rules = common.rules
    parts = {
        pool: _pool_parts(
            model,
            system,
            shape,
            recompute,
            first_and_last,
            rules.async_tp_backward,
            host_layer_times_s(rules),
        )
        for pool, system in zip(pools, systems)
    }
    static = _block_static(model, shape, recompute, first_and_last)
    p2p_in = p2p_exchange_s(cluster, rules, common, prev, setting, static["sent"], receiver=True)
    p2p_out = p2p_exchange_s(cluster, rules, common, setting, nxt, static["sent"], receiver=False)
    slowest = min(systems, key=lambda s: s.accelerator.hbm_bandwidth * s.accelerator.efficiency.hbm)
    terms = system_terms(slowest, common.dtype)
    if rules.gradient_bytes:
        terms["grad_bytes"] = rules.gradient_bytes
    terms["reserved_bytes"] = max(s.accelerator.reserved_memory for s in systems)
    knobs = GridKnobs(
        vpp=1,
        interleaved=False,
        gpipe=common.schedule == "gpipe",
        zero=common.zero,
        overlap_dp_grad_reduce=common.overlap_dp_grad_reduce and rules.dp_overlap,
        overlap_param_gather=True,
        offload_weights=False,
        offload_activations=False,
        offload_optimizer=False,
    )
    inputs = StepInputs(
        stages=(),
        pp=setting.pp,
        microbatches=setting.microbatches,
        gradient_groups={"dense": _gradient_group(cluster, setting.slices, setting.tp, setting.dp)},
        knobs=knobs,
        **terms,
    )
    return StageArrays(
        parts=parts,
        params=static["params"],
        acts=static["acts"] * rules.activation_memory_factor,
        held=static["held"] * rules.activation_memory_factor,
        buffers=static["buffers"],
        p2p_in=p2p_in,
        p2p_out=p2p_out,
        inputs=inputs,
        capacity=min(s.accelerator.hbm_capacity for s in systems),
    )


def _ranged(values: np.ndarray) -> np.ndarray:
    """[a, b] → Σ values[a:b] for every a ≤ b (negative below the diagonal: callers mask b ≤ a)."""
    c = np.concatenate([[0.0], np.cumsum(values)])
    return c[None, :] - c[:, None]


def range_stage(arr: StageArrays, index: int) -> Stage:
    """The stage holding blocks [a, b), every a ≤ b at once, as one schedule.step.Stage whose single
    block carries [n+1, n+1] arrays: BlockTerms of the slowest pool, parameters, activations, buffers."""
    n = len(arr.params)
    best = best_total = None
    for pool_parts in arr.parts.values():
        sums = {name: _ranged(pool_parts[name]) for name in BLOCK_TERM_NAMES}
        total = sum(sums.values())
        if best is None:
            best, best_total = sums, total
        else:
            slower = total > best_total
            best = {name: np.where(slower, sums[name], best[name]) for name in BLOCK_TERM_NAMES}
            best_total = np.maximum(total, best_total)
    buffers = np.zeros((n + 1, n + 1))
    for a in range(n):
        buffers[a, a + 1 :] = np.maximum.accumulate(arr.buffers[a:])
    block = BlockCost(
        "decoder",
        BlockTerms(**best),
        _ranged(arr.params),
        _ranged(arr.acts),
        _ranged(arr.held),
        buffers,
    )
    return Stage(index, 1, ((block, 1),), arr.p2p_in[:, None] + arr.p2p_out[None, :])


def stage_at(arr: StageArrays, index: int, start: int, stop: int) -> Stage:
    """The stage holding blocks [start, stop) as one schedule.step.Stage of scalar terms carrying its own
    StepInputs (so compose_step prices its tail on its own GPUs and links): element [start, stop] of
    ``range_stage``'s arrays."""
    ranged = range_stage(arr, index)
    block = ranged.blocks[0][0]
    pick = lambda value: float(np.asarray(value)[start, stop])  # noqa: E731
    terms = BlockTerms(**{name: pick(getattr(block.terms, name)) for name in BLOCK_TERM_NAMES})
    one = BlockCost(
        "decoder",
        terms,
        pick(block.params),
        pick(block.activation_bytes),
        pick(block.held_bytes),
        pick(block.buffer_bytes),
    )
    return Stage(index, 1, ((one, 1),), pick(ranged.p2p_s), inputs=arr.inputs)


def range_matrices(arr: StageArrays, index: int) -> dict[str, np.ndarray]:
    """Per-micro-batch work and its parts, tail (exposed DP sync + optimizer) and memory of the stage for
    every block range [a, b) ([n+1, n+1] arrays), through schedule.step's stage_work, tail_terms and
    stage_memory_terms on the stage's own StepInputs."""
    stage = range_stage(arr, index)
    work = stage_work(stage)
    dp, optimizer, _ = tail_terms(arr.inputs, stage, work)
    memory = stage_memory_terms(arr.inputs, stage, index)
    out = dict(
        work,
        dp=dp,
        optimizer=optimizer,
        params=stage.blocks[0][0].params,
        memory=memory,
        peak=memory["peak_bytes"],
    )
    out["work"] = sum(work.values())
    out["tail"] = dp + optimizer
    return out


def stage_cost(
    model: ModelSpec,
    cluster: ClusterSpec,
    common: Common,
    setting: StageSetting,
    start: int,
    stop: int,
    prev: StageSetting | None,
    nxt: StageSetting | None,
) -> StageCost:
    """Per-micro-batch time, tail and memory of ``setting`` holding blocks [start, stop): one entry of
    ``range_matrices`` (the search reads the same matrices)."""
    arr = stage_arrays(model, cluster, common, setting, prev, nxt)
    m = range_matrices(arr, setting.index)
    at = lambda value: float(np.asarray(value)[start, stop]) if np.ndim(value) else float(value)  # noqa: E731
    memory = StageMemory(
        stage=setting.index,
        **{k: at(v) for k, v in m["memory"].items() if k != "peak_bytes"},
        capacity_bytes=arr.capacity,
    )
    return StageCost(
        at(m["forward"]),
        at(m["backward"]),
        at(m["recompute"]),
        at(m["tp_forward"]) + at(m["tp_backward"]),
        at(m["pp"]),
        at(m["dp"]),
        at(m["optimizer"]),
        at(m["params"]),
        memory,
    )


def tied_embedding_sync_s(
    model: ModelSpec, cluster: ClusterSpec, common: Common, first: StageSetting, last: StageSetting
) -> float:
    """All-reduce of the tied word-embedding gradient between the first and the last stage (Megatron-LM's
    embedding group; DeepSpeed's ReduceTiedGrads): V·h/t parameters at the engine's tied_grad_bytes, 2-member group."""
    if not model.tie_embeddings or first.index == last.index or model.is_vit:
        return 0.0
    members = [_member_gpus(first)[0], _member_gpus(last)[0]]
    span, link_system = group_links(
        cluster, members, node_counts(cluster, _member_gpus(first) + _member_gpus(last))
    )
    grad_bytes = common.rules.tied_grad_bytes
    return float(
        linear_collective("all_reduce", span, link_system).time_s(
            model.vocab * model.hidden / first.tp * grad_bytes
        )
    )


@dataclass(frozen=True)
class StagePlanEstimate:
    """Step time and per-stage details of a non-uniform plan."""

    step_time_s: float
    breakdown: TimeBreakdown
    stage_work_s: tuple[float, ...]
    stage_tail_s: tuple[float, ...]
    stages: tuple[StageMemory, ...]
    stage_summary: tuple[dict, ...] = field(default_factory=tuple)
    gpus: int = 0
    tokens_per_step: int = 0
    problems: tuple[
        str, ...
    ] = ()  # why the plan cannot run at all, whatever its memory (runnable_problems)

    @property
    def fits(self) -> bool:
        return all(s.fits for s in self.stages) and not self.problems

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s

    def to_dict(self) -> dict:
        return {
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "fits": self.fits,
            "problems": list(self.problems),
            "gpus": self.gpus,
            "breakdown": self.breakdown.__dict__,
            "stages": [
                s | {"work_per_microbatch_s": w, "tail_s": t} | m.to_dict()
                for s, w, t, m in zip(
                    self.stage_summary, self.stage_work_s, self.stage_tail_s, self.stages
                )
            ],
        }


def common_of(plan: StagePlanSpec) -> Common:
    return Common(
        plan.seq_length,
        plan.dtype,
        plan.attention,
        plan.sequence_parallel,
        plan.zero,
        plan.schedule,
        plan.overlap_dp_grad_reduce,
        plan.engine,
    )


def stage_settings(plan: StagePlanSpec, cluster: ClusterSpec) -> list[StageSetting]:
    devices = stage_devices(plan, cluster)
    return [
        StageSetting(
            tuple(devices[i]),
            s.tp,
            s.data_parallel,
            plan.stage_micro_batch(i),
            s.recompute,
            s.recompute_ops,
            i,
            plan.pp,
            plan.n_microbatches,
        )
        for i, s in enumerate(plan.stages)
    ]


def compose_stages(
    stages: tuple[Stage, ...], extra_tail_s: float = 0.0
) -> tuple[float, TimeBreakdown]:
    """The step of unequal stages through schedule.step.compose_step, each stage with its own StepInputs
    (Stage.inputs): m · max_i W_i + bubble (Σ W_i − max W_i, step/schedules.py) + the longest tail,
    plus a step-level tail that follows every stage's (the tied-embedding sync)."""
    out = compose_step(replace(stages[0].inputs, stages=stages))
    parts = {f.name: float(out[f.name]) for f in fields(TimeBreakdown)}
    breakdown = TimeBreakdown(**(parts | {"dp_comm_s": parts["dp_comm_s"] + extra_tail_s}))
    return breakdown.total_s(), breakdown


def estimate_stage_plan(
    model: ModelSpec, cluster: ClusterSpec, plan: StagePlanSpec, rules: EngineRules | None = None
) -> StagePlanEstimate:
    """Predict the step time and memory per stage of a non-uniform plan (module docstring); ``rules``, when
    given, replace the plan engine's ENGINES entry (validate.cv refits their fitted constants)."""
    check_stage_plan(plan, model, cluster)
    for i, s in enumerate(plan.stages):
        if s.recompute_ops:
            allowed = recomputable_names(model, plan.seq_length, plan.attention, plan.dtype)
            bad = [o for o in s.recompute_ops if o not in allowed]
            if bad:
                raise InputError(
                    f"plan.stages.{i}.recompute_ops: {bad[0]!r} is not allowed; ops that can be re-run alone: {', '.join(sorted(allowed))}"
                )
    common = replace(common_of(plan), engine_rules=rules)
    settings = stage_settings(plan, cluster)
    ranges = stage_block_ranges(plan, len(model_blocks(model)))
    neighbours = [
        (settings[i - 1] if i else None, settings[i + 1] if i + 1 < plan.pp else None)
        for i in range(plan.pp)
    ]
    costs = [
        stage_cost(model, cluster, common, st, a, b, *nb)
        for st, (a, b), nb in zip(settings, ranges, neighbours)
    ]
    stages = tuple(
        stage_at(stage_arrays(model, cluster, common, st, *nb), st.index, a, b)
        for st, (a, b), nb in zip(settings, ranges, neighbours)
    )
    tied = tied_embedding_sync_s(model, cluster, common, settings[0], settings[-1])
    step, breakdown = compose_stages(stages, tied)
    summary = tuple(
        {
            "stage": i,
            "blocks": [a, b],
            "layers": sum(1 for ref in model_blocks(model)[a:b] if ref.is_layer),
            "devices": [{"pool": p, "gpus": n} for p, _, n in st.slices],
            "tp": st.tp,
            "dp": st.dp,
            "micro_batch": st.micro_batch,
            "recompute": _recompute_mode(st),
        }
        for i, (st, (a, b)) in enumerate(zip(settings, ranges))
    )
    return StagePlanEstimate(
        step_time_s=step,
        breakdown=breakdown,
        stage_work_s=tuple(c.work_s for c in costs),
        stage_tail_s=tuple(c.tail_s for c in costs),
        stages=tuple(c.memory for c in costs),
        stage_summary=summary,
        gpus=plan.gpus,
        tokens_per_step=plan.global_batch * plan.seq_length,
        problems=runnable_problems(costs),
    )


def runnable_problems(costs: list[StageCost]) -> tuple[str, ...]:
    """Stages that cannot run whatever their memory: a stage holding no parameters gives its optimizer an
    empty parameter list, which PyTorch refuses (torch.optim.Optimizer.__init__: "optimizer got an empty
    parameter list"); both Megatron-LM and DeepSpeed build one optimizer per pipeline rank."""
    return tuple(
        f"stage {i} holds no parameters: its optimizer cannot be built"
        for i, c in enumerate(costs)
        if c.params <= 0
    )
