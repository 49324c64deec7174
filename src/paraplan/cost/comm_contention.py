"""What a hidden NCCL collective still costs the compute it overlaps: the SMs its CTAs hold (issue 33).

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
- across nodes with one NIC per GPU: one search channel per NIC (8 at 48 GB/s on 400 Gb/s NDR, H100; 8 at
  24 GB/s on 200 Gb/s HDR, A100), no dup (sm > 80 and bwIntra < 50 with more than 4 channels; A100:
  bwIntra < 25), doubled in ncclTopoPostset → **16** (v2.18 doubled H100 once more, to 32: "4 compute
  channels per search channel", 2·nChannels ≤ MAXCHANNELS; v2.19 on only below 16).
These are the defaults of ``node.nccl_channels`` and ``network.nccl_channels``; a system sets its own.

Lost compute: a kernel that needs W seconds on S SMs and runs t of them beside k NCCL CTAs progresses at
(S − k)/S during t, so it ends W + t·k/S: the hidden price is k/S of the collective's time (the share of
SMs lost, ``cost.overlap.shared_sm_slowdown``), for the time the collective overlaps compute and no more.
Cross-check, not a fit: Lee et al. 2025 (arXiv:2507.03114, "Characterizing Compute-Communication Overlap
in GPU-Accelerated Distributed Deep Learning") measure an average compute slowdown of 18.9 % (up to
40 %) when compute overlaps NCCL collectives on 4 A100 / H100 GPUs; 24/132 = 18.2 % (H100), 24/108 =
22.2 % (A100).
"""

from __future__ import annotations

from paraplan.cost.overlap import shared_sm_slowdown
from paraplan.specs.system import SystemSpec


def nccl_ctas(crosses_domains: bool, system: SystemSpec) -> int:
    """CTAs one ring collective of a communicator keeps resident for its whole duration: the channels
    NCCL builds for it (module docstring), ``network.nccl_channels`` when the communicator spans NVLink
    domains, else ``node.nccl_channels``; never more than the GPU's SMs."""
    channels = system.network.nccl_channels if crosses_domains else system.node.nccl_channels
    return min(channels, system.accelerator.sm_count)


def collective_sm_share(ctas: int, sm_count: int) -> float:
    """Share of a hidden collective's time the overlapped compute loses to its CTAs: k/S
    (``cost.overlap.shared_sm_slowdown``; k NCCL CTAs, S SMs; module docstring)."""
    return shared_sm_slowdown(min(ctas, sm_count), sm_count)


def tier_overlap_costs(crosses_domains: bool, system: SystemSpec) -> tuple[float, float]:
    """(NVLink-tier, scale-out-tier) overlap cost of one collective: the share of each tier's time still
    paid when the collective hides behind compute. Both tiers' times hold the same CTAs (one NCCL kernel
    runs the whole call), so each is collective_sm_share(nccl_ctas, S); an explicit
    ``node.nvlink_overlap_cost`` / ``network.overlap_cost`` in the system (a user's measurement, a
    Calculon import, ``paraplan calibrate --steps``) replaces its tier's value."""
    share = collective_sm_share(nccl_ctas(crosses_domains, system), system.accelerator.sm_count)
    c_in, c_out = system.node.nvlink_overlap_cost, system.network.overlap_cost
    return (share if c_in is None else c_in), (share if c_out is None else c_out)
