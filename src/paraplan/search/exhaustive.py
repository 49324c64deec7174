"""Exhaustive search: every candidate of the canonical space (search.space) through the scalar ``estimate``, one by one
— the reference the fast path (search.run.search) is tested against (tests/search/test_exactness.py), ranked by the
same rules (search.ranking)."""

from __future__ import annotations

import time
from typing import NamedTuple

from paraplan.search.result import PoolItem, SearchResult, objective_value, top_plans, trim_pool
from paraplan.search.robust import robust_dispatch
from paraplan.search.space import SearchProblem, grid, plan_of, rows
from paraplan.step.estimate import estimate


class _Part(NamedTuple):
    """What one part of the rows found: its top K (+ ties) pool, its counters, and with ``collect_all``
    every feasible candidate."""

    pool: list[PoolItem]
    evaluated: int
    feasible: int
    rows: int
    everything: list[dict]


def _exhaustive_part(
    problem: SearchProblem, top_k: int, part: int, parts: int, progress=None, collect_all=False
) -> _Part:
    """Rows r with r % parts == part: every candidate through ``estimate``; the part's top K (+ ties),
    and with ``collect_all`` every feasible candidate."""
    peak_flops = problem.system.accelerator.peak_matrix_flops(problem.dtype)
    pool, evaluated, feasible, n_rows = [], 0, 0, 0
    everything = []
    for r, row in enumerate(rows(problem)):
        n_rows += 1
        if r % parts != part:
            continue
        if progress is not None:
            progress(r)
        for g, option in enumerate(grid(problem, row)):
            plan = plan_of(problem, row, option)
            evaluated += 1
            if problem.refused(plan.zero, plan.overlap_dp_grad_reduce, plan.offload_optimizer):
                continue  # the estimate refuses it (search.grid_axes.GridAxes.refused)
            e = estimate(problem.model, problem.system, plan)
            if not e.fits:
                continue
            feasible += 1
            obj = float(
                objective_value(
                    problem, e.step_time_s, e.tokens_per_step, e.model_flops_per_step, peak_flops
                )
            )
            pool.append(PoolItem(obj, r, g, e.step_time_s, e.peak_stage.peak_bytes, row, option))
            if collect_all:
                everything.append(
                    {
                        "row": r,
                        "grid": g,
                        "step_time_s": e.step_time_s,
                        "objective": obj,
                        "peak_memory_bytes": e.peak_stage.peak_bytes,
                        "plan": plan,
                    }
                )
        if len(pool) > 4 * top_k:
            pool = trim_pool(pool, top_k)[0]
    return _Part(pool, evaluated, feasible, n_rows, everything)


@robust_dispatch
def exhaustive_search(
    problem: SearchProblem,
    top_k: int = 10,
    workers: int | None = 1,
    progress=None,
    collect_all: bool = False,
) -> SearchResult:
    """Every candidate of the canonical space through the scalar ``estimate``, one by one
    (``workers`` processes split the rows; each keeps its own top K, merged exactly; None: one)."""
    problem.check()
    start = time.perf_counter()
    if workers is None or workers <= 1:
        parts = [_exhaustive_part(problem, top_k, 0, 1, progress, collect_all)]
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers) as pool_executor:
            futures = [
                pool_executor.submit(
                    _exhaustive_part, problem, top_k, w, workers, None, collect_all
                )
                for w in range(workers)
            ]
            parts = [f.result() for f in futures]
    pool = [item for part in parts for item in part.pool]
    evaluated = sum(p.evaluated for p in parts)
    feasible = sum(p.feasible for p in parts)
    n_rows = parts[0].rows
    plans = top_plans(problem, pool, top_k)
    return SearchResult(
        plans=plans,
        candidates=evaluated,
        evaluated=evaluated,
        feasible=feasible,
        seconds=time.perf_counter() - start,
        rows=n_rows,
        rows_evaluated=n_rows,
        all_feasible=[item for part in parts for item in part.everything] if collect_all else None,
    )


def exhaustive_size(problem: SearchProblem, samples: int = 32) -> tuple[int, int, float]:
    """(rows, candidates, seconds) an exhaustive search of ``problem`` takes in one process, estimated: every row
    counted, the candidates of ``samples`` rows spread over them scaled to all rows, and the seconds from timing
    ``estimate`` on a few of those candidates (the first calls fill caches, so this errs long). For the warning
    and the ETA of ``paraplan search --exhaustive``."""
    all_rows = list(rows(problem))
    if not all_rows:
        return 0, 0, 0.0
    picked = all_rows[:: max(1, len(all_rows) // samples)][:samples]
    grids = [grid(problem, row) for row in picked]
    candidates = round(sum(len(g) for g in grids) / len(grids) * len(all_rows))
    start, timed = time.perf_counter(), 0
    for row, options in zip(picked[:8], grids[:8]):
        for option in list(options)[:2]:
            estimate(problem.model, problem.system, plan_of(problem, row, option))
            timed += 1
    per_candidate = (time.perf_counter() - start) / max(timed, 1)
    return len(all_rows), candidates, candidates * per_candidate
