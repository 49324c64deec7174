"""The search's step time (step.compose.compose_step_time_s: each stage entry's step, the one at the max of the
tails taken) is compose_step's, bit for bit, on the search's own (states × offloads × groups) arrays (issue 31,
search speed)."""

from __future__ import annotations

import numpy as np
import pytest
from test_moe_search import mixtral_problem

from paraplan.catalog import load_model, load_system
from paraplan.search import grid_index
from paraplan.search.grid_index import GridIndex, evaluate_groups
from paraplan.search.space import SearchProblem
from paraplan.search.table import RowTable
from paraplan.step.compose import compose_step, compose_step_time_s


def _dense_problem() -> SearchProblem:
    """Llama 3 8B on 64 H100: every ZeRO stage, both DP overlaps and the three offload switches."""
    return SearchProblem(
        model=load_model("llama3-8b"),
        system=load_system("dgx-h100-80gb"),
        gpus=64,
        seq_length=8192,
        global_batch=256,
    )


@pytest.mark.parametrize("problem", [_dense_problem, mixtral_problem])
def test_step_time_alone_is_compose_steps(problem, monkeypatch):
    p = problem()
    table = RowTable(p)
    options = GridIndex(p, table)
    rows = np.array([r for r in range(table.size) if options.lengths[r]][::3][:60])
    compared = []

    def both(inp):
        alone, full = compose_step_time_s(inp), compose_step(inp)["step_time_s"]
        shape = np.broadcast_shapes(np.shape(alone), np.shape(full))
        assert np.array_equal(
            np.broadcast_to(alone, shape).view(np.uint64),
            np.broadcast_to(full, shape).view(np.uint64),
        )
        compared.append(int(np.prod(shape)))
        return alone

    monkeypatch.setattr(grid_index, "compose_step_time_s", both)
    group_row, group_start = options.groups(rows)
    evaluate_groups(table, options, group_row, group_start)
    assert sum(compared) >= 1000
