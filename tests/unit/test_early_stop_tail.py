"""Full recomputation under torch.utils.checkpoint's early stop (step.block_sums.early_stop_tail_s,
step.block_terms.recompute_s; docs/model.md "One-knob pairs")."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework
from paraplan.graph.ops import Op
from paraplan.step.block_sums import BlockCompute, early_stop_tail_s
from paraplan.step.block_terms import recompute_s

ROWS, H = 8192.0, 2048.0
GEMM = Op("mlp_out_projection", "gemm", 1.0, 1.0, 2.0, 2.0, gemm_shape=(1, 8192, 2048, 8192))
ADD = Op("mlp_residual", "memory", 1.0, 1.0, 0.0, 1.0, kernel=("add", ROWS, H))
NORM = Op("post_attention_norm", "memory", 1.0, 1.0, 1.0, 1.0, kernel=("layernorm", ROWS, H))
TIMES = {GEMM: (0.431e-3, 0.867e-3), ADD: (0.080e-3, 0.156e-3), NORM: (0.055e-3, 0.105e-3)}


def test_tail_is_the_output_gemm_and_the_add():
    # 0.431 ms + 0.080 ms: the forward GEMM and the residual add, nothing of their backward
    assert early_stop_tail_s((NORM, GEMM, ADD), TIMES) == pytest.approx(0.511e-3)


def test_no_tail_unless_the_block_ends_with_them():
    assert early_stop_tail_s((GEMM, ADD, NORM), TIMES) == 0.0  # a norm saves tensors last
    assert early_stop_tail_s((NORM, ADD), TIMES) == 0.0
    assert early_stop_tail_s((ADD,), TIMES) == 0.0
    dropout_add = ADD._replace(
        kernel=("dropout_add", ROWS, H)
    )  # the mask is saved after its kernel
    assert early_stop_tail_s((GEMM, dropout_add), {**TIMES, dropout_add: (0.1e-3, 0.1e-3)}) == 0.0


def test_full_recompute_less_the_tail():
    c = BlockCompute(2.105e-3, 4.2e-3, 0.28e-3, 0.7e-3, 1.3e-3, 2.6e-3, early_stop_forward=0.511e-3)
    assert recompute_s(c, 2) == pytest.approx(2.105e-3 - 0.511e-3)
    assert recompute_s(c, 1) == pytest.approx(0.28e-3)  # selective: unchanged
    assert recompute_s(c._replace(early_stop_forward=0.0), 2) == pytest.approx(2.105e-3)


@pytest.mark.parametrize(
    ("profile", "early"),
    [
        ("pytorch-eager", True),
        ("pytorch-eager-bf16", True),
        ("pytorch-compile", False),  # a compiled checkpoint is partitioned by AOTAutograd
        ("hf-transformers", False),
        ("megatron-core", False),  # Megatron's own checkpoint function re-runs the whole forward
    ],
)
def test_profiles(profile, early):
    assert load_framework(profile, "framework", True).checkpoint_early_stop is early
