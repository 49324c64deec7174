"""BigScience's fused-softmax check (Oct 2021-Mar 2022) and its fp32 fallback (graph.megatron_softmax), by hand."""

import pytest

from paraplan.graph.eager_modules import composite
from paraplan.graph.megatron_softmax import (
    BIGSCIENCE,
    batch_per_block,
    fused_softmax_runs,
    scores_family,
    torch_softmax_fp32,
)
from paraplan.graph.transformer import LayerShape
from paraplan.specs.model import ModelSpec


@pytest.mark.parametrize(
    ("heads", "block"),
    [(8, 32), (12, 16), (16, 16), (24, 8), (26, 8), (28, 8), (32, 8), (128, 8), (256, 4)],
)
def test_batch_per_block_follows_get_batch_per_block(heads, block):
    # p = next power of two; warp = min(p, 32); 128 / warp warps of 2 rows (1 row when p > 128)
    assert batch_per_block(heads) == block


@pytest.mark.parametrize(
    ("micro_batch", "heads", "fused"),
    [
        (2, 16, True),  # a64 tp4: 32 % 16
        (2, 24, True),  # a96 tp4: 48 % 8
        (2, 26, False),  # a104 tp4: 52 % 8 = 4
        (2, 28, True),  # a112 tp4 (BLOOM): 56 % 8
        (2, 8, False),  # a64 tp8 mbs 2: 16 % 32
        (4, 8, True),  # a64 tp8 mbs 4: 32 % 32
        (1, 26, False),  # 26 % 4 != 0 already
    ],
)
def test_tr11_prequel_rows_take_the_path_the_check_gives(micro_batch, heads, fused):
    assert fused_softmax_runs(micro_batch, heads, 2048, 2048) is fused


def test_sequence_bounds_of_the_check():
    assert not fused_softmax_runs(4, 8, 4096, 4096)  # sq > 2048
    assert not fused_softmax_runs(4, 8, 16, 16)  # sq <= 16


def test_fallback_moves_the_hand_counted_bytes():
    forward, backward, saved = torch_softmax_fp32(2, True)
    # .float() 6, * scale 8, masked_fill_ 8, softmax 8, cast back 6, dropout 5
    assert sum(b for _, b in forward) == 41 and len(forward) == 6
    # dropout 5, cast 6, softmax_backward 12, masked_fill 8, * scale 8, cast 6
    assert sum(b for _, b in backward) == 45 and len(backward) == 6
    assert saved == 5
    forward, backward, saved = torch_softmax_fp32(2, False)
    assert (sum(b for _, b in forward), sum(b for _, b in backward), saved) == (36, 40, 4)


def test_family_and_composite_by_plan():
    # tr11 prequel shapes: a64 / a104 on tp 4 (16 / 26 heads per GPU), micro-batch 2, sequence 2048
    model = ModelSpec(
        name="h13312-a104", layers=2, hidden=13312, heads=104, ffn_hidden=53248, vocab=250880
    )
    model64 = model.model_copy(update={"heads": 64, "name": "h13312-a64"})
    impl = (("scores", BIGSCIENCE),)
    shape = LayerShape(4, 1, 2, 2048, True, "unfused", "bf16", module_impl=impl)
    assert model.has_dropout  # a gelu model
    fused, fallback = scores_family(model64, shape), scores_family(model, shape)
    assert fused == "scores" and fallback == "scores_fallback"
    # other stacks: the fused count
    assert scores_family(model, shape._replace(module_impl=())) == "scores"
    no_dropout = model.model_copy(update={"dropout": False})
    assert scores_family(no_dropout, shape) == "scores_fallback_no_dropout"
    assert composite(fused, dict(impl), 2, 2) is None  # the fused kernel, one per op
    found = composite(fallback, dict(impl), 2, 2)
    assert found is not None and found.kernels == (6, 6) and found.saved == 5
