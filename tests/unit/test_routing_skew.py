"""Learned-router skew (issue 33): the busiest expert-parallel rank's load from the spread of the experts'
routing probabilities (graph.routing), the published figures it reads (catalog/routing/expert_loads.yaml)."""

from __future__ import annotations

import math

import pytest

from paraplan.catalog import load_model
from paraplan.catalog.expert_loads import default_load_figure, expert_load_figures
from paraplan.graph.ops import ExpertShape
from paraplan.graph.routing import (
    expected_max_load_factor,
    expert_cv_of,
    published_expert_cv,
    rank_load_spread,
    routed_load_factor,
    router_expert_cv,
)


def _figure(fig_id: str):
    return next(f for f in expert_load_figures() if f.id == fig_id)


def test_skew_by_hand():
    # n 8 ranks, E 64 experts, N 8000 choices, c 0.5: skew 0.25·7/63 = 0.0277778, binomial 7/8000 = 0.000875,
    # σ/μ = √0.0286528 = 0.169271, √(2 ln 8) = 2.039334 -> 1 + 0.345201
    assert rank_load_spread(8000, 8, 64, 0.5) == pytest.approx(0.169271, abs=1e-6)
    assert expected_max_load_factor(8000, 8, 64, 0.5) == pytest.approx(1.345201, abs=1e-6)


def test_zero_skew_is_the_binomial_floor_exactly():
    for n, big_n in ((2, 100.0), (8, 4096 * 8 * 8.0), (64, 4096 * 8 * 64.0)):
        floor = 1.0 + math.sqrt((n - 1) / big_n) * math.sqrt(2.0 * math.log(n))
        assert expected_max_load_factor(big_n, n) == floor
        assert expected_max_load_factor(big_n, n, 256, 0.0) == floor
    assert routed_load_factor(4096, 8, 8, "learned", None, 256, 0.0) == routed_load_factor(
        4096, 8, 8, "learned", None
    )


def test_more_skew_never_faster_and_more_ranks_never_lighter():
    for experts in (8, 64, 256):
        for tokens in (512.0, 4096.0, 16384.0):
            eps = [ep for ep in (1, 2, 4, 8, 16, 32, 64) if experts % ep == 0]
            for ep in eps:
                loads = [
                    routed_load_factor(tokens, 8, ep, "learned", None, experts, c)
                    for c in (0.0, 0.01, 0.1, 0.3, 1.0)
                ]
                assert loads == sorted(loads)
            for c in (0.0, 0.1, 1.0):
                by_ep = [
                    routed_load_factor(tokens, 8, ep, "learned", None, experts, c) for ep in eps
                ]
                assert by_ep == sorted(by_ep)  # the search's least_memory_expert reads this


def test_forced_and_capacity_ignore_skew():
    assert routed_load_factor(4096, 8, 8, "forced", None, 256, 1.0) == 1.0
    assert routed_load_factor(4096, 8, 8, "learned", 1.25, 256, 1.0) == 1.25


def test_expert_level_maxvio_round_trips():
    # one expert per rank, N -> ∞: the model gives back the published MaxVio (Wang et al. 2024, Table 2)
    fig = _figure("wang2024-auxloss-3b")
    c = expert_cv_of(fig)
    assert c == pytest.approx(0.52 / math.sqrt(2 * math.log(64)))
    assert expected_max_load_factor(1e15, 64, 64, c) == pytest.approx(1.52, abs=1e-6)


def test_rank_aggregation_against_trtllm_table():
    # TensorRT-LLM blog4 Table 1 (DeepSeek-R1, EP 32, 8 experts a rank): expert cv 164.1/128 at 128 a slot gives
    # c = √(1.282² − (255/256)/128) = 1.27896; its rank spread √(c²·31/255 + 31/32768) = 0.44699 vs the table's
    # 491.6/1024 = 0.480 (hot experts share ranks a little more than random placement): within 10 %
    c = expert_cv_of(_figure("trtllm2025-dsr1-ep32-expert"))
    assert c == pytest.approx(1.27896, abs=1e-4)
    assert rank_load_spread(1024 * 32, 32, 256, c) == pytest.approx(0.480, rel=0.10)
    assert expert_cv_of(_figure("trtllm2025-dsr1-ep32-rank")) == pytest.approx(c, rel=0.10)


def test_defaults_by_balancing():
    assert published_expert_cv("aux_free", 0.001) == pytest.approx(
        0.04 / math.sqrt(2 * math.log(64))
    )
    assert published_expert_cv("aux_loss", 0.001) == pytest.approx(
        0.52 / math.sqrt(2 * math.log(64))
    )
    assert published_expert_cv("aux_loss", 0.01) == 0.0  # nothing published at Megatron's 1e-2
    assert published_expert_cv("global_aux_loss", None) == 0.0
    assert published_expert_cv(None, None) == 0.0
    assert default_load_figure("aux_free", 0.001).id == "wang2024-auxfree-3b"


def test_catalog_models_and_plan_override():
    dsv3 = load_model("deepseek-v3")
    assert router_expert_cv(dsv3, ExpertShape(64)) == pytest.approx(0.0138694, abs=1e-6)
    assert router_expert_cv(dsv3, ExpertShape(64, load_cv=0.3)) == 0.3
    for name in ("mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-120b", "kimi-k2", "grok-1"):
        assert router_expert_cv(load_model(name), ExpertShape(8)) == 0.0
