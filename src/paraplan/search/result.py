"""The result of a search: ranked plans, the objective that ranks them, and the top K groups of a scan's pool
(search.ranking: objective, then memory, then the simpler plan, then canonical order)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from paraplan.search import ranking
from paraplan.search.space import SearchProblem, plan_of
from paraplan.specs.plan import PlanSpec
from paraplan.step.estimate import estimate
from paraplan.step.result import Estimate
from paraplan.units import GiB
from paraplan.specs.plan_label import plan_text


class PoolItem(NamedTuple):
    """A feasible candidate a search keeps for its top K, the one layout of the fast path's pool
    (search.scan.Scan.pool) and the exhaustive search's: its objective, canonical row and grid option
    numbers, step time (s) and peak memory (bytes), and the (Row, grid option) they name once
    resolved (None in a scan's pool until scan_result resolves them)."""

    objective: float
    r: int
    g: int
    step: float
    peak: float
    row: Any = None
    option: Any = None

    def resolved(self, row_option: tuple) -> PoolItem:
        """This item naming its (Row, grid option)."""
        return self._replace(row=row_option[0], option=row_option[1])


class FasterMiss(NamedTuple):
    """A candidate over the memory capacity whose objective beats the scan's threshold (Scan.faster):
    its objective, canonical row and option numbers and peak memory (bytes)."""

    objective: float
    r: int
    g: int
    peak: float


class NearestMiss(NamedTuple):
    """The candidate closest to fitting (Scan.nearest): its overflow (bytes), canonical row and option
    numbers and peak memory (bytes); the least (overflow, r, g) is the nearest."""

    overflow: float
    r: int
    g: int
    peak: float

    def nearer(self, other: NearestMiss) -> bool:
        """Nearer to fitting than ``other``: less overflow, then the earlier row and option."""
        return (self.overflow, self.r, self.g) < (other.overflow, other.r, other.g)


@dataclass(frozen=True)
class RankedPlan:
    """One plan of the result, with the estimate that ranked it."""

    rank: int
    plan: PlanSpec
    estimate: Estimate
    objective: float
    key: tuple[int, int]  # (row, grid index) in canonical order
    equivalents: tuple[
        PlanSpec, ...
    ] = ()  # same objective, step time and memory (search.ranking groups)

    def __repr__(self) -> str:

        more = f" (+{len(self.equivalents)} equivalent)" if self.equivalents else ""
        return (
            f"<RankedPlan #{self.rank} {plan_text(self.plan)}{more}: step {self.estimate.step_time_s:.4g} s, "
            f"objective {self.objective:.4g}>"
        )

    def to_dict(self) -> dict:
        e = self.estimate
        return {
            "rank": self.rank,
            "plan": self.plan.model_dump(),
            "equivalent_plans": [p.model_dump() for p in self.equivalents],
            "step_time_s": e.step_time_s,
            "tokens_per_s": e.tokens_per_s,
            "mfu": e.mfu,
            "peak_memory_gib": e.peak_stage.peak_bytes / GiB,
            "objective": self.objective,
            "breakdown": e.to_dict()["breakdown"],
        }


@dataclass
class SearchResult:
    """A search's answer: the ranked plans, the counts of the space searched and what the report shows beside."""

    plans: list[RankedPlan]
    candidates: int  # size of the canonical space
    evaluated: int
    feasible: int  # feasible among the evaluated
    seconds: float
    rows: int
    rows_evaluated: int
    nearest_miss: dict | None = None  # smallest memory overflow when nothing fits
    robust_exact: bool | None = (
        None  # objective robust: the top K is exact w.r.t. the bands (search.robust)
    )
    faster_infeasible: list[dict] = field(default_factory=list)  # better objective, did not fit
    all_feasible: list[dict] | None = None

    def to_dict(self) -> dict:
        return {
            "plans": [p.to_dict() for p in self.plans],
            "candidates": self.candidates,
            "evaluated": self.evaluated,
            "feasible": self.feasible,
            "seconds": self.seconds,
            "rows": self.rows,
            "rows_evaluated": self.rows_evaluated,
            "nearest_miss": self.nearest_miss,
        }


def objective_value(problem: SearchProblem, step_time_s, tokens, model_flops, peak_flops):
    """Smaller is better. time: seconds per token (= step time ranking at a fixed batch); cost:
    dollars per token at the price; mfu: minus the model FLOPs utilisation; robust: seconds per
    token, which search.robust then scales by each returned plan's pessimistic band factor."""
    if problem.objective == "cost":
        price = problem.price_per_gpu_hour if problem.price_per_gpu_hour is not None else 1.0
        return step_time_s / tokens * problem.gpus * price / 3600.0
    if problem.objective == "mfu":
        return -(model_flops / (step_time_s * problem.gpus * peak_flops))
    return step_time_s / tokens


def top_plans(problem, pool: list[PoolItem], k) -> list[RankedPlan]:
    """The top K groups of the pool's resolved items (PoolItem with its row and option)."""
    candidates = [
        ranking.Candidate(
            p.objective, p.step, p.peak, plan_of(problem, p.row, p.option), (p.r, p.g)
        )
        for p in pool
    ]
    out = []
    for rank, group in enumerate(ranking.top_groups(candidates, k), start=1):
        best = group[0]
        out.append(
            RankedPlan(
                rank,
                best.plan,
                estimate(problem.model, problem.system, best.plan),
                best.objective,
                best.key,
                tuple(c.plan for c in group[1:]),
            )
        )
    return out


def trim_pool(pool: list[PoolItem], k: int) -> tuple[list[PoolItem], float]:
    """Pool items up to the K-th group's objective, and that objective."""
    threshold = ranking.kth_group_objective(
        [p.objective for p in pool], [p.step for p in pool], [p.peak for p in pool], k
    )
    return [p for p in pool if ranking.within(p.objective, threshold)], threshold


def scan_result(problem, scan, top_k, space, rows, rows_done, start) -> SearchResult:
    """The SearchResult of a finished scan: the top K groups, the nearest miss when nothing fits, and
    the faster plans that did not fit (rows and options as the scan resolved them)."""
    at = scan.resolve
    pool = [p.resolved(at(p.r, p.g)) for p in trim_pool(scan.pool, top_k)[0]]
    plans = top_plans(problem, pool, top_k)
    result = SearchResult(
        plans=plans,
        candidates=space,
        evaluated=scan.evaluated,
        feasible=scan.feasible,
        seconds=time.perf_counter() - start,
        rows=rows,
        rows_evaluated=rows_done,
    )
    if not plans and scan.nearest is not None:
        nearest = scan.nearest
        plan = plan_of(problem, *at(nearest.r, nearest.g))
        result.nearest_miss = {
            "plan": plan.model_dump(),
            "peak_memory_gib": nearest.peak / GiB,
            "capacity_gib": scan.capacity / GiB,
            "overflow_gib": nearest.overflow / GiB,
        }
    if plans:  # faster than the winner but over the memory capacity: the three smallest overflows
        best = plans[0].objective
        faster = sorted(
            (f for f in scan.faster if f.objective < best), key=lambda f: (f.peak, f.r, f.g)
        )
        for f in faster[:3]:
            if f.objective < best:
                plan = plan_of(problem, *at(f.r, f.g))
                result.faster_infeasible.append(
                    {"plan": plan, "objective": f.objective, "peak_memory_gib": f.peak / GiB}
                )
    return result
