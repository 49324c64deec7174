"""Megatron's fused scale-mask-softmax and its fallback as BigScience's Megatron-DeepSpeed ran them between
October 2021 and March 2022 (issue 33: the stack as input), the ``scores`` implementation ``bigscience-2110``
of graph.eager_modules.

bigscience-workshop/Megatron-DeepSpeed megatron/model/fused_softmax.py, from 9f5f5d4c ("fused softmax layer bug
fix sync", 2021-10-21) to 1cb76a64 ("sync the whole Meg-LM fused_kernels sub-tree", 2022-03-06; read at
00f5f889, the last commit before the tr11 prequel's benchmarks of 2022-02-28): ``FusedScaleMaskSoftmax.forward``
runs the fused CUDA kernel (ScaledUpperTriangMaskedSoftmax for GPT's causal mask) only where
``is_kernel_available(mask, b, np, sq, sk)`` holds: fp16/bf16 input, a mask, 16 < sq <= 2048, sk % 4 == 0,
b·np % 4 == 0, and for the causal mask b·np % batch_per_block == 0. It computes batch_per_block as
``self.get_batch_per_block(sq, sk, b, np)``, but the static method is declared ``get_batch_per_block(b, np, sq,
sk)`` and passes ``(sq, sk, b, np)`` on to the C++ ``get_batch_per_block(query_seq_len, key_seq_len, batches,
attn_heads)`` (fused_kernels/scaled_masked_softmax.h), so the key length the kernel's block size is computed from is
np, the heads per GPU: with p the power of two >= np, warps of min(p, 32) threads, 2 rows per warp when p <= 128,
128 threads per block (``batch_per_block``). Where the check fails, ``forward_torch_softmax`` runs in fp32
(``softmax_in_fp32``: forced on by --apply-query-key-layer-scaling, Megatron's default, megatron/model/transformer.py
ParallelAttention.__init__) with the layer number as scale: ``input.float()``, ``input * scale``,
``attention_mask_func`` (``masked_fill_(mask, -10000.0)`` in place, megatron/model/utils.py), ``torch.nn.Softmax``,
``.bfloat16()`` (``.half()`` in fp16). The start-up check that --abort-on-unmet-fused-kernel-constraints enforces
(megatron/initialize.py ``_compile_dependencies``) tests only 16 < s <= 2048, s % 4 and (a/t)·b % 4.
"""

from __future__ import annotations

from paraplan.graph.losses import FP32  # the fallback's fp32 copy: 4 bytes an element
from paraplan.specs.model import ModelSpec

# (ATen op, bytes read and written per score element): one kernel of the composite (graph.eager_modules.Kernel)
KernelBytes = tuple[str, float]
THREADS_PER_BLOCK = 128  # scaled_masked_softmax.h get_batch_per_block
WARP = 32  # C10_WARP_SIZE


def batch_per_block(key_length: int) -> int:
    """Rows of the score matrix one block of the fused kernel handles for a key length (scaled_masked_softmax.h
    ``get_batch_per_block``): p = the power of two >= key_length, warp = min(p, 32), 2 rows per warp when
    p <= 128 else 1, 128 / warp warps per block."""
    power = 1 << max(int(key_length) - 1, 0).bit_length()
    warp = min(power, WARP)
    return (THREADS_PER_BLOCK // warp) * (2 if power <= 128 else 1)


def fused_softmax_runs(micro_batch: int, heads_local: int, queries: int, keys: int) -> bool:
    """Whether BigScience's ``is_kernel_available`` (module docstring) takes the fused kernel for a causal mask on
    ``micro_batch`` × ``heads_local`` score matrices of ``queries`` × ``keys`` in fp16/bf16: 16 < queries <= 2048,
    keys % 4 == 0, keys <= 2048 and b·np divisible by 4 and by batch_per_block(np), the heads per GPU standing in
    for the key length."""
    batches = micro_batch * heads_local
    if not (16 < queries <= 2048 and keys % 4 == 0 and 0 <= keys <= 2048 and batches % 4 == 0):
        return False
    return batches % batch_per_block(heads_local) == 0


def torch_softmax_fp32(
    i: int, dropout: bool
) -> tuple[tuple[KernelBytes, ...], tuple[KernelBytes, ...], float]:
    """``forward_torch_softmax`` with softmax_in_fp32 and a scale (module docstring) on scores of ``i`` bytes, then
    the attention dropout: forward [.float() i + 4, * scale 8, masked_fill_ 8 (the [1, 1, s, s] bool mask read
    from cache), softmax 8, cast back 4 + i, dropout 2i + 1]: 41 B at i = 2 (6 kernels); backward [dropout 2i + 1,
    the cast's i + 4, softmax_backward on its fp32 output 12, masked_fill 8, * scale 8, the upcast's 4 + i]:
    45 B (6 kernels). Saved: the fp32 softmax output and the dropout mask, 4 + 1."""
    upcast, scale, cast_back = ("_to_copy", i + FP32), ("mul", 2 * FP32), ("_to_copy", FP32 + i)
    forward = (upcast, scale, ("masked_fill_", 2 * FP32), ("softmax", 2 * FP32), cast_back)
    backward = (upcast, ("softmax_backward", 3 * FP32), ("masked_fill", 2 * FP32), scale, cast_back)
    drop = (("dropout", 2 * i + 1),) if dropout else ()
    back = (("dropout_backward", 2 * i + 1),) if dropout else ()
    return (*forward, *drop), (*back, *backward), FP32 + dropout


# the module_impl ``scores`` name of this code (specs.choices.MODULE_IMPLS)
BIGSCIENCE = "bigscience-2110"
# Op.kernel families of the fallback, with and without dropout
FALLBACK_FAMILIES = ("scores_fallback", "scores_fallback_no_dropout")
# the score families whose op runs the attention dropout
DROPOUT_SCORES = ("scores", FALLBACK_FAMILIES[0])


def scores_family(model: ModelSpec, shape) -> str:
    """The kernel family (graph.ops.Op.kernel) of the unfused scores' mask, softmax and dropout of a layer of
    ``model`` at ``shape`` (graph.transformer.LayerShape): "scores" (or "scores_no_dropout" without dropout), or
    where the stack (shape.module_impl) runs this code and its check fails (fused_softmax_runs) on the
    micro-batch × heads per GPU (a / shape.attention_head_split) score matrices of shape.attention_queries ×
    shape.seq_length, FALLBACK_FAMILIES'. graph.transformer.attention_ops prices that family, cost.memory.score_bytes
    keeps its saved bytes."""
    dropout = model.has_dropout
    if dict(shape.module_impl).get("scores") == BIGSCIENCE and not fused_softmax_runs(
        shape.micro_batch,
        model.heads // shape.attention_head_split,
        shape.attention_queries,
        shape.seq_length,
    ):
        return FALLBACK_FAMILIES[0 if dropout else 1]
    return "scores" if dropout else "scores_no_dropout"
