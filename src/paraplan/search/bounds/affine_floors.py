"""A first bound of an MoE model's blocks that costs no op graph per key: each block kind's ops other than its core
attention priced by a floor affine in the local tokens, fitted once per (tp, layer knob).

The cheap layer floors (search.bounds.expert_floors.KindFloors.kinds with ``cheap``) cost, for every (tp, local
tokens) class of the space, each kind's ops other than its core attention through step.build.block_compute: 508
classes on DeepSeek-V3 over every axis, most of its first bounds, for the ~150 classes whose blocks can reach the
front. Here every such op's time is bounded below by ``op_floor_s`` (cost.compute.op_times_s without the GEMM wave,
depth and alignment factors, which are <= 1, nor a fused kernel's time: >= 0), a formula in its FLOP and byte counts.
With the K/V ring (graph.transformer.cp_free_key) those ops read the shape's local tokens T = b·s/c alone, and the
graph builders count their FLOPs and bytes as products of T and the model's widths, so each op's floor is affine in T:
``_fit`` takes it at the least and the largest T of the tp's keys and checks it at two more; an op it does not fit
to the last bits (relative AFFINE_TOLERANCE) is floored at 0. A kind's floor at a key is then slope·T + intercept
(times AFFINE_SAFETY: the sum in another order) plus what the cheap floor adds per key, the same values in the same
order: the core attention's compute (KindFloors._core), the K/V ring's exposure floor (exposure_floors.ring_added_s,
with no attention beside the core's: taken only where no other op of the kind is marked for recomputation, and for a
kind holding expert-knob ops only where none of those is marked, as the cheap floor takes it; 0 elsewhere) and the
routed experts' GEMM floor (exposure_floors.expert_gemm_floor_s) for a kind holding expert-knob ops; ρ = 1.

Each kind's floor is at most its cheap floor (every term at most the cheap one's, added in the same order: floating-
point addition is monotone), so the block's bound is at most its cheap bound (search.bounds.step_floors: monotone in
the kinds' work), and search.run's queue, which raises a block's bound level by level and keeps the largest, gives
every block the same last bound: the same blocks are searched in the same order (tests/search/test_affine_floors.py
compares the two floors key by key). Not used (``affine_floors`` None: the cheap floors) for a problem with a kernel
table that prices its kernels (its GEMM times are measured, not capped; cost.table_grouped.prices_kernels), a 2D layout or Ulysses (their ops read cp beyond the local tokens), a
tp with one expert option (the exact floors are the first bound there) or fewer than AFFINE_MIN_KEYS keys (fitting
costs ~40 graph costings per tp: more than the cheap floors of a small space)."""

from __future__ import annotations

import math
from typing import NamedTuple

from paraplan.cost.compute import grouped_gemm_share
from paraplan.cost.table_grouped import prices_kernels
from paraplan.graph.transformer import cp_free_key
from paraplan.search.bounds.expert_floors import KindFloors, costing_experts
from paraplan.search.bounds.floor_memos import NO_CORE, CoreCost
from paraplan.search.bounds.exposure_floors import (
    expert_gemm_floor_s,
    ring_added_s,
    ring_transfer_floor_s,
)
from paraplan.search.bounds.step_floors import LayerFloors
from paraplan.search.shapes import layer_shape_of, shape_keys_of
from paraplan.search.space import SearchProblem
from paraplan.step.build import BLOCK_KINDS, model_block_kinds

AFFINE_MIN_KEYS = 256  # fewer (tp, cp, micro-batch) keys: the cheap floors (module doc)
AFFINE_TOLERANCE = 1e-11  # relative misfit at the check points above which an op is floored at 0
# slope·T + intercept sums the ops' floors in another order: keep it below the sum
AFFINE_SAFETY = 1.0 - 1e-9
_NO_ATTENTION = (0.0, 0.0)


def op_floor_s(op, acc, dtype: str) -> float:
    """A floor of cost.compute.op_times_s(op) forward + backward on a system without a kernel table (the caller's
    condition): a GEMM F FLOPs at peak · gemm_efficiency_cap (gemm_time_s divides by peak · cap · wave · depth ·
    alignment share, each <= 1) plus the GEMM ramp and kernel overhead of each of its three calls with FLOPs; a grouped
    GEMM at peak · cap · grouped_gemm_share (its fixed costs >= 0 left out); an element-wise kernel (no measured
    kernel: Op.kernel None) its bytes at f · bytes / (HBM bandwidth · hbm efficiency) plus the kernel overhead per
    pass that moves anything (memory_time_s's max with the vector-FLOP time >= the first); any other op (attention,
    host synchronisation, a measured eager kernel) 0."""
    eff = acc.efficiency
    if op.kind == "gemm" or op.kind == "grouped_gemm":
        rate = acc.peak_matrix_flops(dtype) * acc.gemm_efficiency_cap(dtype)
        if op.kind == "grouped_gemm":
            return (op.fwd_flops + op.bwd_flops) / (rate * grouped_gemm_share(acc, dtype))
        fixed = eff.gemm_ramp_s + eff.kernel_overhead_s
        calls = (op.fwd_flops > 0) + 2 * (op.bwd_flops > 0)
        return (op.fwd_flops + op.bwd_flops) / rate + calls * fixed
    if op.kind in ("attention", "host_sync") or op.kernel is not None:
        return 0.0
    total = 0.0
    for moved, flops in ((op.fwd_bytes, op.fwd_flops), (op.bwd_bytes, op.bwd_flops)):
        if moved > 0 or flops > 0:
            total += (
                max(moved, 0.0) * eff.eager_traffic_factor / acc.hbm_rate() + eff.kernel_overhead_s
            )
    return total


def affine_floors(problem: SearchProblem, keys: list) -> dict | None:
    """(tp, cp, micro-batch) -> LayerFloors, the affine first bound of each key (module doc); None when the problem
    takes the cheap floors (module doc). A key whose tp has one expert option, or whose layer knob is not a 1D layout
    with the K/V ring, is absent (the caller takes its cheap floors)."""
    acc = problem.system.accelerator
    if len(keys) < AFFINE_MIN_KEYS or (
        acc.kernel_tables
        and prices_kernels(acc.kernel_tables, acc.l2_cache, acc.efficiency.runtime.grouped_gemm)
    ):
        return None
    by_tp: dict[int, list] = {}
    for key in keys:
        tp, _, _ = key  # (tp, cp, micro-batch)
        by_tp.setdefault(tp, []).append(key)
    out = {}
    for tp, members in by_tp.items():
        experts = costing_experts(problem, tp)
        if len(experts) < 2:
            continue
        floors = KindFloors(problem, experts)
        fits = _Fits({}, {})
        for key in members:
            found = _key_floors(problem, floors, fits, members, key)
            if found is not None:
                out[key] = found
    return out


class _Fits(NamedTuple):
    """The memos of one tp's keys: each layer knob's fitted lines (_fit) and the routed experts' GEMM floor
    at each (knob, local tokens)."""

    lines: dict
    experts: dict


def _key_floors(problem, floors: KindFloors, fits: _Fits, members: list, key) -> LayerFloors | None:
    """The affine LayerFloors of one key: each kind's least floor over the key's layer knobs (blocks.layer_floors'
    shapes); None when a knob's shape is not affine in the local tokens (a 2D layout, Ulysses)."""
    tp, cp, micro_batch = key
    model, system, experts = problem.model, problem.system, floors.experts
    memo = problem._memo.setdefault("layer_floor_knobs", {})
    knobs = memo.get((tp, cp))
    if knobs is None:
        knobs = memo[(tp, cp)] = sorted(set(shape_keys_of(problem.layer_knobs(tp, cp))))
    work: dict[str, float] = {}
    for knob in knobs:
        shape = layer_shape_of(problem, tp, cp, micro_batch, *knob, experts[0])
        if len(cp_free_key(shape)) == 1:  # the whole shape: its ops read cp beyond the local tokens
            return None
        if knob not in fits.lines:
            fits.lines[knob] = _fit(problem, floors, members, knob)
        tokens, ring, costed = shape.local_tokens, None, NO_CORE
        # the routed experts' floor is a function of the local tokens at a knob (its class's)
        experts_s = fits.experts.get((knob, tokens))
        for name, slope, intercept, expert_kind, ring_ok in fits.lines[knob]:
            value = (slope * tokens + intercept) * AFFINE_SAFETY
            if expert_kind:
                if experts_s is None:
                    experts_s = fits.experts[knob, tokens] = expert_gemm_floor_s(
                        model, system, shape, experts
                    )
                value += experts_s
            core = BLOCK_KINDS[name].core_ops(model, shape)
            if core:
                if ring is None:
                    ring = ring_transfer_floor_s(model, system, shape)
                if core is not costed.ops:
                    costed = CoreCost(core, floors._core(core, shape))
                extra = costed.compute
                added = ring_added_s(ring, _NO_ATTENTION, extra) if ring_ok else 0.0
                if expert_kind:  # KindFloors._floor's cheap sum, in its order
                    value = value + extra.forward + extra.backward + added
                else:  # its exact sum: the rest, then the core and the ring
                    value = value + (extra.forward + extra.backward + added)
            work[name] = min(work.get(name, math.inf), value)
    return LayerFloors(
        work, 1.0
    )  # compute alone: a pair cannot hide any of it (LayerFloors.kept None)


def _fit(problem, floors: KindFloors, members: list, knob) -> list[tuple]:
    """Per block kind of the model: (name, slope, intercept, holds expert-knob ops, its ring floor applies) of the
    floor of its ops other than its core attention at the layer knob, over the local tokens of ``members`` (keys of
    one tp): fitted at the least and the largest, checked at two more (module doc)."""
    model, tp, experts = problem.model, members[0][0], floors.experts
    by_tokens: dict[int, tuple] = {}
    for _, cp, micro_batch in members:
        shape = layer_shape_of(problem, tp, cp, micro_batch, *knob, experts[0])
        by_tokens.setdefault(shape.local_tokens, shape)
    tokens = sorted(by_tokens)
    points = [tokens[0], tokens[-1], tokens[len(tokens) // 3], tokens[(2 * len(tokens)) // 3]]
    shapes = [by_tokens[t] for t in points]
    out = []
    for name in model_block_kinds(model):
        rests = [_rest_ops(problem, name, shape) for shape in shapes]
        expert_kind = rests[0][1]
        aligned = all(len(r[0]) == len(rests[0][0]) for r in rests) and all(
            a.name == b.name for r in rests[1:] for a, b in zip(r[0], rests[0][0])
        )
        slope = intercept = 0.0
        if aligned:
            for ops in zip(*(r[0] for r in rests)):
                s, c = _fit_op(problem, ops, shapes, points)
                slope, intercept = slope + s, intercept + c
        marked = any(op.selective_recompute for r in rests for op in r[0])
        ring_ok = not marked and not (expert_kind and floors._marks_expert_ops(shapes[0]))
        out.append((name, slope, intercept, expert_kind, ring_ok))
    return out


def _fit_op(problem, ops: tuple, shapes: list, points: list) -> tuple[float, float]:
    """(slope, intercept) of op_floor_s of one op over the local tokens ``points`` (its values at ``shapes``): the line
    through the first two, or (0, 0) when the others are off it by more than AFFINE_TOLERANCE (relative)."""
    acc = problem.system.accelerator
    values = [op_floor_s(op, acc, shape.dtype) for op, shape in zip(ops, shapes)]
    if points[1] == points[0]:
        return (0.0, values[0]) if all(v == values[0] for v in values) else (0.0, 0.0)
    slope = (values[1] - values[0]) / (points[1] - points[0])
    intercept = values[0] - slope * points[0]
    for t, v in zip(points, values):
        if abs(slope * t + intercept - v) > AFFINE_TOLERANCE * abs(v):
            return 0.0, 0.0
    return slope, intercept


def _rest_ops(problem, name: str, shape) -> tuple[tuple, bool]:
    """(the kind's ops other than its core attention at the shape, whether it holds expert-knob ops): an MTP-like kind
    (BlockKind.parts) its inner kind's and the ops around it, an MoE layer its expert-free ops, any other kind its
    graph's — the ops KindFloors' cheap floor costs (expert_floors._rest_compute, _parts_compute, _expert_computes)."""
    model = problem.model
    kind = BLOCK_KINDS[name]
    core = kind.core_ops(model, shape) or ()
    parts = kind.parts(model, shape)
    around: tuple = ()
    if parts is not None:
        name, around = parts[0], tuple(parts[1])
        kind = BLOCK_KINDS[name]
    free = kind.expert_free_ops(model, shape)
    ops = tuple(free) if free is not None else tuple(kind.graph(model, shape).ops)
    return tuple(op for op in ops + around if op not in core), free is not None
