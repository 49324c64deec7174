"""The block search's first bounds for MoE models (search.blocks.first_bound_levels): cheap layer floors that cost no
expert option (search.expert_floors.KindFloors.kinds(cheap=True), expert_gemm_floor_s), the exact floors a first
refinement; and work_floors over a block's span pairs at once."""

from __future__ import annotations


import pytest

from paraplan.catalog import load_model, load_system
from paraplan.graph.moe_mlp import expert_knob_ops, moe_tokens
from paraplan.graph.transformer import with_expert
from paraplan.search import run
from paraplan.search.bounds.blocks import (
    EXACT,
    block_span_pairs,
    block_step_floor,
    blocks,
    first_bound_levels,
    layer_floors,
    work_floors,
)
from paraplan.search.bounds.expert_floors import costing_experts, expert_gemm_floor_s
from paraplan.search.run import search
from paraplan.search.bounds.step_floors import block_step_floors
from paraplan.search.space import SearchProblem
from paraplan.search.table import layer_shape_of
from paraplan.graph.ops import LayerGraph
from paraplan.step.build import block_compute

from tests.search.test_moe_search import mixtral_problem, tiny_deepseek


def _problems():
    """MoE problems over the routing set-ups the floor reads: learned, forced, a capacity factor below 1; bf16 and
    fp8; DeepSeek-V3's kinds (MLA, dense first layers, MTP) and Mixtral's."""
    deepseek = dict(
        model=tiny_deepseek(),
        system=load_system("dgx-h800"),
        gpus=32,
        seq_length=4096,
        global_batch=64,
        tp=(1, 2),
        pp=(1, 2, 4),
        cp=(1, 2),
        micro_batch=(1, 2),
        ep=(4, 8),
        zero=(1,),
        vary_offload=False,
        schedules=("1f1b", "zb-h1", "dualpipe"),
    )
    return [
        SearchProblem(**deepseek),
        SearchProblem(**{**deepseek, "dtype": "fp8", "moe_balance": "forced"}),
        SearchProblem(**{**deepseek, "capacity_factor": 0.5}),
        mixtral_problem(cp=(1, 2), micro_batch=(1, 2), global_batch=64, recompute=None),
        SearchProblem(
            **{**deepseek, "cp": (1, 16)}
        ),  # the K/V ring across NVLink domains (ring_floor_s)
    ]


@pytest.mark.parametrize(
    "problem",
    _problems(),
    ids=["deepseek-like", "fp8-forced", "capacity-0.5", "mixtral", "long-cp"],
)
def test_cheap_layer_floors_are_below_the_exact_ones(problem):
    """Every kind's cheap work and forward floors are at most the exact ones (KindFloors.kinds(cheap=True):
    admissible), strictly
    below for the kinds holding expert ops (what the cheap floor leaves out is > 0), with ρ = 1; so every block's
    cheap step floor is at most its exact one, and below it on some block."""
    assert first_bound_levels(problem, blocks(problem)) == (EXACT,)
    below = 0
    keys = sorted({(b.tp, b.cp, b.micro_batch) for b in blocks(problem)})
    floors = {
        key: (layer_floors(problem, *key, cheap=True), layer_floors(problem, *key)) for key in keys
    }
    for key, (cheap, exact) in floors.items():
        assert cheap.rho == 1.0
        for name, work in exact.work.items():
            assert cheap.work[name] <= work and cheap.forward[name] <= exact.forward[name], (
                key,
                name,
            )
        assert cheap.work["moe_layer"] < exact.work["moe_layer"]
    for b in blocks(problem):
        cheap, exact = floors[(b.tp, b.cp, b.micro_batch)]
        low, high = block_step_floor(problem, b, cheap), block_step_floor(problem, b, exact)
        assert low <= high, b
        below += low < high
    assert below


@pytest.mark.parametrize(
    "problem",
    _problems()
    + [
        SearchProblem(
            model=load_model("gpt3-1.3b"),
            system=load_system("dgx-h100-80gb"),
            gpus=16,
            seq_length=2048,
            global_batch=64,
            schedules=("1f1b", "interleaved", "zb-h1", "dualpipe", "gpipe"),
        )
    ],
    ids=[
        "deepseek-like",
        "fp8-forced",
        "capacity-0.5",
        "mixtral",
        "long-cp",
        "gpt3-1.3b-all-schedules",
    ],
)
def test_block_step_floors_on_arrays_equal_each_blocks(problem):
    """block_step_floors (the initial bounds, on arrays over the blocks of each (pp, micro-batches)) gives every
    block's block_step_floor to the last bit, cheap and exact floors, every schedule's bubble floor."""
    parts = blocks(problem)
    schedules = {s for b in parts for _, s, _ in problem.schedule_options(b.pp, b.microbatches)}
    assert len(parts) >= 16 and schedules == set(problem.schedules or schedules)
    for cheap in (True, False):
        floors = {
            key: layer_floors(problem, *key, cheap=cheap)
            for key in {(b.tp, b.cp, b.micro_batch) for b in parts}
        }
        of = lambda b: floors[(b.tp, b.cp, b.micro_batch)]
        assert block_step_floors(problem, parts, of).tolist() == [
            block_step_floor(problem, b, of(b)) for b in parts
        ]


@pytest.mark.parametrize(
    "model_name, dtype, capacity",
    [
        ("deepseek-v3", "bf16", None),
        ("deepseek-v3", "fp8", None),
        ("mixtral-8x22b", "bf16", 1.25),
        ("qwen3-30b-a3b", "bf16", 0.5),
        ("gpt-oss-120b", "fp8", None),
    ],
)
def test_expert_gemm_floor_is_below_every_options_expert_gemms(model_name, dtype, capacity):
    """expert_gemm_floor_s is at most the forward + backward time of the grouped GEMMs graph.moe_mlp.expert_ops builds
    for each expert option, for several token counts, tp and micro-batches, with learned routing and with a capacity
    factor (below 1: the floor follows the rows it keeps)."""
    problem = SearchProblem(
        model=load_model(model_name),
        system=load_system("dgx-h100-80gb"),
        gpus=256,
        seq_length=4096,
        global_batch=512,
        dtype=dtype,
        capacity_factor=capacity,
    )
    checked = 0
    for tp, cp, mb in ((1, 1, 1), (2, 2, 3), (4, 1, 2), (8, 4, 1)):
        experts = costing_experts(problem, tp)
        shape = layer_shape_of(problem, tp, cp, mb, tp > 1, "1d", 0, experts[0])
        floor = expert_gemm_floor_s(problem.model, problem.system, shape, experts)
        assert floor > 0
        for expert in experts:
            gemms = tuple(
                op
                for op in expert_knob_ops(problem.model, with_expert(shape, expert), expert)
                if op.kind == "grouped_gemm"
            )
            compute = block_compute(LayerGraph("experts", gemms, (), 0.0), problem.system, dtype)
            assert floor <= compute.forward + compute.backward, (tp, cp, mb, expert)
            checked += 1
    assert checked > 20


def test_expert_gemm_floor_by_hand():
    """Mixtral 8x7B, one micro-batch of 4,096 tokens on one H100 in bf16, learned routing: 3 · 2·T·k·(p + 1)·h·F
    FLOPs = 3 · 2 · 4096 · 2 · 3 · 4096 · 14336 = 8.658e12 at peak · cap; a capacity factor of 0.5 halves it."""
    problem = SearchProblem(
        model=load_model("mixtral-8x7b"),
        system=load_system("dgx-h100-80gb"),
        gpus=8,
        seq_length=4096,
        global_batch=8,
    )
    acc = problem.system.accelerator
    experts = costing_experts(problem, 1)
    shape = layer_shape_of(problem, 1, 1, 1, False, "1d", 0, experts[0])
    assert moe_tokens(shape) == 4096
    flops = 3 * 2 * 4096 * 2 * 3 * 4096 * 14336
    assert flops == pytest.approx(8.658e12, rel=1e-3)
    expected = flops / (acc.peak_matrix_flops("bf16") * acc.gemm_efficiency_cap("bf16"))
    assert expert_gemm_floor_s(problem.model, problem.system, shape, experts) == pytest.approx(
        expected, rel=1e-12
    )
    halved = tuple(e._replace(capacity_factor=0.5) for e in experts)
    assert expert_gemm_floor_s(problem.model, problem.system, shape, halved) == pytest.approx(
        expected / 2, rel=1e-12
    )


def test_first_bound_levels():
    """The cheap first bound is used for MoE models with more than one expert option, not for dense models nor for an
    MoE space restricted to one (ep, etp)."""
    dense = SearchProblem(
        model=load_model("llama3-70b"),
        system=load_system("dgx-h100-80gb"),
        gpus=64,
        seq_length=8192,
        global_batch=128,
    )
    assert first_bound_levels(dense, blocks(dense)) == ()
    one = mixtral_problem(ep=(8,), tp=(1,))
    assert first_bound_levels(one, blocks(one)) == ()
    assert first_bound_levels(mixtral_problem(), blocks(mixtral_problem())) == (EXACT,)


def test_a_search_computes_exact_floors_only_for_blocks_that_reach_the_front(monkeypatch):
    """search.run._branch_and_bound costs the exact layer floors of a (tp, cp, micro-batch) only when one of its blocks
    reaches the front: fewer keys than the space has on this problem (81 of 176), and the same plans as with exact
    first bounds."""
    problem = SearchProblem(
        model=tiny_deepseek(),
        system=load_system("dgx-h800"),
        gpus=32,
        seq_length=4096,
        global_batch=256,
        vary_offload=False,
        vary_placement=False,
    )
    exact_keys = []
    real = run.layer_floors

    def spy(problem, tp, cp, micro_batch, cheap=False):
        if not cheap:
            exact_keys.append((tp, cp, micro_batch))
        return real(problem, tp, cp, micro_batch, cheap)

    monkeypatch.setattr(run, "layer_floors", spy)
    lazy = search(problem, top_k=10, workers=1)
    keys = {(b.tp, b.cp, b.micro_batch) for b in blocks(problem)}
    assert 0 < len(set(exact_keys)) < len(keys) and len(exact_keys) == len(set(exact_keys))
    monkeypatch.setattr(run, "first_bound_levels", lambda problem, parts: ())
    monkeypatch.setattr(run, "layer_floors", real)
    eager = search(problem, top_k=10, workers=1)
    assert [(r.key, r.objective) for r in lazy.plans] == [(r.key, r.objective) for r in eager.plans]
    assert lazy.evaluated == eager.evaluated


def test_work_floors_over_pairs_is_the_least_of_each_pairs():
    """work_floors over several (tp span, cp span) pairs equals, kind by kind and mode by mode, the least of its value
    over each pair alone; kept and held bytes read no span."""
    problem = mixtral_problem(cp=(1, 2, 4), vary_placement=True, recompute=None, ep=(1, 2, 8))
    checked = 0
    for b in blocks(problem):
        pairs = block_span_pairs(problem, b)
        if len(pairs) < 2:
            continue
        for expert_kinds in (False, True):
            together = work_floors(problem, b.tp, b.cp, b.micro_batch, pairs, expert_kinds)
            alone = [
                work_floors(problem, b.tp, b.cp, b.micro_batch, (pair,), expert_kinds)
                for pair in pairs
            ]
            for mode, kinds in together.work.items():
                for name, value in kinds.items():
                    assert value == min(a.work[mode][name] for a in alone), (b, mode, name)
                    assert together.kept[mode][name] == alone[0].kept[mode][name]
                    assert together.held[mode][name] == alone[0].held[mode][name]
                    checked += 1
    assert checked > 50
