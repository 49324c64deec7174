"""The blocks of a per-stage plan's stage on one pool's GPUs: one BlockCost per distinct block of the model's
block list (step.blocks.model_blocks), costed by the uniform path's functions (step.build.kind_cost_facts and
kind_memory_facts at the block's widths, step.build.block_cost), with the pipeline engine's rules
(step.engines.EngineRules) on top; and the names
a per-op recompute list may give (``recomputable_names``).
step/layout.py lays them out on stages, step/per_stage.py prices the plan.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from types import MappingProxyType

import numpy as np

from paraplan.cost.comm import GroupSpan
from paraplan.graph.ops import POLICY_MODULES, RECOMPUTE_MODULE_OPS
from paraplan.graph.transformer import LayerShape
from paraplan.specs.model import ModelSpec
from paraplan.specs.rules import recompute_modules_rule
from paraplan.specs.system import SystemSpec
from paraplan.step.blocks import (
    BlockRef,
    attached_blocks,
    block_graph,
    head_params_with_embedding,
    head_tensors_shared_with_embedding,
    model_blocks,
)
from paraplan.step.layer_shape import layer_shape_from
from paraplan.step.build import (
    BlockFacts,
    block_cost,
    kind_cost_facts,
    kind_memory_facts,
    tp_overlap,
)
from paraplan.specs.recompute import RECOMPUTE_CODES
from paraplan.step.compose import BLOCK_TERM_NAMES, BlockCost
from paraplan.step.engines import EngineRules, host_layer_times_s
from paraplan.step.layout import prefix_counts

NO_SPAN = GroupSpan(1, 1, 1)


@lru_cache(maxsize=256)
def distinct_blocks(model: ModelSpec) -> tuple[BlockRef, ...]:
    """The distinct blocks of the model's block list, in order of first appearance, then the blocks a stage
    holds beside them (``attached_blocks``)."""
    return _listed_blocks(model_blocks(model)) + tuple(ref for ref, _ in attached_blocks(model))


def _listed_blocks(blocks) -> tuple[BlockRef, ...]:
    """The distinct blocks of the block list ``blocks``, in order of first appearance."""
    return tuple(dict.fromkeys(blocks))


@lru_cache(maxsize=64)
def block_prefix_counts(model: ModelSpec) -> np.ndarray:
    """[d, k]: how many of distinct block d (``distinct_blocks``) a stage holding blocks [0, k) of the block list
    holds: step.layout.prefix_counts for the listed blocks, an attached block's hosts' counts times how many
    each brings (``attached_blocks``)."""
    blocks = model_blocks(model)
    listed = _listed_blocks(blocks)
    prefix = prefix_counts(blocks, listed)
    rows = [
        sum(hosts.get(ref.kind, 0) * row for ref, row in zip(listed, prefix))
        for _, hosts in attached_blocks(model)
    ]
    out = np.vstack([prefix, *rows]) if rows else prefix
    out.setflags(write=False)  # memoised: every stage of the model reads it
    return out


@lru_cache(maxsize=4096)
def _block_facts(
    model: ModelSpec,
    system: SystemSpec,
    ref: BlockRef,
    shape: LayerShape,
    recompute: str,
    memory_factor: float,
    head_params: float | None,
    async_tp: bool,
    span: GroupSpan,
    cp_span: GroupSpan = NO_SPAN,
) -> BlockFacts:
    """One distinct block's sums on one pool's GPUs, costed as a uniform plan costs its kind, by the same two
    functions: step.build.kind_cost_facts (its op times, and its TP collectives on the stage's slowest TP group,
    ``span``, step.stage_links.tp_span; its CP collectives on its slowest CP group, ``cp_span``,
    step.stage_links.cp_span; an expert kind's dispatch and combine on cost.moe's expert spans of
    ``shape.expert``; backward TP collectives hidden only where the engine runs them asynchronously,
    ``async_tp``: step.engines.EngineRules.async_tp_backward) and step.build.kind_memory_facts, both at the
    block's own widths (``ref.width``: a layer_widths group's, else the model's); parameters (``head_params`` in
    place of the graph's when given: the output block sharing the stage with the input block, whose weight
    tensors then leave out the tied table: step.blocks.head_tensors_shared_with_embedding) and memory (kept and
    held bytes times the engine's activation_memory_factor)."""
    w = ref.width
    cost = kind_cost_facts(
        model, system, shape, span, cp_span, ref.kind, async_tp=async_tp, width=w
    )
    facts = BlockFacts.of(cost, kind_memory_facts(model, shape, ref.kind, recompute, w))
    if head_params is not None:  # the output block beside the input block: the tied table once
        shared = head_tensors_shared_with_embedding(w)
        facts = replace(facts, params=head_params, weight_tensors=facts.weight_tensors - shared)
    return replace(
        facts,
        activation_bytes=facts.activation_bytes * memory_factor,
        held_bytes=facts.held_bytes * memory_factor,
    )


def _with_engine(cost: BlockCost, rules: EngineRules, layer: bool, recompute: str) -> BlockCost:
    """The engine's rules on one block's terms (its ``async_tp_backward`` is read where the block's collectives
    are summed, ``_block_facts``): on a transformer layer the host seconds
    per layer (step.engines.host_layer_times_s) are added to forward and backward, and to the recompute
    under full recomputation, which re-runs the forward. (The engine's gradient accumulation is the stage's,
    step.compose.runtime_work, as on a uniform plan: StepInputs.grad_accumulation_bytes.)"""
    host_f, host_b = host_layer_times_s(rules) if layer else (0.0, 0.0)
    if not (host_f or host_b):
        return cost
    t = cost.terms
    terms = replace(
        t,
        forward=t.forward + host_f,
        backward=t.backward + host_b,
        recompute=t.recompute + (host_f if recompute == "full" else 0.0),
    )
    return replace(cost, terms=terms)


@lru_cache(maxsize=4096)
def pool_units(
    model: ModelSpec,
    system: SystemSpec,
    shape: LayerShape,
    recompute: str,
    first_and_last: bool,
    rules: EngineRules,
    overlap_tp_comm: bool,
    span: GroupSpan,
    cp_span: GroupSpan = NO_SPAN,
) -> tuple[BlockCost, ...]:
    """One BlockCost per distinct block (``distinct_blocks``) on one pool's GPUs, through step.build.block_cost
    (the uniform path's) with the engine's rules (``_block_facts``' async_tp, ``_with_engine``); TP comm-GEMM overlap as
    the plan asks, where the stage's slowest TP group (``span``) sits in one NVLink domain (step.build.tp_overlap);
    CP collectives on ``cp_span`` (step.stage_links.cp_span)."""
    overlap = tp_overlap(overlap_tp_comm, span.domains)
    out = []
    for ref in distinct_blocks(model):
        head = ref.kind == "head" and first_and_last
        params = head_params_with_embedding(ref.width, shape.tp) if head else None
        facts = _block_facts(
            model,
            system,
            ref,
            shape,
            recompute,
            rules.activation_memory_factor,
            params,
            rules.async_tp_backward,
            span,
            cp_span,
        )
        cost = block_cost(ref.kind, facts, RECOMPUTE_CODES[recompute], overlap)
        out.append(_with_engine(cost, rules, ref.is_layer, recompute))
    return tuple(out)


@lru_cache(maxsize=4096)
def per_block_parts(
    model: ModelSpec, units: tuple[BlockCost, ...]
) -> MappingProxyType[str, np.ndarray]:
    """BlockTerms seconds of every block of the block list (index k = block k) from the distinct blocks', each
    with those of the blocks it brings (``attached_blocks``: an MTP module's with the output block): each
    distinct block's seconds worked out once, then laid out over the list (``_list_index``). Memoised (the
    per-stage searches bound every candidate's stages with it, and a pool's units, step.stage_blocks.pool_units,
    recur across pool orders): the mapping and its arrays are read-only."""
    distinct = distinct_blocks(model)
    index = {ref: d for d, ref in enumerate(distinct)}
    attached = [(index[ref], hosts) for ref, hosts in attached_blocks(model)]

    def seconds(ref: BlockRef, name: str) -> float:
        own = getattr(units[index[ref]].terms, name)
        return own + sum(
            n * getattr(units[a].terms, name)
            for a, hosts in attached
            if (n := hosts.get(ref.kind, 0))
        )

    at = _list_index(model)
    out = {
        name: np.array([seconds(ref, name) for ref in distinct], dtype=float)[at]
        for name in BLOCK_TERM_NAMES
    }
    for array in out.values():
        array.setflags(write=False)
    return MappingProxyType(out)


@lru_cache(maxsize=64)
def _list_index(model: ModelSpec) -> np.ndarray:
    """[k]: the index in ``distinct_blocks`` of block k of the block list."""
    index = {ref: d for d, ref in enumerate(distinct_blocks(model))}
    at = np.array([index[ref] for ref in model_blocks(model)], dtype=np.intp)
    at.setflags(write=False)
    return at


@lru_cache(maxsize=256)
def recomputable_names(
    model: ModelSpec, seq_length: int, attention: str, dtype: str, cp: int = 1
) -> frozenset[str]:
    """What a per-op recompute list (StagePlanSpec ``recompute_ops``) may name for this model: every module
    of graph.ops.RECOMPUTE_MODULE_OPS whose ops its layers have, and those ops; a stack's policy
    (graph.ops.POLICY_MODULES: op_sac on a dense swiglu model, save_dots on a dense one) where the model takes
    it at the stage's ``cp`` (specs.rules.recompute_modules_rule)."""
    shape = layer_shape_from(1, 1, 1, seq_length, False, attention, dtype)
    present: set[str] = set()
    for ref in {r.kind: r for r in model_blocks(model) if r.is_layer}.values():
        present |= {op.name for op in block_graph(model, ref, shape).ops}
    names: set[str] = set()
    for module, ops in RECOMPUTE_MODULE_OPS.items():
        found = present.intersection(ops)
        if found:
            names |= {module, *found}
    for policy in POLICY_MODULES:  # a stack's policy, alone, where the model takes it at this cp
        if not recompute_modules_rule(model, "selective", (policy,), cp):
            names.add(policy)
    return frozenset(names)


def recomputable_modules(
    model: ModelSpec, seq_length: int, attention: str, dtype: str
) -> tuple[str, ...]:
    """The module names among ``recomputable_names``, in RECOMPUTE_MODULE_OPS order."""
    allowed = recomputable_names(model, seq_length, attention, dtype)
    return tuple(m for m in RECOMPUTE_MODULE_OPS if m in allowed)
