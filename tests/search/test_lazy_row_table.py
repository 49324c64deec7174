"""The row table costs its layers as they are read (search.table.RowTable, search.bound_order.BoundOrder): the rows
come in the order sorting every row's bound gives, the floors never exceed the bounds, and a candidate's inputs do
not depend on which other units were costed before it (issue 31: the fast path's speed, the same plans)."""

from __future__ import annotations

import numpy as np
import pytest

from paraplan.catalog import load_model, load_system
from paraplan.search.bound_order import BoundOrder
from paraplan.search.grid_index import GridIndex, expand
from paraplan.search.scan import Ahead
from paraplan.search.space import SearchProblem
from paraplan.search.table import RowTable
from paraplan.step.compose import compose_step, stage_peaks


def _popped(order: BoundOrder) -> list[int]:
    out = []
    while (head := order.peek()) is not None:
        out.append(head[0])
        order.pop()
    return out


@pytest.mark.parametrize("seed", range(6))
def test_bound_order_is_the_sorted_order_ties_included(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 9000))
    bound = rng.integers(0, 50, n).astype(float)  # many ties
    floor = bound - rng.integers(0, 30, n)  # <= bound, ties among floors too
    asked = []

    def bounds_of(rows):
        asked.append(len(rows))
        return bound[rows]

    assert _popped(BoundOrder(floor, bounds_of)) == np.lexsort((np.arange(n), bound)).tolist()
    assert sum(asked) == n  # each row's bound worked out once


def test_bound_order_works_out_only_the_bounds_it_needs():
    n = 100_000
    bound = np.arange(n, dtype=float)[::-1].copy()
    floor = bound.copy()
    asked = []
    order = BoundOrder(floor, lambda rows: (asked.append(len(rows)), bound[rows])[1])
    assert order.peek() == (n - 1, 0.0)
    assert sum(asked) < n // 10


def _problem(name: str, **fields) -> SearchProblem:
    base = dict(
        model=load_model(name),
        system=load_system("dgx-h100-80gb"),
        gpus=32,
        seq_length=2048,
        global_batch=64,
    )
    return SearchProblem(**{**base, **fields})


PROBLEMS = {
    "gpt3-350m": _problem("gpt3-350m"),  # decoder small-tensor lists of 8 and 9 entries (padded)
    "llama3-8b": _problem("llama3-8b", cp=(1, 2)),
    "mixtral-8x7b": _problem(
        "mixtral-8x7b", gpus=16, tp=(1, 2), pp=(2, 4), ep=(2, 8), vary_offload=False
    ),
}


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_work_floors_are_at_most_the_layer_work(name):
    table = RowTable(PROBLEMS[name])
    options = GridIndex(PROBLEMS[name], table)
    exact = table.lower_bounds(options.v_max, options.split_backward)
    floor = table.lower_bounds(
        options.v_max,
        options.split_backward,
        np.arange(table.size),
        table.work_floors(),
    )
    assert (table._unit_work(table.unit) >= table.work_floors()).all()
    assert (floor <= exact).all() and (floor < exact).any()


def _evaluate(table: RowTable, options: GridIndex, rows: np.ndarray):
    group_row, group_start = options.groups(rows)
    index, grid_index = expand(group_row, group_start, options.group_size[group_row])
    inputs = table.inputs(index, options.values(index, grid_index))
    return compose_step(inputs)["step_time_s"], stage_peaks(inputs)[0]


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_a_candidates_inputs_do_not_depend_on_what_was_costed_before(name):
    problem = PROBLEMS[name]
    alone, after = RowTable(problem), RowTable(problem)
    options = GridIndex(problem, alone)
    rows = np.flatnonzero(options.lengths)
    picked = rows[:: max(1, len(rows) // 40)]
    after._cost_units(after.unit)  # every unit first, in one go
    for r in picked:
        one = np.array([r])
        a_step, a_peak = _evaluate(
            alone, options, one
        )  # only this row's unit costed (and those before)
        b_step, b_peak = _evaluate(after, options, one)
        assert np.array_equal(a_step, b_step) and np.array_equal(a_peak, b_peak)
    assert alone._costed.sum() < after._costed.sum()


@pytest.mark.parametrize("name", sorted(PROBLEMS))
@pytest.mark.parametrize("slab", [1, 500, 10**9])
def test_slabs_of_a_chunk_give_the_values_of_one_evaluation(name, slab):
    """search.scan.Ahead in slabs (a chunk that starts with no top K, search.row_scan) gives each batch the values the
    chunk's one evaluation gives, bit for bit, evaluating no group twice and none beyond the slab a batch needs."""
    problem = PROBLEMS[name]
    table = RowTable(problem)
    options = GridIndex(problem, table)
    rows = np.flatnonzero(options.lengths)[:60]
    group_row, group_start = options.groups(rows)
    bound = np.random.default_rng(len(rows)).integers(0, 9, len(group_row)).astype(float)
    by_bound = np.lexsort((np.arange(len(bound)), bound))
    chosen = bound < 7
    eager = Ahead(table, options, group_row, group_start, chosen)
    slabs = Ahead(table, options, group_row, group_start, chosen, by_bound, slab)
    kept = by_bound[chosen[by_bound]]
    batches = np.array_split(kept, 5)
    for i, batch in enumerate(batches):
        for a, b in zip(eager.of(batch), slabs.of(batch)):
            assert np.array_equal(a, b)
        if slab == 1:  # each batch's groups and no more
            assert slabs.done == sum(len(b) for b in batches[: i + 1])
    assert slabs.done <= len(kept) and eager.of(batches[0][:0]) is None
