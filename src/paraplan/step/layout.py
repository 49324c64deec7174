"""Blocks laid out on pipeline stages: the one module that builds ``step.compose.Stage``s.

Both plan kinds go through here with the same per-block granularity, so the composition (ZeRO-3's
per-block gathers, the largest block's buffer, the transformer-layer memory) sees the same blocks:

- a uniform plan (``build_step_inputs``): the blocks of a split (specs/split.py) on grouped stages, one
  Stage entry standing for ``count`` identical stages, each holding (block cost, how many) per kind
  (``with_stage_blocks``: the same stages holding other blocks, as partial recomputation splits them); where
  its stages do not tile the nodes, one entry per stage with its own links and gradient group
  (``positioned_stages``, step/placement.py);
- a per-stage plan (``range_stage`` for every block range [a, b) at once, as the search reads it, and
  ``stage_at`` for one range): one Stage per pipeline stage with its own StepInputs, holding one entry
  per distinct block of the model's block list (step.blocks.model_blocks: kind and widths) with its
  count in the range, a difference of that block's prefix counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple

import numpy as np

from paraplan.cost.elementwise import any_positive, is_array, maximum, where
from paraplan.graph.moe import moe_shaped
from paraplan.specs.model import ModelSpec
from paraplan.specs.split import SplitGroup
from paraplan.step.compose import (
    BLOCK_TERM_NAMES,
    BlockCost,
    BlockTerms,
    GradientGroup,
    GridKnobs,
    Stage,
    StepInputs,
)
from paraplan.step.blocks import BLOCK_KINDS, UNIFORM_STAGE_KINDS
from paraplan.step.constants import at_zero_stage, zero_stage_values
from paraplan.step.inputs import replaced
from paraplan.step.p2p import tied_embedding_sync_s, uniform_group_p2p

Num = Any


# ---- a uniform plan: grouped stages of a split ---------------------------------------------------
def layer_mix(model: ModelSpec | None, start: Num, layers: Num) -> tuple[Num, Num]:
    """(dense, MoE) layers among decoder layers [start, start + layers) of an MoE model (specs.moe_model
    rule: layer i ≥ dense_layers is MoE when (i − dense_layers + 1) mod n = 0): the multiples of n
    among j = i − dense_layers + 1 in the range. (0, 0) for models without graph.moe layers. A split
    group of several stages takes its first stage's mix (exact for interval 1 with the dense layers
    on the first stage, as every catalog MoE model)."""
    if model is None or not moe_shaped(model):
        return 0, 0
    if not model.is_moe:
        return layers, 0
    n, d = model.moe_layer_interval, model.dense_layers
    lo = maximum(start, d) - d  # plain ints for one plan, arrays for the search's candidates
    hi = maximum(start + layers, d) - d
    moe = hi // n - lo // n
    return layers - moe, moe


GRID_FIELDS = tuple(f.name for f in fields(GridKnobs))


class StageMix(NamedTuple):
    """How many blocks a uniform plan's stage holds, by what counts them (step.blocks.BlockKind
    ``stage_count`` names the field that counts a kind)."""

    embedding: Num  # the input block (first stage)
    layers: Num  # decoder layers
    dense: Num  # an MoE-family model's dense layers (layer_mix)
    moe: Num  # its MoE layers
    routed: Num  # its routed-expert blocks: one per MoE layer and per MTP module
    mtp: Num  # its MTP modules (last stage)
    head: Num  # the output block (last stage)


def stage_block_counts(
    model: ModelSpec | None, group: SplitGroup, start: Num
) -> tuple[tuple[str, Num], ...]:
    """(block kind, blocks of it on one stage of the group) in stage order (step.blocks.UNIFORM_STAGE_KINDS,
    each counted by its StageMix field): the embedding; the decoder layers, or for a model graph/moe.py
    builds (``model`` given) layer_mix's dense and MoE layers, the routed experts of each MoE layer and MTP
    module and the MTP modules on the last stage; the LM head. ``start``: the group's first layer."""
    dense = moe = mtp = 0
    if model is not None:
        dense, moe = layer_mix(model, start, group.layers)
        mtp = group.head * model.mtp_layers
    mix = StageMix(group.embedding, group.layers, dense, moe, moe + mtp, mtp, group.head)
    return tuple(
        (name, getattr(mix, count)) for name, count in UNIFORM_STAGE_KINDS[model is not None]
    )


def model_layer_counts(model: ModelSpec) -> tuple[tuple[str, int], ...]:
    """(transformer-layer kind, its layers) of every kind (step.blocks.BlockKind ``layer``) a uniform plan's
    stages hold at least one block of, in stage order: ``stage_block_counts`` of one stage holding every
    layer (a dense decoder: "decoder"; an MoE model: "dense_layer" where it has dense layers, "moe_layer")."""
    whole = SplitGroup(0, 1, model.layers, 1, 1)
    counts = stage_block_counts(model if moe_shaped(model) else None, whole, 0)
    return tuple((kind, int(n)) for kind, n in counts if n and BLOCK_KINDS[kind].layer)


def model_layer_kinds(model: ModelSpec) -> tuple[str, ...]:
    """The kinds of ``model_layer_counts``, in stage order."""
    return tuple(kind for kind, _ in model_layer_counts(model))


def build_step_inputs(
    facts,
    blocks: dict[str, BlockCost],
    knobs: GridKnobs,
    groups: tuple[SplitGroup, ...],
    constants: dict,
) -> StepInputs:
    """Lay the blocks out on the split's stages (embedding on the first, decoder layers by the
    split, LM head on the last, which also holds the embedding's parameters when pp = 1 and the
    embeddings are tied, the table then one weight tensor: step.blocks.head_tensors_shared_with_embedding)
    with their point-to-point seconds (step.p2p.uniform_group_p2p: a group of stages whose links differ
    is two entries, the second only when some candidate needs it) and the
    tied-embedding all-reduce (step.p2p.tied_embedding_sync_s), and attach the plan's knobs.
    ``facts``: the row's step.build.RowFacts."""
    head = blocks["head"]
    single = facts.pp == 1
    head = replaced(
        head,
        params=where(single, facts.head_params_with_embedding, head.params),
        weight_tensors=head.weight_tensors - where(single, facts.head_shared_tensors, 0.0),
    )
    stages, second = [], []
    start = 0  # first decoder layer of the group's first stage
    moe_model = facts.model is not None and moe_shaped(facts.model)
    for g in groups:
        placed = tuple(
            (head if name == "head" else blocks[name], n)
            for name, n in stage_block_counts(facts.model if moe_model else None, g, start)
        )
        (p2p, count), (p2p_2, count_2) = uniform_group_p2p(
            facts.pipeline, g.index, g.count, facts.pp, knobs.vpp
        )
        stages.append(Stage(g.index, count, placed, p2p))
        if any_positive(count_2):
            second.append(Stage(g.index, count_2, placed, p2p_2))
        start = start + g.count * g.layers
    links = facts.pipeline
    terms = at_zero_stage(constants, knobs.zero, knobs.offload_optimizer)
    return StepInputs(
        stages=tuple(stages + second),
        pp=facts.pp,
        microbatches=facts.microbatches,
        gradient_groups=facts.gradient_groups,
        knobs=knobs,
        **terms,
        tied_sync_s=tied_embedding_sync_s(
            links.tied, links.tied_elements, terms["grad_reduce_bytes"], facts.pp
        ),
    )


def with_knobs(inp: StepInputs, knobs: GridKnobs) -> StepInputs:
    """``inp`` under other ``knobs``, its ZeRO-stage gradient terms resolved at their ZeRO stages
    (StepInputs.zero_stage_terms, step.constants.zero_stage_values): how the search prices memory once per
    distinct ZeRO stage (search.grid_index)."""
    return replace(
        inp,
        knobs=knobs,
        **zero_stage_values(inp.zero_stage_terms, knobs.zero, knobs.offload_optimizer),
    )


def with_stage_blocks(
    inp: StepInputs, blocks_of: Callable[[Stage], tuple[tuple[BlockCost, Num], ...]]
) -> StepInputs:
    """``inp`` with each stage holding ``blocks_of(stage)`` instead of its blocks, all else kept (how
    step.partial_recompute splits a stage's decoder layers into recomputed and kept ones)."""
    return replace(inp, stages=tuple(replace(s, blocks=blocks_of(s)) for s in inp.stages))


def positioned_stages(
    inp: StepInputs,
    groups: tuple[SplitGroup, ...],
    pp: Num,
    p2p_at: Callable[[int], Num],
    dense_at: Callable[[int], GradientGroup],
    placed: Num = True,
    entries_at: Callable[[int], tuple[Stage, ...]] | None = None,
) -> StepInputs:
    """``inp`` (build_step_inputs of the split ``groups``: its first len(groups) entries hold their blocks,
    the same block per kind in each) where ``placed`` with one Stage entry per position instead (a uniform
    plan whose stages do not tile the nodes, step.placement): the blocks of the group holding it, as
    ``entries_at(position)`` holds them (build_step_inputs' entries on the position's own tp and cp spans;
    ``inp``'s where None), its point-to-point seconds ``p2p_at(position)`` and its own inputs, whose dense
    gradient group is ``dense_at(position)``. Elsewhere (arrays) the grouped entries stand and the
    positional ones are absent (count 0)."""
    base = replace(inp, stages=())
    kept = (
        [replace(e, count=where(placed, 0, e.count)) for e in inp.stages]
        if is_array(placed)
        else []
    )
    stages = []
    for s in range(int(np.max(np.where(placed, pp, 1)))):
        inside = [(g.index <= s) & (s < g.index + g.count) for g in groups]
        entries = inp.stages if entries_at is None else entries_at(s)
        blocks = tuple(
            (block, sum(where(i, e.blocks[k][1], 0.0) for i, e in zip(inside, entries)))
            for k, (block, _) in enumerate(entries[0].blocks)
        )
        groups_s = dict(inp.gradient_groups)
        if "dense" in groups_s:
            groups_s["dense"] = dense_at(s)
        own = replace(base, gradient_groups=groups_s)
        count = where(placed & (s < pp), 1.0, 0.0)
        stages.append(Stage(s, count, blocks, p2p_at(s), inputs=own))
    return replace(inp, stages=tuple(kept + stages))


# ---- a per-stage plan: one stage per range of the block list ---------------------------------------
@dataclass(frozen=True)
class RangeBlocks:
    """What a per-stage plan's stage is made of, for any range of the model's block list: the distinct
    blocks (step.blocks.BlockRef: kind and widths), each as one BlockCost per pool of the stage's GPUs
    (``units[pool][d]``), and ``prefix[d, k]``: how many of distinct block d lie among blocks [0, k)."""

    units: dict[str, tuple[BlockCost, ...]]
    prefix: np.ndarray  # [distinct blocks, n + 1]
    p2p_in: np.ndarray  # [a]: transfers with the previous stage when the stage starts at block a
    p2p_out: np.ndarray  # [b]: transfers with the next stage when the stage ends before block b
    inputs: StepInputs  # the stage's own (its GPUs' gradient group, HBM, state bytes)


def prefix_counts(keys: tuple, distinct: tuple) -> np.ndarray:
    """[d, k]: blocks equal to distinct[d] among keys[:k] (cumulative counts, one row per distinct block)."""
    hits = np.array([[key == d for key in keys] for d in distinct], dtype=float)
    return np.concatenate([np.zeros((len(distinct), 1)), np.cumsum(hits, axis=1)], axis=1)


def _block_total_s(block: BlockCost) -> Num:
    total = 0.0
    for name in BLOCK_TERM_NAMES:
        total = total + getattr(block.terms, name)
    return total


def _slowest_pool(units: dict[str, tuple[BlockCost, ...]], counts: list[Num]) -> Num:
    """Per range, the position (in ``units`` order) of the pool whose GPUs take longest for the range's
    blocks (the first such pool): its data-parallel replicas wait for it at every gradient sync."""
    best = choice = None
    for p, blocks in enumerate(units.values()):
        total = 0.0
        for block, n in zip(blocks, counts):
            total = total + n * _block_total_s(block)
        if best is None:
            best, choice = total, np.zeros(np.shape(total), dtype=np.int64)
        else:
            slower = total > best
            best, choice = np.maximum(total, best), np.where(slower, p, choice)
    return choice


def _picked(blocks: list[BlockCost], choice: np.ndarray) -> BlockCost:
    """The block whose terms are those of pool ``choice`` (per range) among ``blocks`` (one per pool)."""
    terms = {}
    for f in fields(BlockTerms):
        value = getattr(blocks[-1].terms, f.name)
        for p in range(len(blocks) - 2, -1, -1):
            value = np.where(choice == p, getattr(blocks[p].terms, f.name), value)
        terms[f.name] = value
    return replace(blocks[0], terms=BlockTerms(**terms))


def _stage_blocks(rb: RangeBlocks, counts: list[Num]) -> tuple[tuple[BlockCost, Num], ...]:
    """(block, count) per distinct block, the terms those of the slowest pool."""
    pools = list(rb.units.values())
    if len(pools) == 1:
        return tuple(zip(pools[0], counts))
    choice = _slowest_pool(rb.units, counts)
    if np.ndim(choice) == 0:
        return tuple(zip(pools[int(choice)], counts))
    return tuple((_picked([pool[d] for pool in pools], choice), n) for d, n in enumerate(counts))


def range_stage(rb: RangeBlocks, index: int) -> Stage:
    """The stage at position ``index`` holding blocks [a, b), every a ≤ b at once: counts and p2p are
    [n+1, n+1] arrays (negative below the diagonal: callers mask b ≤ a)."""
    counts = [row[None, :] - row[:, None] for row in rb.prefix]
    p2p = rb.p2p_in[:, None] + rb.p2p_out[None, :]
    return Stage(index, 1, _stage_blocks(rb, counts), p2p, inputs=rb.inputs)


def stage_at(rb: RangeBlocks, index: int, start: int, stop: int) -> Stage:
    """The stage at position ``index`` holding blocks [start, stop), as floats, with its own StepInputs
    (so compose_step prices its tail on its own GPUs and links)."""
    counts = [float(row[stop] - row[start]) for row in rb.prefix]
    p2p = float(rb.p2p_in[start] + rb.p2p_out[stop])
    return Stage(index, 1, _stage_blocks(rb, counts), p2p, inputs=rb.inputs)
