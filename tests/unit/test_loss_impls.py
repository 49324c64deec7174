"""The LM head's loss as an input of the stack (graph.losses.LOSS_IMPLS; issue 32): each
implementation's bytes per logit in the op graph, its kernels on the host, its memory held at the start of
backward against a hand count, and more bytes per logit never faster."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost import host as H
from paraplan.cost import memory as mem
from paraplan.cost.compute import memory_time_s
from paraplan.graph import eager_modules as em
from paraplan.graph.losses import LOSS_IMPLS
from paraplan.graph.transformer import LayerShape, lm_head_block
from paraplan.specs.system import MODULE_IMPLS

MODEL = load_model("gpt3-125m")
SHAPE = LayerShape(
    tp=2,
    cp=1,
    micro_batch=4,
    seq_length=1024,
    sequence_parallel=False,
    attention="flash",
    dtype="bf16",
)


def _shape(loss: str) -> LayerShape:
    return SHAPE._replace(module_impl=em.impl_key({"loss": loss}))


def _loss_op(loss: str):
    (op,) = [o for o in lm_head_block(MODEL, _shape(loss), False).ops if o.name == "cross_entropy"]
    return op


def test_every_allowed_loss_has_an_implementation():
    assert set(MODULE_IMPLS["loss"]) == set(LOSS_IMPLS)


@pytest.mark.parametrize(
    "loss, fwd, bwd, held",
    [
        (
            "fused",
            12,
            8,
            4,
        ),  # fp32 logits read/written ~3× forward, 2× backward; the fp32 softmax held
        ("fp32-logits", 12, 8, 12),  # log_softmax out 4 + nll grad 4 + log_softmax grad 4 held
        (
            "inductor-fused",
            4,
            4,
            4,
        ),  # bf16 row read twice; read logits 2 + write grad 2; 2 + 2 held
    ],
)
def test_bytes_per_logit_by_hand(loss, fwd, bwd, held):
    logits = 4 * 1024 * MODEL.vocab / 2  # b·s·V/t
    op = _loss_op(loss)
    assert op.fwd_bytes == pytest.approx(fwd * logits)
    assert op.bwd_bytes == pytest.approx(bwd * logits)
    hidden = 2 * 2 * 4 * 1024 * MODEL.hidden  # final-norm and LM-head inputs, bf16, no SP
    assert mem.lm_head_activation_bytes(MODEL, _shape(loss)) == pytest.approx(
        hidden + held * logits
    )


def test_default_is_todays_pricing():
    assert (
        _loss_op("fused")
        == [o for o in lm_head_block(MODEL, SHAPE, False).ops if o.name == "cross_entropy"][0]
    )
    assert mem.lm_head_activation_bytes(MODEL, SHAPE) == mem.lm_head_activation_bytes(
        MODEL, _shape("fused")
    )


@pytest.mark.parametrize("system", ["rtx-4090-8", "dgx-h100-80gb", "dgx-a100-80gb"])
def test_more_bytes_per_logit_never_faster(system):
    acc = load_system(system).accelerator
    ranked = sorted(LOSS_IMPLS, key=lambda n: LOSS_IMPLS[n].fwd_bytes + LOSS_IMPLS[n].bwd_bytes)
    times = []
    for loss in ranked:
        op = _loss_op(loss)
        times.append(memory_time_s(op.fwd_bytes, acc) + memory_time_s(op.bwd_bytes, acc))
    assert times == sorted(times)
    assert times[0] < times[-1]


def test_host_counts_the_implementations_kernels():
    for loss, impl in LOSS_IMPLS.items():  # an eager stack: the implementation's kernels
        assert H.op_kernels(_loss_op(loss), True, impl=({"loss": loss}, {})) == impl.kernels
    assert H.op_kernels(_loss_op("fp32-logits"), True, impl=({"loss": "fp32-logits"}, {})) == (3, 4)
    # a fused (compiled) stack: one generated kernel each way
    assert H.op_kernels(_loss_op("inductor-fused"), False) == (1, 1)


def test_compiled_profile_runs_the_fused_loss_and_eager_profiles_the_fp32_one():
    assert load_framework("pytorch-compile").module_impl["loss"] == "inductor-fused"
    assert load_framework("pytorch-eager").module_impl["loss"] == "fp32-logits"
    assert "loss" not in load_framework("megatron-core").module_impl
