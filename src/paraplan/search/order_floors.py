"""The layer computes a row table's bound order floors its rows from (search.table.RowTable.order_floors): per layer
shape, a floor of the block compute of a layer kind (forward, backward and attention forward: what
step.build.kind_compute_floor reads) that costs a dense decoder layer without building its graph."""

from __future__ import annotations

from paraplan.graph.transformer import cp_free_key
from paraplan.search.bounds import SAFETY
from paraplan.search.space import SearchProblem
from paraplan.step.block_statics import kind_splits, split_computes
from paraplan.step.build import BlockCompute, kind_statics

# the split floors pay where a key stands for this many layer shapes or more (Llama 3.1 405B: 880 shapes on 120 keys,
# GPT-3 175B 971 on 185); below, the rows' bounds cost most shapes' graphs anyway (MT-NLG 530B on 5,128 A100: 48 on
# 39, every unit's bound worked out) and the split is extra work: the whole statics instead (the same order either way)
SHAPES_PER_KEY = 2


def order_computes(problem: SearchProblem, costs: list, kinds: tuple) -> dict | None:
    """Per layer kind, ``floor_computes`` at each cost id's shape (``costs``: search.row_enumeration.Costings.costs);
    None where no kind splits (step.build.kind_splits) or the shapes are fewer than SHAPES_PER_KEY per cp_free_key (the
    caller floors from the whole statics)."""
    if not any(kind_splits(problem.model, kind) for kind in kinds):
        return None
    shapes = [inputs.shape for inputs in costs]
    distinct = list(dict.fromkeys(shapes))
    if len(distinct) < SHAPES_PER_KEY * len({cp_free_key(shape) for shape in distinct}):
        return None
    computes = {}
    for kind in kinds:
        of = dict(zip(distinct, floor_computes(problem, distinct, kind)))
        computes[kind] = [of[shape] for shape in shapes]
    return computes


def floor_computes(problem: SearchProblem, shapes: list, kind: str) -> list:
    """Per layer shape, a floor of the kind's block compute at it, field by field: where the kind splits
    (step.build.split_computes: a dense decoder layer's ops but its core attention, costed once per
    graph.transformer.cp_free_key, and its core attention, once per distinct ops) the two parts' forward, backward
    and attention forward summed — the same op times as the layer's in another order — times SAFETY, and no RNG
    copies (>= 0: cost.rng_state); elsewhere the compute of step.build.kind_statics itself."""
    model, system = problem.model, problem.system
    out = []
    for shape in shapes:
        split = split_computes(model, system, shape, kind)
        out.append(
            kind_statics(model, system, shape, kind)[0] if split is None else _summed(*split)
        )
    return out


def _summed(rest, core) -> BlockCompute:
    """A floor of the compute of a block whose ops are ``rest``'s and ``core``'s (``floor_computes``). The
    early stop's tail (``early_stop_forward``, the ops a full recomputation does not re-run) enters the
    recomputation with a minus sign (step.block_terms.recompute_s), so a floor keeps it whole, over SAFETY."""
    return BlockCompute(
        (rest.forward + core.forward) * SAFETY,
        (rest.backward + core.backward) * SAFETY,
        (rest.attention_forward + core.attention_forward) * SAFETY,
        0.0,
        0.0,
        0.0,
        early_stop_forward=(rest.early_stop_forward + core.early_stop_forward) / SAFETY,
    )
