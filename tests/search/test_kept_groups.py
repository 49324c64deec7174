"""search.grid_index.evaluate_kept_groups: a group's least step (the data-parallel tail included) is a floor of
every candidate's step of the group, above the pipeline bound (the floor without the tail) for some group, and a
group it drops has no candidate within the threshold; the kept groups' values are evaluate_groups', bit for bit;
a search prunes with it and finds the same plans, evaluating fewer candidates (issue 31)."""

from __future__ import annotations

import numpy as np
import pytest
from test_step_time_only import _dense_problem

from paraplan.catalog import load_model, load_system
from paraplan.search.grid_index import GridIndex, evaluate_groups, evaluate_kept_groups, expand
from paraplan.search.run import search
from paraplan.search.scan import Scan
from paraplan.search.space import SearchProblem
from paraplan.search.table import RowTable
from paraplan.step.compose import pipeline_bound_s


def _groups(problem):
    table = RowTable(problem)
    options = GridIndex(problem, table)
    rows = np.flatnonzero(options.lengths)[::5][:80]
    return table, options, *options.groups(rows)


@pytest.mark.parametrize("share", [0.2, 0.8])  # thresholds keeping fewer or more of the groups
def test_least_step_is_a_floor_above_the_pipeline_bound_and_drops_only_what_cannot_enter(share):
    table, options, group_row, group_start = _groups(_dense_problem())
    step, peak, host = evaluate_groups(table, options, group_row, group_start)
    sizes = options.group_size[group_row]
    owner = np.repeat(np.arange(len(group_row)), sizes)  # each candidate's group
    seen = {}

    def keep(rows, least):
        seen["least"] = least
        return least <= threshold

    # the least of each group's candidates, from evaluate_groups' own steps
    least = np.full(len(group_row), np.inf)
    np.minimum.at(least, owner, step)
    threshold = float(np.quantile(least, share))
    kept, values = evaluate_kept_groups(table, options, group_row, group_start, keep)
    floor = seen["least"]
    assert np.array_equal(floor, least)  # one of the group's own steps, the least
    assert (floor[owner] <= step).all()  # admissible: never above a candidate's priced step
    reps = table.inputs(group_row, options.values(group_row, group_start))
    pipeline = np.broadcast_to(pipeline_bound_s(reps), floor.shape)
    assert (pipeline <= floor).all()
    # the tail lifts it: groups whose pipeline bound is within the threshold and whose least step is not
    assert (floor > pipeline).any()
    assert ((pipeline <= threshold) & ~kept).any()
    assert np.array_equal(kept, floor <= threshold) and 0 < kept.sum() < len(kept)
    # a dropped group has no candidate within the threshold; the kept groups' values are evaluate_groups'
    assert (step[~kept[owner]] > threshold).all()
    chosen = kept[owner]
    for got, want in zip(values, (step, peak, host)):
        assert np.array_equal(got.view(np.uint64), want[chosen].view(np.uint64))
    index, _ = expand(group_row[kept], group_start[kept], sizes[kept])
    assert len(index) == len(values[0])


def test_a_search_pruning_on_the_least_step_finds_the_same_plans_with_fewer_evaluated(monkeypatch):
    """GPT-3 175B on 1,024 A100 (the README's search): its first chunk's first slab finds the top K, the later
    chunks start with a threshold (on this tree 75,592 evaluated against 335,632 without the least steps)."""
    problem = SearchProblem(
        model=load_model("gpt3-175b"),
        system=load_system("dgx-a100-80gb"),
        gpus=1024,
        seq_length=2048,
        max_global_batch=1024,
    )
    pruned = search(problem, top_k=5)
    monkeypatch.setattr(Scan, "may_enter", lambda self, rows, step_s: np.ones(len(rows), bool))
    every = search(problem, top_k=5)
    assert [(p.objective, p.estimate.step_time_s, p.plan) for p in pruned.plans] == [
        (p.objective, p.estimate.step_time_s, p.plan) for p in every.plans
    ]
    assert pruned.evaluated < every.evaluated // 2
