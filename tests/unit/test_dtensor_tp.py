"""PyTorch DTensor tensor parallelism (torchtitan) against Megatron-LM's async TP backward: which backward
TP collectives hide, the SP re-gather a DTensor GEMM does not need, and what AsyncTP leaves unfused. Each
number below is computed by hand in the comment."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.comm import GroupSpan
from paraplan.cost.frameworks import framework_system
from paraplan.graph.transformer import LayerShape, decoder_layer_1d
from paraplan.specs.plan import PlanSpec
from paraplan.step.block_sums import _TP_BACKWARD_FIELD, block_comm, tp_backward_hides
from paraplan.step.build import BlockComm, BlockCompute
from paraplan.step.compose import block_terms
from paraplan.step.estimate import estimate

# forward 1 s, backward 2 s, no attention, GEMMs 1 s forward and 2 s backward
COMPUTE = BlockCompute(1.0, 2.0, 0.0, 0.0, 1.0, 2.0)


def _comm(**kw) -> BlockComm:
    base = dict.fromkeys(BlockComm._fields, 0.0)
    base.update(kw)
    return BlockComm(**base)


def _system(framework: str, **overrides):
    profile = load_framework(framework, "framework", True)
    if overrides:
        profile = load_framework({**profile.model_dump(), **overrides}, "framework")
    return framework_system(profile, load_system("hgx-h100-96gb-500w"))


def test_dtensor_stacks_hide_no_backward_tp_collective():
    assert tp_backward_hides(_system("torchtitan")) == {}
    assert tp_backward_hides(_system("torchtitan-compiled")) == {}
    assert tp_backward_hides(_system("megatron-core")) == _TP_BACKWARD_FIELD


def test_dtensor_regather_only_under_selective_recompute():
    # 0.6 s of exposed backward TP, and 0.4 s of SP re-gathers kept apart (no price, no overlap):
    # full recompute (2) and none (0) run no re-gather, 0.6; selective (1) adds them, 1.0
    comm = _comm(tp_backward=0.6, tp_dtensor_regather=0.4)
    assert float(block_terms(COMPUTE, comm, 2, False).tp_backward) == pytest.approx(0.6)
    assert float(block_terms(COMPUTE, comm, 0, False).tp_backward) == pytest.approx(0.6)
    assert float(block_terms(COMPUTE, comm, 1, False).tp_backward) == pytest.approx(1.0)


def test_asynctp_leaves_the_input_gradient_reduce_scatters_exposed():
    # 3 s of backward TP, 1 s of them unfused reduce-scatters; the other 2 s pipelined in 4 chunks
    # behind 2 s of backward GEMMs: 2/4 + ¾·max(0, 2 − 2) = 0.5, plus the unfused 1.0 = 1.5
    # (all 3 s pipelined: 0.75 + ¾·(3 − 2) = 1.5 as well; with 2 s unfused: 1/4 + 2 = 2.25)
    comm = _comm(tp_backward=3.0, tp_unfused_backward=1.0)
    assert float(block_terms(COMPUTE, comm, 0, True).tp_backward) == pytest.approx(1.5)
    comm = _comm(tp_backward=3.0, tp_unfused_backward=2.0)
    assert float(block_terms(COMPUTE, comm, 0, True).tp_backward) == pytest.approx(2.25)
    # without AsyncTP the unfused share changes nothing: all 3 s exposed
    assert float(block_terms(COMPUTE, comm, 0, False).tp_backward) == pytest.approx(3.0)


def test_block_comm_books_every_backward_tp_collective_exposed_on_dtensor():
    shape = LayerShape(8, 1, 1, 8192, True, "flash", "bf16")
    graph = decoder_layer_1d(load_model("llama3-8b"), shape)
    span, alone = GroupSpan(8, 8, 1), GroupSpan(1, 1, 1)
    mega = block_comm(graph, _system("megatron-core"), span, alone)
    titan = block_comm(graph, _system("torchtitan"), span, alone)
    total = mega.tp_backward + mega.tp_hidden_by_dgrad + mega.tp_hidden_by_wgrad
    assert mega.tp_hidden_by_dgrad > 0 and mega.tp_hidden_by_wgrad > 0
    assert titan.tp_hidden_by_dgrad == titan.tp_hidden_by_wgrad == 0.0
    # the re-gathers are booked apart, the rest exposed
    assert titan.tp_backward + titan.tp_dtensor_regather == pytest.approx(total)
    assert titan.tp_backward == pytest.approx(mega.tp_backward + mega.tp_hidden_by_wgrad)
    # the two re-gathers and the two input-gradient reduce-scatters: the same bytes, the same seconds
    assert titan.tp_dtensor_regather == pytest.approx(mega.tp_hidden_by_dgrad)
    assert titan.tp_unfused_backward == pytest.approx(mega.tp_hidden_by_wgrad)
    assert mega.tp_dtensor_regather == mega.tp_unfused_backward == 0.0


def test_an_engine_without_async_tp_exposes_all_without_dtensor_terms():
    # DeepSpeed's PipelineEngine (step.engines, async_tp_backward False) on a Megatron stack: every backward
    # TP collective exposed, none booked as a DTensor re-gather or unfused reduce-scatter
    shape = LayerShape(8, 1, 1, 8192, True, "flash", "bf16")
    graph = decoder_layer_1d(load_model("llama3-8b"), shape)
    span, alone = GroupSpan(8, 8, 1), GroupSpan(1, 1, 1)
    system = _system("megatron-core")
    mega = block_comm(graph, system, span, alone)
    sync = block_comm(graph, system, span, alone, async_tp=False)
    assert tp_backward_hides(system, async_tp=False) == {}
    assert sync.tp_hidden_by_dgrad == sync.tp_hidden_by_wgrad == 0.0
    total = mega.tp_backward + mega.tp_hidden_by_dgrad + mega.tp_hidden_by_wgrad
    assert sync.tp_backward == pytest.approx(total)
    assert sync.tp_dtensor_regather == sync.tp_unfused_backward == 0.0
    # exposed whole, whatever the recompute mode
    for code in (0, 1, 2):
        terms = block_terms(COMPUTE, sync, code, False)
        assert float(terms.tp_backward) - float(
            block_terms(COMPUTE, sync._replace(tp_backward=0.0), code, False).tp_backward
        ) == pytest.approx(total)


def test_vanilla_dtensor_tp_is_slower_than_megatron_async_backward():
    # the same profile with the async backward switched back on is faster, and only by TP time
    model = load_model("llama3-8b")
    plan = PlanSpec(
        gpus=8,
        tp=8,
        dp=1,
        global_batch=1,
        seq_length=8192,
        sequence_parallel=True,
        dtype="bf16",
        recompute="full",
    )
    dtensor = estimate(model, _system("torchtitan-compiled"), plan)
    async_bw = estimate(model, _system("torchtitan-compiled", tp_backward_async=True), plan)
    assert dtensor.step_time_s > async_bw.step_time_s
    assert dtensor.breakdown.forward_s == pytest.approx(async_bw.breakdown.forward_s)
