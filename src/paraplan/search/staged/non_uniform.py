"""Aceso-style search over per-stage plans on one GPU type (``paraplan search --non-uniform``, issue 10).

Per-stage GPU counts, tp and recompute, one cp of ``problem.cps`` on every stage and the run-wide variants
(schedule, offloads: search.staged.axes). Exact by enumeration when the space of per-stage settings has at
most ``exact_limit`` combinations (each combination's layer split solved by the DP of search.staged.hetero);
otherwise iterative bottleneck alleviation (search.staged.alleviate) from the uniform exact search's best
plans (search.staged.uniform_seed, each under its own run-wide settings: schedule, vpp, ZeRO, sequence
parallelism) and, where there is none, the AMP-style search's (search.staged.hetero.search_cluster), under a
time budget, with its trajectory. Either way the uniform seeds are among the plans ranked, so the search
never returns a plan slower than the best uniform plan a per-stage plan can state.

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
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from paraplan.search import launch
from paraplan.search.staged.alleviate import (
    AlleviationResult,
    Score,
    StageConfig,
    alleviate,
    recompute_choices,
)
from paraplan.search.staged.axes import (
    cp_allowed,
    takes_depth,
    variant_note,
    variant_of,
    variants,
)
from paraplan.search.staged.experts import (
    expert_label,
    expert_options,
    expert_space_factor,
    plan_problem,
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
from paraplan.search.staged.problem import depth_allowed, launchable, searched_modes
from paraplan.search.staged.splits import best_splits, split_launchable
from paraplan.search.staged.uniform_seed import uniform_seeds
from paraplan.specs.errors import InputError
from paraplan.specs.recompute import stage_fields
from paraplan.specs.rules import even_share, stage_degree_rule
from paraplan.specs.stage_plan import StagePlanSpec, stage_block_ranges
from paraplan.step.blocks import model_blocks
from paraplan.step.per_stage import StageSetting, estimate_stage_plan
from paraplan.step.stage_blocks import recomputable_modules


def _stage_settings_from(
    problem: HeteroProblem, configs, microbatches: int
) -> list[StageSetting] | None:
    """The StageSettings of these per-stage configs on the one pool, or None when a stage breaks a rule
    of a per-stage plan (specs.rules.stage_rules; its degrees fill its GPUs, StageConfig.of and
    StageConfig.regrouped check stage_degree_rule), its tp leaves a node (the
    search keeps tensor parallelism inside NVLink, as AMP and Aceso do) or the framework's launcher does
    not run the stages (problem.launchable)."""
    pool = problem.cluster.pools[0]
    offset = 0
    out = []
    for i, c in enumerate(configs):
        if c.tp > pool.gpus_per_node or not cp_allowed(problem, c.tp, c.dims.cp):
            return None
        dims = replace(c.dims, pp=len(configs))
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


def _stage_tps(gpus: int, cp: int = 1) -> list[int]:
    """Tensor-parallel degrees of a stage of ``gpus`` GPUs at context-parallel degree ``cp``: each power of
    two t with t·cp dividing them (specs.rules.stage_degree_rule)."""
    return [t for t in _powers_of_two(gpus) if stage_degree_rule(gpus, t, 0, cp) is None]


def _stage_options(gpus: int, modes: tuple[str, ...], cp: int = 1) -> list[tuple[int, str]]:
    """(tp, recompute mode) options of a stage of ``gpus`` GPUs: tp a power of two with tp·cp dividing
    them, the ``modes`` of the search (problem.searched_modes)."""
    tps = _stage_tps(gpus, cp)
    return [(t, rc) for t in tps for rc in modes]


def _stage_choices(problem: HeteroProblem, pp: int, modes: tuple[str, ...], cp: int = 1):
    """(GPUs per stage, (tp, mode) per stage) of every ``pp``-stage combination the exact search lists
    at context-parallel degree ``cp`` (one on every stage): every composition of the GPUs with every stage
    option; with a framework whose launcher runs one tp, dp and recompute on every stage
    (search.launch.restricted, stage_plan_allowed), only equal stages with one option repeated, the rest
    being refused one by one otherwise."""
    n = problem.cluster.gpus
    if launch.restricted(problem.framework):
        if gpus := even_share(n, pp):  # equal stages: pp divides the GPUs
            for option in _stage_options(gpus, modes, cp):
                yield (gpus,) * pp, (option,) * pp
        return
    for comp in _compositions(n, pp):
        for choice in itertools.product(*(_stage_options(g, modes, cp) for g in comp)):
            yield comp, choice


def non_uniform_space_size(
    problem: HeteroProblem, max_stages: int, microbatch_counts: list[int]
) -> int:
    """Per-stage combinations the exact search enumerates, counted without listing them.

    With N GPUs, R recompute modes and M micro-batch counts, a stage of g GPUs at context-parallel degree c
    has w(g) = R·(v₂(g/c) + 1) options where c divides g (tp = 2^j for each 2^j dividing g/c; v₂ the exponent
    of 2), none elsewhere, and

        size = V · M · Σ_c Σ_{p=1..max_stages} Σ_{g₁+…+g_p = N, gᵢ ≥ 1} Π_i w(gᵢ)
             = V · M · Σ_c Σ_p [x^N] W_c(x)^p,   W_c(x) = R · Σ_{j≥0} x^(c·2^j) / (1 − x^(c·2^j)),

    c over ``problem.cps``, V the variants (search.staged.axes.variants: schedules × offload options). Each
    factor 1/(1 − x^(c·2^j)) is a strided prefix sum, so one more stage costs O(N·log₂N) additions (exact
    integers) instead of the C(N−1, p−1) compositions a loop over them visits. With a launcher that runs
    equal stages only (_stage_choices): size = V · M · Σ_c Σ_{p ≤ max_stages, p | N} w(N/p). Either sum
    counts only the depths p the pipeline runtime takes the ZeRO stage at (problem.depth_allowed). An MoE
    model's combinations each take E expert options before the rules (search.staged.experts.
    expert_space_factor), so the size is multiplied by E (1 for a dense model)."""
    per_cp = sum(_cp_space_size(problem, max_stages, cp) for cp in problem.cps)
    # expert options per combination before the rules (1 for a dense model), etp over 1 and every stage tp
    experts = expert_space_factor(problem, _powers_of_two(problem.cluster.pools[0].gpus_per_node))
    return per_cp * len(microbatch_counts) * len(variants(problem)) * experts


def _cp_space_size(problem: HeteroProblem, max_stages: int, cp: int) -> int:
    """non_uniform_space_size's sum over the depths at one context-parallel degree ``cp``, one micro-batch
    count and one variant."""
    n, modes = problem.cluster.gpus, len(searched_modes(problem, cp))
    if launch.restricted(problem.framework):
        equal = [
            g
            for p in range(1, max_stages + 1)
            if (g := even_share(n, p)) and depth_allowed(problem, p)
        ]
        return sum(modes * len(_stage_tps(g, cp)) for g in equal)
    ways = [1] + [0] * n  # ways[s]: weighted lists of p stages on s GPUs; p = 0 to start
    total = 0
    for p in range(1, max_stages + 1):
        nxt = [0] * (n + 1)
        step = cp
        while step <= n:
            strided = list(ways)  # strided[s] = Σ_{m≥0} ways[s − m·step]
            for s in range(step, n + 1):
                strided[s] += strided[s - step]
            for s in range(step, n + 1):  # + x^step / (1 − x^step): Σ_{m≥1} ways[s − m·step]
                nxt[s] += strided[s - step]
            step *= 2
        ways = [modes * x for x in nxt]
        total += ways[n] if depth_allowed(problem, p) else 0
    return total


def search_non_uniform(
    problem: HeteroProblem,
    top_k: int = 5,
    max_stages: int = 4,
    exact_limit: int = 3000,
    time_budget_s: float = 5.0,
    seeded: bool = True,
) -> HeteroResult:
    """Aceso-style search on one GPU type (module docstring): exact enumeration when the space has at
    most ``exact_limit`` per-stage combinations, else bottleneck alleviation from the uniform seeds (or
    the AMP-style best) within ``time_budget_s`` seconds of the whole search, the seeds' uniform search
    included; ``seeded`` False: no uniform seed (the per-stage space alone, as tests of its exactness
    ask). The result holds the space's size
    (non_uniform_space_size), as the AMP-style search's holds its own (cluster_space_size)."""
    if not problem.cluster.is_uniform:
        raise InputError(
            "--non-uniform: plans per stage on one GPU type; give a one-pool cluster (or --system and --gpus)"
        )
    t0 = time.perf_counter()
    batch = problem.global_batch
    counts = sorted({m for k in _powers_of_two(batch) if (m := even_share(batch, k))})
    max_stages = min(max_stages, problem.cluster.gpus, len(model_blocks(problem.model)))
    space = non_uniform_space_size(problem, max_stages, counts)
    if space <= exact_limit:
        deadline = t0 + time_budget_s
        return _exact(problem, top_k, max_stages, counts, space, t0, deadline, seeded)
    return _alleviation(problem, top_k, time_budget_s, t0, space, seeded)


def _exact(
    problem: HeteroProblem,
    top_k: int,
    max_stages: int,
    counts: list[int],
    space: int,
    t0: float,
    deadline: float = math.inf,
    seeded: bool = True,
) -> HeteroResult:
    """Every per-stage combination, each split solved exactly (search.staged.splits.best_splits),
    as far as the ``deadline`` (time.perf_counter) allows, under the problem's run-wide settings, and the
    uniform seeds (_seed_starts: the uniform search's best under the run-wide settings a per-stage plan
    states; none when not ``seeded``), ranked together; ``space``: non_uniform_space_size."""
    seeds = [s.candidate for s in _seed_starts(problem, deadline)] if seeded else []
    candidates = _exact_candidates(problem, max_stages, counts)
    found, solved, bounded, cut = best_splits(problem, candidates, top_k, deadline)
    names = (problem.cluster.pools[0].name,)
    plans = [
        Candidate(
            t,
            _plan_from(p, s, b, m),
            _label(s, b, names) + expert_label(p, s) + variant_note(problem, p),
        )
        for t, s, b, m, _, p in found[:top_k]
    ]
    # a uniform seed's run-wide settings are outside this space
    plans = _ranked(plans + seeds)[:top_k]
    elapsed = time.perf_counter() - t0
    stopped = (
        f"time budget {deadline - t0:g} s reached: {bounded} of {len(candidates)} candidates bounded, "
        f"{solved} solved; the non-uniform space holds {space} candidates"
        if cut
        else ""
    )
    return HeteroResult(
        plans, len(candidates), elapsed, "exact", solved=solved, stopped=stopped, space=space
    )


def _exact_candidates(problem: HeteroProblem, max_stages: int, counts: list[int]) -> list:
    """(settings, microbatches, None, variant) of every per-stage combination the exact search lists: each
    cp of ``problem.cps`` (one on every stage), depth, stage choice (``_stage_choices``), expert option
    (search.staged.experts.expert_options) and micro-batch count, under each variant (search.staged.axes.variants: schedule and offloads) that runs the depth at that count
    (search.staged.axes.takes_depth) and whose launcher runs the stages (``_stage_settings_from``)."""
    out = []
    for cp in problem.cps:
        modes = searched_modes(problem, cp)
        for pp in filter(lambda pp: depth_allowed(problem, pp), range(1, max_stages + 1)):
            for comp, choice in _stage_choices(problem, pp, modes, cp):
                configs = [
                    StageConfig.of(0, g, t, *stage_fields(rc), cp=cp)
                    for g, (t, rc) in zip(comp, choice)
                ]
                for stages, priced in expert_options(problem, [c.dims for c in configs]):
                    expert = [replace(c, dims=d) for c, d in zip(configs, stages)]
                    out += _variant_candidates(priced, expert, pp, counts)
    return out


def _variant_candidates(priced: HeteroProblem, configs, pp: int, counts: list[int]) -> list:
    """(settings, microbatches, None, variant) of these stage configs at each micro-batch count under each
    variant of ``priced`` (search.staged.axes.variants) that runs the depth at that count and whose launcher
    runs the stages (``_stage_settings_from``)."""
    out = []
    for m in counts:
        for run in variants(priced):
            if run is not priced and not takes_depth(run, pp, m):
                continue
            settings = _stage_settings_from(run, configs, m)
            if settings is not None:
                out.append((settings, m, None, run))
    return out


def _bounds(configs) -> tuple[int, ...]:
    """Block boundaries of stages holding these block counts (StageConfig.layers)."""
    return tuple(int(b) for b in np.concatenate([[0], np.cumsum([c.layers for c in configs])]))


# Share of the time left after the uniform seeds (search.staged.uniform_seed) that the AMP-style start search
# (search_cluster) takes when a seed exists; without one it takes the whole budget. 0: measured on 1,024 GPUs
# (docs/heterogeneous.md), the start search at half of the budget returned no plan better than the seed,
# whose run-wide settings (interleaving, sequence parallelism, ZeRO) the AMP-style search does not vary.
AMP_START_SHARE = 0.0


def _configs_of(plan: StagePlanSpec, n_blocks: int) -> tuple[StageConfig, ...]:
    """The per-stage configs (StageConfig: blocks, degrees, recompute) of a per-stage plan."""
    return tuple(
        StageConfig(b - a, s.dims, s.recompute, tuple(s.recompute_ops))
        for s, (a, b) in zip(plan.stages, stage_block_ranges(plan, n_blocks))
    )


def _runwide_note(problem: HeteroProblem) -> str:
    """The run-wide settings at the end of a plan's label (schedule, vpp, sequence parallelism, ZeRO)
    where a uniform seed set them."""
    parts = [f"{problem.schedule}/v{problem.vpp}" if problem.vpp > 1 else problem.schedule]
    parts += ["sp"] if problem.sequence_parallel else []
    parts += [f"zero{problem.zero}"] if problem.zero else []
    return "; " + " ".join(parts)


class _Start(NamedTuple):
    """A plan the alleviation may start from: its candidate and the problem whose run-wide settings
    price moves from it (a uniform seed's own, search.staged.uniform_seed; else the search's)."""

    candidate: Candidate
    problem: HeteroProblem


def _priced(problem: HeteroProblem, configs, m: int):
    """(the per-stage plan of these configs at ``m`` micro-batches, its per-stage Estimate, its stage settings,
    its block bounds), or None when they break a rule the search keeps (split_launchable,
    _stage_settings_from) or one of an interleaved plan's chunks (the estimator's stage_plan_violations:
    an interleaved seed's moves may)."""
    bounds = _bounds(configs)
    if not (depth_allowed(problem, len(configs)) and split_launchable(problem, bounds)):
        return None
    settings = _stage_settings_from(problem, configs, m)
    if settings is None:
        return None
    plan = _plan_from(problem, settings, bounds, m)
    try:
        est = estimate_stage_plan(problem.model, problem.cluster, plan)
    except InputError:
        return None
    return plan, est, settings, bounds


def _candidate(problem: HeteroProblem, configs, m: int, note: str = "") -> Candidate | None:
    """The Candidate of these per-stage configs at ``m`` micro-batches (``_priced``), or None."""
    priced = _priced(problem, configs, m)
    if priced is None:
        return None
    plan, est, settings, bounds = priced
    names = (problem.cluster.pools[0].name,)
    label = _label(settings, bounds, names) + expert_label(problem, settings)
    return Candidate(est.step_time_s, plan, label + note)


def _seed_starts(problem: HeteroProblem, deadline: float) -> list[_Start]:
    """The uniform seeds (search.staged.uniform_seed) the per-stage search can state and start from."""
    n_blocks = len(model_blocks(problem.model))
    starts = []
    for seed in uniform_seeds(problem, deadline):
        configs = _configs_of(seed.plan, n_blocks)
        note = _runwide_note(seed.problem)
        if c := _candidate(seed.problem, configs, seed.plan.n_microbatches, note):
            starts.append(_Start(c, seed.problem))
    return starts


def _ranked(plans: list[Candidate]) -> list[Candidate]:
    """The candidates by step time, each plan once."""
    return list({c.plan: c for c in sorted(plans, key=lambda c: c.step_time_s)}.values())


def _starts(problem: HeteroProblem, top_k: int, deadline: float, seeded: bool = True):
    """(the starts, best first: the uniform seeds, search.staged.uniform_seed, and the AMP-style start
    search's plans; that search's result, or None when the seeds leave it no share, AMP_START_SHARE, of
    the time left before ``deadline``)."""
    starts = _seed_starts(problem, deadline) if seeded else []
    left_s = max(0.0, deadline - time.perf_counter())
    share_s = AMP_START_SHARE * left_s if starts else left_s
    start = None
    if not starts or share_s > 0:
        name = "the AMP-style start search's space (equal stages, layer split by DP)"
        start = search_cluster(problem, top_k=top_k, time_budget_s=share_s, space_name=name)
        # the problem that prices moves from each: its expert switch and its variant
        starts += [
            _Start(c, variant_of(plan_problem(problem, c.plan), c.plan)) for c in start.plans
        ]
    return sorted(starts, key=lambda s: s.candidate.step_time_s), start


def _alleviation(
    problem: HeteroProblem,
    top_k: int,
    time_budget_s: float,
    t0: float,
    space: int,
    seeded: bool = True,
) -> HeteroResult:
    """Bottleneck alleviation (search.staged.alleviate) from each start in turn (_starts: the uniform exact
    search's best plans under their own run-wide settings, then the AMP-style best), best first, for what
    is left of the time budget; the best plan found and the starts are returned. ``space``:
    non_uniform_space_size, of which it visits a part."""
    deadline = t0 + time_budget_s
    starts, amp = _starts(problem, top_k, deadline, seeded)
    stopped = (
        f"while finding the AMP-style start plan: {amp.stopped}" if amp and amp.stopped else ""
    )
    evaluated = amp.evaluated if amp else 0
    n_blocks = len(model_blocks(problem.model))
    found, best, trajectory = [s.candidate for s in starts], None, []
    for s in starts:
        if time.perf_counter() > deadline:
            break
        m = s.candidate.plan.n_microbatches
        left_s = max(0.0, deadline - time.perf_counter())
        result = _alleviate(s.problem, _configs_of(s.candidate.plan, n_blocks), m, left_s)
        evaluated += result.evaluations
        # a seed's run-wide settings (not those of an AMP-style start, priced under its expert switch)
        seeded = s.problem is not plan_problem(problem, s.candidate.plan)
        note = _runwide_note(s.problem) if seeded else ""
        c = _candidate(s.problem, result.best, m, note)
        if best is None or c.step_time_s < best.step_time_s:
            best, trajectory = c, result.trajectory
    plans = _ranked(([best] if best else []) + found)
    elapsed = time.perf_counter() - t0
    if not stopped and elapsed > time_budget_s:
        stopped = (
            f"time budget {time_budget_s:g} s reached: {evaluated} alleviation moves from "
            f"{len(starts)} start plan(s); the non-uniform space holds {space} candidates"
        )
    return HeteroResult(
        plans[:top_k], evaluated, elapsed, "alleviation", trajectory, stopped=stopped, space=space
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
        priced = _priced(problem, configs, m)
        if priced is None:
            return None
        est = priced[1]
        overflow = tuple(s.peak_bytes - s.capacity_bytes for s in est.stages)
        return Score(est.step_time_s, est.stage_work_s, overflow)

    modules = recomputable_modules(
        problem.model, problem.seq_length, problem.attention, problem.dtype
    )
    op_sets = tuple((mod,) for mod in modules) + tuple(
        ("core_attn", mod) for mod in modules if mod != "core_attn" and "core_attn" in modules
    )
    # every mode the uniform search varies at the stages' one cp (search.launch.searched_modes; not only
    # ``problem.recompute``)
    modes = launch.searched_modes(problem.framework, problem.model, configs0[0].dims.cp)
    return alleviate(configs0, evaluate, time_budget_s, recompute=recompute_choices(modes, op_sets))
