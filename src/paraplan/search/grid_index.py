"""Every row's grid options as one table (search.run's fast path): the (row, option) pairs the scan evaluates, and
the step time and memory of groups of them on arrays."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from paraplan.search.space import SPLIT_BACKWARD_SCHEDULES, SearchProblem, grid_option, grid_parts
from paraplan.step.compose import compose_step_time_s, stage_peaks
from paraplan.step.layout import with_knobs
from paraplan.search.table import SCHEDULE_FIELDS, RowTable, grid_arrays

# the grid_arrays fields a state option sets (space.grid_parts' second list)
STATE_FIELDS = ("zero", "overlap_dp_grad_reduce", "overlap_param_gather")


class GridIndex:
    """Every row's grid (space.grid, which depends on pp, m and dp·cp only) as one table of options:
    option ``g`` of row ``r`` is entry ``offset[r] + g``. Options come in groups of
    ``group_size`` consecutive options sharing a schedule option (vpp, schedule, split), the ZeRO /
    DP-overlap / offload choices varying inside the group."""

    def __init__(self, problem: SearchProblem, table: RowTable):
        c = table.columns
        columns = (c["pp"], c["global_batch"] // (c["dp"] * c["micro_batch"]), c["dp"] * c["cp"])
        # one integer per (pp, m, dp·cp) from each one's rank among its column's values, in the same (lexicographic)
        # order as the triples; the distinct ones by counting (np.unique's sort of every row cost ~10 ms on 405B)
        ranks, values = zip(*(_ranked(x) for x in columns))
        radix = [len(v) for v in values]
        code = (ranks[0] * radix[1] + ranks[1]) * radix[2] + ranks[2]
        present = np.zeros(radix[0] * radix[1] * radix[2], dtype=bool)
        present[code] = True
        unique = np.flatnonzero(present)
        self.key_id = (np.cumsum(present) - 1)[code]
        self.keys = [
            (
                int(values[0][k // (radix[1] * radix[2])]),
                int(values[1][k // radix[2] % radix[1]]),
                int(values[2][k % radix[2]]),
            )
            for k in unique
        ]
        self.parts = [grid_parts(problem, *key) for key in self.keys]
        sizes = np.array([len(a) * len(b) * len(o) for a, b, o in self.parts], dtype=np.int64)
        built: dict[
            tuple, dict
        ] = {}  # keys with the same options (most of one pp) share their arrays
        arrays = []
        for parts, size in zip(self.parts, sizes):
            if size:
                options = (parts.schedules, tuple(parts.states), tuple(parts.offloads))
                if options not in built:
                    built[options] = grid_arrays(parts)
                arrays.append(built[options])
        self.table = (
            {f: np.concatenate([a[f] for a in arrays]) for f in arrays[0]} if arrays else {}
        )
        offsets = np.cumsum(sizes) - sizes
        group = np.array([max(1, len(b) * len(o)) for _, b, o in self.parts], dtype=np.int64)
        v_max = np.array(
            [max((o.vpp for o in a), default=1) for a, _, _ in self.parts], dtype=float
        )
        self.lengths, self.offset = sizes[self.key_id], offsets[self.key_id]
        self.group_size, self.v_max = group[self.key_id], v_max[self.key_id]
        # rows whose grid has ZB-H1 or DualPipe: their bubble can be far below (L − F)·u / v_max
        split = np.array(
            [any(o.schedule in SPLIT_BACKWARD_SCHEDULES for o in a) for a, _, _ in self.parts],
            dtype=bool,
        )
        self.split_backward = split[self.key_id]
        # rows whose grid has DualPipe: its overlapped pairs may take up to half of m·S off (RowTable.lower_bounds)
        dual = np.array(
            [any(o.schedule == "dualpipe" for o in a) for a, _, _ in self.parts], dtype=bool
        )
        self.dualpipe = dual[self.key_id]
        only = np.array(
            [bool(a) and all(o.schedule == "dualpipe" for o in a) for a, _, _ in self.parts]
        )
        self.dualpipe_only = only.astype(bool)[self.key_id]
        # every row's offload options are the problem's (space.grid_parts): a group is states × them
        counts = {len(o) for _, _, o in self.parts}
        assert len(counts) <= 1, "the offload options are the same for every row"
        self.offload_count = max(1, *counts) if counts else 1
        self.offload_axes = _product_axes(next((o for _, _, o in self.parts if o), []))

    def option(self, row: int, g: int) -> tuple:
        """The grid tuple (space.grid) of option ``g`` of ``row``."""
        return grid_option(self.parts[self.key_id[row]], g)

    def values(self, index: np.ndarray, grid_index: np.ndarray) -> dict[str, np.ndarray]:
        """The grid_arrays fields of candidates (row index[i], option grid_index[i])."""
        where = self.offset[index] + grid_index
        return {f: v[where] for f, v in self.table.items()}

    def groups(self, chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, first option) of every schedule-option group of the rows ``chunk``."""
        counts = self.lengths[chunk] // self.group_size[chunk]
        row, position = expand(chunk, np.zeros(len(chunk), dtype=np.int64), counts)
        return row, position * self.group_size[row]


def _product_axes(offloads: list[tuple]) -> tuple[int, ...]:
    """The offload options as axes: one per switch that varies, its values' count, where the options are every
    combination of the switches' values in itertools.product's order (space.grid_parts: SearchProblem.offload_options);
    else one axis of every option."""
    values = [list(dict.fromkeys(v)) for v in zip(*offloads)]
    if offloads and list(itertools.product(*values)) == [tuple(o) for o in offloads]:
        axes = tuple(len(v) for v in values if len(v) > 1)
        return axes or (1,)
    return (max(1, len(offloads)),)


def _ranked(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each element's rank among the distinct values of ``x``, those values in increasing order): ``x`` non-negative
    integers."""
    present = np.bincount(x) > 0
    return (np.cumsum(present) - 1)[x], np.flatnonzero(present)


def expand(
    rows: np.ndarray, starts: np.ndarray, sizes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(row, option) pairs of the ranges [starts[i], starts[i] + sizes[i]) of options of rows[i]."""
    index = np.repeat(rows, sizes)
    first = np.repeat(np.cumsum(sizes) - sizes, sizes)
    return index, np.repeat(starts, sizes) + (np.arange(len(index)) - first)


def evaluate_groups(table: RowTable, options: GridIndex, rows: np.ndarray, starts: np.ndarray):
    """(step time, HBM peak, host memory) of every candidate of the option groups (rows[i], the
    group_size[rows[i]] options from starts[i]), flat in ``_expand`` order.

    A group's options are the product of its state options (ZeRO, DP overlaps) and the offload
    options (space.grid_parts, offload innermost), so the groups are evaluated as one
    (states × offloads × groups) broadcast: the row facts and the schedule option are (1, 1, G)
    arrays, the state options (T, 1, G) (a group with fewer than T repeats its last one; the
    repeats are dropped), the offload options (1, O, G), O itself one axis per switch where the options are
    every combination of the switches (GridIndex.offload_axes: (1, 2, 2, 2, G) for weights × activations ×
    optimizer, each switch's array on its own axis). Each term is computed on the axes it reads — the
    per-stage sums once per group, the data-parallel tail once per state option, the streaming once per
    offload option, the optimizer's offload once per its switch — and only what combines them on every axis.
    The groups are the last (contiguous) axis: an operation that broadcasts a (T, 1, G) array against a
    (1, O, G) one runs numpy's inner loop over the G groups, not over the few offload options. Every function
    on the way is elementwise: each candidate's value is the one ``estimate`` computes, bit for bit."""
    groups = _GroupInputs(table, options, rows, starts)
    return groups.priced(compose_step_time_s(groups.inp))


def evaluate_kept_groups(
    table: RowTable, options: GridIndex, rows: np.ndarray, starts: np.ndarray, keep
) -> tuple[np.ndarray, tuple]:
    """(the groups kept, evaluate_groups' (step, peak, host) of the kept groups' candidates): the groups' steps
    first (compose_step_time_s, the tail included), then ``keep(rows, least)`` (a bool per group) of each group's
    least step over its candidates — a floor of every candidate's step that is one of them, so a group whose least
    step cannot enter the top K has no candidate that can (issue 31: DeepSeek-V3 over every axis, a pp-2 block's
    groups whose pipeline bound is within the threshold and whose data-parallel tail puts them out). The memory is
    priced on the same inputs and the kept candidates' values taken (each value elementwise: the same bits); the
    dropped ones never reach the scan (search.scan.Ahead.priced)."""
    groups = _GroupInputs(table, options, rows, starts)
    step = compose_step_time_s(groups.inp)
    full = np.broadcast_to(step, groups.shape)
    # fmin: a NaN step (never within a threshold) does not hide its group's other candidates
    least = np.fmin.reduce(full.reshape((-1, len(rows))), axis=0)
    kept = np.asarray(keep(rows, least), dtype=bool)
    if not kept.any():
        return kept, tuple(np.empty(0) for _ in range(3))
    values = groups.priced(step)
    if kept.all():
        return kept, values
    chosen = np.repeat(kept, options.group_size[rows])
    return kept, tuple(v[chosen] for v in values)


class _GroupInputs:
    """The StepInputs of option groups as evaluate_groups broadcasts them (its docstring): ``inp`` on the (T,
    *offload axes, G) layout, ``values`` its grid fields, ``shape`` that layout, ``states`` each group's count of
    state options."""

    def __init__(self, table: RowTable, options: GridIndex, rows: np.ndarray, starts: np.ndarray):
        n_o, axes = options.offload_count, options.offload_axes
        states = options.group_size[rows] // n_o
        n_t, n_g, inner = int(states.max()), len(rows), (1,) * len(axes)
        first = options.offset[rows] + starts  # option (state 0, offload 0) of each group
        state_at = first[None, :] + np.minimum(np.arange(n_t)[:, None], states[None, :] - 1) * n_o
        offload_at = first[None, :] + np.arange(n_o)[:, None]
        values = {}
        for f, v in options.table.items():
            if f in SCHEDULE_FIELDS:
                values[f] = v[first].reshape((1, *inner, n_g))
            elif f in STATE_FIELDS:  # (T, 1, .., 1) where every group has the same state options
                values[f] = _constant_groups_dropped(v[state_at].reshape((n_t, *inner, n_g)))
            else:
                values[f] = _constant_axes_dropped(v[offload_at].reshape((1, *axes, n_g)))
        self.inp = table.inputs(rows.reshape((1, *inner, n_g)), values)
        self.values, self.states, self.shape = values, states, (n_t, *axes, n_g)

    def priced(self, step) -> tuple:
        """(step, HBM peak, host memory) flat in ``expand`` order, of ``step`` (compose_step_time_s of ``inp``)."""
        inp, shape, states = self.inp, self.shape, self.states
        n_t, n_g, axes = shape[0], shape[-1], shape[1:-1]
        zero = self.values["zero"]
        stages, at = _zero_stages(zero)
        peaks = _stage_peaks(inp, stages)
        if (states == n_t).all():  # every group has T state options: none repeated
            if zero.shape[-1] == 1:  # the same stages along axis 0 in every group
                return (
                    _flat(step, shape),
                    *(_flat_taken(v, at[..., 0].ravel(), shape) for v in peaks),
                )
            return tuple(_flat(v, shape) for v in (step, *_taken(peaks, at)))
        kept = np.arange(n_t)[None, :] < states[:, None]  # (G, T): a group's own state options
        inner = (1,) * len(axes)
        valid = np.broadcast_to(kept.reshape((n_g, n_t, *inner)), (n_g, n_t, *axes))
        return tuple(_flat(v, shape, valid) for v in (step, *_taken(peaks, at)))


def _constant_groups_dropped(value: np.ndarray) -> np.ndarray:
    """``value`` cut to length 1 on its last (group) axis where every group has the same values: the same
    values as they broadcast, and the terms that read only the state options computed once per option."""
    head = value[..., :1]
    return head if (value == head).all() else value


def _constant_axes_dropped(value: np.ndarray) -> np.ndarray:
    """``value`` with every axis but the last along which it does not change cut to length 1: the same values
    as they broadcast, each switch's array on the axes it varies on."""
    for axis in range(value.ndim - 1):
        if value.shape[axis] > 1:
            head = value[(slice(None),) * axis + (slice(0, 1),)]
            if (value == head).all():
                value = head
    return value


def _flat(value, shape: tuple, valid=None) -> np.ndarray:
    """A (T, *offload axes, G) broadcast value's candidates in ``expand`` order (group, state, offload); with
    ``valid`` (G, T, *offload axes), those it marks."""
    ordered = np.moveaxis(np.broadcast_to(value, shape), -1, 0)
    return ordered.reshape(-1) if valid is None else ordered[valid]


def _flat_taken(value, at: np.ndarray, shape: tuple) -> np.ndarray:
    """``_flat`` of the (T, *offload axes, G) value whose state option t takes entry at[t] of ``value``'s first
    axis (``_stage_peaks``' stages): each group's rows picked from the (G, stages, offloads) copy, not a fancy
    index of every candidate (the same elements)."""
    n_s, n_g = len(value) if np.ndim(value) else 1, shape[-1]
    width = np.broadcast_to(value, (n_s, *shape[1:]))
    return np.moveaxis(width, -1, 0).reshape((n_g, n_s, -1)).take(at, axis=1).reshape(-1)


def _taken(peaks: tuple, at: np.ndarray) -> tuple:
    """Each of ``_stage_peaks``' values at the stage ``at`` (its index along axis 0) of every candidate."""
    width = np.broadcast_shapes((1, *at.shape[1:]), *map(np.shape, peaks))
    width = (max(width[0], 1), *width[1:])
    return tuple(np.take_along_axis(np.broadcast_to(v, width), at, axis=0) for v in peaks)


def _zero_stages(zero: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct ZeRO stages of ``zero`` in increasing order, each element's index among them)."""
    # the distinct stages in increasing order, counted (np.unique imports numpy.ma, ~7 ms, and sorts)
    stages = np.flatnonzero(np.bincount(zero.ravel())).astype(zero.dtype)
    return stages, np.searchsorted(stages, zero)


def _stage_peaks(inp, stages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """stage_peaks of candidates whose state options (axis 0) are the ZeRO stages ``stages``: memory reads
    the ZeRO stage of a state option, not its DP-overlap switches, so it is evaluated once per distinct
    stage (at most 4 against up to 11 state options) and each state option takes its stage's
    (``_flat_taken``, ``_taken``)."""
    inner = (1,) * (inp.knobs.zero.ndim - 1)
    knobs = replace(inp.knobs, zero=stages.reshape((-1, *inner)), **_NO_OVERLAP)
    return stage_peaks(with_knobs(inp, knobs))


# the DP-overlap switches, which the memory terms do not read (step.stage_memory)
_NO_OVERLAP = {name: False for name in STATE_FIELDS if name != "zero"}
