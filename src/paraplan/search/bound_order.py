"""The rows of a row table in bound order, each row's bound computed only when it may come next.

The fast path visits rows best bound first (search.run): the order of ``np.lexsort((rows, bound))``. A row's bound
reads its layer work, and working that out costs the layer's collectives (search.table.RowTable.lower_bounds); a
floor of every bound from op times alone (RowTable.work_floors) is cheap. ``BoundOrder`` costs the rows in floor
order, a batch at a time, and lets a costed row out once its bound is below the least floor of the rows not costed:
their bounds are at least that floor, so none of them can come before it. The rows let out at one extension are in
(bound, row) order, and every row let out later has a bound at least the floor they were below: the order is the
one sorting every row's bound gives, ties included. A search that stops at a threshold never works out the bounds
of the rows whose floors are beyond it (Llama 3.1 405B on 16,384 H100: ~2,000 of 4,705 layer costings).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

FIRST_BATCH = (
    2048  # rows costed at the first extension; later ones cost half the rows costed so far
)


class BoundOrder:
    """Rows in increasing (bound, row) order (module doc): ``peek`` the next one, ``pop`` it."""

    def __init__(self, floor: np.ndarray, bounds_of: Callable[[np.ndarray], np.ndarray]):
        """``floor``: per row, at most its bound; ``bounds_of(rows)``: the bounds of those rows."""
        self._by_floor = np.lexsort((np.arange(len(floor)), floor))
        self._floor = np.asarray(floor)[self._by_floor]
        self._bounds_of = bounds_of
        self._costed = 0  # rows _by_floor[:_costed] have their bounds
        empty_rows, empty_bounds = np.zeros(0, dtype=np.int64), np.zeros(0)
        self._pending = (
            empty_rows,
            empty_bounds,
        )  # costed, bound not below the floor of the rest yet
        self._ready_rows, self._ready_bounds = empty_rows, empty_bounds
        self._next = 0
        self.popped = 0

    def peek(self) -> tuple[int, float] | None:
        """(row, bound) of the next row; None once every row is popped."""
        while self._next == len(self._ready_rows):
            if not self._extend():
                return None
        return int(self._ready_rows[self._next]), self._ready_bounds[self._next]

    def pop(self) -> None:
        """Go past the row ``peek`` gave."""
        self._next += 1
        self.popped += 1

    def cost_all(self) -> None:
        """Work out every row's bound at the next extension (a caller that visits every row)."""
        self._first = len(self._floor)

    _first = FIRST_BATCH

    def _extend(self) -> bool:
        """Cost the next batch of rows by floor and let out the costed rows whose bounds are below the floors of
        the rest, in (bound, row) order; False when every row is out."""
        total = len(self._floor)
        rows, bounds = self._pending
        if self._costed == total and not len(rows):
            return False
        batch = self._by_floor[self._costed : self._costed + max(self._first, self._costed // 2)]
        self._costed += len(batch)
        rows = np.concatenate([rows, batch])
        bounds = np.concatenate([bounds, self._bounds_of(batch)])
        if self._costed < total:
            ready = bounds < self._floor[self._costed]
        else:
            ready = np.ones(len(rows), dtype=bool)
        out_rows, out_bounds = rows[ready], bounds[ready]
        order = np.lexsort((out_rows, out_bounds))
        self._ready_rows, self._ready_bounds = out_rows[order], out_bounds[order]
        self._next = 0
        self._pending = (rows[~ready], bounds[~ready])
        return True
