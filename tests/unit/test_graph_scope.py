"""cost.graph_scope: the Megatron-Core CudaGraphScope lists a Megatron-Bridge preset sets, against the ops each
captures (transformer_layer.py _get_submodules_under_cudagraphs at core_v0.16.0), and the host time they price."""

from __future__ import annotations

import pytest

from paraplan.cost import host as H
from paraplan.cost.graph_scope import graphed, regions
from paraplan.graph.ops import Op
from paraplan.specs.system import EfficiencySpec


def _gemm(name):
    return Op(name, "gemm", 1.0, 0.0, 2.0, 0.0, (1, 8, 8, 8))


def _mem(name):
    return Op(name, "memory", 0.0, 1.0, 0.0, 2.0)


QKV, ROUTER, NORM = _gemm("qkv_projection"), _gemm("router"), _mem("post_attention_norm")
PERMUTE, FC1, HEAD = _mem("permute"), _gemm("mlp_in_projection"), _gemm("lm_head")
SYNC = Op("dispatch_host_sync", "host_sync", 0.0, 0.0, 0.0, 0.0)
ROUTER_PRE = ("moe_router", "moe_preprocess")


def test_words_are_the_lists_they_stand_for():
    assert regions("attention") == ("attn",) and regions("layer") == ()
    assert regions("none") is None and regions("full_iteration") is None
    for op in (QKV, ROUTER, NORM, PERMUTE, FC1, HEAD, _mem("qk_norm")):
        for moe in (False, True):
            assert graphed(op, "attention", False, moe) == graphed(op, ("attn",), False, moe)
            assert graphed(op, "layer", False, moe) == graphed(op, (), False, moe)


def test_router_and_preprocess_scope():
    # an MoE layer: the pre-MLP norm and the router in the graph, attention and the experts not
    assert graphed(ROUTER, ROUTER_PRE, True, True) and graphed(NORM, ROUTER_PRE, True, True)
    assert not graphed(QKV, ROUTER_PRE, True, True)
    assert not graphed(_gemm("expert_fc1"), ROUTER_PRE, True, True)  # dropless: eager
    # moe_preprocess: permutation 1 runs at a fixed size inside the graph, dropless too
    assert graphed(PERMUTE, ROUTER_PRE, True, True)
    assert not graphed(PERMUTE, ("moe_router",), True, True)
    # a dense layer of the same model: moe_router captures none of it, mlp its MLP half
    assert not graphed(NORM, ROUTER_PRE, False, False)
    assert graphed(NORM, ("mlp",), False, False) and graphed(FC1, ("mlp",), False, False)
    assert not graphed(NORM, ("mlp",), False, True)
    # attn holds Qwen3's q/k norms (inside SelfAttention)
    assert graphed(_mem("qk_norm"), ("attn", *ROUTER_PRE), True, True)


def test_router_scope_host_time_by_hand():
    # forward: norm 1 kernel, router GEMM 1, permute 1 in one graph (3 x 1 us) + one launch (30 us);
    # backward: 1 + 2 + 1 kernels at 1 us; the sync and the eager attention GEMM (1, 2) at 30 us
    eff = EfficiencySpec(
        host_launch_s=30e-6,
        graph_kernel_s=1e-6,
        cuda_graph_scope=ROUTER_PRE,
        host_sync_latency_s=0.0,
        host_sync_s=0.0,
    )
    ops = [QKV, NORM, ROUTER, PERMUTE, SYNC]
    sums = H.host_sums(ops, eff, {op: (0.0, 0.0) for op in ops})
    assert sums.forward == pytest.approx(30e-6 + 30e-6 + 3e-6)
    assert sums.backward == pytest.approx(30e-6 + 60e-6 + 4e-6)
