"""The fast search stays exact where a full recomputation stops early (pytorch-eager: step.block_sums.
early_stop_tail_s), whose recomputed forward is below the forward floor the memory bounds add for it
(search.bounds.blocks.memory_floors); one-candidate chunks so that the bounds decide what is skipped."""

from __future__ import annotations

import math

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.frameworks import framework_search_fields, framework_system
from paraplan.search import row_scan
from paraplan.search.bounds.blocks import memory_floors
from paraplan.search.bounds.step_floors import LayerFloors
from paraplan.search.exhaustive import exhaustive_search
from paraplan.search.run import search
from paraplan.search.space import SearchProblem
from paraplan.step.build import BLOCK_KINDS, model_block_kinds


def _problem(framework: str, model: str, **sizes) -> SearchProblem:
    """A search on one DGX H100 node under ``framework``, full recomputation only. The profile's loop is taken
    as running data parallelism (``parallelism: [dp]``): pytorch-eager's own loop is one process on one device
    (specs.rules_stack.stack_gpus_rule), and the early stop is priced alike on any number of replicas."""
    fw = load_framework(load_framework(framework).model_dump() | {"parallelism": ["dp"]})
    fields = {"vary_placement": False, "vary_offload": False, **framework_search_fields(fw)}
    system = framework_system(fw, load_system("dgx-h100-80gb"))
    return SearchProblem(
        model=load_model(model), system=system, recompute=("full",), **sizes, **fields
    )


@pytest.mark.slow
def test_search_exact_with_early_stop(monkeypatch):
    problem = _problem(
        "pytorch-eager",
        "gpt3-6.7b",
        gpus=8,
        global_batch=64,
        seq_length=4096,
        micro_batch=(1, 2, 4, 8),
    )
    assert problem.system.accelerator.efficiency.checkpoint_early_stop
    monkeypatch.setattr(row_scan, "CHUNK_CANDIDATES", 1)
    fast, ref = search(problem, top_k=10), exhaustive_search(problem, top_k=10)
    assert fast.evaluated < fast.candidates  # the bounds pruned
    assert all(p.plan.recompute == "full" for p in ref.plans)
    assert [p.key for p in fast.plans] == [p.key for p in ref.plans]
    for a, b in zip(fast.plans, ref.plans):
        assert math.isclose(a.estimate.step_time_s, b.estimate.step_time_s, rel_tol=1e-9)


def _full_mode_work(framework: str) -> dict:
    """memory_floors' full-recompute work floor of each recomputed kind, from floors work 1 and forward 0.5."""
    problem = _problem(framework, "gpt3-1.3b", gpus=8, global_batch=8, seq_length=2048)
    kinds = model_block_kinds(problem.model)
    floors = LayerFloors(dict.fromkeys(kinds, 1.0), 0.0, dict.fromkeys(kinds, 0.5))
    (work,) = memory_floors(problem, 1, 1, 1, floors).work.values()
    return {k: v for k, v in work.items() if BLOCK_KINDS[k].recomputed}


def test_full_mode_floor_without_the_forward():
    """The floor adds the least forward for a full recomputation (1 + 0.5), none where it may stop short."""
    assert set(_full_mode_work("megatron-core").values()) == {1.5}
    assert set(_full_mode_work("pytorch-eager").values()) == {1.0}
