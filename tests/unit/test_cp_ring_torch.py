"""PyTorch's ring attention as torchtitan runs it (graph.cp_ring_torch): K/V bytes with the repeated heads,
the float32 merges against a hand count, and the all-gather rotater's exposure. Numbers worked by hand in
the comments."""

from __future__ import annotations

import numpy as np
import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.frameworks import framework_system
from paraplan.cost.overlap import gathered_ring_exposed_s
from paraplan.cost.comm import GroupSpan, collective_costs_s
from paraplan.graph.cp_ring_torch import (
    TORCH_RING,
    TORCH_RING_BACKWARD_UNITS,
    TORCH_RING_COLLECTIVE,
    torch_ring_merge_bytes,
)
from paraplan.graph.mla import context_ring_collectives
from paraplan.graph.moe import moe_model_layer
from paraplan.graph.ops import ExpertShape
from paraplan.graph.summa import decoder_layer_2d
from paraplan.graph.transformer import LayerShape, attention_ops, decoder_layer_1d
from paraplan.step.block_sums import block_comm
from paraplan.step.build import BlockComm, BlockCompute
from paraplan.step.compose import block_terms
from paraplan.step.constants import stack_shape_fields

# Llama 3 8B, b 1, s 8192, c 2, t 1: E_o = 4096 x 32 x 128; K/V with the 32 query heads: E_kv = 2 E_o
E_O, ROWS = 4096 * 32 * 128, 4096 * 32
E_KV = 2 * E_O


def test_torch_merge_bytes_by_hand():
    forward, backward = torch_ring_merge_bytes(2, E_O, E_KV, ROWS, 2)
    # forward: 2 casts to fp32 (6 B) + 1 update (32 B) + the cast back (6 B) = 50 B per output element;
    # LSE 52 B (one update) + 2 x 8 B casts per row; one K/V cat before the send and the contiguous() copy
    # of the transposed K and V, 2 x 2 x 2 B per K/V element
    assert forward == 50 * E_O + 68 * ROWS + 8 * E_KV == 1_116_209_152
    # backward: dq zeroed (4) + 2 adds (10 each) + cast back (6) = 30 B per output element;
    # dk/dv zeroed (4) + first add (10) + 1 half add (5) and cat (8) + 2 send cats (16) + cast back (6)
    # + 1 K/V cat (4) + the contiguous() copy (4) = 57 B per K/V element; and the one flash-backward call the
    # ring adds (torch_ring_merge_bytes' backward), 14 B per output element (below)
    assert backward == 30 * E_O + 57 * E_KV + 14 * E_O == 2_415_919_104 + 234_881_024
    assert torch_ring_merge_bytes(1, E_O, E_KV, ROWS, 2) == (0.0, 0.0)


def test_torch_ring_flash_calls_in_the_merge_backward_by_hand():
    # each FlashAttention-2 backward call: dO and O read (2 + 2 B), the fp32 dQ accumulator zeroed (4 B),
    # read (4 B) and dQ written (2 B): 14 B per output element; c calls where the op is priced as one. Read
    # off the backward without K/V (E_kv 0) less its dq merges, E_o x (4 + 10 c + 6):
    def calls(steps, out):
        return torch_ring_merge_bytes(steps, out, 0.0, 0.0, 2)[1] - out * (4 + 10 * steps + 6)

    assert calls(2, E_O) == 14 * E_O == 234_881_024
    # Llama 3 8B at c 8, 32768 local tokens: E_o = 32768 x 4096, 7 extra calls: 7 x 14 x 134,217,728 B
    assert calls(8, 32768 * 4096) == 13_153_337_344
    assert torch_ring_merge_bytes(1, E_O, 0.0, 0.0, 2)[1] == 0.0


def test_the_ring_steps_count_the_pairs_the_op_prices():
    # torch's load-balanced ring on rank c − 1 (_templated_ring_attention): step 0 causal on its s/c queries
    # and keys, (s/c)(s/c + 1)/2 pairs; steps 1 … c − 1 full blocks of s/c queries on s/(2c) keys.
    # attention_ops' work = fwd FLOPs x causal share = 4·b·h·d·(s/c)·s·(s + c)/(2s)
    model = load_model("llama3-8b")
    for c, s in ((2, 65536), (4, 131072), (8, 262144)):
        local = s // c
        pairs = local * (local + 1) / 2 + (c - 1) * local * (local // 2)
        assert pairs == local * (s + 1) / 2
        shape = LayerShape(1, c, 1, s, False, "flash", "bf16", cp_ring=TORCH_RING)
        op = next(o for o in attention_ops(model, shape) if o.name == "flash_attention")
        work = op.fwd_flops * op.causal_fraction
        hand = 4.0 * model.heads * model.d_head * pairs
        assert work / hand - 1.0 == pytest.approx((c - 1) / (s + 1), rel=1e-6)


def test_torch_ring_op_and_kv_bytes_follow_the_profile():
    model = load_model("llama3-8b")
    te = LayerShape(1, 2, 1, 8192, False, "flash", "bf16")
    torch = te._replace(cp_ring=TORCH_RING)
    merge = [op for op in attention_ops(model, torch) if op.name == "ring_attention_merge"][0]
    # backward: the merges and the one flash-backward call the ring adds (14 B per output element)
    assert (merge.fwd_bytes, merge.bwd_bytes) == pytest.approx(
        (1_116_209_152, 2_415_919_104 + 14 * E_O)
    )
    ring = {c.name: c for c in decoder_layer_1d(model, torch).collectives}[TORCH_RING_COLLECTIVE]
    ring_te = {c.name: c for c in decoder_layer_1d(model, te).collectives}["cp_kv_ring"]
    # K and V of 4096 tokens with 32 heads (repeat_kv) in bf16: 2 x 4096 x 4096 x 2 B; TE: 8 heads, a quarter
    assert ring.bytes == 2 * 4096 * 4096 * 2 == 4 * ring_te.bytes
    assert (ring.count_fwd, ring.count_bwd) == (1, 3) and (
        ring_te.count_fwd,
        ring_te.count_bwd,
    ) == (1, 2)


def test_profiles_name_their_ring():
    system = load_system("hgx-h100-96gb-500w")
    titan = framework_system(load_framework("torchtitan-compiled", "framework", True), system)
    mcore = framework_system(load_framework("megatron-core", "framework", True), system)
    assert stack_shape_fields(titan)["cp_ring"] == TORCH_RING
    assert stack_shape_fields(mcore)["cp_ring"] == "transformer-engine"


def test_gathered_ring_exposure_by_hand():
    # c 4, attention 0.4 s: 0.1 s a step. All-gather 0.25 s behind the first step: 0.15 exposed;
    # no sends: 0.15
    assert gathered_ring_exposed_s(0.25, 0.0, 0.4, 4.0) == pytest.approx(0.15)
    # sends of 0.6 s in 4 (0.15 s each): 3 x (0.15 − 0.1) hidden short, the last 0.15 whole: 0.3 more
    assert gathered_ring_exposed_s(0.25, 0.6, 0.4, 4.0) == pytest.approx(0.45)
    # all hidden: only the last send shows
    assert gathered_ring_exposed_s(0.05, 0.2, 0.4, 4.0) == pytest.approx(0.05)


def test_block_terms_take_the_gathered_ring():
    # attention 0.4 s forward, 0.8 s backward; ring of 4 (3 steps), forward ring 0.3 s, backward 0.9 s
    compute = BlockCompute(1.0, 2.0, 0.4, 0.8, 0.0, 0.0)
    base = dict.fromkeys(BlockComm._fields, 0.0)
    base.update(cp_forward=0.3, cp_backward=0.9, cp_steps=3.0)
    torch = block_terms(compute, BlockComm(**{**base, "cp_gathered": 1.0}), 0, False)
    # forward: 0.3 − 0.4/4 = 0.2
    assert float(torch.cp_forward) == pytest.approx(0.2)
    # backward: gather 0.3 behind 0.2: 0.1; sends 2/3 x 0.9 / 3 = 0.2 each, 4 of them:
    # 3 x (0.2 − 0.2) + 0.2 = 0.2; total 0.3
    assert float(torch.cp_backward) == pytest.approx(0.3)
    # Transformer Engine's ring on the same numbers: 3 x max(0, 0.1 − 0.1) = 0 forward
    te = block_terms(compute, BlockComm(**base), 0, False)
    assert float(te.cp_forward) == pytest.approx(0.0)


def test_block_terms_expose_a_waited_ring_whole():
    # the numbers of test_block_terms_take_the_gathered_ring, each transfer waited where it is issued
    # (compiled torchtitan): forward 0.3 s ring + 0.01 s sync, backward 0.9 + 0.03, nothing hidden
    compute = BlockCompute(1.0, 2.0, 0.4, 0.8, 0.0, 0.0)
    base = dict.fromkeys(BlockComm._fields, 0.0)
    base.update(cp_forward=0.3, cp_backward=0.9, cp_steps=3.0, cp_gathered=1.0)
    base.update(cp_sync_forward=0.01, cp_sync_backward=0.03, cp_forward_price=0.05)
    waited = block_terms(compute, BlockComm(**{**base, "cp_waited": 1.0}), 0, False)
    assert float(waited.cp_forward) == pytest.approx(0.31)
    # backward: the all-gather, 0.9/3 = 0.3, and the dK/dV sends at all 4 steps, 2/3 x 0.9 / 3 = 0.2 each:
    # 0.3 + 0.8 + 0.03 sync = 1.13
    assert float(waited.cp_backward) == pytest.approx(1.13)
    # full recomputation re-runs the forward ring, waited again, in the backward pass: 1.13 + 0.31
    assert float(
        block_terms(compute, BlockComm(**{**base, "cp_waited": 1.0}), 2, False).cp_backward
    ) == (pytest.approx(1.44))
    # a waited ring that is not torch's (no all-gather, c − 1 sends as priced): 0.9 + 0.03
    te_waited = {**base, "cp_waited": 1.0, "cp_gathered": 0.0}
    assert float(block_terms(compute, BlockComm(**te_waited), 0, False).cp_backward) == (
        pytest.approx(0.93)
    )
    # the gathered ring of the eager profile exposes less: 0.2 + 0.01 forward (priced, 0.05 on 0.3)
    gathered = block_terms(compute, BlockComm(**base), 0, False)
    assert float(gathered.cp_forward) == pytest.approx(0.21 + 0.05 / 0.3 * (0.3 - 0.21))


def test_compiled_torchtitan_waits_for_its_ring():
    # torchtitan-compiled traces torch's ring into each block's graph (cp_ring_overlap false); eager torchtitan
    # and Megatron-Core keep the overlap; block_comm carries the profile's choice to the step
    model = load_model("llama3-8b")
    systems = {
        name: framework_system(
            load_framework(name, "framework", True), load_system("hgx-h100-96gb-500w")
        )
        for name in ("torchtitan-compiled", "torchtitan", "megatron-core")
    }
    overlap = {
        name: s.accelerator.efficiency.runtime.cp_ring_overlap for name, s in systems.items()
    }
    assert overlap == {"torchtitan-compiled": False, "torchtitan": True, "megatron-core": True}
    shape = LayerShape(1, 2, 1, 8192, False, "flash", "bf16", cp_ring=TORCH_RING)
    layer = decoder_layer_1d(model, shape)
    span = GroupSpan(2, 2, 1)
    waited = {name: block_comm(layer, s, span, span).cp_waited for name, s in systems.items()}
    assert waited == {"torchtitan-compiled": 1.0, "torchtitan": 0.0, "megatron-core": 0.0}
    # no ring without context parallelism: nothing to wait for
    one = GroupSpan(1, 1, 1)
    flat = decoder_layer_1d(model, shape._replace(cp=1))
    assert block_comm(flat, systems["torchtitan-compiled"], one, one).cp_waited == 0.0


def test_the_search_ring_floor_holds_for_the_gathered_ring():
    # search.bounds.exposure_floors.ring_floor_s: max(0, T − A) per pass must stay below what block_terms exposes
    from paraplan.search.bounds.exposure_floors import ring_floor_s  # noqa: PLC0415

    rng = np.random.default_rng(7)
    for _ in range(500):
        ring_f, ring_b, att_f, att_b = rng.uniform(0.0, 1.0, 4)
        steps = float(rng.integers(1, 16))
        comm = BlockComm(
            **{
                **dict.fromkeys(BlockComm._fields, 0.0),
                "cp_forward": ring_f,
                "cp_backward": ring_b,
                "cp_steps": steps,
                "cp_gathered": 1.0,
                "cp_waited": float(rng.integers(0, 2)),
            }
        )
        terms = block_terms(BlockCompute(1.0, 2.0, att_f, att_b, 0.0, 0.0), comm, 0, False)
        floor = ring_floor_s((ring_f, ring_b), att_f, att_b)
        assert float(terms.cp_forward) + float(terms.cp_backward) >= floor - 1e-12


def _titan_shape(cp_ring: str, **knobs) -> LayerShape:
    shape = LayerShape(2, 2, 1, 8192, True, "flash", "bf16", ExpertShape(ep=8), cp_ring=cp_ring)
    return shape._replace(**knobs)


def test_moe_layers_run_the_profiles_ring():
    # torchtitan + Mixtral 8x7B, t 2, c 2: the MoE layer's attention half (graph.mla.context_ring_collectives)
    # sends torch's ring: K and V with the 32 query heads (repeat_kv) of 4096 tokens over t 2 in bf16,
    # 2 x 4096 x 4096 / 2 x 2 B, forward once, backward three units (K/V again, fp32 dK/dV); TE's ring carries
    # the 8 key/value heads, a quarter, backward twice
    model = load_model("mixtral-8x7b")
    system = framework_system(
        load_framework("torchtitan", "framework", True), load_system("dgx-h100-80gb")
    )
    shape = _titan_shape(stack_shape_fields(system)["cp_ring"])
    layer = moe_model_layer(model, shape, True)
    rings = [c for c in layer.collectives if c.group == "cp"]
    assert [c.name for c in rings] == [TORCH_RING_COLLECTIVE]
    assert rings[0].bytes == 2 * 4096 * 4096 / 2 * 2
    assert (rings[0].count_fwd, rings[0].count_bwd) == (1, TORCH_RING_BACKWARD_UNITS) == (1, 3)
    te_layer = moe_model_layer(model, _titan_shape("transformer-engine"), True)
    te_ring = [c for c in te_layer.collectives if c.group == "cp"][0]
    assert (te_ring.name, te_ring.bytes, te_ring.count_bwd) == ("cp_kv_ring", rings[0].bytes / 4, 2)
    # the step reads the gathered ring from the graph, and prices its forward and backward bytes
    span = GroupSpan(2, 2, 1)
    comm = block_comm(layer, system, span, span, model, shape)
    one = collective_costs_s("ring_exchange", rings[0].bytes, span, system)[0]
    assert comm.cp_gathered == 1.0
    assert (comm.cp_forward, comm.cp_backward) == pytest.approx((one, 3 * one))
    assert block_comm(te_layer, system, span, span, model, shape).cp_gathered == 0.0


def test_mla_and_grid_rings_follow_the_profile():
    # MLA keys and values are per query head already: torch's ring carries TE's bytes, with 3 backward units
    mla = load_model("deepseek-v3")
    shape = _titan_shape(TORCH_RING, tp=1)
    torch_ring = context_ring_collectives(mla, shape)[0]
    te_ring = context_ring_collectives(mla, shape._replace(cp_ring="transformer-engine"))[0]
    assert torch_ring.bytes == te_ring.bytes and (torch_ring.count_bwd, te_ring.count_bwd) == (3, 2)
    assert torch_ring.name == TORCH_RING_COLLECTIVE
    # the 2 x 2 SUMMA grid: the column's K/V, 32 query heads over 2 columns of 4096 tokens
    llama = load_model("llama3-8b")
    grid = LayerShape(4, 2, 1, 8192, True, "flash", "bf16", tp_layout="2d", tp_rows=2)
    ring = [
        c
        for c in decoder_layer_2d(llama, grid._replace(cp_ring=TORCH_RING)).collectives
        if c.group == "cp"
    ][0]
    assert (ring.name, ring.bytes, ring.count_bwd) == (
        TORCH_RING_COLLECTIVE,
        4096 * 4096 * 2 * 2 / 2,
        3,
    )
