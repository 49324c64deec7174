"""The expert options' own computes in the search's floors (search.bounds.expert_floors.expert_computes): per
option, the step.build.BlockCompute fields of the ops graph.moe_mlp.expert_knob_ops lists, memoised on what those
ops read (graph.moe_mlp.expert_knob_inputs) and, below that, on the ops themselves."""

from __future__ import annotations

from operator import attrgetter

from paraplan.graph.moe_mlp import expert_knob_inputs, expert_knob_ops
from paraplan.graph.ops import LayerGraph, mark_recomputed
from paraplan.search.bounds.exposure_floors import _remember
from paraplan.step.build import BlockCompute, block_compute

compute_fields = attrgetter(*BlockCompute._fields)  # a step.build.BlockCompute's fields as a tuple


def _knob_computes(model, system, shape, experts: tuple) -> tuple[tuple[float, ...], ...]:
    """Per expert option, the step.build.BlockCompute fields (as a tuple) of the ops graph.moe_mlp.expert_knob_ops lists for it
    at the shape (marked for its recompute modules as the layer marks them), memoised per option on what those ops
    read (graph.moe_mlp.expert_knob_inputs): shared by every block kind holding an MoE layer and every (tp, cp,
    micro-batch) routing as many tokens, whatever the tp (the options with etp 1 recur for every tp)."""
    inputs = expert_knob_inputs(shape)
    out = []
    for expert in experts:
        key = (model, system, inputs, expert, shape.recompute_modules)
        found = _KNOB_COMPUTES.get(key)
        if (
            found is None
        ):  # the ops read the option from ``expert`` (expert_knob_parts), not from the shape
            ops = mark_recomputed(expert_knob_ops(model, shape, expert), shape.recompute_modules)
            found = _remember(_KNOB_COMPUTES, key, _ops_compute(ops, system, shape.dtype))
        out.append(found)
    return tuple(out)


def _ops_compute(ops: tuple, system, dtype: str) -> tuple[float, ...]:
    """The step.build.BlockCompute fields of one graph of ``ops`` (step.build.block_compute reads its ops, the
    system and the datatype, not its name), memoised on those: recompute modules that mark none of an option's
    expert-knob ops (core_attn: the core attention) give the same ops as none, costed once."""
    key = (ops, system, dtype)
    found = _OPS_COMPUTES.get(key)
    if found is None:
        found = _remember(
            _OPS_COMPUTES,
            key,
            compute_fields(
                block_compute.__wrapped__(LayerGraph("expert knobs", ops, (), 0.0), system, dtype)
            ),
        )
    return found


_KNOB_COMPUTES: dict = {}
_OPS_COMPUTES: dict = {}  # (ops, system, dtype) -> BlockCompute fields: _ops_compute


def _clear_knob_computes() -> None:
    """_knob_computes.cache_clear: both its memos, as the lru caches (SEARCH_CACHES)."""
    _KNOB_COMPUTES.clear()
    _OPS_COMPUTES.clear()


_knob_computes.cache_clear = _clear_knob_computes
