"""The search's floors carry the A2A overlap's unpaired passes at pp 1 (step.block_terms.unpaired_passes_s): the block
floors through each kind's work with its dispatch unhidden (LayerFloors.raw), the row bounds through every layer of
the one stage (RowTable._one_stage_s). Each stays at most the step of every candidate it bounds, and is above the
floor without the term."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tests.search.test_moe_search import mixtral_problem, row_bounds_and_steps

from paraplan.search.bounds import SAFETY
from paraplan.search.bounds.blocks import (
    REFINEMENTS,
    blocks,
    block_step_floor,
    layer_floors,
    refined_bound,
)
from paraplan.search.bounds.step_floors import LayerFloors, group_blocks, unpaired_floor_s
from paraplan.search.run import search
from paraplan.search.table import RowTable
from paraplan.step.block_terms import unpaired_pass_s, unpaired_passes_s
from paraplan.step.schedules import schedule_step_floor


def _problem():
    """Mixtral 8x7B on 16 H100s without pipelining (pp 1), ep 2 and 8 with and without the A2A overlap, 2 to 8
    micro-batches."""
    return mixtral_problem(pp=(1,), tp=(1, 2), micro_batch=(1, 2), global_batch=32)


def _least_steps(problem, keys: tuple) -> dict:
    """{the values of ``keys`` (search columns): least step time of its feasible candidates}, the whole space."""
    least: dict = {}

    def sink(columns):
        for key, step in zip(
            zip(*(columns[k].tolist() for k in keys)), columns["step_time_s"].tolist()
        ):
            least[key] = min(least.get(key, math.inf), step)

    search(problem, top_k=10, feasible_sink=sink)
    return least


def test_unpaired_passes_by_hand():
    """The step's rule: raw − exposed where the raw seconds exceed the exposed ones, else 0; added at pp 1 only."""
    assert unpaired_pass_s(3.0, 1.2) == pytest.approx(1.8)
    assert unpaired_pass_s(1.0, 1.0) == 0.0
    assert unpaired_pass_s(0.5, 1.0) == 0.0  # a floor of the raw below the exposed one adds nothing
    assert unpaired_passes_s(1, 0.7) == 0.7 and unpaired_passes_s(2, 0.7) == 0.0
    pp = np.array([1, 2, 1])
    assert unpaired_passes_s(pp, np.array([0.5, 0.5, 0.25])).tolist() == [0.5, 0.0, 0.25]


def test_step_floor_adds_the_unpaired_floor_at_pp_1_only():
    """1F1B at m = 4, S0 = 2 s: m·S0 = 8 s, plus the unpaired floor 0.3 s at pp 1; at pp 2 the bubble
    (T0 − S0 = 2 s) and no unpaired passes."""
    assert schedule_step_floor("1f1b", 1, 4, 1, 2.0, 2.0, 0.5, None, 0.3) == pytest.approx(8.3)
    assert schedule_step_floor("1f1b", 1, 4, 1, 2.0, 2.0, 0.5) == 8.0
    assert schedule_step_floor("1f1b", 1, 4, 2, 2.0, 4.0, 0.5, None, 0.3) == 10.0


def test_unpaired_floor_by_hand():
    """At pp 1 the one stage's raw sum R0 less its work sum S0 (step.block_terms.unpaired_pass_s): per kind k its
    blocks n_k, work w_k and raw r_k; none at pp 2, none without raw floors."""
    problem = _problem()
    floors = layer_floors(problem, 1, 1, 1)
    split = problem.schedule_splits(1, 2)[0]
    ((_, _, counts),) = group_blocks(problem, 1, split)
    work = {name: 1.0 + i for i, (name, _) in enumerate(counts)}
    raw = {name: value + 0.25 for name, value in work.items()}
    s0 = sum(work[name] * n for name, n in counts)
    want = sum(0.25 * n for _, n in counts)
    assert unpaired_floor_s(problem, 1, split, LayerFloors(work, 0.5, raw=raw), s0) == (
        pytest.approx(want)
    )
    assert unpaired_floor_s(problem, 1, split, LayerFloors(work, 0.5), s0) is None
    assert floors.raw is not None  # the MoE layer's options dispatch: a raw floor above its work
    assert floors.raw["moe_layer"] > floors.work["moe_layer"]


def test_pp1_block_floors_carry_the_unpaired_passes_and_stay_admissible():
    """Every block's floor (the exact layer floors and each refinement) is at most the least step of its feasible
    candidates, and above the same floor without the raw floors (the unpaired passes left out): the A2A overlap's
    first forward and last backward pay their dispatch and combine whole at pp 1."""
    problem = _problem()
    parts = blocks(problem)
    least = _least_steps(problem, ("tp", "pp", "cp", "dp", "micro_batch"))
    cache: dict = {}
    checked = 0
    for b in parts:
        step = least.get((b.tp, b.pp, b.cp, b.dp, b.micro_batch))
        if step is None:
            continue
        floors = layer_floors(problem, b.tp, b.cp, b.micro_batch)
        with_raw = block_step_floor(problem, b, floors)
        without = block_step_floor(problem, b, floors._replace(raw=None))
        assert without < with_raw <= step, (b, without, with_raw, step)
        for level in REFINEMENTS:
            assert with_raw <= refined_bound(problem, b, floors, cache, level) <= step
        checked += 1
    assert checked >= 3


def test_pp1_row_bounds_carry_the_unpaired_passes_and_stay_admissible(monkeypatch):
    """RowTable.lower_bounds at pp 1: at most the least step of the row's feasible candidates, and above the bound
    without the one stage's floor (``_one_stage_s``) on every row that overlaps its dispatch and combine."""
    table, options, bound, best = row_bounds_and_steps(_problem())
    assert len(best) > 50
    assert all(bound[r] <= step for r, step in best.items())
    monkeypatch.setattr(RowTable, "_one_stage_s", lambda self, rows, m, pp: np.zeros(len(rows)))
    plain = table.lower_bounds(options.v_max, options.split_backward)
    overlapped = np.array([table.row(r).a2a_overlap for r in range(table.size)])
    assert overlapped.any() and (~overlapped).any()
    assert (bound[overlapped] > plain[overlapped]).all() and (bound >= plain).all()
    # on top of the layers' work: the unpaired passes (its layers' U, > 0 where the row overlaps, 0 elsewhere)
    whole, unpaired = table._layers[:, table.unit]
    assert (unpaired[overlapped] > 0).all() and (unpaired[~overlapped] == 0).all()
    m = table.facts.microbatches
    assert np.array_equal(bound, np.maximum(plain, (m * whole + unpaired) * SAFETY))
