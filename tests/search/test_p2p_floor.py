"""The search's row bound keeps one point-to-point exchange per micro-batch unless the row's grid has the
interleaved schedule and the runtime overlaps its transfers (review of issue 31): step.compose hides the
transfers only there (step.p2p.overlapped_p2p_exposed_s), so dropping them for every schedule of a p2p-overlap
profile loosened the bound of every 1F1B / GPipe row. The bound stays admissible: at most the step of every
candidate of the row, on randomly drawn rows."""

from __future__ import annotations

import numpy as np
import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.frameworks import framework_system
from paraplan.search.grid_index import GridIndex, expand
from paraplan.search.space import SearchProblem
from paraplan.search.table import RowTable
from paraplan.step.compose import compose_step


def _problem(schedules: tuple[str, ...], overlap: bool = True) -> SearchProblem:
    system = framework_system(load_framework("megatron-core"), load_system("dgx-h100-80gb"))
    assert system.accelerator.efficiency.runtime.p2p_overlap
    if not overlap:
        acc = system.accelerator
        eff = acc.efficiency
        runtime = eff.runtime.model_copy(update={"p2p_overlap": False})
        eff = eff.model_copy(update={"runtime": runtime})
        system = system.model_copy(
            update={"accelerator": acc.model_copy(update={"efficiency": eff})}
        )
    return SearchProblem(
        model=load_model("gpt3-1.3b"),
        system=system,
        gpus=32,
        seq_length=2048,
        global_batch=64,
        pp=(2, 4, 8),
        schedules=schedules,
        vary_offload=False,
    )


def _row_steps(table: RowTable, options: GridIndex, rows: np.ndarray) -> np.ndarray:
    """Per row, the least step time over its grid's candidates (compose_step)."""
    group_row, group_start = options.groups(rows)
    index, grid_index = expand(group_row, group_start, options.group_size[group_row])
    steps = compose_step(table.inputs(index, options.values(index, grid_index)))["step_time_s"]
    least = np.full(table.size, np.inf)
    np.minimum.at(least, index, np.broadcast_to(steps, index.shape))
    return least[rows]


@pytest.mark.parametrize("schedules", [("1f1b", "interleaved"), ("1f1b", "gpipe")])
def test_the_row_bound_is_at_most_every_candidate(schedules):
    problem = _problem(schedules)
    table = RowTable(problem)
    options = GridIndex(problem, table)
    rows = np.flatnonzero(options.lengths)
    rng = np.random.default_rng(7)
    picked = np.sort(rng.choice(rows, size=min(60, len(rows)), replace=False))
    bound = table.lower_bounds(options.v_max, options.split_backward, picked)
    exact = _row_steps(table, options, picked)
    assert np.all(bound <= exact * (1 + 1e-12))


def _bounds(schedules: tuple[str, ...], overlap: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the row bounds, the rows' v_max, whether each row is pipelined) of the rows with candidates."""
    problem = _problem(schedules, overlap)
    table = RowTable(problem)
    options = GridIndex(problem, table)
    rows = np.flatnonzero(options.lengths)
    bound = table.lower_bounds(options.v_max, options.split_backward, rows)
    return bound, options.v_max[rows], table.columns["pp"][rows] > 1


def test_without_interleaving_the_exchange_stays_in_the_bound():
    """A grid of 1F1B and GPipe only (every row's v_max is 1): the runtime's p2p overlap does not apply, the bound
    keeps the exchange (it used to drop it), the same as for a runtime that does not overlap its transfers."""
    kept, v_max, piped = _bounds(("1f1b", "gpipe"), overlap=True)
    plain, _, _ = _bounds(("1f1b", "gpipe"), overlap=False)
    assert np.all(v_max == 1) and piped.any()
    assert np.array_equal(kept, plain)


def test_with_interleaving_the_overlapped_exchange_leaves_the_bound():
    """With the interleaved schedule in the grid, the pipelined rows that have a vpp > 1 drop the exchange under
    the runtime's p2p overlap (their bound falls below the non-overlapping runtime's); the others keep it."""
    hidden, v_max, piped = _bounds(("1f1b", "interleaved"), overlap=True)
    plain, _, _ = _bounds(("1f1b", "interleaved"), overlap=False)
    dropped = piped & (v_max > 1)
    assert dropped.any() and np.all(hidden[dropped] < plain[dropped])
    assert np.array_equal(hidden[~dropped], plain[~dropped])
