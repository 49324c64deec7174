"""Find the fastest plans that fit: exact with respect to the cost model, and fast.

Fast path (``search``):
1. enumerate the rows of the canonical space (search/space.py); summed op times and collective
   times are computed once per (layer shape, TP span, CP span) with the estimator's own cached
   functions, and turned into per-row block terms by ``schedule.step.block_terms`` on arrays;
2. a lower bound per row on the objective — m micro-batches of the row's layer work plus the
   cheapest pipeline transfer; bubble, data-parallel, optimizer and offload terms are >= 0 —
   so rows are visited best bound first;
3. rows are expanded into their grid and evaluated many at once: the same
   ``schedule.step.compose_step`` and ``stage_memory_terms`` (via ``stage_peaks``) that ``estimate``
   uses, on numpy arrays;
4. once the next row's bound is worse than the K-th best objective found, every remaining row
   is skipped: none of its candidates can enter the top K (the bound is admissible).
Ranking and ties follow ``search.ranking`` in both this path and ``search.exhaustive.exhaustive_search`` (which
evaluates every candidate one by one through ``estimate``): objective, then peak memory, then the
simpler plan, then canonical order; candidates equal in objective, step time and memory are one
group (one ranked plan with its ``equivalents``), and the top K is K groups.
"""

from __future__ import annotations

import gc
import heapq
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from paraplan.cost.flops import model_flops_per_token
from paraplan.step.estimate import estimate
from paraplan.specs.plan_label import plan_text
from paraplan.step.result import Estimate
from paraplan.step.compose import pipeline_bound_s
from paraplan.search import ranking
from paraplan.search.bounds.block_processes import (
    PartOutcome,
    auto_workers,
    processes_available,
    run_parts,
    split_by_costing_class,
)
from paraplan.search.bounds.blocks import (
    EXACT,
    costing_class,
    first_bound_levels,
    layer_floors,
    refined_bound,
    refinements,
    rows_per_micro_batch,
)
from paraplan.search.bounds.blocks import blocks as space_blocks
from paraplan.search.bounds.step_floors import block_step_floor, block_step_floors
from paraplan.search.grid_index import GridIndex, evaluate_groups, expand
from paraplan.search.space import SearchProblem, plan_of
from paraplan.search.table import RowTable, feasible_columns
from paraplan.specs.plan import PlanSpec
from paraplan.units import GiB

CHUNK_CANDIDATES = 150_000


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


def _finish(problem, pool, k) -> list[RankedPlan]:
    """The top K groups of the pool's (objective, row, grid, row, option, step, peak) items."""
    candidates = [
        ranking.Candidate(obj, step, peak, plan_of(problem, row, option), (r, g))
        for obj, r, g, row, option, step, peak in pool
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


def _trim(pool: list[tuple], k: int) -> tuple[list[tuple], float]:
    """Pool items (objective, row, grid, step, peak, ...) up to the K-th group's objective, and that objective."""
    threshold = ranking.kth_group_objective(
        [p[0] for p in pool], [p[3] for p in pool], [p[4] for p in pool], k
    )
    return [p for p in pool if ranking.within(p[0], threshold)], threshold


def search(
    problem: SearchProblem,
    top_k: int = 10,
    collect_all: bool = False,
    progress=None,
    workers: int | None = None,
    feasible_sink=None,
    blocks: bool | None = None,
) -> SearchResult:
    """Top-K feasible plans by the objective, exact w.r.t. ``exhaustive_search`` (see module doc).

    ``collect_all`` evaluates the whole space (no bound pruning) and returns every feasible plan;
    ``feasible_sink`` also evaluates the whole space but hands each batch of feasible candidates
    to the callable as columns (``feasible_columns``) instead of keeping them, for large spaces.
    ``progress(done, total, phase)`` reports the two slow phases: "layer costs" (the distinct layer
    costings of the row table) and "rows" (rows visited in bound order); block by block "block
    bounds" and "blocks" (blocks visited in bound order) instead.
    ``blocks`` searches block by block (``_search_blocks``, search.blocks); None: for MoE models, and when the
    space has more than BLOCK_ROWS rows (``_by_blocks``; never with ``collect_all`` or ``feasible_sink``).
    ``workers`` > 1 splits a block-by-block search of at least PARALLEL_KEYS (tp, cp, micro-batch) over that many
    processes (search.block_processes: the same plans); None: search.block_processes.auto_workers() (the usable
    CPUs, at most AUTO_WORKERS_MAX, on Linux; 1 elsewhere)."""
    problem.check()
    if problem.objective == "robust":  # ranked by the band's pessimistic end (search.robust)
        from paraplan.search.robust import robust_search

        return robust_search(
            problem,
            top_k,
            search,
            collect_all=collect_all,
            progress=progress,
            workers=workers,
            feasible_sink=feasible_sink,
        )
    with _cyclic_gc_paused():
        return _search(problem, top_k, collect_all, progress, feasible_sink, blocks, workers)


def _search(
    problem: SearchProblem,
    top_k: int,
    collect_all: bool,
    progress,
    feasible_sink,
    blocks: bool | None,
    workers: int | None = 1,
) -> SearchResult:
    """``search`` after the objective's dispatch: block by block, or one row table (module doc)."""
    start = time.perf_counter()
    if not (collect_all or feasible_sink is not None) and (
        blocks if blocks is not None else _by_blocks(problem)
    ):
        return _search_blocks(problem, top_k, progress, start, workers)
    table = RowTable(
        problem,
        None if progress is None else lambda done, total: progress(done, total, "layer costs"),
    )
    options = GridIndex(problem, table)
    space = int(options.lengths.sum())

    peak_flops = problem.system.accelerator.peak_matrix_flops(problem.dtype)
    flops_per_token = model_flops_per_token(problem.model, problem.seq_length)
    tokens_row = table.columns["global_batch"].astype(float) * problem.seq_length
    scan = _Scan(problem, table, top_k, tokens_row, flops_per_token, peak_flops, collect_all)
    scan_all = collect_all or feasible_sink is not None
    rows_done = _scan_rows(problem, table, options, scan, scan_all, feasible_sink, progress)
    result = _result(problem, scan, top_k, space, table.size, rows_done, start)
    everything = scan.everything
    if everything is not None:
        for item in everything:
            item["plan"] = plan_of(
                problem, table.row(item["row"]), options.option(item["row"], item["grid"])
            )
        result.all_feasible = everything
    return result


def _scan_rows(problem, table, options, scan, scan_all, feasible_sink, progress) -> int:
    """Visit the table's rows best bound first (module doc, steps 2-4) with the scan's running
    threshold; the rows visited."""
    lengths = options.lengths
    bound_obj = objective_value(
        problem,
        table.lower_bounds(options.v_max, options.split_backward),
        scan.tokens_row,
        scan.flops_per_token * scan.tokens_row,
        scan.peak_flops,
    )
    order = np.lexsort((np.arange(table.size), bound_obj))
    rows_done = position = 0
    while position < len(order):
        scan.refresh()
        if not scan_all and not ranking.within(bound_obj[order[position]], scan.threshold):
            break
        chunk = []
        count = 0
        while position < len(order) and count < CHUNK_CANDIDATES:
            r = order[position]
            if not scan_all and not ranking.within(bound_obj[r], scan.threshold):
                break
            if lengths[r]:
                chunk.append(r)
                count += lengths[r]
            position += 1
        rows_done += len(chunk)
        if progress is not None:
            progress(position, len(order), "rows")
        if not chunk:
            continue
        chunk = np.array(chunk)
        group_row, group_start = options.groups(chunk)
        if scan_all:
            scan.evaluate(options, group_row, group_start, feasible_sink)
            continue
        # pipeline bound per (row, schedule option): the candidates that differ only in ZeRO, DP
        # overlap and offload share it; only groups whose bound can still enter the top K are evaluated
        reps = table.inputs(group_row, options.values(group_row, group_start))
        tokens = scan.tokens_row[group_row]
        group_bound = objective_value(
            problem, pipeline_bound_s(reps), tokens, scan.flops_per_token * tokens, scan.peak_flops
        )
        for batch in _bounded_batches(group_bound, options.group_size[group_row], scan):
            scan.evaluate(options, group_row[batch], group_start[batch], None)
    return rows_done


def _result(problem, scan, top_k, space, rows, rows_done, start) -> SearchResult:
    """The SearchResult of a finished scan: the top K groups, the nearest miss when nothing fits, and
    the faster plans that did not fit (rows and options as the scan resolved them)."""
    at = scan.resolve
    pool = [(obj, r, g, *at(r, g), st, pk) for obj, r, g, st, pk in _trim(scan.pool, top_k)[0]]
    plans = _finish(problem, pool, top_k)
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
        over, r, g, peak = scan.nearest
        plan = plan_of(problem, *at(r, g))
        result.nearest_miss = {
            "plan": plan.model_dump(),
            "peak_memory_gib": peak / GiB,
            "capacity_gib": scan.capacity / GiB,
            "overflow_gib": over / GiB,
        }
    if plans:  # faster than the winner but over the memory capacity: the three smallest overflows
        best = plans[0].objective
        faster = sorted(
            (f for f in scan.faster if f[0] < best), key=lambda item: (item[3], item[1], item[2])
        )
        for obj, r, g, peak in faster[:3]:
            if obj < best:
                plan = plan_of(problem, *at(r, g))
                result.faster_infeasible.append(
                    {"plan": plan, "objective": obj, "peak_memory_gib": peak / GiB}
                )
    return result


@contextmanager
def _cyclic_gc_paused():
    """Python's cyclic garbage collector off for a search, back on after: the cost caches hold millions of
    acyclic objects that every full collection walks again (a quarter of the unrestricted DeepSeek-V3 search, 21 s
    against 17 s: docs/performance.md); the search makes no reference cycles worth collecting before it ends."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        # what the search allocated joins the oldest generation without a collection (freeze + unfreeze): a young-
        # generation pass over its millions of cached objects took 0.4 s of the DeepSeek-V3 search; skipped when the
        # caller keeps objects frozen (unfreeze would release them)
        if not gc.get_freeze_count():
            gc.freeze()
            gc.unfreeze()
        if was_enabled:
            gc.enable()


# spaces with more rows than this are searched block by block (search.blocks): one row table of the
# whole space would not fit in memory (DeepSeek-V3 on 2,048 GPUs: 22 M rows)
BLOCK_ROWS = 1_000_000
# with more (tp, cp, micro-batch) than this, ``workers`` > 1 splits a block-by-block search over processes
# (search.block_processes; each key's first bound ~0.5 ms on DeepSeek-V3: below a few hundred, forking costs more)
PARALLEL_KEYS = 256


def _by_blocks(problem: SearchProblem) -> bool:
    """Search block by block: an MoE model (a row costs every expert option's layers; blocks whose bound cannot enter
    the top K are never costed: the same plans 1.4–25× faster, benchmarks/block_search_speed.py), or more than
    BLOCK_ROWS rows (counted until the limit is passed)."""
    if problem.model.is_moe:
        return True
    total = 0
    for tp, pp, cp, dp in problem.factorizations:
        total += rows_per_micro_batch(problem, tp, pp, cp, dp) * len(problem.micro_batches(dp))
        if total > BLOCK_ROWS:
            return True
    return False


def _search_blocks(
    problem: SearchProblem, top_k: int, progress, start: float, workers: int | None = 1
) -> SearchResult:
    """``search`` block by block (search.blocks; ``_branch_and_bound``). With ``workers`` > 1 and at least PARALLEL_KEYS
    (tp, cp, micro-batch) keys, the blocks are split over that many processes by costing class, each pruning against
    the least threshold any of them has reached (search.block_processes), and their top Ks merged: the same plans."""
    parts = space_blocks(problem)
    if progress is not None:
        progress(0, len(parts), "block bounds")
    keys = {(b.tp, b.cp, b.micro_batch) for b in parts}
    workers = auto_workers() if workers is None else workers
    if workers > 1 and len(keys) >= PARALLEL_KEYS and processes_available():
        subsets = split_by_costing_class(parts, workers, lambda b: costing_class(problem, b))
        first = subsets[0]
        outcomes = run_parts(
            lambda part, shared: _branch_and_bound(
                problem, top_k, part, progress if part is first else None, shared, parts
            ),
            subsets,
            top_k,
            len(parts),
        )
    else:
        outcomes = [_branch_and_bound(problem, top_k, parts, progress)]
    scan = _Scan(problem, None, top_k, None, 0.0, 0.0, False)
    scan.resolved = {}
    for outcome in outcomes:
        scan.pool += outcome.pool
        scan.faster += outcome.faster
        scan.resolved.update(outcome.resolved)
        scan.evaluated += outcome.evaluated
        scan.feasible += outcome.feasible
        if outcome.nearest is not None and (
            scan.nearest is None or outcome.nearest[:3] < scan.nearest[:3]
        ):
            scan.nearest = outcome.nearest
    rows = parts[-1].offset + parts[-1].rows if parts else 0
    return _result(
        problem,
        scan,
        top_k,
        sum(b.candidates for b in parts),
        rows,
        sum(o.rows_done for o in outcomes),
        start,
    )


def _branch_and_bound(
    problem: SearchProblem,
    top_k: int,
    parts: list,
    progress=None,
    shared=None,
    every: list | None = None,
) -> PartOutcome:
    """The blocks ``parts`` visited best bound first, each one's row table built only when its bound can still enter
    the top K, its rows scanned with the running threshold (the least of this scan's and, in processes, of
    ``shared``: search.block_processes.PartView); row numbers are the canonical ones (block offset + row of
    the block), so ties break as in one table. The top K is exact; the faster plans that do not fit come from the
    blocks visited only: a block skipped on a bound that memory raised (search.blocks.refined_bound) may hold plans
    that do not fit and are faster than the winner. In processes, a block to search is handed over (by its offset)
    when another process has finished its own blocks, and this process, once finished, searches the blocks the others
    hand over (``every``: all the search's blocks; PartView.help_until_done) while its bound can still enter the top K:
    the pools are merged, so the top K is the same whoever searches a block."""
    peak_flops = problem.system.accelerator.peak_matrix_flops(problem.dtype)
    flops_per_token = model_flops_per_token(problem.model, problem.seq_length)
    # an MoE model's first bounds cost no expert option (search.blocks.first_bound_levels: cheap layer floors); the
    # exact layer floors of a (tp, cp, micro-batch) are computed when one of its blocks reaches the front
    steps = first_bound_levels(problem, parts) + refinements(problem)
    cheap = steps[0] == EXACT
    first: dict[tuple, object] = {}
    for i, b in enumerate(parts):
        key = (b.tp, b.cp, b.micro_batch)
        if key not in first:
            first[key] = layer_floors(problem, *key, cheap=cheap)
        if progress is not None and (i % 256 == 0 or i == len(parts) - 1):
            progress(i + 1, len(parts), "block bounds")
    tokens = np.array([float(b.global_batch * problem.seq_length) for b in parts])
    first_s = block_step_floors(problem, parts, lambda b: first[(b.tp, b.cp, b.micro_batch)])
    bounds = objective_value(problem, first_s, tokens, flops_per_token * tokens, peak_flops)
    scan = _Scan(problem, None, top_k, None, flops_per_token, peak_flops, False)
    scan.shared = shared
    rows_done = done = 0
    # best bound first; a block's bound is refined (the exact layer floors after cheap ones, then
    # search.blocks.refined_bound: the recomputation memory forces, then the exposed TP / CP communication and
    # recomputation of the expert-free block kinds, then of every kind) when it reaches the front, and the block goes
    # back in line; a block whose last refinement reaches the front is searched
    floors: dict[tuple, object] = {} if cheap else first
    # each block's block_step_floor at floors[key], what refined_bound starts from (the first bounds' when they are
    # the exact floors: block_step_floors gives the same bits)
    own_s: dict[int, float] = {} if cheap else dict(enumerate(first_s.tolist()))
    heap = [(float(bounds[i]), i, 0) for i in range(len(parts))]
    heapq.heapify(heap)
    work: dict[tuple, object] = {}
    while heap:
        bound, i, level = heapq.heappop(heap)
        scan.refresh()  # in processes, the least threshold any of them has reached
        if not ranking.within(bound, scan.threshold):
            break
        b = parts[i]
        if level < len(steps):
            key = (b.tp, b.cp, b.micro_batch)
            if steps[level] == EXACT:
                if key not in floors:
                    floors[key] = layer_floors(problem, *key)
                step = own_s[i] = block_step_floor(problem, b, floors[key])
            else:
                step = refined_bound(problem, b, floors[key], work, steps[level], own_s[i])
            tokens = float(b.global_batch * problem.seq_length)
            better = objective_value(problem, step, tokens, flops_per_token * tokens, peak_flops)
            heapq.heappush(heap, (max(bound, float(better)), i, level + 1))
            continue
        if shared is not None and shared.hand_over(
            b.offset, bound
        ):  # another process has finished its own
            continue
        rows_done += _search_block(problem, b, scan)
        done += 1
        if progress is not None:
            progress(done, len(parts), "blocks")
    if shared is not None:
        by_offset = {b.offset: b for b in every or parts}

        def search_handed(offset: int, bound: float) -> None:
            nonlocal rows_done
            scan.refresh()
            if ranking.within(bound, scan.threshold):
                rows_done += _search_block(problem, by_offset[offset], scan)

        shared.help_until_done(search_handed)
    pool = _trim(scan.pool, top_k)[0] if scan.pool else []
    named = [(r, g) for _, r, g, *_ in pool + scan.faster] + (
        [scan.nearest[1:3]] if scan.nearest is not None else []
    )
    return PartOutcome(
        pool,
        scan.faster,
        scan.nearest,
        {key: scan.resolved[key] for key in named} if named else {},
        scan.evaluated,
        scan.feasible,
        rows_done,
    )


def _search_block(problem: SearchProblem, block, scan: "_Scan") -> int:
    """Scan the block's row table into ``scan`` (its rows numbered canonically); in processes, offer this process's best
    groups with the others' (PartView.offer_groups: their K-th together is at most this scan's own threshold). The
    rows scanned."""
    table = RowTable(block.problem(problem))
    scan.use(table, block.offset)
    rows = _scan_rows(problem, table, GridIndex(problem, table), scan, False, None, None)
    if scan.shared is not None and scan.pool:
        scan.shared.offer_groups(*zip(*((obj, step, peak) for obj, _, _, step, peak in scan.pool)))
    return rows


def _bounded_batches(bound: np.ndarray, sizes: np.ndarray, scan: "_Scan"):
    """Groups in increasing bound order, in batches of about CHUNK_CANDIDATES // 8 candidates, while
    their bound can still enter the top K (``scan.threshold`` tightens between batches)."""
    order = np.lexsort((np.arange(len(bound)), bound))
    ends = np.cumsum(sizes[order])
    position = 0
    while position < len(order):
        scan.refresh()
        if not ranking.within(bound[order[position]], scan.threshold):
            return
        stop = max(
            position + 1,
            int(
                np.searchsorted(
                    ends, ends[position] - sizes[order[position]] + CHUNK_CANDIDATES // 8
                )
            ),
        )
        batch = order[position:stop]
        batch = batch[ranking.within(bound[batch], scan.threshold)]
        position = stop
        yield batch


class _Scan:
    """The fast path's running state: the pool of best candidates, the K-th group's objective
    (``threshold``), counters, the nearest memory misses, and every feasible plan on request."""

    def __init__(self, problem, table, top_k, tokens_row, flops_per_token, peak_flops, collect_all):
        self.problem, self.table, self.top_k = problem, table, top_k
        self.tokens_row, self.flops_per_token, self.peak_flops = (
            tokens_row,
            flops_per_token,
            peak_flops,
        )
        self.capacity = problem.system.accelerator.hbm_capacity
        self.host_capacity = problem.system.accelerator.host_memory or np.inf
        self.pool: list[tuple] = []
        self.threshold = np.inf
        self.ceiling = np.inf  # the least threshold other processes of a split search have reached (search.block_processes)
        self.shared = None  # in a split search, this process's search.block_processes.PartView
        self.evaluated = self.feasible = 0
        self.nearest = None  # (overflow_bytes, row, option, peak)
        self.faster: list[tuple] = []
        self.everything: list[dict] | None = [] if collect_all else None
        self.options: GridIndex | None = None
        self.offset = 0  # canonical number of the table's first row (search block by block)
        self.resolved: dict[tuple[int, int], tuple] | None = (
            None  # (row, option) -> (Row, grid tuple), by block
        )

    def refresh(self) -> None:
        """In a split search, lower the ceiling and the threshold to the least threshold any process has published
        since (admissible: search.block_processes), between batches of a scan: a process whose first block scan runs
        beside another's stops evaluating once the other has found a better K-th group."""
        if self.shared is not None:
            self.ceiling = min(self.ceiling, self.shared.get())
            self.threshold = min(self.threshold, self.ceiling)

    def use(self, table: RowTable, offset: int) -> None:
        """Go on with another block's row table, whose rows are canonical rows offset, offset + 1, ...:
        the rows and options the pool and the misses name are resolved as they enter them."""
        self.table, self.offset = table, offset
        self.tokens_row = table.columns["global_batch"].astype(float) * self.problem.seq_length
        if self.resolved is None:
            self.resolved = {}
        # a miss at or above the threshold cannot beat the winner (<= threshold): the result never shows it
        self.faster = [f for f in self.faster if f[0] < self.threshold]

    def resolve(self, r: int, g: int) -> tuple:
        """(Row, grid option) of canonical row r, option g."""
        if self.resolved is not None:
            return self.resolved[(r, g)]
        return self.table.row(r), self.options.option(r, g)

    def _keep(self, items: list[tuple]) -> list[tuple]:
        """Pool / miss items with table rows made canonical (and resolved, block by block)."""
        if self.resolved is None:
            return items
        out = []
        for item in items:
            r, g = item[1], item[2]
            self.resolved[(r + self.offset, g)] = (self.table.row(r), self.options.option(r, g))
            out.append((item[0], r + self.offset, *item[2:]))
        return out

    def evaluate(
        self, options: "GridIndex", rows: np.ndarray, starts: np.ndarray, feasible_sink
    ) -> None:
        """Step time and memory of every candidate of the option groups (rows[i], options from
        starts[i]), in ``_expand`` order; the pool and threshold updated."""
        if not len(rows):
            return
        self.options = options
        index, grid_index = expand(rows, starts, options.group_size[rows])
        step, peak, host = evaluate_groups(self.table, options, rows, starts)
        tokens = self.tokens_row[index]
        obj = objective_value(
            self.problem, step, tokens, self.flops_per_token * tokens, self.peak_flops
        )
        fits = (peak <= self.capacity) & (host <= self.host_capacity)
        self.evaluated += len(index)
        self.feasible += int(fits.sum())
        if self.everything is not None:
            for i in np.flatnonzero(fits):
                self.everything.append(
                    {
                        "row": int(index[i]),
                        "grid": int(grid_index[i]),
                        "step_time_s": float(step[i]),
                        "objective": float(obj[i]),
                        "peak_memory_bytes": float(peak[i]),
                    }
                )
        if feasible_sink is not None and fits.any():
            chosen = np.flatnonzero(fits)
            feasible_sink(
                feasible_columns(
                    self.table,
                    index[chosen],
                    options.values(index[chosen], grid_index[chosen]),
                    step[chosen],
                    obj[chosen],
                    peak[chosen],
                    tokens[chosen],
                )
            )
        keep = np.flatnonzero(fits & ranking.within(obj, self.threshold))
        if (
            keep.size > self.top_k
        ):  # only this batch's K best groups (and ties with the K-th) can enter the top K
            kth = ranking.kth_group_objective(obj[keep], step[keep], peak[keep], self.top_k)
            keep = keep[ranking.within(obj[keep], kth)]
        self.pool += self._keep(
            [
                (float(obj[i]), int(index[i]), int(grid_index[i]), float(step[i]), float(peak[i]))
                for i in keep
            ]
        )
        if (
            len(self.pool) >= self.top_k
        ):  # never above a threshold other processes reached (``ceiling``)
            self.pool, threshold = _trim(self.pool, self.top_k)
            self.threshold = min(threshold, self.ceiling)
            if (
                self.shared is not None
            ):  # published at once: the other processes' scans read it between batches
                self.shared.offer(self.threshold)
        misses = np.flatnonzero(~fits)
        if misses.size:
            over = np.maximum(peak[misses] - self.capacity, host[misses] - self.host_capacity)
            j = misses[np.argmin(over)]
            if self.nearest is None or over.min() < self.nearest[0]:
                nearest = (float(over.min()), int(index[j]), int(grid_index[j]), float(peak[j]))
                self.nearest = self._keep([nearest])[0]
            # plans that would beat the current K-th best but do not fit: keep the nearest misses
            quick = misses[obj[misses] < self.threshold]
            near = quick[np.argsort(peak[quick], kind="stable")[:20]]
            self.faster += self._keep(
                [(float(obj[i]), int(index[i]), int(grid_index[i]), float(peak[i])) for i in near]
            )
