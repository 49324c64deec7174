"""Collectives costed by algorithm on the network tiers a group spans.

Placement (Megatron-LM's rank order as data, innermost first, default "tp-cp-dp-pp"): a group's
members are ``stride`` ranks apart, where stride is the product of the degrees of the groups
placed inside it. With D GPUs per NVLink domain a group of n spans ``n_in`` GPUs per domain and
``n_out = n / n_in`` domains.

Algorithms: two-level ring (reduce-scatter inside the domain, ring across domains on 1/n_in of the
data through each GPU's own NIC, all-gather inside the domain) — the hierarchical scheme of the
NERSC model (seeds/nersc-perf-model-readme.txt) and of NCCL's NVLS/tree variants; bandwidth terms
are the ring volumes of Thakur et al. 2005 (all-reduce 2(n-1)/n·S, reduce-scatter and all-gather
(n-1)/n·S per rank), latency the smaller of ring (steps·α) and tree (2·log2 n·α).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import SystemSpec


@dataclass(frozen=True)
class GroupSpan:
    """How one parallel group sits on the hierarchy: members per domain and domains spanned."""

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


def group_span(plan: PlanSpec, system: SystemSpec, groups: str | tuple[str, ...]) -> GroupSpan:
    """Members per NVLink domain and domains spanned by one group, or by the product of several
    (e.g. ("cp", "dp"): Megatron-LM reduces gradients over data- and context-parallel ranks together).

    Members are the ranks Σ_g i_g·stride_g; those below D share rank 0's domain."""
    names = (groups,) if isinstance(groups, str) else tuple(groups)
    domain = system.node.gpus_per_domain
    offsets = [0]
    for g in names:
        stride = group_stride(plan, g)
        offsets = [
            o + i * stride for o in offsets for i in range(min(getattr(plan, g), -(-(domain - o) // stride)))
        ]
    size = 1
    for g in names:
        size *= getattr(plan, g)
    per_domain = max(1, min(size, len(offsets)))
    return GroupSpan(size, per_domain, math.ceil(size / per_domain))


def _bandwidths(system: SystemSpec) -> tuple[float, float]:
    inner = system.node.nvlink_bandwidth * system.node.nvlink_efficiency
    outer = system.network.nic_bandwidth * system.network.efficiency
    return inner, outer


def _latency(steps_ring: int, n: int, alpha: float) -> float:
    """min(ring: steps·α, tree: 2·⌈log2 n⌉·α)."""
    if n <= 1:
        return 0.0
    return min(steps_ring * alpha, 2 * math.ceil(math.log2(n)) * alpha)


def _linear_time_s(kind: str, size_bytes: float, span: GroupSpan, system: SystemSpec) -> float:
    if span.size <= 1 or size_bytes <= 0:
        return 0.0
    slope, latency = collective_coefficients(kind, span, system)
    return size_bytes * slope + latency


def all_reduce_time_s(size_bytes: float, span: GroupSpan, system: SystemSpec) -> float:
    """2(n_in-1)/n_in·S/B_nvlink + 2(n_out-1)/n_out·(S/n_in)/B_nic + latency (hierarchical ring)."""
    return _linear_time_s("all_reduce", size_bytes, span, system)


def gather_or_scatter_time_s(size_bytes: float, span: GroupSpan, system: SystemSpec) -> float:
    """All-gather / reduce-scatter of an S-byte (full) buffer: (n_in-1)/n_in·S/B_nvlink +
    (n_out-1)/n_out·(S/n_in)/B_nic + latency (hierarchical ring)."""
    return _linear_time_s("all_gather", size_bytes, span, system)


def point_to_point_time_s(size_bytes: float, span: GroupSpan, system: SystemSpec) -> float:
    """One send/recv between neighbours: S / bandwidth of the slowest link a neighbour pair uses + α."""
    return _linear_time_s("send_recv", size_bytes, span, system)


def ring_exchange_time_s(chunk_bytes: float, span: GroupSpan, system: SystemSpec) -> float:
    """Ring attention's K/V pass: (n-1) neighbour transfers of one chunk (Liu et al. 2023, §3)."""
    if span.size <= 1:
        return 0.0
    return (span.size - 1) * point_to_point_time_s(chunk_bytes, span, system)


def collective_time_s(kind: str, size_bytes: float, span: GroupSpan, system: SystemSpec) -> float:
    """Dispatch on the collective kind."""
    if kind == "all_reduce":
        return all_reduce_time_s(size_bytes, span, system)
    if kind in ("all_gather", "reduce_scatter"):
        return gather_or_scatter_time_s(size_bytes, span, system)
    if kind == "send_recv":
        return point_to_point_time_s(size_bytes, span, system)
    if kind == "ring_exchange":
        return ring_exchange_time_s(size_bytes, span, system)
    raise ValueError(f"unknown collective {kind!r}")


def collective_coefficients(kind: str, span: GroupSpan, system: SystemSpec) -> tuple[float, float]:
    """(seconds per byte, latency seconds) with time = size·slope + latency for a non-empty buffer:
    the one statement of the collective formulas, in linear form so many sizes can be costed at once."""
    if span.size <= 1:
        return 0.0, 0.0
    inner, outer = _bandwidths(system)
    a, o = span.per_domain, span.domains
    alpha_in, alpha_out = system.node.nvlink_latency, system.network.latency
    if kind == "all_reduce":
        slope = 2 * (a - 1) / a / inner + 2 * (o - 1) / o / a / outer
        return slope, _latency(2 * (a - 1), a, alpha_in) + _latency(2 * (o - 1), o, alpha_out)
    if kind in ("all_gather", "reduce_scatter"):
        slope = (a - 1) / a / inner + (o - 1) / o / a / outer
        return slope, _latency(a - 1, a, alpha_in) + _latency(o - 1, o, alpha_out)
    if kind == "send_recv":
        return (1 / outer, alpha_out) if o > 1 else (1 / inner, alpha_in)
    raise ValueError(f"no linear form for collective {kind!r}")


def overlap_cost(span: GroupSpan, system: SystemSpec) -> float:
    """Share of a collective's time still paid when it is hidden behind compute: the SMs (and HBM)
    its kernels occupy slow the compute they overlap (Calculon's per-tier processor_usage)."""
    return system.network.overlap_cost if span.domains > 1 else system.node.nvlink_overlap_cost


def hidden_share(total_s, exposed_s, cost):
    """exposed + cost·(total − exposed): the exposed part plus the price of the hidden part."""
    return exposed_s + cost * (total_s - exposed_s)
