"""The host machine a system's GPUs sit in, as the host model (cost.host) sees it: the measured per-op costs of
its CPU running PyTorch's eager dispatcher and the CUDA driver (docs/hardware.md, "Hosts").

A host entry holds component measurements only (never step times): each eager op's dispatch (host enqueue of
one op on a one-element tensor, no synchronisation inside), the autograd engine's cost per node forward and
backward, the round trip of a device-to-host synchronisation on an idle GPU, and the host time per kernel of a
replayed CUDA graph. A framework profile's host figures were measured on one such host (its
``host_reference``); a system names the host it runs on (``SystemSpec.host``), and cost.hosts scales the
profile's figures to it."""

from __future__ import annotations

from pydantic import Field

from paraplan.specs.strict import InputModel
from paraplan.specs.system import Seconds


class HostSpec(InputModel):
    """One measured host: its CPU and the per-op host costs benchmarks/gpu/host_fp8.py measures (host.csv)."""

    name: str
    source: str = Field(description="where the measurements come from (file and run)")
    cpu: str = Field(
        description="the host CPU as the machine reports it (lscpu), or 'not recorded'"
    )
    dispatch_s: dict[str, Seconds] = Field(
        min_length=1,
        description="host seconds to enqueue one eager PyTorch op, by op (host.csv dispatch_<op>): the "
        "ops whose ratio to the reference host's gives the host's relative speed (cost.hosts.host_speed)",
    )
    autograd_node_s: Seconds | None = Field(
        None,
        description="host seconds per autograd node, forward and backward, of a chain of tiny element-wise "
        "ops (host.csv autograd_node); also in the relative speed",
    )
    sync_s: Seconds | None = Field(
        None,
        description="round trip of one .item() of one element on an idle GPU (host.csv item_d2h): the "
        "host's device-to-host synchronisation latency (EfficiencySpec.host_sync_latency_s)",
    )
    graph_kernel_s: Seconds | None = Field(
        None,
        description="host seconds of one replay of a 1,000-kernel CUDA graph per kernel (host.csv "
        "graph_replay_host / 1000; EfficiencySpec.graph_kernel_s)",
    )
    sources: dict[str, str] = Field(
        default_factory=dict, description="field -> measurement file and row, or note"
    )
