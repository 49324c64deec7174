"""Find the fastest plans that fit: exact with respect to the cost model, and fast.

Fast path (``search``):
1. enumerate the rows of the canonical space (search/space.py); summed op times and collective
   times are computed once per (layer shape, TP span, CP span) with the estimator's own cached
   functions, and turned into per-row block terms by ``step.compose.block_terms`` on arrays;
2. a lower bound per row on the objective — m micro-batches of the row's layer work plus the
   cheapest pipeline transfer; bubble, data-parallel, optimizer and offload terms are >= 0 —
   so rows are visited best bound first;
3. rows are expanded into their grid and evaluated many at once: the same
   ``step.compose.compose_step`` and ``stage_memory_terms`` (via ``stage_peaks``) that ``estimate``
   uses, on numpy arrays;
4. once the next row's bound is worse than the K-th best objective found, every remaining row
   is skipped: none of its candidates can enter the top K (the bound is admissible).
Ranking and ties follow ``search.ranking`` in both this path and ``search.exhaustive.exhaustive_search`` (which
evaluates every candidate one by one through ``estimate``): objective, then peak memory, then the
simpler plan, then canonical order; candidates equal in objective, step time and memory are one
group (one ranked plan with its ``equivalents``), and the top K is K groups.
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from paraplan.cost.flops import model_flops_per_token
from paraplan.io.collector import cyclic_gc_paused
from paraplan.search import ranking
from paraplan.search.grid_index import GridIndex
from paraplan.search.processes import auto_workers
from paraplan.search.result import (
    RankedPlan,
    SearchResult,
    objective_value,
    scan_result,
    trim_pool,
)
from paraplan.search.robust import evaluated_sink_refused, robust_dispatch
from paraplan.search.row_scan import scan_rows
from paraplan.search.scan import Scan
from paraplan.search.space import SearchProblem, plan_of, rows_per_micro_batch
from paraplan.search.table import RowTable

# the result types (search.result) and the scan (search.scan), named here too
__all__ = ["RankedPlan", "SearchResult", "objective_value", "search"]
_Scan = Scan


@robust_dispatch
def search(
    problem: SearchProblem,
    top_k: int = 10,
    collect_all: bool = False,
    progress=None,
    workers: int | None = None,
    feasible_sink=None,
    blocks: bool | None = None,
    evaluated_sink=None,
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
    CPUs, at most AUTO_WORKERS_MAX, on Linux; 1 elsewhere).
    ``evaluated_sink`` is handed, as ``feasible_sink`` is, each batch of the candidates this search evaluates
    (pruning as it does without it) and finds feasible: the top K among them; the result is the same
    with or without it. A block-by-block search with it runs in this process (``workers`` is 1); not
    with ``objective`` robust, ``collect_all`` or ``feasible_sink``."""
    problem.check()
    if evaluated_sink is not None and (collect_all or feasible_sink is not None):
        raise evaluated_sink_refused()
    with cyclic_gc_paused():
        if evaluated_sink is not None:
            workers = 1  # the sink is called in this process
        return _search(
            problem, top_k, collect_all, progress, feasible_sink, blocks, workers, evaluated_sink
        )


def _search(
    problem: SearchProblem,
    top_k: int,
    collect_all: bool,
    progress,
    feasible_sink,
    blocks: bool | None,
    workers: int | None = 1,
    evaluated_sink=None,
) -> SearchResult:
    """``search`` after the objective's dispatch: block by block, or one row table (module doc)."""
    start = time.perf_counter()
    if not (collect_all or feasible_sink is not None) and (
        blocks if blocks is not None else _by_blocks(problem)
    ):
        return _search_blocks(problem, top_k, progress, start, workers, evaluated_sink)
    table = RowTable(
        problem,
        None if progress is None else lambda done, total: progress(done, total, "layer costs"),
    )
    options = GridIndex(problem, table)
    space = int(options.lengths.sum())

    peak_flops = problem.system.accelerator.peak_matrix_flops(problem.dtype)
    flops_per_token = model_flops_per_token(problem.model, problem.seq_length)
    tokens_row = table.columns["global_batch"].astype(float) * problem.seq_length
    scan = Scan(problem, table, top_k, tokens_row, flops_per_token, peak_flops, collect_all)
    scan.evaluated_sink = evaluated_sink
    scan_all = collect_all or feasible_sink is not None
    rows_done = scan_rows(problem, table, options, scan, scan_all, feasible_sink, progress)
    result = scan_result(problem, scan, top_k, space, table.size, rows_done, start)
    everything = scan.everything
    if everything is not None:
        for item in everything:
            item["plan"] = plan_of(
                problem, table.row(item["row"]), options.option(item["row"], item["grid"])
            )
        result.all_feasible = everything
    return result


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
    for degrees in problem.factorizations:
        total += rows_per_micro_batch(problem, *degrees) * len(problem.micro_batches(degrees.dp))
        if total > BLOCK_ROWS:
            return True
    return False


def _block_search_code() -> None:
    """Bind the block search's names in this module: search.bounds (~90 kB of source, and multiprocessing) loads when
    a search first goes block by block, not with every search (issue 31). A name a test has replaced is kept."""
    from paraplan.search.bounds import affine_floors, block_processes, blocks, step_floors

    for module, names in (
        (affine_floors, ("affine_floors",)),
        (
            block_processes,
            ("PartOutcome", "processes_available", "run_parts", "split_by_costing_class"),
        ),
        (blocks, ("EXACT", "costing_class", "first_bound_levels", "layer_floors", "refined_bound")),
        (blocks, ("refinements",)),
        (step_floors, ("block_step_floor", "block_step_floors")),
    ):
        for name in names:
            globals().setdefault(name, getattr(module, name))
    globals().setdefault("space_blocks", blocks.blocks)


def __getattr__(name: str):
    """The block search's names (``_block_search_code``), bound when first asked for."""
    if not name.startswith("__"):  # not the import system's questions (``__path__``: a package?)
        _block_search_code()
        if name in globals():
            return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _search_blocks(
    problem: SearchProblem,
    top_k: int,
    progress,
    start: float,
    workers: int | None = 1,
    evaluated_sink=None,
) -> SearchResult:
    """``search`` block by block (search.blocks; ``_branch_and_bound``). With ``workers`` > 1 and at least PARALLEL_KEYS
    (tp, cp, micro-batch) keys, the blocks are split over that many processes by costing class, each pruning against
    the least threshold any of them has reached (search.block_processes), and their top Ks merged: the same plans."""
    _block_search_code()
    parts = space_blocks(problem)
    if progress is not None:
        progress(0, len(parts), "block bounds")
    keys = {(b.tp, b.cp, b.micro_batch) for b in parts}
    workers = auto_workers() if workers is None else workers
    if workers > 1 and len(keys) >= PARALLEL_KEYS and processes_available():
        subsets = split_by_costing_class(parts, workers, lambda b: costing_class(problem, b))
        # every block's first bound, once, before the fork: the workers inherit them (and the costings under them)
        bounds, mine = _FirstBounds(problem, parts, progress), subsets[0]
        outcomes = run_parts(
            lambda part, shared: _branch_and_bound(
                problem,
                top_k,
                part,
                progress if part is mine else None,
                shared,
                bounds,
            ),
            subsets,
            top_k,
            len(parts),
        )
    else:
        outcomes = [_branch_and_bound(problem, top_k, parts, progress, sink=evaluated_sink)]
    scan = Scan(problem, None, top_k, None, 0.0, 0.0, False)
    scan.resolved = {}
    for outcome in outcomes:
        scan.pool += outcome.pool
        scan.faster += outcome.faster
        scan.resolved.update(outcome.resolved)
        scan.evaluated += outcome.evaluated
        scan.feasible += outcome.feasible
        if outcome.nearest is not None and (
            scan.nearest is None or outcome.nearest.nearer(scan.nearest)
        ):
            scan.nearest = outcome.nearest
    rows = parts[-1].offset + parts[-1].rows if parts else 0
    return scan_result(
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
    every: _FirstBounds | None = None,
    sink=None,
) -> PartOutcome:
    """The blocks ``parts`` visited best bound first, each one's row table built only when its bound can still enter
    the top K, its rows scanned with the running threshold (the least of this scan's and, in processes, of
    ``shared``: search.block_processes.PartView); row numbers are the canonical ones (block offset + row of
    the block), so ties break as in one table. The top K is exact; the faster plans that do not fit come from the
    blocks visited only: a block skipped on a bound that memory raised (search.blocks.refined_bound) may hold plans
    that do not fit and are faster than the winner. In processes, a block to search is handed over (by its offset)
    when another process has finished its own blocks, and this process, once finished, searches the blocks the others
    hand over (``every``: the first bounds of all the search's blocks, _FirstBounds, worked out before the processes
    forked; PartView.help_until_done) while its bound can still enter the top K:
    the pools are merged, so the top K is the same whoever searches a block; the blocks start from those bounds
    (without ``every``, from their own, worked out here). ``sink``: search's ``evaluated_sink``."""
    _block_search_code()
    queue = _BlockQueue(problem, parts, every or _FirstBounds(problem, parts, progress))
    scan = Scan(problem, None, top_k, None, queue.flops_per_token, queue.peak_flops, False)
    scan.shared, scan.evaluated_sink = shared, sink
    rows_done = done = 0
    while queue.heap:
        bound, i, level = heapq.heappop(queue.heap)
        scan.refresh()  # in processes, the least threshold any of them has reached
        if not ranking.within(bound, scan.threshold):
            break
        if level < len(queue.steps):
            queue.refine(bound, i, level)
            continue
        b = parts[i]
        if shared is not None and shared.hand_over(
            b.offset, bound
        ):  # another process has finished its own
            continue
        rows_done += _search_block(problem, b, scan)
        done += 1
        if progress is not None:
            progress(done, len(parts), "blocks")
    if shared is not None:
        rows_done += _search_handed_over(problem, scan, shared, every.parts if every else parts)
    return _part_outcome(scan, top_k, rows_done)


class _FirstBounds:
    """The first bound of every block of ``parts`` (search.run's block queue): the queue's levels (``steps``), each
    (tp, cp, micro-batch)'s first layer floors (``floors``), and per block, by its offset, its block_step_floor at them
    (``own_s``) and its objective bound (``bounds``). A split search works them out once, before its processes fork
    (the workers inherit them): a block's are then one process's bits (the affine floors of
    search.bounds.affine_floors are fitted over the keys of the blocks given)."""

    def __init__(self, problem: SearchProblem, parts: list, progress=None):
        # an MoE model's first bounds cost no expert option (search.blocks.first_bound_levels: cheap layer floors);
        # the exact layer floors of a (tp, cp, micro-batch) are computed when one of its blocks reaches the front
        self.steps = first_bound_levels(problem, parts) + refinements(problem)
        self.cheap = self.steps[0] == EXACT
        first: dict[tuple, object] = {}
        # below the cheap floors and costing no op graph per key (search.bounds.affine_floors): the same last bounds
        keys = list(dict.fromkeys((b.tp, b.cp, b.micro_batch) for b in parts))
        affine = (affine_floors(problem, keys) if self.cheap else None) or {}
        for i, b in enumerate(parts):
            key = (b.tp, b.cp, b.micro_batch)
            if key not in first:
                first[key] = affine.get(key) or layer_floors(problem, *key, cheap=self.cheap)
            if progress is not None and (i % 256 == 0 or i == len(parts) - 1):
                progress(i + 1, len(parts), "block bounds")
        tokens = np.array([float(b.global_batch * problem.seq_length) for b in parts])
        own_s = block_step_floors(problem, parts, lambda b: first[(b.tp, b.cp, b.micro_batch)])
        peak_flops = problem.system.accelerator.peak_matrix_flops(problem.dtype)
        flops = model_flops_per_token(problem.model, problem.seq_length) * tokens
        bounds = objective_value(problem, own_s, tokens, flops, peak_flops)
        self.parts, self.floors = parts, first
        offsets = [b.offset for b in parts]
        self.own_s = dict(zip(offsets, own_s.tolist()))
        self.bounds = dict(zip(offsets, bounds.tolist()))


class _BlockQueue:
    """The blocks in bound order (a heap of (bound, block, level)): each block's first bound (_FirstBounds), raised a
    level at a time when it reaches the front (``refine``: the exact layer floors after cheap ones, then
    search.blocks.refined_bound: the recomputation memory forces, then the exposed TP / CP communication and
    recomputation of the expert-free block kinds, then of every kind), and the block goes back in line; a block whose
    last refinement reaches the front is searched."""

    def __init__(self, problem: SearchProblem, parts: list, first: _FirstBounds):
        self.problem, self.parts = problem, parts
        self.peak_flops = problem.system.accelerator.peak_matrix_flops(problem.dtype)
        self.flops_per_token = model_flops_per_token(problem.model, problem.seq_length)
        self.steps = first.steps
        self.floors: dict[tuple, object] = {} if first.cheap else first.floors
        # each block's block_step_floor at floors[key], what refined_bound starts from (the first bounds' when they
        # are the exact floors: block_step_floors gives the same bits)
        self.own_s: dict[int, float] = (
            {} if first.cheap else {i: first.own_s[b.offset] for i, b in enumerate(parts)}
        )
        self.work: dict[tuple, object] = {}
        self.heap = [(first.bounds[b.offset], i, 0) for i, b in enumerate(parts)]
        heapq.heapify(self.heap)

    def _objective(self, step_s, tokens):
        return objective_value(
            self.problem, step_s, tokens, self.flops_per_token * tokens, self.peak_flops
        )

    def refine(self, bound: float, i: int, level: int) -> None:
        """Raise block i's bound to its next level and put it back in line."""
        problem, b = self.problem, self.parts[i]
        key = (b.tp, b.cp, b.micro_batch)
        if self.steps[level] == EXACT:
            if key not in self.floors:
                self.floors[key] = layer_floors(problem, *key)
            step = self.own_s[i] = block_step_floor(problem, b, self.floors[key])
        else:
            step = refined_bound(
                problem, b, self.floors[key], self.work, self.steps[level], self.own_s[i]
            )
        better = self._objective(step, float(b.global_batch * problem.seq_length))
        heapq.heappush(self.heap, (max(bound, float(better)), i, level + 1))


def _search_handed_over(problem: SearchProblem, scan: Scan, shared, every: list) -> int:
    """In processes, once this one's blocks are done: search the blocks the others hand over (PartView.help_until_done)
    while their bound can still enter the top K; the rows scanned."""
    by_offset = {b.offset: b for b in every}
    rows_done = 0

    def search_handed(offset: int, bound: float) -> None:
        nonlocal rows_done
        scan.refresh()
        if ranking.within(bound, scan.threshold):
            rows_done += _search_block(problem, by_offset[offset], scan)

    shared.help_until_done(search_handed)
    return rows_done


def _part_outcome(scan: Scan, top_k: int, rows_done: int) -> PartOutcome:
    """A finished scan's top K, misses and counters, with the rows and options they name resolved."""
    pool = trim_pool(scan.pool, top_k)[0] if scan.pool else []
    named = [(item.r, item.g) for item in pool + scan.faster] + (
        [(scan.nearest.r, scan.nearest.g)] if scan.nearest is not None else []
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


def _search_block(problem: SearchProblem, block, scan: Scan) -> int:
    """Scan the block's row table into ``scan`` (its rows numbered canonically); in processes, offer this process's best
    groups with the others' (PartView.offer_groups: their K-th together is at most this scan's own threshold). The
    rows scanned."""
    table = RowTable(block.problem(problem))
    scan.use(table, block.offset)
    rows = scan_rows(problem, table, GridIndex(problem, table), scan, False, None, None)
    if scan.shared is not None and scan.pool:
        scan.shared.offer_groups(*zip(*((p.objective, p.step, p.peak) for p in scan.pool)))
    return rows
