"""The measured host a system runs on, applied to the host model's inputs (docs/model.md, "Host time").

A framework profile's host figures (per-kernel issue time, per-tensor optimizer time, view calls: cost.host) were
measured on one host, the profile's ``host_reference``; the system names the host its GPUs sit in
(``SystemSpec.host``, a catalog entry of paraplan/catalog/hosts). Host time is CPU time of the same Python and
C++ code paths (the eager dispatcher, the autograd engine, the CUDA driver's launch), so on another host it
scales by how fast that host runs those paths: ``host_speed`` from the two hosts' measured per-op dispatch
costs, never from step times. A host's own round trip of a synchronisation and its CUDA-graph replay time are
measured directly and replace the profile's figures."""

from __future__ import annotations

import math

from paraplan.catalog import load_host
from paraplan.specs.host import HostSpec
from paraplan.specs.system import SystemSpec


def host_ops(host: HostSpec) -> dict[str, float]:
    """The per-op host costs a host's speed is read from: each eager op's dispatch (``dispatch_s``) and, where
    measured, the autograd node's forward + backward (``autograd_node``)."""
    ops = dict(host.dispatch_s)
    if host.autograd_node_s is not None:
        ops["autograd_node"] = host.autograd_node_s
    return ops


def host_speed(host: HostSpec, reference: HostSpec) -> float:
    """Relative speed of ``host`` against ``reference``, s = exp(mean_i ln(t_ref,i / t_host,i)): the geometric
    mean, over the ops both hosts measured (host_ops: eager dispatch of add_, mul, gelu, layer_norm, linear,
    SDPA and the autograd node, benchmarks/gpu/host_fp8.py host.csv), of the reference's time over this host's;
    host times divide by it (cost.host.kernel_issue_s). 1 for the reference itself; below 1 for a slower host.
    The geometric mean weighs each op's ratio alike, whatever its absolute cost."""
    mine, theirs = host_ops(host), host_ops(reference)
    common = sorted(set(mine) & set(theirs))
    if not common:
        from paraplan.specs.errors import InputError

        raise InputError(
            f"host: {host.name!r} shares no measured op with the profile's reference host "
            f"{reference.name!r}; allowed: a host measuring one of {', '.join(sorted(theirs))}"
        )
    return math.exp(sum(math.log(theirs[op] / mine[op]) for op in common) / len(common))


def with_host(system: SystemSpec) -> SystemSpec:
    """The system with its host applied to the host model's inputs: when the system names a host
    (``system.host``) and the stack's profile the host its figures were measured on
    (``efficiency.host_reference``, with a priced host: host_launch_s > 0), ``efficiency.host_speed`` times
    host_speed(host, reference), over the ratio of a host applied before (``efficiency.host_applied``: applying
    a host twice, or another after it, never compounds; a speed factor given by hand is kept), and the host's
    measured synchronisation round trip (``sync_s``) and CUDA-graph replay per kernel (``graph_kernel_s``) in
    place of the profile's where the profile prices them. Otherwise the system unchanged (its host name still
    checked: an unknown host is one InputError naming ``host``)."""
    if system.host is None:
        return system
    host = load_host(system.host, "host")
    eff = system.accelerator.efficiency
    if eff.host_reference is None or eff.host_launch_s <= 0.0 or eff.host_applied == system.host:
        return system
    reference = load_host(eff.host_reference, "host_reference")
    before = 1.0
    if eff.host_applied is not None:
        before = host_speed(load_host(eff.host_applied, "host"), reference)
    update: dict[str, object] = {
        "host_speed": eff.host_speed / before * host_speed(host, reference),
        "host_applied": system.host,
    }
    if host.sync_s is not None and eff.host_sync_latency_s > 0.0:
        update["host_sync_latency_s"] = host.sync_s
    if host.graph_kernel_s is not None and eff.graph_kernel_s > 0.0:
        update["graph_kernel_s"] = host.graph_kernel_s
    data = system.model_dump()
    data["accelerator"]["efficiency"].update(update)
    return SystemSpec.model_validate(data)
