"""The search over mixture-of-experts plans (issue 9): ep, etp, dispatcher, dispatch/combine overlap
and the split-backward schedules are axes of the canonical space, and the fast path stays exact."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from paraplan.catalog import load_model, load_system
from paraplan.step.estimate import estimate
from paraplan.search import row_scan, run
from paraplan.search.grid_index import GridIndex, evaluate_groups, expand
from paraplan.search.exhaustive import exhaustive_search
from paraplan.search.run import search
from paraplan.search.space import SearchProblem
from paraplan.search.table import RowTable, feasible_columns, grid_arrays


def mixtral_problem(**fields) -> SearchProblem:
    """Mixtral 8x7B on two H100 nodes: EP inside and across the NVLink domain, pp 2 and 4 (DualPipe,
    ZB-H1, interleaving), etp 1 or tp; a few thousand candidates so the exhaustive path stays quick."""
    base = dict(
        model=load_model("mixtral-8x7b"),
        system=load_system("dgx-h100-80gb"),
        gpus=16,
        seq_length=4096,
        global_batch=32,
        tp=(1, 2),
        pp=(2, 4),
        micro_batch=(1,),
        recompute=("full",),
        zero=(1,),
        ep=(2, 8),
        dispatchers=("alltoall", "deepep"),
        vary_offload=False,
        vary_placement=False,
    )
    return SearchProblem(**{**base, **fields})


# context parallelism inside and beyond the 8-GPU NVLink domain (cp 16 and 32 cross it in every placement): the K/V
# ring's exposure floor of the exact layer floors (search.expert_floors.ring_floor_s) on both of its spans
CP_PROBLEM = mixtral_problem(
    global_batch=16,
    tp=(1,),
    pp=(1, 2),
    cp=(1, 2, 16),
    dispatchers=("alltoall",),
    vary_placement=True,
)


@pytest.fixture(scope="module")
def reference():
    p = mixtral_problem()
    return p, exhaustive_search(p, top_k=10)


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [None, 1])
def test_moe_fast_search_equals_exhaustive(reference, chunk, monkeypatch):
    p, want = reference
    if chunk is not None:
        monkeypatch.setattr(row_scan, "CHUNK_CANDIDATES", chunk)
    got = search(p, top_k=10)
    assert got.candidates == want.candidates
    assert [r.key for r in got.plans] == [r.key for r in want.plans]
    assert [r.plan.model_dump() for r in got.plans] == [r.plan.model_dump() for r in want.plans]
    for a, b in zip(got.plans, want.plans):
        assert math.isclose(a.objective, b.objective, rel_tol=1e-9)
    if chunk == 1:
        assert got.evaluated < got.candidates  # the bounds pruned something


@pytest.mark.slow
def test_moe_problem_exercises_the_new_axes(reference):
    p, want = reference
    everything = search(p, top_k=10, collect_all=True).all_feasible
    plans = [item["plan"] for item in everything]
    assert {q.ep for q in plans} == {2, 8}
    assert {q.etp for q in plans} == {1, 2}
    assert {q.moe_dispatcher for q in plans} == {"alltoall", "deepep"}
    assert {q.moe_a2a_overlap for q in plans} == {False, True}
    assert {"zb-h1", "dualpipe", "interleaved", "1f1b", "gpipe"} <= {q.schedule for q in plans}
    assert any(r.plan.ep > 1 for r in want.plans)


def test_expert_options_follow_the_plan_rules():
    p = mixtral_problem(ep=None, dispatchers=None)
    # tp·cp·dp = 2·1·4 = 8 ranks per stage: ep·etp must divide 8 and ep the 8 experts
    options = p.expert_options(2, 1, 4)
    assert {(ep, etp) for ep, etp, _, _ in options} == {
        (1, 1),
        (2, 1),
        (4, 1),
        (8, 1),
        (1, 2),
        (2, 2),
        (4, 2),
    }
    assert {d for _, _, d, _ in options} == {"alltoall", "allgather", "deepep"}
    assert not any(ov for ep, etp, _, ov in options if ep * etp == 1)  # nothing to overlap
    # deepep cannot pad to capacity: dropped when the problem fixes a capacity factor
    assert {
        d
        for _, _, d, _ in mixtral_problem(
            ep=None, dispatchers=None, capacity_factor=1.25
        ).expert_options(2, 1, 4)
    } == {"alltoall", "allgather"}
    dense = SearchProblem(
        model=load_model("llama3-8b"),
        system=load_system("dgx-h100-80gb"),
        gpus=8,
        seq_length=4096,
        global_batch=8,
    )
    assert dense.expert_options(2, 1, 4) == [(1, 1, "alltoall", False)]


def test_split_backward_schedules_default_to_moe_models_only():
    moe = mixtral_problem()
    assert {s for _, s, _ in moe.schedule_options(2, 16)} >= {"zb-h1", "dualpipe"}
    assert "dualpipe" not in {s for _, s, _ in moe.schedule_options(2, 15)}  # odd micro-batch count
    dense = SearchProblem(
        model=load_model("llama3-8b"),
        system=load_system("dgx-h100-80gb"),
        gpus=8,
        seq_length=4096,
        global_batch=8,
    )
    assert not {s for _, s, _ in dense.schedule_options(2, 16)} & {"zb-h1", "dualpipe"}
    asked = SearchProblem(
        model=load_model("llama3-8b"),
        system=load_system("dgx-h100-80gb"),
        gpus=8,
        seq_length=4096,
        global_batch=8,
        schedules=("1f1b", "zb-h1"),
    )
    assert {s for _, s, _ in asked.schedule_options(2, 16)} == {"1f1b", "zb-h1"}


def test_moe_tp_without_sequence_parallel_is_not_in_the_space():
    p = mixtral_problem()
    assert all(knob[0] for knob in p.layer_knobs(2, 1))


@pytest.mark.parametrize("zero", [1, 3])
def test_search_columns_carry_the_expert_knobs_and_match_the_estimate(zero):
    """The CSV columns of a candidate are its plan: ep / etp / dispatcher / overlap / schedule, and the
    step time the vectorised path gives equals estimate() of that plan; under ZeRO-3 too, with the dense and
    expert groups' block collectives (step.inputs.zero3_group_calls) and the gathered MoE layer with its experts
    (step.stage_memory.zero3_unit_params)."""
    p = mixtral_problem(zero=(zero,))
    table = RowTable(p)
    options = GridIndex(p, table)
    rows = [r for r in range(table.size) if options.lengths[r]][::7][:12]

    group_row, group_start = options.groups(np.array(rows))
    index, grid_index = expand(group_row, group_start, options.group_size[group_row])
    # the groups cover the rows' whole grids, in order: options 0 .. lengths[r] − 1 of each row
    every_index, every_option = expand(
        np.array(rows), np.zeros(len(rows), dtype=np.int64), options.lengths[rows]
    )
    assert np.array_equal(index, every_index) and np.array_equal(grid_index, every_option)
    values = options.values(index, grid_index)
    step, peak, _ = evaluate_groups(table, options, group_row, group_start)
    columns = feasible_columns(table, index, values, step, step, peak, np.ones(len(index)))
    for i in range(0, len(index), 5):
        plan = run.plan_of(
            p, table.row(int(index[i])), options.option(int(index[i]), int(grid_index[i]))
        )
        for field in (
            "ep",
            "etp",
            "moe_dispatcher",
            "moe_a2a_overlap",
            "schedule",
            "vpp",
            "tp",
            "pp",
        ):
            assert columns[field][i] == getattr(plan, field), field
        e = estimate(p.model, p.system, plan)
        assert math.isclose(step[i], e.step_time_s, rel_tol=1e-9)
        assert math.isclose(peak[i], e.peak_stage.peak_bytes, rel_tol=1e-9)
    arrays = grid_arrays((p.schedule_options(2, 16), [(1, True, True)], [(False, False, False)]))
    assert arrays["dualpipe"].any() and arrays["zb"].any()


def _cli(capsys, *argv: str) -> tuple[int, str]:
    from paraplan.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code or 0, out + err


def test_cli_searches_an_moe_model_and_refuses_impossible_expert_axes(capsys):
    base = [
        "search",
        "-m",
        "mixtral-8x7b",
        "-s",
        "dgx-h100-80gb",
        "--gpus",
        "16",
        "--global-batch",
        "32",
        "--seq-length",
        "4096",
        "--tp",
        "1,2",
        "--pp",
        "2",
        "--micro-batch",
        "1",
        "--recompute",
        "full",
        "--zero",
        "1",
        "--no-offload",
        "--default-placement",
        "--default-overlap",
        "--top",
        "3",
        "--width",
        "250",
    ]
    code, text = _cli(capsys, *base, "--ep", "8", "--dispatcher", "alltoall")
    assert code == 0 and " ep8 alltoall" in text
    code, text = _cli(capsys, *base, "--ep", "3")
    assert (
        code == 2
        and "ep: [3]" in text
        and "must divide experts=8" in text
        and "Traceback" not in text
    )
    code, text = _cli(
        capsys,
        "search",
        "-m",
        "llama3-8b",
        "-s",
        "dgx-h100-80gb",
        "--gpus",
        "8",
        "--global-batch",
        "32",
        "--seq-length",
        "4096",
        "--ep",
        "2",
    )
    assert code == 2 and "ep: [2] is not allowed; " in text and "(llama3-8b is dense)" in text


def test_cli_vary_split_finds_the_uneven_layouts_deepseek_v3_runs_use(capsys):
    """``--vary-split`` searches the accounting switches' splits with every schedule: on the README's restricted
    DeepSeek-V3 search the best plan counts the loss and the MTP module as layers (first / last stage 4 / 1 on pp 16,
    the layout of the Megatron-Bridge runs) and is faster than the best plan without it."""
    import json

    base = [
        "search",
        "-m",
        "deepseek-v3",
        "-s",
        "dgx-h800",
        "--gpus",
        "2048",
        "--seq-length",
        "4096",
        "--global-batch",
        "15360",
        "--dtype",
        "fp8",
        "--tp",
        "1,2",
        "--pp",
        "16",
        "--cp",
        "1",
        "--ep",
        "32,64",
        "--micro-batch",
        "1",
        "--no-offload",
        "--default-placement",
        "--default-overlap",
        "--memory-headroom",  # the split layouts at the full 80 GiB (these plans peak near it)
        "0",
        "--top",
        "1",
        "--json",
    ]
    code, plain = _cli(capsys, *base)
    assert (
        code == 0 and "note: the best plan has pp 16; --vary-split also searches" in plain
    )  # on stderr
    code, varied = _cli(capsys, *base, "--vary-split")
    assert code == 0 and "--vary-split also searches" not in varied
    plain, varied = (
        json.loads(text[text.index("{") : text.rindex("}") + 1]) for text in (plain, varied)
    )
    assert (
        varied["problem"]["restrictions"]["vary_split"]
        and not plain["problem"]["restrictions"]["vary_split"]
    )
    plain, varied = plain["plans"][0], varied["plans"][0]
    # the loss-only split (loss and MTP as layers, the embedding not) is vary_split's: the plain search may still
    # count both as layers for interleaving (grid_axes._interleave_options), as its best plan does since the MLA
    # activation correction (graph.mla.attention_activation_bytes) lets vpp 2 fit
    loss_only = [
        p["plan"].get("loss_as_layer") and not p["plan"].get("embedding_as_layer")
        for p in (plain, varied)
    ]
    assert loss_only == [False, True]
    assert varied["step_time_s"] < 0.9 * plain["step_time_s"]


def _reference_cost_facts(model, system, shape, tp_span, cp_span):
    """block_cost_facts without any sharing: every kind's graph built from scratch for exactly this
    shape (graph.moe.build_moe_model_layer) and costed by the uncached block_compute / block_comm."""
    from paraplan.graph.moe import build_moe_model_layer, mtp_block
    from paraplan.graph.ops import (
        LayerGraph,
        largest_weight_params,
        weight_stat_fields,
        weight_tensor_stats,
    )
    from paraplan.step.build import (
        BLOCK_KINDS,
        BlockCostFacts,
        _NO_SPAN,
        _TP_GROUPS,
        block_comm,
        block_compute,
        model_block_kinds,
    )

    out = {}
    for name in model_block_kinds(model):
        if name in ("dense_layer", "moe_layer"):
            graph = build_moe_model_layer(model, shape, name == "moe_layer")
        elif name == "experts":
            graph = LayerGraph(
                "experts", (), (), build_moe_model_layer(model, shape, True).expert_weight_params
            )
        elif name == "mtp":
            graph = (
                mtp_block.__wrapped__(model, shape)
                if model.mtp_layers
                else BLOCK_KINDS[name].graph(model, shape)
            )
        else:
            graph = BLOCK_KINDS[name].graph(model, shape)
        used = {c.group for c in graph.collectives}
        comm = block_comm.__wrapped__(
            graph,
            system,
            tp_span if used & _TP_GROUPS else _NO_SPAN,
            cp_span if "cp" in used else _NO_SPAN,
            model,
            shape,
        )
        tensors, _, small = weight_tensor_stats.__wrapped__(graph, *weight_stat_fields(model))
        out[name] = BlockCostFacts(
            block_compute.__wrapped__(graph, system, shape.dtype),
            comm,
            graph.weight_params,
            largest_weight_params(graph),
            tensors,
            small,
        )
    return out


@pytest.mark.parametrize(
    "problem",
    [
        mixtral_problem(dispatchers=None, ep=(1, 2, 8), recompute=None),
        mixtral_problem(
            dispatchers=None, ep=(2, 8), dtype="fp8", capacity_factor=1.25, moe_balance="forced"
        ),
        SearchProblem(
            model=load_model("deepseek-v3"),
            system=load_system("dgx-h800"),
            gpus=64,
            seq_length=4096,
            global_batch=64,
            tp=(1, 2),
            pp=(8,),
            micro_batch=(1,),
            ep=(4, 8),
            vary_placement=False,
        ),
    ],
    ids=["mixtral", "mixtral-fp8-capacity", "deepseek-v3"],
)
def test_shared_moe_costings_equal_costings_from_scratch(problem):
    """block_cost_facts shares the expert-independent kinds across expert options, the ops across
    dispatchers and the graph across the a2a-overlap switch (step.build.block_cost_facts, graph.moe.
    moe_model_layer): every row's costs equal those built from scratch, to the last bit."""
    from paraplan.graph.moe import build_moe_model_layer, moe_model_layer
    from paraplan.search.space import rows
    from paraplan.search.table import _expert_shape, layer_shape_of
    from paraplan.specs.recompute import modules_of as default_recompute_modules
    from paraplan.step.build import COLD_CACHES, block_cost_facts

    for cached in COLD_CACHES:
        cached.cache_clear()
    model, system = problem.model, problem.system
    seen, dispatchers, overlaps = set(), set(), set()
    for row in rows(problem):
        expert = _expert_shape(
            problem, (row.dims.ep, row.dims.etp, row.dispatcher, row.a2a_overlap)
        )
        shape = layer_shape_of(
            problem,
            row.dims.tp,
            row.dims.cp,
            row.micro_batch,
            row.sequence_parallel,
            row.tp_layout,
            row.tp_rows or 0,
            expert,
            default_recompute_modules(row.recompute),
        )
        key = (shape, row.spans["tp"], row.spans["cp"])
        if key in seen:
            continue
        seen.add(key)
        dispatchers.add(row.dispatcher)
        overlaps.add(row.a2a_overlap)
        assert block_cost_facts(model, system, shape, *key[1:]) == _reference_cost_facts(
            model, system, shape, *key[1:]
        )
        for moe in (False, True):
            shared, fresh = (
                moe_model_layer(model, shape, moe),
                build_moe_model_layer(model, shape, moe),
            )
            assert (
                shared.ops,
                shared.collectives,
                shared.weight_params,
                shared.expert_weight_params,
                shared.activation_bytes,
                shared.dispatch_buffer_bytes,
            ) == (
                fresh.ops,
                fresh.collectives,
                fresh.weight_params,
                fresh.expert_weight_params,
                fresh.activation_bytes,
                fresh.dispatch_buffer_bytes,
            )
    assert dispatchers >= {"alltoall", "allgather"}
    assert overlaps == {False, True}


@pytest.mark.slow
def test_block_search_equals_exhaustive(reference):
    """Block by block (search.blocks: a block's row table built only when its admissible bound can
    still enter the top K) the fast path returns what the exhaustive path and the one-table path return."""
    p, want = reference
    for got in (search(p, top_k=10, blocks=True), search(p, top_k=10, blocks=False)):
        assert got.candidates == want.candidates and got.rows == want.rows
        assert [r.key for r in got.plans] == [r.key for r in want.plans]
        assert [r.plan.model_dump() for r in got.plans] == [r.plan.model_dump() for r in want.plans]
        assert [[q.model_dump() for q in r.equivalents] for r in got.plans] == [
            [q.model_dump() for q in r.equivalents] for r in want.plans
        ]
        for a, b in zip(got.plans, want.plans):
            assert math.isclose(a.objective, b.objective, rel_tol=1e-9)
    assert search(p, top_k=10, blocks=True).rows_evaluated < want.rows  # whole blocks were skipped


@pytest.mark.slow
def test_long_context_parallel_search_equals_exhaustive():
    """On CP_PROBLEM the block search (whose exact layer floors add the K/V ring's exposure floor) returns what the
    exhaustive path returns, and the ring floor prunes: blocks with cp 16 / 32 are bounded above the cp 1 ones."""
    from paraplan.search.bounds.blocks import block_step_floor, blocks, layer_floors

    want = exhaustive_search(CP_PROBLEM, top_k=10)
    got = search(CP_PROBLEM, top_k=10, workers=1)
    assert [(c.key, c.estimate.step_time_s) for c in got.plans] == [
        (c.key, c.estimate.step_time_s) for c in want.plans
    ]
    floors = {
        b.cp: block_step_floor(CP_PROBLEM, b, layer_floors(CP_PROBLEM, b.tp, b.cp, b.micro_batch))
        for b in blocks(CP_PROBLEM)
        if b.pp == 1
    }
    assert floors[16] > 2 * floors[1]


def test_search_over_every_split_equals_exhaustive():
    """With vary_split (every split of SearchProblem.split_options with every schedule) the block-by-block and
    one-table paths return what the exhaustive path returns, and the search reaches splits the default space
    does not hold."""
    p = mixtral_problem(
        vary_split=True,
        tp=(1,),
        ep=(2,),
        dispatchers=("deepep",),
        global_batch=64,
        micro_batch=(2,),
    )
    want = exhaustive_search(p, top_k=10)
    plain = search(
        mixtral_problem(
            tp=(1,), ep=(2,), dispatchers=("deepep",), global_batch=64, micro_batch=(2,)
        ),
        top_k=10,
    )
    assert want.candidates > plain.candidates
    for got in (search(p, top_k=10, blocks=True), search(p, top_k=10, blocks=False)):
        assert got.candidates == want.candidates and got.rows == want.rows
        assert [r.key for r in got.plans] == [r.key for r in want.plans]
        assert [r.plan.model_dump() for r in got.plans] == [r.plan.model_dump() for r in want.plans]
        for a, b in zip(got.plans, want.plans):
            assert math.isclose(a.objective, b.objective, rel_tol=1e-9)
    everything = search(p, top_k=10, collect_all=True).all_feasible
    splits = {
        (
            item["plan"].pp,
            item["plan"].schedule,
            item["plan"].embedding_as_layer,
            item["plan"].loss_as_layer,
        )
        for item in everything
    }
    assert {(4, "1f1b", e, l) for e in (False, True) for l in (False, True)} <= splits
    # pp 2: the embedding counted alone and both counted split 16 / 16 again, as the default does: one of them kept
    assert p.split_options(2) == ((False, False), (False, True)) and p.split_options(1) == (
        (False, False),
    )


@pytest.mark.parametrize(
    "problem",
    [
        mixtral_problem(
            dispatchers=None, ep=(1, 2, 8), recompute=None, micro_batch=None, zero=None
        ),
        mixtral_problem(
            schedules=("1f1b", "interleaved", "zb-h1", "dualpipe", "gpipe"),
            pp=(2, 4),
            global_batch=64,
            micro_batch=(1, 2),
            vary_offload=True,
            vary_placement=True,
        ),
        mixtral_problem(
            vary_split=True,
            schedules=("1f1b", "interleaved", "zb-h1", "dualpipe", "gpipe"),
            pp=(2, 4),
            global_batch=64,
            micro_batch=(1, 2),
            ep=(2,),
        ),
        CP_PROBLEM,
    ],
    ids=["mixtral-axes", "mixtral-schedules", "mixtral-splits", "mixtral-long-cp"],
)
def test_block_bounds_are_admissible_and_blocks_are_row_ranges(problem):
    """Every block's rows are the canonical rows [offset, offset + rows) (its own row table lists them
    in that order), and its bound is at most the objective of every feasible candidate it holds."""
    from paraplan.search.bounds.blocks import block_step_floor, blocks, layer_floors
    from paraplan.search.space import rows

    parts = blocks(problem)
    canonical = list(rows(problem))
    assert parts[-1].offset + parts[-1].rows == len(canonical)
    for b in parts:
        table = RowTable(b.problem(problem))
        assert table.size == b.rows
        for i in range(table.size):
            want = canonical[b.offset + i]
            assert table.row(i) == replace_spans(want)
    # every feasible candidate of the whole space (no bound), as collect_all evaluates it, handed over as
    # columns (the search's feasible_sink): collect_all's plan objects (~120,000 PlanSpecs, most of this
    # test's time) are not read here. A candidate's block is its factorization, micro-batch and batch.
    key_fields = ("tp", "pp", "cp", "dp", "micro_batch", "global_batch")
    index = {tuple(getattr(b, f) for f in key_fields): i for i, b in enumerate(parts)}
    assert len(index) == len(parts)  # the key names one block
    lowest = {}

    def sink(columns):
        keys = zip(*(columns[name].tolist() for name in key_fields))
        for key, step in zip(keys, columns["step_time_s"].tolist()):
            i = index[key]
            lowest[i] = min(lowest.get(i, math.inf), step)

    search(problem, top_k=10, feasible_sink=sink)
    assert len(lowest) > 1
    for i, step in lowest.items():
        b = parts[i]
        assert (
            block_step_floor(problem, b, layer_floors(problem, b.tp, b.cp, b.micro_batch)) <= step
        )


def replace_spans(row):
    """A space.rows Row as RowTable.row gives it (no spans)."""
    from dataclasses import replace

    return replace(row, spans={})


def test_row_bounds_are_admissible_with_split_backward_schedules():
    """RowTable.lower_bounds never exceeds the step of a row's best feasible candidate, also when the
    row's grid has ZB-H1 / DualPipe, whose bubble is far below 1F1B's (it used to keep (L − F)·u/v_max)."""

    p = mixtral_problem(
        schedules=("1f1b", "zb-h1", "dualpipe"), pp=(2, 4), global_batch=64, micro_batch=(1, 2)
    )
    _, _, bound, best = row_bounds_and_steps(p)
    assert len(best) > 100
    assert all(bound[r] <= step for r, step in best.items())


def row_bounds_and_steps(p):
    """(row table, grid index, RowTable.lower_bounds of every row, {row: least step of its feasible candidates})."""
    table = RowTable(p)
    options = GridIndex(p, table)
    bound = table.lower_bounds(options.v_max, options.split_backward)
    best: dict[int, float] = {}
    for item in search(p, top_k=10, collect_all=True).all_feasible:
        best[item["row"]] = min(best.get(item["row"], math.inf), item["step_time_s"])
    return table, options, bound, best


def tiny_deepseek():
    """DeepSeek-V3's layer kinds (MLA, a dense first layer, shared + routed experts, MTP) at a size that
    fits a few dozen GPUs: 8 layers, hidden 2048, 32 experts."""
    model = load_model("deepseek-v3")
    return model.model_copy(
        update=dict(
            name="tiny-deepseek",
            layers=8,
            hidden=2048,
            heads=16,
            kv_heads=16,
            ffn_hidden=5632,
            experts=32,
            moe_ffn_hidden=512,
            shared_ffn_hidden=512,
            dense_layers=1,
            q_lora_rank=512,
            kv_lora_rank=256,
            vocab=32000,
        )
    )


def _least_step_per_block(problem):
    """(blocks, {block index: least step time of its feasible candidates}) from the whole space: every feasible
    candidate's columns (the search's ``feasible_sink``, one table, no bound), a block found by its factorization
    and micro-batch."""
    from paraplan.search.bounds.blocks import blocks

    parts = blocks(problem)
    index = {(b.tp, b.pp, b.cp, b.dp, b.micro_batch): i for i, b in enumerate(parts)}
    least: dict[int, float] = {}

    def sink(columns):
        keys = zip(*(columns[name].tolist() for name in ("tp", "pp", "cp", "dp", "micro_batch")))
        for key, step in zip(keys, columns["step_time_s"].tolist()):
            i = index[key]
            least[i] = min(least.get(i, math.inf), step)

    search(problem, top_k=10, feasible_sink=sink)
    return parts, least


@pytest.mark.slow
@pytest.mark.parametrize(
    "problem, memory",
    [
        (
            mixtral_problem(
                dispatchers=None,
                ep=(1, 2, 8),
                recompute=None,
                cp=(1, 2, 4),
                vary_placement=True,
                sequence_parallel=None,
            ),
            False,
        ),
        (
            mixtral_problem(
                schedules=("1f1b", "interleaved", "zb-h1", "dualpipe"),
                pp=(2, 4),
                global_batch=64,
                micro_batch=(1, 2),
                recompute=None,
                vary_offload=True,
                vary_placement=True,
            ),
            False,
        ),
        (
            mixtral_problem(
                recompute=None,
                micro_batch=(1, 2, 4),
                seq_length=16384,
                global_batch=32,
                vary_offload=True,
            ),
            True,
        ),
        (
            SearchProblem(
                model=tiny_deepseek(),
                system=load_system("dgx-h800"),
                gpus=32,
                seq_length=4096,
                global_batch=64,
                tp=(1, 2),
                pp=(1, 2, 4),
                cp=(1, 2, 4),
                micro_batch=(1, 2),
                ep=(4, 8),
                zero=(1, 2),
                vary_placement=True,
                vary_offload=False,
                vary_split=True,
            ),
            False,
        ),
        (
            SearchProblem(
                model=load_model("gpt3-13b"),
                system=load_system("dgx-a100-80gb"),
                gpus=16,
                seq_length=16384,
                global_batch=16,
                tp=(1, 2, 4),
                pp=(1, 2),
                cp=(1, 2),
                micro_batch=(1, 2),
                zero=(0, 1),
                vary_placement=True,
            ),
            True,
        ),
    ],
    ids=["mixtral-cp", "mixtral-schedules", "mixtral-memory", "deepseek-like", "gpt3-13b-memory"],
)
def test_refined_block_bounds_are_admissible(problem, memory):
    """search.blocks.refined_bound (block work with its exposed TP / CP communication and recompute per
    recompute mode, modes whose activations cannot fit without offload held to the streaming floor or
    dropped) is at most the step time of every feasible candidate of the block (so of every row's
    best), at least the compute-only bound, and above it on some block; on the ``memory`` problems
    some block has a recompute mode whose activations cannot fit in HBM without offload."""
    from paraplan.step.constants import system_terms
    from paraplan.search.bounds.blocks import (
        REFINEMENTS,
        activation_floor_bytes,
        block_step_floor,
        layer_floors,
        refined_bound,
    )

    parts, least = _least_step_per_block(problem)
    assert len(least) > 1
    cache: dict = {}
    raised = by_memory = 0
    for i, step in least.items():
        b = parts[i]
        coarse = layer_floors(problem, b.tp, b.cp, b.micro_batch)
        low = block_step_floor(problem, b, coarse)
        bounds = [
            refined_bound(problem, b, coarse, cache, level) for level in REFINEMENTS
        ]  # cheapest first
        assert all(low <= bound <= step for bound in bounds), (b, low, bounds, step)
        raised += bounds[-1] > low
        by_memory += bounds[0] > low
    assert raised
    if memory:
        assert (
            by_memory
        )  # the memory level alone raises some block: its activations force recomputation
        reserved, capacity = (
            system_terms(problem.system, problem.dtype, problem.runtime)["reserved_bytes"],
            problem.system.accelerator.hbm_capacity,
        )
        assert any(
            activation_floor_bytes(problem, b, cache[key].kept[mode], cache[key].held[mode])
            + reserved
            > capacity
            for b in parts
            for key in cache
            if key[:3] == (b.tp, b.cp, b.micro_batch) and key[4] == "all"
            for mode in cache[key].kept
        )


@pytest.mark.parametrize(
    "model_name, dtype",
    [
        ("deepseek-v3", "bf16"),
        ("deepseek-v3", "fp8"),
        ("mixtral-8x22b", "fp8"),
        ("qwen3-30b-a3b", "bf16"),
        ("gpt-oss-120b", "bf16"),
    ],
)
def test_expert_computes_equal_each_expert_options_graph(model_name, dtype):
    """search.expert_floors.expert_computes builds a block kind once and adds each expert option's own ops
    (graph.moe_mlp.expert_knob_ops): every field equals step.build.block_compute of the graph built for that
    option (to summation order), for every kind, recompute module list and expert option."""

    from paraplan.search.bounds.expert_floors import costing_experts, expert_computes
    from paraplan.search.table import layer_shape_of
    from paraplan.step.build import BLOCK_KINDS, EXPERT_FREE_KINDS, block_compute, model_block_kinds

    problem = SearchProblem(
        model=load_model(model_name),
        system=load_system("dgx-h100-80gb"),
        gpus=256,
        seq_length=4096,
        global_batch=512,
        dtype=dtype,
    )
    model, system = problem.model, problem.system
    checked = 0
    for tp, cp, mb in ((1, 1, 1), (2, 2, 3), (4, 1, 2)):
        experts = costing_experts(problem, tp)
        assert len(experts) > 1
        for modules in ((), ("core_attn",), ("moe_act", "layernorm"), ("mlp",)):
            shape = layer_shape_of(problem, tp, cp, mb, tp > 1, "1d", 0, experts[0], modules)
            for name in model_block_kinds(model):
                if name in EXPERT_FREE_KINDS:
                    continue
                split = expert_computes(model, system, name, shape, experts)
                for i, expert in enumerate(experts):
                    graph = BLOCK_KINDS[name].graph(model, shape._replace(expert=expert))
                    whole = block_compute(graph, system, dtype)
                    got = split[i] if len(split) > 1 else split[0]
                    for field in whole._fields:
                        assert getattr(got, field) == pytest.approx(
                            getattr(whole, field), rel=1e-12, abs=0.0
                        ), (name, expert, field)
                    checked += 1
    assert checked > 100


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_expert_knob_inputs_are_all_the_expert_ops_read(dtype):
    """graph.moe_mlp.expert_knob_inputs names everything expert_knob_ops reads of a layer shape: shapes of
    different tp, cp, micro-batch and sequence parallelism that agree on it give equal ops (search.blocks
    memoises the ops' compute on it), and shapes that differ on it exist in the grid (the test can fail)."""
    from itertools import product

    from paraplan.graph.moe_mlp import expert_knob_inputs, expert_knob_ops
    from paraplan.graph.ops import ExpertShape
    from paraplan.search.table import layer_shape_of

    problem = SearchProblem(
        model=load_model("deepseek-v3"),
        system=load_system("dgx-h800"),
        gpus=256,
        seq_length=4096,
        global_batch=512,
        dtype=dtype,
    )
    expert = ExpertShape(8, 1, "alltoall", None, "learned", False)
    seen: dict = {}
    shared = 0
    for tp, cp, mb, sp in product((1, 2, 4, 8), (1, 2, 4), (1, 2, 3, 4, 6, 8), (False, True)):
        if sp and tp == 1:
            continue
        shape = layer_shape_of(problem, tp, cp, mb, sp, "1d", 0, expert)
        ops = expert_knob_ops(problem.model, shape, expert)
        key = expert_knob_inputs(shape)
        if key in seen:
            assert ops == seen[key], (tp, cp, mb, sp)
            shared += 1
        else:
            seen[key] = ops
    assert shared > 10 and len(seen) > 10


@pytest.mark.parametrize("model_name", ["deepseek-v3", "mixtral-8x7b"])
def test_dispatch_floors_are_the_least_ep_terms_of_the_options_rows(model_name):
    """search.expert_floors.DispatchFloors gives, per expert option, the least exposed dispatch + combine that a row of
    that (ep, etp) can have: step.compose.expert_exposure on the row's own costing (step.build.block_cost_facts), over
    every dispatcher and a2a-overlap switch of SearchProblem.expert_switches — equal, not merely below."""

    from paraplan.step.compose import expert_exposure
    from paraplan.search.bounds.expert_floors import (
        DispatchFloors,
        costing_experts,
        expert_computes,
    )
    from paraplan.search.table import layer_shape_of
    from paraplan.step.build import block_cost_facts
    from paraplan.step.plan_spans import plan_spans
    from paraplan.specs.plan import PlanSpec

    problem = SearchProblem(
        model=load_model(model_name),
        system=load_system("dgx-h100-80gb"),
        gpus=64,
        seq_length=4096,
        global_batch=256,
    )
    model, system = problem.model, problem.system
    spans = plan_spans(
        PlanSpec(gpus=64, seq_length=4096, tp=2, pp=1, dp=32, micro_batch=1, global_batch=256),
        system,
    )
    experts = costing_experts(problem, 2)
    shape = layer_shape_of(problem, 2, 1, 2, True, "1d", 0, experts[0])
    computes = expert_computes(model, system, "moe_layer", shape, experts)
    dispatch = DispatchFloors(problem)
    floors = [dispatch(shape, x, compute) for x, compute in zip(experts, computes)]
    checked = 0
    for x, floor in zip(experts, floors):
        totals = []
        for dispatcher, overlap in problem.expert_switches(x.ep, x.etp):
            row = shape._replace(expert=x._replace(dispatcher=dispatcher, a2a_overlap=overlap))
            facts = block_cost_facts(model, system, row, spans["tp"], spans["cp"])["moe_layer"]
            forward, backward = expert_exposure(facts.compute, facts.comm)
            totals.append(float(forward + backward))
        assert floor == pytest.approx(min(totals), rel=1e-9), (x, floor, totals)
        checked += 1
    assert checked == len(experts) > 4 and max(floors) > 0


@pytest.mark.parametrize(
    "model_name",
    [
        "deepseek-v3",
        "kimi-k2",
        "qwen3-30b-a3b",
        "qwen3-235b-a22b",
        "mixtral-8x7b",
        "mixtral-8x22b",
        "gpt-oss-120b",
        "grok-1",
    ],
)
def test_least_memory_expert_keeps_the_least_of_every_option(model_name):
    """search.expert_floors.least_memory_expert (the least ep and etp) keeps, in every block kind and recompute mode,
    the least activation bytes and held bytes over every expert option (search.blocks.memory_floors reads only
    it), for learned and forced balance, dropless and capacity-bound, bf16 and fp8; and the options do differ
    in what they keep (the test can fail)."""
    from paraplan.search.bounds.expert_floors import costing_experts, least_memory_expert
    from paraplan.search.table import layer_shape_of
    from paraplan.specs.recompute import modules_of as default_recompute_modules
    from paraplan.step.build import kind_memory_facts, model_block_kinds

    differs = 0
    for balance, capacity, dtype in (
        ("learned", None, "bf16"),
        ("forced", None, "fp8"),
        ("learned", 1.25, "bf16"),
    ):
        problem = SearchProblem(
            model=load_model(model_name),
            system=load_system("dgx-h800"),
            gpus=256,
            seq_length=4096,
            global_batch=512,
            dtype=dtype,
            moe_balance=balance,
            capacity_factor=capacity,
        )
        model = problem.model
        for tp, cp, mb in ((1, 1, 1), (2, 2, 3), (4, 1, 2), (8, 1, 1)):
            options = costing_experts(problem, tp)
            least = least_memory_expert(problem, tp)
            assert least in options
            for recompute in ("none", "selective", "full"):
                modules = default_recompute_modules(recompute)
                for sp in {False, tp > 1}:
                    shapes = [
                        layer_shape_of(problem, tp, cp, mb, sp, "1d", 0, x, modules)
                        for x in options
                    ]
                    chosen = layer_shape_of(problem, tp, cp, mb, sp, "1d", 0, least, modules)
                    for name in model_block_kinds(model):
                        every = [
                            kind_memory_facts(model, shape, name, recompute) for shape in shapes
                        ]
                        mine = kind_memory_facts(model, chosen, name, recompute)
                        assert mine.activation_bytes == min(f.activation_bytes for f in every), (
                            name,
                            recompute,
                            tp,
                        )
                        assert mine.held_bytes == min(f.held_bytes for f in every), (
                            name,
                            recompute,
                            tp,
                        )
                        differs += len({f.activation_bytes for f in every}) > 1
    assert differs


@given(st.lists(st.tuples(st.floats(0.0, 1e3), st.floats(0.0, 1e3)), min_size=1, max_size=30))
def test_least_with_is_the_least_sum_and_skips_what_cannot_win(pairs):
    """search.expert_floors.least_with(totals, extra) is min_j totals[j] + extra(j) for extras >= 0 (the same value,
    the same bits), evaluating extra(j) only for an entry whose total alone is below the least so far."""
    from paraplan.search.bounds.expert_floors import least_with

    totals = [t for t, _ in pairs]
    asked = []

    def extra(j):
        asked.append(j)
        return pairs[j][1]

    best = least_with(totals, extra)
    assert best == min(t + e for t, e in pairs)
    so_far = float("inf")
    for j in asked:  # each evaluated entry could still have been the least when it was evaluated
        assert totals[j] < so_far
        so_far = min(so_far, totals[j] + pairs[j][1])
    assert all(
        totals[j] >= best for j in range(len(pairs)) if j not in asked
    )  # the skipped could not win


@pytest.mark.parametrize("workers", [2, 3])
def test_block_search_in_processes_finds_the_same_plans(monkeypatch, workers):
    """``workers`` > 1 splits a block search over processes by costing class (search.block_processes), each pruning
    against the least published threshold: the same plans, objectives and ranks as one process; every block is in
    exactly one part, a class in one part only."""
    from paraplan.search.bounds import block_processes
    from paraplan.search.bounds.blocks import blocks as space_blocks, costing_class

    problem = mixtral_problem(
        ep=(1, 2, 8), cp=(1, 2), micro_batch=(1, 2), global_batch=64, recompute=None
    )
    one = search(problem, top_k=10, blocks=True)
    parts_seen = []
    real_run_parts = block_processes.run_parts

    def spy(task, parts, top_k, blocks=0):
        parts_seen.append(parts)
        return real_run_parts(task, parts, top_k, blocks)

    monkeypatch.setattr(run, "PARALLEL_KEYS", 1)
    monkeypatch.setattr(run, "run_parts", spy)
    many = search(problem, top_k=10, blocks=True, workers=workers)
    assert [(r.key, r.objective, r.estimate.step_time_s) for r in many.plans] == [
        (r.key, r.objective, r.estimate.step_time_s) for r in one.plans
    ]
    assert [len(r.equivalents) for r in many.plans] == [len(r.equivalents) for r in one.plans]
    assert many.candidates == one.candidates and many.rows == one.rows
    (parts,) = parts_seen
    assert 1 < len(parts) <= workers
    every = space_blocks(problem)
    assert sorted(b.offset for part in parts for b in part) == [b.offset for b in every]
    owner = {}
    for i, part in enumerate(parts):
        assert [b.offset for b in part] == sorted(b.offset for b in part)
        for b in part:
            assert owner.setdefault(costing_class(problem, b), i) == i


def test_blocks_handed_over_to_a_process_that_finished_give_the_same_plans(monkeypatch):
    """A process that finished its own blocks searches those another one hands over (PartView.hand_over,
    help_until_done): here the second process holds one block and the first starts only once it waits, so the first
    hands its blocks over as it reaches them; the plans are one process's."""
    import time as clock

    from paraplan.search.bounds import block_processes
    from paraplan.search.bounds.blocks import blocks as space_blocks

    problem = mixtral_problem(
        ep=(1, 2, 8), cp=(1, 2), micro_batch=(1, 2), global_batch=64, recompute=None
    )
    one = search(problem, top_k=10, blocks=True)
    outcomes = []
    real_run_parts = block_processes.run_parts

    def after_the_other_waits(task, parts, top_k, blocks=0):
        def task_of(part, shared):
            if part is parts[0]:
                deadline = clock.monotonic() + 60
                while not shared.waiting() and clock.monotonic() < deadline:
                    clock.sleep(0.01)
                assert shared.waiting()
            return task(part, shared)

        outcomes.extend(real_run_parts(task_of, parts, top_k, blocks))
        return outcomes

    monkeypatch.setattr(run, "PARALLEL_KEYS", 1)
    monkeypatch.setattr(
        run,
        "split_by_costing_class",
        lambda parts, workers, costing_class: [parts[:-1], parts[-1:]],
    )
    monkeypatch.setattr(run, "run_parts", after_the_other_waits)
    two = search(problem, top_k=10, blocks=True, workers=2)
    assert [
        (r.key, r.objective, r.estimate.step_time_s, len(r.equivalents)) for r in two.plans
    ] == [(r.key, r.objective, r.estimate.step_time_s, len(r.equivalents)) for r in one.plans]
    first, second = (
        outcomes  # the second searched handed-over rows beyond its own block's (the first, once finished,
    )
    # helps too)
    assert (
        second.rows_done > space_blocks(problem)[-1].rows
        and first.rows_done + second.rows_done >= one.rows_evaluated
    )


def test_a_split_search_searches_as_one_process_does(monkeypatch):
    """The best groups here are spread over the processes: each one's own K-th group was looser than one process's,
    and a block's scan loosened the threshold the others had reached (281,952 candidates instead of 19,096 in one
    block, 606,848 in all). With the groups shared (PartView.offer_groups) and the scan's ``ceiling``, the processes
    evaluate the same plans as one process, and no more candidates than twice its count."""
    problem = SearchProblem(
        model=load_model("deepseek-v3"),
        system=load_system("dgx-h800"),
        gpus=64,
        seq_length=4096,
        global_batch=512,
        tp=(1, 2),
        pp=(1, 2, 4),
        cp=(1,),
        micro_batch=(1, 2),
    )
    one = search(problem, top_k=5, workers=1)
    monkeypatch.setattr(run, "PARALLEL_KEYS", 1)
    two = search(problem, top_k=5, workers=2)
    assert [(r.key, r.objective) for r in two.plans] == [(r.key, r.objective) for r in one.plans]
    assert two.evaluated <= 2 * one.evaluated


def test_a_kind_holding_expert_ops_must_declare_the_rest(monkeypatch):
    """search.expert_floors.expert_computes refuses a block kind whose graph holds ops that read the expert knobs but
    that declares neither BlockKind.expert_free_ops nor BlockKind.parts: one compute for every option would not be
    a floor of them."""
    from dataclasses import replace

    from paraplan.search.bounds import expert_floors
    from paraplan.search.table import layer_shape_of
    from paraplan.step.build import BLOCK_KINDS

    problem = mixtral_problem()
    experts = expert_floors.costing_experts(problem, 2)
    shape = layer_shape_of(problem, 2, 1, 1, True, "1d", 0, experts[0])
    undeclared = replace(BLOCK_KINDS["moe_layer"], expert_free_ops=lambda model, shape: None)
    monkeypatch.setitem(BLOCK_KINDS, "moe_layer", undeclared)
    for cache in expert_floors.EXPERT_CACHES:
        cache.cache_clear()
    with pytest.raises(ValueError, match="moe_layer holds ops that read the expert knobs"):
        expert_floors.expert_computes(problem.model, problem.system, "moe_layer", shape, experts)
    for cache in expert_floors.EXPERT_CACHES:
        cache.cache_clear()


def test_moe_searches_go_block_by_block():
    """search.run._by_blocks: an MoE model's space is searched block by block whatever its size (its rows cost every
    expert option's layers), a dense model's below BLOCK_ROWS rows in one table; the default path is the block one."""
    p = mixtral_problem()
    dense = SearchProblem(
        model=load_model("llama3-70b"),
        system=load_system("dgx-h100-80gb"),
        gpus=64,
        seq_length=8192,
        global_batch=128,
    )
    assert run._by_blocks(p) and not run._by_blocks(dense)
    default, by_blocks = search(p, top_k=5), search(p, top_k=5, blocks=True)
    assert (default.evaluated, default.rows_evaluated) == (
        by_blocks.evaluated,
        by_blocks.rows_evaluated,
    )
    assert [(r.key, r.objective) for r in default.plans] == [
        (r.key, r.objective) for r in search(p, top_k=5, blocks=False).plans
    ]


@pytest.mark.slow
def test_the_search_with_every_split_matches_or_beats_the_published_moe_layouts():
    """On each measured MoE run of the calibration set (moe-visible: Megatron-Bridge DeepSeek-V3 / Qwen3, Megatron-LM
    Mixtral), the search over the run's own degrees (tp, pp, cp, ep, micro-batch) with every layer split
    (``vary_split``) finds a plan predicted at most as slow as the published layout (its 4 / 1 first / last stages and
    recomputed modules included); without the splits only DeepSeek-V3's (61 layers, MTP) can be out of reach."""
    from paraplan.validate.case_files import Case, load_cases

    cases = [c for c in load_cases() if isinstance(c, Case) and c.file == "moe-visible"]
    assert len(cases) == 10
    slower_without = []
    for case in cases:
        plan = case.plan
        published = estimate(case.model, case.system, plan).step_time_s
        best = {}
        for vary in (False, True):
            problem = SearchProblem(
                model=case.model,
                system=case.system,
                gpus=plan.gpus,
                seq_length=plan.seq_length,
                global_batch=plan.global_batch,
                dtype=plan.dtype,
                tp=(plan.tp,),
                pp=(plan.pp,),
                cp=(plan.cp,),
                ep=(plan.ep,),
                micro_batch=(plan.micro_batch,),
                capacity_factor=plan.capacity_factor,
                moe_balance=plan.moe_balance,
                vary_offload=False,
                vary_placement=False,
                vary_split=vary,
            )
            best[vary] = search(problem, top_k=1, workers=1).plans[0].estimate.step_time_s
        assert best[True] <= published * (1 + 1e-9), (case.name, best[True], published)
        assert best[True] <= best[False] * (1 + 1e-9)
        if best[False] > published:
            slower_without.append(case.name)
    # only DeepSeek-V3's layouts (61 layers, MTP) can need the splits; since the MLA activation correction
    # (graph.mla.attention_activation_bytes: the up-projection outputs are freed) the plain search's interleaved plans,
    # which may count the embedding and loss as layers (grid_axes._interleave_options), fit and reach them as well
    assert all("deepseek" in name for name in slower_without)
