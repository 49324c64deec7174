"""Parameter counts of MoE models: total stores every routed expert, active counts the top_k a token
uses (published figures: Mixtral 8x7B 46.7B / 12.9B, Jiang et al. 2024 §2; Qwen3-235B-A22B 235B / 22B,
Qwen3 technical report Table 1; DeepSeek-V3 671B main model + MTP / 37B active, arXiv:2412.19437 §1)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model
from paraplan.graph.params import parameter_counts


@pytest.mark.parametrize(
    "name, total_b, active_b, rel",
    [
        ("mixtral-8x7b", 46.7, 12.9, 0.01),
        ("qwen3-235b-a22b", 235.0, 22.0, 0.02),
        ("deepseek-v3", 685.0, 37.0, 0.04),
    ],
)
def test_moe_totals_count_every_expert_and_active_the_routed_ones(name, total_b, active_b, rel):
    counts = parameter_counts(load_model(name))
    assert counts.total == pytest.approx(total_b * 1e9, rel=rel)
    assert counts.active == pytest.approx(active_b * 1e9, rel=rel)
    assert counts.total == pytest.approx(counts.layers + counts.embedding + counts.head)
