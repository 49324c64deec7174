"""Scan one row table best bound first (steps 2-4 of search.run's module doc): the rows in order of their
objective's bound (search.bound_order), evaluated a chunk at a time while their bound can still enter the
top K, each chunk's groups (candidates that share a pipeline bound) in batches of increasing bound. The one
scan of a whole-space row table (search.run.search) and of each block's table (search.run's block by block
search)."""

from __future__ import annotations

import numpy as np

from paraplan.search import ranking
from paraplan.search.bound_order import BoundOrder
from paraplan.search.scan import Ahead, Scan
from paraplan.step.compose import pipeline_bound_s

CHUNK_CANDIDATES = 150_000  # candidates evaluated per chunk of rows
# a chunk that starts with no top K evaluates its groups in slabs of at least this many candidates (scan.Ahead): two
# batches' worth
FIRST_SLAB_CANDIDATES = CHUNK_CANDIDATES // 4


def scan_rows(problem, table, options, scan, scan_all, feasible_sink, progress) -> int:
    """Visit the table's rows best bound first (module doc, steps 2-4; search.bound_order: a row's bound worked
    out only when its floor says it may come next) with the scan's running threshold; the rows visited."""
    lengths = options.lengths
    order = _row_order(table, options, scan)
    if scan_all:
        order.cost_all()
    rows_done = 0
    while (head := order.peek()) is not None:
        scan.refresh()
        if not scan_all and not ranking.within(head[1], scan.threshold):
            break
        chunk = []
        count = 0
        while count < CHUNK_CANDIDATES and (head := order.peek()) is not None:
            r, bound = head
            if not scan_all and not ranking.within(bound, scan.threshold):
                break
            if lengths[r]:
                chunk.append(r)
                count += lengths[r]
            order.pop()
        rows_done += len(chunk)
        if progress is not None:
            progress(order.popped, table.size, "rows")
        if not chunk:
            continue
        chunk = np.array(chunk)
        group_row, group_start = options.groups(chunk)
        if scan_all:
            scan.evaluate(options, group_row, group_start, feasible_sink)
            continue
        # pipeline bound per (row, schedule option): the candidates that differ only in ZeRO, DP
        # overlap and offload share it (step.compose.pipeline_bound_s: the lesser of a ZeRO-0
        # candidate's gradient terms and the others'); only groups whose bound can still enter the top K
        # are evaluated
        reps = table.inputs(group_row, options.values(group_row, group_start))
        group_bound = scan.objective(pipeline_bound_s(reps), group_row)
        by_bound = np.lexsort((np.arange(len(group_bound)), group_bound))
        # no top K yet: most of the chunk's groups fall out after its first batches (Ahead's slabs)
        lazy = not np.isfinite(scan.threshold)
        ahead = Ahead(
            table,
            options,
            group_row,
            group_start,
            ranking.within(group_bound, scan.threshold),
            by_bound if lazy else None,
            FIRST_SLAB_CANDIDATES,
            # a group's least step (its tail included) prunes it before the scan (what the sink is handed: the
            # candidates evaluated)
            scan.may_enter,
        )
        for batch in _bounded_batches(group_bound, options.group_size[group_row], scan, by_bound):
            batch = ahead.priced(batch)
            scan.evaluate(
                options, group_row[batch], group_start[batch], scan.evaluated_sink, ahead.of(batch)
            )
    return rows_done


def _row_order(table, options, scan) -> BoundOrder:
    """The table's rows in order of their objective's bound (RowTable.lower_bounds), from floors of it
    (RowTable.order_floors): the objective is non-decreasing in the step time."""

    objective = scan.objective  # the one rule (Scan.objective)
    every = np.arange(table.size)
    floors = table.lower_bounds(
        options.v_max,
        options.split_backward,
        every,
        table.order_floors(),
        options.dualpipe,
        options.dualpipe_only,
    )
    return BoundOrder(
        objective(floors, every),
        lambda rows: objective(
            table.lower_bounds(
                options.v_max,
                options.split_backward,
                rows,
                None,
                options.dualpipe,
                options.dualpipe_only,
            ),
            rows,
        ),
    )


def _bounded_batches(bound: np.ndarray, sizes: np.ndarray, scan: Scan, order: np.ndarray):
    """Groups in increasing bound order (``order``: by bound, then group), in batches of about
    CHUNK_CANDIDATES // 8 candidates, while their bound can still enter the top K (``scan.threshold`` tightens
    between batches)."""
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
