"""The expanded size of a composed YAML document: the budget that stops alias bombs.

An alias bomb (each anchor a list of aliases of the one before) is a few hundred bytes that expands
to gigabytes when walked. io.documents' loader counts :func:`expanded_nodes` on the composed graph,
each node once, and refuses a document past MAX_EXPANDED_NODES.
"""

from __future__ import annotations

import math

import yaml

MAX_EXPANDED_NODES = 1_000_000  # YAML nodes of a document with its aliases expanded; ours: < 10,000


def expanded_nodes(root: yaml.Node) -> int:
    """Nodes of the YAML graph at ``root`` with every alias expanded (a node reached twice counts
    twice), counted in time linear in the composed graph; a node that contains itself counts as
    infinite. Iterative post-order with the size of each node remembered."""
    size: dict[int, float] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        children = _children(node)
        if done:
            on_path.discard(id(node))
            size[id(node)] = 1 + sum(size[id(c)] for c in children)
            continue
        if id(node) in size:
            continue
        if id(node) in on_path:
            return math.inf
        on_path.add(id(node))
        stack.append((node, True))
        for child in children:
            if id(child) in on_path:
                return math.inf
            if id(child) not in size:
                stack.append((child, False))
    return size[id(root)]


def _children(node: yaml.Node) -> list:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


__all__ = ["MAX_EXPANDED_NODES", "expanded_nodes"]
