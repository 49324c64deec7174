"""User-given pipeline splits (specs/split.py): Megatron-LM's first/last-stage counts, the
embedding and loss counted as layers, explicit per-stage lists — with interleaving — and the
published Llama 3.1 405B layouts (126 layers)."""

from __future__ import annotations

import pytest
from pytest import approx

from paraplan.api import estimate
from paraplan.catalog import load_model, load_system
from paraplan.search.space import SearchProblem
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec, plan_violations
from paraplan.specs.rules import interleave_split_rule
from paraplan.specs.split import (
    chunk_layer_counts,
    default_first_last,
    grouped_split,
    stage_layer_counts,
)

L405 = load_model("llama3-405b")
H100 = load_system("dgx-h100-80gb")


def counts(plan: PlanSpec, layers: int = 126) -> list[int]:
    return stage_layer_counts(plan.split(layers))


def plan(**fields) -> PlanSpec:
    base = dict(gpus=1024, tp=8, global_batch=512, seq_length=8192)
    return PlanSpec(**(base | fields))


def test_default_split_gives_extra_layers_to_middle_stages():
    assert counts(plan(pp=16)) == [7] + [8] * 14 + [7]  # 126 = 16·7 + 14
    assert counts(plan(pp=5, gpus=640), 24) == [5, 5, 5, 5, 4]
    assert counts(plan(pp=2, gpus=256), 25) == [13, 12]
    assert counts(plan(pp=1, gpus=128), 24) == [24]


def test_embedding_and_loss_as_layers_make_405b_interleavable():
    p = plan(
        pp=8,
        vpp=8,
        embedding_as_layer=True,
        loss_as_layer=True,
        gpus=1024,
        tp=8,
        cp=2,
        global_batch=64,
    )
    # 126 + 2 = 128 units = 8 stages × 16: first and last hold 15 decoder layers
    assert counts(p) == [15] + [16] * 6 + [15]
    assert not plan_violations(p, L405)
    p16 = plan(
        pp=16, vpp=4, embedding_as_layer=True, loss_as_layer=True, gpus=2048, global_batch=256
    )
    assert counts(p16) == [7] + [8] * 14 + [7]
    assert not plan_violations(p16, L405)


def test_interleaving_uneven_stages_is_a_layout_the_estimate_takes_and_the_search_leaves_out():
    """126 layers over pp 8 × vpp 8 without the accounting switches: stages of 15 and 16 layers do not cut into 8
    equal chunks. Megatron-Core runs it with a pipeline layout (chunks of 1 and 2 layers), so the plan is valid and
    estimates like the accounted split with the same stage counts; the search enumerates equal chunks only."""
    uneven = plan(
        pp=8, vpp=8, gpus=1024, cp=2, global_batch=64, layers_first_stage=15, layers_last_stage=15
    )
    assert not plan_violations(uneven, L405)
    assert counts(uneven) == [15] + [16] * 6 + [15]
    assert interleave_split_rule(
        uneven.split(126), 8, 0, 0
    )  # not equal chunks: outside the search's options
    chunks = chunk_layer_counts(counts(uneven), 8)
    assert chunks[0] == [2] * 7 + [1] and chunks[1] == [2] * 8 and sum(map(sum, chunks)) == 126
    accounted = dict(embedding_as_layer=True, loss_as_layer=True)
    assert (
        chunk_layer_counts(
            counts(plan(pp=8, vpp=8, gpus=1024, cp=2, global_batch=64, **accounted)), 8, 1, 1
        )[0]
        == [1] + [2] * 7
    )
    common = dict(
        gpus=1024,
        tp=8,
        pp=8,
        cp=2,
        vpp=8,
        micro_batch=1,
        global_batch=64,
        seq_length=8192,
        sequence_parallel=True,
        zero=1,
    )
    a = estimate(L405, H100, layers_first_stage=15, layers_last_stage=15, **common)
    b = estimate(L405, H100, **accounted, **common)
    assert a.step_time_s == approx(b.step_time_s, rel=1e-12)
    assert a.first_stage.peak_bytes == approx(b.first_stage.peak_bytes, rel=1e-12)


def test_chunk_layer_counts_keeps_accounted_layouts_and_evens_out_the_rest():
    # DeepSeek-V3 at pp 8 × vpp 4, embedding counted, loss + MTP counted: Megatron-Bridge's 'Et|(tt|)*30mL'
    assert chunk_layer_counts([7, 8, 8, 8, 8, 8, 8, 6], 4, 1, 2) == [[1, 2, 2, 2]] + [
        [2, 2, 2, 2]
    ] * 6 + [[2, 2, 2, 0]]
    # pp 4 × vpp 4 (the Bridge layout puts 4, 4, 4, 1 on the last stage; this rule evens it out)
    assert chunk_layer_counts([16, 16, 16, 13], 4)[3] == [4, 3, 3, 3]
    assert chunk_layer_counts([0, 3], 2, 1, 1) == [[0, 0], [2, 1]]


def test_first_and_last_stage_counts():
    p = plan(pp=8, layers_first_stage=14, layers_last_stage=14)
    assert counts(p) == [14, 17, 17, 16, 16, 16, 16, 14]  # 98 middle layers over 6 stages
    only_first = plan(pp=4, gpus=512, layers_first_stage=30)
    assert counts(only_first) == [30, 32, 32, 32]  # the rest split over the other 3 stages


def test_explicit_stage_layers():
    p = plan(pp=4, gpus=512, stage_layers=(30, 33, 33, 30))
    assert counts(p) == [30, 33, 33, 30]
    assert not plan_violations(p, L405)
    wrong = plan(pp=4, gpus=512, stage_layers=(30, 30, 30, 30))
    assert [v.field for v in plan_violations(wrong, L405)] == ["plan.stage_layers"]


@pytest.mark.parametrize(
    "fields",
    [
        dict(stage_layers=(30, 33, 33, 30), embedding_as_layer=True),
        dict(layers_first_stage=3, loss_as_layer=True),
        dict(schedule="interleaved"),  # vpp missing
    ],
)
def test_conflicting_split_fields_are_input_errors(fields):
    with pytest.raises(Exception):
        plan(pp=4, gpus=512, **fields)


def test_405b_published_layouts_evaluate():
    """NeMo's Llama 3.1 405B recipe layout (tp 8, pp 8, cp 2, vpp 8, embedding and loss counted
    as layers) and a pp 16 interleaved variant evaluate without refusal; the first and last stage
    hold one decoder layer fewer."""
    e = estimate(
        L405,
        H100,
        gpus=1024,
        tp=8,
        pp=8,
        cp=2,
        vpp=8,
        micro_batch=1,
        global_batch=64,
        seq_length=8192,
        sequence_parallel=True,
        embedding_as_layer=True,
        loss_as_layer=True,
        zero=1,
    )
    assert e.step_time_s > 0 and len(e.stages) == 8
    # the middle stages hold 16 layers, the first 15 plus the embedding
    assert e.stages[1].transformer_weights_and_optimizer_bytes == approx(
        e.stages[0].transformer_weights_and_optimizer_bytes * 16 / 15
    )
    e16 = estimate(
        L405,
        H100,
        gpus=2048,
        tp=8,
        pp=16,
        cp=2,
        vpp=4,
        global_batch=128,
        seq_length=8192,
        sequence_parallel=True,
        embedding_as_layer=True,
        loss_as_layer=True,
        zero=1,
    )
    assert e16.step_time_s > 0 and len(e16.stages) == 16


def test_search_offers_accounted_splits_only_where_needed():
    problem = SearchProblem(model=L405, system=H100, gpus=1024, seq_length=8192, global_batch=512)
    options = problem.schedule_options(8, 16)
    accounted = sorted(v for v, s, split in options if split == (True, True))
    assert accounted == [2, 4, 8, 16]  # 128/8 = 16 units per stage; 126/8 is not whole
    assert not [o for o in options if o[1] == "interleaved" and o[2] == (False, False)]
    assert {o[2] for o in options} == {
        (False, False),
        (True, True),
    }  # without vary_split, no other split
    gpt = SearchProblem(
        model=load_model("gpt3-175b"), system=H100, gpus=1024, seq_length=2048, global_batch=512
    )
    assert not [o for o in gpt.schedule_options(8, 16) if any(o[2])]  # 96/8 interleaves without it


def test_vectorised_split_matches_scalar():
    import numpy as np

    layers = np.array([126.0, 96.0, 25.0])
    pp = np.array([8.0, 8.0, 2.0])
    acc = np.array([1, 0, 0])
    first, last = default_first_last(layers, pp, acc, acc)
    groups = grouped_split(layers, pp, first, last)
    for i in range(3):
        scalar = grouped_split(
            int(layers[i]),
            int(pp[i]),
            *map(int, default_first_last(int(layers[i]), int(pp[i]), int(acc[i]), int(acc[i]))),
        )
        for field in ("index", "count", "layers"):
            vector = [float(np.broadcast_to(getattr(g, field), layers.shape)[i]) for g in groups]
            assert vector == [float(getattr(g, field)) for g in scalar]


def test_too_many_stages_for_the_split_is_reported():
    with pytest.raises(InputError):
        estimate(
            load_model("gpt3-125m"),
            H100,
            gpus=8,
            pp=4,
            layers_first_stage=12,
            layers_last_stage=0,
            global_batch=8,
        )


def test_vary_split_offers_the_accounting_switches_splits_for_every_schedule():
    """With vary_split the non-interleaved schedules are searched with every split Megatron-LM's two accounting
    switches give (distinct stage layer counts only); DeepSeek-V3 on pp 16 with the loss and its MTP module counted
    as layers is the 4 / 1 first / last layout of the Megatron-Bridge DeepSeek-V3 runs (the moe-visible cases with
    pp 16), and plan_of's PlanSpec splits as the search's stage groups do (one rule)."""
    from paraplan.search.space import Row, plan_of
    from paraplan.specs.parallel import ParallelDims

    model = load_model("deepseek-v3")
    problem = SearchProblem(
        model=model,
        system=load_system("dgx-h800"),
        gpus=2048,
        seq_length=4096,
        global_batch=15360,
        vary_split=True,
    )
    splits = problem.split_options(16)
    assert splits[0] == (False, False) and set(splits) == {
        (False, False),
        (True, False),
        (False, True),
        (True, True),
    }
    first, *_, last = problem.split_groups(16, (False, True))
    assert (int(first.layers), int(last.layers)) == (4, 1)
    options = problem.schedule_options(16, 120)
    for schedule in ("1f1b", "zb-h1", "dualpipe"):
        assert {split for _, s, split in options if s == schedule} == set(splits)
    row = Row(ParallelDims(tp=1, cp=1, dp=128, pp=16), {}, 1, 15360, False, "none", False)
    for v, schedule, split in options:
        plan = plan_of(problem, row, (v, schedule, split, 1, True, True, False, False, False))
        want = [
            (int(g.index), int(g.count), int(g.layers))
            for g in problem.split_groups(16, split)
            if int(g.count) > 0
        ]
        assert [
            (g.index, g.count, g.layers)
            for g in plan.split(model.layers, model.mtp_layers)
            if g.count > 0
        ] == want
    plain = SearchProblem(
        model=model, system=load_system("dgx-h800"), gpus=2048, seq_length=4096, global_batch=15360
    )
    assert plain.split_options(16) == ((False, False),) and problem.split_options(1) == (
        (False, False),
    )
    assert {split for _, s, split in plain.schedule_options(16, 120) if s != "interleaved"} == {
        (False, False)
    }
