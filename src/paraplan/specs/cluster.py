"""A cluster of node pools, possibly of different GPU types (MISSION.md, "clusters may mix generations").

A pool is a number of identical nodes of one catalog system (its accelerator, NVLink domain and
scale-out network). GPUs are numbered pool by pool in the order the pools are listed, node by
node inside a pool; a non-uniform plan (specs/stage_plan.py) takes its stages' GPUs in that order.
Traffic between two pools crosses the slower of the two pools' scale-out networks unless a
``link`` states the bandwidth and latency between them (AMP's cluster of p3.8xlarge nodes at
10 Gb/s and g4dn.12xlarge nodes at 50 Gb/s, Li et al. 2022, arXiv:2210.07297 §5).

A plain system + GPU count is the uniform special case: ``uniform_cluster(system, gpus)``.

File form (YAML or JSON)::

    name: amp-mixed
    pools:
      - {name: v100, system: aws-p3.8xlarge, nodes: 3}
      - {name: t4, system: aws-g4dn.12xlarge, nodes: 1}
    links:                      # optional; per GPU, per direction, as NetworkSpec.nic_bandwidth
      - {pools: [v100, t4], bandwidth: 1.25 GB/s, latency: 30 us}
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import Field, PrivateAttr, model_validator

from paraplan.specs.errors import InputError
from paraplan.specs.strict import InputModel
from paraplan.specs.system import BytesPerS, Fraction, Seconds, SystemSpec

PoolName = Annotated[
    str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
]


class PoolSpec(InputModel):
    """``nodes`` identical servers of one system; ``gpus`` may use fewer than all their GPUs."""

    name: PoolName
    system: SystemSpec
    nodes: int = Field(1, gt=0, description="servers in the pool")
    gpus: int | None = Field(None, gt=0, description="GPUs used; default nodes × GPUs per node")
    nic_shared_by: int = Field(
        1,
        gt=0,
        description="GPUs of a node that share one network interface (AWS instances: all of them). The system's "
        "nic_bandwidth is each GPU's share when all of them send; fewer senders get more (link_rate)",
    )

    @property
    def gpus_per_node(self) -> int:
        node = self.system.node
        return node.gpus_per_domain

    @property
    def gpu_count(self) -> int:
        return self.gpus if self.gpus is not None else self.nodes * self.gpus_per_node

    @model_validator(mode="after")
    def _gpus_fit(self) -> "PoolSpec":
        if self.gpus is not None and self.gpus > self.nodes * self.gpus_per_node:
            raise ValueError(
                f"gpus={self.gpus} exceeds nodes × GPUs per node = {self.nodes} × {self.gpus_per_node}"
            )
        return self


class LinkSpec(InputModel):
    """The network between two pools, per GPU and direction (as ``NetworkSpec.nic_bandwidth``)."""

    pools: tuple[PoolName, PoolName]
    bandwidth: BytesPerS
    latency: Seconds = 10e-6
    efficiency: Fraction = Field(
        0.85, description="achieved fraction of bandwidth by NCCL transfers"
    )


class ClusterSpec(InputModel):
    name: str = "custom"
    source: str = ""
    pools: tuple[PoolSpec, ...] = Field(min_length=1)
    links: tuple[LinkSpec, ...] = ()
    _hash: int = PrivateAttr(0)

    def model_post_init(self, __context) -> None:
        self._hash = hash(self.model_dump_json())

    def __hash__(self) -> int:  # computed once: the stage-cost caches key on the cluster
        return self.__pydantic_private__["_hash"]

    @model_validator(mode="after")
    def _check_names(self) -> "ClusterSpec":
        names = [p.name for p in self.pools]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"pool names must be unique; {dup[0]!r} is used twice")
        pairs: set[frozenset[str]] = set()
        for link in self.links:
            a, b = link.pools
            for n in (a, b):
                if n not in names:
                    raise ValueError(f"link names pool {n!r}; pools are {', '.join(names)}")
            if a == b:
                raise ValueError(
                    f"link joins pool {a!r} to itself; a pool's own network is its system's"
                )
            if frozenset((a, b)) in pairs:
                raise ValueError(f"two links between {a!r} and {b!r}")
            pairs.add(frozenset((a, b)))
        return self

    # ---- derived ---------------------------------------------------------------------------
    @property
    def gpus(self) -> int:
        return sum(p.gpu_count for p in self.pools)

    @property
    def is_uniform(self) -> bool:
        """One pool: every GPU and link alike."""
        return len(self.pools) == 1

    def pool(self, name: str) -> PoolSpec:
        for p in self.pools:
            if p.name == name:
                return p
        raise InputError(
            f"pool: {name!r} is not allowed; the cluster's pools are {', '.join(p.name for p in self.pools)}"
        )

    def pool_offset(self, name: str) -> int:
        """Global index of the pool's first GPU (pools numbered in the order listed)."""
        offset = 0
        for p in self.pools:
            if p.name == name:
                return offset
            offset += p.gpu_count
        raise InputError(
            f"pool: {name!r} is not allowed; the cluster's pools are {', '.join(p.name for p in self.pools)}"
        )

    def nic_boost(self, pool: str, active: int | None) -> float:
        """How much more than its per-GPU share a sending GPU gets when only ``active`` GPUs of its node
        use the node's shared interface: nic_shared_by / active, at least 1 (None: all of them send)."""
        if active is None:
            return 1.0
        return max(1.0, self.pool(pool).nic_shared_by / max(1, active))

    def link_rate(
        self, a: str, b: str, active_a: int | None = None, active_b: int | None = None
    ) -> tuple[float, float]:
        """(achieved bytes/s per GPU and direction, latency s) between a GPU of pool ``a`` and one of ``b``
        on different nodes, with ``active_a`` / ``active_b`` GPUs of the two nodes sending at once (None:
        all): the pool's own scale-out network for a == b; otherwise the explicit link, or the slower of
        the two networks (lower achieved bandwidth, higher latency)."""
        boost = min(self.nic_boost(a, active_a), self.nic_boost(b, active_b))
        if a == b:
            net = self.pool(a).system.network
            return net.nic_bandwidth * net.efficiency * boost, net.latency
        for link in self.links:
            if set(link.pools) == {a, b}:
                return link.bandwidth * link.efficiency * boost, link.latency
        na, nb = self.pool(a).system.network, self.pool(b).system.network
        rate_a = na.nic_bandwidth * na.efficiency * self.nic_boost(a, active_a)
        rate_b = nb.nic_bandwidth * nb.efficiency * self.nic_boost(b, active_b)
        return min(rate_a, rate_b), max(na.latency, nb.latency)


def uniform_cluster(system: SystemSpec, gpus: int) -> ClusterSpec:
    """The uniform special case: one pool of ``gpus`` GPUs of ``system`` (nodes rounded up)."""
    per_node = system.node.gpus_per_domain
    nodes = max(1, math.ceil(gpus / per_node))
    return ClusterSpec(
        name=f"{gpus}x {system.name}",
        pools=(
            PoolSpec(
                name=re.sub(r"[^A-Za-z0-9_.-]", "-", system.name).lstrip("-._") or "pool",
                system=system,
                nodes=nodes,
                gpus=gpus,
            ),
        ),
    )
