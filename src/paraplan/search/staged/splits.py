"""The layer split of one candidate of the per-stage searches, and the branch and bound over candidates.

For a candidate (one StageSetting per stage) the split of the model's blocks over its stages is the
optimum of the pipeline objective over the range matrices of step.per_stage (``split_stages``), ranked
by the composed step (step.per_stage.compose_stages, as ``estimate --plan`` prices it). ``best_splits``
solves candidates in increasing order of an admissible bound (``lower_bound``) and is anytime: under a
deadline it alternates bounding and solving, so a plan is found early, and the k best it returns when it
runs to the end are those of the whole list. The launcher's split rules (``split_refusal``) live here.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from paraplan.search import launch
from paraplan.search.staged.axes import searched_offloads
from paraplan.search.staged.balance import balance_split, pipeline_objective
from paraplan.search.staged.problem import HeteroProblem
from paraplan.specs.rules_schedule import DEFAULT_SCHEDULE
from paraplan.step.blocks import model_blocks
from paraplan.step.layout import stage_at
from paraplan.step.per_stage import (
    StageSetting,
    compose_stages,
    range_matrices,
    range_memory,
    stage_arrays,
    stage_block_work_s,
    tied_embedding_sync_s,
)
from paraplan.step.schedules import SCHEDULES, schedule_step_floor


def lower_bound(problem: HeteroProblem, settings: list[StageSetting]) -> tuple[float, list]:
    """The candidate's ``bound_s`` and its stages' StageArrays (``candidate_arrays``)."""
    return bound_s(problem, settings), candidate_arrays(problem, settings)


def bound_s(problem: HeteroProblem, settings: list[StageSetting]) -> float:
    """A lower bound on the candidate's step time: the stages together do at least Σ_k min_i w_i(k) per
    micro-batch (each block on its cheapest stage; w_i(k), step.per_stage.stage_block_work_s: block k's
    seconds on stage i, its blocks alone), the slowest stage at least 1/pp of it: the schedule's floor of
    the pipeline part at that work (``pipeline_floor_s``: T ≥ Σ_k min_i w_i(k) · (1 + (m − 1)/pp) under
    1F1B or GPipe; point-to-point and tails are non-negative). Worked out from the stages' blocks alone (no
    StageArrays), so every candidate is bounded before any is priced."""
    model, cluster, common = problem.model, problem.cluster, problem.common
    stages = len(settings)
    cheapest = np.min([stage_block_work_s(model, cluster, common, st) for st in settings], axis=0)
    return pipeline_floor_s(problem, float(cheapest.sum()), settings[0].microbatches, stages)


def candidate_arrays(problem: HeteroProblem, settings: list[StageSetting]) -> list:
    """The StageArrays of the candidate's stages (step.per_stage.stage_arrays, each with its neighbours)."""
    model, cluster, common = problem.model, problem.cluster, problem.common
    stages = len(settings)
    return [
        stage_arrays(
            model,
            cluster,
            common,
            st,
            settings[i - 1] if i else None,
            settings[i + 1] if i + 1 < stages else None,
        )
        for i, st in enumerate(settings)
    ]


def pipeline_floor_s(
    problem: HeteroProblem, work_s: float, microbatches: int, stages: int
) -> float:
    """``lower_bound``'s floor of the pipeline part of a step whose stages do at least ``work_s`` per
    micro-batch together, the slowest at least work_s / pp: under a schedule with 1F1B's bubble T − S
    (1F1B, GPipe), T ≥ work_s · (1 + (m − 1)/pp); under any other, m·S0 + its bubble's floor at
    S0 = work_s / pp, T0 = work_s (step.schedules.schedule_step_floor, each form growing with S and T):
    interleaved (T0 − S0)/v, ZB-H1 (1 − ρ)·(T0 − S0) taken at ρ = 1 (its share of the 1F1B bubble is
    (F + B − c·W)/(F + B) >= 0; no per-block ρ is worked out here), so m·S0."""
    m = microbatches
    if one_f_one_b_bubble(problem.schedule, problem.vpp):
        return work_s * (1 + (m - 1) / stages)
    per_stage = work_s / stages
    return float(
        schedule_step_floor(problem.schedule, problem.vpp, m, stages, per_stage, work_s, 1.0)
    )


def one_f_one_b_bubble(schedule: str, vpp: int) -> bool:
    """Does ``schedule`` at ``vpp`` price 1F1B's bubble T − S (step.schedules: GPIPE and 1F1B share the entry's
    Bubble), the one the split objective (search.staged.balance.pipeline_objective) takes?"""
    return vpp == 1 and SCHEDULES[schedule].bubble is SCHEDULES[DEFAULT_SCHEDULE].bubble


def pipeline_cutoff_s(problem: HeteroProblem, stage_times, microbatches: int) -> float:
    """A floor of the pipeline part of the step of a split of these per-micro-batch stage works: the split
    objective Σ t + (m − 1)·max t under 1F1B's bubble (``one_f_one_b_bubble``), else m·max t + the schedule's
    bubble floor at ρ = 1 (``pipeline_floor_s``' rule, step.schedules.schedule_step_floor)."""
    if one_f_one_b_bubble(problem.schedule, problem.vpp):
        return pipeline_objective(stage_times, microbatches)
    t = np.asarray(stage_times, dtype=float)
    slowest, total, pp = float(t.max()), float(t.sum()), len(t)
    return float(
        schedule_step_floor(problem.schedule, problem.vpp, microbatches, pp, slowest, total, 1.0)
    )


def fixed_bounds(problem: HeteroProblem, stages: int) -> tuple[int, ...] | None:
    """Block boundaries of the one split the framework's launcher states (search.launch.fixed_split:
    the embedding block with the first stage's layers, the output block with the last's), or None."""
    n = len(model_blocks(problem.model))
    layers = launch.fixed_split(problem.framework, n - 2, stages)
    if layers is None:
        return None
    return (0, *(1 + int(c) for c in np.cumsum(layers)[:-1]), n)


def split_refusal(problem: HeteroProblem, bounds: tuple[int, ...]) -> str | None:
    """Why the framework's launcher cannot state this split of the blocks (block boundaries), or None: the
    launcher's split rules, search.launch.stages_allowed on the decoder layers of each stage (torchtitan:
    every model part holds a layer) and its one split where it states one (fixed_bounds). The first holds
    for every split these searches make (a stage is one model part, vpp 1, and every stage between the
    first and the last holds at least one block, a layer: tests/hetero/test_split_launch_rules.py), checked
    all the same; the split solver keeps the one split by construction (stage_matrices: that split's
    ranges alone); the alleviation's moves (search.staged.non_uniform) need this check."""
    bounds, blocks = tuple(bounds), model_blocks(problem.model)
    layers = [sum(b.is_layer for b in blocks[a:c]) for a, c in itertools.pairwise(bounds)]
    who = f"split {list(bounds)}: {problem.framework}'s launcher"
    if not launch.stages_allowed(problem.framework, layers, problem.vpp):
        why = f"decoder layers per stage {layers}, {problem.vpp} model part(s) each"
        return f"{who} cannot state it ({why}; search.launch.stages_allowed)"
    fixed = fixed_bounds(problem, len(bounds) - 1)
    if fixed is not None and bounds != fixed:
        return f"{who} states only the split {list(fixed)} (search.launch.fixed_split)"
    return None


def split_launchable(problem: HeteroProblem, bounds: tuple[int, ...]) -> bool:
    """Does the framework's launcher state this split of the blocks (no ``split_refusal``)?"""
    return split_refusal(problem, bounds) is None


def stage_matrices(problem: HeteroProblem, settings: list[StageSetting], arrays):
    """(times, tails) of every block range on every stage; ``inf`` where a range is not allowed (empty,
    first stage not starting at block 0, last stage not ending with the output block, out of memory:
    ``allowed_ranges``), everywhere when no split has every stage's range allowed (``any_split``: the
    memory is worked out first, the work and tails only where some split fits).
    ``times`` are the per-micro-batch work compose_step takes (step.per_stage.stage_terms: the runtime's
    work); ``tails`` each stage's tail without its drain slack (step.tail.drain_slack_s depends on the
    stages in front, so no per-range matrix holds it): at least the tail compose_step prices, which lowers
    the exposed reduction by the slack (step.tail.after_slack_s), never below 0."""
    n = len(model_blocks(problem.model))
    stages = len(settings)
    times = np.full((stages, n + 1, n + 1), np.inf)
    tails = np.full((stages, n + 1, n + 1), np.inf)
    ranged = [range_memory(arr, i) for i, arr in enumerate(arrays)]
    oks = [
        allowed_ranges(problem, i, stages, arr, mem)
        for i, (arr, (_, mem)) in enumerate(zip(arrays, ranged))
    ]
    if not any_split(oks):
        return times, tails
    for i, (arr, ok) in enumerate(zip(arrays, oks)):
        m = range_matrices(arr, i, ranged[i])
        times[i] = np.where(ok, m["work"], np.inf)
        tails[i] = np.where(ok, m["tail"], np.inf)
    return times, tails


def allowed_ranges(
    problem: HeteroProblem, index: int, stages: int, arr, memory: dict
) -> np.ndarray:
    """[a, b]: may stage ``index`` of ``stages`` hold blocks [a, b)? Non-empty, within its GPUs' memory
    (``memory``: its step.per_stage.range_memory terms, on StageArrays ``arr``), the launcher's one split's
    range where it states one (``fixed_bounds``), the first stage starting at block 0, the last ending
    with the output block."""
    n = len(model_blocks(problem.model))
    ok = np.triu(np.ones((n + 1, n + 1), dtype=bool), k=1)  # non-empty ranges a < b
    ok &= memory["peak_bytes"] <= arr.capacity
    # what it offloads fits in host memory (step.result.StageMemory.fits)
    if any(searched_offloads(problem).values()):
        ok &= memory["host_bytes"] <= arr.host_capacity
    fixed = fixed_bounds(problem, stages)
    if fixed is not None:  # the launcher's one split: its range only
        ok &= np.arange(n + 1)[:, None] == fixed[index]
        ok &= np.arange(n + 1)[None, :] == fixed[index + 1]
    if index == 0:
        ok[1:, :] = False  # the first stage starts at block 0
    if index == stages - 1:
        ok[:, :n] = False  # the last stage ends with the output block
    return ok


def any_split(oks: list[np.ndarray]) -> bool:
    """Is there a split 0 = b_0 < b_1 < … < b_S = n with every stage's range allowed (``oks[i][b_i, b_i+1]``)?
    Boundaries reachable after each stage, forward: without one, search.staged.balance.balance_split finds
    no split (it takes only ranges of finite time and tail, which ``stage_matrices`` sets where allowed)."""
    reach = np.zeros(oks[0].shape[0], dtype=bool)
    reach[0] = True
    for ok in oks:
        reach = (reach[:, None] & ok).any(axis=0)
    return bool(reach[-1])


def split_stages(
    problem: HeteroProblem,
    settings: list[StageSetting],
    microbatches: int,
    arrays=None,
    cutoff: float = math.inf,
) -> SplitFound | None:
    """(step time, block boundaries) of a split of the model over these stage settings, or None when none
    fits. The split minimises Σ t_i + (m − 1)·max t_i + max u_i over the range matrices
    (search.staged.balance.balance_split; ``stage_matrices``: t the exact per-micro-batch work, u the tail
    without drain slack, so the objective is at least the split's step); the step time returned is
    compose_step's for that split (step.per_stage.compose_stages, as ``estimate --plan`` prices it), which
    ranks it among the candidates. None too when the split's pipeline part and tied all-reduce alone (at
    most its step: the tails are >= 0) reach ``cutoff``, the k-th best step found (it cannot enter)."""
    n = len(model_blocks(problem.model))
    if len(settings) > n:
        return None
    arrays = arrays or candidate_arrays(problem, settings)
    times, tails = stage_matrices(problem, settings, arrays)
    split = balance_split(times, microbatches, tails)
    if split is None:  # the launcher's split rules hold by construction (split_launchable)
        return None
    tied = tied_embedding_sync_s(
        problem.model, problem.cluster, problem.common, settings[0], settings[-1]
    )
    if pipeline_cutoff_s(problem, split.stage_times, microbatches) + tied >= cutoff:
        return None
    bounds = split.bounds
    stages = tuple(
        stage_at(arr.blocks, i, a, b)
        for i, (arr, a, b) in enumerate(zip(arrays, bounds, bounds[1:]))
    )
    return SplitFound(compose_stages(stages, tied)[0], bounds)


class SplitFound(NamedTuple):
    """What ``split_stages`` finds: the split's step time and its block boundaries."""

    step_s: float
    bounds: tuple[int, ...]


class _Bounded(NamedTuple):
    """A candidate with its bound: ``index`` is its place in the candidate list (the tie-breaker)."""

    bound: float
    index: int
    settings: list[StageSetting]
    microbatches: int
    extra: object
    problem: HeteroProblem  # the one whose run-wide settings price the candidate


def best_splits(
    problem: HeteroProblem, candidates: Iterable, top_k: int, deadline: float = math.inf
) -> tuple[list, int, int]:
    """Branch and bound over candidate stage lists (``candidates``: (settings, microbatches, extra) or
    (settings, microbatches, extra, its problem), a list or a generator; the problem, ``problem`` where not
    given, is the one whose run-wide settings price the candidate: search.staged.experts.switched): solve the split DP (``split_stages``) in increasing (bound, index) order of
    ``lower_bound`` (at most the composed step of every split of the candidate) and stop once the bound
    reaches the k-th best composed step found (no unsolved candidate can enter the top k).

    Anytime under a ``deadline`` (time.perf_counter): in rounds, bound candidates until the list is
    exhausted or half the time left is spent, then solve the bounded ones not yet solved, as above;
    repeat with the candidates left. A plan is so found even where bounding every candidate would take
    longer than the budget (issue 31: two pools of 512 GPUs, GPT-3 175B, 504 candidates bounded in
    about 16 s, none solved in 5 s). Without a deadline, one round: every candidate bounded, then solved
    in order. The k best, ranked by (step, bound, index), are the same in either case once the search
    runs to its end; past the deadline nothing more is bounded or solved, found or not, nor is a bound or solve
    started that, taking as long as the longest of its kind so far, would end past it.

    Returns (found, solved, bounded, cut): the k best as (step, settings, bounds, microbatches, extra, problem),
    how many candidates were solved and bounded, and whether the deadline cut the search."""
    pending = enumerate(candidates)
    bounded: list[_Bounded] = []
    solved: set[int] = set()
    found: list = []  # (step, bound, index, settings, bounds, microbatches, extra, problem)
    exhausted = False
    slowest_bound, slowest_solve = (
        [0.0],
        [0.0],
    )  # seconds: no call starts that would end past the deadline
    while not exhausted and time.perf_counter() <= deadline:
        before = len(bounded)
        exhausted = _bound_round(problem, pending, bounded, deadline, slowest_bound)
        bounded.sort(key=lambda b: (b.bound, b.index))
        if not _solve_round(problem, bounded, solved, found, top_k, deadline, slowest_solve):
            cut = True
            break
        if not exhausted and len(bounded) == before:  # the next bound would end past the deadline
            cut = True
            break
    else:
        cut = not exhausted
    return [f[:1] + f[3:] for f in found], len(solved), len(bounded), cut


def _bound_round(
    problem: HeteroProblem, pending, bounded: list[_Bounded], deadline: float, slowest: list[float]
) -> bool:
    """Bound candidates from ``pending`` into ``bounded`` until it is exhausted (True), the deadline
    would pass before the next bound ends (``slowest[0]``: the longest bound so far, updated here), or,
    the round's first candidate bounded, half the time left at its start is spent (False)."""
    n = len(model_blocks(problem.model))
    start = time.perf_counter()
    soft = deadline if math.isinf(deadline) else start + (deadline - start) / 2
    first = True
    while True:
        now = time.perf_counter()
        if now + slowest[0] > deadline or (now > soft and not first):
            return False
        item = next(pending, None)
        if item is None:
            return True
        index, (settings, microbatches, extra, *own) = item
        if len(settings) > n:
            continue
        first = False
        priced = own[0] if own else problem
        bound = bound_s(priced, settings)
        slowest[0] = max(slowest[0], time.perf_counter() - now)
        bounded.append(_Bounded(bound, index, settings, microbatches, extra, priced))


def _solve_round(
    problem: HeteroProblem,
    bounded: list[_Bounded],
    solved: set[int],
    found: list,
    top_k: int,
    deadline: float,
    slowest: list[float],
) -> bool:
    """Solve the bounded candidates (sorted) not yet ``solved``, adding each split found to ``found``
    (kept sorted), until a bound reaches the k-th best step (True) or the deadline would pass before the
    next solve ends (``slowest[0]``: the longest solve so far, updated here; False)."""
    for b in bounded:
        if len(found) >= top_k and b.bound >= found[top_k - 1][0]:
            return True
        if b.index in solved:
            continue
        now = time.perf_counter()
        if now + slowest[0] > deadline:
            return False
        solved.add(b.index)
        cutoff = found[top_k - 1][0] if len(found) >= top_k else math.inf
        best = split_stages(b.problem, b.settings, b.microbatches, cutoff=cutoff)
        slowest[0] = max(slowest[0], time.perf_counter() - now)
        if best is not None:
            at = (b.bound, b.index, b.settings, best.bounds, b.microbatches, b.extra, b.problem)
            found.append((best.step_s, *at))
            found.sort(key=lambda f: f[:3])
    return True
