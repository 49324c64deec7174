"""The device placements of the AMP-style search (``search --cluster``): the orders in which the pools
take the pipeline's ranks, listed lazily and counted in closed form.

Two pools are interchangeable when they differ only by name (same system, nodes, GPUs and interface
sharing) and no explicit link names either: every cost the step model prices through a pool reads these
fields (specs.cluster.ClusterSpec.link_rate: a pool's own network, or the explicit link, or the slower
of the two networks), so swapping two interchangeable pools in an order relabels the plan and leaves
its step time unchanged. The distinct orders are the permutations of the multiset of pool kinds
(Knuth, TAOCP vol. 4A, §7.2.1.2): with n pools in kinds of c₁, …, c_r members,

    orders = n! / (c₁! · … · c_r!)

(n! when every pool is its own kind: itertools.permutations' order, the same orders in the same
sequence). Six pools in two kinds of three give 20 orders, not 720; sixteen in two kinds of eight give
12,870, not 2·10¹³. The orders are listed one at a time, in lexicographic order of the kinds (a kind's
k-th place taken by its k-th pool as listed), so a search stopped by its budget holds one order at a time.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from paraplan.specs.cluster import ClusterSpec


def pool_kinds(cluster: ClusterSpec) -> list[tuple[str, ...]]:
    """The cluster's pools grouped into kinds of interchangeable pools (module docstring), each kind's
    names in the order listed, kinds in the order of their first pool."""
    linked = {name for link in cluster.links for name in link.pools}
    kinds: list[list[str]] = []
    keys: list[object] = []
    for pool in cluster.pools:
        key = None if pool.name in linked else pool.model_dump_json(exclude={"name"})
        if key is not None and key in keys:
            kinds[keys.index(key)].append(pool.name)
        else:
            keys.append(key if key is not None else object())
            kinds.append([pool.name])
    return [tuple(k) for k in kinds]


def pool_order_count(cluster: ClusterSpec) -> int:
    """Distinct pool orders: n! / Π_kinds c! (module docstring), an exact integer."""
    kinds = pool_kinds(cluster)
    total = math.factorial(sum(len(k) for k in kinds))
    for kind in kinds:
        total //= math.factorial(len(kind))
    return total


def pool_orders(cluster: ClusterSpec) -> Iterator[tuple[str, ...]]:
    """The distinct pool orders (module docstring), one at a time, lexicographic in the kinds."""
    kinds = pool_kinds(cluster)
    left = [len(k) for k in kinds]
    n = sum(left)
    sequence: list[int] = []

    def extend() -> Iterator[tuple[str, ...]]:
        if len(sequence) == n:
            used = [0] * len(kinds)
            names = []
            for kind in sequence:
                names.append(kinds[kind][used[kind]])
                used[kind] += 1
            yield tuple(names)
            return
        for kind, count in enumerate(left):
            if count:
                left[kind] -= 1
                sequence.append(kind)
                yield from extend()
                sequence.pop()
                left[kind] += 1

    yield from extend()
