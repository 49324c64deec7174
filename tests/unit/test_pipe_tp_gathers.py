"""DeepSpeed PipelineEngine's TP all-gathers (PartitionedTensor.full()): step.p2p.pipe_tp_gathers_s, one on the
receiver and two on the sender per exchange (step.engines.EngineRules.tp_gathers), priced alike on the uniform
path (step.p2p.links_of / uniform_group_p2p) and the per-stage one (step.stage_links.p2p_exchange_s)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.comm import GroupSpan
from paraplan.cost.frameworks import apply_framework
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.plan import PlanSpec
from paraplan.specs.uniform_stages import uniform_stage_plan
from paraplan.step.engines import ENGINES, engine_rules_of, pipe_tp_gathers
from paraplan.step.p2p import (
    PipelineLinks,
    link_tp_span,
    links_of,
    pipe_tp_gathers_s,
    uniform_group_p2p,
)
from paraplan.step.per_stage import common_of, stage_settings
from paraplan.step.stage_links import p2p_exchange_s

# b = 2, s = 2048, h = 2048, bf16: the whole activation one gather rebuilds
WHOLE_BYTES = 2 * 2048 * 2048 * 2


def one_gather_by_hand_s(tp: int) -> float:
    """One ring all-gather of WHOLE_BYTES over tp GPUs of a DGX A100 (NVSwitch: 300 GB/s at 0.75 per GPU,
    5 us per hop): (t − 1)/t · S / (300e9 · 0.75) + (t − 1) · 5e-6."""
    return (tp - 1) / tp * WHOLE_BYTES / (300e9 * 0.75) + (tp - 1) * 5e-6


def test_gather_seconds_by_hand():
    system = load_system("dgx-a100-80gb")
    span = GroupSpan(4, 4, 1)
    assert pipe_tp_gathers_s(1, WHOLE_BYTES, span, system) == pytest.approx(
        one_gather_by_hand_s(4), rel=1e-12
    )
    assert pipe_tp_gathers_s(3, WHOLE_BYTES, span, system) == pytest.approx(
        3 * one_gather_by_hand_s(4), rel=1e-12
    )
    assert pipe_tp_gathers_s(0, WHOLE_BYTES, span, system) == 0.0
    assert pipe_tp_gathers_s(2, WHOLE_BYTES, GroupSpan(1, 1, 1), system) == 0.0


def test_engine_counts():
    """pipe/engine.py at 0050fdad: the receiver's input in _exec_forward_pass, the sender's own output and the
    received gradient in _exec_backward_pass; AMP's copy (DachengLi1/AMP @ 72eeea4) sends gradients whole, so
    the receiver's input (_exec_forward_pass) and the sender's own output (_exec_recv_grads) only."""
    assert ENGINES["deepspeed"].tp_gathers == (1, 2)
    assert ENGINES["megatron"].tp_gathers == (0, 0)
    assert engine_rules_of("deepspeed", "amp2022").tp_gathers == (1, 1)
    assert pipe_tp_gathers("deepspeed") == (1, 2)
    assert pipe_tp_gathers("torch") == pipe_tp_gathers("megatron") == (0, 0)


def _profile_system(framework: str):
    system, _ = apply_framework(load_framework(framework), load_system("dgx-a100-80gb"), {})
    return system


def test_uniform_links_by_hand():
    model = load_model("gpt3-1.3b")
    pp_span, tp_span = GroupSpan(4, 4, 1), GroupSpan(4, 4, 1)
    size = WHOLE_BYTES / 4  # each TP rank's share of the exchange (step.blocks.p2p_bytes)
    ds = _profile_system("megatron-deepspeed")
    assert link_tp_span(ds, tp_span) == tp_span
    links = links_of(model, ds, size, 4, pp_span, link_tp_span(ds, tp_span))
    assert links.recv_gather_s == pytest.approx(one_gather_by_hand_s(4), rel=1e-12)
    assert links.send_gather_s == pytest.approx(2 * one_gather_by_hand_s(4), rel=1e-12)
    core = _profile_system("megatron-core")
    assert link_tp_span(core, tp_span) is None
    plain = links_of(model, core, size, 4, pp_span, link_tp_span(core, tp_span))
    assert plain.recv_gather_s == plain.send_gather_s == 0.0


def test_uniform_stage_classes_by_hand():
    """Inner link 1 s, outer 10 s, gathers 0.25 s on receiving and 0.5 s on sending, pp 4, vpp 1."""
    one_node = PipelineLinks(1.0, 10.0, 4, 1, None, 0.0, 0.25, 0.5)
    assert uniform_group_p2p(one_node, 0, 1, 4, 1)[0] == (1.5, 1)  # first: sends only
    assert uniform_group_p2p(one_node, 3, 1, 4, 1)[0] == (1.25, 1)  # last: receives only
    assert uniform_group_p2p(one_node, 1, 2, 4, 1)[0] == (2.75, 2)  # middle: 2 links + both
    # two stages per node on two nodes: of stages 1 and 2, each has one crossing link (1 + 10 + 0.75)
    two_nodes = PipelineLinks(1.0, 10.0, 2, 2, None, 0.0, 0.25, 0.5)
    (first, n1), (_, n2) = uniform_group_p2p(two_nodes, 1, 2, 4, 1)
    assert (first, n1) == (11.75, 2) and n2 == 0


@pytest.mark.parametrize("stack, counts", [(None, (1, 2)), ("amp2022", (1, 1))])
def test_per_stage_sides_by_hand(stack, counts):
    """The per-stage path adds one gather on the receiving side and two on the sending side of an exchange
    (one each on AMP's stack), over each side's TP group (DeepSpeed engine, tp 4, pp 2 on one DGX A100)."""
    fields = {"gpus": 8, "tp": 4, "pp": 2, "micro_batch": 2, "global_batch": 8, "seq_length": 2048}
    system, fields = apply_framework(
        load_framework("megatron-deepspeed"), load_system("dgx-a100-80gb"), fields
    )  # the profile's plan defaults (no DP overlap under the engine)
    model, plan = load_model("gpt3-1.3b"), PlanSpec(**fields)
    cluster = uniform_cluster(system, plan.gpus)
    stage_plan = uniform_stage_plan(plan, model, cluster.pools[0].name, "deepspeed")
    common, (a, b) = common_of(stage_plan), stage_settings(stage_plan, cluster)
    rules = engine_rules_of("deepspeed", stack)
    assert common.rules == engine_rules_of("deepspeed")
    bare = replace(rules, tp_gathers=(0, 0))
    sent = np.array([WHOLE_BYTES / 4])
    for receiver, gathers in zip((True, False), counts):
        with_g = p2p_exchange_s(cluster, rules, common, a, b, sent, receiver)
        without = p2p_exchange_s(cluster, bare, common, a, b, sent, receiver)
        assert with_g - without == pytest.approx([gathers * one_gather_by_hand_s(4)], rel=1e-9)
