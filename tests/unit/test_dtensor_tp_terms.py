"""DTensor tensor parallelism as torchtitan runs it (issue 33): the functional collectives' layout copies around
every sequence-parallel all-gather and reduce-scatter, and torchao's float8 all-gathers, against hand counts."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.comm import GroupSpan
from paraplan.cost.frameworks import framework_system
from paraplan.cost.runtimes import tp_layout_copy_bytes
from paraplan.graph.layers import decoder_layer
from paraplan.graph.moe import build_moe_model_layer
from paraplan.graph.tp_collectives import tp_gather_bytes
from paraplan.graph.transformer import LayerShape
from paraplan.step.block_sums import BlockComm, block_comm
from paraplan.step.block_terms import tp_layout_copies_s

TOKENS, HIDDEN = 2 * 8192, 4096  # Llama 3 8B, micro-batch 2 at 8192 tokens
RATE = (
    2.41e12 * 0.85
)  # hgx-h100-96gb-500w: HBM bandwidth x efficiency.hbm (the cap leaves the memory clock)
SPAN = GroupSpan(8, 8, 1)  # TP 8 inside one NVLink domain


def _shape(dtype: str, fp8_gather: bool) -> LayerShape:
    return LayerShape(8, 1, 2, 8192, True, "flash", dtype, tp_fp8_gather=fp8_gather)


def _system(framework: str):
    return framework_system(load_framework(framework), load_system("hgx-h100-96gb-500w"))


def test_a_layout_copy_reads_and_writes_the_whole_tensor_once():
    assert tp_layout_copy_bytes(268435456.0) == 536870912.0


def test_torchao_gathers_in_fp8_only_in_an_fp8_run_of_a_stack_that_does():
    assert tp_gather_bytes(_shape("fp8", True), 2) == 1
    assert tp_gather_bytes(_shape("bf16", True), 2) == 2
    assert tp_gather_bytes(_shape("fp8", False), 2) == 2  # Megatron-Core's SP gathers bf16 here
    model = load_model("llama3-8b")
    names = {c.name: c.bytes for c in decoder_layer(model, _shape("fp8", True)).collectives}
    whole = 2.0 * TOKENS * HIDDEN
    assert names["tp_all_gather"] == names["tp_input_regather"] == whole / 2
    assert names["tp_reduce_scatter"] == names["tp_grad_reduce_scatter"] == whole


def test_block_comm_counts_each_sp_collective_copy_where_its_call_runs():
    model = load_model("llama3-8b")
    graph = decoder_layer(model, _shape("bf16", True))
    comm = block_comm(graph, _system("torchtitan-compiled"), SPAN, GroupSpan(1, 1, 1))
    one = 2.0 * (2.0 * TOKENS * HIDDEN) / RATE  # 2·S at the HBM rate, S = 2 B x 16384 x 4096
    # forward: the two input all-gathers and the two output reduce-scatters
    assert comm.tp_copy_forward == pytest.approx(4 * one)
    assert comm.tp_copy_backward == pytest.approx(2 * one)  # the output gradients' all-gathers
    assert comm.tp_copy_regather == pytest.approx(2 * one)  # the SP input re-gathers (per-op SAC)
    assert comm.tp_copy_unfused == pytest.approx(2 * one)  # the input gradients' reduce-scatters
    megatron = block_comm(graph, _system("megatron-core"), SPAN, GroupSpan(1, 1, 1))
    assert megatron.tp_copy_forward == megatron.tp_copy_backward == 0.0
    assert megatron.tp_copy_regather == megatron.tp_copy_unfused == 0.0


def _comm(**copies) -> BlockComm:
    return BlockComm(*(0.0,) * 10, **copies)


def test_asynctp_keeps_only_the_unfused_reduce_scatters_copies():
    comm = _comm(
        tp_copy_forward=4.0, tp_copy_backward=2.0, tp_copy_regather=1.0, tp_copy_unfused=0.5
    )
    assert tp_layout_copies_s(comm, False, 0) == (4.0, 2.5)  # vanilla TP, no recomputation
    assert tp_layout_copies_s(comm, False, 1) == (
        4.0,
        3.5,
    )  # per-op SAC re-gathers: their copies too
    assert tp_layout_copies_s(comm, False, 2) == (
        4.0,
        2.5,
    )  # full: the forward copies re-run via tp_rc
    assert tp_layout_copies_s(comm, True, 1) == (0.0, 0.5)  # AsyncTP: fused gathers and scatters


def test_moe_and_mla_layers_gather_in_fp8_as_the_dense_layer_does():
    """graph.tp_collectives is the one builder of the SP collectives: the attention half (graph.mla) and a
    tensor-parallel MLP (graph.moe_mlp) take the same gather width as the dense layer."""
    for name in ("mixtral-8x7b", "deepseek-v3"):
        model = load_model(name)
        on = build_moe_model_layer(model, _shape("fp8", True), True).collectives
        off = build_moe_model_layer(model, _shape("fp8", False), True).collectives
        on, off = {c.name: c.bytes for c in on}, {c.name: c.bytes for c in off}
        gathers = [n for n in off if n.endswith(("tp_all_gather", "tp_input_regather"))]
        assert gathers, name
        for n in gathers:
            assert on[n] == off[n] / 2, (name, n)
        for n in set(off) - set(gathers):
            assert on[n] == off[n], (name, n)
