"""The expert-parallel parts of the search's floors (search.blocks): each expert option's compute from one graph
per block kind, the least exposed dispatch and combine of an option over its dispatchers and a2a-overlap switches,
and the expert options the floors range over.

A block's compute is a sum over its ops (step.build.block_compute) and only the ops graph.moe_mlp.expert_knob_ops lists read
the expert knobs (ep, etp, capacity, balance), so an option's compute is the block's other ops' (an MoE layer's
graph.moe.expert_free_ops; an MTP module's, its layer's plus the ops around it), costed once, plus its own; the dispatcher and the a2a-overlap switch change only the EP terms
(graph.moe.ops_expert_knobs), so an option's least EP terms come from its dispatch collectives alone. The costings
are memoised on what they read (graph.moe_mlp.expert_knob_inputs), shared by every (tp, cp, micro-batch) routing as many
tokens. With the K/V ring a kind's ops other than its core attention read the local tokens alone
(graph.transformer.cp_free_key), so its floors without that attention are costed once per (tp, local tokens) and the
attention's time is added per (cp, micro-batch) (KindFloors).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

# named here too: the exposure floors (search.bounds.exposure_floors)
__all__ = [
    "KNOB_MEMO_SIZE",
    "DispatchFloors",
    "expert_gemm_floor_s",
    "least_with",
    "ring_floor_s",
    "ring_transfer_floor_s",
]

from paraplan.graph.moe_mlp import expert_knob_ops
from paraplan.graph.ops import ExpertShape, LayerGraph, recomputed_op_names
from paraplan.graph.transformer import cp_free_key, with_expert
from paraplan.search.bounds import own_or_work
from paraplan.search.divisors import divisors
from paraplan.search.bounds.floor_memos import NO_CORE, CoreCost, RestMemo
from paraplan.search.bounds.exposure_floors import (
    KNOB_MEMO_SIZE,
    DispatchFloors,
    _dispatch_table,
    _remember,
    expert_gemm_floor_s,
    least_with,
    ring_added_s,
    ring_floor_s,
    ring_transfer_floor_s,
)
from paraplan.search.bounds.knob_computes import _knob_computes, compute_fields
from paraplan.search.space import SearchProblem
from paraplan.step.build import (
    BLOCK_KINDS,
    EXPERT_FREE_KINDS,
    BlockCompute,
    block_compute,
    model_block_kinds,
)
from paraplan.step.constants import system_pair_share
from paraplan.step.dualpipe import pair_compute_s


def expert_computes(model, system, name: str, shape, experts) -> tuple:
    """The step.build.BlockCompute of block kind ``name`` at ``shape`` with each expert option, its other ops costed
    once: a block's compute is a sum over its ops (step.build.block_compute), and only the ops
    graph.moe_mlp.expert_knob_ops lists read the expert knobs, so each option's compute is the rest's plus its own
    (the sum over its graph in another order, equal to a few ulps: SAFETY). One entry when the kind holds none of
    those ops; a kind that holds them declares the rest (BlockKind.expert_free_ops or parts). Cached: the refinements
    of every span pair and level ask again."""
    first = with_expert(shape, experts[0])
    return _expert_computes(model, system, name, first, tuple(experts))


@lru_cache(maxsize=16384)
def _expert_computes(model, system, name: str, first, experts: tuple, drop: tuple = ()) -> tuple:
    """expert_computes with the shape at the first expert option, without the ops in ``drop`` (KindFloors: the core
    attention); a kind made of another kind's graph and ops around it (BlockKind.parts: the MTP module) from that
    kind's computes plus those ops' (its sum in another order)."""
    parts = _parts_compute(model, system, name, first, drop)
    if parts is not None:
        inner, outer = parts
        outer = compute_fields(outer)
        return tuple(
            BlockCompute(*[a + b for a, b in zip(compute_fields(c), outer)])
            for c in _expert_computes(model, system, inner, first, experts, drop)
        )
    rest = _rest_compute(model, system, name, first, drop)
    if (
        rest is not None
    ):  # an MoE layer: its expert-free ops once, each option's own (the sum in another order)
        rest = compute_fields(rest)
        return tuple(
            BlockCompute(*[r + o for r, o in zip(rest, own)])
            for own in _knob_computes(model, system, first, experts)
        )
    graph = BLOCK_KINDS[name].graph(model, first)
    if (
        name not in EXPERT_FREE_KINDS
        and graph.ops
        and {op.name for op in expert_knob_ops(model, first, experts[0])}
        & {op.name for op in graph.ops}
    ):
        raise ValueError(
            f"block kind {name} holds ops that read the expert knobs: it must declare them "
            "(BlockKind.expert_free_ops or BlockKind.parts) for the search's floors"
        )
    if drop:
        graph = LayerGraph(name, _without(graph.ops, drop), (), 0.0)
    return (
        block_compute(graph, system, first.dtype),
    )  # reads no expert knob: one compute for every option


@lru_cache(maxsize=16384)
def _parts_compute(model, system, name: str, first, drop: tuple) -> tuple[str, BlockCompute] | None:
    """(the kind it is built on, the step.build.BlockCompute of the ops around it without the ops in ``drop``) of a kind
    made of another kind's graph and ops around it (BlockKind.parts: the MTP module); None for any other kind."""
    parts = BLOCK_KINDS[name].parts(model, first)
    if parts is None:
        return None
    inner, around = parts
    return inner, block_compute(
        LayerGraph(name, _without(around, drop), (), 0.0), system, first.dtype
    )


@lru_cache(maxsize=16384)
def _rest_compute(model, system, name: str, first, drop: tuple) -> BlockCompute | None:
    """The step.build.BlockCompute of an MoE layer kind's ops that read no expert knob (BlockKind.expert_free_ops),
    without the ops in ``drop``; None for a kind that declares no such ops."""
    free = BLOCK_KINDS[name].expert_free_ops(model, first)
    if free is None:
        return None
    return block_compute(LayerGraph(name, _without(free, drop), (), 0.0), system, first.dtype)


def _without(ops, drop: tuple) -> tuple:
    """The ops not in ``drop``, in order."""
    return tuple(op for op in ops if op not in drop) if drop else tuple(ops)


class KindFloor(NamedTuple):
    """One block kind's floors over the expert options at a shape (search.blocks.layer_floors): least work (compute,
    and for an MoE kind its least dispatch and combine), least forward, largest backward-GEMM share of compute."""

    work: float
    forward: float
    rho: float
    # a floor of what a DualPipe pair cannot hide of the kind (search.bounds.step_floors.LayerFloors.kept): the least
    # over the options of its compute, over the pair's SM share where the option has EP dispatch; None: ``work``
    kept: float | None = None
    # a floor of its work with the dispatch and combine unhidden (LayerFloors.raw): the least over the options of
    # compute plus the least raw dispatch and combine (_DispatchTable.raw); None: ``work``
    raw: float | None = None

    paired = property(lambda self: own_or_work(self.kept, self.work), doc="``kept``, or ``work``")
    unhidden = property(lambda self: own_or_work(self.raw, self.work), doc="``raw``, or ``work``")


class _RestFloor(NamedTuple):
    """A kind's floors without its core attention: per option (forward + backward, backward GEMM), its KindFloor
    with nothing added (least work with dispatch, least forward, largest backward-GEMM share), and the largest
    attention forward / backward time (BlockCompute.attention_*) of any option (ring_floor_s)."""

    totals: tuple
    gemm_backward: tuple
    floor: KindFloor
    attention: tuple[float, float]
    # (least compute of an option with EP dispatch, a floor of the least of the others): _paired_least
    paired: tuple[float, float] = (math.inf, 0.0)


class KindFloors:
    """KindFloor of each block kind at a shape, over the expert options ``experts`` (costing_experts of one tp).

    A kind's ops other than its core attention (BlockKind.core_ops) read graph.transformer.cp_free_key(shape) only, so their
    floors (_RestFloor: each option's compute, expert_computes without the core ops, with its least dispatch at any
    compute for an MoE kind, costed only for the options whose compute alone is below the least so far: least_with)
    are costed once for every (cp, micro-batch) with the same local tokens, memoised across calls; the core
    attention's time is added to every option (the same sums in another order: SAFETY). A kind without declared core
    ops is costed whole, memoised on its shape."""

    def __init__(self, problem: SearchProblem, experts: tuple):
        self.problem, self.experts = problem, tuple(experts)
        self.dispatch = DispatchFloors(problem)
        self.share = system_pair_share(
            problem.system
        )  # DualPipe's pair computes on this share of the SMs
        # the memo of these options, found once per problem and options tuple (costing_experts keeps one per tp) while
        # _REST_FLOORS is not cleared
        known = (memo := problem._memo.setdefault("rest_floors", {})).get(id(experts))
        if known is not None and known.holds(experts, _REST_GENERATION[0]):
            self.rest = known.rest
            return
        # what the rest floors read beyond the kind and the shape: the expert options and their switches
        outer = (
            problem.model,
            problem.system,
            self.experts,
            tuple(problem.expert_switches(e.ep, e.etp) for e in self.experts),
        )
        found = _REST_FLOORS.get(outer)
        self.rest = found if found is not None else _remember(_REST_FLOORS, outer, {})
        memo[id(experts)] = RestMemo(experts, _REST_GENERATION[0], self.rest)

    def __call__(self, name: str, shape) -> KindFloor:
        return dict(self.kinds(shape))[name]

    def kinds(self, shape, cheap: bool = False) -> list[tuple[str, KindFloor]]:
        """(name, its floor at the shape) of every block kind of the model, or with ``cheap`` its cheap floor (_floor's ``cheap``),
        the shape at the first expert option and its cp_free_key found once for all of them (search.blocks.layer_floors,
        once per key and layer knob)."""
        model = self.problem.model
        first = self._first(shape)
        free = ring = None
        costed = NO_CORE  # the layer kinds of a shape share one core (floor_memos.CoreCost)
        out = []
        for name in model_block_kinds(model):
            core = BLOCK_KINDS[name].core_ops(model, shape)
            if core is not None and free is None:
                free = cp_free_key(first)
                ring = ring_transfer_floor_s(model, self.problem.system, shape)
            if core and core is not costed.ops:
                costed = CoreCost(core, self._core(core, shape))
            key = free if core is not None else first
            extra = costed.compute if core else None
            out.append((name, self._floor(name, shape, core, extra, first, key, ring, cheap)))
        return out

    def _first(self, shape):
        """The shape at the first expert option (what the rest floors are costed at)."""
        return shape if shape.expert is self.experts[0] else with_expert(shape, self.experts[0])

    def _floor(
        self,
        name: str,
        shape,
        core: tuple | None,
        extra: BlockCompute | None,
        first,
        key,
        ring: tuple[float, float] | None = None,
        cheap: bool = False,
    ) -> KindFloor:
        """__call__'s floor; ``extra`` the compute of the ``core`` ops (_core; None without them), ``first`` the shape
        at the first option, ``key`` its cp_free_key (the shape without core); ``ring``: ring_transfer_floor_s at the
        shape (a kind with core attention adds ring_floor_s to its work).

        With ``cheap``, a floor of it that costs no expert option (search.run: the first bound of an MoE model's
        blocks, the exact one computed when a block reaches the front): a kind holding expert-knob ops takes its
        other ops (BlockKind.expert_free_ops; an MTP module its layer's and the ops around it, BlockKind.parts) and
        its core attention costed as below, the routed experts' grouped GEMMs at expert_gemm_floor_s, no dispatch
        and combine (>= 0), and ρ = 1 (no bubble floor leans on it: block_step_floor), and the K/V ring's floor
        (ring_floor_s) when no expert-knob op is among the ops its recompute modules mark (their attention time is
        then the same for every option); any other kind, and every kind when there is one expert option, the exact
        floor (costed once either way)."""
        found = (
            self._cheap_rest(name, first, key, core) if cheap and len(self.experts) > 1 else None
        )
        if found is not None:
            floor, attention = found
            if not core:
                return floor
            work = (
                floor.work + extra.forward + extra.backward + ring_added_s(ring, attention, extra)
            )
            return KindFloor(work, floor.forward + extra.forward, 1.0)
        rest = self._rest(name, shape, first, key, core)
        if not core:  # nothing added per (cp, micro-batch): the rest's own floor
            return rest.floor
        added = extra.forward + extra.backward
        rho = max(
            [
                (g + extra.gemm_backward) / (t + added)
                for g, t in zip(rest.gemm_backward, rest.totals)
                if t + added > 0
            ],
            default=0.0,
        )
        # what a pair cannot hide: the core's compute joins each option's, slowed with it where it dispatches
        ep, free = rest.paired
        kept = min(pair_compute_s(ep + added, True, self.share), free + added)
        ring_s = ring_added_s(ring, rest.attention, extra)
        added += ring_s
        raw = rest.floor.raw
        return KindFloor(
            rest.floor.work + added,
            rest.floor.forward + extra.forward,
            rho,
            kept + ring_s,
            None if raw is None else raw + added,
        )

    def _core(self, core: tuple, shape) -> BlockCompute:
        """The core attention's compute, costed once per distinct ops (_CORE_COMPUTES, keyed on the ops' values): the
        layer kinds of a shape share it (graph.moe.layer_core_ops is memoised: the same tuple), as do the cheap and
        exact floors of a key and every (tp, cp, micro-batch) whose core ops are equal (each builds its own tuple)."""
        system = self.problem.system
        key = (core, system, shape.dtype)
        found = _CORE_COMPUTES.get(key)
        if found is None:
            found = _remember(
                _CORE_COMPUTES,
                key,
                block_compute.__wrapped__(
                    LayerGraph("core attention", core, (), 0.0), system, shape.dtype
                ),
            )
        return found

    def _cheap_rest(
        self, name: str, first, shape_key, core: tuple | None
    ) -> tuple[KindFloor, tuple | None] | None:
        """(cheap's floor without the core attention, the attention time of those ops — forward, backward — when no
        expert-knob op is marked for recomputation at this shape, else None), memoised as _rest's; None for a kind
        without expert-knob ops."""
        experts = self.experts
        key = ("cheap", name, shape_key)
        found = self.rest.get(key, _MISSING)
        if found is _MISSING:
            model, system = self.problem.model, self.problem.system
            drop = tuple(core or ())
            parts = _parts_compute(model, system, name, first, drop)
            rest = _rest_compute(model, system, name if parts is None else parts[0], first, drop)
            if rest is None:
                found = None
            else:
                work, forward = rest.forward + rest.backward, rest.forward
                attention = (rest.attention_forward, rest.attention_backward)
                if parts is not None:  # the ops around the layer (an MTP module's)
                    work, forward = (
                        work + parts[1].forward + parts[1].backward,
                        forward + parts[1].forward,
                    )
                    attention = (
                        attention[0] + parts[1].attention_forward,
                        attention[1] + parts[1].attention_backward,
                    )
                experts_s = expert_gemm_floor_s(model, system, first, experts)
                # forward + backward, and forward alone: a third of the GEMMs' FLOPs (graph.transformer._gemm)
                found = (
                    KindFloor(work + experts_s, forward + experts_s / 3.0, 1.0),
                    None if self._marks_expert_ops(first) else attention,
                )
            _remember(self.rest, key, found)
        return found

    def _marks_expert_ops(self, shape) -> bool:
        """Whether the shape's recompute modules mark an expert-knob op (graph.ops.mark_recomputed): the op names at the
        option with the least ep, which has every option's ops and the re-sorts of several local experts
        (graph.moe_mlp.expert_ops); memoised per modules and datatype (the fp8 casts)."""
        key = ("marks expert ops", shape.recompute_modules, shape.dtype)
        found = self.rest.get(key)
        if found is None:
            widest = min(self.experts, key=lambda e: e.ep)
            names = {op.name for op in expert_knob_ops(self.problem.model, shape, widest)}
            found = _remember(
                self.rest, key, bool(names & recomputed_op_names(shape.recompute_modules))
            )
        return found

    def _rest(self, name: str, shape, first, shape_key, core: tuple | None) -> _RestFloor:
        """The kind's _RestFloor at the shape (``first``: at the first option; ``shape_key`` its cp_free_key, or itself
        when ``core`` is None) without the ``core`` ops (all its ops when None)."""
        experts = self.experts
        key = (name, shape_key)
        found = self.rest.get(key)
        if found is None:
            model, system = self.problem.model, self.problem.system
            computes = _expert_computes(model, system, name, first, experts, tuple(core or ()))
            totals = tuple(c.forward + c.backward for c in computes)
            raw = None
            if len(computes) == 1:
                work, paired = totals[0], (math.inf, totals[0])
            else:  # each option with its least dispatch at any compute; only options that can still be the least
                work = least_with(totals, lambda i: self.dispatch.table(shape, experts[i]).least)
                raw = least_with(totals, lambda i: self.dispatch.table(shape, experts[i]).raw)
                paired = _paired_least(
                    totals, lambda i: self.dispatch.table(shape, experts[i]).least > 0.0, self.share
                )
            gemm_backward = tuple(c.gemm_backward for c in computes)
            forward = min(c.forward for c in computes)
            rho = max([g / t for g, t in zip(gemm_backward, totals) if t > 0], default=0.0)
            attention = (
                max(c.attention_forward for c in computes),
                max(c.attention_backward for c in computes),
            )
            kept = min(pair_compute_s(paired[0], True, self.share), paired[1])
            found = _remember(
                self.rest,
                key,
                _RestFloor(
                    totals,
                    gemm_backward,
                    KindFloor(work, forward, rho, kept, raw),
                    attention,
                    paired,
                ),
            )
        return found


def _paired_least(totals: tuple, dispatched, share: float) -> tuple[float, float]:
    """(the least of ``totals`` over the options with EP dispatch, ``dispatched(j)``; a floor of the least over the
    others), options read in ascending order: a DualPipe pair computes an option with dispatch on ``share`` of the SMs
    (step.dualpipe.overlapped_pair_s: C/s), so once such an option is found at t the others matter only below t/s,
    and the first option at or above that floors them all. ``dispatched(j)``: the option's least exposed dispatch at
    any switch is > 0 (DispatchFloors.table(...).least), so every row of it has EP traffic (BlockTerms.ep_comm > 0)."""
    ep = free = math.inf
    for j in sorted(range(len(totals)), key=totals.__getitem__):
        t = totals[j]
        if t >= pair_compute_s(ep, True, share) or (ep < math.inf and free < math.inf):
            return ep, min(free, t)
        if dispatched(j):
            ep = min(ep, t)
        else:
            free = min(free, t)
    return ep, free


_REST_FLOORS: dict = {}  # (model, system, expert options, their switches) -> {(kind, cp_free_key or shape): _RestFloor}
_MISSING = object()
_CORE_COMPUTES: dict = {}  # (core ops, system, dtype) -> BlockCompute: KindFloors._core, equal ops costed once
_REST_GENERATION = [
    0
]  # bumped when _REST_FLOORS is cleared (cache_clear): a problem's handle on it is then stale


def least_memory_expert(problem: SearchProblem, tp: int) -> ExpertShape:
    """The expert option of costing_experts with the least ep and the least etp: the one whose layers keep the
    fewest activation bytes. graph.moe.moe_mlp_activation_bytes keeps, per routed row (R = T·k·etp·load,
    graph.moe.routed_rows), gin·h + score bytes and p·f/etp + f/etp elements: T·k·load·(etp·(gin·h + score)
    + F·(ab·p + gin)) grows with etp, and load (graph.routing.routed_load_factor: constant, or
    expected_max_load_factor over T·k·ep choices in ep bins) does not fall with ep; nothing else a kind keeps
    reads them (tests/search/test_moe_search.py checks it against every option)."""
    options = costing_experts(problem, tp)
    return min(options, key=lambda expert: (expert.ep, expert.etp))


def expert_pairs(problem: SearchProblem, tp: int) -> list[tuple[int, int]]:
    """Every (ep, etp) the expert axes allow for this tp, before the rules that read dp."""
    if not problem.model.is_moe:
        return [(1, 1)]
    eps = problem.ep or tuple(divisors(problem.model.experts))
    etps = problem.etp or tuple(sorted({1, tp}))
    return [(ep, etp) for ep in eps for etp in etps]


def costing_experts(problem: SearchProblem, tp: int) -> tuple[ExpertShape, ...]:
    """One ExpertShape per (ep, etp) of expert_pairs, with the alltoall dispatcher and no a2a overlap: the costing
    that stands for every dispatcher and overlap switch (their ops are shared: graph.moe.ops_expert_knobs). Memoised."""
    memo = problem._memo.setdefault("costing_experts", {})
    fixed = (problem.capacity_factor, problem.moe_balance)
    if tp not in memo:
        memo[tp] = tuple(
            ExpertShape(ep, etp, "alltoall", *fixed, False, problem.expert_load_cv)
            for ep, etp in expert_pairs(problem, tp)
        )
    return memo[tp]


def _clear_rest_floors() -> None:
    """KindFloors.cache_clear: empty the memos and retire the problems' handles on them."""
    _REST_FLOORS.clear()
    _CORE_COMPUTES.clear()
    _REST_GENERATION[0] += 1


KindFloors.cache_clear = _clear_rest_floors  # as the lru caches (SEARCH_CACHES)
EXPERT_CACHES = (
    _expert_computes,
    _parts_compute,
    _rest_compute,
    _knob_computes,
    _dispatch_table,
    KindFloors,
)  # what a cold search starts without
