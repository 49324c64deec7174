"""The canonical space in blocks, each with an admissible bound, for spaces too large for one row table.

A *block* is one (tp, cp, dp, pp) factorization at one micro-batch size: its rows are contiguous in
the canonical order (space.rows: factorization, micro-batch, placement, layer knobs, expert options),
so a block is a range [offset, offset + rows) of the row numbers and its own row table
(search.table.RowTable on the problem restricted to the block's degrees and micro-batch) lists
exactly those rows, in that order.

The bound of a block never exceeds the step time of any of its candidates (module ``search.run``
skips a block whose bound cannot enter the top K). With W_s the per-micro-batch work of stage s
(``step.compose.stage_work``), S the slowest stage's, T = Σ_s W_s over the pp stages and m
micro-batches, ``step.compose.compose_step`` gives
    step = m·S + bubble + tail,    tail (optimizer, data-parallel, offload) >= 0,
    bubble = (T − S)/v (1F1B and GPipe v = 1; interleaved v = vpp <= v_max), (T − S)·share (ZB-H1),
             (p/2 − 1)·max(F&B + B − 3W, 0) (DualPipe; F, B, W of the slowest stage, S = F + B + p2p,
             F&B its overlapped pair; its steady state m·S − n·(S − F&B), n = max(m − p − 1, 0)).
Every BlockTerms part is >= 0, so a stage's work is at least the sum over its blocks of their
compute (forward + backward), for a block holding an MoE layer its exposed dispatch and combine (the EP parts, least
over the dispatchers and a2a-overlap switches), and for a block with core attention under the K/V ring the ring's
exposure floor (search.expert_floors.ring_floor_s: its transfer on the cheapest span a cp group of the key can
have, less the largest attention time it can hide behind); a floor of each block kind's work
over every row of the block (``layer_floors``: the least over the sequence-parallel / layout options
and every (ep, etp)) and
the layer split of the schedule option (specs.split, step.build.layer_mix, the same rule
``step.build.build_step_inputs`` lays the blocks out with) give floors S0 <= S and T0 <= T. With
ρ = the largest share of backward GEMM time in any block's compute (gemm_backward / (forward +
backward)), the weight-gradient time W = Σ gemm_backward/2 is at most ρ·(F + B)/2, so ZB-H1's
share (F + B − 2W)/(F + B) >= 1 − ρ. Each form
m·S + c·(T − S) (c <= 1 <= m) grows with S and T, so evaluating it at (S0, T0) bounds it. DualPipe's is read
per stage i (step.schedules._dualpipe_stage_floor_s): its pair F&B >= C/s + X (the compute over the SM share the
pair leaves it where the stage dispatches, and the TP / CP parts) and >= S/2, so with K0ᵢ the sum of its blocks'
floors of C/s + X (LayerFloors.kept: the least over the options of each kind's compute, over s where the option
dispatches) the steady state is at least (m − n)·S0ᵢ + n·max(K0ᵢ, S0ᵢ/2) and the bubble, with B >= 2W,
(p/2 − 1)·max(K0ᵢ·(1 − ρ'/2), S0ᵢ·(1 − ρ')/2), ρ' = min(ρ, 1), each the largest over the stages
(step_floors.paired_stage_floors). The block's bound is the least over its schedule options. For an MoE model the first bound takes cheaper
floors (``layer_floors(cheap=True)``: the routed experts' GEMMs at their FLOP floor, no dispatch, ρ = 1, the ring's
floor only where no expert op is recomputed;
``first_bound_levels``) and the floors above are its first refinement. ``refined_bound`` then raises it per
recompute mode, first with memory alone (``memory_floors``: the recomputation a block's activations force),
then with the exposed TP / CP communication and recomputation of the expert-free kinds, then of every kind
(``work_floors``, over the block's span pairs at once) — each when the block reaches the front of the queue
(search.run._branch_and_bound). The expert-parallel parts of the floors (each expert option's compute and
least dispatch/combine) are search.expert_floors'.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

# named here too: the work floors (search.bounds.work_floors)
__all__ = ["EXPERT_TERMS", "ModeFloors", "work_floors"]


from paraplan.graph.ops import ExpertShape
from paraplan.search.bounds.expert_floors import (
    EXPERT_CACHES,
    KindFloors,
    costing_experts,
    least_memory_expert,
)
from paraplan.search.bounds.step_floors import (
    SAFETY,
    LayerFloors,
    block_step_floor,
    group_blocks,
    stage_floors,
    stage_sum,
)
from paraplan.search.bounds.work_floors import EXPERT_TERMS, ModeFloors, work_floors
from paraplan.search.shapes import layer_shape_of, shape_keys_of
from paraplan.search.space import SearchProblem, distinct_orders, rows_per_micro_batch
from paraplan.search.table import TABLE_CACHES
from paraplan.specs.moe_model import moe_shaped
from paraplan.specs.recompute import MODES, mode_modules
from paraplan.specs.rules_offload import host_capacity_bytes
from paraplan.step.build import (
    BLOCK_KINDS,
    EXPERT_FREE_KINDS,
    block_compute,
    kind_memory_facts,
    model_block_kinds,
)
from paraplan.step.compose import TRANSFORMER_KINDS
from paraplan.step.constants import system_terms
from paraplan.step.offload import offload_traffic_bytes
from paraplan.step.schedules import least_in_flight_microbatches


class Block(NamedTuple):
    """One (tp, cp, dp, pp) factorization (search.options.Factorization's fields) at one micro-batch: rows
    [offset, offset + rows) of the space (a NamedTuple: a search enumerates thousands before it forks,
    search.run._search_blocks)."""

    tp: int
    cp: int
    dp: int
    pp: int
    micro_batch: int
    global_batch: int
    offset: int
    rows: int
    candidates: int

    @property
    def microbatches(self) -> int:
        return self.global_batch // (self.dp * self.micro_batch)

    def problem(self, problem: SearchProblem) -> SearchProblem:
        """The problem restricted to this block: its row table lists exactly the block's rows, in order."""
        return replace(
            problem, tp=(self.tp,), pp=(self.pp,), cp=(self.cp,), micro_batch=(self.micro_batch,)
        )


def blocks(problem: SearchProblem) -> list[Block]:
    """Every non-empty block of the space, in canonical order, with its row offset and sizes."""
    out, offset = [], 0
    states = {}
    for tp, cp, dp, pp in problem.factorizations:
        per_batch = rows_per_micro_batch(problem, tp, cp, dp, pp)
        if not per_batch:
            continue
        if (dp * cp, pp) not in states:
            states[dp * cp, pp] = len(problem.state_options(dp * cp, pp)) * len(
                problem.offload_options
            )
        for mb, gb in problem.micro_batches(dp):
            m = gb // (dp * mb)
            grid = len(problem.schedule_options(pp, m)) * states[dp * cp, pp]
            out.append(Block(tp, cp, dp, pp, mb, gb, offset, per_batch, per_batch * grid))
            offset += per_batch
    return out


def layer_floors(
    problem: SearchProblem, tp: int, cp: int, micro_batch: int, cheap: bool = False
) -> LayerFloors:
    """LayerFloors over every row with these degrees and micro-batch: every (sequence parallel, layout,
    grid rows) option of ``layer_knobs`` and every (ep, etp) of ``expert_options`` for any dp (a
    superset of a block's: its floor is lower or equal). Compute reads neither the dispatcher nor the
    a2a-overlap switch, nor the recompute mode (selective recompute marks ops, it does not change them);
    an MoE kind adds each option's least exposed dispatch and combine at any compute (DispatchFloors.table's
    least), costed only for the options whose compute alone is below the least so far (least_with; ρ stays the
    backward-GEMM share of compute alone, which a larger work only lowers).
    A block kind that reads the expert knobs is built once per layer knob: its time is a plain sum over
    its ops, and only the ops graph.moe_mlp.expert_knob_ops lists change with (ep, etp), so each expert
    option's total is the rest of the block plus those ops' times (the same sum in another order).
    ``cheap``: lower floors that cost no expert option (KindFloors.kinds(cheap=True); ρ = 1), the first bound of a
    search that computes these floors only for the blocks that reach the front (search.run, first_bound_levels)."""
    model, system = problem.model, problem.system
    shaped = moe_shaped(model)
    memo = problem._memo.setdefault("layer_floor_knobs", {})
    knobs = memo.get((tp, cp))
    if knobs is None:  # the distinct layer shapes of the layer knobs, once per (tp, cp)
        knobs = memo[(tp, cp)] = sorted(set(shape_keys_of(problem.layer_knobs(tp, cp))))
    experts = costing_experts(problem, tp) if shaped else ()
    work: dict[str, float] = {}
    forward: dict[str, float] = {}
    rho, kept, raw, unhidden = 0.0, {}, {}, False
    floors_of = KindFloors(problem, experts) if shaped else None
    for key in knobs:
        shape = layer_shape_of(
            problem, tp, cp, micro_batch, *key, experts[0] if shaped else ExpertShape()
        )
        if (
            shaped
        ):  # the ops other than the core attention costed once per local-token count (KindFloors)
            kinds = floors_of.kinds(shape, cheap)
            for (
                name,
                floor,
            ) in kinds:  # the least of what a DualPipe pair cannot hide (KindFloor.kept)
                kept[name] = min(kept.get(name, math.inf), floor.paired)
                # the least with the dispatch unhidden (LayerFloors.raw), ``work`` where a kind has no raw floor
                raw[name] = min(raw.get(name, math.inf), floor.unhidden)
                unhidden = unhidden or floor.raw is not None
            if not work:  # the first knob (most keys have one): its floors as they are
                work = {name: floor.work for name, floor in kinds}
                forward = {name: floor.forward for name, floor in kinds}
                rho = max([rho, *(floor.rho for _, floor in kinds)])
                continue
            for name, floor in kinds:
                work[name] = min(work.get(name, math.inf), floor.work)
                forward[name] = min(forward.get(name, math.inf), floor.forward)
                rho = max(rho, floor.rho)
            continue
        for name in model_block_kinds(model):
            c = block_compute(BLOCK_KINDS[name].graph(model, shape), system, shape.dtype)
            work[name] = min(work.get(name, math.inf), c.forward + c.backward)
            forward[name] = min(forward.get(name, math.inf), c.forward)
            rho = max(
                rho,
                c.gemm_backward / (c.forward + c.backward) if c.forward + c.backward > 0 else 0.0,
            )
    return LayerFloors(work, rho, forward, kept or None, raw if unhidden else None)


def costing_class(problem: SearchProblem, block: Block) -> tuple:
    """(tp, local tokens b·s/c) of a block: the blocks whose layer floors share their costings (KindFloors, keyed on
    graph.transformer.cp_free_key); search.block_processes keeps a class in one process. (Grouping an MoE model's
    classes by the tokens a rank routes, which also keys the expert options' costings, spared DeepSeek-V3's split
    search ~15 % but doubled the rows Qwen3-235B's scanned: docs/performance.md.)"""
    return block.tp, layer_shape_of(
        problem, block.tp, block.cp, block.micro_batch, False, "1d", 0
    ).local_tokens


def block_span_pairs(problem: SearchProblem, block: Block) -> tuple[tuple, ...]:
    """The distinct (tp span, cp span) of the block's placements: the spans its layer costings read."""
    spans = problem.placements(block.tp, block.cp, block.dp, block.pp)
    return tuple(dict.fromkeys((s["tp"], s["cp"]) for _, s in spans))


def memory_floors(
    problem: SearchProblem, tp: int, cp: int, micro_batch: int, floors: LayerFloors
) -> ModeFloors:
    """Per recompute mode, each block kind's least work: its layer floor (``floors.work``: compute and exposed
    dispatch) plus the least the mode recomputes (step.compose.recompute_s: full re-runs a recomputed kind's
    forward, at least ``floors.forward``, or 0 where the checkpoint stops early; selective at least 0), every other BlockTerms part >= 0, so no
    communication is costed; and its least kept and held activation bytes over every row with these degrees,
    micro-batch and mode (step.build.kind_memory_facts at each layer knob of the mode and the expert option that
    keeps the least, least_memory_expert). The cheapest refinement: it raises a block whose activations force
    recomputation (refined_bound)."""
    model = problem.model
    shaped = moe_shaped(model)
    expert = least_memory_expert(problem, tp) if shaped else ExpertShape()
    kinds = model_block_kinds(model)
    work: dict[str, dict] = {}
    kept: dict[str, dict] = {}
    held: dict[str, dict] = {}
    paired: dict[str, dict] = {}
    raw: dict[str, dict] = {}
    pair_kept = floors.paired
    for sp, mode, layout, rows in dict.fromkeys(
        (sp, rc, layout, rows or 0) for sp, rc, _, layout, rows in problem.layer_knobs(tp, cp)
    ):  # mode: a specs.recompute mode
        modules = mode_modules(mode, shaped)
        shape = layer_shape_of(problem, tp, cp, micro_batch, sp, layout, rows, expert, modules)
        least_kept = kept.setdefault(mode, dict.fromkeys(kinds, math.inf))
        least_held = held.setdefault(mode, dict.fromkeys(kinds, math.inf))
        for name in kinds:
            facts = kind_memory_facts(model, shape, name, MODES[mode].recompute)
            least_kept[name] = min(least_kept[name], facts.activation_bytes)
            least_held[name] = min(least_held[name], facts.held_bytes)
        # an early-stopping checkpoint re-runs less than the forward (step.block_sums.early_stop_tail_s): no floor
        full = (
            MODES[mode].code == 2
            and not problem.system.accelerator.efficiency.checkpoint_early_stop
        )
        work[mode] = {
            name: floors.work[name]
            + (floors.forward[name] if full and BLOCK_KINDS[name].recomputed else 0.0)
            for name in kinds
        }
        # what a DualPipe pair cannot hide: the recomputed forward is compute too (LayerFloors.kept)
        paired[mode] = {
            name: pair_kept[name]
            + (floors.forward[name] if full and BLOCK_KINDS[name].recomputed else 0.0)
            for name in kinds
        }
        if floors.raw is not None:  # and work with the dispatch unhidden (LayerFloors.raw)
            raw[mode] = {
                name: floors.raw[name]
                + (floors.forward[name] if full and BLOCK_KINDS[name].recomputed else 0.0)
                for name in kinds
            }
    return ModeFloors(work, kept, held, paired, raw)


EXACT = "exact"  # the level of search.run's block queue that replaces cheap layer floors by the exact ones


def first_bound_levels(problem: SearchProblem, parts: list) -> tuple[str, ...]:
    """(EXACT,) when the blocks' first bounds should be layer_floors(cheap=True) and the exact layer floors a first
    refinement, computed only for the (tp, cp, micro-batch) of blocks that reach the front: an MoE model with more
    than one expert option at some tp of ``parts`` (each option's compute and dispatch are most of a costing:
    docs/performance.md); () otherwise (the cheap floors would be the exact ones)."""
    if not moe_shaped(problem.model) or not problem.model.is_moe:
        return ()
    return (
        (EXACT,)
        if any(len(costing_experts(problem, tp)) > 1 for tp in {b.tp for b in parts})
        else ()
    )


REFINEMENTS = ("memory", "expert_free", "all")  # refined_bound's levels, cheapest first


def refinements(problem: SearchProblem) -> tuple[str, ...]:
    """The levels refined_bound is called with, cheap first: REFINEMENTS, without "expert_free" when no block
    kind reads the expert knobs (it would cost every kind, as "all" does)."""
    if all(name in EXPERT_FREE_KINDS for name in model_block_kinds(problem.model)):
        return ("memory", "all")
    return REFINEMENTS


def refined_bound(
    problem: SearchProblem,
    block: Block,
    floors: LayerFloors,
    cache: dict,
    level: str = "all",
    own_s: float | None = None,
) -> float:
    """A lower bound on the step time of every candidate of the block, at least block_step_floor's:
    the least over the recompute modes of the block_step_floor of the mode's ModeFloors (least over the
    block's span pairs, never below the compute floor), where a mode whose activations cannot fit in HBM
    (``activation_floor_bytes``) needs activation offload and then takes at least ``streaming_floor_s``; a
    mode that fits neither way bounds nothing (no candidate of it fits). ``level`` (REFINEMENTS): "memory"
    the memory_floors (no communication costed, one for every span pair), "expert_free" and "all" the
    ``work_floors`` over the block's span pairs without / with the kinds that read the expert knobs (each tighter
    and dearer than the one before). ``cache`` keeps the ModeFloors of each (tp, cp, micro-batch, span pairs or
    None, level), what work_floors shares between them, the span pairs of each factorization and the problem's
    system_terms across one search's blocks. ``own_s``: block_step_floor(problem, block, floors) when the caller has it
    (search.run keeps it from the block's earlier level), computed otherwise."""
    if level == "memory":
        key = (block.tp, block.cp, block.micro_batch, None, level)
        if key not in cache:
            cache[key] = memory_floors(problem, block.tp, block.cp, block.micro_batch, floors)
    else:
        degrees = (
            "spans",
            block.tp,
            block.cp,
            block.dp,
            block.pp,
        )  # the span pairs of every micro-batch's block
        if degrees not in cache:
            cache[degrees] = block_span_pairs(problem, block)
        key = (block.tp, block.cp, block.micro_batch, cache[degrees], level)
        if key not in cache:
            cache[key] = work_floors(problem, *key[:4], level == "all", cache)
    mode_floors = cache[key]
    if "constants" not in cache:  # the problem's, the same for every block
        cache["constants"] = system_terms(problem.system, problem.dtype, problem.runtime)
    constants = cache["constants"]
    capacity = problem.system.accelerator.hbm_capacity
    host_capacity = host_capacity_bytes(problem.system.accelerator.host_memory)
    offloads = any(activations for _, activations, _ in problem.offload_options)
    # a mode that raises no kind's work bounds the block at its own floor
    base = block_step_floor(problem, block, floors) if own_s is None else own_s
    best = math.inf
    for mode, mode_work in mode_floors.work.items():
        kept = mode_floors.kept[mode]
        activations = activation_floor_bytes(problem, block, kept, mode_floors.held[mode])
        streaming = 0.0
        if activations + constants["reserved_bytes"] > capacity:
            # only activation offload can fit it: the host then holds every layer's (the search offloads all
            # layers, offload_activation_layers 0: share 1) and the GPU twice the largest kept layer block
            working = offloaded_working_bytes(problem, block, kept)
            if (
                not offloads
                or activations > host_capacity
                or working + constants["reserved_bytes"] > capacity
            ):
                continue
            streaming = streaming_floor_s(problem, block, kept, constants["host_bandwidth"])
        work = {name: max(value, mode_work[name]) for name, value in floors.work.items()}
        # both floors of what a DualPipe pair cannot hide (LayerFloors.kept): the larger
        pair_kept = floors.paired
        mode_kept = mode_floors.paired.get(mode, {})
        paired = {name: max(value, mode_kept.get(name, 0.0)) for name, value in pair_kept.items()}
        # and of the work with the dispatch unhidden (LayerFloors.raw), at least the work's
        raw = _raised_raw(floors, mode_floors.raw.get(mode), work)
        step = (
            base
            if work == floors.work and paired == pair_kept and raw == floors.raw
            else block_step_floor(
                problem, block, LayerFloors(work, floors.rho, kept=paired, raw=raw)
            )
        )
        best = min(best, max(step, streaming))
        if best <= base:  # no other mode can take the bound below the block's own floor
            break
    return max(best, base)


def _raised_raw(floors: LayerFloors, mode_raw: dict | None, work: dict) -> dict | None:
    """The larger of the layer floors' and a recompute mode's floors of each kind's work with its dispatch unhidden
    (LayerFloors.raw, ModeFloors.raw), and of its ``work``: each is at most the block's work plus what it adds run
    unpaired; None where neither knows one."""
    if floors.raw is None and not mode_raw:
        return None
    known = [r for r in (floors.raw, mode_raw) if r]
    return {name: max(value, *(r.get(name, 0.0) for r in known)) for name, value in work.items()}


def activation_floor_bytes(problem: SearchProblem, block: Block, kept: dict, held: dict) -> float:
    """Least activation bytes some stage of any candidate of the block holds without activation
    offload: stage_memory_terms keeps in_flight × kept + held, where every schedule keeps at least
    min(pp − i, m) micro-batches in flight on stage i (step.schedules.least_in_flight_microbatches), so
    the fullest stage of the schedule options' splits,
    at the least kept and held bytes per kind, bounds it (the weight, gradient, optimizer and buffer
    terms are >= 0 and left out); SAFETY keeps it below the sum."""
    splits = problem.schedule_splits(block.pp, block.microbatches)
    m, least = block.microbatches, math.inf
    for split in splits:
        least = min(
            least,
            max(
                least_in_flight_microbatches(block.pp, m, i) * stage_sum(kept, blocks)
                + stage_sum(held, blocks)
                for i, _, blocks in group_blocks(problem, block.pp, split)
            ),
        )
    return least * SAFETY


def offloaded_working_bytes(problem: SearchProblem, block: Block, kept: dict) -> float:
    """Least activation bytes a stage of any candidate of the block keeps on the GPU with activation offload:
    stage_memory_terms keeps twice its largest kept transformer block (one going out, one coming in), so twice
    the largest least-kept bytes of a transformer kind some stage holds, least over the schedule options' splits."""
    splits = problem.schedule_splits(block.pp, block.microbatches)
    least = math.inf
    for split in splits:
        present = {
            name
            for _, _, blocks in group_blocks(problem, block.pp, split)
            for name, n in blocks
            if n > 0
        }
        least = min(
            least, 2.0 * max((kept[name] for name in present & set(TRANSFORMER_KINDS)), default=0.0)
        )
    return least * SAFETY


def streaming_floor_s(
    problem: SearchProblem, block: Block, kept: dict, host_bandwidth: float
) -> float:
    """Least step time of a candidate of the block that offloads its activations: compose_step adds
    the streaming the fullest stage's traffic (offload_traffic_bytes of its transformer blocks per
    micro-batch) leaves beyond the busy time m·(S − pp) to a step of at least m·S, so the step is at
    least m × that traffic / the host bandwidth (weights' traffic >= 0 left out)."""
    moved = {
        name: (offload_traffic_bytes(kept[name], 0.0) if name in TRANSFORMER_KINDS else 0.0)
        for name in kept
    }
    splits = problem.schedule_splits(block.pp, block.microbatches)
    traffic = min(
        stage_floors(problem, block.pp, split, LayerFloors(moved, 0.0))[0] for split in splits
    )
    return block.microbatches * traffic / host_bandwidth * SAFETY


# beside stages.COLD_CACHES: what a cold search starts without
SEARCH_CACHES = EXPERT_CACHES + TABLE_CACHES + (distinct_orders,)
