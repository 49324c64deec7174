"""Collectives costed by algorithm on the network tiers a group spans.

Placement (Megatron-LM's rank order as data, innermost first, default "tp-cp-dp-pp"): a group's
members are ``stride`` ranks apart, where stride is the product of the degrees of the groups
placed inside it. With D GPUs per NVLink domain a group of n spans ``n_in`` GPUs per domain and
``n_out = n / n_in`` domains.

Algorithms: two-level ring (reduce-scatter inside the domain, ring across domains on 1/n_in of the
data through each GPU's own NIC, all-gather inside the domain) — the hierarchical scheme of the
NERSC model (Subramanian et al. 2024, arXiv:2410.00273) and of NCCL's NVLS/tree variants; bandwidth terms
are the ring volumes of Thakur et al. 2005 (all-reduce 2(n-1)/n·S, reduce-scatter and all-gather
(n-1)/n·S per rank). Latency as NCCL's own cost model states it (NVIDIA/nccl src/graph/tuning.cc,
ncclTopoTuneModel, v2.7-v2.30): all-gather and reduce-scatter run the ring only, one flat ring through
all n ranks whose hops are NVLink except the o−1 (o domains) that cross the network; all-reduce the
faster of that ring and NCCL's tree (``collective_latency_s``). Per-hop α: the catalog's
``node.nvlink_latency`` and ``network.latency``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from paraplan.cost.collnet import sharp_all_reduce
from paraplan.cost.comm_contention import tier_overlap_costs, tier_sm_shares
from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import SystemSpec


class GroupSpan(NamedTuple):
    """How one parallel group sits on the hierarchy: members per domain and domains spanned (a NamedTuple: the cost
    caches key on it, and a tuple hashes without a Python call)."""

    size: int
    per_domain: int
    domains: int


def group_stride(plan: PlanSpec, group: str) -> int:
    """Rank distance between neighbours of ``group``: product of degrees placed inside it."""
    stride = 1
    for name in plan.placement_order:
        if name == group:
            return stride
        stride *= getattr(plan, name)
    raise KeyError(group)


def placement_strides(plan: PlanSpec) -> dict[str, int]:
    """group_stride of every dimension of the placement order at once."""
    out, stride = {}, 1
    for name in plan.placement_order:
        out[name] = stride
        stride *= getattr(plan, name)
    return out


def group_span(
    plan: PlanSpec,
    system: SystemSpec,
    groups: str | tuple[str, ...],
    strides: dict[str, int] | None = None,
) -> GroupSpan:
    """Members per NVLink domain and domains spanned by one group, or by the product of several
    (e.g. ("cp", "dp"): Megatron-LM reduces gradients over data- and context-parallel ranks together).
    ``strides``: placement_strides(plan), when the caller spans several groups of one plan.

    Members are the ranks Σ_g i_g·stride_g; those below D share rank 0's domain."""
    names = (groups,) if isinstance(groups, str) else groups
    sizes = tuple([getattr(plan, g) for g in names])
    strides = tuple(
        [group_stride(plan, g) for g in names] if strides is None else [strides[g] for g in names]
    )
    return _span_of(sizes, strides, system.node.gpus_per_domain)


@lru_cache(maxsize=8192)
def _span_of(sizes: tuple[int, ...], strides: tuple[int, ...], domain: int) -> GroupSpan:
    """group_span for groups of these sizes and strides on D-GPU domains."""
    offsets = [0]
    for n, stride in zip(sizes, strides):
        offsets = [
            o + i * stride for o in offsets for i in range(min(n, -(-(domain - o) // stride)))
        ]
    size = math.prod(sizes)
    per_domain = max(1, min(size, len(offsets)))
    return GroupSpan(size, per_domain, math.ceil(size / per_domain))


def span_of_domains(members_per_domain) -> GroupSpan:
    """A group's span from its members on each domain it touches: (members, the most members on one
    domain, domains touched). The one rule for a group of known ranks or GPUs: a uniform plan's stage
    (``placed_span``) and a per-stage plan's GPUs (step.stage_links.group_links). For a group that tiles
    its domains (every domain holds a of its n members) it is (n, a, n/a), ``group_span``'s."""
    counts = tuple(members_per_domain)
    return GroupSpan(sum(counts), max(counts), len(counts))


@lru_cache(maxsize=4096)
def placed_span(first: int, members: int, stride: int, domain: int) -> GroupSpan:
    """span_of_domains of the group of ranks first + k·stride (k < ``members``) on D-GPU domains (rank r
    on domain ⌊r/D⌋): a uniform plan's stage s of S GPUs holds ranks [s·S, (s+1)·S) and its data-parallel
    group is its tp-rank-0 ranks s·S + k·tp (Megatron-Core parallel_state.RankGenerator, order
    "tp-cp-ep-dp-pp", tp fastest: NVIDIA/Megatron-LM at 00caa53a megatron/core/parallel_state.py
    generate_masked_orthogonal_rank_groups), so a stage that straddles a node boundary spans two."""
    if members < 1 or stride < 1:
        return span_of_domains(_members_per_domain(first, members, stride, domain))
    if stride >= domain:  # consecutive members differ by >= D ranks: one on each domain
        return GroupSpan(members, 1, members)
    # per domain n from rank first's to rank last's, the k with low <= first + k·stride <= high (its ranks in
    # [first, last]): ⌊(high − first)/stride⌋ − ⌈(low − first)/stride⌉ + 1, in integers
    last = first + (members - 1) * stride
    starts = np.arange(first // domain, last // domain + 1, dtype=np.int64) * domain
    low, high = np.maximum(starts, first), np.minimum(starts + (domain - 1), last)
    counts = (high - first) // stride + (first - low) // stride + 1
    return span_of_domains(counts[counts > 0].tolist())


def _members_per_domain(first: int, members: int, stride: int, domain: int):
    """The members of the group of ``placed_span`` on each domain it touches, counted one rank at a time."""
    counts: dict[int, int] = {}
    for k in range(members):
        node = (first + k * stride) // domain
        counts[node] = counts.get(node, 0) + 1
    return counts.values()


def _bandwidths(system: SystemSpec, peers: int = 1) -> tuple[float, float]:
    """(NVLink-tier, scale-out) achieved bytes/s of one GPU: inside the domain towards ``peers`` members
    of its group (specs.fabric NodeSpec.peer_bandwidth: all of B·η behind a switch, the links to those
    peers on a full mesh), across domains its NIC's B·η."""
    inner = system.node.peer_bandwidth(peers)
    outer = system.network.nic_bandwidth * system.network.efficiency
    return inner, outer


def log2i(n: int) -> int:
    """⌊log2 n⌋ for n >= 1 (NCCL's log2i, the tree depth over n nodes in tuning.cc)."""
    return max(int(n), 1).bit_length() - 1


def ring_hops(steps: int, inter_steps: int) -> tuple[int, int]:
    """(NVLink hops, scale-out hops) of a ring of ``steps`` hops, ``inter_steps`` of them across domains:
    (steps − inter_steps, inter_steps) — NCCL tuning.cc ncclTopoTuneModel (v2.7 on), Ring latency
    (nsteps − nInterSteps)·intraLat + nInterSteps·interLat (its per-call baseLat not charged)."""
    return steps - inter_steps, inter_steps


def tree_all_reduce_hops(per_domain: int, domains: int) -> tuple[int, int]:
    """(NVLink hops, scale-out hops) of NCCL's tree all-reduce, a members per domain, o domains:
    (2·(a−1), 2·⌊log2 o⌋) — NCCL tuning.cc ncclTopoTuneModel, Tree latency 2·((nRanks/nNodes − 1)·intraLat
    + log2i(nNodes)·interLat): a chain inside the node and a double binary tree across nodes, up and down."""
    return 2 * (per_domain - 1), 2 * log2i(domains)


def ring_steps(kind: str, span: GroupSpan) -> tuple[int, int]:
    """(hops, hops across domains) of NCCL's ring for one collective on n ranks in o domains: all-reduce
    (2(n−1), 2(o−1)), all-gather / reduce-scatter (n−1, o−1) (NCCL tuning.cc nsteps, nInterSteps in
    v2.7-v2.11 and v2.23 on; v2.12-v2.22 count 2o inter-node all-reduce steps); broadcast / reduce the
    pipelined chain along the same ring (n−1, o−1)."""
    n, o = span.size, span.domains
    if kind == "all_reduce":
        return 2 * (n - 1), 2 * (o - 1)
    return n - 1, o - 1


def collective_latency_hops(
    kind: str, span: GroupSpan, alpha_in: float, alpha_out: float
) -> tuple[int, int]:
    """(NVLink hops, scale-out hops) of the algorithm NCCL runs for one call (tuning.cc ncclTopoTuneModel):
    all-reduce the one of ring_hops and tree_all_reduce_hops with the smaller latency at these per-hop α;
    every other collective the ring (NCCL runs all-gather, reduce-scatter, broadcast and reduce on the ring
    only: "if (coll != ncclCollAllReduce && a != NCCL_ALGO_RING) continue;" v2.7-v2.18; v2.19 adds NVLS and
    v2.20 CollNet Direct for switch-offloaded fabrics, v2.23 PAT for one GPU per node, not modelled here: NVLS's
    all-reduce bandwidth is ``nvls_all_reduce_slope``, CollNet / IB SHARP's all-reduce cost.collnet, chosen in
    ``linear_collective`` with its own latency; PAT is not modelled);
    (0, 0) for one member."""
    if span.size <= 1:
        return 0, 0
    ring = ring_hops(*ring_steps(kind, span))
    if kind != "all_reduce":
        return ring
    tree = tree_all_reduce_hops(span.per_domain, span.domains)
    lat = lambda hops: hops[0] * alpha_in + hops[1] * alpha_out  # noqa: E731
    return tree if lat(tree) < lat(ring) else ring


def collective_latency_s(
    kind: str, span: GroupSpan, alpha_in: float, alpha_out: float
) -> tuple[float, float]:
    """(NVLink, scale-out) latency of one call: hops_in·α_in, hops_out·α_out of collective_latency_hops
    (NCCL tuning.cc: (nsteps − nInterSteps)·intraLat + nInterSteps·interLat for the ring)."""
    hops_in, hops_out = collective_latency_hops(kind, span, alpha_in, alpha_out)
    return hops_in * alpha_in, hops_out * alpha_out


def _all_to_all_latency_s(n: int, alpha: float) -> float:
    """min(ring (n−1)·α, tree 2·⌈log2 n⌉·α) on one tier: all-to-all is NCCL grouped send/recv, which
    tuning.cc does not cost; kept as before NCCL's ring/tree latencies were adopted (issue 8)."""
    if n <= 1:
        return 0.0
    return min((n - 1) * alpha, 2 * math.ceil(math.log2(n)) * alpha)


@dataclass(frozen=True)
class LinearCollective:
    """One collective on one group in linear form, tier by tier: time(S) = S·(a_in + a_out) + l_in + l_out
    for a non-empty S-byte buffer (0 for an empty one), the NVLink tier (in) and the scale-out tier (out).

    Fields may be floats or numpy arrays (one entry per candidate plan). ``cost_in`` / ``cost_out``
    are each tier's overlap cost, the share of that tier's time (latency included) still paid when the
    collective hides behind compute (the SMs NCCL's CTAs hold); ``hbm_in`` / ``hbm_out`` the share of its
    byte time paid for the HBM bandwidth it moves (cost.comm_contention.tier_overlap_costs)."""

    slope_in: Any
    latency_in: Any
    slope_out: Any
    latency_out: Any
    cost_in: Any
    cost_out: Any
    hbm_in: Any = 0.0
    hbm_out: Any = 0.0

    def tier_times_s(self, size_bytes):
        """(NVLink-tier seconds, scale-out-tier seconds) of one call on an S-byte buffer."""
        on = size_bytes > 0  # bool or bool array: an empty buffer costs nothing
        return (size_bytes * self.slope_in + self.latency_in) * on, (
            size_bytes * self.slope_out + self.latency_out
        ) * on

    def time_s(self, size_bytes, tier_times=None):
        """S·(a_in + a_out) + l_in + l_out (0 for an empty buffer); ``tier_times``: the call's
        ``tier_times_s(size_bytes)`` when the caller has it already."""
        inner, outer = self.tier_times_s(size_bytes) if tier_times is None else tier_times
        return inner + outer

    def hidden_price_s(self, size_bytes, tier_times=None):
        """What the collective still costs when completely hidden: each tier's time × its own overlap
        cost, plus each tier's byte time (S·slope, no latency: no bytes move then) × its HBM share,
        c_in·t_in + c_out·t_out + h_in·S·a_in + h_out·S·a_out (so crossing a node never makes the NVLink
        share cheaper, and a faster link never a dearer HBM price). ``tier_times``: the call's
        ``tier_times_s(size_bytes)`` when the caller has it already."""
        inner, outer = self.tier_times_s(size_bytes) if tier_times is None else tier_times
        on = size_bytes > 0
        hbm = (self.hbm_in * self.slope_in + self.hbm_out * self.slope_out) * size_bytes * on
        return self.cost_in * inner + self.cost_out * outer + hbm


def nvls_all_reduce_slope(per_domain: int, inner: float, node) -> float:
    """Seconds per byte of an all-reduce's NVLink tier, a members per domain at B·η = ``inner``: the faster of
    NCCL's ring, 2(a−1)/a / (B·η), and NVLink SHARP (NVLS) where the domain is an NVSwitch that runs it
    (``node.nvls_efficiency`` e > 0): the switch reduces (multimem.ld_reduce) and multicasts (multimem.st),
    so each GPU sends and receives ~S once, 1 / (B·η·e·(c−1)/c) with c = ``node.nvls_channels``.

    NCCL's tuner states the same ratio (NVIDIA/nccl src/graph/tuning.cc ncclTopoTuneModel, v2.17-v2.30):
    NVLS busBw = 2·bwIntra·nvlsEfficiency·(nCh−1)/nCh against the ring's bwIntra, both converted to
    algorithm bandwidth by n/(2(n−1)) — on an 8-GPU H100 node 2·0.85·15/16 = 1.59× the ring's bus
    bandwidth at NCCL's bwIntra, here 1.75·0.85·15/16 = 1.39× at B·η (337.5 → 470 GB/s bus bandwidth at
    450 GB/s · 0.75; nccl-tests all_reduce_perf on 8 H100 SXM reports 460-480 GB/s with NVLS, ~360 GB/s
    ring). With a = 2 the ring moves S/2 and stays faster. Across domains (NVLS_TREE) the NIC tier keeps its
    ring term. NCCL runs all-gather and reduce-scatter on NVLS only at (ppn−1)/ppn of that bus bandwidth
    without the ring's n/(n−1), slower than the ring: they keep the ring. Latency stays the ring / tree hop
    count (collective_latency_s): NCCL's NVLS latency, 25 µs (hwLatencies NVLINK NVLS Simple), is of the
    order of its 8-GPU ring's 8.4 + 14·3.4 µs in the same table."""
    ring = 2 * (per_domain - 1) / per_domain / inner
    eff, channels = node.nvls_efficiency, node.nvls_channels
    if eff <= 0 or node.topology != "switch" or per_domain < 2:
        return ring
    return min(ring, 1.0 / (inner * eff * (channels - 1) / channels))


@lru_cache(maxsize=4096)
def linear_collective(kind: str, span: GroupSpan, system: SystemSpec) -> LinearCollective:
    """The one statement of the collective formulas, tier by tier (module docstring): with a members
    per domain and o domains, all-reduce 2(a-1)/a·S/B_nvlink + 2(o-1)/o·(S/a)/B_nic, all-gather and
    reduce-scatter (a-1)/a·S/B_nvlink + (o-1)/o·(S/a)/B_nic (Thakur et al. 2005 ring volumes,
    hierarchical as in the NERSC model; the all-reduce's NVLink tier NVLS's where it is faster,
    ``nvls_all_reduce_slope``, its NIC tier InfiniBand SHARP's where the fabric has it, the run enabled
    it and it is faster, cost.collnet.sharp_all_reduce), send/recv S/B of the slowest link a neighbour pair uses;
    B_nvlink the links to the a − 1 peers (one for send/recv) on a full-mesh domain (_bandwidths);
    latency per tier collective_latency_s (NCCL's flat ring, or tree for all-reduce)."""
    a, o = span.per_domain, span.domains
    # a send uses the link to its one peer; a collective the links to its a - 1 domain peers
    peers = 1 if kind == "send_recv" else a - 1
    c_in, c_out, *hbm = tier_overlap_costs(kind, o > 1, system, peers)
    if span.size <= 1:
        return LinearCollective(0.0, 0.0, 0.0, 0.0, c_in, c_out, *hbm)
    inner, outer = _bandwidths(system, peers)
    alpha_in, alpha_out = system.node.nvlink_latency, system.network.latency
    if kind == "all_reduce":
        lat_in, lat_out = collective_latency_s(kind, span, alpha_in, alpha_out)
        slope_in, slope_out = (
            nvls_all_reduce_slope(a, inner, system.node),
            2 * (o - 1) / o / a / outer,
        )
        if sharp := sharp_all_reduce(a, o, slope_out, system.network, alpha_in):
            slope_out, lat_in, lat_out = sharp
        return LinearCollective(slope_in, lat_in, slope_out, lat_out, c_in, c_out, *hbm)
    if kind in ("all_gather", "reduce_scatter"):
        lat_in, lat_out = collective_latency_s(kind, span, alpha_in, alpha_out)
        return LinearCollective(
            (a - 1) / a / inner, lat_in, (o - 1) / o / a / outer, lat_out, c_in, c_out, *hbm
        )
    if kind in ("broadcast", "reduce"):
        return rooted_collective(span, system)
    if kind == "send_recv":
        if o > 1:
            return LinearCollective(0.0, 0.0, 1 / outer, alpha_out, c_in, c_out, *hbm)
        return LinearCollective(1 / inner, alpha_in, 0.0, 0.0, c_in, c_out, *hbm)
    raise ValueError(f"no linear form for collective {kind!r}")


def rooted_collective(span: GroupSpan, system: SystemSpec) -> LinearCollective:
    """Broadcast or reduce of an S-byte buffer (SUMMA's panel traffic, 2D tensor parallelism), pipelined
    through the group: every byte crosses each tier once, the slower tier bounds it — the NERSC model's
    two-tier rule (Subramanian et al. 2024, arXiv:2410.00273, its broadcast/reduce time): S/B_nvlink inside
    one domain, S/B_nic with one member per domain, else max(S/(a·B_nic), S/B_nvlink), the a members of a
    domain striping the crossing over their a NICs; NCCL's bus-bandwidth factor for broadcast and reduce is 1
    (nccl-tests doc/PERFORMANCE.md). The whole slope sits on the binding tier (so does its overlap cost);
    latency the chain along NCCL's ring (NCCL runs broadcast and reduce on the ring only):
    collective_latency_s, (n−o)·α_nvlink + (o−1)·α_nic."""
    a, o = span.per_domain, span.domains
    c_in, c_out, *hbm = tier_overlap_costs("broadcast", o > 1, system, a - 1)
    inner, outer = _bandwidths(system, a - 1)
    lat_in, lat_out = collective_latency_s(
        "broadcast", span, system.node.nvlink_latency, system.network.latency
    )
    nvlink = 1.0 / inner if a > 1 else 0.0
    nic = 1.0 / (a * outer) if o > 1 else 0.0
    if nic >= nvlink:
        return LinearCollective(0.0, lat_in, nic, lat_out, c_in, c_out, *hbm)
    return LinearCollective(nvlink, lat_in, 0.0, lat_out, c_in, c_out, *hbm)


def collective_time_s(kind: str, size_bytes: float, span: GroupSpan, system: SystemSpec) -> float:
    """Seconds of one call: the linear form of ``linear_collective``; ring_exchange is Ring Attention's
    K/V pass, (n-1) neighbour transfers of one chunk (Liu et al. 2023, §3)."""
    return collective_time_and_price_s(kind, size_bytes, span, system)[0]


def collective_time_and_price_s(
    kind: str, size_bytes: float, span: GroupSpan, system: SystemSpec
) -> tuple[float, float]:
    """(seconds, hidden price in seconds: LinearCollective.hidden_price_s) of one call."""
    time, price, _ = collective_costs_s(kind, size_bytes, span, system)
    return time, price


@lru_cache(
    maxsize=65536
)  # a layer's collectives repeat across recompute / layout variants of its shape
def collective_costs_s(
    kind: str, size_bytes: float, span: GroupSpan, system: SystemSpec
) -> tuple[float, float, float]:
    """(seconds, hidden price, NIC-busy seconds) of one call, from one evaluation of the linear form:
    time t_in + t_out, price LinearCollective.hidden_price_s (c_in·t_in + c_out·t_out plus each
    tier's HBM share of its byte time), NIC t_out when the group spans NVLink domains;
    ring_exchange is Ring Attention's K/V pass, (n-1) neighbour transfers of one chunk (Liu et al. 2023, §3)."""
    if span.size <= 1 or size_bytes <= 0:
        return 0.0, 0.0, 0.0
    if (
        kind == "all_to_all"
    ):  # Ulysses context parallelism (graph.transformer): the slower tier bounds it
        time = all_to_all_time_s(size_bytes, span, system)
        _, nic_bytes = all_to_all_split_bytes(size_bytes, span)
        nic = nic_bytes / _bandwidths(system)[1] if span.domains > 1 else 0.0
        return time, overlap_cost(span, system) * time, nic
    steps = 1
    if kind == "ring_exchange":
        kind, steps = "send_recv", span.size - 1
    form = linear_collective(kind, span, system)
    inner, outer = form.tier_times_s(size_bytes)
    nic = outer if span.domains > 1 else 0.0
    return (
        steps * float(inner + outer),
        steps * float(form.hidden_price_s(size_bytes, (inner, outer))),
        steps * float(nic),
    )


def all_reduce_time_s(size_bytes: float, span: GroupSpan, system: SystemSpec) -> float:
    """2(n_in-1)/n_in·S/B_nvlink + 2(n_out-1)/n_out·(S/n_in)/B_nic + latency (hierarchical ring)."""
    return collective_time_s("all_reduce", size_bytes, span, system)


def gather_or_scatter_time_s(size_bytes: float, span: GroupSpan, system: SystemSpec) -> float:
    """All-gather / reduce-scatter of an S-byte (full) buffer: (n_in-1)/n_in·S/B_nvlink +
    (n_out-1)/n_out·(S/n_in)/B_nic + latency (hierarchical ring)."""
    return collective_time_s("all_gather", size_bytes, span, system)


def point_to_point_time_s(size_bytes: float, span: GroupSpan, system: SystemSpec) -> float:
    """One send/recv between neighbours: S / bandwidth of the slowest link a neighbour pair uses + α."""
    return collective_time_s("send_recv", size_bytes, span, system)


def ring_exchange_time_s(chunk_bytes: float, span: GroupSpan, system: SystemSpec) -> float:
    """Ring attention's K/V pass: (n-1) neighbour transfers of one chunk (Liu et al. 2023, §3)."""
    return collective_time_s("ring_exchange", chunk_bytes, span, system)


def overlap_cost(span: GroupSpan, system: SystemSpec) -> float:
    """Share of a single-tier collective's time still paid when it is hidden behind compute: the
    overlap cost of the tier that bounds it, scale-out when the group leaves the NVLink domain
    (cost.comm_contention.tier_overlap_costs: the SM share of NCCL's CTAs, or the system's override;
    the all-to-all's HBM share is not charged: its bytes per tier differ by dispatcher). Multi-tier
    collectives price each tier apart (``LinearCollective.hidden_price_s``)."""
    sm_in, sm_out = tier_sm_shares(span.domains > 1, system)
    return sm_out if span.domains > 1 else sm_in


def priced_exposure_s(total_s, exposed_s, price_s):
    """exposed + (total − exposed)·price/total: the exposed part of a collective plus the price of
    its hidden part, where price is the cost of hiding all of it (c_in·t_in + c_out·t_out)."""
    if not isinstance(total_s, np.ndarray) and not isinstance(
        price_s, np.ndarray
    ):  # scalars: the same IEEE steps
        total = float(total_s)
        share = float(price_s) / total if total > 0 else 0.0
        out = exposed_s + share * (total - exposed_s)
        return out if isinstance(out, np.ndarray) and out.ndim else float(out)
    total = np.asarray(total_s, dtype=float)
    share = np.divide(price_s, total, out=np.zeros_like(total), where=total > 0)
    out = exposed_s + share * (total - exposed_s)
    return out if isinstance(out, np.ndarray) and out.ndim else float(out)


# ---- all-to-all (expert-parallel dispatch and combine; issue 9) -------------------------------
def all_to_all_split_bytes(size_bytes: float, span: GroupSpan) -> tuple[float, float]:
    """(NVLink bytes, NIC bytes) one rank sends in an all-to-all of an S-byte buffer cut in n equal
    chunks: (n_in−1)/n·S to peers in its domain, (n−n_in)/n·S to the other domains (the chunk
    to itself stays local). Total (n−1)/n·S, the pairwise-exchange volume of Thakur et al. 2005 §4."""
    n, n_in = span.size, span.per_domain
    if n <= 1:
        return 0.0, 0.0
    return size_bytes * (n_in - 1) / n, size_bytes * (n - n_in) / n


def hierarchical_all_to_all_time_s(
    nvlink_bytes: float, nic_bytes: float, span: GroupSpan, system: SystemSpec
) -> float:
    """max(nvlink_bytes / B_nvlink, nic_bytes / B_nic) + latency: the peers of an all-to-all are
    reached at once over both tiers (NCCL issues the n−1 sends as one group), and the slower tier
    bounds it — DeepSeek-V3 report (arXiv:2412.19437) §3.2.2: cross-node all-to-all is limited by
    InfiniBand (50 GB/s) beside NVLink (160 GB/s). Latency: _all_to_all_latency_s with the outer tier's
    α when the group leaves the domain, else NVLink's."""
    if span.size <= 1 or (nvlink_bytes <= 0 and nic_bytes <= 0):
        return 0.0
    inner, outer = _bandwidths(system, span.per_domain - 1)
    alpha = system.network.latency if span.domains > 1 else system.node.nvlink_latency
    return max(nvlink_bytes / inner, nic_bytes / outer) + _all_to_all_latency_s(span.size, alpha)


def all_to_all_time_s(size_bytes: float, span: GroupSpan, system: SystemSpec) -> float:
    """All-to-all of an S-byte per-rank buffer: hierarchical_all_to_all_time_s of all_to_all_split_bytes(S)."""
    intra, inter = all_to_all_split_bytes(size_bytes, span)
    return hierarchical_all_to_all_time_s(intra, inter, span, system)


def collective_nic_time_s(
    kind: str, size_bytes: float, span: GroupSpan, system: SystemSpec
) -> float:
    """Seconds one call keeps each GPU's scale-out link (NIC) busy: the scale-out tier of its linear form
    (``LinearCollective.tier_times_s``), 0 for a group inside one NVLink domain. What other collectives
    crossing the same NICs at the same time cannot use (cost.overlap.shared_link_time_s)."""
    return collective_costs_s(kind, size_bytes, span, system)[2]


def ring_step_sync_s(span: GroupSpan, system: SystemSpec) -> float:
    """Synchronisation at the end of one ring-attention step that no compute hides: the receiving
    rank waits for the block to land before its next attention kernel (Liu et al. 2023 §3; Megatron-Core
    p2p CP), taken as one message latency of the link the neighbours use (α of ``linear_collective``)."""
    if span.size <= 1:
        return 0.0
    return system.network.latency if span.domains > 1 else system.node.nvlink_latency


def per_tensor_gather_latency_s(
    form: LinearCollective, extra_calls: Any, priced: bool = False
) -> Any:
    """Latency of the extra calls when a block's ZeRO-3 gather (or reduce-scatter) is issued per weight tensor: k·(l_in + l_out)
    for k extra calls of the same collective (the bytes are unchanged: S·slope summed over the tensors is the
    block's S·slope; DeepSpeed <= 0.5.4 ``_allgather_param``, one all_gather per parameter, microsoft/DeepSpeed
    PR #1188). ``priced``: each tier's latency times its overlap cost (LinearCollective.hidden_price_s)."""
    if priced:
        return extra_calls * (form.cost_in * form.latency_in + form.cost_out * form.latency_out)
    return extra_calls * (form.latency_in + form.latency_out)
