"""A block's step-time floor from floors of its block kinds' per-micro-batch work (search.blocks, module docstring):
the stage sums under a schedule option's layer split, and m·S + the schedule's bubble floor at the least over the
block's schedule options; on arrays over the blocks of one (pp, micro-batches) for a search's first bounds."""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping, NamedTuple

import numpy as np

from paraplan.search.bounds import SAFETY, own_or_work
from paraplan.search.space import SearchProblem
from paraplan.specs.moe_model import moe_shaped
from paraplan.step.block_terms import unpaired_pass_s
from paraplan.step.build import model_block_kinds, stage_block_counts
from paraplan.step.schedules import SCHEDULES, schedule_step_floor

if TYPE_CHECKING:
    from paraplan.search.bounds.blocks import Block


class LayerFloors(NamedTuple):
    """Least compute (forward + backward seconds per micro-batch) of each block kind over a block's
    rows, and the largest share of backward GEMM time in any of them (ρ); ``forward``: each kind's least
    forward seconds (what full recomputation re-runs: memory_floors; none given: an empty mapping)."""

    work: dict
    rho: float
    forward: Mapping = MappingProxyType({})
    # each kind's floor of what a DualPipe pair cannot hide of it: its compute over the SM share the pair leaves it
    # where the kind has EP dispatch, C/s, and its TP / CP parts (step.dualpipe.overlapped_pair_s; the kind's part
    # of K0 in step.schedules._dualpipe_stage_floor_s); None: ``work`` (floors with no EP dispatch in them)
    kept: Mapping | None = None
    # each kind's floor of its work with its EP dispatch and combine unhidden: of a block's work plus what it adds run
    # unpaired (step.block_terms.unpaired_ep_exposure_s), at least ``work``'s where given; None: ``work`` (no floor
    # of the A2A overlap's unpaired passes: ``unpaired_floor_s``)
    raw: Mapping | None = None

    paired = property(lambda self: own_or_work(self.kept, self.work), doc="``kept``, or ``work``")
    unhidden = property(lambda self: own_or_work(self.raw, self.work), doc="``raw``, or ``work``")


def stage_floors(
    problem: SearchProblem, pp: int, split: tuple, floors: LayerFloors, maximum=max
) -> tuple:
    """(S0, T0): floors of the slowest stage's and of all stages' per-micro-batch work under the split
    of (pp, split), blocks laid out as step.build.build_step_inputs does; ``floors.work``'s values floats, or arrays
    over blocks with ``maximum`` np.maximum (block_step_floors: the same operations in the same order)."""
    slowest, total = 0.0, 0.0
    for _, count, blocks in group_blocks(
        problem, pp, split
    ):  # the search's most frequent loop: no list of sums
        work = stage_sum(floors.work, blocks)
        slowest = maximum(slowest, work)
        total += count * work
    return slowest, total


def paired_stage_floors(
    problem: SearchProblem,
    pp: int,
    m: int,
    split: tuple,
    floors: LayerFloors,
    schedule,
    maximum=max,
) -> tuple:
    """(largest steady floor, largest bubble floor) over the stages of the split of (pp, split) of a schedule with
    stage floors (step.schedules.Bubble.stage_floor_s: DualPipe), each stage's S0 its blocks' work floors and K0
    their kept floors (LayerFloors.kept), laid out as stage_floors; floats, or arrays over blocks with ``maximum``
    np.maximum (block_step_floors: the same operations in the same order)."""
    kept = floors.paired
    steady, bubble = 0.0, 0.0
    for _, _, blocks in group_blocks(problem, pp, split):
        stage = schedule.bubble.stage_floor_s(
            m, pp, stage_sum(floors.work, blocks), stage_sum(kept, blocks), floors.rho
        )
        steady, bubble = maximum(steady, stage[0]), maximum(bubble, stage[1])
    return steady, bubble


def unpaired_floor_s(problem: SearchProblem, pp: int, split: tuple, floors: LayerFloors, slowest):
    """A floor of what the A2A overlap's unpaired passes add to the step of a candidate whose slowest stage works
    at least ``slowest`` (S0, ``stage_floors``) under the split of (pp, split); None where the floors know none
    (``floors.raw`` None) or the step adds none (pp > 1: step.block_terms.unpaired_passes_s). At pp 1 the one stage
    holds every block b and the step is at least m·S + U = Σ_b m·w_b + U_b (step.compose._pipeline, every other
    part >= 0), U_b what b adds run unpaired; with r_k <= w_b + U_b (``floors.raw``) and w_k <= w_b per kind k
    of b, Σ_b (m − 1)·w_b + (w_b + U_b) >= (m − 1)·S0 + R0 (m >= 1), R0 the stage sum of the r_k: m·S0 plus
    step.block_terms.unpaired_pass_s(R0, S0), the step's own rule at those floors. Floats or arrays over blocks
    (``slowest`` and the floors' values alike)."""
    if floors.raw is None or pp != 1:
        return None
    ((_, _, blocks),) = group_blocks(problem, pp, split)
    return unpaired_pass_s(stage_sum(floors.raw, blocks), slowest)


def stage_sum(per_kind: dict, blocks: tuple) -> float:
    """Σ over one stage's (kind, blocks of it) of the kind's value (0 for a kind without one)."""
    return sum([per_kind.get(name, 0.0) * n for name, n in blocks])


def group_blocks(problem: SearchProblem, pp: int, split: tuple) -> list[tuple[int, int, tuple]]:
    """(first stage index, stages, ((kind, blocks of it on one stage), ...) of the kinds it holds) of each non-empty
    stage group of the split of (pp, split), as step.build.build_step_inputs lays them out (step.build.stage_block_counts).
    Memoised."""
    memo = problem._memo.setdefault("group_blocks", {})
    if (pp, split) in memo:
        return memo[(pp, split)]
    model, out, start = problem.model, [], 0
    for g in problem.split_groups(pp, split):
        count = int(g.count)
        if count > 0:
            counts = stage_block_counts(model if moe_shaped(model) else None, g, start)
            out.append((int(g.index), count, tuple((name, int(n)) for name, n in counts if n)))
        start += count * int(g.layers)
    memo[(pp, split)] = out
    return out


def block_step_floor(problem: SearchProblem, block: Block, floors: LayerFloors) -> float:
    """A lower bound on the step time of every candidate of the block (module docstring)."""
    return (
        _least_over_options(problem, block.pp, block.microbatches, floors, math.inf, max, min)
        * SAFETY
    )


def block_step_floors(problem: SearchProblem, parts: list[Block], floors_of) -> np.ndarray:
    """block_step_floor of every block of ``parts`` (``floors_of(block)``: its LayerFloors), on arrays over the blocks
    of each (pp, micro-batches): the same operations in the same order, so the same values to the last bit."""
    out = np.empty(len(parts))
    groups: dict[tuple[int, int], list[int]] = {}
    for i, b in enumerate(parts):
        groups.setdefault((b.pp, b.microbatches), []).append(i)
    kinds = model_block_kinds(problem.model)
    for (pp, m), members in groups.items():
        floors = [floors_of(parts[i]) for i in members]
        rho = np.array([f.rho for f in floors])
        work = {name: np.array([f.work.get(name, 0.0) for f in floors]) for name in kinds}
        best = np.full(len(members), math.inf)
        kept = {name: np.array([f.paired.get(name, 0.0) for f in floors]) for name in kinds}
        raw = None
        if any(f.raw is not None for f in floors):  # a block without raw floors: its work
            raw = {name: np.array([f.unhidden.get(name, 0.0) for f in floors]) for name in kinds}
        out[members] = (
            _least_over_options(
                problem,
                pp,
                m,
                LayerFloors(work, rho, kept=kept, raw=raw),
                best,
                np.maximum,
                np.minimum,
            )
            * SAFETY
        )
    return out


def _least_over_options(
    problem: SearchProblem, pp: int, m: int, floors: LayerFloors, best, maximum, minimum
):
    """The least step floor (step.schedules.schedule_step_floor) over the schedule options of (pp, m), each split's stage floors found once; floats
    (``maximum``, ``minimum``: max, min) or arrays over blocks (np.maximum, np.minimum)."""
    splits, paired, unpaired = {}, {}, {}
    for v, schedule, split in problem.schedule_options(pp, m):
        if split not in splits:
            splits[split] = stage_floors(problem, pp, split, floors, maximum)
            unpaired[split] = unpaired_floor_s(problem, pp, split, floors, splits[split][0])
        stages = None
        entry = SCHEDULES[schedule]
        if entry.bubble.stage_floor_s is not None:  # DualPipe: per stage, its pairs' floors
            if (schedule, split) not in paired:
                paired[schedule, split] = paired_stage_floors(
                    problem, pp, m, split, floors, entry, maximum
                )
            stages = paired[schedule, split]
        best = minimum(
            best,
            schedule_step_floor(
                schedule, v, m, pp, *splits[split], floors.rho, stages, unpaired[split]
            ),
        )
    return best
