"""The scale-up domain (NVLink / NVSwitch / Infinity Fabric) and the scale-out network of a system.

Topology of the domain (``node.topology``). "switch": every GPU reaches every other through a switch
(NVSwitch), so a group of any size inside the domain gets each GPU's whole link bandwidth. "full_mesh":
the GPUs are wired point to point with no switch, each GPU's links split evenly over its D − 1 peers
(CSCS Alps GH200 node: 4 GPUs, 6 NVLink 4 links per pair, "GPU All2all: 3x6 P2P NVLink", cscs-docs
docs/images/alps/gh200-schematic.svg @ 80abed1; AMD MI300X platform: 8 GPUs, one 64 GB/s Infinity Fabric
link per pair, platform datasheet). A transfer can only use the links to the peers it sends to: NCCL
builds its rings and trees over direct links (NVIDIA/nccl src/graph/search.cc: a ring on a 2-GPU
communicator runs over the links between the two GPUs; other GPUs do not relay), so a group with a
members in a domain gets (a − 1)/(D − 1) of the GPU's bandwidth and a send to one peer 1/(D − 1).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from paraplan.specs.strict import InputModel
from paraplan.specs.quantities import BytesPerS, Fraction, Seconds, Share

Topology = Literal["switch", "full_mesh"]


def _link_efficiency(default: float, bandwidth_field: str) -> Any:
    """A tier's achieved share of its bandwidth (the same rule for NVLink and the scale-out network)."""
    return Field(default, description=f"achieved fraction of {bandwidth_field} by NCCL collectives")


def _overlap_cost(collective: str, tier: str) -> Any:
    """A tier's overlap-cost override: absent, cost.comm_contention derives it from the NCCL CTAs the
    collective holds (k/S); set, it replaces that (a measurement, Calculon's processor_usage)."""
    return Field(
        None,
        description=f"share of {collective}'s time still paid when hidden behind compute; absent: the "
        "SM share of NCCL's CTAs, nccl_channels / accelerator.sm_count (cost.comm_contention); set it to "
        f"override, e.g. Calculon's processor_usage for the {tier} tier (Isaev et al. 2023, SC23)",
    )


def _nccl_channels(default: int, where: str) -> Any:
    """CTAs (channels) NCCL runs a ring collective with; defaults derived in cost.comm_contention."""
    return Field(
        default,
        gt=0,
        description=f"CTAs NCCL runs one collective with {where} (comm->nChannels of its ring graph; "
        "NVIDIA/nccl src/graph/search.cc + connect.cc, v2.19-v2.30: 24 on an 8-GPU A100/H100 NVSwitch "
        "node, 16 across nodes with one NIC per GPU; cost.comm_contention)",
    )


class NodeSpec(InputModel):
    """The scale-up domain: GPUs joined by NVLink/NVSwitch (or Infinity Fabric)."""

    gpus_per_domain: int = Field(gt=0, description="GPUs in one NVLink/NVSwitch domain")
    nvlink_bandwidth: BytesPerS = Field(description="per-GPU, per-direction scale-up bandwidth")
    nvlink_latency: Seconds = 5e-6
    nvlink_efficiency: Fraction = _link_efficiency(0.8, "nvlink_bandwidth")
    nvlink_overlap_cost: Share | None = _overlap_cost("an NVLink collective", "NVLink")
    nccl_channels: int = _nccl_channels(24, "inside one domain")
    nvls_efficiency: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="NVLink SHARP (NVLS): NCCL's nvlsEfficiency for an all-reduce reduced in the NVSwitch "
        "(NVIDIA/nccl src/graph/tuning.cc, v2.17-v2.30: 0.85 Hopper, 0.74 Blackwell, 0 before Hopper); 0: "
        "no NVLS (no third-generation NVSwitch, NCCL < 2.17, or NCCL_NVLS_ENABLE=0). "
        "cost.comm.nvls_all_reduce_slope",
    )
    nvls_channels: int = Field(
        16,
        gt=1,
        description="CTAs of NCCL's NVLS all-reduce (NVIDIA/nccl src/transport/nvls.cc v2.19-v2.30: "
        "NVLS_NCHANNELS_SM90 16, NVLS_NCHANNELS_SM100_NVL 24, NVLS_NCHANNELS_SM100 32 across nodes)",
    )
    topology: Topology = Field(
        "switch",
        description="how the domain's GPUs are joined: 'switch' (NVSwitch: any group gets a GPU's whole "
        "nvlink_bandwidth) or 'full_mesh' (point-to-point links split evenly over the D − 1 peers, no "
        "switch: a group of a members per domain gets (a − 1)/(D − 1) of it; module docstring)",
    )

    def peer_bandwidth(self, peers: int) -> float:
        """Achieved per-direction bandwidth of one GPU towards ``peers`` members of its group in the
        domain: B·η on a switch; B·η·min(1, peers/(D − 1)) on a full mesh, the links to those peers
        only (module docstring: NCCL rings and trees use direct links, no relay through other GPUs)."""
        rate = self.nvlink_bandwidth * self.nvlink_efficiency
        if self.topology == "switch" or self.gpus_per_domain <= 1:
            return rate
        return rate * min(1.0, max(peers, 1) / (self.gpus_per_domain - 1))


class NetworkSpec(InputModel):
    """The scale-out fabric between domains (InfiniBand / RoCE)."""

    nic_bandwidth: BytesPerS = Field(description="per-GPU, per-direction scale-out bandwidth")
    latency: Seconds = 10e-6
    efficiency: Fraction = _link_efficiency(0.85, "nic_bandwidth")
    overlap_cost: Share | None = _overlap_cost("a scale-out collective", "InfiniBand")
    nccl_channels: int = _nccl_channels(16, "across domains")
    sharp_efficiency: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="InfiniBand SHARP in-network reduction available on this fabric (Quantum / Quantum-2 "
        "switches with the SHARP aggregation manager): the share of the ring's achieved NIC rate "
        "(nic_bandwidth · efficiency) NCCL's CollNet all-reduce reaches, NCCL's own factor 0.85 on sm90+ "
        "(NVIDIA/nccl src/graph/tuning.cc v2.30.7, CollNet Direct busBw *= .85); 0: no in-network "
        "reduction in the fabric. Used only where collnet_enabled (cost.collnet)",
    )
    collnet_enabled: bool = Field(
        False,
        description="the run enabled NCCL CollNet with the SHARP plugin (NCCL_COLLNET_ENABLE=1, "
        "nccl-rdma-sharp-plugins on the library path; NCCL's default is 0, src/init.cc): a run that does "
        "not state it did not (a missing feature is a missing input); the framework profile's "
        "nccl_collnet_enable sets it (cost.frameworks.framework_system)",
    )
