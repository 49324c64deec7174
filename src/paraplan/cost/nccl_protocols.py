"""NCCL's low-latency protocols (LL, LL128) and NVLS latency: the per-size protocol choice of NCCL's tuner.

NCCL prices every (algorithm, protocol) pair as latency + bytes / bandwidth and runs the cheapest
(NVIDIA/nccl src/graph/tuning.cc ``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``, v2.18.5-1 to
v2.30.4-1; constants below read at v2.21.5-1 and unchanged through v2.30.4-1):

- Simple, the protocol of large messages: the catalog's per-hop α (``node.nvlink_latency``,
  ``network.latency``) and the full bus bandwidth (cost.comm.linear_collective) — as before;
- LL (8-byte flag+data stores): ``baseLat`` ring 6.6 µs / tree 6.8 µs, ``hwLat`` NVLink 0.6 µs per hop,
  network ring 2.7 µs / tree 5.0 µs per hop, at half the bus bandwidth (``busBw * .5``);
- LL128 (128-byte lines, 120 bytes of data): ``baseLat`` 14 µs, ``hwLat`` NVLink ring 1.9 / tree 1.25 µs,
  network ring 4.0 / tree 8.5 µs, at 0.92 of the bus bandwidth (``busBw * 0.92``, "120.0/128.0");
- with nodes > 1 an NVLink hop costs at least ``getNetOverhead``, 1 µs on x86 Intel (2 µs AMD; ×3 Simple);
- NVLS (NVLink SHARP), Simple only: latency ``hwLat[NVLINK][NVLS][SIMPLE]`` = 25 µs flat on one node.

LL's bandwidth cap ``llMaxBw`` and the tree's own bandwidth (``perChMaxTreeBw``, ``treeCorrectionFactor``)
are not modelled: the protocol's fraction multiplies the model's ring slope. Published small-message
nccl-tests agree with these latencies (docs/model.md §3): 8 H100/H20 GPUs on one NVSwitch node run ring
LL up to 1 MB (NVIDIA/nccl-tests issue #309) at 12-17 µs for 8 B-4 KB (deepseek-ai/DeepEP issue #303,
8×H20), where NCCL's table gives 6.6 + 14·0.6 = 15.0 µs and 5 µs per protocol-blind hop 70 µs.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

# NVIDIA/nccl src/graph/tuning.cc @ v2.21.5-1 (same values v2.18.5-1 ... v2.30.4-1), in seconds
RING_BASE_S = {"LL": 6.6e-6, "LL128": 14.0e-6}  # baseLat[RING][LL, LL128]
TREE_BASE_S = {"LL": 6.8e-6, "LL128": 14.0e-6}  # baseLat[TREE][LL, LL128]
NVLINK_RING_HOP_S = {"LL": 0.6e-6, "LL128": 1.9e-6}  # hwLat[NVLINK][RING]
NVLINK_TREE_HOP_S = {"LL": 0.6e-6, "LL128": 1.25e-6}  # hwLat[NVLINK][TREE]
NET_RING_HOP_S = {"LL": 2.7e-6, "LL128": 4.0e-6}  # hwLat[NET][RING]
NET_TREE_HOP_S = {"LL": 5.0e-6, "LL128": 8.5e-6}  # hwLat[NET][TREE]
NET_OVERHEAD_S = 1.0e-6  # getNetOverhead, x86 Intel (2 µs on AMD)
BUS_FRACTION = {"LL": 0.5, "LL128": 0.92}  # busBw * .5 (LL), busBw * 0.92 (LL128, ppn >= 2)
NVLS_LATENCY_S = 25e-6  # hwLat[NVLINK][NVLS][SIMPLE], the NVLS all-reduce latency on one node
PROTOCOLS = ("LL128", "LL")


class ProtocolLatency(NamedTuple):
    """(NVLink-tier seconds, scale-out-tier seconds) of one call's latency under one protocol."""

    inner: float
    outer: float


def _log2i(n: int) -> int:
    """⌊log2 n⌋ for n >= 1 (NCCL's log2i)."""
    return max(int(n), 1).bit_length() - 1


def ring_protocol_latency(
    proto: str, steps: int, inter_steps: int, domains: int
) -> ProtocolLatency:
    """NCCL's ring latency under ``proto`` (tuning.cc): baseLat + (nsteps − nInterSteps)·intraLat +
    nInterSteps·interLat, intraLat = max(hwLat[NVLINK], netOverhead) when the ring leaves the node
    (``domains`` > 1). The base sits on the NVLink tier."""
    intra = NVLINK_RING_HOP_S[proto]
    if domains > 1:
        intra = max(intra, NET_OVERHEAD_S)
    return ProtocolLatency(
        RING_BASE_S[proto] + (steps - inter_steps) * intra, inter_steps * NET_RING_HOP_S[proto]
    )


def tree_protocol_latency(proto: str, per_domain: int, domains: int) -> ProtocolLatency:
    """NCCL's tree all-reduce latency under ``proto`` (tuning.cc): baseLat + 2·((nRanks/nNodes − 1)·intraLat
    + log2i(nNodes)·interLat), a chain in the node and a double binary tree across nodes."""
    return ProtocolLatency(
        TREE_BASE_S[proto] + 2 * (per_domain - 1) * NVLINK_TREE_HOP_S[proto],
        2 * _log2i(domains) * NET_TREE_HOP_S[proto],
    )


def protocol_latency(
    proto: str, kind: str, steps: tuple[int, int], per_domain: int, domains: int
) -> ProtocolLatency:
    """Latency of one call under ``proto``: the ring (``steps`` = (nsteps, nInterSteps) of
    cost.comm.ring_steps), for all-reduce the smaller of ring and tree (NCCL costs the tree for
    all-reduce only)."""
    ring = ring_protocol_latency(proto, steps[0], steps[1], domains)
    if kind != "all_reduce":
        return ring
    tree = tree_protocol_latency(proto, per_domain, domains)
    return tree if sum(tree) < sum(ring) else ring


def protocol_tier_times(form, size_bytes):
    """(NVLink, scale-out) seconds of the cheapest protocol at S bytes, as NCCL's tuner picks it, of a cost.comm.LinearCollective
    (NVIDIA/nccl src/graph/tuning.cc ncclTopoGetAlgoTime, v2.18-v2.30: time = lat + S / bw per algorithm
    and protocol, the smallest runs): Simple S·slope + latency; LL128 and LL S·slope / f + their latency
    (NVLink slope the ring's, ``ring_slope_in``, where Simple's is NVLS's),
    f = BUS_FRACTION (0.92, 0.5). A form without the low-latency protocols has infinite LL latencies."""
    inner = size_bytes * form.slope_in + form.latency_in
    outer = size_bytes * form.slope_out + form.latency_out
    ring_in = form.ring_slope_in
    ring_in = (
        np.where(ring_in > 0, ring_in, form.slope_in)
        if isinstance(ring_in, np.ndarray)
        else (ring_in if ring_in > 0 else form.slope_in)
    )
    for proto, lat_in, lat_out in (
        ("LL128", form.ll128_latency_in, form.ll128_latency_out),
        ("LL", form.ll_latency_in, form.ll_latency_out),
    ):
        if not isinstance(lat_in, np.ndarray) and math.isinf(lat_in):
            continue
        f = BUS_FRACTION[proto]
        c_in = size_bytes * ring_in / f + lat_in
        c_out = size_bytes * form.slope_out / f + lat_out
        better = c_in + c_out < inner + outer
        if isinstance(better, np.ndarray):
            inner, outer = np.where(better, c_in, inner), np.where(better, c_out, outer)
        elif better:
            inner, outer = c_in, c_out
    return inner, outer


def low_latency_fields(
    kind: str, steps: tuple[int, int], per_domain: int, domains: int, node
) -> dict[str, float]:
    """cost.comm.LinearCollective's LL128 / LL latency fields of one call on a system whose NCCL runs the
    low-latency protocols (``node.nccl_ll_protocols``): ``protocol_latency`` on NCCL's ring steps
    (cost.comm.ring_steps), the tree too for all-reduce; none (Simple only) otherwise."""
    if not node.nccl_ll_protocols or per_domain * domains <= 1:
        return {}
    out = {}
    for proto in PROTOCOLS:
        lat = protocol_latency(proto, kind, steps, per_domain, domains)
        key = proto.lower()
        out[f"{key}_latency_in"], out[f"{key}_latency_out"] = lat.inner, lat.outer
    return out


def nvls_all_reduce_latency_s(span, node, ring_latency_in: float) -> float:
    """NVLink-tier Simple latency of an all-reduce inside one NVSwitch domain that runs NVLS
    (``node.nvls_efficiency`` > 0, ``node.topology`` switch, a ≥ 3 where its slope beats the ring's):
    min(ring / tree latency, NVLS's flat 25 µs) — NCCL tuning.cc: latencies[NVLS] = intraLat =
    hwLat[NVLINK][NVLS][SIMPLE] on one node (v2.19-v2.30); across domains (NVLS_TREE) unchanged."""
    if (
        node.nvls_efficiency <= 0
        or node.topology != "switch"
        or span.domains > 1
        or span.per_domain < 3
    ):
        return ring_latency_in
    return min(ring_latency_in, NVLS_LATENCY_S)
