"""graph.transformer.cp_free_memo: the decoder layer's ops around its core attention, the embedding and the LM head
are memoised on cp_free_key; a shape met after another with the same key gets what a fresh build of it gives."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model
from paraplan.graph import transformer
from paraplan.graph.transformer import LayerShape, cp_free_key

# (tp, cp, micro-batch, SP, dtype): the first two pairs share b·s/c, the last differs in the dtype
SHAPES = [
    (4, 2, 2, True, "bf16"),
    (4, 1, 1, True, "bf16"),
    (4, 4, 4, False, "fp8"),
    (4, 1, 1, False, "fp8"),
]


def _shape(tp, cp, mb, sp, dtype) -> LayerShape:
    return LayerShape(tp, cp, mb, 4096, sp, "flash", dtype)


def _fresh(build, *args):
    """``build(*args)`` with every graph memo cleared first: what a first build gives."""
    for memo in (transformer._outer_ops, transformer.decoder_layer_1d, transformer.embedding_block):
        memo.cache_clear()
    transformer.lm_head_block.cache_clear()
    return build(*args)


def _fields(graph) -> tuple:
    """A graph's fields (LayerGraph compares by identity)."""
    return graph.name, graph.ops, graph.collectives, graph.weight_params


@pytest.mark.parametrize("model_name", ["llama3-8b", "gpt3-2.7b"])
def test_memoised_builds_equal_fresh_ones(model_name):
    model = load_model(model_name)
    for build, extra in (
        (transformer.decoder_layer_1d, ()),
        (transformer.embedding_block, ()),
        (transformer.lm_head_block, (False,)),
    ):
        fresh = {s: _fresh(build, model, _shape(*s), *extra) for s in SHAPES}
        _fresh(lambda: None)
        for s in SHAPES + SHAPES[::-1]:  # each met after one of its key and after others
            assert _fields(build(model, _shape(*s), *extra)) == _fields(fresh[s])


def test_shapes_equal_on_the_key_share_the_head_and_the_outer_ops():
    model = load_model("llama3-8b")
    a, b = _shape(*SHAPES[0]), _shape(*SHAPES[1])
    assert cp_free_key(a) == cp_free_key(b) and a != b
    assert transformer.lm_head_block(model, a, False) is transformer.lm_head_block(model, b, False)
    assert transformer._outer_ops(model, a) is transformer._outer_ops(model, b)
    # the core attention reads cp: the layers differ there alone
    la, lb = transformer.decoder_layer_1d(model, a), transformer.decoder_layer_1d(model, b)
    assert la.ops != lb.ops
    before, after = transformer._outer_ops(model, a)
    assert la.ops[: len(before)] == lb.ops[: len(before)] == before
    assert la.ops[len(la.ops) - len(after) :] == after
