"""Searches over plans the uniform search cannot express (issue 10).

``search_cluster`` (AMP-style, ``paraplan search --cluster FILE``): over device placements (the order
in which the pools take the pipeline's ranks, search.staged.pool_orders: listed lazily, interchangeable
pools once, counted in closed form with the rest of the space by ``cluster_space_size``), tp/cp/dp/pp
degrees (cp one of ``problem.cps`` on every stage), micro-batch sizes and the run-wide variants (schedule,
offloads: search.staged.axes), with ranks
ordered (pp, dp, tp) outermost first as AMP does (Li et al. 2022, arXiv:2210.07297, §3.1); for each
candidate the layer split is the optimum of the pipeline objective found by
search.staged.balance.balance_split (search.staged.splits) over the stage-cost matrices of step.per_stage.range_matrices (every
range of blocks on every stage at once: the exact per-micro-batch work, each stage's tail without the
drain slack, which depends on the stages in front, so at least the composed tail). Ranked by the split's
step through step.compose.compose_step, as step.per_stage.estimate_stage_plan prices it (a property
test re-estimates every returned plan).

The Aceso-style search (``paraplan search --non-uniform``) is search.staged.non_uniform; it shares this
split solver (search.staged.splits.best_splits), and this module's plan builder (_plan_from) and labels.

Every candidate keeps the rules of a per-stage plan's stages (specs.rules.stage_rules, _stage_ok), so
each plan returned passes specs.stage_plan.stage_plan_violations, the estimator's own check; with a
framework profile (``framework``), the rules of what its launcher runs too, the uniform search's
(search.launch: run_wide_violations on the problem, stage_plan_allowed on every candidate,
stages_allowed and fixed_split on its split, split_refusal; the first holds for every split made).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import NamedTuple

from paraplan.search.staged.alleviate import recompute_label
from paraplan.search.staged.axes import (
    cp_allowed,
    searched_offloads,
    takes_depth,
    variant_note,
    variants,
)
from paraplan.search.staged.experts import (
    expert_label,
    expert_options,
    expert_space_factor,
    expert_stage_ok,
    plan_expert_fields,
    stage_expert_fields,
)
from paraplan.search.staged.pool_orders import pool_order_count, pool_orders
from paraplan.search.staged.problem import (  # noqa: F401  (the problem's names, read from here too)
    HeteroProblem,
    depth_allowed,
    launchable,
    profile_fields,
    searched_modes,
    under_profile,
)
from paraplan.search.staged.splits import best_splits
from paraplan.specs.cluster import ClusterSpec
from paraplan.specs.parallel import ParallelDims
from paraplan.specs.recompute import stage_fields
from paraplan.specs.rules import (
    batch_rule,
    degree_rule,
    stage_degree_rule,
    stage_rules,
    tp_rules,
)
from paraplan.specs.stage_plan import StagePlanSpec, settled_stage_plan, stage_plan_from_dict
from paraplan.step.blocks import model_blocks
from paraplan.step.per_stage import StageSetting


@dataclass(frozen=True)
class Candidate:
    step_time_s: float
    plan: StagePlanSpec
    label: str


@dataclass
class HeteroResult:
    plans: list[Candidate]
    evaluated: int
    elapsed_s: float
    mode: str
    trajectory: list = field(default_factory=list)
    solved: int = 0  # candidates whose layer split was solved (the others were bounded out)
    stopped: str = ""  # where the time budget stopped the search ("" when it ran to the end)
    space: int = (
        0  # candidates in the space before the per-stage rules (cluster_space_size); 0: not counted
    )

    def to_dict(self) -> dict:
        from paraplan.specs.stage_plan import stage_plan_to_dict

        return {
            "mode": self.mode,
            "evaluated": self.evaluated,
            "solved": self.solved,
            "elapsed_s": self.elapsed_s,
            **({"stopped": self.stopped} if self.stopped else {}),
            **({"space": self.space, "finished": not self.stopped} if self.space else {}),
            "plans": [
                {"step_time_s": c.step_time_s, "label": c.label, "plan": stage_plan_to_dict(c.plan)}
                for c in self.plans
            ],
            "trajectory": [s.__dict__ for s in self.trajectory],
        }


def _powers_of_two(limit: int) -> list[int]:
    out, k = [], 1
    while k <= limit:
        out.append(k)
        k *= 2
    return out


def _gpu_list(cluster: ClusterSpec, order: tuple[str, ...]) -> list[tuple[str, int]]:
    return [(name, i) for name in order for i in range(cluster.pool(name).gpu_count)]


class _Slice(NamedTuple):
    """A run of consecutive GPUs of one pool (StageSetting.slices' entries)."""

    pool: str
    first: int
    count: int


def _slices(gpus: list[tuple[str, int]]) -> tuple[tuple[str, int, int], ...]:
    out: list[_Slice] = []
    for pool, idx in gpus:
        last = out[-1] if out else None
        if last is not None and last.pool == pool and last.first + last.count == idx:
            out[-1] = last._replace(count=last.count + 1)
        else:
            out.append(_Slice(pool, idx, 1))
    return tuple(tuple(s) for s in out)


def _plan_from(
    problem: HeteroProblem, settings: list[StageSetting], bounds, microbatches: int
) -> StagePlanSpec:
    """The per-stage plan of a candidate: its stages' devices, blocks and settings and the problem's run-wide
    fields. ``overlap_dp_grad_reduce`` is left unset where the problem's equals the default the plan's pools
    settle (specs.stage_plan.settled_stage_plan, which estimate_stage_plan applies), so a searched plan file
    states it only where it differs, as a written plan would (stage_plan_to_dict leaves None out)."""
    stages = []
    for st, a, b in zip(settings, bounds, bounds[1:]):
        devices = [{"pool": p, "gpus": c} for p, _, c in st.slices]
        stage = {"devices": devices, "blocks": [a, b], "tp": st.dims.tp, "recompute": st.recompute}
        if st.dims.cp > 1:
            stage["cp"] = st.dims.cp
        stage |= stage_expert_fields(problem, st)
        if st.recompute_ops:
            stage["recompute_ops"] = list(st.recompute_ops)
        stages.append(stage)
    fields = {
        "global_batch": problem.global_batch,
        "seq_length": problem.seq_length,
        "microbatches": microbatches,
        "dtype": problem.dtype,
        "attention": problem.attention,
        "schedule": problem.schedule,
        "vpp": problem.vpp,
        "zero": problem.zero,
        "engine": problem.engine,
        "overlap_param_gather": problem.overlap_param_gather,
        "overlap_tp_comm": problem.overlap_tp_comm,
        "sequence_parallel": problem.sequence_parallel,
        **searched_offloads(problem),
        **problem.runtime.model_dump(),
        **plan_expert_fields(problem),
        "stages": stages,
    }
    plan = stage_plan_from_dict(fields)
    overlap = problem.overlap_dp_grad_reduce
    if settled_stage_plan(plan, problem.cluster).overlap_dp_grad_reduce == overlap:
        return plan
    return stage_plan_from_dict(fields | {"overlap_dp_grad_reduce": overlap})


def _label(settings: list[StageSetting], bounds, order) -> str:
    layers = [b - a for a, b in pairwise(bounds)]
    st = settings[0]

    def rc(s: StageSetting) -> str:
        return recompute_label(s.recompute, s.recompute_ops)

    uniform = all(
        s.dims.tp == st.dims.tp and s.dims.dp == st.dims.dp and rc(s) == rc(st) for s in settings
    )
    cp = f" cp{st.dims.cp}" if st.dims.cp > 1 else ""  # one cp on every stage
    head = (
        f"tp{st.dims.tp}{cp} dp{st.dims.dp} pp{len(settings)} mb{st.micro_batch} rc {rc(st)}"
        if uniform
        else f"per-stage{cp} " + " | ".join(f"{s.dims.tp}x{s.dims.dp} {rc(s)}" for s in settings)
    )
    return f"{head}; pools {'>'.join(order)}; blocks/stage {layers}"


class UniformDegrees(NamedTuple):
    """One candidate of the AMP-style search: the same degrees on every stage, the per-GPU micro-batch
    and the micro-batch count."""

    dims: ParallelDims
    micro_batch: int
    microbatches: int


def _degrees(problem: HeteroProblem) -> Iterator[UniformDegrees]:
    """Degrees with tp·cp·dp·pp = all GPUs (specs.rules.degree_rule), tp a power of two inside a node and
    tp·cp dividing them (specs.rules.stage_degree_rule, the stages' rule: each stage of a uniform split holds
    a share of the GPUs that tp·cp divides too), tp keeping the tp rules (specs.rules.tp_rules), cp one of
    ``problem.cps`` the stage's tp takes (search.staged.axes.cp_allowed), pp a depth the pipeline runtime
    takes the ZeRO stage at (depth_allowed), and the micro-batch sizes that split the batch
    (specs.rules.batch_rule)."""
    cluster, model, batch = problem.cluster, problem.model, problem.global_batch
    gpus = cluster.gpus
    node_min = min(p.gpus_per_node for p in cluster.pools)
    n_blocks = len(model_blocks(model))
    for tp in _powers_of_two(node_min):
        if tp_rules(model, tp) or (problem.tps and tp not in problem.tps):
            continue
        for cp in problem.cps:
            if stage_degree_rule(gpus, tp, 0, cp) or not cp_allowed(problem, tp, cp):
                continue
            for pp in range(1, min(gpus // (tp * cp), n_blocks) + 1):
                dims = ParallelDims(tp=tp, cp=cp, dp=gpus // (tp * cp) // pp, pp=pp)
                if degree_rule(gpus, dims) or (problem.pps and pp not in problem.pps):
                    continue
                if not depth_allowed(problem, pp):
                    continue
                if batch_rule(batch, dims.dp, 1):
                    continue
                for mb in problem.micro_batches or _powers_of_two(batch // dims.dp):
                    if not batch_rule(batch, dims.dp, mb):
                        yield UniformDegrees(dims, mb, batch // (dims.dp * mb))


def _stage_ok(
    problem: HeteroProblem,
    index: int,
    dims: ParallelDims,
    slices: tuple[tuple[str, int, int], ...],
    microbatches: int,
) -> bool:
    """True when stage ``index`` of these degrees on these (pool, first, count) slices keeps every rule
    of a per-stage plan's stage (specs.rules.stage_rules; an MoE model's, search.staged.experts.
    expert_stage_ok): what the searched plan's check will ask."""
    broken = stage_rules(
        problem.model,
        index,
        dims,
        tuple(count for _, _, count in slices),
        problem.global_batch,
        microbatches,
        problem.seq_length,
        problem.common.sequence_parallel,
        problem.runtime.cp_algorithm,
    )
    return not broken and expert_stage_ok(problem, index, dims, slices)


def cluster_space_size(problem: HeteroProblem, degrees: list[UniformDegrees] | None = None) -> int:
    """Candidates of the AMP-style search before the per-stage rules, counted without listing the pool
    orders: (distinct pool orders, search.staged.pool_orders.pool_order_count) × Σ over the uniform
    degrees and micro-batch sizes (``_degrees``: a loop over tp, cp, pp and micro-batch sizes, independent
    of the orders; ``degrees``: the list where the caller has it) of their recomputation modes
    (``searched_modes`` at their cp) times their expert options before the rules
    (search.staged.experts.expert_space_factor) × (the variants' schedules and offloads,
    search.staged.axes.variants)."""
    if degrees is None:
        degrees = list(_degrees(problem))
    modes = {cp: len(searched_modes(problem, cp)) for cp in problem.cps}
    listed = sum(modes[d.dims.cp] * expert_space_factor(problem, [d.dims.tp]) for d in degrees)
    return pool_order_count(problem.cluster) * listed * len(variants(problem))


def sharded_first(degrees: list[UniformDegrees]) -> list[UniformDegrees]:
    """The degrees in decreasing model-parallel size tp·pp (a stable sort: ``_degrees``' order among
    equals), the listing order of a search under a time budget. A stage holds about 1/(tp·pp) of the
    weights and optimizer state, so the most sharded candidates are the likeliest to fit in memory:
    a search stopped by its budget has then bounded and solved candidates that can give a plan (issue
    31: GPT-3 175B on sixteen pools of 64 GPUs, where the tp1/tp2, pp ≤ 8 candidates listed first do
    not fit and 5 s ended with none). The order is a heuristic of where to look first only: the search
    ranks by (step, bound, place in the list) and returns the same k best once it runs to its end,
    up to candidates of exactly equal step and bound; without a budget the listing is ``_degrees``'."""
    return sorted(degrees, key=lambda d: -d.dims.tp * d.dims.pp)


def _candidates(
    problem: HeteroProblem,
    orders,
    degrees: list[UniformDegrees],
    deadline: float,
    progress: list[int],
):
    """(settings, microbatches, order, problem) of every candidate, one pool order at a time (``orders``, a
    list or a generator), ``degrees`` (``_degrees``), expert option (search.staged.experts.expert_options) and
    variant of it (search.staged.axes.variants: schedule and offloads; the problem that prices it),
    ``progress`` counting the orders begun and the candidates listed; none past ``deadline``."""
    if not math.isinf(deadline):
        degrees = sharded_first(degrees)
    # (recompute, recompute_ops) of each mode at each cp
    stated = {
        cp: [stage_fields(mode) for mode in searched_modes(problem, cp)] for cp in problem.cps
    }
    for order in orders:
        if time.perf_counter() > deadline:
            return
        progress[0] += 1
        gpu_list = _gpu_list(problem.cluster, order)
        for dims, mb, m in degrees:
            pp, per = dims.pp, dims.stage_gpus
            slices = [_slices(gpu_list[k * per : (k + 1) * per]) for k in range(pp)]
            for stages, priced in expert_options(problem, [dims] * pp):
                if not all(_stage_ok(priced, k, stages[k], slices[k], m) for k in range(pp)):
                    continue  # a stage straddles two pools with part of a TP group in each
                for rc, ops in stated[dims.cp]:
                    settings = [
                        StageSetting(slices[k], stages[k], mb, rc, ops, k, m) for k in range(pp)
                    ]
                    for run in variants(priced):  # the problem's schedules and offloads
                        if (run is priced or takes_depth(run, pp, m)) and launchable(run, settings):
                            progress[1] += 1
                            yield settings, m, order, run


def search_cluster(
    problem: HeteroProblem,
    top_k: int = 5,
    orders: list[tuple[str, ...]] | None = None,
    time_budget_s: float | None = None,
    space_name: str = "the space",
) -> HeteroResult:
    """AMP-style search (module docstring), stopped at ``time_budget_s`` from its start (the pool
    orders listed, bounded and solved so far; issue 37: six pools, 720 orders, ran past 120 s; issue 31:
    eleven pools ran out of memory listing 40 million orders before the budget applied). ``orders``: the
    pool orders to search (default: every distinct one, search.staged.pool_orders); ``space_name``: how
    the stop message names this search's space (the per-stage search names it as its start's)."""
    t0 = time.perf_counter()
    deadline = math.inf if time_budget_s is None else t0 + time_budget_s
    total_orders = len(orders) if orders else pool_order_count(problem.cluster)
    progress = [0, 0]  # pool orders begun, candidates listed
    degrees = list(_degrees(problem))
    stream = _candidates(
        problem, orders or pool_orders(problem.cluster), degrees, deadline, progress
    )
    found, solved, bounded, over = best_splits(problem, stream, top_k, deadline)
    space = cluster_space_size(problem, degrees)
    plans = [
        Candidate(
            t,
            _plan_from(p, s, b, m),
            _label(s, b, o) + expert_label(p, s) + variant_note(problem, p),
        )
        for t, s, b, m, o, p in found[:top_k]
    ]
    stopped = (
        f"time budget {time_budget_s:.3g} s reached: {progress[0]} of {total_orders} pool orders "
        f"enumerated, {bounded} of {progress[1]} candidates bounded, {solved} solved; {space_name} "
        f"holds {space} candidates"
        if over
        else ""
    )
    elapsed_s = time.perf_counter() - t0
    return HeteroResult(
        plans, progress[1], elapsed_s, "amp-dp", solved=solved, stopped=stopped, space=space
    )
