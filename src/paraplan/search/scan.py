"""The fast path's running state (``Scan``): the pool of the best candidates evaluated so far, the K-th group's
objective that prunes the rest, the counters, the nearest memory misses, and every feasible plan on request."""

from __future__ import annotations

import numpy as np

from paraplan.search import ranking
from paraplan.search.grid_index import GridIndex, evaluate_groups, evaluate_kept_groups, expand
from paraplan.search.result import FasterMiss, NearestMiss, PoolItem, objective_value, trim_pool
from paraplan.search.table import RowTable, feasible_columns
from paraplan.specs.rules_offload import host_capacity_bytes


class Scan:
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
        self.host_capacity = host_capacity_bytes(problem.system.accelerator.host_memory)
        self.pool: list[PoolItem] = []
        self.threshold = np.inf
        self.ceiling = np.inf  # the least threshold other processes of a split search have reached (search.block_processes)
        self.shared = None  # in a split search, this process's search.block_processes.PartView
        self.evaluated_sink = None  # search.run.search's evaluated_sink
        self.evaluated = self.feasible = 0
        self.nearest: NearestMiss | None = None
        self.faster: list[FasterMiss] = []
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
        self.faster = [f for f in self.faster if f.objective < self.threshold]

    def resolve(self, r: int, g: int) -> tuple:
        """(Row, grid option) of canonical row r, option g."""
        if self.resolved is not None:
            return self.resolved[(r, g)]
        return self.table.row(r), self.options.option(r, g)

    def _keep(self, items: list) -> list:
        """Pool / miss items (PoolItem, FasterMiss, NearestMiss) with table rows made canonical (and
        resolved, block by block)."""
        if self.resolved is None:
            return items
        out = []
        for item in items:
            r, g = item.r, item.g
            self.resolved[(r + self.offset, g)] = (self.table.row(r), self.options.option(r, g))
            out.append(item._replace(r=r + self.offset))
        return out

    def objective(self, step_s: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The objective (search.result.objective_value) of candidates of the table's ``rows`` at step times
        ``step_s``."""
        tokens = self.tokens_row[rows]
        return objective_value(
            self.problem, step_s, tokens, self.flops_per_token * tokens, self.peak_flops
        )

    def may_enter(self, rows: np.ndarray, step_s: np.ndarray) -> np.ndarray:
        """Whether candidates of ``rows`` at step times ``step_s`` may still tie or beat the K-th group (the
        objective is non-decreasing in the step time, so a group whose least step may not has no candidate that
        may): evaluate_kept_groups' ``keep``."""
        return ranking.within(self.objective(step_s, rows), self.threshold)

    def evaluate(
        self,
        options: "GridIndex",
        rows: np.ndarray,
        starts: np.ndarray,
        feasible_sink,
        evaluated: tuple | None = None,
    ) -> None:
        """Step time and memory of every candidate of the option groups (rows[i], options from
        starts[i]), in ``_expand`` order; the pool and threshold updated. ``evaluated``: those
        candidates' (step, peak, host) when already computed (``Ahead``), else evaluate_groups'."""
        if not len(rows):
            return
        self.options = options
        index, grid_index = expand(rows, starts, options.group_size[rows])
        step, peak, host = (
            evaluate_groups(self.table, options, rows, starts) if evaluated is None else evaluated
        )
        tokens = self.tokens_row[index]
        obj = self.objective(step, index)
        fits = (peak <= self.capacity) & (host <= self.host_capacity)
        refused = self._refused(options, index, grid_index)
        if refused is not None:  # plans the estimate refuses: neither fitting nor missing
            fits, misses = fits & ~refused, ~fits & ~refused
        else:
            misses = ~fits
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
                PoolItem(
                    float(obj[i]), int(index[i]), int(grid_index[i]), float(step[i]), float(peak[i])
                )
                for i in keep
            ]
        )
        if (
            len(self.pool) >= self.top_k
        ):  # never above a threshold other processes reached (``ceiling``)
            self.pool, threshold = trim_pool(self.pool, self.top_k)
            self.threshold = min(threshold, self.ceiling)
            if (
                self.shared is not None
            ):  # published at once: the other processes' scans read it between batches
                self.shared.offer(self.threshold)
        self._note_misses(np.flatnonzero(misses), obj, index, grid_index, peak, host)

    def _refused(self, options, index, grid_index):
        """Which candidates (rows index[i], options grid_index[i]) the estimate refuses
        (search.grid_axes.GridAxes.refused of their grid values), None where the problem has none."""
        if not self.problem.offload_fallback:
            return None
        v = options.values(index, grid_index)
        return self.problem.refused(v["zero"], v["overlap_dp_grad_reduce"], v["offload_optimizer"])

    def _note_misses(self, misses, obj, index, grid_index, peak, host) -> None:
        """The nearest memory miss so far, and the misses faster than the threshold (``evaluate``)."""
        if misses.size:
            over = np.maximum(peak[misses] - self.capacity, host[misses] - self.host_capacity)
            j = misses[np.argmin(over)]
            if self.nearest is None or over.min() < self.nearest.overflow:
                nearest = NearestMiss(
                    float(over.min()), int(index[j]), int(grid_index[j]), float(peak[j])
                )
                self.nearest = self._keep([nearest])[0]
            # plans that would beat the current K-th best but do not fit: keep the nearest misses
            quick = misses[obj[misses] < self.threshold]
            near = quick[np.argsort(peak[quick], kind="stable")[:20]]
            self.faster += self._keep(
                [
                    FasterMiss(float(obj[i]), int(index[i]), int(grid_index[i]), float(peak[i]))
                    for i in near
                ]
            )


class Ahead:
    """The candidates of a chunk's option groups evaluated in one call before its batches are scanned (issue 31: 51
    evaluate_groups calls of ~15k candidates became 12 of ~80k on Llama 3.1 405B, each paying numpy's per-call
    overheads once): the groups whose bound is within the threshold when the chunk starts, a superset of what its
    batches evaluate (the threshold only falls). Every value is elementwise in its candidate (evaluate_groups), so a
    batch's slice (``of``) is what evaluating the batch alone gives, bit for bit; the scan counts the batches' only.

    With ``order`` (the groups in the order the batches take them: search.row_scan._bounded_batches) the groups are
    evaluated a slab at a time instead, each slab the next groups of ``order`` up to those a batch asks for and at
    least ``slab`` candidates: the first chunk of a scan starts with no top K (an infinite threshold), so every group
    is within it, and most of them fall out once its first batches have found K groups (DeepSeek-V3 over every axis:
    37,488 of the first chunk's 110,880 candidates were scanned).

    With ``keep`` (Scan.may_enter) the groups' steps are priced first and a group whose least step may not enter the
    top K when it is priced is dropped before its memory is (evaluate_kept_groups): ``priced`` takes it out of the
    batches, as a group bound would (the threshold only falls)."""

    def __init__(
        self,
        table,
        options: GridIndex,
        rows: np.ndarray,
        starts: np.ndarray,
        chosen,
        order: np.ndarray | None = None,
        slab: int = 0,
        keep=None,
    ):
        self.table, self.options, self.rows, self.starts = table, options, rows, starts
        self.lazy, self.keep = order is not None, keep
        self.dropped = np.zeros(len(rows), dtype=bool)  # the groups ``keep`` dropped
        self.position = np.full(len(rows), -1, dtype=np.int64)  # each group's place among them
        # the chunk's groups evaluated (in chunk order, or lazily in ``order``) and each one's place among them
        self.at = np.flatnonzero(chosen) if order is None else order[np.asarray(chosen)[order]]
        self.sizes = options.group_size[rows[self.at]]
        self.place = np.full(len(rows), -1, dtype=np.int64)
        self.place[self.at] = np.arange(len(self.at))
        # each one's first candidate in the flat output
        self.first = np.cumsum(self.sizes) - self.sizes
        self.slab, self.done, self.values = max(slab, 1), 0, None
        if not self.lazy and self.at.size:
            self._evaluate_through(len(self.at) - 1)

    def _evaluate_through(self, last: int) -> None:
        """Evaluate the groups of ``at`` from the first not evaluated through ``last`` and on to at least ``slab``
        candidates."""
        begin = self.done
        ends = self.first + self.sizes
        stop = max(
            last + 1, int(np.searchsorted(ends, self.first[begin] + self.slab, side="left")) + 1
        )
        stop = min(stop, len(self.at))
        groups = self.at[begin:stop]
        rows, starts = self.rows[groups], self.starts[groups]
        if self.keep is None:
            kept = np.ones(len(groups), dtype=bool)
            values = evaluate_groups(self.table, self.options, rows, starts)
        else:
            kept, values = evaluate_kept_groups(self.table, self.options, rows, starts, self.keep)
        places = np.arange(begin, stop)[kept]
        if kept.all() and stop - begin == len(
            self.at
        ):  # the chunk's groups in one call, every one kept
            self.values = values
        elif places.size:
            if self.values is None:
                total = int(self.sizes.sum())
                self.values = tuple(np.empty(total, dtype=v.dtype) for v in values)
            if kept.all():  # the slab's candidates in one run of the flat output
                low, high = self.first[begin], self.first[stop - 1] + self.sizes[stop - 1]
                flat = slice(low, high)
            else:
                _, flat = expand(places, self.first[places], self.sizes[places])
            for store, v in zip(self.values, values):
                store[flat] = v
        self.position[groups[kept]] = places
        self.dropped[groups[~kept]] = True
        self.done = stop

    def priced(self, batch: np.ndarray) -> np.ndarray:
        """The groups of ``batch`` (all within the threshold the chunk started with) that ``keep`` did not drop,
        each evaluated."""
        wanted = self.place[batch]
        assert (wanted >= 0).all(), (
            "a batch's groups are within the threshold the chunk started with"
        )
        if len(batch) and int(wanted.max()) >= self.done:
            self._evaluate_through(int(wanted.max()))
        return batch[~self.dropped[batch]]

    def of(self, batch: np.ndarray) -> tuple | None:
        """(step, peak, host) of the candidates of the chunk's groups ``batch`` (all evaluated here, none dropped),
        flat in ``expand`` order; None for no group (Scan.evaluate has nothing to do)."""
        if not len(batch):
            return None
        self.priced(batch)
        where = self.position[batch]
        assert (where >= 0).all(), "a batch's groups are evaluated and kept"
        _, flat = expand(where, self.first[where], self.sizes[where])
        return tuple(v[flat] for v in self.values)
