"""Strict YAML for input documents (io.documents.parse_document): duplicate mapping keys refused,
alias expansion bounded (io.yaml_aliases), size and parse time bounded.

Issue 37: the pure-Python parser took ~12 s per MiB, so a document within the 16 MiB input cap
could take minutes. A YAML document is at most ``MAX_YAML_BYTES``, 256 KiB (the largest shipped YAML
file is 14 KB; JSON, parsed in C, keeps the 16 MiB cap; a 256 KiB document of nothing but flow
mappings, the slowest form, parses in ~1 s) and is parsed with libyaml's scanner and composer
where PyYAML was built with it; libyaml's composer recurses in C, so it is used only where
``_block_depth_bound`` shows the nesting is shallow, and the pure-Python one (whose recursion ends in
a RecursionError) otherwise, within ``PYTHON_PARSE_BUDGET_S``.
"""

from __future__ import annotations

import re
import time
from typing import Any

import yaml

from paraplan.io.referenced import MAX_YAML_BYTES  # noqa: F401 - defined where no YAML parser loads
from paraplan.io.yaml_aliases import MAX_EXPANDED_NODES, expanded_nodes

C_PARSE_MAX_DEPTH = 1000  # nesting bound up to which libyaml's recursive composer is used
PYTHON_PARSE_BUDGET_S = 10.0  # the pure-Python parser's time budget (weirdly indented documents)
_C_LOADER = getattr(yaml, "CSafeLoader", None)


class _AliasBudget:
    """Refuses documents whose aliases expand past MAX_EXPANDED_NODES nodes: an alias bomb (each level
    a list of aliases of the one before) of 300 bytes expands to gigabytes when walked (by the
    nesting check, by validation); its expanded size is counted on the composed graph, each node
    once, before that."""

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None and expanded_nodes(node) > MAX_EXPANDED_NODES:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"its aliases (*name) expand past {MAX_EXPANDED_NODES:,} values; not a paraplan input",
                node.start_mark,
            )
        return node


class _StrictLoader(_AliasBudget, yaml.SafeLoader):
    """YAML SafeLoader that refuses duplicate keys (PyYAML keeps the last one silently), alias bombs
    (``_AliasBudget``) and documents that take longer than PYTHON_PARSE_BUDGET_S to compose."""

    deadline = float("inf")

    def compose_node(self, parent, index):
        if time.monotonic() > self.deadline:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"it takes longer than {PYTHON_PARSE_BUDGET_S:g} s to parse; not a paraplan input",
                self.peek_event().start_mark,
            )
        return super().compose_node(parent, index)


_LOADERS = [_StrictLoader]
if _C_LOADER is not None:

    class _StrictCLoader(_AliasBudget, _C_LOADER):
        """The same rules on libyaml's parser (``_C_LOADER``)."""

    _LOADERS.append(_StrictCLoader)


_LINE_OPENING = re.compile(r"^([ \t]*)((?:[-?:](?:[ \t]+|$))*)", re.MULTILINE)


def _block_depth_bound(text: str) -> int:
    """An upper bound of a YAML text's block nesting: a child sits deeper in indentation than its
    parent or in a compact form on its parent's line (``- - x``, ``- a: b``, ``? x``), so a node's
    depth is at most its line's indentation plus twice the indicators that open its line, plus two."""
    deepest = 0
    for match in _LINE_OPENING.finditer(text):
        indent, indicators = match.group(1), match.group(2)
        deepest = max(deepest, len(indent) + 2 * len(indicators.split()) + 2)
    return deepest


def load_strict_yaml(text: str) -> Any:
    """The YAML document under the strict rules: on libyaml where the nesting bound allows, else on
    the pure-Python parser within its time budget."""
    if _C_LOADER is not None and _block_depth_bound(text) <= C_PARSE_MAX_DEPTH:
        return yaml.load(text, Loader=_LOADERS[-1])  # noqa: S506 - a CSafeLoader subclass
    loader = _StrictLoader(text)
    loader.deadline = time.monotonic() + PYTHON_PARSE_BUDGET_S
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _mapping_without_duplicates(loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:  # an unhashable key: construct_mapping reports it
            break
        if duplicate:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {key!r} (line {mark.line + 1}); give each key once",
                mark,
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


for _loader in _LOADERS:
    _loader.add_constructor(
        yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates
    )
