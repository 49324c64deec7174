"""Searches over plans the uniform search cannot express (issue 10).

``search_cluster`` (AMP-style, ``paraplan search --cluster FILE``): over device placements (the order
in which the pools take the pipeline's ranks), tp/dp/pp degrees and micro-batch sizes, with ranks
ordered (pp, dp, tp) outermost first as AMP does (Li et al. 2022, arXiv:2210.07297, §3.1); for each
candidate the layer split is the exact optimum of the pipeline objective found by
search.balance.balance_split over the stage-cost matrices of estimate_stages.range_matrices (every
range of blocks on every stage at once). Ranked by predicted step time; each reported plan is
re-estimated by estimate_stages.estimate_stage_plan (same rules, a test checks they agree).

``search_non_uniform`` (Aceso-style, ``paraplan search --non-uniform``): per-stage GPU counts, tp and
recompute on one GPU type. Exact by enumeration when the space of per-stage settings is small (each
combination's layer split again by the DP); otherwise iterative bottleneck alleviation
(search.alleviate) from the best plan of ``search_cluster``, under a time budget, with its trajectory.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from paraplan.step.per_stage import (
    Common,
    StageSetting,
    estimate_stage_plan,
    range_matrices,
    stage_arrays,
    tied_embedding_sync_s,
)
from paraplan.step.blocks import model_blocks
from paraplan.step.stage_blocks import recomputable_modules
from paraplan.search.staged.alleviate import Score, StageConfig, alleviate, recompute_label
from paraplan.search.staged.balance import balance_split
from paraplan.specs.cluster import ClusterSpec
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.stage_plan import StagePlanSpec, stage_plan_from_dict


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

    @property
    def common(self) -> Common:
        return Common(
            self.seq_length,
            self.dtype,
            self.attention,
            False,
            self.zero,
            self.schedule,
            self.overlap_dp_grad_reduce,
            self.engine,
        )


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

    def to_dict(self) -> dict:
        from paraplan.specs.stage_plan import stage_plan_to_dict

        return {
            "mode": self.mode,
            "evaluated": self.evaluated,
            "solved": self.solved,
            "elapsed_s": self.elapsed_s,
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


def _stage_matrices(problem: HeteroProblem, settings: list[StageSetting], arrays=None):
    """(times, tails) of every block range on every stage; ``inf`` where a range is not allowed (empty,
    first stage not starting at block 0, last stage not ending with the output block, out of memory)."""
    n = len(model_blocks(problem.model))
    stages = len(settings)
    arrays = arrays or _lower_bound(problem, settings)[1]
    times = np.full((stages, n + 1, n + 1), np.inf)
    tails = np.full((stages, n + 1, n + 1), np.inf)
    upper = np.triu(np.ones((n + 1, n + 1), dtype=bool), k=1)  # non-empty ranges a < b
    for i, arr in enumerate(arrays):
        m = range_matrices(arr, i)
        ok = upper & (m["peak"] <= arr.capacity)
        if i == 0:
            ok[1:, :] = False  # the first stage starts at block 0
        if i == stages - 1:
            ok[:, :n] = False  # the last stage ends with the output block
        times[i] = np.where(ok, m["work"], np.inf)
        tails[i] = np.where(ok, m["tail"], np.inf)
    return times, tails


def split_stages(
    problem: HeteroProblem, settings: list[StageSetting], microbatches: int, matrices=None
) -> tuple[float, tuple[int, ...]] | None:
    """(step time, block boundaries) of the best split of the model over these stage settings, or None."""
    n = len(model_blocks(problem.model))
    if len(settings) > n:
        return None
    times, tails = matrices or _stage_matrices(problem, settings)
    split = balance_split(times, microbatches, tails)
    if split is None:
        return None
    tied = tied_embedding_sync_s(
        problem.model, problem.cluster, problem.common, settings[0], settings[-1]
    )
    return split.objective + tied, split.bounds


def _best_splits(problem: HeteroProblem, candidates, top_k: int):
    """Branch and bound over candidate stage lists: solve the split DP in increasing order of the lower
    bound and stop once the bound reaches the k-th best time found (exact: no skipped candidate can enter
    the top k). ``candidates``: (settings, microbatches, extra) tuples. Returns (found, solved)."""
    n = len(model_blocks(problem.model))
    bounded = []
    for settings, m, extra in candidates:
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
        solved += 1
        best = split_stages(problem, settings, m, _stage_matrices(problem, settings, arrays))
        if best is not None:
            found.append((best[0], settings, best[1], m, extra))
            found.sort(key=lambda f: f[0])
    return found, solved


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


def _degrees(problem: HeteroProblem):
    """(tp, dp, pp, per-GPU micro-batch, microbatches) with tp·dp·pp = all GPUs and tp inside a node."""
    cluster = problem.cluster
    gpus = cluster.gpus
    node_min = min(p.gpus_per_node for p in cluster.pools)
    n_blocks = len(model_blocks(problem.model))
    for tp in _powers_of_two(node_min):
        if (
            problem.model.heads % tp
            or problem.model.ffn_hidden % tp
            or gpus % tp
            or (problem.tps and tp not in problem.tps)
        ):
            continue
        for pp in range(1, min(gpus // tp, n_blocks) + 1):
            if (gpus // tp) % pp or (problem.pps and pp not in problem.pps):
                continue
            dp = gpus // tp // pp
            if problem.global_batch % dp:
                continue
            sizes = problem.micro_batches or _powers_of_two(problem.global_batch // dp)
            for mb in sizes:
                if (problem.global_batch // dp) % mb == 0:
                    yield tp, dp, pp, mb, problem.global_batch // (dp * mb)


def search_cluster(
    problem: HeteroProblem, top_k: int = 5, orders: list[tuple[str, ...]] | None = None
) -> HeteroResult:
    """AMP-style search (module docstring)."""
    t0 = time.perf_counter()
    names = tuple(p.name for p in problem.cluster.pools)
    orders = orders or list(itertools.permutations(names))
    candidates = []
    for order in orders:
        gpu_list = _gpu_list(problem.cluster, order)
        for tp, dp, pp, mb, m in _degrees(problem):
            per = tp * dp
            for rc in problem.recompute:
                settings = [
                    StageSetting(
                        _slices(gpu_list[k * per : (k + 1) * per]), tp, dp, mb, rc, (), k, pp, m
                    )
                    for k in range(pp)
                ]
                candidates.append((settings, m, order))
    found, solved = _best_splits(problem, candidates, top_k)
    plans = [
        Candidate(t, _plan_from(problem, s, b, m), _label(s, b, o))
        for t, s, b, m, o in found[:top_k]
    ]
    return HeteroResult(plans, len(candidates), time.perf_counter() - t0, "amp-dp", solved=solved)


# ---- non-uniform per-stage plans on one GPU type -------------------------------------------------
def _stage_settings_from(
    problem: HeteroProblem, configs, microbatches: int
) -> list[StageSetting] | None:
    pool = problem.cluster.pools[0]
    offset = 0
    out = []
    for i, c in enumerate(configs):
        if (
            c.gpus % c.tp
            or problem.model.heads % c.tp
            or problem.model.ffn_hidden % c.tp
            or c.tp > pool.gpus_per_node
        ):
            return None
        dp = c.gpus // c.tp
        if problem.global_batch % (microbatches * dp):
            return None
        out.append(
            StageSetting(
                ((pool.name, offset, c.gpus),),
                c.tp,
                dp,
                problem.global_batch // (microbatches * dp),
                c.recompute,
                c.recompute_ops,
                i,
                len(configs),
                microbatches,
            )
        )
        offset += c.gpus
    return out if offset == pool.gpu_count else None


def _compositions(total: int, parts: int):
    for cuts in itertools.combinations(range(1, total), parts - 1):
        bounds = (0, *cuts, total)
        yield tuple(b - a for a, b in zip(bounds, bounds[1:]))


def non_uniform_space_size(
    problem: HeteroProblem, max_stages: int, microbatch_counts: list[int]
) -> int:
    gpus = problem.cluster.gpus
    total = 0
    for pp in range(1, max_stages + 1):
        for comp in _compositions(gpus, pp):
            per_stage = [
                len([t for t in _powers_of_two(g) if g % t == 0]) * len(problem.recompute)
                for g in comp
            ]
            total += int(np.prod(per_stage)) * len(microbatch_counts)
    return total


def search_non_uniform(
    problem: HeteroProblem,
    top_k: int = 5,
    max_stages: int = 4,
    exact_limit: int = 3000,
    time_budget_s: float = 5.0,
) -> HeteroResult:
    """Aceso-style search on one GPU type (module docstring): exact enumeration when the space has at
    most ``exact_limit`` per-stage combinations, else bottleneck alleviation from the AMP-style best."""
    if not problem.cluster.is_uniform:
        raise InputError(
            "--non-uniform: plans per stage on one GPU type; give a one-pool cluster (or --system and --gpus)"
        )
    t0 = time.perf_counter()
    gpus = problem.cluster.gpus
    counts = sorted(
        {
            problem.global_batch // k
            for k in _powers_of_two(problem.global_batch)
            if problem.global_batch % k == 0
        }
    )
    n_blocks = len(model_blocks(problem.model))
    max_stages = min(max_stages, gpus, n_blocks)
    if non_uniform_space_size(problem, max_stages, counts) <= exact_limit:
        candidates = []
        for pp in range(1, max_stages + 1):
            for comp in _compositions(gpus, pp):
                options = [
                    [(t, rc) for t in _powers_of_two(g) if g % t == 0 for rc in problem.recompute]
                    for g in comp
                ]
                for choice in itertools.product(*options):
                    configs = [StageConfig(0, g, t, rc) for g, (t, rc) in zip(comp, choice)]
                    for m in counts:
                        settings = _stage_settings_from(problem, configs, m)
                        if settings is not None:
                            candidates.append((settings, m, None))
        found, solved = _best_splits(problem, candidates, top_k)
        names = (problem.cluster.pools[0].name,)
        plans = [
            Candidate(t, _plan_from(problem, s, b, m), _label(s, b, names))
            for t, s, b, m, _ in found[:top_k]
        ]
        return HeteroResult(
            plans, len(candidates), time.perf_counter() - t0, "exact", solved=solved
        )
    start = search_cluster(problem, top_k=1)
    if not start.plans:
        return HeteroResult([], start.evaluated, time.perf_counter() - t0, "alleviation")
    plan0 = start.plans[0].plan
    m = plan0.n_microbatches
    blocks0 = [s.blocks for s in plan0.stages]
    configs0 = tuple(
        StageConfig(b[1] - b[0], s.gpus, s.tp, s.recompute, tuple(s.recompute_ops))
        for s, b in zip(plan0.stages, blocks0)
    )

    def evaluate(configs):
        if any(c.layers < 1 for c in configs) or sum(c.layers for c in configs) != n_blocks:
            return None
        settings = _stage_settings_from(problem, configs, m)
        if settings is None:
            return None
        bounds = np.concatenate([[0], np.cumsum([c.layers for c in configs])]).astype(int)
        plan = _plan_from(problem, settings, tuple(int(b) for b in bounds), m)
        est = estimate_stage_plan(problem.model, problem.cluster, plan)
        return Score(
            est.step_time_s,
            est.stage_work_s,
            tuple(s.peak_bytes - s.capacity_bytes for s in est.stages),
        )

    # per-op recompute choices (Aceso §4.2): each recomputable module alone, and the core attention with each other
    modules = recomputable_modules(
        problem.model, problem.seq_length, problem.attention, problem.dtype
    )
    op_sets = tuple((m,) for m in modules) + tuple(
        ("core_attn", m) for m in modules if m != "core_attn" and "core_attn" in modules
    )
    result = alleviate(configs0, evaluate, time_budget_s=time_budget_s, op_sets=op_sets)
    settings = _stage_settings_from(problem, result.best, m)
    bounds = tuple(
        int(b) for b in np.concatenate([[0], np.cumsum([c.layers for c in result.best])])
    )
    best = Candidate(
        result.best_score.step_time_s,
        _plan_from(problem, settings, bounds, m),
        _label(settings, bounds, (problem.cluster.pools[0].name,)),
    )
    plans = [best] + [
        p for p in start.plans if p.plan != best.plan
    ]  # the start plan once, when nothing beat it
    return HeteroResult(
        plans[:top_k],
        start.evaluated + result.evaluations,
        time.perf_counter() - t0,
        "alleviation",
        result.trajectory,
    )
