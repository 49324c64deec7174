"""Which implementation of a module an eager stack runs, and the element-wise kernels it is (issue 32).

A framework profile names, per module role, the implementation its model code runs (``module_impl``,
specs.framework.FrameworkSpec; specs.system.MODULE_IMPLS lists them). "fused" (the default) is one kernel per op,
the op graph's own count (graph.transformer); the others are composites of eager ATen element-wise kernels,
each listed here once, forward and backward, with the bytes it moves per element of the module's input, so
that the GPU time (cost.eager_kernels.composite_times_s), the host's kernel count (cost.host.op_kernels) and
the activation memory autograd keeps (cost.memory) all read the same list:

- ``norm: transformers-rmsnorm``: transformers' LlamaRMSNorm (models/llama/modeling_llama.py at 5.17; Qwen3's
  Qwen3RMSNorm and its per-head ``q_norm`` / ``k_norm`` are the same code): ``x.to(float32)``, ``pow(2)``,
  ``mean(-1)``, ``+ eps``, ``rsqrt``, ``x * r``, ``.to(input_dtype)``, ``weight * y`` (``rmsnorm_upcast``).
  LayerNorm models run nn.LayerNorm, one ATen kernel: "fused".
- ``activation: transformers-act2fn``: the model's activation by its transformers name (ModelSpec.activation,
  activations.py ACT2FN): ``gelu_new`` is NewGELUActivation, ``0.5 * x * (1.0 + tanh(sqrt(2/pi) * (x + 0.044715
  * pow(x, 3.0))))`` (``gelu_new``); ``gelu_pytorch_tanh`` and ``gelu`` one F.gelu kernel, SiLU the gated MLP's
  two (cost.eager_kernels RECIPES).
- ``rotary: transformers-rotate-half``: apply_rotary_pos_emb (modeling_llama.py): ``q * cos + rotate_half(q) *
  sin`` and the same for k, rotate_half = ``cat((-x2, x1), -1)`` of the two halves (``rotate_half``).
- ``loss``: the LM head's cross-entropy, one of graph.losses.LOSS_IMPLS (bytes per logit forward and backward,
  kernels, bytes per logit held at the start of backward): ``fused`` (the default, Megatron-LM's
  vocab-parallel cross-entropy as the op graph has always priced it), ``fp32-logits`` (eager
  ``logits.float()`` then F.cross_entropy: transformers' ForCausalLMLoss, the time of the kernels table's
  ``cross_entropy_fp32_fwd_bwd`` where the profile names the loss role), ``inductor-fused`` (the loss inside
  a torch.compile'd graph: TorchInductor's generated reduction and point-wise kernels over the bf16 logits).
- ``scores``: the unfused mask, softmax and dropout over the attention scores as Megatron-LM's 2019 and v1.0 code
  (``megatron_scores``), transformers' GPT-2 (graph.hf_scores) or BigScience's (graph.megatron_softmax) runs them.

Dtypes follow torch.autocast (bf16) over fp32 parameters, PyTorch 2.4-2.11 (aten/src/ATen/autocast_mode.cpp):
``pow`` and ``rsqrt`` are on CUDA autocast's fp32 list (their output is fp32 whatever the input), ``mul`` /
``add`` / ``tanh`` / ``cat`` are not and promote (bf16 × fp32 → fp32), a GEMM or SDPA casts an fp32 input to
bf16 (one ``_to_copy``); autograd's backward of a mixed-dtype op casts each input's gradient back to that
input's dtype (one ``_to_copy``), an input used n times sums n gradients (n − 1 adds), a slice's backward is a
zero fill and a copy (aten ``slice_backward``). The backward formulas are PyTorch's
(tools/autograd/derivatives.yaml): ``pow_backward`` = grad · (e · x.pow(e − 1)), three kernels; ``mul`` one
kernel per input that needs a gradient, plus a sum over the broadcast dimension for a broadcast one; ``tanh``
``tanh_backward``; ``mean`` the expanded gradient divided by the count. Bytes count a tensor of ``i`` bytes per
element as read or written once; per-row tensors (a norm's variance, cos / sin per token) are left out and
their kernels are per-row kernels (``bytes`` 0, the launch floor).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import NamedTuple

from paraplan.graph.hf_scores import gpt2_scores_amp
from paraplan.graph.losses import FP32
from paraplan.graph.megatron_softmax import BIGSCIENCE, FALLBACK_FAMILIES, torch_softmax_fp32

PRECISION_BYTES = {
    "bf16": 2,
    "fp32": FP32,
}  # a profile's eager_kernels precision -> bytes per element


class Kernel(NamedTuple):
    """One ATen kernel of a composite: its op and the bytes it reads and writes per element of the module's
    input (0: a kernel over one value per row)."""

    op: str
    bytes: float


class Composite(NamedTuple):
    """A module run as eager element-wise kernels: forward and backward kernels (each run once per tensor of
    ``tensors``: q and k for the rotary embedding and q/k norms) and the bytes per element autograd keeps for
    the backward."""

    forward: tuple[Kernel, ...]
    backward: tuple[Kernel, ...]
    saved: float
    tensors: int = 1

    @property
    def kernels(self) -> tuple[int, int]:
        """(forward, backward) kernels launched: the lists' lengths × tensors."""
        return len(self.forward) * self.tensors, len(self.backward) * self.tensors


# pow_backward on an fp32 tensor (derivatives.yaml: grad · (e · x.pow(e − 1))): x.pow(e − 1) 8, e · 8, grad · 12
POW_BACKWARD = (Kernel("pow", 8), Kernel("mul", 8), Kernel("mul", 12))
# rsqrt_backward on one value per row (−0.5 · grad · r.pow(3)): three per-row kernels
RSQRT_BACKWARD = (Kernel("pow", 0), Kernel("mul", 0), Kernel("mul", 0))


def _broadcast_grad(nbytes: float) -> tuple[Kernel, ...]:
    """The gradient of a broadcast input of a mul: grad · other (``nbytes``), summed over the broadcast
    dimension (an fp32 read, 4; sum_to_size)."""
    return Kernel("mul", nbytes), Kernel("sum", 4)


def _casts(n: int, nbytes: float) -> tuple[Kernel, ...]:
    return tuple(Kernel("_to_copy", nbytes) for _ in range(n))


def gelu_new(i: int, a: int) -> Composite:
    """NewGELUActivation (transformers activations.py) on an input of ``i`` bytes per element, ``a`` the GEMMs'
    operand bytes (2 under bf16 autocast, 4 in fp32; ``a`` < 4: autocast's casts). Forward, in Python's order:
    0.5·x (2i); [x to fp32 for autocast's pow, i + 4]; pow 8; ·0.044715 8; x + (i + 8); ·sqrt(2/π) 8; tanh 8;
    1 + 8; (0.5x)·(...) (i + 8, an fp32 result); [the next GEMM's cast of it, 4 + i]: 70 B + 6 at i = 2
    (8 + 1 + 1 kernels), 72 B at i = 4 (8 kernels). Backward: [grad to fp32, i + 4]; grad·u 12 [to 0.5x's
    dtype, 4 + i]; grad·0.5x (8 + i); tanh_backward 12; ·sqrt(2/π) 8; [to x's dtype for the add, 4 + i];
    ·0.044715 8; pow_backward 8 + 8 + 12; [the upcast's backward, 4 + i]; ·0.5 (2i); x's three gradients
    summed, 2 × 3i: 118 B at i = 2 (15 kernels), 112 B at i = 4 (11). Saved: pow's fp32 input 4, tanh's output
    4, 0.5x (i) and the fp32 bracket 4: 12 + i (the fused GeLU keeps x, i)."""
    cast = a < FP32
    forward = (
        Kernel("mul", 2 * i),
        *_casts(cast, i + FP32),
        Kernel("pow", 8),
        Kernel("mul", 8),
        Kernel("add", i + 8),
        Kernel("mul", 8),
        Kernel("tanh", 8),
        Kernel("add", 8),
        Kernel("mul", i + 8),
        *_casts(cast, FP32 + a),
    )
    backward = (
        *_casts(cast, a + FP32),
        Kernel("mul", 12),
        *_casts(cast, FP32 + i),
        Kernel("mul", 8 + i),
        Kernel("tanh_backward", 12),
        Kernel("mul", 8),
        *_casts(cast, FP32 + i),
        Kernel("mul", 8),
        *POW_BACKWARD,
        *_casts(cast, FP32 + i),
        Kernel("mul", 2 * i),
        Kernel("add", 3 * i),
        Kernel("add", 3 * i),
    )
    return Composite(forward, backward, 12.0 + i)


def _rms_normalise(i: int) -> tuple[Kernel, ...]:
    """The normalisation both RMSNorm composites run on an input of ``i`` bytes, before the weight: [to fp32,
    i + 4]; pow 8; mean 4; + eps and rsqrt per row; x·r 8; [back to the input dtype, 4 + i]."""
    up = i < FP32
    return (
        *_casts(up, i + FP32),
        Kernel("pow", 8),
        Kernel("mean", 4),
        Kernel("add", 0),
        Kernel("rsqrt", 0),
        Kernel("mul", 8),
        *_casts(up, FP32 + i),
    )


def _rms_normalise_backward(i: int) -> tuple[Kernel, ...]:
    """``_rms_normalise``'s backward from the downcast's gradient on: [its backward, i + 4]; dy·r 8; Σ_h dy·x,
    mul 12 and sum 4; rsqrt_backward's three per-row kernels; mean's backward 4; pow_backward 8 + 8 + 12; x's
    two gradients summed 12; [the upcast's backward, 4 + i]."""
    up = i < FP32
    return (
        *_casts(up, i + FP32),
        Kernel("mul", 8),
        *_broadcast_grad(12),
        *RSQRT_BACKWARD,
        Kernel("div", 4),
        *POW_BACKWARD,
        Kernel("add", 12),
        *_casts(up, FP32 + i),
    )


def rmsnorm_upcast(i: int, tensors: int = 1) -> Composite:
    """LlamaRMSNorm (module docstring) on an input of ``i`` bytes per element with an fp32 weight. Forward:
    [to fp32, i + 4]; pow 8; mean 4; + eps and rsqrt per row; x·r 8; [to the input dtype, 4 + i]; weight·y
    (i + 4, fp32 out): 28 B at i = 4 (6 kernels), 38 B at i = 2 (8). Backward: grad·weight 8 [to y's dtype,
    4 + i]; weight's gradient Σ_rows grad·y, mul (8 + i) and sum 4; [the downcast's backward, i + 4]; dy·r 8;
    Σ_h dy·x, mul 12 and sum 4; rsqrt_backward's three per-row kernels; mean's backward, the expanded
    gradient over the count, 4; pow_backward 8 + 8 + 12; x's two gradients summed 12; [the upcast's backward,
    4 + i]: 92 B at i = 4 (14 kernels), 108 B at i = 2 (17). Saved: the fp32 x (4) and y (i): 4 + i."""
    forward = (*_rms_normalise(i), Kernel("mul", i + FP32))
    backward = (
        Kernel("mul", 8),
        *_casts(i < FP32, FP32 + i),
        *_broadcast_grad(8 + i),
        *_rms_normalise_backward(i),
    )
    return Composite(forward, backward, FP32 + i, tensors)


def rotate_half(i: int, a: int) -> Composite:
    """apply_rotary_pos_emb on q and k (``tensors`` 2) of ``i`` bytes per element, with cos and sin in the
    hidden states' dtype (fp32 under autocast over fp32 parameters: LlamaRotaryEmbedding returns
    ``cos.to(x.dtype)``, x the fp32 embedding output; per token, broadcast over the heads), so the result is
    o = 4 bytes per element; ``a`` the GEMMs' operand bytes. Forward: −x2 on half the elements (i); cat 2i;
    x·cos (i + o); rotate_half(x)·sin (i + o); add 3o; [SDPA's autocast cast to bf16, o + a]: 36 B at i = 2.
    Backward: [the cast's backward, a + o]; grad·cos 2o [to x's dtype, o + i]; grad·sin 2o [to the cat's
    dtype, o + i]; NegBackward on half (i); two slice backwards, a zero fill (i) and a copy of half (i) each;
    x's three gradients summed, 2 × 3i: 56 B at i = 2, 66 B at i = 4 beside bf16 GEMMs. Saved: nothing per
    element (mul keeps only what the other input's gradient needs: cos and sin)."""
    o = FP32
    forward = (
        Kernel("neg", i),
        Kernel("cat", 2 * i),
        Kernel("mul", i + o),
        Kernel("mul", i + o),
        Kernel("add", 3 * o),
        *_casts(o > a, o + a),
    )
    backward = (
        *_casts(o > a, a + o),
        Kernel("mul", 2 * o),
        *_casts(o > i, o + i),
        Kernel("mul", 2 * o),
        *_casts(o > i, o + i),
        Kernel("neg", i),
        Kernel("zeros", i),
        Kernel("copy", i),
        Kernel("zeros", i),
        Kernel("copy", i),
        Kernel("add", 3 * i),
        Kernel("add", 3 * i),
    )
    return Composite(forward, backward, 0.0, 2)


def rmsnorm_native(i: int) -> Composite:
    """torchtitan's RMSNorm (torchtitan/models/norms.py ``RMSNorm`` at 9dec370: ``self._norm(x.float()).type_as(x)
    * self.weight``, ``_norm`` = ``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)``) on an input and a
    weight of the same ``i`` bytes per element: FSDP2's MixedPrecisionPolicy(param_dtype=bfloat16) runs the
    block on bf16 parameters and activations, no autocast. Forward: [to fp32, i + 4]; pow 8; mean 4; + eps and
    rsqrt per row; x·r 8; [type_as, 4 + i]; output·weight 2i (an i-byte result): 36 B at i = 2 (8 kernels).
    Backward: grad·weight 2i; the weight's gradient Σ_rows grad·output, mul 3i and sum i; [type_as's backward,
    i + 4]; dy·r 8; Σ_h dy·x, mul 12 and sum 4; rsqrt_backward's three per-row kernels; mean's backward 4;
    pow_backward 8 + 8 + 12; x's two gradients summed 12; [the upcast's backward, 4 + i]: 92 B at i = 2
    (16 kernels). Saved: the fp32 x (4) and the output (i): 4 + i."""
    forward = (*_rms_normalise(i), Kernel("mul", 2 * i))
    backward = (
        Kernel("mul", 2 * i),
        Kernel("mul", 3 * i),
        Kernel("sum", i),
        *_rms_normalise_backward(i),
    )
    return Composite(forward, backward, FP32 + i)


def rotary_complex(i: int) -> Composite:
    """torchtitan's apply_rotary_emb (torchtitan/models/llama/model.py at 9dec370) on q and k (``tensors`` 2) of
    ``i`` bytes per element: ``torch.view_as_complex(xq.float().reshape(..., -1, 2))``, the complex64 product
    with ``freqs_cis`` (per token and pair, broadcast over the heads, left out as cos and sin are in
    ``rotate_half``), ``view_as_real(...).flatten(3)`` and ``.type_as(xq)``; the reshapes and views move nothing.
    Forward: [to fp32, i + 4]; the complex product, read and write 4 B per element, 8; [type_as, 4 + i]:
    20 B at i = 2 (3 kernels). Backward (derivatives.yaml: mul's gradient ``grad * other.conj()``, the
    conjugate a lazy view of freqs_cis, which needs no gradient): [type_as's backward, i + 4]; grad·conj 8;
    [the upcast's backward, 4 + i]: 20 B at i = 2 (3 kernels). Saved: nothing per element (the product keeps
    freqs_cis)."""
    up = i < FP32
    forward = (*_casts(up, i + FP32), Kernel("mul", 8), *_casts(up, FP32 + i))
    backward = (*_casts(up, i + FP32), Kernel("mul", 8), *_casts(up, FP32 + i))
    return Composite(forward, backward, 0.0, 2)


# The implementations whose module runs in the activations' own dtype, without autocast (torchtitan under
# FSDP2's bf16 param_dtype): their composites are built at the run's activation bytes (``composite_widths``)
NATIVE_DTYPE_IMPLS = frozenset({"torchtitan-rmsnorm", "torchtitan-complex"})


def megatron_scores(version: str, i: int, dropout: bool) -> Composite:
    """Megatron-LM's unfused mask, softmax and dropout on the b·a·s·s attention scores of ``i`` bytes each
    (the batched GEMM's output dtype; fp16 runs keep the softmax in fp16 unless --attention-softmax-in-fp32),
    per score element. ``megatron-2019`` (NVIDIA/Megatron-LM a0368ddf47, mpu/transformer.py
    GPT2ParallelSelfAttention.forward): scores / sqrt(d) (2i), torch.mul(scores, mask) (2i; the [1, 1, s, s]
    mask is read once per tile from cache), − 10000·(1 − mask) (2i), torch.nn.Softmax (2i), dropout (2i + 1, its
    uint8 mask); backward: dropout (2i + 1), softmax_backward (3i), mul by the mask (2i), the division (2i; the
    subtraction of a constant passes its gradient on with no kernel): 21 B forward, 19 B backward at i = 2.
    ``megatron-v1.0`` (tag v1.0, megatron/model/transformer.py ParallelSelfAttention: the query scaled before
    the GEMM, on b·s·h elements; gpt2_model.py gpt2_attention_mask_func: masked_fill_ in place): masked_fill_
    (2i), softmax (2i), dropout (2i + 1); backward: dropout (2i + 1), softmax (3i), masked_fill (2i): 13 B and
    15 B. Without dropout its kernels drop out. Saved: the softmax output and the dropout mask, i + 1."""
    drop_f = (Kernel("dropout", 2 * i + 1),) if dropout else ()
    drop_b = (Kernel("dropout_backward", 2 * i + 1),) if dropout else ()
    if version == "megatron-2019":
        forward = (Kernel("div", 2 * i), Kernel("mul", 2 * i), Kernel("sub", 2 * i))
        backward = (Kernel("mul", 2 * i), Kernel("div", 2 * i))
    else:
        forward, backward = (Kernel("masked_fill_", 2 * i),), (Kernel("masked_fill", 2 * i),)
    forward = (*forward, Kernel("softmax", 2 * i), *drop_f)
    backward = (*drop_b, Kernel("softmax_backward", 3 * i), *backward)
    return Composite(forward, backward, i + dropout)


# The op families (graph.ops.Op.kernel) a composite may stand for, the role that picks it, and the role whose
# precision its input has (cost.eager_kernels: the residual stream's for a layer norm, the GEMM outputs' for the
# activation, the q/k heads and their norms; "rotary_normed": rotary after transformers' q/k norm, whose fp32
# weight makes its output fp32).
FAMILY_ROLE: dict[str, tuple[str, str]] = {
    "rmsnorm": ("norm", "residual"),
    "qk_rmsnorm": ("norm", "activation"),
    "gelu_new": ("activation", "activation"),
    "rotary": ("rotary", "activation"),
    "rotary_normed": ("rotary", "fp32"),
    "scores": ("scores", "scores"),  # the unfused softmax with dropout ...
    "scores_no_dropout": ("scores", "scores"),  # ... and without
    **{family: ("scores", "scores") for family in FALLBACK_FAMILIES},  # graph.megatron_softmax
}


# (forward, backward) casts autocast adds around an op of a role that runs wider than the activations (the
# rule and its sources: cost.autocast, which reads it from here)
ROLE_CASTS: dict[str, tuple[int, int]] = {"norm": (1, 1), "residual": (0, 1)}


def activation_casts(role: str | None, wider: bool) -> tuple[int, int]:
    """(forward, backward) cast kernels around an op of ``role`` (cost.eager_kernels.ROLE) that runs wider than
    the activations (``wider``): ROLE_CASTS, (0, 0) for other roles or when it does not (cost.autocast)."""
    if not wider or role is None:
        return 0, 0
    return ROLE_CASTS.get(role, (0, 0))


def composite(family: str, impl: Mapping[str, str], i: int, a: int) -> Composite | None:
    """The composite the stack runs for an op of ``family`` under its ``module_impl`` (``impl``), with input
    ``i`` bytes per element and GEMM operands of ``a`` bytes; None: one fused kernel (cost.eager_kernels).
    Built once per (family, impl_key(impl), i, a): the host and the GPU time ask for it per op."""
    return _composite(family, impl_key(impl), i, a)


@lru_cache(maxsize=1024)
def _composite(family: str, impl: tuple[tuple[str, str], ...], i: int, a: int) -> Composite | None:
    if family not in FAMILY_ROLE:
        return None
    chosen = dict(impl).get(FAMILY_ROLE[family][0], "fused")
    if chosen == "transformers-rmsnorm" and family in ("rmsnorm", "qk_rmsnorm"):
        return rmsnorm_upcast(i, 2 if family == "qk_rmsnorm" else 1)
    if chosen == "transformers-act2fn" and family == "gelu_new":
        return gelu_new(i, a)
    if chosen == "transformers-rotate-half" and family in ("rotary", "rotary_normed"):
        return rotate_half(i, a)
    if chosen == "torchtitan-rmsnorm" and family == "rmsnorm":
        return rmsnorm_native(i)
    if chosen == "torchtitan-complex" and family == "rotary":
        return rotary_complex(i)
    if chosen.startswith("megatron-") and family.startswith("scores"):
        return megatron_scores(chosen, i, family == "scores")
    lists = None
    if chosen == "transformers-gpt2-4.12-amp" and family.startswith("scores"):
        lists = gpt2_scores_amp(i, family == "scores")
    if chosen == BIGSCIENCE and family in FALLBACK_FAMILIES:  # else its fused kernel, one per op
        lists = torch_softmax_fp32(i, family == FALLBACK_FAMILIES[0])
    if lists is None:
        return None
    return Composite(*(tuple(Kernel(*k) for k in part) for part in lists[:2]), lists[2])


def runs_native(family: str, impl: Mapping[str, str]) -> bool:
    """Whether the implementation ``impl`` (a profile's module_impl) names for ``family``'s role runs in the
    activations' own dtype (NATIVE_DTYPE_IMPLS)."""
    return family in FAMILY_ROLE and impl.get(FAMILY_ROLE[family][0], "fused") in NATIVE_DTYPE_IMPLS


def input_bytes(family: str, precisions: Mapping[str, str], a: int) -> int:
    """Bytes per element of a composite's input: its input role's precision in the profile's eager_kernels
    (``precisions``: bf16 2, fp32 4), at least the activations' ``a``; "fp32" roles 4."""
    role = FAMILY_ROLE[family][1]
    named = FP32 if role == "fp32" else PRECISION_BYTES.get(precisions.get(role, ""), a)
    return max(named, a)


def composite_run(
    family: str, impl: Mapping[str, str], i: int, a: int
) -> tuple[Composite, tuple[Kernel, ...], tuple[Kernel, ...]] | None:
    """(composite, forward kernels, backward kernels) an op of ``family`` runs under ``impl`` with input ``i``
    bytes per element and GEMM operands of ``a`` bytes (``composite``; None: one fused kernel): the composite's
    lists plus autocast's activation casts around it where its input is wider than the operands
    (activation_casts of its role, FAMILY_ROLE: a norm's fp32 output cast to the next GEMM's dtype, FP32 + a
    bytes, and that cast's backward), each list run once per tensor of ``tensors``. The one list both the
    GPU time (cost.eager_kernels.composite_times_s) and the host's count (``composite_kernels``) read."""
    found = composite(family, impl, i, a)
    if found is None:
        return None
    casts = activation_casts(FAMILY_ROLE[family][0], i > a)
    cast = Kernel("_to_copy", FP32 + a)
    return found, (*found.forward, *(cast,) * casts[0]), (*found.backward, *(cast,) * casts[1])


def autocast_runs(autocast_casts: bool, act_bytes: int) -> bool:
    """Whether torch.autocast's casts run: the stack autocasts (the profile's ``autocast_casts``: AMP over fp32
    parameters) and the run's activations are narrower than fp32 (``act_bytes`` < 4; an fp32 / tf32 run has
    nothing to cast, a pure-bf16 run with autocast off none either). The one definition that decides, for the
    host's kernel count (cost.host) and for the device time (cost.eager_kernels) alike, a weight GEMM's casts,
    the activation casts around a wide role (``activation_casts``) and a composite's widths
    (``composite_widths``)."""
    return autocast_casts and act_bytes < FP32


def composite_widths(
    family: str,
    impl: Mapping[str, str],
    precisions: Mapping[str, str],
    act_bytes: int,
    autocast: bool,
) -> tuple[int, int]:
    """(input bytes i, GEMM operand bytes a) a composite of ``family`` is built at under the profile's module_impl
    ``impl``, ``autocast`` being ``autocast_runs``: an implementation that runs in the activations' own dtype
    (``runs_native``) and the score matrix (the batched GEMM's output, in the activations' dtype, autocast or not) at i = a = the
    activations' bytes; under autocast, i by ``input_bytes`` (the role's precision in the profile's
    eager_kernels) and a the activations'; otherwise the composite with no autocast cast, i = a = 4 (an fp32
    run exactly; a pure-bf16 run without autocast is priced as that composite, its element bytes an upper
    bound)."""
    if runs_native(family, impl) or FAMILY_ROLE[family][1] == "scores":
        return act_bytes, act_bytes
    if not autocast:
        return FP32, FP32
    return input_bytes(family, precisions, act_bytes), act_bytes


def composite_kernels(
    family: str,
    impl: Mapping[str, str],
    precisions: Mapping[str, str],
    autocast: bool,
    act_bytes: int = 2,
) -> tuple[int, int] | None:
    """(forward, backward) kernels of the composite an op of ``family`` runs, its activation casts included
    (``composite_run`` at ``composite_widths``; None: not a composite), for the host's count (cost.host);
    ``autocast``: ``autocast_runs`` of the run."""
    if family not in FAMILY_ROLE:
        return None
    run = composite_run(
        family, impl, *composite_widths(family, impl, precisions, act_bytes, autocast)
    )
    if run is None:
        return None
    return len(run[1]) * run[0].tensors, len(run[2]) * run[0].tensors


def impl_key(impl: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The (role, implementation) pairs of a profile's module_impl other than "fused", sorted: what
    graph.transformer.LayerShape.module_impl carries to the memory terms (cost.memory)."""
    return tuple(sorted((role, name) for role, name in impl.items() if name != "fused"))
