"""The blast radius of a failure given the plan's placement, and fault-tolerant data parallelism.

A failed GPU takes out the model replica it serves; a failed server (or NVLink domain) takes out every
replica with a GPU on it. Under ``rollback`` any of them restarts the whole job from its last
checkpoint. Under ``ft-dp`` (fault-tolerant data parallelism: torchft's fault-tolerant DDP / HSDP,
Oobleck, Jang et al. SOSP '23) the replicas a failure hits drop out, the others regroup and continue at
reduced throughput, and the hit replicas rejoin when their GPUs are replaced, loading the state from a
healthy peer. That needs the training state replicated across data parallelism (ZeRO 0: with ZeRO-1/2/3
the optimizer state of a dropped replica is gone) and a survivor (a failure that hits every replica
rolls back). docs/goodput.md, "Blast radius and ft-dp"."""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.comm import group_stride


@dataclass(frozen=True)
class BlastRadius:
    """What one failure of each kind takes out, in units that fail together (docs/goodput.md)."""

    units: int  # independent failure units: dp / replicas_per_unit
    replicas_per_unit: int  # replicas an expert-parallel group couples (1 for dense models)
    units_hit_by_gpu: int
    units_hit_by_server: int
    units_hit_by_domain: int
    ft_dp_possible: bool  # the state is replicated across data parallelism (ZeRO 0)
    reason: str | None = None  # why ft-dp cannot drop a replica, when it cannot

    def units_hit(self, kind: str) -> int:
        return getattr(self, f"units_hit_by_{kind}")

    def absorbable(self, kind: str) -> bool:
        """Whether ft-dp can drop what a failure of ``kind`` hits: the state is replicated and at
        least one unit survives."""
        return self.ft_dp_possible and self.units_hit(kind) < self.units


def replicas_in_block(plan, block_gpus: int) -> int:
    """Distinct data-parallel replicas among ``block_gpus`` consecutive ranks (a server or an NVLink
    domain, aligned on the rank order): with s = the dp group's stride in the placement order
    (cost.comm.group_stride), ranks 0..B-1 hold dp indices 0..ceil(B / s) - 1, so
    min(dp, ceil(B / s)); 1 when s >= B (a replica's GPUs fill whole blocks)."""
    stride = group_stride(plan, "dp")
    return min(plan.dp, -(-block_gpus // stride))


def replicas_per_unit(plan) -> int:
    """Replicas one expert-parallel group couples: its ep * etp ranks are carved out of tp * cp * dp
    (Megatron-Core), so it spans ceil(ep * etp / (tp * cp)) dp indices; a failure in any of them stalls
    the group's all-to-all, so they fail together (1 for dense models)."""
    coupled = -(-(plan.dims.ep * plan.dims.etp) // (plan.tp * plan.cp))
    return max(1, min(plan.dp, coupled))


def blast_radius(plan, gpus_per_server: int, gpus_per_domain: int) -> BlastRadius:
    """The plan's failure units and how many of them one GPU, server or NVLink-domain failure hits:
    ceil(replicas_in_block / replicas_per_unit) units (at least one)."""
    per_unit = replicas_per_unit(plan)
    units = max(1, plan.dp // per_unit)

    def hit(block: int) -> int:
        return min(units, max(1, -(-replicas_in_block(plan, block) // per_unit)))

    reason = None
    if plan.zero > 0:
        reason = f"ZeRO-{plan.zero} shards the optimizer state over the replicas"
    elif units < 2:
        reason = "a single failure unit (no replica to continue on)"
    return BlastRadius(
        units=units,
        replicas_per_unit=per_unit,
        units_hit_by_gpu=1,
        units_hit_by_server=hit(gpus_per_server),
        units_hit_by_domain=hit(gpus_per_domain),
        ft_dp_possible=reason is None,
        reason=reason,
    )


def rejoin_s(spare_wait_s: float, swap_s: float, init_s: float, peer_load_s: float) -> float:
    """D = t_spare + t_swap + t_init + t_peer: until the hit units are whole again, the wait for a
    spare (closed_forms.expected_spare_wait_s), its swap-in, the communicators' set-up, and the state
    streamed from a healthy replica (torchft's live recovery; peer_load_time_s)."""
    return spare_wait_s + swap_s + init_s + peer_load_s


def peer_load_time_s(rank_bytes: float, nic_bandwidth: float) -> float:
    """t_peer = S_rank / B_nic: each joining rank receives its part of the state from its counterpart
    in a healthy replica over its scale-out link (network.nic_bandwidth), all ranks at once."""
    return rank_bytes / nic_bandwidth


def absorbed_cost_s(units_hit: int, units: int, pause_s: float, rejoin_time_s: float) -> float:
    """Equivalent full-throughput seconds one absorbed failure costs: c = t_pause + (h / u) * D, the
    survivors' pause (detection and regrouping) and the hit share h / u of the throughput missing for
    the rejoin time D (the work of the step in flight is a fraction of a step, neglected)."""
    return pause_s + units_hit / units * rejoin_time_s
