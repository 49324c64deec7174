"""Aceso-style search over per-stage plans on one GPU type (``paraplan search --non-uniform``, issue 10).

Per-stage GPU counts, tp and recompute. Exact by enumeration when the space of per-stage settings has at
most ``exact_limit`` combinations (each combination's layer split solved by the DP of search.staged.hetero);
otherwise iterative bottleneck alleviation (search.staged.alleviate) from the best plan of the AMP-style
search (search.staged.hetero.search_cluster), under a time budget, with its trajectory.

The space is counted without listing it (non_uniform_space_size), so choosing between the two costs
the same on 16 GPUs as on 16,384. Every candidate keeps the rules of a per-stage plan's stages
(specs.rules, through hetero._stage_ok), so no returned plan is one the estimator refuses, and under a
framework profile the rules of what its launcher runs (search.launch, through problem.launchable and
splits.split_launchable).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator

import numpy as np

from paraplan.search import launch
from paraplan.search.staged.alleviate import (
    AlleviationResult,
    Score,
    StageConfig,
    alleviate,
    recompute_choices,
)
from paraplan.search.staged.hetero import (
    Candidate,
    HeteroProblem,
    HeteroResult,
    _label,
    _plan_from,
    _powers_of_two,
    _stage_ok,
    search_cluster,
)
from paraplan.search.staged.problem import launchable, searched_modes
from paraplan.search.staged.splits import best_splits, split_launchable
from paraplan.specs.errors import InputError
from paraplan.specs.parallel import ParallelDims
from paraplan.specs.recompute import stage_fields
from paraplan.specs.rules import stage_degree_rule
from paraplan.step.blocks import model_blocks
from paraplan.step.per_stage import StageSetting, estimate_stage_plan
from paraplan.step.stage_blocks import recomputable_modules


def _stage_settings_from(
    problem: HeteroProblem, configs, microbatches: int
) -> list[StageSetting] | None:
    """The StageSettings of these per-stage configs on the one pool, or None when a stage breaks a rule
    of a per-stage plan (specs.rules: stage_degree_rule, stage_rules), its tp leaves a node (the
    search keeps tensor parallelism inside NVLink, as AMP and Aceso do) or the framework's launcher does
    not run the stages (problem.launchable)."""
    pool = problem.cluster.pools[0]
    offset = 0
    out = []
    for i, c in enumerate(configs):
        if stage_degree_rule(c.gpus, c.tp, 0) or c.tp > pool.gpus_per_node:
            return None
        dims = ParallelDims(tp=c.tp, dp=c.gpus // c.tp, pp=len(configs))
        slices = ((pool.name, offset, c.gpus),)
        if not _stage_ok(problem, i, dims, slices, microbatches):
            return None
        micro_batch = problem.global_batch // (microbatches * dims.dp)
        rc, ops = c.recompute, c.recompute_ops
        out.append(StageSetting(slices, dims, micro_batch, rc, ops, i, microbatches))
        offset += c.gpus
    return out if offset == pool.gpu_count and launchable(problem, out) else None


def _compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every way to write ``total`` as an ordered sum of ``parts`` positive integers."""
    for cuts in itertools.combinations(range(1, total), parts - 1):
        bounds = (0, *cuts, total)
        yield tuple(b - a for a, b in itertools.pairwise(bounds))


def _stage_tps(gpus: int) -> list[int]:
    """Tensor-parallel degrees of a stage of ``gpus`` GPUs: each power of two dividing them."""
    return [t for t in _powers_of_two(gpus) if stage_degree_rule(gpus, t, 0) is None]


def _stage_options(gpus: int, modes: tuple[str, ...]) -> list[tuple[int, str]]:
    """(tp, recompute mode) options of a stage of ``gpus`` GPUs: tp a power of two dividing them, the
    ``modes`` of the search (problem.searched_modes)."""
    tps = _stage_tps(gpus)
    return [(t, rc) for t in tps for rc in modes]


def _stage_choices(problem: HeteroProblem, pp: int, modes: tuple[str, ...]):
    """(GPUs per stage, (tp, mode) per stage) of every ``pp``-stage combination the exact search lists:
    every composition of the GPUs with every stage option; with a framework whose launcher runs one
    tp, dp and recompute on every stage (search.launch.restricted, stage_plan_allowed), only equal
    stages with one option repeated, the rest being refused one by one otherwise."""
    n = problem.cluster.gpus
    if launch.restricted(problem.framework):
        if n % pp == 0:
            for option in _stage_options(n // pp, modes):
                yield (n // pp,) * pp, (option,) * pp
        return
    for comp in _compositions(n, pp):
        for choice in itertools.product(*(_stage_options(g, modes) for g in comp)):
            yield comp, choice


def non_uniform_space_size(
    problem: HeteroProblem, max_stages: int, microbatch_counts: list[int]
) -> int:
    """Per-stage combinations the exact search enumerates, counted without listing them.

    With N GPUs, R recompute modes and M micro-batch counts, a stage of g GPUs has
    w(g) = R·(v₂(g) + 1) options (tp = 2^j for each 2^j dividing g; v₂ the exponent of 2 in g), and

        size = M · Σ_{p=1..max_stages} Σ_{g₁+…+g_p = N, gᵢ ≥ 1} Π_i w(gᵢ)
             = M · Σ_p [x^N] W(x)^p,   W(x) = Σ_g w(g)·x^g = R · Σ_{j≥0} x^(2^j) / (1 − x^(2^j)).

    Each factor 1/(1 − x^(2^j)) is a strided prefix sum, so one more stage costs O(N·log₂N) additions
    (exact integers) instead of the C(N−1, p−1) compositions a loop over them visits. With a launcher
    that runs equal stages only (_stage_choices): size = M · Σ_{p ≤ max_stages, p | N} w(N/p)."""
    n, modes = problem.cluster.gpus, len(searched_modes(problem))
    if launch.restricted(problem.framework):
        equal = [n // p for p in range(1, max_stages + 1) if n % p == 0]
        return sum(modes * len(_stage_tps(g)) for g in equal) * len(microbatch_counts)
    ways = [1] + [0] * n  # ways[s]: weighted lists of p stages on s GPUs; p = 0 to start
    total = 0
    for _ in range(max_stages):
        nxt = [0] * (n + 1)
        step = 1
        while step <= n:
            strided = list(ways)  # strided[s] = Σ_{m≥0} ways[s − m·step]
            for s in range(step, n + 1):
                strided[s] += strided[s - step]
            for s in range(step, n + 1):  # + x^step / (1 − x^step): Σ_{m≥1} ways[s − m·step]
                nxt[s] += strided[s - step]
            step *= 2
        ways = [modes * x for x in nxt]
        total += ways[n]
    return total * len(microbatch_counts)


def search_non_uniform(
    problem: HeteroProblem,
    top_k: int = 5,
    max_stages: int = 4,
    exact_limit: int = 3000,
    time_budget_s: float = 5.0,
) -> HeteroResult:
    """Aceso-style search on one GPU type (module docstring): exact enumeration when the space has at
    most ``exact_limit`` per-stage combinations, else bottleneck alleviation from the AMP-style best
    within ``time_budget_s`` seconds of the whole search. The result holds the space's size
    (non_uniform_space_size), as the AMP-style search's holds its own (cluster_space_size)."""
    if not problem.cluster.is_uniform:
        raise InputError(
            "--non-uniform: plans per stage on one GPU type; give a one-pool cluster (or --system and --gpus)"
        )
    t0 = time.perf_counter()
    batch = problem.global_batch
    counts = sorted({batch // k for k in _powers_of_two(batch) if batch % k == 0})
    max_stages = min(max_stages, problem.cluster.gpus, len(model_blocks(problem.model)))
    space = non_uniform_space_size(problem, max_stages, counts)
    if space <= exact_limit:
        return _exact(problem, top_k, max_stages, counts, space, t0, t0 + time_budget_s)
    return _alleviation(problem, top_k, time_budget_s, t0, space)


def _exact(
    problem: HeteroProblem,
    top_k: int,
    max_stages: int,
    counts: list[int],
    space: int,
    t0: float,
    deadline: float = math.inf,
) -> HeteroResult:
    """Every per-stage combination, each split solved exactly (search.staged.splits.best_splits),
    as far as the ``deadline`` (time.perf_counter) allows; ``space``: non_uniform_space_size."""
    candidates = []
    modes = searched_modes(problem)
    for pp in range(1, max_stages + 1):
        for comp, choice in _stage_choices(problem, pp, modes):
            configs = [StageConfig(0, g, t, *stage_fields(rc)) for g, (t, rc) in zip(comp, choice)]
            for m in counts:
                settings = _stage_settings_from(problem, configs, m)
                if settings is not None:
                    candidates.append((settings, m, None))
    found, solved, bounded = best_splits(problem, candidates, top_k, deadline)
    names = (problem.cluster.pools[0].name,)
    plans = [
        Candidate(t, _plan_from(problem, s, b, m), _label(s, b, names))
        for t, s, b, m, _ in found[:top_k]
    ]
    elapsed = time.perf_counter() - t0
    stopped = (
        f"time budget {deadline - t0:g} s reached: {bounded} of {len(candidates)} candidates bounded, "
        f"{solved} solved; the space holds {space} candidates"
        if time.perf_counter() > deadline
        else ""
    )
    return HeteroResult(
        plans, len(candidates), elapsed, "exact", solved=solved, stopped=stopped, space=space
    )


def _bounds(configs) -> tuple[int, ...]:
    """Block boundaries of stages holding these block counts (StageConfig.layers)."""
    return tuple(int(b) for b in np.concatenate([[0], np.cumsum([c.layers for c in configs])]))


def _alleviation(
    problem: HeteroProblem, top_k: int, time_budget_s: float, t0: float, space: int
) -> HeteroResult:
    """Bottleneck alleviation (search.staged.alleviate) from the best AMP-style plan, for what is left
    of the time budget; ``space``: non_uniform_space_size, of which it visits a part."""
    start = search_cluster(problem, top_k=1, time_budget_s=time_budget_s)  # the start, in budget
    stopped = f"while finding the start plan: {start.stopped}" if start.stopped else ""
    if not start.plans:
        elapsed = time.perf_counter() - t0
        return HeteroResult(
            [], start.evaluated, elapsed, "alleviation", stopped=stopped, space=space
        )
    plan0 = start.plans[0].plan
    m = plan0.n_microbatches
    configs0 = tuple(
        StageConfig(s.blocks[1] - s.blocks[0], s.gpus, s.tp, s.recompute, tuple(s.recompute_ops))
        for s in plan0.stages
    )
    left_s = max(0.0, time_budget_s - (time.perf_counter() - t0))
    result = _alleviate(problem, configs0, m, left_s)
    settings = _stage_settings_from(problem, result.best, m)
    bounds = _bounds(result.best)
    best = Candidate(
        result.best_score.step_time_s,
        _plan_from(problem, settings, bounds, m),
        _label(settings, bounds, (problem.cluster.pools[0].name,)),
    )
    plans = [best] + [p for p in start.plans if p.plan != best.plan]  # the start plan once
    evaluated = start.evaluated + result.evaluations
    elapsed = time.perf_counter() - t0
    if not stopped and elapsed > time_budget_s:
        stopped = (
            f"time budget {time_budget_s:g} s reached: {result.evaluations} alleviation moves; "
            f"the space holds {space} candidates"
        )
    return HeteroResult(
        plans[:top_k],
        evaluated,
        elapsed,
        "alleviation",
        result.trajectory,
        stopped=stopped,
        space=space,
    )


def _alleviate(
    problem: HeteroProblem, configs0: tuple[StageConfig, ...], m: int, time_budget_s: float
) -> AlleviationResult:
    """search.staged.alleviate over per-stage configs, each scored by the per-stage estimator; per-op
    recompute choices (Aceso §4.2): each recomputable module alone, and the core attention with each
    other one."""
    n_blocks = len(model_blocks(problem.model))

    def evaluate(configs):
        if any(c.layers < 1 for c in configs) or sum(c.layers for c in configs) != n_blocks:
            return None
        if not split_launchable(problem, _bounds(configs)):
            return None
        settings = _stage_settings_from(problem, configs, m)
        if settings is None:
            return None
        plan = _plan_from(problem, settings, _bounds(configs), m)
        est = estimate_stage_plan(problem.model, problem.cluster, plan)
        overflow = tuple(s.peak_bytes - s.capacity_bytes for s in est.stages)
        return Score(est.step_time_s, est.stage_work_s, overflow)

    modules = recomputable_modules(
        problem.model, problem.seq_length, problem.attention, problem.dtype
    )
    op_sets = tuple((mod,) for mod in modules) + tuple(
        ("core_attn", mod) for mod in modules if mod != "core_attn" and "core_attn" in modules
    )
    # every mode the uniform search varies (search.launch.searched_modes; not only ``problem.recompute``)
    modes = launch.searched_modes(problem.framework, problem.model, 1)
    return alleviate(configs0, evaluate, time_budget_s, recompute=recompute_choices(modes, op_sets))
