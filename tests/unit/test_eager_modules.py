"""Modules run as composites of eager element-wise kernels (graph.eager_modules; issue 32): each composite's
bytes and kernels against a hand count, its GPU time, host kernels and memory from the same list, and a
composite never cheaper than the fused kernel it stands for."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_system
from paraplan.catalog.hf import model_from_hf_config
from paraplan.cost import host as H
from paraplan.cost import memory as mem
from paraplan.cost.eager_kernels import composite_times_s, eager_kernel_times_s
from paraplan.cost.frameworks import framework_system
from paraplan.graph import eager_modules as em
from paraplan.graph.ops import Op
from paraplan.graph.transformer import LayerShape
from paraplan.specs.errors import InputError
from paraplan.specs.framework import FrameworkSpec
from paraplan.specs.system import SystemSpec

HF = "hf-transformers"
IMPL = {
    "norm": "transformers-rmsnorm",
    "activation": "transformers-act2fn",
    "rotary": "transformers-rotate-half",
    "loss": "fp32-logits",
}


def _bytes(kernels) -> float:
    return sum(k.bytes for k in kernels)


@pytest.mark.parametrize(
    "make, fwd, bwd, kernels, saved",
    [
        # NewGELUActivation beside bf16 GEMMs: 0.5x 4, cast 6, pow 8, mul 8, add 10, mul 8, tanh 8, add 8,
        # mul 10, cast 6 = 76; backward 6 + 12 + 6 + 10 + 12 + 8 + 6 + 8 + 28 + 6 + 4 + 6 + 6 = 118
        (lambda: em.gelu_new(2, 2), 76, 118, (10, 15), 14),
        # in fp32 (no autocast): 8 + 8 + 8 + 12 + 8 + 8 + 8 + 12 = 72; 12 + 12 + 12 + 8 + 8 + 28 + 8 + 24 = 112
        (lambda: em.gelu_new(4, 4), 72, 112, (8, 11), 16),
        # LlamaRMSNorm on the fp32 residual stream: pow 8, mean 4, mul 8, weight mul 8 = 28;
        # 8 + 12 + 4 + 8 + 12 + 4 + 4 + 28 + 12 = 92
        (lambda: em.rmsnorm_upcast(4), 28, 92, (6, 14), 8),
        # on bf16 q/k heads, two tensors: 6 + 8 + 4 + 8 + 6 + 6 = 38; 8+6+10+4+6+8+12+4+4+28+12+6 = 108
        (lambda: em.rmsnorm_upcast(2, 2), 38, 108, (16, 34), 6),
        # rotate_half on bf16 q and k with fp32 cos/sin: 2 + 4 + 6 + 6 + 12 + 6 = 36;
        # 6 + 8 + 6 + 8 + 6 + 2 + 4 × 2 + 6 + 6 = 56
        (lambda: em.rotate_half(2, 2), 36, 56, (12, 24), 0),
        # after an fp32 q/k norm: 4 + 8 + 8 + 8 + 12 + 6 = 46; 6 + 8 + 8 + 4 + 4 × 4 + 12 + 12 = 66
        (lambda: em.rotate_half(4, 2), 46, 66, (12, 20), 0),
    ],
)
def test_each_composite_moves_the_bytes_counted_by_hand(make, fwd, bwd, kernels, saved):
    c = make()
    assert _bytes(c.forward) == fwd
    assert _bytes(c.backward) == bwd
    assert c.kernels == kernels
    assert c.saved == saved


def test_a_composite_is_chosen_only_by_its_role_and_family():
    assert em.composite("gelu_new", IMPL, 2, 2) == em.gelu_new(2, 2)
    assert em.composite("gelu_new", {"activation": "fused"}, 2, 2) is None
    assert em.composite("gelu", IMPL, 2, 2) is None  # gelu_pytorch_tanh / gelu: one F.gelu kernel
    assert em.composite("layernorm", IMPL, 4, 2) is None  # nn.LayerNorm: one ATen kernel
    assert em.composite("rotary_normed", IMPL, 4, 2) == em.rotate_half(4, 2)
    assert em.input_bytes("rmsnorm", {"residual": "fp32"}, 2) == 4
    assert em.input_bytes("gelu_new", {"activation": "bf16"}, 2) == 2
    assert em.input_bytes("rotary_normed", {}, 2) == 4
    assert em.impl_key({"norm": "fused", "loss": "fp32-logits"}) == (("loss", "fp32-logits"),)


def _hf_accelerator(system: str = "dgx-h100-80gb"):
    return framework_system(load_framework(HF), load_system(system)).accelerator


def _op(family: str, rows: float, width: float) -> Op:
    return Op(
        "x",
        "memory",
        0.0,
        2.0 * rows * width,
        0.0,
        4.0 * rows * width,
        kernel=(family, rows, width),
    )


def test_a_composite_is_priced_kernel_by_kernel_at_the_hbm_rate_without_a_table():
    acc = _hf_accelerator()  # the catalog H100: no kernels table, 3.35 TB/s x 0.85
    rate = 3.35e12 * 0.85
    n = 16384 * 3072  # GPT-2's MLP width at 16 x 1024 tokens: every kernel far above the 4 us floor
    fwd, bwd = composite_times_s(_op("gelu_new", 16384, 3072), acc, "bf16")
    assert fwd == pytest.approx(76 * n / rate)
    assert bwd == pytest.approx(118 * n / rate)
    # the layer RMSNorm adds the next GEMM's autocast cast of its fp32 output, 6 B each way
    n = 8192 * 2048
    fwd, bwd = composite_times_s(_op("rmsnorm", 8192, 2048), acc, "bf16")
    floor = 2 * 4e-6  # + eps and rsqrt: per-row kernels at the launch floor
    assert fwd == pytest.approx((28 + 6) * n / rate + floor)
    assert bwd == pytest.approx((92 + 6) * n / rate + 3 * 4e-6)


def test_only_a_stack_that_names_the_composite_pays_for_it():
    fused = framework_system(load_framework("pytorch-eager"), load_system("dgx-h100-80gb"))
    op = _op("gelu_new", 16384, 3072)
    assert composite_times_s(op, fused.accelerator, "bf16") is None
    assert eager_kernel_times_s(op, _hf_accelerator(), "bf16") == composite_times_s(
        op, _hf_accelerator(), "bf16"
    )


def _with_table(acc):
    return acc.model_copy(update={"kernel_tables": "h100-sxm5-80gb"})


@pytest.mark.parametrize("table", [False, True])
@pytest.mark.parametrize("rows", [2048.0, 8192.0, 65536.0])
@pytest.mark.parametrize(
    "family, fused, width",
    [
        ("gelu_new", "gelu", 3072.0),
        ("rmsnorm", "rmsnorm", 2048.0),
        ("qk_rmsnorm", "qk_rmsnorm", 128.0),
    ],
)
def test_a_composite_is_never_cheaper_than_its_fused_kernel(table, rows, family, fused, width):
    acc = _hf_accelerator()
    acc = _with_table(acc) if table else acc
    plain = acc.model_copy(
        update={"efficiency": acc.efficiency.model_copy(update={"module_impl": {}})}
    )
    for dtype in ("bf16", "fp32"):
        mixed = eager_kernel_times_s(_op(family, rows, width), acc, dtype)
        one = eager_kernel_times_s(_op(fused, rows, width), plain, dtype)
        if one is None:  # no table: the fused op's bytes at the HBM rate with the traffic factor
            from paraplan.cost.compute import memory_time_s

            op = _op(fused, rows, width)
            one = memory_time_s(op.fwd_bytes, plain), memory_time_s(op.bwd_bytes, plain)
        assert mixed[0] >= one[0] and mixed[1] >= one[1]


def test_the_host_counts_the_composites_kernels():
    impl = (IMPL, {"norm": "fp32", "activation": "bf16", "residual": "fp32"})
    op = _op("gelu_new", 16384, 3072)
    assert H.op_kernels(op, eager=True, autocast=True, impl=impl) == (10, 15)
    assert H.op_kernels(op, eager=True, autocast=False, impl=impl) == (8, 11)
    assert H.op_kernels(op, eager=True, autocast=True) == (1, 1)  # no module_impl: one GeLU kernel
    rotary = Op("rotary_embedding", "memory", 0.0, 1.0, 0.0, 2.0, kernel=("rotary", 8192.0, 2560.0))
    assert H.op_kernels(rotary, eager=True, autocast=True, impl=impl) == (12, 24)
    assert H.op_kernels(rotary, eager=True, autocast=True) == (10, 10)


def _shape(micro_batch=16, seq=1024, dtype="bf16", impl=()):
    return LayerShape(1, 1, micro_batch, seq, False, "flash", dtype, module_impl=impl)


def test_the_composites_and_the_fp32_logit_loss_add_their_saved_bytes():
    gpt2 = model_from_hf_config(
        {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257},
        "gpt2",
    )
    assert gpt2.activation == "gelu_new"
    tokens = 16 * 1024
    impl = em.impl_key(IMPL)
    # NewGELUActivation keeps 12 B per MLP element more than the fused GeLU's input; GPT-2 has LayerNorm
    assert mem.eager_module_bytes(gpt2, _shape(impl=impl)) == (0.0, 12.0 * tokens * 3072)
    assert mem.eager_module_bytes(gpt2, _shape()) == (0.0, 0.0)
    extra = mem.layer_activation_bytes(
        gpt2, _shape(impl=impl), "none"
    ) - mem.layer_activation_bytes(gpt2, _shape(), "none")
    assert extra == 12.0 * tokens * 3072
    # ForCausalLMLoss holds 12 B per logit at the start of backward, the fused loss 4
    held = mem.lm_head_activation_bytes(gpt2, _shape(impl=impl))
    assert held - mem.lm_head_activation_bytes(gpt2, _shape()) == 8.0 * tokens * 50257
    # LlamaRMSNorm: fp32 input and output kept (8 B) where the layer terms count 2 per norm input;
    # Qwen3's q/k norms 4 + 2 per q/k element
    qwen = model_from_hf_config(
        {
            "model_type": "qwen3",
            "hidden_size": 1024,
            "num_hidden_layers": 2,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "intermediate_size": 3072,
            "vocab_size": 151936,
        },
        "qwen3",
    )
    rep, tp = mem.eager_module_bytes(qwen, _shape(4, 2048, impl=impl))
    assert rep == 2 * 8192 * 1024 * (8 - 2)
    assert tp == 8192 * (2048 + 1024) * 6


def test_the_gpt2_reader_and_the_profile_refuse_bad_values():
    base = {"model_type": "gpt2", "n_embd": 768, "n_layer": 2, "n_head": 12, "vocab_size": 50257}
    assert model_from_hf_config({**base, "activation_function": "relu"}, "g").activation is None
    tanh = model_from_hf_config({**base, "activation_function": "gelu_pytorch_tanh"}, "g")
    assert tanh.activation == "gelu_pytorch_tanh"
    with pytest.raises(InputError, match="activation_function"):
        model_from_hf_config({**base, "activation_function": 3}, "g")
    with pytest.raises(ValueError, match="module_impl.norm: 'transformers-act2fn' is not allowed"):
        FrameworkSpec.model_validate(
            {**load_framework(HF).model_dump(), "module_impl": {"norm": "transformers-act2fn"}}
        )


def test_the_gpt2_step_with_gelu_new_is_slower_and_larger_than_with_the_fused_gelu():
    from paraplan.specs.plan import PlanSpec
    from paraplan.step.estimate import estimate

    base = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50304}
    new = model_from_hf_config(base, "gpt2")
    tanh = model_from_hf_config({**base, "activation_function": "gelu_pytorch_tanh"}, "gpt2")
    system = framework_system(load_framework(HF), load_system("dgx-h100-80gb"))
    assert isinstance(system, SystemSpec)
    plan = PlanSpec(gpus=1, micro_batch=16, global_batch=16, seq_length=1024, dtype="bf16")
    slow, fast = estimate(new, system, plan), estimate(tanh, system, plan)
    assert slow.step_time_s > fast.step_time_s * 1.2
    assert slow.peak_stage.peak_bytes > fast.peak_stage.peak_bytes
