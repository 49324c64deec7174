"""Aceso-style search: start from a plan and repeatedly relieve its bottleneck (Liu et al. 2024,
"Aceso: Efficient Parallel DNN Training through Iterative Bottleneck Alleviation", EuroSys, §4).

Written against an abstract evaluator so that it can run on any cost model: ``evaluate(stages)``
returns a :class:`Score` (step time, per-stage times, per-stage memory overflow) or None when the
stage list is not a valid plan. A stage is a :class:`StageConfig` (layers, degrees, recompute): its
GPUs are its degrees' tp·cp·dp, as a per-stage plan's stage (specs.stage_plan.StageSpec.dims).

Bottleneck: the stage that does not fit (largest memory overflow) if any — the memory bottleneck —
else the stage with the largest time. Primitives that relieve it (Aceso §4.2 lists the same kinds):
- move layers: k ∈ {1, 2, 4, ...} layers from the bottleneck to a neighbour;
- change tp / dp: tp ×2 or ÷2 on the bottleneck's GPUs (dp follows);
- change the GPU count: take 1, 2, 4, ... GPUs from another stage and give them to the bottleneck;
- switch recompute of the bottleneck stage (``modes``: specs.recompute modes, each stated per stage by
  stage_fields; the per-stage search passes the uniform search's, search.launch.searched_modes), or per op: re-run only the ops
  of some modules (``op_sets``, e.g. the MLP, the core attention, the norms; Aceso §4.2's fine-grained
  recomputation at the granularity the memory model has, graph.ops.RECOMPUTE_MODULE_OPS).
Each iteration evaluates every primitive on the bottleneck and takes the best result; when none
improves, up to ``max_hops`` non-improving moves may be taken in a row (Aceso's multi-hop, which lets
the search leave a local optimum); the best plan seen is kept. Stops on the time budget, the
iteration cap, or when no move is left. The trajectory (move, step time, fits) is reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from paraplan.specs.parallel import ParallelDims
from paraplan.specs.recompute import (  # noqa: F401 (recompute_label re-exported for the searches)
    COMMON_MODES,
    recompute_label,
    stage_fields,
    stage_mode,
)
from paraplan.specs.rules import stage_degree_rule


@dataclass(frozen=True)
class StageConfig:
    """One stage: its layers, its degrees (tp·cp·dp GPUs, pp 1: the plan's depth is the stage count;
    one cp on every stage, specs.rules.stage_cp_rule) and its recompute."""

    layers: int
    dims: ParallelDims
    recompute: str = "none"
    recompute_ops: tuple[str, ...] = ()  # per-op recompute (modules re-run); with recompute "none"

    @classmethod
    def of(
        cls,
        layers: int,
        gpus: int,
        tp: int = 1,
        recompute: str = "none",
        recompute_ops: tuple[str, ...] = (),
        cp: int = 1,
    ) -> StageConfig:
        """A stage of ``gpus`` GPUs at ``tp`` and ``cp`` (dp = gpus / (tp·cp)); ValueError unless tp·cp
        divides them."""
        if rule := stage_degree_rule(gpus, tp, 0, cp):
            raise ValueError(rule)
        dims = ParallelDims(tp=tp, cp=cp, dp=gpus // (tp * cp))
        return cls(layers, dims, recompute, tuple(recompute_ops))

    @property
    def gpus(self) -> int:
        return self.dims.stage_gpus

    @property
    def tp(self) -> int:
        return self.dims.tp

    def regrouped(self, gpus: int, tp: int) -> StageConfig | None:
        """This stage on ``gpus`` GPUs at ``tp``, its cp kept and dp following; None when tp·cp does not
        divide the GPUs (specs.rules.stage_degree_rule)."""
        cp = self.dims.cp
        if stage_degree_rule(gpus, tp, 0, cp):
            return None
        return replace(self, dims=replace(self.dims, tp=tp, dp=gpus // (tp * cp)))


@dataclass(frozen=True)
class Score:
    """One evaluated plan: step time, per-stage time and memory overflow (bytes over capacity, 0 = fits)."""

    step_time_s: float
    stage_times_s: tuple[float, ...]
    overflow_bytes: tuple[float, ...]

    @property
    def fits(self) -> bool:
        return all(o <= 0 for o in self.overflow_bytes)

    def key(self) -> tuple[float, float]:
        """Order: plans that fit first (by time), then by total overflow."""
        return (
            (0.0, self.step_time_s)
            if self.fits
            else (1.0, sum(max(0.0, o) for o in self.overflow_bytes))
        )


@dataclass(frozen=True)
class Step:
    iteration: int
    move: str
    step_time_s: float
    fits: bool
    improved: bool


@dataclass
class AlleviationResult:
    best: tuple[StageConfig, ...]
    best_score: Score
    trajectory: list[Step] = field(default_factory=list)
    evaluations: int = 0
    elapsed_s: float = 0.0


Evaluator = Callable[[tuple[StageConfig, ...]], "Score | None"]


def bottleneck(score: Score) -> int:
    """Index of the stage to relieve: the largest memory overflow if any stage does not fit, else the slowest."""
    if not score.fits:
        return max(range(len(score.overflow_bytes)), key=lambda i: score.overflow_bytes[i])
    return max(range(len(score.stage_times_s)), key=lambda i: score.stage_times_s[i])


def _powers(limit: int):
    k = 1
    while k <= limit:
        yield k
        k *= 2


def recompute_choices(
    modes: tuple[str, ...] = COMMON_MODES, op_sets: tuple[tuple[str, ...], ...] = ()
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The (recompute, recompute_ops) settings a stage may switch to: each of ``modes`` as a stage states
    it (specs.recompute.stage_fields), then each per-op list of ``op_sets`` (modules re-run, recompute
    none)."""
    return tuple(stage_fields(m) for m in modes) + tuple(("none", tuple(ops)) for ops in op_sets)


def moves(
    stages: tuple[StageConfig, ...],
    i: int,
    recompute: tuple[tuple[str, tuple[str, ...]], ...] = recompute_choices(),
):
    """(description, new stages) of every primitive applied to stage i; ``recompute``: the recompute
    settings the stage may switch to (recompute_choices)."""
    s = stages[i]
    n = len(stages)
    for j in (i - 1, i + 1):
        if 0 <= j < n:
            for k in _powers(s.layers):
                new = list(stages)
                new[i] = replace(s, layers=s.layers - k)
                new[j] = replace(stages[j], layers=stages[j].layers + k)
                yield f"move {k} layer(s) stage {i} -> {j}", tuple(new)
    for tp in (s.tp * 2, s.tp // 2):
        if tp >= 1 and (regrouped := s.regrouped(s.gpus, tp)) is not None:
            yield (
                f"stage {i} tp {s.tp} -> {tp}",
                stages[:i] + (regrouped,) + stages[i + 1 :],
            )
    for j in range(n):
        if j == i:
            continue
        donor = stages[j]
        for give in _powers(donor.gpus - 1):
            kept, grown = (
                donor.regrouped(donor.gpus - give, donor.tp),
                s.regrouped(s.gpus + give, s.tp),
            )
            if kept is not None and grown is not None:  # both stages keep whole TP groups
                new = list(stages)
                new[j], new[i] = kept, grown
                yield f"move {give} GPU(s) stage {j} -> {i}", tuple(new)
    current = recompute_label(s.recompute, s.recompute_ops)
    for rc, ops in recompute:
        if (rc, ops) != (s.recompute, s.recompute_ops):
            yield (
                f"stage {i} recompute {current} -> {recompute_label(rc, ops)}",
                stages[:i] + (replace(s, recompute=rc, recompute_ops=ops),) + stages[i + 1 :],
            )


def alleviate(
    start: tuple[StageConfig, ...],
    evaluate: Evaluator,
    time_budget_s: float = 5.0,
    max_iterations: int = 200,
    max_hops: int = 3,
    recompute: tuple[tuple[str, tuple[str, ...]], ...] = recompute_choices(),
) -> AlleviationResult:
    """Iterative bottleneck alleviation from ``start`` (module docstring); ``recompute``: the recompute
    settings a stage may switch to (recompute_choices)."""
    t0 = time.perf_counter()
    cache: dict[tuple[StageConfig, ...], Score | None] = {}

    def score_of(stages):
        if stages not in cache:
            cache[stages] = evaluate(stages)
        return cache[stages]

    current = tuple(start)
    current_score = score_of(current)
    if current_score is None:
        raise ValueError("the starting plan is not valid")
    result = AlleviationResult(current, current_score)
    result.trajectory.append(Step(0, "start", current_score.step_time_s, current_score.fits, True))
    visited = {current}
    hops = 0
    for it in range(1, max_iterations + 1):
        if time.perf_counter() - t0 > time_budget_s:
            break
        i = bottleneck(current_score)
        options = []
        for desc, cand in moves(current, i, recompute):
            if time.perf_counter() - t0 > time_budget_s:
                break  # the budget, checked per move: one iteration evaluates many
            if cand in visited:
                continue
            sc = score_of(cand)
            if sc is not None:
                options.append((sc.key(), desc, cand, sc))
        if not options:
            break
        options.sort(key=lambda o: o[0])
        key, desc, cand, sc = options[0]
        improved = key < result.best_score.key()
        if key < current_score.key():
            hops = 0
        else:
            hops += 1
            if hops > max_hops:
                break
        current, current_score = cand, sc
        visited.add(cand)
        if improved:
            result.best, result.best_score = cand, sc
        result.trajectory.append(Step(it, desc, sc.step_time_s, sc.fits, improved))
    result.evaluations = len(cache)
    result.elapsed_s = time.perf_counter() - t0
    return result
