"""The work floors of the search's block bounds (search.bounds.blocks.refined_bound): per recompute mode, each block
kind's least per-micro-batch work over every row of a (tp, cp, micro-batch) and span pairs, with its exposed
communication (``work_floors``), and its least activation bytes (``ModeFloors``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from paraplan.graph.moe import NO_EXPERT
from paraplan.graph.ops import ExpertShape
from paraplan.graph.transformer import with_expert
from paraplan.search.arrays import stack, take
from paraplan.search.bounds.expert_floors import (
    DispatchFloors,
    costing_experts,
    expert_computes,
    least_memory_expert,
    least_with,
)
from paraplan.search.options import LayerKnob
from paraplan.search.shapes import layer_shape_of
from paraplan.search.space import SearchProblem
from paraplan.specs.moe_model import moe_shaped
from paraplan.specs.recompute import MODES, mode_modules
from paraplan.step.build import (
    BLOCK_KINDS,
    EXPERT_FREE_KINDS,
    _kind_cost_facts as kind_cost_facts,
    block_cost_facts,
    block_memory_facts,
    kind_memory_facts,
    model_block_kinds,
)
from paraplan.step.compose import BLOCK_TERM_NAMES, block_terms
from paraplan.step.constants import system_pair_share
from paraplan.step.dualpipe import pair_compute_s

EXPERT_TERMS = (
    "ep_forward",
    "ep_backward",
)  # the BlockTerms parts that read the dispatcher (work_floors)


@dataclass(frozen=True)
class ModeFloors:
    """Per recompute mode (specs.recompute mode name -> kind -> value) over a set of rows: least block work
    (``work_floors``), least activation bytes kept per in-flight micro-batch, least bytes held once."""

    work: dict
    kept: dict
    held: dict
    # per mode, each kind's floor of what a DualPipe pair cannot hide of it (LayerFloors.kept); {}: none known
    paired: dict = field(default_factory=dict)
    # per mode, each kind's floor of its work with the dispatch and combine unhidden (LayerFloors.raw); {}: none known
    raw: dict = field(default_factory=dict)


def work_floors(
    problem: SearchProblem,
    tp: int,
    cp: int,
    micro_batch: int,
    pairs: tuple,
    expert_kinds: bool = True,
    cache: dict | None = None,
) -> ModeFloors:
    """Per recompute mode, each block kind's least per-micro-batch work over every row with these
    degrees, micro-batch, one of the (tp span, cp span) ``pairs`` and the mode: the sum of
    ``step.compose.block_terms``' time parts — forward, backward, recompute, the exposed TP and CP communication,
    and for an MoE kind split per option (expert_computes) the least exposed dispatch and combine over the option's
    dispatchers and a2a-overlap switches (DispatchFloors; 0 otherwise, a floor) — least over every
    ``layer_knobs`` option of the mode (TP overlap included), every (ep, etp) and every pair; and its least kept
    and held activation bytes (``step.build.block_memory_facts``). Admissible: each row's block work
    (stage_work) is one of these sums with its own EP terms; the dispatcher and the a2a-overlap switch
    change only the EP terms (graph.moe.ops_expert_knobs: the ops are shared; dispatch_collectives:
    groups ep/etp only, which step.build.block_comm books as EP), so the alltoall costing stands for the rest; the
    dispatch reads no span, so the least over the pairs is taken entry by entry before it is added (the same
    value as the least over the pairs of each pair's floor).
    Without ``expert_kinds`` only the EXPERT_FREE_KINDS are costed (for one expert option: they read
    none) and the other kinds get 0, a floor of anything: a cheap first refinement.
    ``cache`` (refined_bound's) keeps what no span reads (_WorkEntries) per (tp, cp, micro-batch, level) and each
    pair's sums (_pair_totals) across the blocks of one search."""
    cache = {} if cache is None else cache
    level = "all" if expert_kinds else "expert_free"
    key = ("entries", tp, cp, micro_batch, level)
    entries = cache.get(key)
    if entries is None:
        entries = cache[key] = _work_entries(problem, tp, cp, micro_batch, pairs[0], expert_kinds)
    missing = [pair for pair in pairs if ("totals", tp, cp, micro_batch, pair, level) not in cache]
    if missing:  # the pairs not costed yet, on one set of arrays
        for pair, found in zip(missing, _pair_totals(problem, entries, missing, expert_kinds)):
            cache[("totals", tp, cp, micro_batch, pair, level)] = found
    totals = None
    for pair in pairs:
        found = cache[("totals", tp, cp, micro_batch, pair, level)]
        totals = found if totals is None else np.minimum(totals, found)
    total = totals.tolist()
    dispatch = DispatchFloors(problem)

    def exposed_dispatch(j):  # an entry's least EP terms (0 without a per-option split)
        found = entries.dispatch[j]
        return dispatch(*found, entries.computes[j]) if found is not None else 0.0

    share = system_pair_share(problem.system)

    def pair_slowed(j):
        """What a DualPipe pair adds to an entry's compute C: C/s − C where it dispatches, 0 elsewhere."""
        compute = entries.computes[j].forward + entries.computes[j].backward
        return pair_compute_s(compute, exposed_dispatch(j) > 0.0, share) - compute

    work: dict[str, dict] = {}
    paired: dict[str, dict] = {}
    start = 0
    for (mode, name), stop in zip(entries.keys, entries.stops):
        work.setdefault(mode, {})[name] = least_with(
            total[start:stop], lambda j, start=start: exposed_dispatch(start + j)
        )
        # the entries' sums leave out the EP terms: with each one's compute slowed where it dispatches, the least is
        # the kind's floor of what a pair cannot hide (LayerFloors.kept)
        paired.setdefault(mode, {})[name] = least_with(
            total[start:stop], lambda j, start=start: pair_slowed(start + j)
        )
        start = stop
    for mode in work:  # kinds not costed (without expert_kinds): 0 floors anything
        for name in model_block_kinds(problem.model):
            work[mode].setdefault(name, 0.0)
            paired[mode].setdefault(name, 0.0)
    return ModeFloors(
        work, entries.kept, entries.held, paired, _raw_floors(entries, total, dispatch)
    )


def _raw_floors(entries: _WorkEntries, total: list, dispatch: DispatchFloors) -> dict:
    """Per mode, each kind with an entry that adds a dispatch: the least over its entries of their sums (``total``)
    plus their least raw dispatch and combine (_DispatchTable.raw; 0 for an entry without), its work with the
    dispatch unhidden, what a pass run unpaired pays (LayerFloors.raw; work_floors)."""
    raw: dict[str, dict] = {}
    start = 0
    for (mode, name), stop in zip(entries.keys, entries.stops):
        found = entries.dispatch[start:stop]
        if any(f is not None for f in found):
            raw.setdefault(mode, {})[name] = least_with(
                total[start:stop],
                lambda j, found=found: 0.0 if found[j] is None else dispatch.table(*found[j]).raw,
            )
        start = stop
    return raw


@dataclass(frozen=True)
class _WorkEntries:
    """What work_floors reads that no span changes, for one (tp, cp, micro-batch, level): per (mode, kind), in
    ``keys`` order, a range of entries ending at its ``stops``; per entry its compute (step.build.BlockCompute), the
    recompute code, whether its layer knob overlaps TP communication, the layer shape and kind whose cost facts give
    its communication (``sources``: an index into ``shapes``, and a kind), and the (shape, expert option) whose
    dispatch it adds or None; the least kept and held bytes per mode and kind."""

    keys: tuple
    stops: tuple
    computes: tuple
    stacked: object  # ``computes`` as one step.build.BlockCompute of arrays (arrays.stack)
    codes: np.ndarray
    overlaps: np.ndarray
    shapes: tuple
    sources: tuple
    dispatch: tuple
    kept: dict
    held: dict


def _work_entries(
    problem: SearchProblem, tp: int, cp: int, micro_batch: int, pair: tuple, expert_kinds: bool
) -> _WorkEntries:
    """work_floors' _WorkEntries: one entry per (mode, kind, costing); a kind whose costs read no expert knob has
    one entry per layer knob, not one per option. Compute and memory read no span (stages._graph_statics), so the
    step.build.block_cost_facts at any pair give them: at ``pair``, whose communication work_floors costs next."""
    experts = costing_experts(problem, tp) if moe_shaped(problem.model) else (ExpertShape(),)
    if not expert_kinds:
        experts = experts[:1]
    found = _Found({}, {}, {})
    for knob in problem.layer_knobs(tp, cp):
        _add_knob_entries(problem, (tp, cp, micro_batch), pair, expert_kinds, experts, knob, found)
    return _packed(problem.model, found)


class _Entry(NamedTuple):
    """One entry of _WorkEntries (its docstring), as _add_knob_entries finds it."""

    compute: object  # step.build.BlockCompute
    code: int  # the recompute code, 0 for a kind no recomputation re-runs
    overlap: bool  # the layer knob overlaps TP communication
    source: tuple  # (index into the shapes, kind) whose cost facts give its communication
    dispatch: tuple | None  # (shape, expert option) whose dispatch it adds


class _Found(NamedTuple):
    """_work_entries' collection: per (mode, kind) its entries and their memory facts, and the layer shapes whose
    cost facts give some entry's communication (id -> (its index, the shape))."""

    entries: dict
    memory: dict
    knobs: dict


def _add_knob_entries(
    problem: SearchProblem,
    key: tuple,
    pair: tuple,
    expert_kinds: bool,
    experts,
    knob,
    found: _Found,
) -> None:
    """The entries of one layer knob (search.options.LayerKnob) at every expert option of ``experts``."""
    (tp, cp, micro_batch), knob = key, LayerKnob(*knob)
    model, system = problem.model, problem.system
    shaped = moe_shaped(model)
    mode, layout = knob.recompute, knob.tp_layout  # a specs.recompute mode
    recompute, modules = MODES[mode].recompute, mode_modules(mode, shaped)
    code = MODES[
        mode
    ].code  # step.build.row_blocks: only the kinds recomputation checkpoints re-run
    sp, rows = knob.sequence_parallel, knob.tp_rows or 0
    shapes = [
        layer_shape_of(problem, tp, cp, micro_batch, sp, layout, rows, expert, modules)
        for expert in experts
    ]
    first = _kind_facts(model, system, shapes[0], pair, recompute, expert_kinds)
    # the kinds that read the expert knobs: compute per option from one graph (expert_computes); their TP / CP
    # collectives read no expert knob (EP and ETP ones are EXPERT_TERMS), but a 2D layout's SUMMA exposure
    # reads the compute (stages.with_summa_exposure): costed option by option then
    split = {
        name: expert_computes(model, system, name, shapes[0], experts)
        for name in first
        if name not in EXPERT_FREE_KINDS and layout != "2d" and len(experts) > 1
    }
    least_memory = None
    for i, shape in enumerate(shapes):
        if i == 0:
            facts_i = first
            source = first_source = found.knobs.setdefault(id(shape), (len(found.knobs), shape))[0]
        elif split:  # the first option's costs stand for the rest but the split kinds'; of the options' memory only
            # the least is read, and the least-memory option keeps it (least_memory_expert)
            if least_memory is None:
                least = least_memory_expert(problem, tp)
                least_shape = layer_shape_of(
                    problem, tp, cp, micro_batch, sp, layout, rows, least, modules
                )
                least_memory = block_memory_facts(model, least_shape, recompute)
            facts_i = {name: (first[name][0], least_memory[name]) for name in split}
            source = first_source  # the first option's communication stands for every option's
        else:
            facts_i = _kind_facts(model, system, shape, pair, recompute, expert_kinds)
            source = found.knobs.setdefault(id(shape), (len(found.knobs), shape))[0]
        for name, (cost, activations) in facts_i.items():
            computes = split.get(name)
            own = computes is not None and len(computes) > 1
            found.entries.setdefault((mode, name), []).append(
                _Entry(
                    computes[i] if own else cost.compute,
                    code if BLOCK_KINDS[name].recomputed else 0,
                    knob.overlap_tp_comm,
                    (source, name),
                    (shape, shape.expert) if own else None,
                )
            )
            found.memory.setdefault((mode, name), []).append(activations)


def _packed(model, found: _Found) -> _WorkEntries:
    """The _WorkEntries of what _add_knob_entries found: entries in (mode, kind) order, least memory per mode and kind."""
    entries, memory = found.entries, found.memory
    keys = tuple(entries)
    items = [item for key in keys for item in entries[key]]
    stops = tuple(np.cumsum([len(entries[key]) for key in keys]).tolist())
    kept: dict[str, dict] = {}
    held: dict[str, dict] = {}
    for mode, name in keys:
        kept.setdefault(mode, {})[name] = min(m.activation_bytes for m in memory[(mode, name)])
        held.setdefault(mode, {})[name] = min(m.held_bytes for m in memory[(mode, name)])
    for mode in kept:  # kinds not costed (without expert_kinds): 0 floors anything
        for name in model_block_kinds(model):
            kept[mode].setdefault(name, 0.0)
            held[mode].setdefault(name, 0.0)
    computes = tuple(item.compute for item in items)
    return _WorkEntries(
        keys,
        stops,
        computes,
        stack(list(computes), np.arange(len(items))),
        np.array([item.code for item in items]),
        np.array([item.overlap for item in items], dtype=bool),
        tuple(shape for _, shape in found.knobs.values()),
        tuple(item.source for item in items),
        tuple(item.dispatch for item in items),
        kept,
        held,
    )


def _pair_totals(
    problem: SearchProblem, entries: _WorkEntries, pairs: list, expert_kinds: bool
) -> list[np.ndarray]:
    """Per (tp span, cp span) pair of ``pairs``: each entry's block_terms time parts but the EXPERT_TERMS, summed, with
    the pair's communication (step.build.block_cost_facts of the entry's knob and kind); comm-GEMM overlap only inside one
    NVLink domain (step.build.row_blocks). The pairs' entries go through block_terms on one set of arrays (it works entry
    by entry: the same values as pair by pair)."""
    model, system = problem.model, problem.system
    costs = [
        [_kind_costs(model, system, shape, pair, expert_kinds) for shape in entries.shapes]
        for pair in pairs
    ]
    comms, index, seen = [], [], {}
    for costs_of_pair in costs:
        for source, name in entries.sources:
            comm = costs_of_pair[source][name].comm
            slot = seen.get(id(comm))
            if slot is None:
                slot = seen[id(comm)] = len(comms)
                comms.append(comm)
            index.append(slot)
    n = len(entries.codes)
    compute = take(entries.stacked, np.tile(np.arange(n), len(pairs)))
    overlaps = np.concatenate([entries.overlaps & (pair[0].domains == 1) for pair in pairs])
    terms = block_terms(  # the floor sums BLOCK_TERM_NAMES only: no split-backward term
        compute,
        stack(comms, np.array(index)),
        np.tile(entries.codes, len(pairs)),
        overlaps,
        deferred=False,
    )
    total = 0.0
    for part in BLOCK_TERM_NAMES:
        if part not in EXPERT_TERMS:
            total = total + getattr(terms, part)
    total = np.broadcast_to(total, (len(pairs) * n,))
    return [total[i * n : (i + 1) * n] for i in range(len(pairs))]


def _kind_facts(
    model, system, shape, pair: tuple, recompute: str, expert_kinds: bool
) -> dict[str, tuple]:
    """Per block kind (all, or only EXPERT_FREE_KINDS without ``expert_kinds``): its step.build.block_cost_facts
    and step.build.block_memory_facts entries, the same values, without costing the kinds left out."""
    costs = _kind_costs(model, system, shape, pair, expert_kinds)
    if expert_kinds:
        memory = block_memory_facts(model, shape, recompute)
        return {name: (costs[name], memory[name]) for name in costs}
    return {
        name: (cost, kind_memory_facts(model, shape, name, recompute))
        for name, cost in costs.items()
    }


def _kind_costs(model, system, shape, pair: tuple, expert_kinds: bool) -> dict:
    """_kind_facts' step.build.block_cost_facts entries alone (what a span changes: _pair_totals)."""
    if expert_kinds:
        return block_cost_facts(model, system, shape, *pair)
    neutral = with_expert(shape, NO_EXPERT) if moe_shaped(model) else shape
    return {
        name: kind_cost_facts(model, system, name, neutral, pair)
        for name in model_block_kinds(model)
        if name in EXPERT_FREE_KINDS
    }
