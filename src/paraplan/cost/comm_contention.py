"""What a hidden NCCL collective still costs the compute it overlaps: the SMs and HBM it holds (issue 33).

NCCL runs one CTA (thread block) per channel for the whole call (NVIDIA/nccl src/enqueue.cc at v2.21.5-1,
topoGetAlgoInfo: nc = comm->collChannels, lowered only while nBytes < nc·nt·threadThreshold, i.e. below
~0.8 MB at 24 channels × 512 threads × 64 B, far under a DP bucket or an FSDP unit). A CTA of NCCL's
kernel takes 512-640 threads and its shared memory on one SM; a Hopper / Ampere GEMM CTA that wants the
SM's whole shared memory cannot be co-resident there, so while the collective runs the compute has
S − k of its S SMs (k = the CTAs). NVIDIA developer forum thread 337991 (2025, "Compute-Communication
Overlap Causes Severe GEMM Performance Degradation because of Tail Effect") shows the ncclAllGather of an
FSDP prefetch on one H100 node launching 24 blocks beside a 132-CTA GEMM.

Channels NCCL builds (ring graph, comm->nChannels), derived from NCCL's topology search, v2.19-v2.30
(src/graph/search.cc ncclTopoCompute, ncclTopoDupChannels; src/graph/connect.cc ncclTopoPostset):
- one 8-GPU NVSwitch node, H100 (18 NVLink-4 links × SM90_NVLINK_BW 20.6 GB/s = 370.8 GB/s, src/graph/topo.h):
  6 search channels at 60 GB/s (sm90SpeedArrayIntra), doubled by ncclTopoDupChannels to 12 (bwIntra ≥ 50),
  doubled again in ncclTopoPostset → **24**; A100 (12 links × 20 GB/s = 240 GB/s): 6 at 40 GB/s, 12, → **24**;
- across nodes with one NIC per GPU: one search channel per NIC (8 at 45 GB/s on 400 Gb/s NDR, H100,
  where a ring channel's pass through every GPU's NVLink caps 48 GB/s at 7; 8 at 24 GB/s on 200 Gb/s
  HDR, A100), no dup (sm > 80 and bwIntra < 50 with more than 4 channels; A100: bwIntra < 25), doubled
  in ncclTopoPostset → **16** (v2.18 doubled H100 once more, to 32: "4 compute channels per search
  channel", 2·nChannels ≤ MAXCHANNELS; v2.19 on only below 16).
These are the defaults of ``node.nccl_channels`` and ``network.nccl_channels``; a system sets its own.

Lost compute, two resources (``tier_sm_shares``, ``tier_overlap_costs``). SMs: a kernel that needs W seconds on S SMs
and runs t of them beside k NCCL CTAs progresses at (S − k)/S during t, so it ends W + t·k/S: a
compute-bound kernel loses k/S of the collective's time (``cost.overlap.shared_sm_slowdown``). HBM: a
memory-bound kernel does not need every SM to stream, but shares HBM with the collective, whose kernel
moves h bytes of local HBM per byte on the wire (ring all-gather: the peer's write into the receive
buffer, the read of it, the write to the output, h = 3; ring reduce-scatter / all-reduce: write-in, read
of it, read of the local input, h = 3; send/recv: the sender's read, the receiver's write, h = 2; NCCL
src/device/prims_simple.h directRecvCopySend / recvReduceSend, Simple protocol): it loses
ρ = h·B_tier / (η_hbm·B_hbm), the share of HBM bandwidth the collective takes at its tier's achieved
rate. With μ the share of the overlapped compute's time in memory-bound kernels, the hidden price is
(1 − μ)·k/S of the collective's time (its CTAs are resident through its latency too) plus μ·ρ of its
byte time (no bytes move during latency), for the time it overlaps compute and no more: (1 − μ)·k/S +
μ·ρ of a bandwidth-bound call. The all-to-all (expert dispatch) takes the SM term only.

μ (``MEMORY_BOUND_SHARE`` 0.10) is this model's own op graph, not a fit: the share of a decoder layer's
backward time outside its GEMMs and attention (step.block_sums.block_compute) is 0.08-0.14 on H100 and
0.05-0.09 on A100 for Llama 3 8B / 70B, Llama 2 7B, GPT-3 1.3B / 175B at their usual TP and sequence
lengths (tests/unit/test_comm_contention.py keeps the constant inside the range the graph gives).

Cross-check, not a fit: Lee et al. 2025 (arXiv:2507.03114, "Characterizing Compute-Communication Overlap
in GPU-Accelerated Distributed Deep Learning") measure an average compute slowdown of 18.9 % (up to
40 %) when compute overlaps NCCL collectives on 4 A100 / H100 GPUs; this gives 0.20 (H100) and 0.24
(A100) inside one NVSwitch node.

Expert-parallel all-to-alls (dispatch and combine, ``a2a_overlap_share``) hold the SMs of their dispatcher's
kernels: NCCL's grouped send/recv (the alltoall dispatcher) one CTA per p2p channel, p2pnChannels =
pow2Up(min(nChannels, NCCL_MAX_P2P_NCHANNELS)) (NVIDIA/nccl src/graph/paths.cc ncclTopoComputeP2pChannels,
v2.19-v2.27: "Make nChannelsPerPeer and nChannels powers of 2"), all of them busy once the call has more peers
than p2pnChannels / p2pnChannelsPerPeer: 32 in an 8-GPU H100 node (24 ring channels), 16 across nodes; DeepEP's
normal kernels and Hybrid-EP a fixed SM count set by the framework (Megatron-Core TransformerConfig
``moe_deepep_num_sms`` 20, ``moe_hybridep_num_sms`` 16; DeepSeek-V3 report §3.2.2: 20 of an H800's 132 SMs).
"""

from __future__ import annotations

from typing import NamedTuple

from paraplan.cost.overlap import shared_sm_slowdown
from paraplan.specs.system import SystemSpec


def nccl_ctas(crosses_domains: bool, system: SystemSpec) -> int:
    """CTAs one ring collective of a communicator keeps resident for its whole duration: the channels
    NCCL builds for it (module docstring), ``network.nccl_channels`` when the communicator spans NVLink
    domains, else ``node.nccl_channels``; never more than the GPU's SMs."""
    channels = system.network.nccl_channels if crosses_domains else system.node.nccl_channels
    return min(channels, system.accelerator.sm_count)


HBM_BYTES_PER_WIRE_BYTE = {"send_recv": 2.0}  # every other collective: 3 (ring)
MEMORY_BOUND_SHARE = 0.10  # μ, module docstring


# SMs the fused dispatchers' kernels hold (Megatron-Core transformer_config.py: moe_deepep_num_sms = 20,
# moe_hybridep_num_sms = 16, "in pure NVL scenarios, 16 SMs can generally achieve good bandwidth"); the
# alltoall dispatcher's NCCL kernel holds nccl_p2p_ctas
DISPATCHER_SMS = {"deepep": 20, "hybridep": 16}


class TierCosts(NamedTuple):
    """One collective's hidden price per tier: ``sm_*`` the share of the tier's time (latency included)
    the CTAs cost, ``hbm_*`` the share of its byte time the HBM traffic costs."""

    sm_in: float
    sm_out: float
    hbm_in: float
    hbm_out: float


def collective_sm_share(ctas: int, sm_count: int) -> float:
    """Share of a hidden collective's time a compute-bound kernel beside it loses to its CTAs: k/S
    (``cost.overlap.shared_sm_slowdown``; k NCCL CTAs, S SMs; module docstring)."""
    return shared_sm_slowdown(min(ctas, sm_count), sm_count)


def collective_hbm_share(kind: str, tier_bytes_per_s: float, hbm_bytes_per_s: float) -> float:
    """Share of HBM bandwidth a collective takes while it moves bytes at its tier's achieved rate:
    ρ = min(1, h·B_tier / B_hbm), h = HBM_BYTES_PER_WIRE_BYTE (3 for the ring collectives); B_hbm the
    achieved HBM rate (η_hbm · datasheet). Module docstring."""
    h = HBM_BYTES_PER_WIRE_BYTE.get(kind, 3.0)
    return min(1.0, h * tier_bytes_per_s / hbm_bytes_per_s)


def tier_sm_shares(crosses_domains: bool, system: SystemSpec) -> tuple[float, float]:
    """(NVLink tier, scale-out tier) share of a hidden collective's time its CTAs cost the compute:
    (1 − μ)·k/S (module docstring: compute-bound kernels, the share 1 − μ of the overlapped time,
    lose the k SMs NCCL's CTAs hold for the whole call, latency included), or the tier's explicit overlap cost
    (``node.nvlink_overlap_cost`` / ``network.overlap_cost``) where the system sets one."""
    acc = system.accelerator
    sm = (1.0 - MEMORY_BOUND_SHARE) * collective_sm_share(
        nccl_ctas(crosses_domains, system), acc.sm_count
    )
    node_cost, net_cost = system.node.nvlink_overlap_cost, system.network.overlap_cost
    return (sm if node_cost is None else node_cost, sm if net_cost is None else net_cost)


def tier_overlap_costs(
    kind: str, crosses_domains: bool, system: SystemSpec, peers: int
) -> TierCosts:
    """The hidden price of one collective per tier, ((1 − μ)·k/S, μ·ρ) of each tier (module docstring;
    NCCL src/graph/search.cc, connect.cc, enqueue.cc, device/prims_simple.h at v2.21.5-1; Lee et al. 2025
    arXiv:2507.03114 as a cross-check) — both hold the same CTAs (one NCCL kernel runs the whole call:
    tier_sm_shares), each moves HBM at the rate its tier achieves for this call: inside the domain the
    rate towards the call's ``peers`` domain members (specs.fabric NodeSpec.peer_bandwidth: B·η behind a
    switch, the links to those peers on a full mesh; the rate cost.comm prices the call's bytes at),
    across domains nic_bandwidth·efficiency; against hbm_bandwidth·efficiency.hbm. An explicit
    ``node.nvlink_overlap_cost`` / ``network.overlap_cost`` (a user's measurement, a Calculon import,
    ``paraplan calibrate --steps``) is its tier's whole price (share of the tier's time, no HBM term)."""
    acc, node, net = system.accelerator, system.node, system.network
    hbm = acc.hbm_rate()
    sm_in, sm_out = tier_sm_shares(crosses_domains, system)
    hbm_in, hbm_out = (
        0.0 if override is not None else MEMORY_BOUND_SHARE * collective_hbm_share(kind, rate, hbm)
        for override, rate in (
            (node.nvlink_overlap_cost, node.peer_bandwidth(peers)),
            (net.overlap_cost, net.nic_bandwidth * net.efficiency),
        )
    )
    return TierCosts(sm_in, sm_out, hbm_in, hbm_out)


def nccl_p2p_ctas(crosses_domains: bool, system: SystemSpec) -> int:
    """CTAs NCCL's grouped send/recv (an all-to-all) keeps resident: p2pnChannels = pow2Up(nChannels) of the
    communicator's ring channels (``nccl_ctas``; NCCL src/graph/paths.cc ncclTopoComputeP2pChannels, module
    docstring), every one busy when the call has many peers; never more than the GPU's SMs."""
    channels = nccl_ctas(crosses_domains, system)
    return min(1 << max(channels - 1, 0).bit_length(), system.accelerator.sm_count)


def dispatcher_sms(dispatcher: str, crosses_domains: bool, system: SystemSpec) -> int:
    """SMs an expert-parallel dispatcher's all-to-all kernels hold while they run: ``DISPATCHER_SMS`` for
    DeepEP and Hybrid-EP, NCCL's p2p CTAs (``nccl_p2p_ctas``) for the alltoall dispatcher; at most S."""
    sms = DISPATCHER_SMS.get(dispatcher)
    if sms is None:
        return nccl_p2p_ctas(crosses_domains, system)
    return min(sms, system.accelerator.sm_count)


def a2a_overlap_share(
    dispatcher: str, crosses_domains: bool, peers: int, system: SystemSpec
) -> float:
    """Share of an expert-parallel all-to-all's time the compute it hides behind still loses, from
    components: (1 − μ)·k/S + μ·ρ, k the SMs the dispatcher's kernels hold (``dispatcher_sms``: NCCL p2p
    CTAs, DeepEP 20, Hybrid-EP 16), S the GPU's SMs, μ = MEMORY_BOUND_SHARE, ρ = min(1, 2·B/B_hbm) the HBM
    share of its traffic (``collective_hbm_share`` of a send/recv: the sender's read and the receiver's
    write) at the rate of the tier that bounds it, B = nic_bandwidth·efficiency across NVLink domains, else
    ``node.peer_bandwidth(peers)``, against hbm_bandwidth·efficiency.hbm (module docstring). E.g. DeepEP on
    an H100 (S = 132) across nodes at 50·0.85 GB/s: 0.9·20/132 + 0.1·2·42.5/(3,350·0.85) = 0.1364 + 0.0030."""
    acc = system.accelerator
    k = dispatcher_sms(dispatcher, crosses_domains, system)
    if crosses_domains:
        rate = system.network.nic_bandwidth * system.network.efficiency
    else:
        rate = system.node.peer_bandwidth(peers)
    hbm = acc.hbm_rate()
    return (1.0 - MEMORY_BOUND_SHARE) * collective_sm_share(
        k, acc.sm_count
    ) + MEMORY_BOUND_SHARE * collective_hbm_share("send_recv", rate, hbm)
