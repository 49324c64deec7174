"""The fast search prices a plan whose stages do not tile the nodes stage by stage, as ``estimate`` does
(step.placement, issue 31): its top K equals the exhaustive search's (every candidate through ``estimate``),
also with the bound pruning between chunks of one candidate."""

from __future__ import annotations

import math

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.cost.group_spans import stage_spans
from paraplan.search import row_scan
from paraplan.search.exhaustive import exhaustive_search
from paraplan.search.run import search
from paraplan.search.space import SearchProblem


def _fast_equals_exhaustive(model, gpus, seq_length, pp, tp, chunk, monkeypatch):
    """The fast search's top 10 (with ``chunk`` candidates per bound check, None: the default) equals the exhaustive
    search's, plan by plan, on gpt-style ``model`` with one micro-batch size and no recompute; the reference."""
    problem = SearchProblem(
        model=load_model(model),
        system=load_system("dgx-h100-80gb"),
        gpus=gpus,
        global_batch=2 * gpus,
        seq_length=seq_length,
        micro_batch=(1,),
        recompute=("none",),
        tp=tp,
        pp=pp,
        vary_placement=False,
        vary_offload=False,
        vary_overlap=False,
    )
    reference = exhaustive_search(problem, top_k=10)
    if chunk is not None:
        monkeypatch.setattr(row_scan, "CHUNK_CANDIDATES", chunk)
    fast = search(problem, top_k=10)
    assert fast.candidates == reference.candidates
    for got, want in zip(fast.plans, reference.plans, strict=True):
        assert got.plan.model_dump() == want.plan.model_dump()
        assert math.isclose(got.objective, want.objective, rel_tol=1e-9)
        assert math.isclose(got.estimate.step_time_s, want.estimate.step_time_s, rel_tol=1e-9)
    return reference


@pytest.mark.parametrize(
    "gpus, pp, tp",
    [
        (24, (4, 8), (1, 2)),  # stages of 6 and 3 GPUs on 8-GPU nodes: some straddle two nodes
        (40, (2, 4, 5, 8), (1, 2)),  # stages of 20, 10, 8 (tiles), 5 GPUs
    ],
)
@pytest.mark.parametrize("chunk", [None, 1])
def test_fast_top_k_equals_exhaustive_on_straddling_stages(gpus, pp, tp, chunk, monkeypatch):
    reference = _fast_equals_exhaustive("gpt3-1.3b", gpus, 2048, pp, tp, chunk, monkeypatch)
    assert len(reference.plans) == 10
    assert any(r.plan.tp * r.plan.dp % 8 and 8 % (r.plan.tp * r.plan.dp) for r in reference.plans)


@pytest.mark.parametrize(
    "gpus, pp, tp",
    [
        (27, (3, 9), (3,)),  # stages of 9 and 3 GPUs: tp 3 groups at ranks 6-8 straddle two nodes
        (18, (3, 6), (3,)),  # stages of 6 and 3 GPUs
    ],
)
@pytest.mark.parametrize("chunk", [None, 1])
def test_fast_top_k_prices_each_stage_on_its_own_tp_group(gpus, pp, tp, chunk, monkeypatch):
    """Where only some stages' tp groups straddle a node boundary the search costs each stage's blocks on its
    own tp span and bounds such a row by its op-time floor (search.position_blocks), as ``estimate`` prices
    each stage (step.placement.position_spans): its top K equals the exhaustive search's."""
    reference = _fast_equals_exhaustive("gpt3-125m", gpus, 1024, pp, tp, chunk, monkeypatch)
    spans = [
        {stage_spans(r.plan.tp, r.plan.cp, r.plan.dp, s, 8) for s in range(r.plan.pp)}
        for r in reference.plans
    ]
    assert any(len(s) > 1 for s in spans)
