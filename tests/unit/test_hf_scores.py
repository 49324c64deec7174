"""transformers' eager GPT-2 attention scores under autocast (graph.hf_scores, the scores role of
graph.eager_modules): the bytes and kernels against a hand count, their GPU time on the DGX-2H, the
activation memory they keep, and that only a case naming the implementation pays for it."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_system
from paraplan.cost import memory as mem
from paraplan.cost.compute import op_times_s
from paraplan.cost.frameworks import framework_system
from paraplan.graph import eager_modules as em
from paraplan.graph.hf_scores import gpt2_scores_amp
from paraplan.graph.ops import Op
from paraplan.graph.transformer import LayerShape
from paraplan.specs.model import ModelSpec

IMPL = "transformers-gpt2-4.12-amp"


@pytest.mark.parametrize(
    "i, dropout, fwd, bwd, kernels, saved",
    [
        # fp16 scores, fp32 mask: div 4, bool copy 0, mask cast 0, where 4, add 6 (fp32 out), softmax 8,
        # .type 6, dropout 5 = 33; backward dropout 5, cast 6, softmax 12, engine cast 6, zeros 2,
        # where 6, div 4 = 41; saved: the fp32 softmax output 4 and the dropout mask 1
        (2, True, 33, 41, (8, 7), 5),
        (2, False, 28, 36, (7, 6), 4),
        # an fp32 run: no casts; div 8, where 8, add 8, softmax 8, dropout 9 / 9, 12, 4, 12, 8
        (4, True, 41, 45, (7, 5), 5),
    ],
)
def test_the_gpt2_scores_move_the_hand_counted_bytes(i, dropout, fwd, bwd, kernels, saved):
    family = "scores" if dropout else "scores_no_dropout"
    c = em.composite(family, {"scores": IMPL}, i, i)
    assert sum(k.bytes for k in c.forward) == fwd
    assert sum(k.bytes for k in c.backward) == bwd
    assert c.kernels == kernels
    assert c.saved == saved
    assert len(gpt2_scores_amp(i, dropout)[0]) == kernels[0]


def test_only_the_named_implementation_picks_the_gpt2_scores():
    assert em.composite("scores", {}, 2, 2) is None
    assert em.composite("scores", {"scores": "megatron-2019"}, 2, 2).kernels == (5, 4)
    assert em.composite("gelu_new", {"scores": IMPL}, 2, 2) is None


def test_the_gpt2_scores_are_priced_at_the_hbm_rate_on_the_dgx2h():
    base = load_system("dgx-2h")
    profile = load_framework("hf-transformers")
    impl = {**profile.module_impl, "scores": IMPL}
    acc = framework_system(profile.model_copy(update={"module_impl": impl}), base).accelerator
    rows, width = 20 * 1024, 1024  # gpt2-large at micro-batch 1: b·a·s rows of s scores
    op = Op("softmax_dropout", "memory", 0.0, 9.0 * rows * width, 0.0, 18.0 * rows * width)
    op = op._replace(kernel=("scores", rows, width))
    rate = base.accelerator.hbm_bandwidth * base.accelerator.efficiency.hbm
    floor = acc.efficiency.kernel_overhead_s  # the two per-layer kernels (bool copy, scalar cast)
    fwd, bwd = op_times_s(op, acc, "fp16")
    assert fwd == pytest.approx(33 * rows * width / rate + 2 * floor, rel=1e-9)
    assert bwd == pytest.approx(41 * rows * width / rate, rel=1e-9)
    # the profile as shipped keeps the fused count at its eager traffic factor
    plain = framework_system(profile, base).accelerator
    assert op_times_s(op, plain, "fp16")[0] < fwd


def _gpt2_large() -> ModelSpec:
    return ModelSpec(
        name="gpt2-large",
        layers=36,
        hidden=1280,
        heads=20,
        ffn_hidden=5120,
        vocab=50257,
        activation="gelu_new",
        tie_embeddings=True,
        bias=True,
        dropout=True,
        position_embedding="learned",
        max_position=1024,
    )


def test_the_gpt2_scores_keep_their_fp32_softmax_output():
    model = _gpt2_large()

    def shape(impl):
        return LayerShape(1, 1, 1, 1024, False, "unfused", "fp16", module_impl=impl)

    assert mem.score_bytes(model, shape(())) == 5  # softmax 2, mask 1, dropout output 2
    assert mem.score_bytes(model, shape((("scores", "megatron-2019"),))) == 5
    assert mem.score_bytes(model, shape((("scores", IMPL),))) == 7  # softmax 4, mask 1, output 2
    plain = mem.layer_activation_parts(model, shape(()))
    hf = mem.layer_activation_parts(model, shape((("scores", IMPL),)))
    assert hf.attention_internals - plain.attention_internals == 2 * 20 * 1024 * 1024
