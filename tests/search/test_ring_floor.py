"""The K/V ring's exposure floor of the search's exact layer floors (search.expert_floors.ring_floor_s): never above
the exposed context-parallel time step.compose.block_terms gives any block of the shape, on any span its cp group
can have, with any recompute mode and TP overlap; and large where the ring must cross NVLink domains."""

from __future__ import annotations

import math
from itertools import product

import pytest

from paraplan.catalog import load_model, load_system, model_names
from paraplan.cost.comm import GroupSpan
from paraplan.specs.recompute import RECOMPUTE_CODES
from paraplan.step.compose import block_terms
from paraplan.search.bounds.expert_floors import (
    costing_experts,
    ring_floor_s,
    ring_transfer_floor_s,
)
from paraplan.search.space import SearchProblem
from paraplan.search.table import layer_shape_of
from paraplan.specs.moe_model import moe_shaped
from paraplan.specs.plan import RuntimeFields
from paraplan.step.build import BLOCK_KINDS, _kind_cost_facts, model_block_kinds


def _spans(cp: int, domain: int) -> list[GroupSpan]:
    """Every (members per domain, domains) a cp group of this size can take: p members in each of ⌈cp/p⌉ domains."""
    return [
        GroupSpan(cp, p, math.ceil(cp / p)) for p in range(1, min(cp, domain) + 1) if cp % p == 0
    ]


@pytest.mark.parametrize(
    "model_name, system_name",
    [
        ("deepseek-v3", "dgx-h800"),
        ("mixtral-8x7b", "dgx-h100-80gb"),
        ("qwen3-30b-a3b", "gb200-nvl72"),
        *(
            (name, "dgx-h100-80gb")
            for name in model_names()
            if moe_shaped(load_model(name)) and name not in ("deepseek-v3", "mixtral-8x7b")
        ),
    ],
)
def test_ring_floor_never_exceeds_the_exposed_ring(model_name, system_name):
    model, system = load_model(model_name), load_system(system_name)
    problem = SearchProblem(
        model=model, system=system, gpus=2048, seq_length=8192, global_batch=2048
    )
    checked = 0
    for tp, cp, mb, modules in product(
        (1, 2), (2, 8, 16, 64), (1, 2), ((), ("core_attn",), ("moe_act", "mla_up_proj"))
    ):
        expert = costing_experts(problem, tp)[-1]
        shape = layer_shape_of(problem, tp, cp, mb, tp > 1, "1d", 0, expert, modules)
        ring = ring_transfer_floor_s(model, system, shape)
        assert (
            ring is not None and ring[0] > 0 and ring[1] == pytest.approx(2 * ring[0])
        )  # forward once, backward twice
        tp_span = GroupSpan(tp, tp, 1)
        for name, cp_span in product(
            model_block_kinds(model), _spans(cp, system.node.gpus_per_domain)
        ):
            if not BLOCK_KINDS[name].core_ops(model, shape):
                continue
            facts = _kind_cost_facts(model, system, name, shape, (tp_span, cp_span))
            floor = ring_floor_s(
                ring, facts.compute.attention_forward, facts.compute.attention_backward
            )
            for code, overlap in product(set(RECOMPUTE_CODES.values()), (False, True)):
                terms = block_terms(facts.compute, facts.comm, code, overlap)
                assert floor <= (terms.cp_forward + terms.cp_backward) * (1 + 1e-12), (
                    name,
                    tp,
                    cp,
                    mb,
                    cp_span,
                )
                checked += 1
    assert checked > 200


def test_ring_floor_is_large_beyond_the_domain_and_absent_without_a_ring():
    """cp 64 on 8-GPU domains crosses the NIC in every placement: the floor is most of the transfer; Ulysses and cp 1
    have no ring to floor."""
    model, system = load_model("deepseek-v3"), load_system("dgx-h800")
    problem = SearchProblem(
        model=model, system=system, gpus=2048, seq_length=8192, global_batch=2048
    )
    expert = costing_experts(problem, 1)[0]
    wide = layer_shape_of(problem, 1, 64, 1, False, "1d", 0, expert)
    forward, backward = ring_transfer_floor_s(model, system, wide)
    facts = _kind_cost_facts(
        model, system, "moe_layer", wide, (GroupSpan(1, 1, 1), GroupSpan(64, 8, 8))
    )
    assert ring_floor_s(
        (forward, backward), facts.compute.attention_forward, facts.compute.attention_backward
    ) > 0.5 * (forward + backward)
    assert (
        ring_transfer_floor_s(
            model, system, layer_shape_of(problem, 1, 1, 1, False, "1d", 0, expert)
        )
        is None
    )
    ulysses = SearchProblem(
        model=load_model("qwen3-30b-a3b"),
        system=system,
        gpus=64,
        seq_length=8192,
        global_batch=64,
        runtime=RuntimeFields(cp_algorithm="all-to-all"),
    )
    shape = layer_shape_of(ulysses, 1, 4, 1, False, "1d", 0, costing_experts(ulysses, 1)[0])
    assert shape.ulysses and ring_transfer_floor_s(ulysses.model, system, shape) is None


def test_cheap_floors_take_the_ring_floor_unless_an_expert_op_is_recomputed():
    """The cheap first floors (no expert option costed) add the ring's floor when the attention time is the same for
    every option, and leave it out when the recompute modules mark an expert op (moe_act: the routed activation
    then counts as attention, search.expert_floors.KindFloors._floor, cheap); either way at most the exact floor."""
    from paraplan.graph.transformer import cp_free_key, with_expert
    from paraplan.search.bounds.expert_floors import KindFloors

    model, system = load_model("deepseek-v3"), load_system("dgx-h800")
    problem = SearchProblem(
        model=model, system=system, gpus=2048, seq_length=8192, global_batch=2048
    )
    experts = costing_experts(problem, 1)
    floors_of = KindFloors(problem, experts)
    for modules, ring_taken in ((("core_attn",), True), (("moe_act",), False)):
        shape = layer_shape_of(problem, 1, 16, 1, False, "1d", 0, experts[0], modules)
        ring = ring_transfer_floor_s(model, system, shape)
        core = BLOCK_KINDS["moe_layer"].core_ops(model, shape)
        first = with_expert(shape, experts[0])
        extra = floors_of._core(core, shape)
        cheap = floors_of._floor(
            "moe_layer", shape, core, extra, first, cp_free_key(first), ring, True
        ).work
        without = floors_of._floor(
            "moe_layer", shape, core, extra, first, cp_free_key(first), None, True
        ).work
        exact = dict(floors_of.kinds(shape))["moe_layer"].work
        assert (cheap > without) == ring_taken and cheap <= exact


def test_ring_floor_against_a_hand_computed_value():
    """Mixtral 8x7B (8 KV heads of 128) on DGX H100, tp 1, cp 16, micro-batch 1, sequence 8,192: each rank holds
    512 tokens, so its K/V chunk is 2 B · 512 · (1,024 + 1,024) = 2,097,152 B; cp 16 > 8 GPUs per domain, so the ring
    crosses the NIC: 15 steps of S/(B_nic·η) + α each pass, once forward and twice backward; the floor is that less the
    attention time it can hide behind, per direction."""
    model, system = load_model("mixtral-8x7b"), load_system("dgx-h100-80gb")
    problem = SearchProblem(model=model, system=system, gpus=64, seq_length=8192, global_batch=64)
    shape = layer_shape_of(problem, 1, 16, 1, False, "1d", 0, costing_experts(problem, 1)[0])
    net = system.network
    per_pass = 15 * (2 * 512 * 2048 / (net.nic_bandwidth * net.efficiency) + net.latency)
    forward, backward = ring_transfer_floor_s(model, system, shape)
    assert forward == pytest.approx(per_pass, rel=1e-12) and backward == pytest.approx(
        2 * per_pass, rel=1e-12
    )
    assert ring_floor_s((forward, backward), 0.25 * per_pass, 3 * per_pass) == pytest.approx(
        0.75 * per_pass, rel=1e-12
    )
