"""Searches over plans the uniform search cannot express (issue 10).

``search_cluster`` (AMP-style, ``paraplan search --cluster FILE``): over device placements (the order
in which the pools take the pipeline's ranks), tp/dp/pp degrees and micro-batch sizes, with ranks
ordered (pp, dp, tp) outermost first as AMP does (Li et al. 2022, arXiv:2210.07297, §3.1); for each
candidate the layer split is the optimum of the pipeline objective found by
search.balance.balance_split over the stage-cost matrices of step.per_stage.range_matrices (every
range of blocks on every stage at once: the exact per-micro-batch work, each stage's tail without the
drain slack, which depends on the stages in front, so at least the composed tail). Ranked by the split's
step through step.compose.compose_step, as step.per_stage.estimate_stage_plan prices it (a property
test re-estimates every returned plan).

The Aceso-style search (``paraplan search --non-uniform``) is search.staged.non_uniform; it shares this
module's split solver (_best_splits), plan builder (_plan_from) and labels.

Every candidate keeps the rules of a per-stage plan's stages (specs.rules.stage_rules, _stage_ok), so
each plan returned passes specs.stage_plan.stage_plan_violations, the estimator's own check; with a
framework profile (``framework``), the rules of what its launcher runs too, the uniform search's
(search.launch: run_wide_violations on the problem, stage_plan_allowed on every candidate,
stages_allowed and fixed_split on its split, split_refusal; the first holds for every split made).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

import numpy as np

from paraplan.cost.frameworks import PLAN_DEFAULTS, framework_cluster
from paraplan.search import launch
from paraplan.search.staged.alleviate import recompute_label
from paraplan.search.staged.balance import balance_split, pipeline_objective
from paraplan.specs.cluster import ClusterSpec
from paraplan.specs.errors import InputError, Violation
from paraplan.specs.framework import FrameworkSpec
from paraplan.specs.model import ModelSpec
from paraplan.specs.parallel import ParallelDims
from paraplan.specs.plan import RUNTIME_FIELDS, RuntimeFields, runtime_of
from paraplan.specs.recompute import stage_fields
from paraplan.specs.rules import batch_rule, per_stage_model_rule, stage_rules, tp_rules
from paraplan.specs.stage_plan import StagePlanSpec, stage_plan_from_dict
from paraplan.step.blocks import model_blocks
from paraplan.step.layout import stage_at
from paraplan.step.per_stage import (
    Common,
    StageSetting,
    common_of,
    compose_stages,
    range_matrices,
    stage_arrays,
    tied_embedding_sync_s,
)


@dataclass(frozen=True)
class HeteroProblem:
    model: ModelSpec
    cluster: ClusterSpec
    global_batch: int
    seq_length: int
    dtype: str = "bf16"
    attention: str = "flash"
    schedule: str = "1f1b"
    zero: int = 0
    overlap_dp_grad_reduce: bool = True
    recompute: tuple[str, ...] = ("none", "full")
    micro_batches: tuple[int, ...] | None = (
        None  # per-GPU micro-batch sizes to try; default powers of two
    )
    engine: str = "megatron"
    tps: tuple[int, ...] | None = (
        None  # tensor-parallel degrees to try (AMP-style search); default powers of two in a node
    )
    pps: tuple[int, ...] | None = (
        None  # pipeline depths to try (AMP-style search); default every divisor
    )
    # the run-wide knobs a framework profile sets (cost.frameworks.PLAN_DEFAULTS; the cluster's systems
    # carry its stack): every plan states them, so ``estimate --plan --framework`` prices it identically
    overlap_param_gather: bool = True
    overlap_tp_comm: bool = False
    runtime: RuntimeFields = RuntimeFields()
    # the profile whose launcher must run every plan (search.launch), and the sequence parallelism it
    # may need (search.launch.staged_fields)
    framework: str | None = None
    sequence_parallel: bool = False

    def __post_init__(self) -> None:
        """Refuse, by name, a model the per-stage builder does not price (specs.rules.per_stage_model_rule):
        an MoE / MLA model searched here would be costed as dense (issue 37); and the run-wide settings
        the framework's launcher cannot state, a ``recompute`` restriction among them
        (search.launch.run_wide_violations, as the uniform search)."""
        if rule := per_stage_model_rule(self.model):
            raise InputError(f"model: {self.model.name!r} is not allowed; {rule}")
        if unlaunchable := launch.run_wide_violations(self.framework, self):
            raise InputError.from_violations([Violation(*v) for v in unlaunchable])

    # fixed in these searches (read by step.per_stage.common_of with the fields above)
    vpp: ClassVar[int] = 1

    @property
    def common(self) -> Common:
        return common_of(self)


def searched_modes(problem: HeteroProblem) -> tuple[str, ...]:
    """The recomputation modes of ``problem.recompute`` the per-stage searches vary: the uniform search's
    rule at cp = 1 (search.launch.searched_modes), each stated per stage by specs.recompute.stage_fields."""
    return launch.searched_modes(problem.framework, problem.model, 1, problem.recompute)


def profile_fields(profile: FrameworkSpec, cluster_spec: ClusterSpec) -> tuple[ClusterSpec, dict]:
    """(the cluster under the profile's stack, cost.frameworks.framework_cluster; the HeteroProblem fields of
        its plan defaults, cost.frameworks.PLAN_DEFAULTS: attention and the overlap switches, and the run-wide
        knobs, specs.plan.runtime_of; its name, whose launcher must run every plan, and the settings
    search.launch.staged_fields states), the one reading of a profile by the per-stage searches."""
    fields = {k: getattr(profile, k) for k in PLAN_DEFAULTS if k not in RUNTIME_FIELDS}
    fields["runtime"] = runtime_of(profile)
    staged = launch.staged_fields(profile.name, profile.overlap_tp_comm)
    fields |= {"framework": profile.name, **staged}
    return framework_cluster(profile, cluster_spec), fields


def under_profile(
    profile: FrameworkSpec, cluster_spec: ClusterSpec, given: dict
) -> tuple[ClusterSpec, dict]:
    """(the cluster, the HeteroProblem fields) of a per-stage search under ``profile`` (profile_fields), the
    caller's ``given`` fields kept where the profile states none, and its ``attention`` winning over the
    profile's (``--attention`` stated): the one reading of the command and the Python API."""
    cluster_spec, stated = profile_fields(profile, cluster_spec)
    return cluster_spec, given | stated | {"attention": given.get("attention", stated["attention"])}


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

    def to_dict(self) -> dict:
        from paraplan.specs.stage_plan import stage_plan_to_dict

        return {
            "mode": self.mode,
            "evaluated": self.evaluated,
            "solved": self.solved,
            "elapsed_s": self.elapsed_s,
            **({"stopped": self.stopped} if self.stopped else {}),
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


def _slices(gpus: list[tuple[str, int]]) -> tuple[tuple[str, int, int], ...]:
    out: list[list] = []
    for pool, idx in gpus:
        if out and out[-1][0] == pool and out[-1][1] + out[-1][2] == idx:
            out[-1][2] += 1
        else:
            out.append([pool, idx, 1])
    return tuple(tuple(s) for s in out)


def _lower_bound(problem: HeteroProblem, settings: list[StageSetting]) -> tuple[float, list]:
    """A lower bound on the candidate's step time, and its stages' StageArrays: the stages together do at
    least Σ_k min_i w_i(k) per micro-batch (each block on its cheapest stage), the slowest stage at least
    1/pp of it, so T ≥ Σ_k min_i w_i(k) · (1 + (m − 1)/pp) (point-to-point and tails are non-negative)."""
    model, cluster, common = problem.model, problem.cluster, problem.common
    stages = len(settings)
    arrays = [
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
    cheapest = np.min(
        [np.max([sum(p.values()) for p in arr.parts.values()], axis=0) for arr in arrays], axis=0
    )
    return float(cheapest.sum()) * (1 + (settings[0].microbatches - 1) / stages), arrays


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
    all the same; the split solver keeps the one split by construction (_stage_matrices: that split's
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


def launchable(problem: HeteroProblem, settings: list[StageSetting]) -> bool:
    """Does the framework's launcher run these stage settings (search.launch.stage_plan_allowed)?"""
    stages = [(s.tp, s.dp, s.recompute, tuple(s.recompute_ops)) for s in settings]
    return launch.stage_plan_allowed(problem.framework, problem, stages)


def _stage_matrices(problem: HeteroProblem, settings: list[StageSetting], arrays):
    """(times, tails) of every block range on every stage; ``inf`` where a range is not allowed (empty,
    first stage not starting at block 0, last stage not ending with the output block, out of memory).
    ``times`` are the per-micro-batch work compose_step takes (step.per_stage.stage_terms: the runtime's
    work); ``tails`` each stage's tail without its drain slack (step.tail.drain_slack_s depends on the
    stages in front, so no per-range matrix holds it): at least the tail compose_step prices, which lowers
    the exposed reduction by the slack (step.tail.after_slack_s), never below 0."""
    n = len(model_blocks(problem.model))
    stages = len(settings)
    times = np.full((stages, n + 1, n + 1), np.inf)
    tails = np.full((stages, n + 1, n + 1), np.inf)
    upper = np.triu(np.ones((n + 1, n + 1), dtype=bool), k=1)  # non-empty ranges a < b
    fixed = fixed_bounds(problem, stages)
    for i, arr in enumerate(arrays):
        m = range_matrices(arr, i)
        ok = upper & (m["peak"] <= arr.capacity)
        if fixed is not None:  # the launcher's one split: its range only
            ok &= np.arange(n + 1)[:, None] == fixed[i]
            ok &= np.arange(n + 1)[None, :] == fixed[i + 1]
        if i == 0:
            ok[1:, :] = False  # the first stage starts at block 0
        if i == stages - 1:
            ok[:, :n] = False  # the last stage ends with the output block
        times[i] = np.where(ok, m["work"], np.inf)
        tails[i] = np.where(ok, m["tail"], np.inf)
    return times, tails


def split_stages(
    problem: HeteroProblem,
    settings: list[StageSetting],
    microbatches: int,
    arrays=None,
    cutoff: float = math.inf,
) -> tuple[float, tuple[int, ...]] | None:
    """(step time, block boundaries) of a split of the model over these stage settings, or None when none
    fits. The split minimises Σ t_i + (m − 1)·max t_i + max u_i over the range matrices
    (search.staged.balance.balance_split; ``_stage_matrices``: t the exact per-micro-batch work, u the tail
    without drain slack, so the objective is at least the split's step); the step time returned is
    compose_step's for that split (step.per_stage.compose_stages, as ``estimate --plan`` prices it), which
    ranks it among the candidates. None too when the split's pipeline part and tied all-reduce alone (at
    most its step: the tails are >= 0) reach ``cutoff``, the k-th best step found (it cannot enter)."""
    n = len(model_blocks(problem.model))
    if len(settings) > n:
        return None
    arrays = arrays or _lower_bound(problem, settings)[1]
    times, tails = _stage_matrices(problem, settings, arrays)
    split = balance_split(times, microbatches, tails)
    if split is None:  # the launcher's split rules hold by construction (split_launchable)
        return None
    tied = tied_embedding_sync_s(
        problem.model, problem.cluster, problem.common, settings[0], settings[-1]
    )
    if pipeline_objective(split.stage_times, microbatches) + tied >= cutoff:
        return None
    bounds = split.bounds
    stages = tuple(
        stage_at(arr.blocks, i, a, b)
        for i, (arr, a, b) in enumerate(zip(arrays, bounds, bounds[1:]))
    )
    return compose_stages(stages, tied)[0], bounds


def _best_splits(problem: HeteroProblem, candidates, top_k: int, deadline: float = math.inf):
    """Branch and bound over candidate stage lists: solve the split DP in increasing order of the lower
    bound (``_lower_bound``, at most the composed step of every split of the candidate) and stop once the
    bound reaches the k-th best composed step found (``split_stages``: no skipped candidate can enter the
    top k). ``candidates``: (settings, microbatches, extra) tuples; past ``deadline``
    (time.perf_counter) no further candidate is bounded or solved, found or not. Returns (found, solved,
    bounded): the k best, and how many candidates were solved and bounded."""
    n = len(model_blocks(problem.model))
    bounded = []
    for settings, m, extra in candidates:
        if time.perf_counter() > deadline:
            break
        if len(settings) > n:
            continue
        bound, arrays = _lower_bound(problem, settings)
        bounded.append((bound, settings, m, extra, arrays))
    bounded.sort(key=lambda b: b[0])
    found: list = []
    solved = 0
    for bound, settings, m, extra, arrays in bounded:
        if len(found) >= top_k and bound >= found[top_k - 1][0]:
            break
        if time.perf_counter() > deadline:
            break
        solved += 1
        cutoff = found[top_k - 1][0] if len(found) >= top_k else math.inf
        best = split_stages(problem, settings, m, arrays, cutoff)
        if best is not None:
            found.append((best[0], settings, best[1], m, extra))
            found.sort(key=lambda f: f[0])
    return found, solved, len(bounded)


def _plan_from(
    problem: HeteroProblem, settings: list[StageSetting], bounds, microbatches: int
) -> StagePlanSpec:
    stages = []
    for st, a, b in zip(settings, bounds, bounds[1:]):
        devices = [{"pool": p, "gpus": c} for p, _, c in st.slices]
        stage = {"devices": devices, "blocks": [a, b], "tp": st.tp, "recompute": st.recompute}
        if st.recompute_ops:
            stage["recompute_ops"] = list(st.recompute_ops)
        stages.append(stage)
    return stage_plan_from_dict(
        {
            "global_batch": problem.global_batch,
            "seq_length": problem.seq_length,
            "microbatches": microbatches,
            "dtype": problem.dtype,
            "attention": problem.attention,
            "schedule": problem.schedule,
            "zero": problem.zero,
            "overlap_dp_grad_reduce": problem.overlap_dp_grad_reduce,
            "engine": problem.engine,
            "overlap_param_gather": problem.overlap_param_gather,
            "overlap_tp_comm": problem.overlap_tp_comm,
            "sequence_parallel": problem.sequence_parallel,
            **problem.runtime.model_dump(),
            "stages": stages,
        }
    )


def _label(settings: list[StageSetting], bounds, order) -> str:
    layers = [b - a for a, b in zip(bounds, bounds[1:])]
    st = settings[0]

    def rc(s: StageSetting) -> str:
        return recompute_label(s.recompute, s.recompute_ops)

    uniform = all(s.tp == st.tp and s.dp == st.dp and rc(s) == rc(st) for s in settings)
    head = (
        f"tp{st.tp} dp{st.dp} pp{len(settings)} mb{st.micro_batch} rc {rc(st)}"
        if uniform
        else "per-stage " + " | ".join(f"{s.tp}x{s.dp} {rc(s)}" for s in settings)
    )
    return f"{head}; pools {'>'.join(order)}; blocks/stage {layers}"


class UniformDegrees(NamedTuple):
    """One candidate of the AMP-style search: the same degrees on every stage, the per-GPU micro-batch
    and the micro-batch count."""

    dims: ParallelDims
    micro_batch: int
    microbatches: int


def _degrees(problem: HeteroProblem) -> Iterator[UniformDegrees]:
    """Degrees with tp·dp·pp = all GPUs, tp a power of two inside a node that keeps the tp rules
    (specs.rules.tp_rules), and the micro-batch sizes that split the batch (specs.rules.batch_rule)."""
    cluster, model, batch = problem.cluster, problem.model, problem.global_batch
    gpus = cluster.gpus
    node_min = min(p.gpus_per_node for p in cluster.pools)
    n_blocks = len(model_blocks(model))
    for tp in _powers_of_two(node_min):
        if gpus % tp or tp_rules(model, tp) or (problem.tps and tp not in problem.tps):
            continue
        for pp in range(1, min(gpus // tp, n_blocks) + 1):
            if (gpus // tp) % pp or (problem.pps and pp not in problem.pps):
                continue
            dims = ParallelDims(tp=tp, dp=gpus // tp // pp, pp=pp)
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
    of a per-stage plan's stage (specs.rules.stage_rules): what the searched plan's check will ask."""
    broken = stage_rules(
        problem.model,
        index,
        dims,
        tuple(count for _, _, count in slices),
        problem.global_batch,
        microbatches,
        problem.seq_length,
        problem.common.sequence_parallel,
    )
    return not broken


def search_cluster(
    problem: HeteroProblem,
    top_k: int = 5,
    orders: list[tuple[str, ...]] | None = None,
    time_budget_s: float | None = None,
) -> HeteroResult:
    """AMP-style search (module docstring), stopped at ``time_budget_s`` from its start (the pool
    orders enumerated, bounded and solved so far; issue 37: six pools, 720 orders, ran past 120 s)."""
    t0 = time.perf_counter()
    deadline = math.inf if time_budget_s is None else t0 + time_budget_s
    names = tuple(p.name for p in problem.cluster.pools)
    orders = orders or list(itertools.permutations(names))
    candidates = []
    done = 0
    stated = [stage_fields(mode) for mode in searched_modes(problem)]  # (recompute, recompute_ops)
    for order in orders:
        if time.perf_counter() > deadline:
            break
        done += 1
        gpu_list = _gpu_list(problem.cluster, order)
        for dims, mb, m in _degrees(problem):
            tp, dp, pp, per = dims.tp, dims.dp, dims.pp, dims.stage_gpus
            slices = [_slices(gpu_list[k * per : (k + 1) * per]) for k in range(pp)]
            if not all(_stage_ok(problem, k, dims, slices[k], m) for k in range(pp)):
                continue  # a stage straddles two pools with part of a TP group in each
            for rc, ops in stated:
                settings = [
                    StageSetting(slices[k], tp, dp, mb, rc, ops, k, pp, m) for k in range(pp)
                ]
                if launchable(problem, settings):
                    candidates.append((settings, m, order))
    found, solved, bounded = _best_splits(problem, candidates, top_k, deadline)
    plans = [
        Candidate(t, _plan_from(problem, s, b, m), _label(s, b, o))
        for t, s, b, m, o in found[:top_k]
    ]
    stopped = (
        f"time budget {time_budget_s:g} s reached: {done} of {len(orders)} pool orders enumerated, "
        f"{bounded} of {len(candidates)} candidates bounded, {solved} solved"
        if time.perf_counter() > deadline
        else ""
    )
    elapsed_s = time.perf_counter() - t0
    return HeteroResult(plans, len(candidates), elapsed_s, "amp-dp", solved=solved, stopped=stopped)
