"""The search's layer floors cost a block kind's ops other than its core attention once per local-token count
(search.expert_floors.KindFloors): BlockKind.core_ops must name exactly the ops that read the context-parallel
split beyond the local tokens (graph.transformer.cp_free_key), and the shared floors must equal the whole costing."""

from __future__ import annotations

from dataclasses import replace
from itertools import product

import pytest

from paraplan.catalog import load_model, load_system, model_names
from paraplan.graph.transformer import cp_free_key
from paraplan.search.bounds.expert_floors import (
    DispatchFloors,
    KindFloors,
    costing_experts,
    expert_computes,
    least_with,
    ring_floor_s,
    ring_transfer_floor_s,
)
from paraplan.search.space import SearchProblem
from paraplan.search.table import layer_shape_of
from paraplan.step.build import BLOCK_KINDS, model_block_kinds
from paraplan.specs.moe_model import moe_shaped
from paraplan.specs.plan import RuntimeFields

# (tp, cp, micro-batch): pairs with equal local tokens b·s/c across different cp
GRID = [
    (tp, cp, mb) for tp, cp, mb in product((1, 2, 8), (1, 2, 4, 8), (1, 2, 4, 8)) if mb * 8 >= cp
]


def _problem(model_name: str, **fields) -> SearchProblem:
    return SearchProblem(
        model=load_model(model_name),
        system=load_system("dgx-h100-80gb"),
        gpus=512,
        seq_length=4096,
        global_batch=1024,
        **fields,
    )


def contract_breaks(problem: SearchProblem) -> tuple[list, int]:
    """(every (kind, shapes) where the declared core ops are not the graph's ops that read the CP split, or two
    shapes equal on cp_free_key differ in their other ops; how many shape pairs shared a key)."""
    model = problem.model
    seen: dict = {}
    breaks, shared = [], 0
    for (tp, cp, mb), sp, modules in product(
        GRID, (False, True), ((), ("core_attn",), ("moe_act", "layernorm"))
    ):
        if sp and tp == 1 or (modules and not moe_shaped(model)):
            continue
        experts = costing_experts(problem, tp)
        for expert in (experts[0], experts[-1]):
            shape = layer_shape_of(problem, tp, cp, mb, sp, "1d", 0, expert, modules)
            for name in model_block_kinds(model):
                core = BLOCK_KINDS[name].core_ops(model, shape)
                if core is None:
                    continue
                ops = BLOCK_KINDS[name].graph(model, shape).ops
                if [op for op in ops if op in core] != list(core) or len(set(core)) != len(core):
                    breaks.append((name, (tp, cp, mb), "core ops"))
                rest = [op for op in ops if op not in core]
                key = (name, cp_free_key(shape))
                if key in seen:
                    shared += 1
                    if seen[key][0] != rest:
                        breaks.append((name, seen[key][1], (tp, cp, mb)))
                else:
                    seen[key] = (rest, (tp, cp, mb))
    return breaks, shared


@pytest.mark.parametrize("model_name", model_names())
def test_core_ops_are_the_only_ops_reading_the_cp_split(model_name):
    """For every catalog model: each kind's declared core ops are ops of its graph, and its other ops are equal for
    every two shapes equal on cp_free_key (different cp and micro-batch, the same local tokens)."""
    breaks, shared = contract_breaks(_problem(model_name))
    assert not breaks, breaks[:5]
    assert shared > 20


def test_the_contract_check_can_fail(monkeypatch):
    """An MoE layer declaring no core ops leaves its attention, which reads cp, among the shared ops: caught."""
    kind = BLOCK_KINDS["moe_layer"]
    monkeypatch.setitem(BLOCK_KINDS, "moe_layer", replace(kind, core_ops=lambda model, shape: ()))
    breaks, _ = contract_breaks(_problem("deepseek-v3"))
    assert any(b[0] == "moe_layer" for b in breaks)


def _whole_floor(problem: SearchProblem, name: str, shape, experts) -> tuple[float, float, float]:
    """(work, forward, ρ) of the kind from each option's whole compute (expert_computes) and least dispatch, and for a
    kind with core attention the K/V ring's exposure floor (ring_floor_s) at the largest attention time of any option."""
    model, system = problem.model, problem.system
    computes = expert_computes(model, system, name, shape, experts)
    totals = [c.forward + c.backward for c in computes]
    dispatch = DispatchFloors(problem)
    work = (
        totals[0]
        if len(totals) == 1
        else least_with(totals, lambda i: dispatch.table(shape, experts[i]).least)
    )
    ring = ring_transfer_floor_s(model, system, shape)
    if BLOCK_KINDS[name].core_ops(model, shape) and ring is not None:
        work += ring_floor_s(
            ring,
            max(c.attention_forward for c in computes),
            max(c.attention_backward for c in computes),
        )
    rho = max([c.gemm_backward / t for c, t in zip(computes, totals) if t > 0], default=0.0)
    return work, min(c.forward for c in computes), rho


@pytest.mark.parametrize(
    "model_name, fields",
    [
        ("deepseek-v3", {}),
        ("deepseek-v3", {"dtype": "fp8"}),
        ("mixtral-8x7b", {}),
        ("gpt-oss-120b", {}),
        ("qwen3-30b-a3b", {"runtime": RuntimeFields(cp_algorithm="all-to-all")}),
        ("llama3-70b", {}),
        ("vit-large", {}),
    ],
)
def test_shared_kind_floors_equal_the_whole_costing(model_name, fields):
    """KindFloors (the shared ops once per local-token count, the core attention added) equals the floor from each
    option's whole graph, to summation order, at every shape of the grid, in any order of the shapes; 2D layouts,
    Ulysses and kinds without declared core ops (a dense model's decoder, ViT's head) are keyed on the whole shape."""
    problem = _problem(model_name, **fields)
    model = problem.model
    checked = 0
    for layout, rows in (("1d", 0), ("2d", 2)):
        for (tp, cp, mb), sp in product(reversed(GRID), (False, True)):
            if sp and tp == 1 or (layout == "2d" and tp < 4):
                continue
            experts = costing_experts(problem, tp)
            shape = layer_shape_of(problem, tp, cp, mb, sp, layout, rows, experts[0])
            floors_of = KindFloors(problem, experts)
            for name in model_block_kinds(model):
                got = floors_of(name, shape)
                want = _whole_floor(problem, name, shape, experts)
                for a, b in zip(got, want):
                    assert a == pytest.approx(b, rel=1e-12, abs=1e-300), (
                        name,
                        tp,
                        cp,
                        mb,
                        sp,
                        layout,
                    )
                checked += 1
    assert checked > 100


def test_shared_kind_floors_are_reused_across_cp():
    """Two (cp, micro-batch) with the same local tokens cost the shared ops once (the memo grows by one entry per
    kind for the first, none for the second)."""
    problem = _problem("deepseek-v3")
    experts = costing_experts(problem, 2)
    KindFloors.cache_clear()
    floors_of = KindFloors(problem, experts)
    for cp, mb in ((1, 2), (2, 4), (4, 8)):
        shape = layer_shape_of(problem, 2, cp, mb, True, "1d", 0, experts[0])
        for name in model_block_kinds(problem.model):
            floors_of(name, shape)
        if cp == 1:
            first = len(floors_of.rest)
    assert first == len(model_block_kinds(problem.model))
    assert len(floors_of.rest) == first
    assert (
        KindFloors(problem, experts).rest is floors_of.rest
    )  # shared by the next call with these options


def test_a_cleared_memo_is_not_reached_through_an_old_handle():
    """KindFloors finds its memo once per problem and options (a handle in the problem's memo); clearing the memo
    (SEARCH_CACHES, before every cold benchmark run) retires the handle, so the next KindFloors starts empty."""
    problem = _problem("deepseek-v3")
    experts = costing_experts(problem, 2)
    floors_of = KindFloors(problem, experts)
    floors_of("moe_layer", layer_shape_of(problem, 2, 1, 2, True, "1d", 0, experts[0]))
    assert floors_of.rest and KindFloors(problem, experts).rest is floors_of.rest
    KindFloors.cache_clear()
    fresh = KindFloors(problem, experts)
    assert fresh.rest is not floors_of.rest and not fresh.rest
    assert KindFloors(problem, experts).rest is fresh.rest
