"""In-network reduction across domains: NCCL CollNet on InfiniBand SHARP (issue 33).

With SHARP the InfiniBand switches (Quantum / Quantum-2, the SHARP aggregation manager building the
reduction trees) sum the data on its way through the fabric: each domain's share leaves through its NICs
once and the reduced result comes back once, instead of the ring's 2(o−1)/o passes over o domains (NVIDIA
SHARP documentation, "Introduction": "eliminating the need to send data multiple times between endpoints").
NCCL reaches it through its CollNet algorithms when the run enables them (NCCL_COLLNET_ENABLE=1 with the
nccl-rdma-sharp-plugins library; NVIDIA/nccl src/init.cc v2.30.7: collnetEnable 0 unless set, and
tuning.cc disables CollNet Direct / Chain and multi-node NVLS when it is 0).

Only the all-reduce is priced here (CollNet Direct: a reduce-scatter among the domain's GPUs, each GPU's
1/a share through its own NIC into the switch tree and back, an all-gather in the domain). NCCL runs
CollNet all-gather / reduce-scatter only with a plugin that implements them and one NIC head per GPU
(tuning.cc v2.30.7); those keep the ring here. The NVLink tier is the caller's (NVLS or the ring): NCCL's
multi-node NVLS with CollNet is the same two tiers, NVLS inside the domain and SHARP across.
"""

from __future__ import annotations

from typing import NamedTuple

from paraplan.specs.fabric import NetworkSpec

# NVIDIA/nccl src/graph/tuning.cc (v2.30.7, commit 5067397c) ncclTunerConstantsDefaults: hwLatencies
# [NET][CollNetDirect][Simple] = 31 µs, and the CollNet Direct latency's per-member arity term 0.4 µs.
COLLNET_NET_LATENCY_S = 31e-6
COLLNET_ARITY_LATENCY_S = 0.4e-6


class SharpAllReduce(NamedTuple):
    """The NIC tier of an all-reduce reduced in the switches: seconds per byte and the two tiers' latency."""

    slope_out: float
    latency_in: float
    latency_out: float


def sharp_enabled(network: NetworkSpec) -> bool:
    """The fabric reduces in the network (``sharp_efficiency`` > 0) and the run enabled CollNet
    (``collnet_enabled``): NCCL's tuner considers CollNet only then (tuning.cc v2.30.7: "Disable Collnet+Direct,
    Collnet+Chain or Collnet+NVLS if collnet is not supported")."""
    return network.collnet_enabled and network.sharp_efficiency > 0


def sharp_all_reduce_slope(per_domain: int, network: NetworkSpec) -> float:
    """Seconds per byte of an all-reduce's NIC tier reduced by SHARP, a members per domain:
    1 / (a · B_nic · η · e). Each GPU sends its 1/a share of S through its own NIC once and receives the
    reduced share once (bus traffic factor 1, against the ring's 2(o−1)/o), at the ring's achieved NIC rate
    B_nic·η (``nic_bandwidth · efficiency``) times e = ``sharp_efficiency``, NCCL's CollNet Direct factor
    (NVIDIA/nccl src/graph/tuning.cc v2.30.7: busBw *= .85 for compute capability ≥ 9.0, and the GPU/NIC
    ratio factor, 1 with one NIC per GPU). E.g. DGX H100, 8 per node: 1 / (8 · 50e9 · 0.85 · 0.85) s/B,
    against the ring's 2(o−1)/o / (8 · 50e9 · 0.85): SHARP is faster from o = 3 domains (ring 1.33 > 1/0.85)."""
    rate = network.nic_bandwidth * network.efficiency * network.sharp_efficiency
    return 1.0 / (per_domain * rate)


def sharp_all_reduce_latency_s(
    per_domain: int, alpha_in: float, alpha_out: float
) -> tuple[float, float]:
    """(NVLink, scale-out) latency of a CollNet Direct all-reduce, a members per domain (NVIDIA/nccl
    src/graph/tuning.cc v2.30.7 ncclTopoTuneModel): 2·(min(1, a − 1)·α_in + (a − 1)·0.4 µs) inside the
    domain (one direct hop each way plus the 0.4 µs "arity serialization" per member) and one pass through
    the switch tree, 31 µs (hwLatencies NET CollNetDirect Simple); with one GPU per domain NCCL charges the
    tree's network latency instead, here α_out. Its per-call base latency is 0 for CollNet."""
    a = per_domain
    inner = 2 * (min(1, a - 1) * alpha_in + (a - 1) * COLLNET_ARITY_LATENCY_S)
    return inner, (alpha_out if a == 1 else COLLNET_NET_LATENCY_S)


def sharp_all_reduce(
    per_domain: int, domains: int, ring_slope_out: float, network: NetworkSpec, alpha_in: float
) -> SharpAllReduce | None:
    """The SHARP all-reduce's NIC tier where NCCL's tuner would take it over the ring / tree: the fabric
    has it and the run enabled it (``sharp_enabled``), the group crosses domains (o > 1) and its bandwidth
    term is smaller than the ring's ``ring_slope_out`` (sharp_all_reduce_slope). The choice is on the
    bandwidth term, the regime of data-parallel gradient buckets (NCCL compares latency + bytes / bandwidth
    per call size); None where the ring / tree stays."""
    if domains <= 1 or not sharp_enabled(network):
        return None
    slope = sharp_all_reduce_slope(per_domain, network)
    if slope >= ring_slope_out:
        return None
    lat_in, lat_out = sharp_all_reduce_latency_s(per_domain, alpha_in, network.latency)
    return SharpAllReduce(slope, lat_in, lat_out)
